"""The gradient reduction and ZeRO sharding run over the data-parallel x context-parallel ranks: Megatron-Core's
DDP buffers reduce over its intra_dp_cp_group, torchtitan's FSDP shards over the ``dp_shard_cp`` mesh, DeepSpeed's
ZeRO optimizer over ``seq_data_parallel_group`` (dp x Ulysses sp). So a cp=2, dp=4 layout reduces the same bytes
over the same 8 ranks as cp=1, dp=8, and dp=1, cp=2 still reduces over 2 ranks."""

from __future__ import annotations

import json
import re

import pytest

from trainsim.cli.main import main
from trainsim.cost_models import memory, nccl_model
from trainsim.simulator.builder import build_cost_table
from trainsim.specs import build_scenario
from trainsim.topologies.placement import place


def scen(cp: int, gpus: int = 8, cluster: str = "dgx-a100", framework: str = "megatron", **layout):
    return build_scenario({"model": "llama3-8b", "cluster": cluster, "gpus": gpus, "layout": {"cp": cp, **layout},
                           "training": {"seq_len": 8192, "global_batch": 64, "micro_batch": 1,
                                        "framework": framework, "zero": 0}}, {})


def grad_buckets(s):
    return [t for st in build_cost_table(s).stages for ch in st.chunks for t in ch.grad_buckets]


def ring_all_reduce_s(buckets, n: int, bus_Bps: float) -> float:
    """Closed form of NCCL's ring all-reduce, bandwidth part, summed over the bucket calls: each call of S bytes
    moves 2(n-1)/n S per rank plus the Simple protocol's pipeline fill (min(wire, fill bytes)) at the ring's
    per-direction rate."""
    total = 0.0
    for t in buckets:
        m = re.search(r"\((\d+) calls\)", t.name)
        calls = int(m.group(1)) if m else 1
        wire = 2 * (n - 1) / n * t.nbytes / calls
        total += calls * (wire + min(wire, nccl_model.fill_bytes("Simple"))) / bus_Bps
    return total


def test_cp2_dp4_reduces_like_cp1_dp8():
    """One DGX A100 (NVSwitch, no NVLS): cp=2, dp=4 all-reduces the gradients of the same per-rank weights over
    8 ranks, exactly as cp=1, dp=8; both equal the ring closed form with n = 8 (a 4-rank group would take
    2*3/4 / (2*7/8) = 0.857 of it)."""
    a, b = scen(cp=2), scen(cp=1)
    assert (a.dp, b.dp) == (4, 8)
    ba, bb = grad_buckets(a), grad_buckets(b)
    assert ba and [(t.nbytes, t.transfer_s, t.latency_s, t.links) for t in ba] == \
        [(t.nbytes, t.transfer_s, t.latency_s, t.links) for t in bb]
    assert sum(t.nbytes for t in ba) == pytest.approx(memory.rank_param_shards(a, 0).held * 4, rel=1e-12)
    g = place(a).dp_cp_group()
    assert (g.size, g.nodes) == (8, 1)
    assert sum(t.transfer_s for t in ba) == pytest.approx(ring_all_reduce_s(ba, 8, g.intra_Bps), rel=1e-9)


def test_dp1_cp2_costs_a_gradient_reduction():
    """dp = 1, cp = 2: the two cp ranks all-reduce every gradient (2(n-1)/n = 1 x the bytes over the pair)."""
    s = scen(cp=2, gpus=2)
    assert s.dp == 1
    buckets = grad_buckets(s)
    assert sum(t.nbytes for t in buckets) == pytest.approx(memory.rank_param_shards(s, 0).held * 4, rel=1e-12)
    g = place(s).dp_cp_group()
    assert g.size == 2
    assert sum(t.transfer_s for t in buckets) == pytest.approx(ring_all_reduce_s(buckets, 2, g.intra_Bps), rel=1e-9)


