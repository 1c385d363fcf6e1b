"""A MoE model's expert gradients reduce over the expert-data-parallel group, apart from the dense ones over
dp x cp: Megatron-Core DDP allocates the expert parameters their own buffers over ``intra_expt_dp_group``
(megatron/core/distributed/distributed_data_parallel.py, DistributedDataParallel.__init__), a group of
tp*cp*dp/(ep*etp) ranks (parallel_state.get_expert_data_parallel_group). With ep = dp = 8 every rank holds its
own experts: nothing to reduce; with ep = 4, dp = 8 each expert shard lives on 2 ranks."""

from __future__ import annotations

import pytest

from trainsim.cost_models import memory, nccl_model
from trainsim.simulator.builder import build_cost_table
from trainsim.specs import build_scenario
from trainsim.topologies.placement import place


def scen(model: str = "mixtral-8x7b", gpus: int = 8, zero: int = 0, framework: str = "megatron",
         overlap: bool = False, **layout):
    return build_scenario({"model": model, "cluster": "dgx-a100", "gpus": gpus, "layout": layout,
                           "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1, "zero": zero,
                                        "framework": framework, "overlap_grad_reduce": overlap,
                                        "sequence_parallel": layout.get("tp", 1) > 1}}, {})


def grad_buckets(s):
    return [t for st in build_cost_table(s).stages for ch in st.chunks for t in ch.grad_buckets]


def ring_all_reduce_s(nbytes: float, n: int, bus_Bps: float) -> float:
    """NCCL's ring all-reduce of one call of ``nbytes``, bandwidth part: 2(n-1)/n of the bytes per rank plus the
    Simple protocol's pipeline fill (min(wire, fill bytes)) at the ring's per-direction rate."""
    wire = 2 * (n - 1) / n * nbytes
    return (wire + min(wire, nccl_model.fill_bytes("Simple"))) / bus_Bps


@pytest.mark.parametrize("layout, size, nodes", [
    ({"ep": 8}, 1, 1), ({"ep": 4}, 2, 1), ({"ep": 2}, 4, 1),
    ({"ep": 2, "gpus": 16}, 8, 2), ({"ep": 8, "gpus": 16}, 2, 2),
    ({"ep": 2, "cp": 2}, 4, 1), ({"ep": 8, "tp": 2, "etp": 1}, 1, 1), ({"ep": 4, "tp": 2, "etp": 1}, 2, 1),
    ({"ep": 2, "tp": 2, "etp": 1}, 4, 1),
])
def test_expert_dp_group_size_and_span(layout, size, nodes):
    """The group has tp*cp*dp/(ep*etp) ranks (the one memory.shard_groups shards expert states over); on 8-GPU
    nodes with tp, cp and ep innermost, ep=8 over 16 GPUs pairs GPU g with g+8 on the other node."""
    layout = dict(layout)
    s = scen(gpus=layout.pop("gpus", 8), **layout)
    lay = s.layout
    g = place(s).expert_dp_group()
    assert g.size == size == lay.tp * lay.cp * s.dp // (lay.ep * s.expert_tp)
    assert g.size == memory.shard_groups(s)[1]
    assert g.nodes == nodes


def test_expert_dp_ranks_hold_the_same_experts():
    """ep=8 over 16 GPUs: rank 0's expert replicas are rank 0 and rank 8 (same EP index, other DP half)."""
    pl = place(scen(gpus=16, ep=8))
    assert pl.expert_dp_ranks(0) == [0, 8]
    assert all(pl.coords(r)["ep"] == pl.coords(0)["ep"] for r in pl.expert_dp_ranks(0))
    assert pl.expert_dp_ranks(3) == [3, 11]


def test_ep8_dp8_reduces_no_expert_gradient():
    """ep = dp = 8: the expert-data-parallel group is one rank, so only the dense gradients (all of a rank's
    non-expert parameters) are all-reduced, over the 8 DP ranks (ring closed form)."""
    s = scen(ep=8)
    held = memory.rank_param_shards(s, 0)
    bks = grad_buckets(s)
    assert len(bks) == 1
    assert bks[0].nbytes == pytest.approx(held.dense * 4, rel=1e-9)
    g = place(s).dp_cp_group()
    assert bks[0].transfer_s == pytest.approx(ring_all_reduce_s(bks[0].nbytes, 8, g.intra_Bps), rel=1e-9)


def test_ep4_dp8_reduces_experts_over_pairs():
    """ep = 4, dp = 8: the dense buffer all-reduces over 8 ranks, the expert buffer (2 of 8 experts per rank)
    over the 2 ranks holding the same experts -- 2(2-1)/2 = 1 x its bytes instead of 2*7/8."""
    s = scen(ep=4)
    held = memory.rank_param_shards(s, 0)
    bks = grad_buckets(s)
    assert len(bks) == 2
    by_bytes = {round(t.nbytes): t for t in bks}
    dense, expert = by_bytes[round(held.dense * 4)], by_bytes[round(held.expert * 4)]
    bw = place(s).dp_cp_group().intra_Bps
    assert dense.transfer_s == pytest.approx(ring_all_reduce_s(dense.nbytes, 8, bw), rel=1e-9)
    assert expert.transfer_s == pytest.approx(ring_all_reduce_s(expert.nbytes, 2, bw), rel=1e-9)


