"""Folding a step's steady state (simulator/fold.py): the folded step equals the full simulation.

Every schedule (1F1B, GPipe, ZB-H1, interleaved, DualPipeV) and several layouts (pp 1/2/4/8, vpp, dp > 1 with
ZeRO 1/2/3, MoE with EP, a CPU cluster with blocking p2p) are simulated in full and folded from three smaller
counts; step time, every stage's timeline entry and every reported breakdown entry agree to 1e-9. At 500 000
micro-batches the folded step is checked against the closed forms of uniform free-network pipelines.
"""

from __future__ import annotations

import functools
import json
from dataclasses import replace

import pytest

from trainsim.cli.main import main
from trainsim.simulator import fold
from trainsim.simulator.builder import build_cost_table
from trainsim.simulator.costtable import uniform_table
from trainsim.simulator.engine import simulate
from trainsim.simulator.metrics import to_prediction
from trainsim.simulator.predict import MAX_TRACE_PASSES, predict
from trainsim.specs import build_scenario

RTOL = 1e-9

# name -> (model, cluster, gpus, layout, training extras); global_batch is set per micro-batch count
LAYOUTS = {
    "1f1b-pp4-dp2": ("llama3-8b", "dgx-h100", 16, {"tp": 2, "pp": 4},
                     {"schedule": "1f1b", "distributed_optimizer": True}),
    "gpipe-pp4": ("llama3-8b", "dgx-h100", 16, {"tp": 2, "pp": 4}, {"schedule": "gpipe"}),
    "zb-pp4": ("llama3-8b", "dgx-h100", 16, {"tp": 2, "pp": 4}, {"schedule": "zb"}),
    "interleaved-pp4-vpp2": ("llama3-8b", "dgx-h100", 16, {"tp": 2, "pp": 4, "vpp": 2},
                             {"schedule": "interleaved", "distributed_optimizer": True}),
    "dualpipev-pp4": ("llama3-8b", "dgx-h100", 16, {"tp": 2, "pp": 4, "vpp": 2}, {"schedule": "dualpipev"}),
    "1f1b-pp8-dp8": ("llama3-8b", "dgx-h100", 64, {"tp": 1, "pp": 8}, {"schedule": "1f1b"}),
    "interleaved-pp8-vpp5": ("llama3-70b", "dgx-h100", 64, {"tp": 4, "pp": 8, "vpp": 5}, {"schedule": "interleaved"}),
    "zero2-pp2-dp4": ("llama3-8b", "dgx-h100", 16, {"tp": 2, "pp": 2}, {"schedule": "1f1b", "zero": 2}),
    "zero3-pp1-dp8": ("llama3-8b", "dgx-h100", 8, {"tp": 1, "pp": 1}, {"zero": 3, "recompute": "none"}),
    "moe-ep8-pp4": ("mixtral-8x7b", "dgx-h100", 64, {"tp": 1, "pp": 4, "ep": 8},
                    {"schedule": "1f1b", "distributed_optimizer": True, "recompute": "selective"}),
    "megatron2021-pp4": ("llama3-8b", "dgx-h100", 16, {"tp": 2, "pp": 4},   # blocking p2p, reduction after backward
                         {"schedule": "1f1b", "framework": "megatron-2021"}),
    "deepspeed2021-zero3": ("llama3-8b", "dgx-h100", 8, {"tp": 1, "pp": 1},  # DP on the compute stream
                            {"zero": 3, "framework": "deepspeed-2021", "recompute": "full"}),
    "fsdp-zero3-cp2": ("llama3-8b", "dgx-h100", 16, {"tp": 1, "pp": 1, "cp": 2},  # torchtitan: FSDP2 over dp x cp
                       {"zero": 3, "framework": "torch", "seq_len": 8192}),
    "cpu-pp2": ("tiny-gpt", "cpu-host", 2, {"pp": 2}, {"schedule": "1f1b", "dtype": "fp32", "seq_len": 128}),
}


@functools.cache
def scenario(name: str, m: int):
    model, cluster, gpus, layout, extra = LAYOUTS[name]
    dp = gpus // (layout.get("tp", 1) * layout.get("pp", 1) * layout.get("cp", 1))
    training = {"seq_len": 2048, "micro_batch": 1, "dtype": "bf16", **extra, "global_batch": m * dp}
    return build_scenario({"model": model, "cluster": cluster, "gpus": gpus, "layout": layout,
                           "training": training}, {})


def close(a: float, b: float, scale: float) -> bool:
    return abs(a - b) <= RTOL * abs(b) + 1e-12 * scale


