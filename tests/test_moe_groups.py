"""A MoE model's expert parameters communicate over the group they live on, not the dense data-parallel one.

Mixtral 8x7B (32 layers, 8 experts of 3 x 4096 x 14336 each) on 64 H100, TP 2 with the experts unsharded by TP
(etp 1, ep 1), HSDP with shard groups of 8 DP ranks (dp 32, 4 replicas): every rank holds all experts whole,
32 x 8 x 3 x 4096 x 14336 = 45,097,156,608 elements, and FSDP shards them over the expert-data-parallel ranks of
its shard, tp / etp x dp_shard = 16 ranks (memory.shard_groups), so each reduce-scatter of expert gradients runs
over those 16 ranks and the replicas all-reduce 1/16 of the bytes -- the dense gradients 1/8 (dp_shard x cp)."""

from __future__ import annotations

import pytest

from trainsim.simulator.builder import build_cost_table
from trainsim.specs.errors import SpecError
from trainsim.specs.loaders import build_scenario
from trainsim.topologies.placement import place

EXPERT_ELEMS = 32 * 8 * 3 * 4096 * 14336


def _mixtral_hsdp():
    return build_scenario({"model": "mixtral-8x7b", "cluster": "dgx-h100", "gpus": 64,
                           "layout": {"tp": 2, "etp": 1, "dp_shard": 8},
                           "training": {"seq_len": 4096, "global_batch": 128, "zero": 3, "framework": "torch",
                                        "sequence_parallel": True}})


def test_hsdp_expert_shard_group_is_the_expert_dp_ranks_of_the_shard():
    pl = place(_mixtral_hsdp())
    shard, replicas = pl.hsdp_ranks(8)
    assert len(shard) == 8 and len(replicas) == 4
    experts = pl.expert_hsdp_ranks(8)
    assert len(experts) == pl.expert_hsdp_group(8).size == 16          # tp / etp x dp_shard
    tp_peers = {r for m in shard for r in pl.group_ranks("tp", m)}      # the shard's ranks and their TP peers
    assert set(experts) == tp_peers


def test_hsdp_expert_gradients_reduce_over_their_shard_and_all_reduce_a_sixteenth():
    sc = _mixtral_hsdp()
    buckets = build_cost_table(sc).stages[0].chunks[0].grad_buckets
    experts = [b for b in buckets if "experts" in b.name]
    dense = [b for b in buckets if "experts" not in b.name]
    gb = sc.training.grad_bytes
    assert sum(b.nbytes for b in experts) == pytest.approx(EXPERT_ELEMS * gb, rel=1e-12)
    assert sum(b.then.nbytes for b in experts) == pytest.approx(EXPERT_ELEMS * gb / 16, rel=1e-12)
    assert sum(b.then.nbytes for b in dense) == pytest.approx(sum(b.nbytes for b in dense) / 8, rel=1e-12)


@pytest.mark.parametrize("framework", ["deepspeed", "deepspeed-2023", "megatron-deepspeed"])
def test_deepspeed_zero3_refuses_moe_as_its_engine_does(framework):
    with pytest.raises(SpecError, match="training.zero: ZeRO-3 with a MoE model does not run"):
        build_scenario({"model": "mixtral-8x7b", "cluster": "dgx-h100", "gpus": 64,
                        "training": {"seq_len": 4096, "global_batch": 128, "zero": 3, "framework": framework}})
