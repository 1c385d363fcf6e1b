"""Megatron-Core's partial distributed optimizer (training.distributed_optimizer_instances, specs/partial_distopt.py):
bytes per GPU against a hand count, the per-bucket reduce-scatter within the instance plus all-reduce across the
instances against the collective model over the placement's groups, the gather within the instance, N = 1
unchanged, and Megatron's refusals."""

from __future__ import annotations

import json

import pytest

from trainsim.cli.main import main
from trainsim.cost_models import memory
from trainsim.cost_models.collectives import collective_time
from trainsim.cost_models.runtime_memory import communicators
from trainsim.simulator.builder import build_cost_table
from trainsim.simulator.predict import predict
from trainsim.specs import SpecError, build_scenario
from trainsim.topologies.placement import place

# mpt-125m (tied embeddings, learned positions of 2048 rows, biases) on 16 H100, two nodes of 8: dp = 16.
V, S, L, H = 50368, 2048, 12, 768
MPT_125M = V * H + S * H + L * (12 * H * H + 13 * H) + 2 * H  # = 125,311,488 (models.yaml published_params)
BASE = {"model": "mpt-125m", "cluster": "dgx-h100", "gpus": 16, "layout": {},
        "training": {"seq_len": 2048, "global_batch": 32, "framework": "megatron", "distributed_optimizer": True}}


def scenario(n: int = 1, gpus: int = 16, **training):
    return build_scenario({**BASE, "gpus": gpus, "training": {**BASE["training"], "distributed_optimizer_instances": n,
                                                              **training}}, {})


def test_hand_count_of_the_model():
    assert MPT_125M == 125_311_488
    assert memory.rank_param_shards(scenario(), 0).held == MPT_125M


@pytest.mark.parametrize("n", [1, 2])
def test_bytes_per_gpu_shard_optimizer_states_over_the_instance(n):
    """Megatron's model states per parameter: 2 (bf16 weight) + 4 (fp32 main grad) whole on every rank, 12 (fp32
    main param, Adam m, v) over the dp/N ranks of the instance -- 16/N of them here -- within the bucket padding
    (each bucket padded to a multiple of the instance's ranks: a few elements per bucket)."""
    sm = memory.stage_memory(scenario(n), 0)
    shard = 16 // n
    assert sm.weights == pytest.approx(2 * MPT_125M, rel=1e-4)
    assert sm.grads == pytest.approx(4 * MPT_125M, rel=1e-4)
    assert sm.optimizer == pytest.approx(12 * MPT_125M / shard, rel=1e-4)
    assert memory.rank_param_shards(scenario(n), 0).optimizer_params == pytest.approx(MPT_125M / shard, rel=1e-12)


def test_instance_is_one_node_and_the_inter_group_spans_the_nodes():
    """The intra-partial group is dp/N consecutive dp-cp ranks (parallel_state.py), the inter-partial group the N
    ranks of the same position: with dp = 16 and N = 2 on nodes of 8, one node and one rank per node."""
    scn = scenario(2)
    intra, inter = place(scn).hsdp_ranks(scn.dp_shard)
    assert intra == list(range(8)) and inter == [0, 8]
    ig, xg = place(scn).hsdp_groups(scn.dp_shard)
    assert not ig.multi_node and xg.nodes == 2


def test_bucket_seconds_are_reduce_scatter_in_instance_plus_all_reduce_across():
    """Each Megatron DDP bucket: reduce-scatter of its fp32 gradient bytes over the 8 ranks of the node, then the
    all-reduce of the 1/8 shard over the 2 instances, serialized on one stream (one transfer each); latency and
    bandwidth seconds equal the collective model's over those groups."""
    scn = scenario(2)
    ig, xg = place(scn).hsdp_groups(8)
    buckets = [b for ch in build_cost_table(scn).stages[0].chunks for b in ch.grad_buckets]
    assert buckets and all(b.then is None for b in buckets)
    assert sum(b.nbytes for b in buckets) == pytest.approx(4 * MPT_125M, rel=1e-4)
    want = 0.0
    from trainsim.cost_models import ddp_buckets
    for b in ddp_buckets.chunk_dp_buckets(scn, 0, 0, 8):
        nbytes = b.elems * 4
        want += collective_time("reduce_scatter", nbytes, ig, scn.cluster).time_s
        want += collective_time("all_reduce", nbytes / 8, xg, scn.cluster).time_s
    assert sum(b.time_s for b in buckets) == pytest.approx(want, rel=1e-9)
    assert {"s0.nic_tx", "s0.nvl_tx"} <= set(buckets[-1].links)


def test_both_hops_are_within_the_ring_closed_form():
    """Across 2 nodes (one rank each, one 400 Gb/s NIC per GPU) a large shard's all-reduce costs at least the ring's
    2(R-1)/R x bytes over the NIC bandwidth, and the reduce-scatter over the node's 8 GPUs at least (n-1)/n x bytes
    over one GPU's NVLink bandwidth; each at most that over the protocol efficiency (as tests/test_hsdp.py)."""
    scn = scenario(2)
    ig, xg = place(scn).hsdp_groups(8)
    assert (ig.size, xg.size) == (8, 2)
    nbytes = 1 << 30
    ring = 2 * (xg.size - 1) / xg.size * nbytes / xg.node_Bps
    t = collective_time("all_reduce", nbytes, xg, scn.cluster, algo="ring").time_s
    assert ring <= t <= ring / 0.8
    ring = (ig.size - 1) / ig.size * nbytes / ig.intra_Bps
    t = collective_time("reduce_scatter", nbytes, ig, scn.cluster, algo="ring").time_s
    assert ring <= t <= ring / 0.8


