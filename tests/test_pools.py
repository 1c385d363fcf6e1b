"""Mixed GPU pools (cluster.pools, cluster.placement): an all-same pool is today's cluster, a pipeline with one
stage k x slower meets its 1F1B closed form, memory is checked per pool, dp placement runs at the slowest replica,
and bad pools are refused with one line."""

from __future__ import annotations

import json

import pytest

from trainsim.cli.main import main
from trainsim.cost_models import memory, model_flops
from trainsim.simulator.builder import build_cost_table
from trainsim.simulator.predict import predict
from trainsim.specs import SpecError, build_scenario, load_gpu
from trainsim.specs.pools import NIC_EFFICIENCY as DEFAULT_NIC_EFFICIENCY  # the one default, from specs
from trainsim.specs.pools import pool_views, stage_pools
from trainsim.topologies.fabric import NIC_EFFICIENCY

TRAIN = {"seq_len": 4096, "global_batch": 16, "micro_batch": 1, "schedule": "1f1b"}


def _scn(cluster, gpus=None, layout=None, model="llama3-8b", **training):
    raw = {"model": model, "cluster": cluster, "layout": layout or {"tp": 8, "pp": 4},
           "training": {**TRAIN, **training}}
    if gpus is not None:
        raw["gpus"] = gpus
    return build_scenario(raw)


def _slow_gpu(k: float) -> dict:
    """An H100 whose every compute time is k x longer: dense peaks and HBM bandwidth / k, kernel overhead x k.
    No wave-quantization model (num_sms: null, whose tile overhead does not scale with the peak) and identical
    parts (speed_spread_cv 0), so every op is exactly k x the reference GPU's below."""
    h = load_gpu("h100-sxm")
    return {"name": f"H100 / {k}", "memory_bytes": h.memory_bytes, "hbm_bw_Bps": h.hbm_bw_Bps / k,
            "peak_flops": {d: v / k for d, v in h.peak_flops.items()}, "kernel_overhead_s": h.kernel_overhead_s * k,
            "num_sms": None, "speed_spread_cv": 0.0, "fp8": True}


def _pools(k: float, fast_nodes: int = 3, slow_nodes: int = 1) -> dict:
    return {"preset": "dgx-h100", "pools": [{"gpu": _slow_gpu(1.0), "nodes": fast_nodes, "name": "fast"},
                                            {"gpu": _slow_gpu(k), "nodes": slow_nodes, "name": "slow"}]}


def test_all_same_pool_reproduces_the_plain_cluster():
    for placement, lay in (("stages", {"tp": 8, "pp": 4}), ("dp", {"tp": 8, "pp": 2})):
        plain = predict(_scn("dgx-h100", gpus=32, layout=lay))
        pooled_scn = _scn({"preset": "dgx-h100", "placement": placement,
                           "pools": [{"node": "dgx-h100", "nodes": 2}, {"gpu": "h100-sxm", "nodes": 2}]}, layout=lay)
        pooled = predict(pooled_scn)
        a, b = plain.to_json(), pooled.to_json()
        assert b.pop("pools") and "pools" not in a
        for key in ("engine",):
            a.pop(key), b.pop(key)
        assert a == b, placement


def test_pools_alone_make_a_cluster_and_round_trip():
    """Without a base preset the first pool's node is the base; a loaded cluster of pools loads back to itself."""
    from trainsim.specs import load_cluster
    cl = {"pools": [{"node": "dgx-a100", "nodes": 2}, {"node": "dgx-h100", "nodes": 2}]}
    scn = _scn(cl, layout={"tp": 8, "pp": 2})
    with_base = _scn({"preset": "dgx-a100", **cl}, layout={"tp": 8, "pp": 2})
    assert scn.cluster.name == "dgx-a100 + dgx-h100" and scn.num_gpus == 32
    assert predict(scn).step_time_s == predict(with_base).step_time_s
    assert load_cluster(scn.cluster) == scn.cluster
    assert load_cluster({**scn.cluster.model_dump(), "placement": "dp"}).pools == scn.cluster.pools


