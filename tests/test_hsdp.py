"""HSDP (Layout.dp_shard): memory as ZeRO-3 over the shard group, the two-level gradient reduction, its stream in
the engine, exact regression to full sharding at S = dp, the planner's shard-group search and refusals."""

from __future__ import annotations

import csv
import io
import json

import pytest

from trainsim.cli.main import main
from trainsim.cost_models import memory
from trainsim.cost_models.collectives import collective_time
from trainsim.simulator import analytic
from trainsim.simulator.builder import build_cost_table
from trainsim.simulator.costtable import ChunkCost, CostTable, StageCost, Transfer
from trainsim.simulator.engine import simulate
from trainsim.simulator.predict import predict
from trainsim.simulator.search_space import SearchLimits, enumerate_candidates, valid_scenarios
from trainsim.specs import SpecError, build_scenario, load_cluster, load_model
from trainsim.topologies.placement import place

# Llama 3 8B on 64 H100 (8 nodes of 8), FSDP full shard: dp = 64.
BASE = {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 64, "layout": {},
        "training": {"seq_len": 4096, "global_batch": 128, "zero": 3, "framework": "pytorch-fsdp"}}


def scenario(dp_shard=None, **training):
    raw = {**BASE, "layout": {"dp_shard": dp_shard} if dp_shard else {},
           "training": {**BASE["training"], **training}}
    return build_scenario(raw, {})


def test_full_shard_group_is_todays_zero3_exactly():
    """S = dp is plain FSDP: memory, cost table and step time equal the scenario without dp_shard."""
    a, b = scenario(), scenario(dp_shard=64)
    assert memory.stage_memory(a, 0) == memory.stage_memory(b, 0)
    assert build_cost_table(a) == build_cost_table(b)
    assert predict(a).step_time_s == predict(b).step_time_s


@pytest.mark.parametrize("s", [1, 2, 8, 32])
def test_model_states_scale_as_one_over_shard_group(s):
    """Weights, gradients and optimizer states per GPU are ZeRO-3's over S ranks: the held parameters / S."""
    scn = scenario(dp_shard=s)
    rp = memory.rank_param_shards(scn, 0)
    full = memory.rank_param_shards(scenario(), 0)
    assert rp.held == full.held
    for got in (rp.weight_params, rp.grad_params, rp.optimizer_params):
        assert got == pytest.approx(rp.held / s, rel=1e-12)
    sm, sm_full = memory.stage_memory(scn, 0), memory.stage_memory(scenario(), 0)
    for key in ("weights", "grads", "optimizer"):
        assert getattr(sm, key) == pytest.approx(getattr(sm_full, key) * 64 / s, rel=1e-12)


def test_shard_group_is_innermost_and_replicas_span_nodes():
    """torchtitan's mesh order: dp_shard inside dp_replicate, so a shard group of 8 with tp 1 is one node."""
    scn = scenario(dp_shard=8)
    shard, rep = place(scn).hsdp_ranks(8)
    assert shard == list(range(8))
    assert rep == [8 * k for k in range(8)]
    sg, rg = place(scn).hsdp_groups(8)
    assert not sg.multi_node and rg.nodes == 8


