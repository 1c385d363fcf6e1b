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


def _mixtral_megatron(distributed_optimizer: bool):
    return build_scenario({"model": "mixtral-8x7b", "cluster": "dgx-h100", "gpus": 64,
                           "layout": {"tp": 1, "pp": 4, "ep": 8},
                           "training": {"seq_len": 4096, "global_batch": 256, "micro_batch": 1, "dtype": "bf16",
                                        "distributed_optimizer": distributed_optimizer, "framework": "megatron"}})


@pytest.mark.parametrize("distributed_optimizer", [False, True])
def test_moe_grad_norm_is_reduced_over_the_groups_megatron_core_uses(distributed_optimizer):
    """Mixtral EP 8 PP 4 DP 16 on DGX H100 (8 GPUs a node): the optimizer phase is the GPU's update and norm pass
    plus the norm's scalar all-reduces. Without the distributed optimizer Megatron-Core's expert optimizer reduces
    its norm over the expert-TP x EP group -- the 8 EP ranks, one node -- and the dense one over TP (1 rank:
    nothing); with it both share the intra-instance group, costed as the 16-rank sharding group."""
    from trainsim.cost_models.collectives import collective_time
    from trainsim.cost_models.compute import optimizer_step_parts
    from trainsim.simulator.step_context import _step_context

    sc = _mixtral_megatron(distributed_optimizer)
    pl = place(sc)
    st = _step_context(sc, None)
    if distributed_optimizer:
        group = st.shard_group
        assert group.size == 16
    else:
        group = pl.expert_tp_ep_group()
        assert (group.size, group.nodes) == (8, 1)
        assert set(pl.group_ranks("ep")) == {r for r in range(64) if pl.coords(r)["pp"] == 0 and
                                             pl.coords(r)["dp"] < 8}
    scalar = float(collective_time("all_reduce", 4.0, group, sc.cluster).time_s)
    assert scalar > 0
    gpu = optimizer_step_parts(sc, 0)[0] * st.slowest
    assert build_cost_table(sc).stages[0].optimizer_s == pytest.approx(gpu + scalar, rel=1e-12)