def assert_same(folded, full, sc, table) -> None:
    """Step, every stage's timeline entry and every reported breakdown entry agree."""
    step = full.step_time_s
    assert close(folded.step_time_s, step, step)
    assert close(folded.pipeline_span_s, full.pipeline_span_s, step)
    assert folded.critical_stage == full.critical_stage
    for s, (a, b) in enumerate(zip(folded.stages, full.stages)):
        for (name, va), (_, vb) in zip(fold._stage_values(a), fold._stage_values(b)):
            assert close(va, vb, step if name.endswith("_s") or "exposed" in name else abs(vb)), (s, name, va, vb)
        assert a.ops == b.ops
    pa = to_prediction(sc, table, folded, mode="x", calibration="x")
    pb = to_prediction(sc, table, full, mode="x", calibration="x")
    for key in ("step_time_s", "tokens_per_s", "mfu", "hfu", "bubble_fraction", "peak_bytes"):
        scale = 1.0 if key == "bubble_fraction" else abs(getattr(pb, key))
        assert close(getattr(pa, key), getattr(pb, key), scale), key
    for d, v in pb.exposed_comm_s.items():
        assert close(pa.exposed_comm_s[d], v, step), d
    for k, v in pb.breakdown_s.items():
        assert close(pa.breakdown_s[k], v, step), k


def counts_for(name: str) -> list[int]:
    p = LAYOUTS[name][3].get("pp", 1)
    if LAYOUTS[name][4].get("schedule") == "interleaved":
        return [12 * p, 37 * p]
    return [12 * p + 3, 37 * p + 5]


