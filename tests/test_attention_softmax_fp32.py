"""Unfused attention with its softmax in fp32 (TrainingSpec.attention_softmax_fp32): fairseq's MultiheadAttention
(``utils.softmax(x, dim=-1)`` = ``F.softmax(x, dim, dtype=torch.float32)``, then ``type_as`` for the value GEMM)."""

from __future__ import annotations

import pytest

from trainsim.cost_models import activations as act
from trainsim.specs import SpecError, build_scenario
from trainsim.validation.memory_runs import load_memory

GPT = {"num_layers": 2, "hidden": 128, "num_heads": 4, "vocab_size": 1024, "max_seq_len": 256}


def scen(**training):
    training = {"seq_len": 64, "global_batch": 2, "micro_batch": 2, "flash_attention": False, **training}
    return build_scenario({"model": GPT, "cluster": "dgx-a100", "gpus": 1, "training": training})


def _torch_core_saved_bytes(b: int, a: int, s: int, d: int) -> int:
    """Bytes autograd saves in a fairseq-style attention core beyond q, k, v (bf16 on CPU), deduplicated by
    storage: scores = q·kᵀ, fp32 softmax of them, its 16-bit cast, probabilities·v."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    q, k, v = (torch.randn(b * a, s, d, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    inputs = {t.untyped_storage().data_ptr() for t in (q, k, v)}
    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in inputs:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        scores = torch.bmm(q, k.transpose(1, 2))
        probs_fp32 = F.softmax(scores, dim=-1, dtype=torch.float32)
        out = torch.bmm(probs_fp32.type_as(scores), v)
    out.float().sum().backward()
    return sum(seen.values())


@pytest.mark.torch
def test_fp32_softmax_saves_four_more_bytes_per_probability_as_torch_does():
    """Measured: the core saves 4 + 2 bytes per probability (fp32 softmax output, its bf16 cast) where a 16-bit
    softmax saves 2; the model's block differs by exactly the fp32 output, 4·b·a·s² (tp 1, no dropout)."""
    b, a, s, d = 2, 4, 64, 32
    assert _torch_core_saved_bytes(b, a, s, d) == (4 + 2) * b * a * s * s
    plain = act.layer_activation_bytes(scen(dtype="bf16")).total
    fp32 = act.layer_activation_bytes(scen(dtype="bf16", attention_softmax_fp32=True)).total
    assert fp32 - plain == 4 * b * a * s * s


def test_fp32_softmax_beside_a_flash_kernel_is_refused():
    with pytest.raises(SpecError) as e:
        scen(attention_softmax_fp32=True, flash_attention=True)
    assert e.value.field == "training.attention_softmax_fp32"


def test_no_measured_row_states_the_fp32_softmax():
    """memory_runs.csv: no row sets the column. fairseq's MultiheadAttention computes an fp32 softmax only off its
    fast path; in training the fairseq FSDP rows take torch's F.multi_head_attention_forward, whose softmax runs in
    the input dtype (the rows' notes cite the condition)."""
    cases = {c.row_id: c for c in load_memory().cases if c.scenario is not None}
    assert not {r for r, c in cases.items() if c.scenario.training.attention_softmax_fp32}
    fairseq = [c for r, c in cases.items() if r.startswith("fsq21_")]
    assert len(fairseq) == 2 and all(c.scenario.training.dtype == "fp16" for c in fairseq)