def test_slow_pool_stretches_its_stages_compute_by_k():
    k = 2.5
    ref = build_cost_table(_scn(_pools(1.0)), ideal_network=True)
    slow = build_cost_table(_scn(_pools(k)), ideal_network=True)
    assert stage_pools(_scn(_pools(k))) == (0, 0, 0, 1)
    for s in range(4):
        a, b = ref.stages[s].chunks[0], slow.stages[s].chunks[0]
        want = k if s == 3 else 1.0
        for f in ("fwd_s", "bwd_input_s", "bwd_weight_s", "recompute_s"):
            assert getattr(b, f) == pytest.approx(want * getattr(a, f), rel=1e-12), (s, f)
        assert slow.stages[s].optimizer_s == pytest.approx(want * ref.stages[s].optimizer_s, rel=1e-12)


@pytest.mark.parametrize("k", [1.0, 2.0, 3.0])
def test_pipeline_with_one_slow_last_stage_matches_1f1b_closed_form(k):
    """1F1B on p stages, m micro-batches, free communication, the last stage the slowest per micro-batch (its GPU
    k x slower and it holds the loss): stage p-1 receives micro-batch 0 after the forwards of the stages before it
    (sum f_s), then never waits -- every upstream stage returns the next forward within the last stage's F + B --
    so it ends at T = sum_{s<p-1} f_s + m (F + B); stage s < p-1 ends after the last backward has flowed back,
    T + sum_{s<=t<p-1} b_t; each then runs its optimizer step. step = max_s(end_s + opt_s)."""
    scn = _scn(_pools(k))
    table = build_cost_table(scn, ideal_network=True)
    p, m = table.pp, table.num_microbatches
    f = [st.chunks[0].fwd_s for st in table.stages]
    b = [st.chunks[0].bwd_s for st in table.stages]
    assert all(f[s] + b[s] <= f[-1] + b[-1] for s in range(p))  # the closed form's premise
    t_last = sum(f[:-1]) + m * (f[-1] + b[-1])
    ends = [t_last + sum(b[s:p - 1]) for s in range(p - 1)] + [t_last]
    closed = max(e + st.optimizer_s for e, st in zip(ends, table.stages))
    pred = predict(scn, ideal_network=True)
    assert pred.step_time_s == pytest.approx(closed, rel=1e-9)
    if k >= 2:  # the slow stage sets the pace: about m x its per-micro-batch time
        assert pred.step_time_s > m * (f[-1] + b[-1])


@pytest.mark.parametrize("k", [4.0, 6.0])
def test_pipeline_with_one_slow_first_stage_matches_1f1b_closed_form(k):
    """The slow pool first: stage 0 (k x slower, with the embedding) runs its p-1 warm-up forwards, and when they
    last longer than micro-batch 0's round trip through the fast stages (sum_{s>0} f_s + b_s <= (p-1) F_0, the
    premise) it never waits: it ends after m (F_0 + B_0), then its optimizer step; every later stage ends before
    it, its last backward coming from them."""
    cl = {"preset": "dgx-h100", "pools": [{"gpu": _slow_gpu(k), "nodes": 1}, {"gpu": _slow_gpu(1.0), "nodes": 3}]}
    scn = _scn(cl)
    table = build_cost_table(scn, ideal_network=True)
    p, m = table.pp, table.num_microbatches
    f = [st.chunks[0].fwd_s for st in table.stages]
    b = [st.chunks[0].bwd_s for st in table.stages]
    assert sum(f[1:]) + sum(b[1:]) <= (p - 1) * f[0]
    closed = m * (f[0] + b[0]) + table.stages[0].optimizer_s
    assert predict(scn, ideal_network=True).step_time_s == pytest.approx(closed, rel=1e-9)


