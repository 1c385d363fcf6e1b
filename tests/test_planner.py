"""The planner end to end: its answer equals an exhaustive search, the dominance pruning loses nothing,
ranking/time-to-train/cost follow their definitions, and the sweep gives the same answer inline, in a
process pool and on a dask cluster. Also the `trainsim plan` command line."""

import concurrent.futures
import csv
import io
import json
import math
import multiprocessing as mp
from pathlib import Path

import pytest

from trainsim.cli.main import main
from trainsim.simulator import goodput as gp
from trainsim.simulator import planner
from trainsim.simulator.planner import PlanRequest, checkpoint_seconds, pareto_front, peak_memory_bytes, plan
from trainsim.simulator.predict import predict
from trainsim.simulator.search_space import SearchLimits, valid_scenarios
from trainsim.specs import load_cluster, load_model

# A small but real space: Llama 3 8B on one and two DGX H100 nodes, 1F1B/ZB only, micro-batch <= 2.
LIMITS = SearchLimits(max_micro_batch=2, schedules=("1f1b", "zb"))


def small_request(**kw) -> PlanRequest:
    base = {"model": load_model("llama3-8b"), "cluster": load_cluster("dgx-h100"), "gpu_counts": (8, 16),
            "global_batch": 64, "seq_len": 4096, "tokens": 1e11, "price_per_gpu_hour": 2.0, "top_k": 4, "limits": LIMITS}
    base.update(kw)
    return PlanRequest(**base)


@pytest.fixture(scope="module")
def small_plan():
    return plan(small_request())


def exhaustive_best(req: PlanRequest):
    """Brute force: closed-form prediction of every valid layout that fits the memory model."""
    best = None
    for n in req.gpu_counts:
        cluster = req.cluster.with_gpus(n)
        for cand, scn in valid_scenarios(req.model, cluster, n, req.global_batch, req.seq_len, req.limits):
            if peak_memory_bytes(scn) > cluster.gpu.memory_bytes:
                continue
            p = predict(scn, fast=True)
            steps = math.ceil(req.train_tokens / scn.tokens_per_step)
            g = gp.plan_goodput(steps * p.step_time_s, n, checkpoint_seconds(req), req.restart_s,
                                req.failure_rate_per_gpu_hour)
            key = (g.time_to_train_s, cand.key())
            if best is None or key < best[0]:
                best = (key, cand, p)
    return best


def test_screen_finds_the_exhaustive_optimum(small_plan):
    _, cand, pred = exhaustive_best(small_request())
    top = small_plan.screened_top[0]
    assert top.candidate == cand
    assert top.step_time_s == pytest.approx(pred.step_time_s, rel=1e-12)


def test_dominance_pruning_loses_no_ranked_layout(small_plan):
    full = plan(small_request(prune_dominated=False))
    assert full.counts["dominated"] == 0 and small_plan.counts["dominated"] > 0
    assert full.counts["screened"] > small_plan.counts["screened"]
    pruned = [r for r in small_plan.rows if r.fits]
    exhaustive = [r for r in full.rows if r.fits]
    assert pruned[0].candidate == exhaustive[0].candidate
    # Whatever it dropped is a heavier-recompute copy of a layout it kept, which the engine finds slower ...
    kept = {r.candidate.key(): r for r in pruned}
    copies = set()
    for r in exhaustive:
        if r.candidate.key() in kept:
            continue
        assert r.candidate.recompute != "none"
        lighter = [k for k in kept.values() if k.candidate.key()[:8] == r.candidate.key()[:8]
                   and k.candidate.zero == r.candidate.zero and k.candidate.schedule == r.candidate.schedule]
        assert lighter and all(k.time_to_train_s <= r.time_to_train_s for k in lighter)
        copies.add(r.candidate.key())
    # ... and rank by rank the pruned plan is at least as good as the exhaustive one without those copies
    # (dominated duplicates take no top-K slots).
    distinct = [r for r in exhaustive if r.candidate.key() not in copies]
    assert all(a.time_to_train_s <= b.time_to_train_s * (1 + 1e-12) for a, b in zip(pruned, distinct))
    assert [r.candidate.gpus for r in full.pareto] == [r.candidate.gpus for r in small_plan.pareto]


def test_counts_add_up(small_plan):
    c = small_plan.counts
    assert c["enumerated"] == c["invalid"] + c["oom"] + c["over_headroom"] + c["dominated"] + c["screened"]
    assert c["screened"] > 50 and c["oom"] > 0