def test_dp_cp_group_spans_the_cp_ranks_next_to_tp():
    """tp 8, cp 2, dp 2 on 4 DGX H100 nodes: the cp ranks sit next to the tp ranks (rank order tp, cp, dp), so the
    dp x cp group of rank 0 is one GPU on each of the 4 nodes, where the dp group alone spans 2."""
    s = scen(cp=2, gpus=32, cluster="dgx-h100", tp=8)
    pl = place(s)
    assert pl.dp_cp_ranks() == [0, 8, 16, 24]
    assert pl.group_ranks("dp") == [0, 16]
    assert pl.dp_cp_group().nodes == 4


def test_hsdp_shard_group_takes_the_cp_ranks():
    """torchtitan's HSDP shards over dp_shard x cp (``dp_shard_cp``) and replicates over dp_replicate: with
    cp 2, dp 8, dp_shard 4 the shard group has 8 ranks, the replicate group 2 -- 8 x 2 = the 16 dp x cp ranks --
    and each reduce-scattered shard all-reduced across the replicas is 1/8 of the bucket."""
    s = build_scenario({"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 16, "layout": {"cp": 2, "dp_shard": 4},
                        "training": {"seq_len": 8192, "global_batch": 64, "framework": "torch", "zero": 3}}, {})
    shard, rep = place(s).hsdp_ranks(4)
    assert (len(shard), len(rep)) == (8, 2)
    assert set(shard) | {r for r in place(s).dp_cp_ranks()} == set(place(s).dp_cp_ranks())
    assert len(set(shard) & set(rep)) == 1
    assert memory.shard_groups(s)[0] == len(shard)
    buckets = grad_buckets(s)
    assert buckets and all(t.then.nbytes == pytest.approx(t.nbytes / 8, rel=1e-12) for t in buckets)


def test_bucket_settings_act_at_dp1_with_cp(capsys):
    """dp = 1, cp = 2: a bucket size changes the reduction (no 'changes nothing' note)."""
    base = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "2", "--cp", "2",
            "--global-batch", "4", "--seq-len", "8192", "--framework", "megatron", "--fast", "--json"]
    assert main([*base, "--dp-bucket-mb", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert not any("changes nothing" in w for w in out["warnings"])


@pytest.mark.parametrize("framework,zero,cp_comm", [
    ("megatron", 1, None), ("megatron-deepspeed", 1, "a2a"), ("deepspeed", 2, "a2a"), ("torch", 3, None)])
def test_every_framework_reduces_over_dp_x_cp(framework, zero, cp_comm):
    """Megatron's distributed optimizer, DeepSpeed Ulysses' ZeRO (seq_data_parallel_group) and torchtitan's FSDP2
    (dp_shard_cp): with cp=2, dp=4 every data-parallel collective -- gradient buckets, serialized ZeRO-2 reduction,
    parameter all-gather -- costs what it costs at cp=1, dp=8 (same per-rank weights, same 8-rank group)."""
    def dp_work(cp):
        s = build_scenario({"model": "llama3-8b", "cluster": "dgx-a100", "gpus": 8, "layout": {"cp": cp},
                            "training": {"seq_len": 8192, "global_batch": 64, "micro_batch": 1, "framework": framework,
                                         "zero": zero, **({"cp_comm": cp_comm} if cp_comm else {})}}, {})
        ct = build_cost_table(s)
        chunks = [ch for st in ct.stages for ch in st.chunks]
        return ([(t.nbytes, t.transfer_s, t.latency_s) for ch in chunks for t in ch.grad_buckets],
                [(ch.dp_fwd_s, ch.dp_bwd_s) for ch in chunks],
                [(t.nbytes, t.transfer_s, t.latency_s) for st in ct.stages for t in st.post_step])
    two, one = dp_work(2), dp_work(1)
    assert two == one
    assert two[0] or any(b > 0 for _, b in two[1])  # a reduction is costed at all