def test_memory_is_checked_per_pool():
    """Llama 3 8B on 16 GPUs, tp 8 pp 2, full batch in flight: stage 0 on A100 40 GB, stage 1 on A100 80 GB. Each
    pool's peak is its stage's, each against its own HBM; the static part is the memory model's on that pool's GPU."""
    cl = {"preset": "dgx-a100", "pools": [{"gpu": "a100-40gb", "nodes": 1}, {"gpu": "a100-80gb", "nodes": 1}]}
    scn = _scn(cl, layout={"tp": 8, "pp": 2}, seq_len=8192, global_batch=32, micro_batch=2)
    pred = predict(scn)
    views = pool_views(scn)
    for k, e in enumerate(pred.pools):
        assert e["stages"] == [k]
        assert e["peak_memory_bytes"] == pred.per_stage_memory[k].total
        assert e["capacity_bytes"] == views[k].cluster.gpu.memory_bytes
        static = memory.stage_memory(views[k], k)
        sm = pred.per_stage_memory[k]
        assert (sm.weights, sm.grads, sm.optimizer) == (static.weights, static.grads, static.optimizer)
        assert e["fits"] == (sm.total <= e["capacity_bytes"])
    assert pred.pools[0]["capacity_gib"] == pytest.approx(40.0, abs=0.5)
    assert pred.fits == all(e["fits"] for e in pred.pools)
    assert pred.free_bytes == min(e["capacity_bytes"] - e["peak_memory_bytes"] for e in pred.pools)


def test_a_pool_over_its_hbm_does_not_fit_although_the_other_does():
    cl = {"preset": "dgx-a100", "pools": [{"gpu": "a100-40gb", "nodes": 1}, {"gpu": "a100-80gb", "nodes": 1}]}
    scn = _scn(cl, layout={"tp": 8, "pp": 2}, seq_len=8192, global_batch=32, micro_batch=4)
    pred = predict(scn)
    forty, eighty = pred.pools
    assert 40 * 2**30 < forty["peak_memory_bytes"] <= 80 * 2**30
    assert not forty["fits"] and eighty["fits"] and not pred.fits
    assert any("does not fit" in w for w in pred.warnings)
    # the same stage on 80 GB everywhere fits
    assert predict(_scn("dgx-a100", gpus=16, layout={"tp": 8, "pp": 2}, seq_len=8192, global_batch=32,
                        micro_batch=4)).fits


def test_dp_placement_runs_at_the_slowest_replica():
    """Half the replicas on H100 nodes, half on A100 nodes (NICs 8 x 400 vs 8 x 200 Gb/s): the step is the A100
    replicas' -- exactly the all-A100 job's, whose DP ring already runs on the A100 nodes' NICs."""
    lay = {"tp": 8, "pp": 2}
    cl = {"preset": "dgx-h100", "placement": "dp",
          "pools": [{"node": "dgx-h100", "nodes": 2}, {"node": "dgx-a100", "nodes": 2}]}
    pooled = predict(_scn(cl, layout=lay))
    a100 = predict(_scn("dgx-a100", gpus=32, layout=lay))
    assert pooled.step_time_s == pytest.approx(a100.step_time_s, rel=1e-12)
    assert [e["paces"] for e in pooled.pools] == [False, True]
    fast = predict(_scn(cl, layout=lay), fast=True)
    assert fast.step_time_s == pytest.approx(predict(_scn("dgx-a100", gpus=32, layout=lay), fast=True).step_time_s,
                                             rel=1e-12)
    peaks = 16 * load_gpu("h100-sxm").peak("bf16") + 16 * load_gpu("a100-80gb").peak("bf16")
    flops = model_flops.model_flops_per_step(_scn(cl, layout=lay))
    assert pooled.mfu == pytest.approx(flops / (pooled.step_time_s * peaks), rel=1e-12)
    assert [e["replicas"] for e in pooled.pools] == [1, 1]
    h100_like = pooled.pools[0]["replica_step_s_closed_form"]
    assert h100_like < pooled.pools[1]["replica_step_s_closed_form"]
    # memory per pool: the same schedule keeps the same micro-batches in flight on every replica, so each pool's
    # peak is what its own node type alone would hold
    h100 = predict(_scn("dgx-h100", gpus=32, layout=lay))
    assert pooled.pools[0]["peak_memory_bytes"] == pytest.approx(h100.peak_bytes, rel=1e-12)
    assert pooled.pools[1]["peak_memory_bytes"] == pytest.approx(a100.peak_bytes, rel=1e-12)