@pytest.mark.parametrize("name,m", [(n, m) for n in LAYOUTS for m in counts_for(n)])
def test_folded_equals_full(name, m):
    sc = scenario(name, m)
    table = build_cost_table(sc)
    assert table.num_microbatches == m
    q = fold.period(table)
    base = q * -(-4 * table.pp // q)            # past warm-up and cool-down
    counts = fold.sample_counts(m, q, base)
    assert counts[2] < m and all((m - n) % (counts[1] - counts[0]) == 0 for n in counts)
    folded = fold.fold_at(table, counts)
    assert folded is not None, "the steady state did not repeat in the samples"
    assert folded.folded.simulated == counts
    assert_same(folded, simulate(table), sc, table)


def test_stragglers_fold(monkeypatch):
    # a slow stage scales whole stages: still periodic, and simulate_step folds it
    sc = scenario("1f1b-pp4-dp2", 403)
    table = build_cost_table(sc)
    scale = [1.0, 1.7, 1.0, 1.0]
    got = fold.simulate_step(table, stage_scale=scale)
    assert got.folded is not None
    assert_same(got, simulate(table, stage_scale=scale), sc, table)


@pytest.mark.parametrize("schedule,step", [
    ("1f1b", lambda m, p: (m + p - 1) * 3.2),                 # f_sc21_1f1b, t_f=1, t_b=1.3+0.9
    ("gpipe", lambda m, p: (m + p - 1) * 3.2),                # f_sc21_gpipe
    ("zb", lambda m, p: m * 3.2 + (p - 1) * (1.0 + 1.3 - 0.9)),  # ZB-H1 drain, Qi et al. Sec. 3.1
])
def test_half_a_million_microbatches_closed_form(schedule, step):
    p, m = 8, 500_000
    res = fold.simulate_step(uniform_table(p, m, fwd_s=1.0, bwd_input_s=1.3, bwd_weight_s=0.9, schedule=schedule))
    assert res.folded is not None and res.folded.microbatches == m
    assert res.events < 20_000                  # a few hundred micro-batches were simulated, not 500 000
    assert res.step_time_s == pytest.approx(step(m, p), rel=1e-12)
    assert sum(tl.ops for tl in res.stages) == p * m * (3 if schedule == "zb" else 2)


def test_small_steps_run_whole():
    table = uniform_table(4, 40, schedule="1f1b")
    res = fold.simulate_step(table)
    assert res.folded is None and res.step_time_s == simulate(table).step_time_s


def test_not_affine_is_refused():
    assert fold._affine("end_s", 1.0, 2.0, 3.0, 3.0)
    assert not fold._affine("end_s", 1.0, 2.0, 3.0 + 1e-6, 3.0)
    assert fold._affine("act_peak_bytes", 5e9, 5e9, 5e9, 3.0)
    assert not fold._affine("act_peak_bytes", 5e9, 5e9, 5.001e9, 3.0)


def test_failed_check_moves_samples_out(monkeypatch):
    # samples inside the warm-up are not affine: simulate_step must not use them, yet still answers exactly
    seen = []
    real = fold._extrapolate

    def spy(res, counts, m):
        out = real(res, counts, m)
        seen.append((counts, out is not None))
        return out

    monkeypatch.setattr(fold, "_extrapolate", spy)
    monkeypatch.setattr(fold, "FOLD_BASE", 1)
    monkeypatch.setattr(fold, "FOLD_BASE_PER_STAGE", 0)
    table = uniform_table(8, 1000, fwd_s=1.0, bwd_input_s=1.3, bwd_weight_s=0.9, schedule="1f1b")
    res = fold.simulate_step(table)
    assert seen[0] == ((1, 2, 3), False) and seen[-1][1]
    assert res.step_time_s == pytest.approx(1007 * 3.2, rel=1e-12)


def test_predict_folds_and_says_so(monkeypatch):
    sc = scenario("moe-ep8-pp4", 1003)
    pred = predict(sc).to_json()
    assert pred["engine"]["folded"]["microbatches"] == 1003
    assert len(pred["engine"]["folded"]["simulated_microbatches"]) == 3
    monkeypatch.setattr(fold, "FOLD_BASE", 10**9)   # the whole step, for comparison
    full = predict(sc).to_json()
    assert "folded" not in full["engine"]
    assert full["step_time_s"] == pytest.approx(pred["step_time_s"], rel=RTOL)
    for k, v in full["breakdown_s"].items():
        assert close(pred["breakdown_s"][k], v, full["step_time_s"]), k
    assert full["memory"]["peak_bytes"] == pytest.approx(pred["memory"]["peak_bytes"], rel=RTOL)


def test_cli_global_batch_of_tokens(capsys, monkeypatch):
    # the case: a token count typed as sequences, 524 288 micro-batches per replica
    code = main(["predict", "examples/llama3-8b-h100-8.yaml", "--global-batch", "4194304", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    d = json.loads(out)
    assert d["layout"]["num_microbatches"] == 524288
    assert d["engine"]["folded"]["microbatches"] == 524288 and d["engine"]["events"] < 100_000
    monkeypatch.setenv("COLUMNS", "200")         # one line per table row
    code = main(["predict", "examples/llama3-8b-h100-8.yaml", "--global-batch", "4194304"])
    assert code == 0 and "events (folded from 524,288 micro-batches)" in capsys.readouterr().out


@pytest.mark.parametrize("extra,field", [(["--trace", "t.json"], "trace"), (["--jitter", "0.1"], "jitter")])
def test_unfoldable_requests_are_bounded(capsys, tmp_path, extra, field):
    extra = [str(tmp_path / x) if x.endswith(".json") else x for x in extra]
    code = main(["predict", "examples/llama3-8b-h100-8.yaml", "--global-batch", str(8 * (MAX_TRACE_PASSES + 1)),
                 *extra])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith(f"error: {field}:"), err
    assert not (tmp_path / "t.json").exists()


def test_examples_are_not_folded():
    # the regress examples keep the whole simulation (their predictions are bit-identical)
    for name in ("1f1b-pp4-dp2", "interleaved-pp8-vpp5"):
        table = replace(build_cost_table(scenario(name, 96 if "pp8" in name else 32)))
        assert fold.simulate_step(table).folded is None


def test_no_steady_state_is_refused_not_run_for_ever(monkeypatch, capsys):
    # a step that never folds and is too long to simulate whole: one line, exit 2, after bounded sampling
    monkeypatch.setattr(fold, "_extrapolate", lambda res, counts, m: None)
    monkeypatch.setattr(fold, "MAX_WHOLE_PASSES", 20_000)      # samples of up to 5,000 passes
    code = main(["predict", "examples/mixtral-8x7b-h100.yaml", "--global-batch", str(16 * 300_000)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: global_batch:"), err
    # below the bound the whole step is simulated instead (exact, as before folding)
    sc = scenario("1f1b-pp4-dp2", 403)
    assert predict(sc).engine.get("folded") is None


def test_report_draws_a_long_step_with_fewer_microbatches():
    from trainsim.reports.whatif import step_timeline
    sc = scenario("moe-ep8-pp4", 200_003)
    events, step_s, shown = step_timeline(sc, None)
    table = build_cost_table(sc)
    assert shown == fold.representative_count(table) < 200_003 and shown >= 8 * table.pp
    assert events and step_s == simulate(replace(table, num_microbatches=shown)).step_time_s