def test_ranked_rows_are_engine_confirmed_and_follow_the_definitions(small_plan):
    req = small_plan.request
    rows = [r for r in small_plan.rows if r.fits]
    assert 1 <= len(rows) <= req.top_k
    assert all(r.source == "engine" for r in rows)
    assert [r.time_to_train_s for r in rows] == sorted(r.time_to_train_s for r in rows)
    ckpt = checkpoint_seconds(req)
    # 8B params x (2 + 12) bytes at 2 TB/s.
    assert ckpt == pytest.approx(load_model("llama3-8b").total_params() * 14 / 2e12)
    for r in rows:
        c = r.candidate
        scn_tokens = req.global_batch * req.seq_len
        eng = predict(_scenario(req, c))
        assert r.step_time_s == pytest.approx(eng.step_time_s, rel=1e-12)
        assert r.tokens_per_s == pytest.approx(scn_tokens / r.step_time_s, rel=1e-9)
        steps = math.ceil(req.train_tokens / scn_tokens)
        g = gp.plan_goodput(steps * r.step_time_s, c.gpus, ckpt, req.restart_s, req.failure_rate_per_gpu_hour)
        assert r.time_to_train_s == pytest.approx(g.time_to_train_s)
        assert r.goodput == pytest.approx(g.goodput)
        assert r.gpu_hours == pytest.approx(c.gpus * r.time_to_train_s / 3600)
        assert r.cost == pytest.approx(r.gpu_hours * 2.0)
        assert r.screen_step_time_s is not None
        assert r.peak_bytes <= r.gpu_bytes


def _scenario(req, c):
    from trainsim.simulator.search_space import to_scenario
    return to_scenario(req.model, req.cluster.with_gpus(c.gpus), c, req.global_batch, req.seq_len, req.limits)


def test_pareto_front_has_the_best_of_each_gpu_count(small_plan):
    front = small_plan.pareto
    assert {r.candidate.gpus for r in front} <= {8, 16}
    assert front == pareto_front(front)            # non-dominated among themselves
    confirmed_16 = [r for r in small_plan.rows if r.candidate.gpus == 16 and r.fits]
    if confirmed_16:
        # 16 GPUs finish sooner than 8: the fastest 16-GPU row is on the front.
        assert min(confirmed_16, key=lambda r: r.time_to_train_s) in front


def test_cost_objective_ranks_by_gpu_hours():
    res = plan(small_request(objective="cost", top_k=3))
    rows = [r for r in res.rows if r.fits]
    assert [r.gpu_hours for r in rows] == sorted(r.gpu_hours for r in rows)


def _rows(res):
    return [(r.candidate, r.step_time_s, r.source) for r in res.rows]


def test_process_pool_gives_the_same_plan(small_plan):
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as ex:
        res = plan(small_request(), executor=ex)
    assert _rows(res) == _rows(small_plan)
    assert res.counts == small_plan.counts


@pytest.mark.timeout(120)
def test_dask_local_cluster_gives_the_same_plan(small_plan):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        res = plan(small_request(), executor=client.get_executor())
    assert _rows(res) == _rows(small_plan)
    assert res.counts == small_plan.counts


def test_progress_callback_reports_both_phases():
    seen = {}
    plan(small_request(gpu_counts=(8,), top_k=2), progress=lambda ph, d, t: seen.__setitem__(ph, (d, t)))
    assert seen["screen"][0] == seen["screen"][1] > 0
    assert seen["engine"][0] == seen["engine"][1] >= 1


# --- command line ---------------------------------------------------------------------------------

PLAN_ARGS = ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8:16", "--global-batch", "64",
             "--seq-len", "4096", "--tokens", "100B", "--price-per-gpu-hour", "2", "--top", "3",
             "--max-micro-batch", "2", "--schedule", "1f1b"]


def test_cli_json(capsys):
    assert main(PLAN_ARGS + ["--json"]) == 0
    out = capsys.readouterr()
    d = json.loads(out.out)
    assert d["kind"] == "plan" and d["request"]["gpu_counts"] == [8, 16]
    assert d["request"]["tokens"] == 1e11
    assert 1 <= len(d["rows"]) <= 3 and d["pareto"]
    r = d["rows"][0]
    for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "recompute", "zero", "schedule", "step_time_s",
              "tokens_per_s", "mfu", "peak_bytes", "headroom_bytes", "time_to_train_s", "gpu_hours", "cost",
              "goodput", "source"):
        assert k in r
    assert "screening" not in out.err     # no progress bars with --json