def test_dp_placement_runs_each_pools_replica_through_the_engine_once(monkeypatch):
    """predict times the pacing replica from the engine run that picked it: one engine run per pool, no more."""
    from trainsim.simulator import fold
    from trainsim.simulator import pools as pools_module
    from trainsim.simulator import predict as predict_module
    calls = []
    real = fold.simulate_step

    def counted(table, **kw):
        calls.append(table)
        return real(table, **kw)
    monkeypatch.setattr(fold, "simulate_step", counted)
    monkeypatch.setattr(predict_module, "simulate_step", counted)
    monkeypatch.setattr(pools_module, "simulate_step", counted)
    cl = {"preset": "dgx-h100", "placement": "dp",
          "pools": [{"node": "dgx-h100", "nodes": 2}, {"node": "dgx-a100", "nodes": 2}]}
    pooled = predict(_scn(cl, layout={"tp": 8, "pp": 2}))
    assert len(calls) == 2
    assert pooled.step_time_s == pytest.approx(real(calls[1], max_passes=fold.MAX_WHOLE_PASSES).step_time_s,
                                               rel=1e-12)


def test_explain_judges_fit_per_pool():
    """A lever's fit on pools is every pool's against its own GPU: the baseline's pools decide, not the smallest
    GPU against the largest peak."""
    from trainsim.simulator.levers import explain
    cl = {"preset": "dgx-a100", "pools": [{"gpu": "a100-80gb", "nodes": 1}, {"gpu": "a100-40gb", "nodes": 1}]}
    scn = _scn(cl, layout={"tp": 8, "pp": 2}, seq_len=8192, global_batch=32, micro_batch=4)
    base = predict(scn, fast=True)
    assert base.fits and base.peak_bytes > 40 * 2**30 > base.pools[1]["peak_memory_bytes"]
    expl = explain(scn, baseline=base)
    for lv in expl.levers:
        if lv.applicable and lv.lever in ("ideal network", "no pipeline bubble"):
            assert lv.fits, lv


def test_mfu_counts_each_pools_own_peak():
    cl = {"preset": "dgx-h100", "pools": [{"node": "dgx-a100", "nodes": 2}, {"node": "dgx-h100", "nodes": 2}]}
    scn = _scn(cl)
    pred = predict(scn)
    peaks = 16 * load_gpu("a100-80gb").peak("bf16") + 16 * load_gpu("h100-sxm").peak("bf16")
    flops = model_flops.model_flops_per_step(scn)
    assert pred.mfu == pytest.approx(flops / (pred.step_time_s * peaks), rel=1e-12)


def test_message_between_pools_runs_on_the_slower_nic():
    """The activation send from the last H100 stage to the first A100 stage is priced as on A100 nodes' NICs (8 x
    200 Gb/s); inside the H100 pool as on the H100 nodes' (8 x 400 Gb/s)."""
    cl = {"preset": "dgx-h100", "pools": [{"node": "dgx-h100", "nodes": 2}, {"node": "dgx-a100", "nodes": 2}]}
    pooled = build_cost_table(_scn(cl))
    h100 = build_cost_table(_scn("dgx-h100", gpus=32))
    a100 = build_cost_table(_scn("dgx-a100", gpus=32))
    assert pooled.stages[0].send_fwd == h100.stages[0].send_fwd
    assert pooled.stages[1].send_fwd.transfer_s == pytest.approx(a100.stages[1].send_fwd.transfer_s, rel=1e-12)
    assert pooled.stages[1].send_fwd.transfer_s > h100.stages[1].send_fwd.transfer_s
    assert pooled.stages[2].send_bwd.transfer_s == pytest.approx(a100.stages[2].send_bwd.transfer_s, rel=1e-12)


