"""Megatron-Core's alltoall token dispatcher (TrainingSpec.moe_token_dispatcher = "alltoall") sorts the tokens its
dispatch all-to-all delivers by local expert and restores their order before the combine: with more than one local
expert, two more copies of the routed tokens per MoE layer, forward and backward.

Independent truth: megatron/core/transformer/moe/token_dispatcher.py at NVIDIA/Megatron-LM b0cc2706
(MoEAlltoAllTokenDispatcher.dispatch_postprocess and combine_preprocess call sort_chunks_by_idxs only when
num_local_experts > 1; MoEFlexTokenDispatcher has no such step); each copy reads and writes every routed token's
hidden vector once (bf16: 2 + 2 bytes per element).
"""

from __future__ import annotations

import csv

import pytest
from external_tables import table_path

from trainsim.cost_models import compute
from trainsim.cost_models.flops import layer_ops
from trainsim.specs import SpecError, build_scenario
from trainsim.validation.nemo import _nemo_case

SORTS = {"moe_sort_chunks", "moe_unsort_chunks"}


def _scenario(dispatcher, *, ep=8, gpus=8, framework="megatron", model="gpt-oss-20b"):
    return build_scenario({"model": model, "cluster": {"preset": "dgx-h100", "num_gpus": gpus},
                           "layout": {"ep": ep} if ep > 1 else {},
                           "training": {"seq_len": 512, "global_batch": gpus, "micro_batch": 1,
                                        "framework": framework, "moe_token_dispatcher": dispatcher}})


def _ops(dispatcher, **kw):
    return {op.name: op for op in layer_ops(_scenario(dispatcher, **kw))}


def test_sort_passes_by_hand():
    """gpt-oss-20b, 32 experts over ep 8 = 4 local experts; 512 tokens x top-4 routed to each rank (balanced),
    hidden 2880, bf16: each sort reads and writes 2048 x 2880 elements, and so does its backward."""
    ops, e, routed, h = _ops("alltoall"), 2, 512 * 4, 2880
    for name in SORTS:
        op = ops[name]
        assert (op.fwd_bytes, op.bwd_input_bytes, op.bwd_weight_bytes) == (2 * e * routed * h, 2 * e * routed * h, 0)
        assert op.fwd_flops == 0 and "moe" in op.modules  # Megatron's "moe" recompute re-runs the dispatcher too
    names = list(ops)
    assert names.index("moe_permute") < names.index("moe_sort_chunks") < names.index("expert_fc1")
    assert names.index("expert_fc2") < names.index("moe_unsort_chunks") < names.index("moe_unpermute")


@pytest.mark.parametrize("dispatcher", ["flex", None])
def test_flex_and_unstated_dispatchers_add_no_sort(dispatcher):
    """No sort passes; every other op alike, except that the flex dispatcher's fp32 probabilities promote
    gpt-oss's per-expert fc2-bias pass to fp32 (tests/test_model_gpt_oss.py has its bytes)."""
    a2a, other = _ops("alltoall"), _ops(dispatcher)
    assert set(a2a) - set(other) == SORTS
    differ = {n for n in other if other[n] != a2a[n]}
    assert differ == ({"expert_fc2_bias"} if dispatcher == "flex" else set())


def test_one_local_expert_needs_no_sort():
    """ep = 32 experts: each rank holds one expert, the received tokens are already grouped (num_local_experts 1)."""
    assert not SORTS & set(_ops("alltoall", ep=32, gpus=32))


def test_sort_time_is_the_memory_time_of_its_bytes():
    """The block's forward grows by the two copies' HBM time on the H100 roofline, nothing else."""
    a2a, unstated = _scenario("alltoall"), _scenario(None)
    hw = compute.hw_of(a2a.cluster.gpu, "bf16")
    copy = compute.memory_time_s(2 * 2 * 512 * 4 * 2880, hw)
    grow = compute.layer_times(a2a).fwd_s - compute.layer_times(unstated).fwd_s
    assert grow == pytest.approx(2 * copy, rel=1e-9)


def test_dispatcher_needs_megatron_and_experts():
    with pytest.raises(SpecError) as err:
        _scenario("alltoall", framework="torch")
    assert err.value.field == "training.moe_token_dispatcher" and "megatron" in str(err.value)
    with pytest.raises(SpecError) as err:
        _scenario("flex", ep=1, model="llama3-8b")
    assert err.value.field == "training.moe_token_dispatcher" and "dense" in str(err.value)


def _nemo_rows(*ids: str) -> dict:
    """The unbundled nemo table's rows ``ids`` as Cases (skips where the table is absent)."""
    with open(table_path("nemo_megatron_bridge_perf.csv"), newline="") as f:
        return {r["row_id"]: _nemo_case(r) for r in csv.DictReader(f) if r["row_id"] in ids}


def test_qwen3_nemo_rows_charge_their_configs_sort():
    """Qwen3-235B-A22B 26.02 MXFP8 (nemo_moe_dispatcher.csv): on DGX-B200 (mb_232, pp8 ep8) Megatron-Bridge r0.3.0's
    qwen3_235b_a22b_pretrain_config_b200 sets moe_token_dispatcher_type 'alltoall'; on DGX-GB200 (mb_230, pp8
    ep32) qwen3_235b_a22b_pretrain_config_gb200 sets 'flex' (hybridep). 128 experts over ep 8 = 16 local experts;
    a micro batch of 1 x 4096 tokens (tp 1) x top-8 = 32768 routed tokens per rank (balanced), hidden 4096,
    each copied once by the sort and once by the unsort, bf16 hidden states (2 + 2 bytes per element) each way."""
    cases = _nemo_rows("mb_232", "mb_230")
    b200, gb200 = cases["mb_232"].scenario, cases["mb_230"].scenario
    assert (b200.training.moe_token_dispatcher, gb200.training.moe_token_dispatcher) == ("alltoall", "flex")
    ops = {op.name: op for op in layer_ops(b200)}
    routed, h, e = 4096 * 8, 4096, 2
    for name in SORTS:
        op = ops[name]
        assert (op.fwd_bytes, op.bwd_input_bytes, op.bwd_weight_bytes) == (2 * e * routed * h, 2 * e * routed * h, 0)
    assert not SORTS & {op.name for op in layer_ops(gb200)}  # 128 / 32 = 4 local experts, yet flex: no sort