def test_cli_table_and_csv(capsys):
    assert main(PLAN_ARGS) == 0
    out = capsys.readouterr().out
    assert "Top" in out and "Pareto front" in out and "engine" in out
    assert main(PLAN_ARGS + ["--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows and rows[0]["rank"] == "1" and rows[0]["source"] == "engine"


@pytest.mark.parametrize("extra, field", [
    (["--gpus", "12"], "gpus"),
    (["--gpus", "16:8"], "gpus"),
    (["--tokens", "lots"], "tokens"),
    (["--tp", "3"], "tp*pp*cp"),  # a pin no layout can take is refused as predict refuses it
])
def test_cli_bad_input_is_one_line_exit_2(capsys, extra, field):
    args = PLAN_ARGS + extra
    code = main(args)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and field in err


@pytest.mark.timeout(120)
def test_cli_dask_scheduler_address(capsys):
    distributed = pytest.importorskip("distributed")
    assert main(PLAN_ARGS + ["--json"]) == 0
    inline = json.loads(capsys.readouterr().out)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        assert main(PLAN_ARGS + ["--json", "--dask-scheduler", cluster.scheduler_address]) == 0
    on_dask = json.loads(capsys.readouterr().out)
    assert on_dask["rows"] == inline["rows"] and on_dask["counts"] == inline["counts"]


def test_cli_takes_model_cluster_batch_from_a_scenario_file(capsys):
    from pathlib import Path
    scn = Path(__file__).resolve().parents[1] / "examples" / "llama3-8b-h100-64.yaml"
    assert main(["plan", str(scn), "--gpus", "8", "--top", "2", "--tp", "2", "--max-micro-batch", "1",
                 "--schedule", "1f1b", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["request"]["model"]["name"] == "llama3-8b" and d["request"]["gpu_counts"] == [8]
    assert d["request"]["global_batch"] == 512 and d["request"]["seq_len"] == 8192
    assert d["rows"] and all(r["tp"] == 2 for r in d["rows"])


def test_cli_plans_with_the_scenario_files_training_settings(tmp_path, capsys):
    """Settings the search does not decide (framework, flash attention, offload, ...) apply to every candidate."""
    import yaml

    from trainsim.specs import build_scenario
    base = {"model": "llama3-8b", "cluster": "dgx-h100",
            "training": {"global_batch": 64, "seq_len": 4096}}
    args = ["--gpus", "8", "--top", "1", "--tp", "1", "--pp", "1", "--max-micro-batch", "1", "--zero", "3",
            "--recompute", "none", "--schedule", "1f1b", "--json",
            "--memory-headroom", "0"]  # the settings reach the candidates; where they fit is not the point

    def best(training_extra: dict) -> dict:
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump({**base, "training": {**base["training"], **training_extra}}))
        assert main(["plan", str(path), *args]) == 0
        return json.loads(capsys.readouterr().out)

    plain, eager = best({}), best({"flash_attention": False, "framework": "pytorch-fsdp"})
    assert eager["request"]["training"] == {"flash_attention": False, "framework": "pytorch-fsdp"}
    # the same layout, planned with the file's stack, is predicted as `predict` predicts it
    row = eager["rows"][0]
    sc = build_scenario({**base, "gpus": 8, "layout": {"tp": 1, "pp": 1}, "training": {
        **base["training"], "micro_batch": 1, "zero": 3, "recompute": "none", "flash_attention": False,
        "framework": "pytorch-fsdp"}})
    assert row["step_time_s"] == pytest.approx(predict(sc).step_time_s, rel=1e-9)
    assert row["step_time_s"] > plain["rows"][0]["step_time_s"]
    # `report --plan` rebuilds the ranked layout with the same settings
    from trainsim.reports.plan_file import scenario_from_plan
    again = scenario_from_plan(eager)
    assert again.training.framework == "pytorch-fsdp" and again.training.flash_attention is False
    off = best({"offload_activation_layers": 16})
    assert off["rows"][0]["peak_bytes"] < plain["rows"][0]["peak_bytes"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**base, "training": {**base["training"], "framework": "jax"}}))
    assert main(["plan", str(path), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "training.framework" in err


def test_cli_plans_with_the_scenario_files_placement(tmp_path, capsys):
    """layout.placement (which dimension is innermost on the ranks) reaches every planned layout."""
    import yaml

    from trainsim.specs import build_scenario
    scn = {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 64,
           "layout": {"tp": 8, "placement": ["dp", "tp", "pp", "cp", "ep"]},
           "training": {"global_batch": 64, "seq_len": 4096, "micro_batch": 1, "zero": 1, "recompute": "none",
                        "sequence_parallel": True}}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(scn))
    assert main(["plan", str(path), "--tp", "8", "--pp", "1", "--cp", "1", "--micro-batch", "1", "--zero", "1",
                 "--recompute", "none", "--schedule", "1f1b", "--top", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["request"]["placement"] == ["dp", "tp", "pp", "cp", "ep"]
    outer_tp = predict(build_scenario(scn)).step_time_s
    inner_tp = predict(build_scenario({**scn, "layout": {"tp": 8}})).step_time_s
    assert outer_tp > inner_tp  # TP across nodes is slower: the placement matters
    assert d["rows"][0]["step_time_s"] == pytest.approx(outer_tp, rel=1e-9)


def test_screen_counts_zb_weight_gradient_inputs(capsys):
    """ZB keeps each postponed W pass's GEMM inputs (under full recompute far more than the checkpoints): the
    screen rejects such a layout itself instead of sending it to the engine, which finds it out of memory."""
    from trainsim.specs import build_scenario
    raw = {"model": "llama3-70b", "cluster": "dgx-h100", "gpus": 64, "layout": {"pp": 8},
           "training": {"seq_len": 4096, "global_batch": 128, "micro_batch": 2, "recompute": "full", "zero": 1,
                        "schedule": "zb", "grad_dtype": "bf16"}}
    sc = build_scenario(raw)
    assert peak_memory_bytes(sc) < sc.cluster.gpu.memory_bytes < predict(sc).peak_bytes  # static model misses it
    assert main(["plan", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "64", "--global-batch", "128",
                 "--seq-len", "4096", "--tp", "1", "--pp", "8", "--cp", "1", "--micro-batch", "2",
                 "--recompute", "full", "--zero", "1", "--schedule", "zb", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["counts"]["oom"] >= 1 and d["counts"]["engine_oom"] == 0 and not d["rows"]


def test_the_plans_profile_is_read_once_per_memo_scope_and_not_kept_after(monkeypatch):
    """planner.plan_profile memoises the measured profile in the plan's memo scope (specs.memo), not in a
    process-wide dict: one read per scope, a fresh read in the next scope."""
    import trainsim.cost_models.profile as profile_mod
    from trainsim.specs.memo import memo_scope
    reads = []
    monkeypatch.setattr(profile_mod, "load_profile", lambda path: reads.append(path) or {"path": path})
    monkeypatch.setattr(planner, "load_profile", profile_mod.load_profile)
    with memo_scope():
        assert planner.plan_profile("p.json") is planner.plan_profile("p.json")
        assert planner.plan_profile(None) is None
    assert reads == ["p.json"]
    with memo_scope():
        planner.plan_profile("p.json")
    assert reads == ["p.json", "p.json"]


def test_a_plan_reads_its_profile_once_whatever_runs_its_tasks(monkeypatch):
    """The plan's context carries the profile to its tasks: one read per plan, though a thread pool's tasks each
    open a memo scope of their own (a task reading the file itself would read it once per task)."""
    import trainsim.cost_models.profile as profile_mod
    real, reads = profile_mod.load_profile, []
    monkeypatch.setattr(profile_mod, "load_profile", lambda path: reads.append(path) or real(path))
    monkeypatch.setattr(planner, "load_profile", profile_mod.load_profile)
    path = str(Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "profile_h200.json")
    req = small_request(cluster=load_cluster("hgx-h200"), gpu_counts=(8,), top_k=2, chunk_size=8, profile_path=path)
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        res = plan(req, executor=ex)
    assert res.rows and res.counts["screened"] > 1
    assert reads == [path]


def test_screen_computes_each_stage_memory_once(monkeypatch):
    """The planner's memory check, the closed form's step context and its memory report ask for the same stages of
    one scenario: each (stage, in-flight count, kernels) is computed once per scenario object."""
    from trainsim.cost_models import memory
    from trainsim.simulator.planner import _checked_stages, _predict
    from trainsim.specs import build_scenario

    calls = []
    fn = memory._STAGE_MEMORY.fn
    monkeypatch.setattr(memory._STAGE_MEMORY, "fn", lambda *a: calls.append(a[1:]) or fn(*a))
    scn = build_scenario({"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "layout": {"pp": 4, "tp": 2},
                          "training": {"seq_len": 2048, "global_batch": 64, "micro_batch": 1}})
    _checked_stages(scn)
    _predict(scn, True, None)
    assert sorted(calls) == sorted(set(calls)) and {a[0] for a in calls} == set(range(4))