def test_nic_efficiency_default_is_the_fabrics():
    assert DEFAULT_NIC_EFFICIENCY == NIC_EFFICIENCY


def test_flags_match_the_scenario_keys(capsys):
    argv = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--tp", "8", "--pp", "4",
            "--global-batch", "16", "--seq-len", "4096", "--pool", "dgx-a100:2", "--pool", "h200:2", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    cl = {"preset": "dgx-h100", "pools": [{"node": "dgx-a100", "nodes": 2}, {"gpu": "h200", "nodes": 2}]}
    want = predict(_scn(cl))
    assert out["step_time_s"] == want.step_time_s
    assert [(p["name"], p["gpus"], p["stages"]) for p in out["pools"]] == [("dgx-a100", 16, [0, 1]),
                                                                          ("h200", 16, [2, 3])]
    assert main(argv[:-1] + ["--pp", "2", "--placement", "dp", "--json"]) == 0
    assert "replicas" in json.loads(capsys.readouterr().out)["pools"][0]


L8 = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--global-batch", "16", "--seq-len", "4096"]


@pytest.mark.parametrize("argv,field", [
    (L8 + ["--pool", "z900:2"], "cluster.pools[0].gpu"),
    (L8 + ["--pool", "dgx-h100:0"], "cluster.pools"),
    (L8 + ["--pool", "dgx-h100:two"], "cluster.pools"),
    (L8 + ["--pool", "dgx-h100:2", "--gpus", "32"], "cluster.pools"),
    (L8 + ["--pool", "dgx-h100:1", "--pool", "dgx-a100:3", "--tp", "8", "--pp", "2"], "cluster.pools[0].nodes"),
    (L8 + ["--pool", "dgx-h100:1", "--pool", "gb200-nvl72:1"], "cluster.pools[1].node"),
    (L8 + ["--placement", "dp"], "cluster.placement"),
    (L8 + ["--pool", "dgx-h100:1", "--pool", "dgx-h100:1"], "cluster.pools[1].name"),
    (L8 + ["--pool", "dgx-h100:1", "--pool", "dgx-a100:1", "--placement", "dp", "--tp", "8", "--pp", "2"],
     "cluster.pools[0].nodes"),
    (L8 + ["--pool", "dgx-h100:1", "--pool", "dgx-a100:1", "--dtype", "fp8", "--tp", "8", "--pp", "2"],
     "cluster.pools[1].gpu"),
    (["execute", "--pool", "cpu-host:1", "--gpus", "8", "--no-predict"], "cluster.pools"),
    (["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--placement", "dp", "--gpus", "16",
      "--global-batch", "16", "--seq-len", "4096"], "cluster.placement"),
])
def test_bad_pools_are_refused_with_one_line(argv, field, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0], err


