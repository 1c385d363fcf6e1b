"""`trainsim predict` and simulator.predict(): JSON contract, exit codes, determinism, trace format,
fast path vs engine, and property tests (hypothesis) on real scenarios."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainsim.cli.main import main
from trainsim.simulator.builder import build_cost_table
from trainsim.simulator.predict import predict
from trainsim.specs import SpecError, build_scenario

SMALL = ["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--tp", "2", "--pp", "2",
         "--seq-len", "2048", "--global-batch", "32"]


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def scenario(**kw):
    raw = {"model": kw.pop("model", "llama3-8b"), "cluster": kw.pop("cluster", "dgx-h100"),
           "gpus": kw.pop("gpus", 16),
           "layout": {k: kw.pop(k) for k in ("tp", "pp", "dp", "cp", "ep", "vpp") if k in kw},
           "training": {"seq_len": kw.pop("seq_len", 2048), "global_batch": kw.pop("global_batch", 32), **kw}}
    return build_scenario(raw, {})


def test_json_keys_and_types(capsys):
    code, out, err = run_cli(capsys, "predict", *SMALL, "--json")
    assert code == 0 and err == ""
    assert out.count("\n") == 1
    j = json.loads(out)
    for key in ("step_time_s", "tokens_per_s", "mfu", "hfu", "model_tflops_per_gpu", "hardware_tflops_per_gpu",
                "bubble_fraction"):
        assert isinstance(j[key], float) and j[key] >= 0, key
    assert j["schema_version"] == 1
    assert set(j["exposed_comm_s"]) == {"tp", "pp", "dp", "cp", "ep"}
    assert all(isinstance(v, float) for v in j["exposed_comm_s"].values())
    assert isinstance(j["memory"]["peak_bytes"], float)
    assert len(j["memory"]["per_stage"]) == 2
    for stage in j["memory"]["per_stage"]:
        assert set(stage) >= {"weights", "grads", "optimizer", "activations", "other"}
        assert all(isinstance(v, float) and v >= 0 for v in stage.values())
    assert isinstance(j["fits"], bool)
    assert j["layout"] == {"tp": 2, "pp": 2, "dp": 4, "cp": 1, "ep": 1, "etp": 2, "vpp": 1, "dp_shard": 4,
                           "micro_batch": 1, "num_microbatches": 8}
    assert isinstance(j["engine"]["events"], int) and j["engine"]["events"] > 0
    assert isinstance(j["engine"]["wall_s"], float)
    assert j["calibration"] == "defaults"
    # consistency: tokens/s and MFU follow from step time
    assert j["tokens_per_s"] == pytest.approx(32 * 2048 / j["step_time_s"])
    assert 0 < j["mfu"] <= j["hfu"] < 1


def test_deterministic_output(capsys):
    outs = []
    for _ in range(2):
        code, out, _ = run_cli(capsys, "predict", *SMALL, "--json", "--jitter", "0.1", "--samples", "4")
        assert code == 0
        j = json.loads(out)
        j.pop("engine")
        outs.append(j)
    assert outs[0] == outs[1]
    assert outs[0]["step_time_p99_s"] >= outs[0]["step_time_p50_s"] > 0


def test_oversized_layout_is_a_result(capsys):
    code, out, err = run_cli(capsys, "predict", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "8",
                             "--tp", "8", "--seq-len", "4096", "--global-batch", "8", "--json")
    assert code == 0 and err == ""
    j = json.loads(out)
    assert j["fits"] is False
    assert j["memory"]["peak_bytes"] > j["memory"]["gpu_bytes"]


@pytest.mark.parametrize("argv", [
    ["--tp", "2", "--pp", "3"],                        # 16 GPUs not divisible by 6
    ["--tp", "3"],                                     # tp does not divide heads
    ["--straggler", "2:1.5"],                          # fraction > 1
    ["--straggler", "0.1"],                            # malformed
    ["--jitter", "-1"],
    ["--jitter", "nan"],
    ["--samples", "0"],
    ["--fast", "--trace", "/tmp/never.json"],         # contradictory
    ["--fast", "--jitter", "0.1"],
    ["--vpp", "5", "--pp", "2", "--tp", "2"],          # vpp*pp divides neither 32 nor 34
])
def test_invalid_input_exit_2_one_line(capsys, argv):
    base = ["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--global-batch", "32"]
    code, out, err = run_cli(capsys, "predict", *base, *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert "Traceback" not in err


def test_table_output(capsys):
    code, out, _ = run_cli(capsys, "predict", *SMALL)
    assert code == 0
    for word in ("step time", "tokens/s", "MFU", "bubble", "exposed TP", "memory per GPU", "GiB", "fits"):
        assert word in out


def test_trace_is_valid_chrome_trace(tmp_path, capsys):
    path = tmp_path / "trace.json"
    code, _, _ = run_cli(capsys, "predict", *SMALL, "--schedule", "zb", "--zero", "1", "--trace", str(path), "--json")
    assert code == 0
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs == {0: "stage 0", 1: "stage 1"}
    threads = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    slices = [e for e in events if e["ph"] == "X"]
    for e in slices:
        assert {"name", "pid", "tid", "ts", "dur", "cat"} <= set(e)
        assert isinstance(e["ts"], float) and isinstance(e["dur"], float) and e["dur"] >= 0
        assert (e["pid"], e["tid"]) in threads
    names = [e["name"] for e in slices]
    # one compute slice per op: F, B and W of each of the 8 micro-batches on each stage
    for stage in (0, 1):
        ops = [e["name"] for e in slices if e["pid"] == stage and e["tid"] == 0 and e["name"][0] in "FBW"]
        assert sorted(n.split()[0] for n in ops) == ["B"] * 8 + ["F"] * 8 + ["W"] * 8
    assert any(n.startswith("F mb7 chunk0") for n in names)
    assert any("send act" in n for n in names) and any("reduce_scatter grads" in n for n in names)
    assert any("TP collectives" in n for n in names)
    assert any(e["ph"] == "C" and e["name"] == "memory" for e in events)
    # compute slices of one stage never overlap (one compute stream), except nested exposed-comm slices
    for stage in (0, 1):
        ops = sorted((e["ts"], e["ts"] + e["dur"]) for e in slices
                     if e["pid"] == stage and e["tid"] == 0 and e["name"][0] in "FBW")
        for (a0, a1), (b0, _b1) in itertools.pairwise(ops):
            assert b0 >= a1 - 1e-6


def test_ideal_network_removes_all_communication():
    sc = scenario(tp=2, pp=2, zero=1)
    real = predict(sc)
    ideal = predict(sc, ideal_network=True)
    assert all(v == 0 for v in ideal.exposed_comm_s.values())
    assert ideal.step_time_s < real.step_time_s


@pytest.mark.parametrize("kw,rel", [
    ({"tp": 2, "pp": 2}, 0.05), ({"tp": 8, "pp": 2, "gpus": 64, "global_batch": 128, "zero": 1}, 0.05),
    ({"tp": 4, "pp": 4, "vpp": 2, "gpus": 64, "global_batch": 128, "schedule": "interleaved", "sequence_parallel": True}, 0.05),
    ({"tp": 2, "pp": 4, "gpus": 32, "global_batch": 64, "schedule": "zb"}, 0.05), ({"tp": 2, "pp": 2, "schedule": "gpipe"}, 0.05),
    ({"tp": 2, "pp": 2, "zero": 2}, 0.05),
    # ZeRO-3: gathers and reduce-scatters contend for the same NIC; the closed form only adds them up
    ({"tp": 8, "gpus": 16, "zero": 3}, 0.08), ({"tp": 1, "gpus": 8, "zero": 3, "global_batch": 16}, 0.08),
])
def test_fast_path_close_to_engine(kw, rel):
    sc = scenario(**kw)
    des, fast = predict(sc), predict(sc, fast=True)
    assert fast.step_time_s == pytest.approx(des.step_time_s, rel=rel)
    assert fast.peak_bytes == pytest.approx(des.peak_bytes, rel=0.15)
    assert fast.engine["events"] == 0 and des.engine["events"] > 0


def test_uneven_stages_llama3_405b_layout():
    # Llama 3 405B: 126 layers on 16 stages, first and last one layer fewer (Llama 3 paper Sec. 3.3.2).
    sc = build_scenario({"model": "llama3-405b", "cluster": "dgx-h100", "gpus": 16384,
                         "layout": {"tp": 8, "pp": 16, "vpp": 4},
                         "training": {"seq_len": 8192, "global_batch": 2048, "schedule": "interleaved"}}, {})
    assert sum(sc.stage_layers) == 126 and sc.stage_layers[0] == sc.stage_layers[-1] == 1
    tab = build_cost_table(sc)
    assert sum(c.layers for s in tab.stages for c in s.chunks) == 126
    pred = predict(sc)
    assert pred.layout["dp"] == 128 and pred.layout["num_microbatches"] == 16
    assert 0.2 < pred.mfu < 0.6


# ---- property tests (hypothesis) --------------------------------------------------------------------
LAYOUTS = st.sampled_from([
    {"tp": 1, "pp": 1, "gpus": 8, "global_batch": 16}, {"tp": 2, "pp": 2, "gpus": 16}, {"tp": 8, "pp": 2, "gpus": 32},
    {"tp": 2, "pp": 4, "gpus": 16, "schedule": "gpipe"}, {"tp": 2, "pp": 4, "gpus": 16, "schedule": "zb"},
    {"tp": 2, "pp": 2, "vpp": 2, "gpus": 16, "schedule": "interleaved"}, {"tp": 4, "gpus": 16, "zero": 3},
    {"tp": 2, "pp": 2, "gpus": 32, "zero": 1, "recompute": "full"},
])
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _cluster(scale: float):
    return {"preset": "dgx-h100",
            "scale_up": {"bw_per_gpu_Bps": 450e9 * scale},
            "scale_out": {"nic_bw_Bps": 50e9 * scale}}


@SETTINGS
@given(kw=LAYOUTS, micro=st.sampled_from([1, 2]))
def test_step_time_at_least_compute_lower_bound(kw, micro):
    sc = scenario(micro_batch=micro, **kw)
    pred = predict(sc)
    tab = build_cost_table(sc)
    m = sc.num_microbatches
    bound = max(m * sum(c.fwd_s + c.bwd_s for c in st_.chunks) + st_.optimizer_s for st_ in tab.stages)
    assert pred.step_time_s >= bound * (1 - 1e-9)


@SETTINGS
@given(kw=LAYOUTS, scale=st.sampled_from([0.25, 0.5, 2.0, 4.0]))
def test_monotone_in_bandwidth(kw, scale):
    kw = dict(kw)
    gpus = kw.pop("gpus")
    base = build_scenario({"model": "llama3-8b", "cluster": _cluster(1.0), "gpus": gpus,
                           "layout": {k: kw.pop(k) for k in ("tp", "pp", "vpp") if k in kw},
                           "training": {"seq_len": 2048, "global_batch": kw.pop("global_batch", 32), **kw}}, {})
    other = base.model_copy(update={"cluster": build_scenario(
        {"model": "llama3-8b", "cluster": _cluster(scale), "gpus": gpus}, {}).cluster})
    t0, t1 = predict(base).step_time_s, predict(other).step_time_s
    if scale > 1:
        assert t1 <= t0 * (1 + 1e-9)
    else:
        assert t1 >= t0 * (1 - 1e-9)


@SETTINGS
@given(kw=LAYOUTS, extra_layers=st.sampled_from([4, 8, 16]))
def test_monotone_in_model_size(kw, extra_layers):
    small = scenario(**kw)
    bigger_model = small.model.model_copy(update={"num_layers": small.model.num_layers + extra_layers})
    try:
        big = build_scenario({"model": bigger_model.model_dump(), "cluster": "dgx-h100", "gpus": small.num_gpus,
                              "layout": small.layout.model_dump(exclude={"dp"}),
                              "training": small.training.model_dump()}, {})
    except SpecError:
        return  # the bigger model does not split over this pipeline
    assert predict(big).step_time_s > predict(small).step_time_s


@SETTINGS
@given(kw=LAYOUTS, fast=st.booleans())
def test_identical_input_identical_output(kw, fast):
    a, b = predict(scenario(**kw), fast=fast).to_json(), predict(scenario(**kw), fast=fast).to_json()
    a.pop("engine")
    b.pop("engine")
    assert a == b


# ---- variability and the other parallel dimensions -------------------------------------------------------
def test_stragglers_and_jitter_monte_carlo():
    sc = scenario(tp=2, pp=2)
    base = predict(sc).step_time_s
    # every GPU slow by 1.5x: every sample is the same, compute-bound step ~1.5x longer (comm is not slowed)
    allslow = predict(sc, stragglers=(1.0, 1.5), samples=3).variability
    assert allslow["step_time_min_s"] == allslow["step_time_max_s"]
    assert 1.3 * base < allslow["step_time_p50_s"] <= 1.5 * base
    # nobody slow: the deterministic step
    none = predict(sc, stragglers=(0.0, 2.0), samples=3)
    assert none.variability == {} and none.step_time_s == base
    # jitter: TP peers wait for the slowest, so the mean step grows; percentiles ordered; seeded
    j = predict(sc, jitter_cv=0.2, samples=8, seed=3).variability
    assert j["step_time_mean_s"] > base
    assert j["step_time_min_s"] <= j["step_time_p50_s"] <= j["step_time_p99_s"] <= j["step_time_max_s"]
    assert predict(sc, jitter_cv=0.2, samples=8, seed=3).variability == j
    assert predict(sc, jitter_cv=0.2, samples=8, seed=4).variability != j


def test_context_parallel_ring_exchange():
    sc = scenario(tp=2, cp=2, gpus=16, seq_len=8192)
    tab = build_cost_table(sc)
    c = tab.stages[0].chunks[0]
    assert c.cp_fwd_s >= 0 and c.cp_bwd_s >= 0
    ideal = predict(sc, ideal_network=True)
    real = predict(sc)
    assert real.step_time_s >= ideal.step_time_s
    assert real.exposed_comm_s["cp"] == pytest.approx(sc.num_microbatches * (c.cp_fwd_s + c.cp_bwd_s))


def test_context_parallel_allgather_and_ulysses_exchanges():
    """cp_comm: allgather (Llama 3) gathers K/V of the whole sequence before attention and, in backward, gathers
    them again and reduce-scatters dK/dV, all exposed; a2a (Ulysses) re-shards Q,K,V (sequence -> heads) and the
    output back, mirrored in backward. Closed forms per block from the collective model (llama3-8b: 32 query and
    8 key/value heads of 128, tp 2, cp 4, 8,192 tokens: 1,024 per rank and micro-batch)."""
    from trainsim.cost_models.collectives import collective_time
    from trainsim.topologies.placement import place
    base = dict(tp=2, cp=4, gpus=16, seq_len=8192, global_batch=2)
    grp = place(scenario(**base)).group("cp")
    tokens, e, d = 8192 // 4, 2, 128
    kv_block = 2 * e * tokens * (8 // 2) * d            # K and V of this rank's block, kv heads per TP rank
    q_block = e * tokens * (32 // 2) * d

    def t(op, n, sc):
        return collective_time(op, n, grp, sc.cluster).time_s

    ag = scenario(**base, cp_comm="allgather")
    c = build_cost_table(ag).stages[0].chunks[0]
    gather, scatter = t("all_gather", 4 * kv_block, ag), t("reduce_scatter", 4 * kv_block, ag)
    assert c.cp_fwd_s == pytest.approx(c.layers * gather, rel=1e-9)
    assert c.cp_bwd_s == pytest.approx(c.layers * (gather + scatter), rel=1e-9)
    ul = scenario(**base, cp_comm="a2a")
    c = build_cost_table(ul).stages[0].chunks[0]
    assert c.cp_fwd_s == pytest.approx(c.layers * (t("all_to_all", q_block + kv_block, ul)
                                                   + t("all_to_all", q_block, ul)), rel=1e-9)
    assert c.cp_bwd_s == pytest.approx(c.cp_fwd_s, rel=1e-9)
    # the ring hides its steps behind attention: never more exposed than gathering everything up front
    ring = build_cost_table(scenario(**base)).stages[0].chunks[0]
    assert ring.cp_fwd_s <= build_cost_table(ag).stages[0].chunks[0].cp_fwd_s
    with pytest.raises(SpecError, match="cp_comm"):  # Ulysses splits heads: 4 kv heads per TP rank, cp 8
        scenario(tp=2, cp=8, gpus=16, seq_len=8192, global_batch=1, cp_comm="a2a")


def test_expert_parallel_all_to_all_exposed():
    sc = build_scenario({"model": "mixtral-8x7b", "cluster": "dgx-h100", "gpus": 64,
                         "layout": {"tp": 2, "pp": 4, "ep": 8},
                         "training": {"seq_len": 4096, "global_batch": 64, "sequence_parallel": True}}, {})
    pred = predict(sc)
    assert pred.exposed_comm_s["ep"] > 0
    assert predict(sc, ideal_network=True).exposed_comm_s["ep"] == 0


def test_calibration_profile_is_used(tmp_path, capsys):
    from trainsim.cost_models.profile import CalibrationProfile, CollectiveFit, save_profile

    # A measured TP all-reduce (2 GPUs, one node) ten times slower than the NCCL model: exposed TP grows.
    prof = CalibrationProfile(
        reference_preset="h100-sxm", notes=["test"],
        collective_fits=[CollectiveFit(op="all_reduce", group_size=2, nodes=1, alpha_s=1e-3, beta_s_per_byte=1e-10,
                                       busbw_Bps=1e10, rms_rel_error=0.05, n_points=5)])
    path = save_profile(prof, tmp_path / "prof.json")
    argv = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--tp", "2",
            "--global-batch", "8", "--json"]
    code, out, _ = run_cli(capsys, *argv)
    default = json.loads(out)
    code2, out2, _ = run_cli(capsys, *argv, "--calibration", str(path))
    calibrated = json.loads(out2)
    assert code == code2 == 0
    assert default["calibration"] == "defaults"
    assert calibrated["calibration"] != "defaults" and isinstance(calibrated["calibration"], str)
    assert calibrated["exposed_comm_s"]["tp"] > 2 * default["exposed_comm_s"]["tp"]
    code3, _, err3 = run_cli(capsys, *argv, "--calibration", str(tmp_path / "missing.json"))
    assert code3 == 2 and err3.count("\n") == 1


def test_fast_path_peak_memory_equals_engine_when_the_last_chunk_carries_the_logits():
    """Interleaved end stages hold chunks of different sizes (the last has the logits): the closed form
    must sum the chunks in flight rather than multiply the largest (found by the planner on the 70B example)."""
    from pathlib import Path

    from trainsim.simulator.predict import predict
    from trainsim.specs import build_scenario, load_scenario_file

    root = Path(__file__).resolve().parents[1]
    s = build_scenario(load_scenario_file(root / "examples" / "llama3-70b-h100.yaml"))
    engine, fast = predict(s), predict(s, fast=True)
    for e, f in zip(engine.per_stage_memory, fast.per_stage_memory):
        assert f.activations == pytest.approx(e.activations, rel=1e-4)
    assert fast.peak_bytes == pytest.approx(engine.peak_bytes, rel=1e-4)


def test_activation_offload_exposes_only_copies_longer_than_their_window():
    """TE's offload handler spreads N layer copies over the L layers: each copy hides behind its window of
    forward layers (its reload behind the same window of backward); only the excess waits on the compute stream."""
    from trainsim.cost_models.activations import layer_activation_bytes
    from trainsim.cost_models.compute import layer_times
    from trainsim.cost_models.memory import offload_windows

    def sc(n_off: int, host_bw: float):
        return build_scenario({"model": "llama3-8b", "gpus": 8, "training": {
            "seq_len": 4096, "global_batch": 8, "zero": 3, "offload_activation_layers": n_off},
            "cluster": {"preset": "dgx-h100", "gpu": {"pcie_bw_Bps": host_bw}}})

    L, N = 32, 8
    windows = offload_windows(L, N)
    assert windows == [3] + [4] * 7
    base = sc(0, 50e9)
    lt, layer = layer_times(base), layer_activation_bytes(base).total
    k = build_cost_table(base).slowest_gpu_factor  # the windows are the job's (slowest GPU's) compute
    fwd, bwd = k * lt.fwd_s, k * (lt.bwd_input_s + lt.bwd_weight_s + lt.recompute_s)
    # a host link that copies a layer in half the shortest window hides every copy
    fast = layer / (0.5 * 3 * min(fwd, bwd))
    assert predict(sc(N, fast)).step_time_s == pytest.approx(predict(sc(0, fast)).step_time_s, rel=1e-9)
    # a slow one: a copy takes 3 full windows of forward
    slow = layer / (3 * 4 * fwd)
    copy = layer / slow
    exposed = sum(max(0.0, copy - w * fwd) + max(0.0, copy - w * bwd) for w in windows)
    assert exposed > 0
    t0 = predict(sc(0, slow)).step_time_s
    assert predict(sc(N, slow)).step_time_s - t0 == pytest.approx(exposed, rel=1e-6)


def test_offload_beyond_host_memory_is_warned():
    sc = build_scenario({"model": "llama3-8b", "gpus": 8, "training": {
        "seq_len": 8192, "global_batch": 64, "micro_batch": 8, "zero": 3, "offload_activation_layers": 30},
        "cluster": {"preset": "dgx-h100", "host_memory_bytes": 2**31}})
    host_per_node = predict(sc).host_bytes * 8
    assert host_per_node > 2**31
    assert any("host memory" in w for w in predict(sc).warnings)
    roomy = build_scenario({"model": "llama3-8b", "gpus": 8, "training": {
        "seq_len": 8192, "global_batch": 64, "micro_batch": 8, "zero": 3, "offload_activation_layers": 30},
        "cluster": {"preset": "dgx-h100", "host_memory_bytes": 2 * host_per_node}})
    assert not any("host memory" in w for w in predict(roomy).warnings)


def test_vpp_flag_keeps_a_files_dualpipev_schedule(tmp_path, capsys):
    """`--vpp N` implies interleaving only when the file names no chunked schedule of its own."""
    import yaml
    scn = {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 16,
           "layout": {"tp": 2, "pp": 4, "vpp": 2},
           "training": {"seq_len": 4096, "global_batch": 64, "schedule": "dualpipev"}}
    path = tmp_path / "dpv.yaml"
    path.write_text(yaml.safe_dump(scn))
    assert main(["predict", str(path), "--vpp", "2", "--json"]) == 0
    flagged = json.loads(capsys.readouterr().out)
    assert main(["predict", str(path), "--json"]) == 0
    assert flagged == {**json.loads(capsys.readouterr().out), "engine": flagged["engine"]}
    plain = {**scn, "layout": {"tp": 2, "pp": 4}, "training": {**scn["training"], "schedule": "1f1b"}}
    path.write_text(yaml.safe_dump(plain))
    assert main(["predict", str(path), "--vpp", "2", "--json"]) == 0
    interleaved = json.loads(capsys.readouterr().out)
    assert interleaved["step_time_s"] != flagged["step_time_s"]


@pytest.mark.parametrize("raw, tol", [
    # DP link time used to leak into the pipeline fill (was +25.9 %); ZeRO-3 beside a pipeline is torch's (FSDP2
    # with pipelining): DeepSpeed's pipeline engine refuses ZeRO-2/3
    ({"model": "gpt-7.5b", "cluster": "dgx-b200", "gpus": 64, "layout": {"tp": 2, "pp": 4},
      "training": {"seq_len": 2048, "global_batch": 64, "zero": 3, "schedule": "zb", "framework": "torch",
                   "sequence_parallel": True}}, 0.10),
    # without reduction overlap every bucket goes after the backward, per micro-batch too (was -20 %; context
    # parallelism is Megatron-Core's, so the current framework with its overlap turned off)
    ({"model": "llama3-405b", "cluster": "hgx-h200", "gpus": 64, "layout": {"tp": 4, "cp": 2},
      "training": {"seq_len": 8192, "global_batch": 8, "recompute": "selective", "zero": 2,
                   "framework": "megatron", "overlap_grad_reduce": False, "sequence_parallel": True,
                   "grad_dtype": "bf16"}}, 0.01),
    # ... and with fp32 gradients, whose reductions outlast the compute: paced, then counted again as the tail
    # (was +17 %); with several micro-batches each one's reduction overlaps the next one's compute
    ({"model": "llama3-405b", "cluster": "hgx-h200", "gpus": 64, "layout": {"tp": 4, "cp": 2},
      "training": {"seq_len": 8192, "global_batch": 8, "recompute": "selective", "zero": 2,
                   "framework": "megatron", "overlap_grad_reduce": False, "sequence_parallel": True,
                   "grad_dtype": "fp32"}}, 0.01),
    ({"model": "llama3-405b", "cluster": "hgx-h200", "gpus": 64, "layout": {"tp": 4, "cp": 2},
      "training": {"seq_len": 8192, "global_batch": 32, "recompute": "selective", "zero": 2,
                   "framework": "megatron", "overlap_grad_reduce": False, "sequence_parallel": True,
                   "grad_dtype": "fp32"}}, 0.06),
    # interleaving: the fill crosses p·v - 1 virtual-stage boundaries each way (was -23 %)
    ({"model": "gpt-7.5b", "cluster": "dgx-b200", "gpus": 64, "layout": {"pp": 2, "vpp": 18},
      "training": {"seq_len": 2048, "global_batch": 256, "micro_batch": 4, "recompute": "selective",
                   "schedule": "interleaved", "framework": "deepspeed"}}, 0.06),
])
def test_closed_form_tracks_the_engine_where_it_used_to_diverge(raw, tol):
    """The planner screens with the closed form: cases a consistency audit found 20-26 % off the engine."""
    sc = build_scenario(raw)
    fast, engine = predict(sc, fast=True).step_time_s, predict(sc).step_time_s
    assert abs(fast - engine) / engine <= tol, (fast, engine)


@pytest.mark.parametrize("raw", [
    # fewer micro-batches than stages: the closed form used to count micro-batches that do not exist (98.7 GB)
    {"model": "llama3-70b", "cluster": "dgx-h100", "gpus": 64, "layout": {"tp": 4, "pp": 4},
     "training": {"seq_len": 4096, "global_batch": 16, "micro_batch": 4, "zero": 1, "schedule": "zb"}},
    # full recompute: the micro-batch in backward holds its W inputs, larger than its checkpoint (was 81 GB)
    {"model": "llama3-70b", "cluster": "dgx-h100", "gpus": 64, "layout": {"tp": 4, "pp": 2},
     "training": {"seq_len": 4096, "global_batch": 32, "micro_batch": 2, "recompute": "full", "zero": 1,
                  "schedule": "zb"}},
])
def test_closed_form_zb_peak_memory_tracks_the_engine(raw):
    sc = build_scenario(raw)
    fast, engine = predict(sc, fast=True).peak_bytes, predict(sc).peak_bytes
    assert abs(fast - engine) / engine <= 0.02, (fast / 1e9, engine / 1e9)


def test_closed_form_moves_continuously_when_the_bottleneck_stage_changes():
    """Each stage is tried as the bottleneck: when a compute-bound stage overtakes a gather-paced one (stage 0:
    3 s of compute paced to 6 s by its ZeRO-3 gathers), the estimate does not jump."""
    from trainsim.simulator.analytic import estimate
    from trainsim.simulator.costtable import ChunkCost, CostTable, StageCost, Transfer

    def step(c1: float, sched: str) -> float:
        ch0 = ChunkCost(fwd_s=1, bwd_input_s=1, bwd_weight_s=1,
                        param_gather=Transfer("g", transfer_s=3.0, links=("s0.nic",)))
        ch1 = ChunkCost(fwd_s=c1 / 3, bwd_input_s=c1 / 3, bwd_weight_s=c1 / 3)
        table = CostTable(stages=(StageCost(chunks=(ch0,)), StageCost(chunks=(ch1,))), num_microbatches=4,
                          schedule=sched)
        return estimate(table).step_time_s

    for sched in ("1f1b", "gpipe"):
        times = [step(5.9 + k / 100, sched) for k in range(21)]   # stage 1's compute crosses 6 s
        assert all(b >= a - 1e-12 for a, b in zip(times, times[1:])), times
        assert max(b - a for a, b in zip(times, times[1:])) < 0.1