def test_two_level_reduction_bytes_and_times():
    """Each block's reduce-scatter runs over the shard group and is followed by the all-reduce of its 1/S shard
    over the R = dp/S replicas: bytes sum to the gradient bytes / S, time is the all-reduce of those bytes over R
    ranks, call by call."""
    s = 8
    scn = scenario(dp_shard=s)
    table = build_cost_table(scn)
    chunk = table.stages[0].chunks[0]
    shard_g, rep_g = place(scn).hsdp_groups(s)
    params = memory.rank_param_shards(scn, 0).held
    grad_bytes = params * scn.training.grad_bytes
    ars = [bk.then for bk in chunk.grad_buckets]
    assert all(a is not None for a in ars)
    assert sum(a.nbytes for a in ars) == pytest.approx(grad_bytes / s, rel=1e-9)
    assert sum(bk.nbytes for bk in chunk.grad_buckets) == pytest.approx(grad_bytes, rel=1e-9)
    calls = chunk.layers  # FSDP: one reduce-scatter per block
    per_call = grad_bytes / calls
    ar = collective_time("all_reduce", per_call / s, rep_g, scn.cluster)
    rs = collective_time("reduce_scatter", per_call, shard_g, scn.cluster)
    assert sum(a.time_s for a in ars) == pytest.approx(calls * ar.time_s, rel=1e-9)
    assert sum(bk.time_s for bk in chunk.grad_buckets) == pytest.approx(calls * rs.time_s, rel=1e-9)
    # The all-gathers before forward and backward stay inside the shard group: one per block, one for the
    # embedding and head (this chunk holds the whole model).
    ag = collective_time("all_gather", params * scn.training.param_bytes / (calls + 1), shard_g, scn.cluster)
    assert chunk.param_gather.time_s == pytest.approx((calls + 1) * ag.time_s, rel=1e-9)


def test_ring_closed_form_of_the_replica_all_reduce():
    """Across R nodes (one rank each) a large shard's all-reduce costs at least the ring's 2(R-1)/R x bytes over
    the NIC bandwidth, and the model's pick is within the protocol efficiency of it."""
    scn = scenario(dp_shard=8)
    _, rep_g = place(scn).hsdp_groups(8)
    r = rep_g.size
    nbytes = 1 << 30
    ring = 2 * (r - 1) / r * nbytes / rep_g.node_Bps  # one 400 Gb/s NIC per GPU of the group
    t = collective_time("all_reduce", nbytes, rep_g, scn.cluster, algo="ring").time_s
    assert ring <= t <= ring / 0.8


def _chained_table(n: int, rs: float, ar: float, overlap: bool) -> CostTable:
    then = Transfer("ar", transfer_s=ar, links=("s0.nic_tx", "s0.nic_rx"))
    bks = tuple(Transfer(f"rs{k}", transfer_s=rs, links=("s0.nvl_tx", "s0.nvl_rx"), then=then) for k in range(n))
    chunk = ChunkCost(fwd_s=1.0, bwd_input_s=1.0, bwd_weight_s=1.0, grad_buckets=bks)
    return CostTable(stages=(StageCost(chunks=(chunk,)),), num_microbatches=1, overlap_grad_reduce=overlap)


@pytest.mark.parametrize("rs,ar", [(0.1, 0.3), (0.3, 0.1)])
def test_engine_replica_stream_is_a_flow_shop(rs, ar):
    """Without overlap n buckets reduce after the backward: reduce-scatters back to back, each all-reduce on its
    own stream once its reduce-scatter is done -- the tail is rs + n·ar (all-reduce bound) or n·rs + ar."""
    n = 4
    want = rs + n * ar if ar >= rs else n * rs + ar
    res = simulate(_chained_table(n, rs, ar, overlap=False))
    assert res.stages[0].dp_tail_s == pytest.approx(want, rel=1e-9)
    assert res.step_time_s == pytest.approx(3.0 + want, rel=1e-9)
    est = analytic.estimate(_chained_table(n, rs, ar, overlap=False))
    assert est.step_time_s == pytest.approx(3.0 + want, rel=1e-9)


def test_predict_json_reports_the_shard_group(capsys):
    args = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "64", "--seq-len", "4096",
            "--global-batch", "128", "--zero", "3", "--framework", "pytorch-fsdp", "--dp-shard", "8", "--json"]
    assert main(args) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["layout"]["dp_shard"] == 8
    assert j["data_parallel"]["dp_shard"] == 8 and j["data_parallel"]["dp_replicas"] == 8


@pytest.mark.parametrize("flags,field", [
    (["--dp-shard", "3"], "layout.dp_shard: shard group size 3 must divide dp=64"),
    (["--dp-shard", "8", "--zero", "2"], "layout.dp_shard: HSDP"),
    (["--dp-shard", "8", "--framework", "megatron"], "layout.dp_shard: HSDP is torch FSDP"),
    (["--dp-shard", "0"], "--dp-shard"),
])
def test_bad_shard_groups_are_refused(capsys, flags, field):
    args = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "64", "--seq-len", "4096",
            "--global-batch", "128", "--zero", "3", "--framework", "pytorch-fsdp", *flags]
    with pytest.raises(SystemExit) as e:
        if main(args) == 2:
            raise SystemExit(2)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and field in err


