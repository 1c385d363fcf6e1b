"""The last block's unfused torch-softmax backward under full recompute (cost_models/softmax_backward_peak.py)."""

from __future__ import annotations

import pytest

from trainsim.cost_models import activations as act
from trainsim.cost_models import softmax_backward_peak as sbp
from trainsim.cost_models.memory import stage_memory
from trainsim.cost_models.shapes import layer_shape
from trainsim.specs import SpecError, build_scenario
from trainsim.validation.memory_runs import load_memory

# Attention-heavy on purpose: 512 tokens, 8 heads over a 64-wide model, a 256-word vocabulary.
GPT = {"num_layers": 3, "hidden": 64, "num_heads": 8, "vocab_size": 256, "max_seq_len": 512}
B, S, H, A, L = 1, 512, 64, 8, 3
P = 2 * B * A * S * S  # one fp16 score-sized tensor
U = 2 * B * S * H      # one fp16 token x hidden tensor


def scen(framework="torch", zero=0, **training):
    training = {"seq_len": S, "global_batch": B, "micro_batch": B, "flash_attention": False, "dtype": "fp16",
                "recompute": "full", "framework": framework, "zero": zero, **training}
    return build_scenario({"model": GPT, "cluster": "dgx-a100", "gpus": 1, "training": training})


@pytest.mark.parametrize("keeps, scores", [(True, 5), (False, 4)])
def test_working_set_closed_form(keeps, scores):
    """Probabilities, their gradient, grad * output, the scores' gradient (+ the kept input, torch <= 1.10), and
    q, k, v, v's gradient, the norm output, the recomputed output, the incoming and the residual gradient."""
    assert sbp.working_bytes(layer_shape(scen()), keeps) == scores * P + 8 * U


def test_stage_peaks_at_the_moment():
    """DDP-style (zero 0) on one GPU: model states, every block's checkpoint and the embedding's saved tensors,
    the moment's 5 P + 8 U and cuBLAS's workspace; the head's saved tensors are freed by then."""
    s = scen(softmax_backward_keeps_input=True)
    sm = stage_memory(s, 0)
    expected = (sm.model_states + L * U + act.embedding_activation_bytes(s) + 5 * P + 8 * U
                + sm.details["cublas_workspace"])
    assert sm.details["softmax_backward_peak"] > 0
    assert sm.allocated == pytest.approx(expected, rel=1e-12)
    # torch >= 1.11 frees the softmax input: one score tensor less
    assert stage_memory(scen(), 0).allocated == pytest.approx(expected - P, rel=1e-12)


@pytest.mark.parametrize("change", [{"framework": "megatron"}, {"flash_attention": True},
                                    {"recompute": "none"}, {"attention_softmax_fp32": True}])
def test_only_torch_softmax_under_full_recompute(change):
    """Megatron's fused scale-mask-softmax, flash kernels, no recompute and the fp32 softmax are out of scope."""
    assert "softmax_backward_peak" not in stage_memory(scen(**change), 0).details


@pytest.mark.parametrize("change", [{"flash_attention": True}, {"framework": "megatron"}])
def test_keeps_input_where_no_torch_softmax_runs_is_refused(change):
    with pytest.raises(SpecError) as e:
        scen(softmax_backward_keeps_input=True, **change)
    assert e.value.field == "training.softmax_backward_keeps_input"


def test_fairseq_13b_moment_by_hand():
    """fsq21 (fairseq GPT-3 13B, fairscale FSDP + CPU offload, b 8, s 2048): 40 checkpoints + 5 P + 8 U + the root
    unit gathered (embeddings, final norm and output layer in fp16) with the output layer's gradient + the last block
    gathered with its out-projection and MLP gradients + cuBLAS's workspace; allocated 22.45 GiB published."""
    case = next(c for c in load_memory().cases if c.row_id == "fsq21_gpt3_13b_1gpu_cpuoffload")
    s, h, v = case.scenario, 5120, 50272
    assert s.training.softmax_backward_keeps_input
    u, p = 2 * 8 * 2048 * h, 2 * 8 * 40 * 2048 * 2048
    root = 2 * v * h + 2048 * h + 2 * h  # word embedding, output layer, learned positions, final LayerNorm
    block = 12 * h * h + 13 * h
    after_core = block - (3 * h * h + 3 * h)
    sm = stage_memory(s, 0)
    saved = 40 * u + act.embedding_activation_bytes(s)  # the checkpoints and the embedding's token ids
    by_hand = saved + 5 * p + 8 * u + 2 * root + 2 * v * h + 2 * block + 2 * after_core + sm.details["cublas_workspace"]
    assert sm.allocated == pytest.approx(by_hand, rel=1e-9)
    assert sm.allocated / 2**30 == pytest.approx(22.45, rel=0.005)