@pytest.mark.parametrize("cluster,field", [
    ({"preset": "dgx-h100", "pools": []}, "cluster.pools"),
    ({"preset": "dgx-h100", "pools": [{"node": "dgx-h100"}]}, "cluster.pools[0].nodes"),
    ({"preset": "dgx-h100", "pools": [{"node": "dgx-h100", "nodes": -1}]}, "cluster.pools[0].nodes"),
    ({"preset": "dgx-h100", "pools": [{"node": "dgx-h100", "nodes": True}]}, "cluster.pools[0].nodes"),
    ({"preset": "dgx-h100", "pools": [{"node": "dgx-h100", "gpu": "h200", "nodes": 4}]}, "cluster.pools[0]"),
    ({"preset": "dgx-h100", "pools": [{"node": "dgx-h100", "nodes": 4, "gpus": 8}]}, "cluster.pools[0].gpus"),
    ({"preset": "dgx-h100", "pools": [{"node": "dgx-a100", "nodes": 1}, {"node": "dgx-h100", "nodes": 2},
                                      {"gpu": "h200", "nodes": 1, "name": "dgx-a100"}]}, "cluster.pools[2].name"),
    ({"preset": "dgx-h100", "pools": [{"gpu": {"preset": "h100-sxm", "memory_bytes": -1}, "nodes": 4}]},
     "cluster.pools[0].gpu.memory_bytes"),
    ({"preset": "dgx-h100", "placement": "dp", "pools": [{"node": "dgx-h100", "nodes": 3},
                                                         {"node": "dgx-a100", "nodes": 1}]},
     "cluster.pools[0].nodes"),
    # a top-level GPU or fabric setting the first pool's own preset replaces would be dropped without a word
    ({"preset": "dgx-h100", "gpu": {"gemm_efficiency": 0.35}, "pools": [{"gpu": "h100-sxm", "nodes": 2}]},
     "cluster.gpu"),
    ({"preset": "dgx-h100", "scale_up": {"bw_per_gpu_Bps": 5e10}, "pools": [{"node": "dgx-h100", "nodes": 2}]},
     "cluster.scale_up"),
    ({"preset": "dgx-h100", "scale_out": {"nic_bw_Bps": 5e9}, "pools": [{"node": "dgx-h100", "nodes": 2}]},
     "cluster.scale_out"),
])
def test_bad_pool_scenarios_name_the_field(cluster, field):
    with pytest.raises(SpecError) as e:
        _scn(cluster, layout={"tp": 8, "pp": 2})
    assert e.value.field == field, str(e.value)


def test_pools_of_gpus_and_cpus_are_refused():
    """One job's ranks are GPUs on NCCL or host CPU processes on gloo, not both."""
    with pytest.raises(SpecError) as e:
        _scn({"preset": "dgx-h100", "pools": [{"gpu": "h100-sxm", "nodes": 1}, {"gpu": "cpu", "nodes": 1}]},
             layout={"tp": 8, "pp": 2})
    assert e.value.field == "cluster.pools[1].gpu" and "cpu" in e.value.reason


def test_a_top_level_background_load_loads_every_pool():
    """Other jobs' traffic is the shared fabric's: a scenario's scale_out.background_load reaches every pool's NICs,
    as --background-load does."""
    for first in ({"node": "dgx-a100", "nodes": 1}, {"gpu": "h100-sxm", "nodes": 1}):
        scn = _scn({"preset": "dgx-h100", "scale_out": {"background_load": {"spine": 0.3}},
                    "pools": [first, {"node": "dgx-h100", "nodes": 1}]}, layout={"tp": 8, "pp": 2})
        assert [p.scale_out.background_load.spine for p in scn.cluster.pools] == [0.3, 0.3]


def test_a_pool_flag_keeps_the_scenarios_overrides_or_refuses_them(capsys):
    """--pool replaces the pools of a scenario whose cluster overrides its preset's GPU: the override the new first
    pool replaces is refused as the same scenario written with pools is, not dropped."""
    raw = {"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "gpu": {"gemm_efficiency": 0.35}},
           "layout": {"tp": 8, "pp": 2}, "training": {"seq_len": 4096, "global_batch": 16}}
    with pytest.raises(SpecError) as e:
        build_scenario(raw, {"pools": [{"node": "dgx-h100", "nodes": 2}]})
    assert e.value.field == "cluster.gpu"