def test_updated_params_gather_within_the_instance():
    scn = scenario(2)
    ig, _ = place(scn).hsdp_groups(8)
    (ag,) = build_cost_table(scn).stages[0].post_step
    ag_full = build_cost_table(scenario(1)).stages[0].post_step[0]
    assert ag.nbytes == ag_full.nbytes == pytest.approx(2 * MPT_125M)
    assert ag.time_s == pytest.approx(collective_time("all_gather", 2 * MPT_125M, ig, scn.cluster).time_s, rel=1e-9)
    assert all(x.startswith("s0.nvl") for x in ag.links) and not any(x.startswith("s0.nvl") for x in ag_full.links)


def test_one_instance_is_the_distributed_optimizer_exactly():
    raw = {**BASE, "training": dict(BASE["training"])}
    assert build_cost_table(scenario(1)) == build_cost_table(build_scenario(raw, {}))


def test_communicators_add_the_intra_and_inter_groups():
    scn = scenario(2)
    got = communicators(scn.layout, scn.dp, framework="megatron", instances=2)
    assert got["dp"] == 16 and got["dp_intra_instance"] == 8 and got["dp_inter_instance"] == 2


def test_predict_json_reports_the_instances(capsys):
    args = ["predict", "--model", "mpt-125m", "--cluster", "dgx-h100", "--gpus", "16", "--seq-len", "2048",
            "--global-batch", "32", "--distributed-optimizer", "--distributed-optimizer-instances", "2", "--json",
            "--fast"]
    assert main(args) == 0
    dp = json.loads(capsys.readouterr().out)["data_parallel"]
    assert dp["distributed_optimizer_instances"] == 2 and dp["dp_shard"] == 8 and dp["dp_replicas"] == 2


@pytest.mark.parametrize("flags,field", [
    (["--distributed-optimizer-instances", "3"], "training.distributed_optimizer_instances: 3 distributed-optimizer"
                                                 " instances must divide dp=16"),
    (["--distributed-optimizer-instances", "16"], "shard nothing"),
    (["--distributed-optimizer-instances", "0"], "--distributed-optimizer-instances"),
    (["--distributed-optimizer-instances", "2", "--no-distributed-optimizer"], "need the distributed optimizer"),
    (["--distributed-optimizer-instances", "2", "--framework", "deepspeed", "--zero", "1",
      "--no-distributed-optimizer"], "not in framework deepspeed"),
    (["--distributed-optimizer-instances", "2", "--framework", "megatron-2022"], "not in framework megatron-2022"),
    (["--distributed-optimizer-instances", "2", "--zero", "3"], "Megatron-FSDP"),
])
def test_refusals_are_one_line_naming_the_field(capsys, flags, field):
    args = ["predict", "--model", "mpt-125m", "--cluster", "dgx-h100", "--gpus", "16", "--seq-len", "2048",
            "--global-batch", "32", "--distributed-optimizer", *flags]
    args = [a for a in args if a != "--distributed-optimizer"] if "--no-distributed-optimizer" in flags else args
    args = [a for a in args if a != "--no-distributed-optimizer"]
    with pytest.raises(SystemExit) as e:
        if main(args) == 2:
            raise SystemExit(2)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and field in err and "distributed_optimizer_instances" in err.replace("-", "_")


def test_dp_shard_and_expert_parallelism_are_refused():
    with pytest.raises(SpecError, match="exclude each other"):
        build_scenario({**BASE, "layout": {"dp_shard": 16}, "training": {**BASE["training"], "zero": 1,
                                                                        "distributed_optimizer_instances": 2}}, {})
    raw = {"model": "mixtral-8x7b", "cluster": "dgx-h100", "gpus": 64, "layout": {"ep": 8},
           "training": {"seq_len": 4096, "global_batch": 128, "distributed_optimizer": True,
                        "distributed_optimizer_instances": 2}}
    with pytest.raises(SpecError, match="expert parallelism"):
        build_scenario(raw, {})


def test_the_step_is_predicted_end_to_end():
    assert predict(scenario(2), fast=True).step_time_s > 0


def test_plan_keeps_the_instances_and_searches_zero_1_only(tmp_path, capsys):
    """plan takes --distributed-optimizer-instances as a fixed setting (not searched): the distributed optimizer's
    ZeRO-1 layouts whose dp it divides, none with ZeRO-2/3."""
    import csv
    import io
    f = tmp_path / "s.yaml"
    f.write_text("model: mpt-125m\ncluster: dgx-h100\ngpus: 16\n"
                 "training: {seq_len: 2048, global_batch: 64, distributed_optimizer: true}\n")
    assert main(["plan", str(f), "--distributed-optimizer-instances", "4", "--tp", "1", "--pp", "1",
                 "--top", "3", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows and all(r["zero"] == "1" and int(r["dp"]) % 4 == 0 for r in rows)