def test_expert_buckets_in_deepspeed_path():
    """DeepSpeed ZeRO-2 (its own reduce buckets): the expert gradients' calls run over the expert-data-parallel
    group, the dense ones over dp; the bytes split as the rank's dense and expert parameters."""
    s = scen(ep=4, zero=2, framework="deepspeed", overlap=True)
    held, gb = memory.rank_param_shards(s, 0), s.training.grad_bytes
    bks = grad_buckets(s)
    exp = [t for t in bks if "experts" in t.name]
    dense = [t for t in bks if "experts" not in t.name]
    assert sum(t.nbytes for t in exp) == pytest.approx(held.expert * gb, rel=1e-6)
    assert sum(t.nbytes for t in dense) == pytest.approx(held.dense * gb, rel=1e-6)
    pair, dp = place(s).expert_dp_group(), place(s).dp_cp_group()
    assert (pair.size, dp.size) == (2, 8)
    assert {t.links for t in exp} == {("s0.nvl_tx", "s0.nvl_rx")}


def test_dense_model_reduces_over_dp_cp_only():
    """A dense model has no expert buffer: one bucket per chunk of all its gradients over dp x cp."""
    s = scen(model="llama3-8b", cp=2)
    bks = grad_buckets(s)
    assert [t for t in bks if "experts" in t.name] == []
    assert sum(t.nbytes for t in bks) == pytest.approx(memory.rank_param_shards(s, 0).held * 4, rel=1e-12)
    g = place(s).dp_cp_group()
    assert sum(t.transfer_s for t in bks) == pytest.approx(ring_all_reduce_s(bks[0].nbytes, 8, g.intra_Bps),
                                                           rel=1e-9)


def test_distributed_optimizer_gathers_expert_params_over_expert_dp():
    """ZeRO-1 (Megatron's distributed optimizer): the updated dense parameters all-gather over the 8 DP ranks, the
    expert ones over the expert-data-parallel group -- none with ep = dp = 8, 2 ranks with ep = 4 (ring
    all-gather: (n-1)/n of the bytes per rank)."""
    one = build_cost_table(scen(ep=8, zero=1)).stages[0].post_step
    two = build_cost_table(scen(ep=4, zero=1)).stages[0].post_step
    assert [t.name for t in one] == ["all_gather updated params"]
    assert [t.name for t in two] == ["all_gather updated expert params", "all_gather updated params"]
    held = memory.rank_param_shards(scen(ep=4, zero=1), 0)
    assert two[0].nbytes == pytest.approx(held.expert * 2, rel=1e-12)
    assert two[1].nbytes == pytest.approx(held.dense * 2, rel=1e-12)
    bw = place(scen(ep=4, zero=1)).dp_cp_group().intra_Bps
    for t, n in zip(two, (2, 8)):
        wire = (n - 1) / n * t.nbytes
        assert t.transfer_s == pytest.approx((wire + min(wire, nccl_model.fill_bytes("Simple"))) / bw, rel=1e-9)


def test_fsdp_gathers_experts_over_expert_dp():
    """torch FSDP2 (ZeRO-3) with ep = dp = 8: the experts are not sharded (memory.shard_groups: 1 rank), so the
    chunk's all-gather moves only the dense parameters -- dense/8 x 7 per rank before the gather completes -- and
    the reduce-scatters carry only the dense gradients; ep = 1 keeps every parameter on the dp group."""
    s = scen(ep=8, zero=3, framework="torch", overlap=True)
    held, tr = memory.rank_param_shards(s, 0), s.training
    ch = build_cost_table(s).stages[0].chunks[0]
    assert ch.param_gather.nbytes == pytest.approx(held.dense * tr.param_bytes, rel=1e-9)
    assert sum(b.nbytes for b in ch.grad_buckets) == pytest.approx(held.dense * tr.grad_bytes, rel=1e-9)
    s1 = scen(ep=1, zero=3, framework="torch", overlap=True)
    ch1 = build_cost_table(s1).stages[0].chunks[0]
    assert ch1.param_gather.nbytes == pytest.approx(memory.rank_param_shards(s1, 0).held * tr.param_bytes, rel=1e-9)
    assert [b for b in ch1.grad_buckets if "experts" in b.name] == []


def test_overlapped_ddp_buckets_reduce_each_over_its_group():
    """Megatron-Core with the distributed optimizer and overlap (40M-parameter buckets, merged into at most
    grad_sync.MAX_BUCKETS_PER_CHUNK transfers): the transfers carry every dense bucket's ring reduce-scatter over 8
    ranks and every expert bucket's over 2 ((n-1)/n of a call's bytes plus the Simple protocol's fill); the expert
    buffer is padded for its 2-rank group."""
    from trainsim.cost_models import ddp_buckets
    s = scen(ep=4, zero=1, overlap=True)
    bks = build_cost_table(s).stages[0].chunks[0].grad_buckets
    calls = ddp_buckets.chunk_dp_buckets(s, 0, 0, 8, 2)
    bw = place(s).dp_cp_group().intra_Bps

    def ring_rs(nbytes, n):
        wire = (n - 1) / n * nbytes
        return (wire + min(wire, nccl_model.fill_bytes("Simple"))) / bw

    assert any(b.expert for b in calls) and any(not b.expert for b in calls)
    assert sum(t.nbytes for t in bks) == pytest.approx(sum(b.elems for b in calls) * 4, rel=1e-12)
    assert all(b.elems % 2 == 0 for b in calls if b.expert)
    assert sum(t.transfer_s for t in bks) == pytest.approx(
        sum(ring_rs(b.elems * 4, 2 if b.expert else 8) for b in calls), rel=1e-9)