def test_a_top_level_setting_the_first_pool_takes_is_kept():
    """A pool given by GPU sits on the cluster's node, so a top-level fabric override is that pool's (not refused),
    and a top-level GPU equal to the first pool's is no conflict."""
    slow = _scn({"preset": "dgx-h100", "scale_up": {"bw_per_gpu_Bps": 5e10}, "pools": [{"gpu": "h100-sxm", "nodes": 2}]},
                layout={"tp": 8, "pp": 2})
    assert slow.cluster.pools[0].scale_up.bw_per_gpu_Bps == 5e10
    same = _scn({"preset": "dgx-h100", "gpu": {"preset": "h100-sxm", "gemm_efficiency": 0.5},
                 "pools": [{"gpu": {"preset": "h100-sxm", "gemm_efficiency": 0.5}, "nodes": 2}]}, layout={"tp": 8, "pp": 2})
    assert same.cluster.pools[0].gpu.gemm_efficiency == 0.5
    # a GPU pool with fabric overrides of its own: the top level's others still reach it
    both = _scn({"preset": "dgx-h100", "scale_up": {"bw_per_gpu_Bps": 5e10},
                 "pools": [{"gpu": "h100-sxm", "nodes": 2, "scale_up": {"efficiency": 0.7}}]}, layout={"tp": 8, "pp": 2})
    assert (both.cluster.pools[0].scale_up.bw_per_gpu_Bps, both.cluster.pools[0].scale_up.efficiency) == (5e10, 0.7)


def test_plan_ranks_every_placement_on_the_pools(capsys):
    """One layout, three placements on {A100 nodes, H100 nodes}: stages in either order and dp. Each row's step is
    predict's for that arrangement; the ranking puts the fastest first."""
    argv = ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--pool", "dgx-a100:2", "--pool", "dgx-h100:2",
            "--global-batch", "16", "--seq-len", "4096", "--tp", "8", "--pp", "2", "--cp", "1", "--micro-batch", "1",
            "--recompute", "none", "--zero", "1", "--schedule", "1f1b", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    rows = [r for r in out["rows"] if r["fits"]]
    assert sorted(r["pools"] for r in rows) == ["dp", "stages 0,1", "stages 1,0"]
    cl = {"preset": "dgx-h100", "pools": [{"node": "dgx-a100", "nodes": 2}, {"node": "dgx-h100", "nodes": 2}]}
    want = {}
    for name, cluster in (("stages 0,1", cl), ("stages 1,0", {**cl, "pools": cl["pools"][::-1]}),
                          ("dp", {**cl, "placement": "dp"})):
        want[name] = predict(_scn(cluster, layout={"tp": 8, "pp": 2}, zero=1, sequence_parallel=True)
                             ).step_time_s
    for r in rows:
        assert r["step_time_s"] == pytest.approx(want[r["pools"]], rel=1e-9), r["pools"]
    assert [r["step_time_s"] for r in rows] == sorted(want.values())


def test_plan_refuses_gpus_other_than_the_pools(capsys):
    argv = ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--pool", "dgx-a100:2", "--gpus", "64",
            "--global-batch", "16", "--seq-len", "4096"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gpus" in err[0]


def test_report_settings_name_each_pools_gpus():
    """The report's cluster row lists each pool's GPUs and memory, not the first pool's GPU under the base preset's
    name for every GPU (16 A100 40 GB + 16 H200 here)."""
    from trainsim.reports.whatif import scenario_table
    cl = {"preset": "dgx-h100", "pools": [{"gpu": "a100-40gb", "nodes": 2}, {"gpu": "h200", "nodes": 2}]}
    rows = dict(scenario_table(_scn(cl)).rows)
    a100, h200 = load_gpu("a100-40gb"), load_gpu("h200")
    gib = a100.memory_bytes / 2**30
    assert rows["cluster"].startswith(f"16 × {a100.name} ({gib:.1f} GiB, pool a100-40gb) + 16 × {h200.name} (")
    assert rows["cluster"].endswith("4 nodes of 8; placement stages") and "32 ×" not in rows["cluster"]


def test_one_gpu_label_for_the_cli_and_the_report():
    from trainsim.specs.pools import gpus_label
    cl = {"preset": "dgx-h100", "pools": [{"gpu": "a100-40gb", "nodes": 2}, {"gpu": "h200", "nodes": 2}]}
    a100, h200 = load_gpu("a100-40gb"), load_gpu("h200")
    scn = _scn(cl)
    assert gpus_label(scn.cluster, scn.num_gpus) == f"16 × {a100.name} + 16 × {h200.name}"
    plain = _scn("dgx-h100", gpus=32)
    assert gpus_label(plain.cluster, 32, times="x") == f"32 x {plain.cluster.gpu.name}"
    assert gpus_label(plain.cluster, 32, memory=lambda b: f"{b / 2**30:.0f} GiB") == (
        f"32 × {plain.cluster.gpu.name} (80 GiB)")