def test_hsdp_with_expert_parallelism_is_refused():
    raw = {"model": "mixtral-8x7b", "cluster": "dgx-h100", "gpus": 64, "layout": {"ep": 8, "dp_shard": 8},
           "training": {"seq_len": 4096, "global_batch": 128, "zero": 3, "framework": "pytorch-fsdp"}}
    with pytest.raises(SpecError, match="layout.dp_shard: HSDP with expert parallelism"):
        build_scenario(raw, {})


def test_plan_searches_shard_groups(tmp_path, capsys):
    """FSDP's ZeRO-3 layouts are tried at full sharding and every power-of-two shard group; the CSV names it."""
    f = tmp_path / "s.yaml"
    f.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 16\n"
                 "training: {seq_len: 4096, global_batch: 64, framework: pytorch-fsdp}\n")
    lim = SearchLimits(fixed={"zero": 3, "tp": 1, "pp": 1, "cp": 1, "micro_batch": 1, "recompute": "full"},
                       training_extra={"framework": "pytorch-fsdp"})
    model = load_model("llama3-8b")
    cands = list(enumerate_candidates(model, load_cluster("dgx-h100"), 16, 64, 4096, lim))
    assert sorted(c.dp_shard or 16 for c in cands) == [2, 4, 8, 16]
    megatron = SearchLimits(fixed=lim.fixed)  # Megatron's ZeRO-3 has no HSDP here: full sharding only
    assert [c.dp_shard for c in enumerate_candidates(model, load_cluster("dgx-h100"), 16, 64, 4096, megatron)] == [None]
    assert main(["plan", str(f), "--zero", "3", "--tp", "1", "--pp", "1", "--cp", "1", "--recompute", "full",
                 "--micro-batch", "1", "--top", "10", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    # Rows are the shard groups whose predicted peak leaves plan's default 10 % headroom of the 80 GiB H100; a
    # shard group of 2 holds 8B x 16 bytes / 2 = 64 GB of states alone, at the edge of it.
    def fits(shard: int) -> bool:
        scn = build_scenario({"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 16,
                              "layout": {"tp": 1, "pp": 1, "dp": 16, "dp_shard": shard},
                              "training": {"seq_len": 4096, "global_batch": 64, "framework": "pytorch-fsdp",
                                           "zero": 3, "micro_batch": 1, "recompute": "full"}}, {})
        return predict(scn).peak_bytes <= 0.9 * scn.cluster.gpu.memory_bytes
    assert sorted(int(r["dp_shard"]) for r in rows) == [s for s in (2, 4, 8, 16) if fits(s)]
    assert {4, 8, 16} <= {int(r["dp_shard"]) for r in rows}
    assert main(["plan", str(f), "--zero", "3", "--tp", "1", "--pp", "1", "--recompute", "full",
                 "--micro-batch", "1", "--dp-shard", "8", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows and {r["dp_shard"] for r in rows} == {"8"}  # dp 16 shard 8, and dp 8 x cp 2 fully sharded


def test_every_enumerated_shard_group_resolves():
    """The planner enumerates only HSDP layouts the specs accept (nothing enumerated that resolve rejects)."""
    lim = SearchLimits(max_micro_batch=2, fixed={"zero": 3}, training_extra={"framework": "torch"})
    model, cluster = load_model("tiny-gpt"), load_cluster("dgx-h100", 16)
    got = {c.key() for c in enumerate_candidates(model, cluster, 16, 32, 256, lim)}
    valid = {c.key() for c, _ in valid_scenarios(model, cluster, 16, 32, 256, lim)}
    assert got == valid and any(k[-1] < k[3] for k in got)  # some shard group below dp


def test_hsdp_keeps_gathers_off_a_congested_fabric():
    """With 80 % of the scale-out fabric taken by other jobs, full sharding's per-micro-batch gathers and
    reduce-scatters cross it while a one-node shard group keeps them on NVLink and sends only the 1/8 shard
    all-reduce across nodes: less exposed DP time and a shorter step, for more state memory."""
    raw = {"model": "llama3-8b", "cluster": "dgx-a100", "gpus": 64, "layout": {},
           "training": {"seq_len": 4096, "global_batch": 512, "zero": 3, "framework": "pytorch-fsdp"}}
    full = build_scenario(raw, {"background_load": {"nic": 0.8, "spine": 0.8}})
    hsdp = build_scenario({**raw, "layout": {"dp_shard": 8}}, {"background_load": {"nic": 0.8, "spine": 0.8}})
    pf, ph = predict(full), predict(hsdp)
    assert ph.breakdown_s["exposed_dp"] < pf.breakdown_s["exposed_dp"]
    assert ph.step_time_s < pf.step_time_s
    assert ph.peak_bytes > pf.peak_bytes


@pytest.mark.parametrize("extra,msg", [
    ([], "layout.dp_shard: HSDP is torch FSDP's hybrid sharding"),
    (["--zero", "2"], "layout.dp_shard: HSDP shards the model states like ZeRO-3"),
])
def test_plan_refuses_a_shard_pin_hsdp_cannot_take(tmp_path, capsys, extra, msg):
    f = tmp_path / "s.yaml"
    fw = "megatron" if not extra else "pytorch-fsdp"
    f.write_text(f"model: llama3-8b\ncluster: dgx-h100\ngpus: 16\ntraining: {{seq_len: 4096, global_batch: 64, "
                 f"framework: {fw}}}\n")
    assert main(["plan", str(f), "--dp-shard", "8", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and msg in err


def test_report_variants_cap_the_shard_group_at_the_new_dp():
    """The report's heatmap and scaling change tp/pp or the GPU count: where the new dp is below the shard group,
    the group is the whole dp (full sharding), so the cell is that layout's MFU rather than 'invalid'."""
    from trainsim.reports.whatif import mfu_grid, variant
    from trainsim.simulator.predict import predict as _predict
    from trainsim.specs import build_scenario as _build
    raw = {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 64, "layout": {"tp": 2, "dp_shard": 8},
           "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1, "framework": "pytorch-fsdp",
                        "zero": 3}}
    s = _build(raw)
    v = variant(s, layout={"tp": 8, "pp": 2})
    assert v.dp == 4 and v.layout.dp_shard is None
    full = _build({**raw, "layout": {"tp": 8, "pp": 2}})
    cells, _, _ = mfu_grid(s, None)
    assert cells[(8, 2)] == pytest.approx(_predict(full, fast=True).mfu, rel=1e-12)
    assert variant(s, layout={"tp": 4}).layout.dp_shard == 8  # dp 16: the group is kept


@pytest.mark.parametrize("args,kw,why", [
    ((8, 3, "torch"), {"dp": 64}, None),
    ((64, 0, "megatron"), {"dp": 64}, None),  # the whole dp: plain full sharding
    ((3, 3, "torch"), {"dp": 64}, "must divide dp=64"),
    ((8, 2, "torch"), {"dp": 64}, "needs zero=3, got zero=2"),
    ((8, 3, "megatron"), {"dp": 64}, "not megatron"),
    ((8, 3, "torch"), {"dp": 64, "ep": 8}, "expert parallelism (ep=8)"),
    ((8, 3, "deepspeed"), {}, None),  # the planner's pin (dp not known yet): DeepSpeed-MiCS
    ((8, 3, "megatron-deepspeed"), {}, "megatron-deepspeed is not costed"),
    ((8, 3, "deepspeed"), {"dp": 64, "ep": 8}, "MiCS with expert parallelism (ep=8)"),
])
def test_hsdp_refusal_is_the_one_rule(args, kw, why):
    from trainsim.specs.data_parallel import hsdp_refusal
    got = hsdp_refusal(*args, **kw)
    assert (got is None) if why is None else (why in got)