def test_report_scaling_on_pools_is_the_scenarios_point_and_says_so():
    """Other GPU counts would need other pools (with_gpus refuses them): the scaling section has the scenario's
    GPU count only and its text states why."""
    from trainsim.reports.whatif import ReportOptions, _scaling_section
    cl = {"preset": "dgx-h100", "pools": [{"node": "dgx-a100", "nodes": 2}, {"node": "dgx-h100", "nodes": 2}]}
    sec = _scaling_section(_scn(cl), None, ReportOptions(scaling_points=2))
    assert {row[1] for row in sec.tables[0].rows} == {"32"}
    assert "the scenario's is the only point" in sec.paragraphs[0]


def test_report_memory_figure_holds_each_stage_against_its_pools_gpu():
    """On 40 GB A100 and 141 GB H200 pools each stage's bar meets its own pool's capacity (the tightest, 40 GB,
    for all would show the H200 stages over a line they do not have)."""
    from trainsim.simulator.pools import stage_capacity_bytes
    cl = {"preset": "dgx-h100", "pools": [{"gpu": "a100-40gb", "nodes": 2}, {"gpu": "h200", "nodes": 2}]}
    scn = _scn(cl)
    pred = predict(scn, fast=True)
    a100, h200 = load_gpu("a100-40gb"), load_gpu("h200")
    assert stage_capacity_bytes(scn, pred) == [a100.memory_bytes] * 2 + [h200.memory_bytes] * 2
    assert pred.gpu_memory_bytes == a100.memory_bytes
    dp = _scn({**cl, "placement": "dp"}, layout={"tp": 8, "pp": 2})
    assert stage_capacity_bytes(dp, predict(dp, fast=True)) == [a100.memory_bytes] * 2


def test_predict_table_holds_each_stage_against_its_pools_gpu(capsys, monkeypatch):
    """Stages 0-1 on 141 GB H200 at ~51 GiB fit their GPU though the tightest pool (40 GB A100) is smaller: the
    per-stage table says yes, as the pools table and the verdict do."""
    monkeypatch.setenv("COLUMNS", "120")
    argv = ["predict", "--fast", "--model", "llama3-8b", "--cluster", "dgx-h100", "--global-batch", "32",
            "--seq-len", "8192", "--micro-batch", "4", "--tp", "8", "--pp", "4", "--pool", "h200:2",
            "--pool", "a100-40gb:2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    stage_rows = [ln for ln in out.splitlines() if ln.startswith("│") and ln.split("│")[1].strip() in "0123"
                  and len(ln.split("│")) == 10]
    assert len(stage_rows) == 4 and all(r.split("│")[8].strip() == "yes" for r in stage_rows), stage_rows
    assert float(stage_rows[0].split("│")[7]) > load_gpu("a100-40gb").memory_bytes / 2**30
    assert "capacity each stage's pool's GPU" in out and "-> fits" in out


@pytest.mark.parametrize("flags, step_s", [
    (["--pool", "dgx-a100:64", "--pool", "dgx-h100:64"], 17.79),
    (["--pool", "dgx-h100:64", "--pool", "dgx-a100:64"], 19.91),
    (["--pool", "dgx-a100:64", "--pool", "dgx-h100:64", "--placement", "dp"], 20.36),
])
def test_readme_pool_steps(flags, step_s, capsys):
    """The README's mixed-pool figures for examples/llama3-70b-h100.yaml, as predict gives them."""
    from pathlib import Path
    example = Path(__file__).resolve().parents[1] / "examples" / "llama3-70b-h100.yaml"
    assert main(["predict", str(example), *flags, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] == pytest.approx(step_s, abs=0.005)
