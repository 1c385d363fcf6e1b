"""What-if levers (simulator/levers.py, `predict --explain`) against closed forms and the layout rules."""

from __future__ import annotations

import json

import pytest

from trainsim.cli.main import main
from trainsim.simulator.levers import changed, deeper_interleaving, explain, variants
from trainsim.simulator.predict import predict
from trainsim.specs import build_scenario

# A transformer whose embedding and logits are negligible beside its blocks (vocab 256): its pipeline stages are
# uniform, the setting of the textbook bubble formula (SC21 Sec. 2.2; pipeline_bubble.csv f_sc21_gpipe, f_sc21_1f1b).
UNIFORM = {"name": "uniform-4k", "num_layers": 16, "hidden": 4096, "num_heads": 32, "ffn_hidden": 16384,
           "vocab_size": 256, "position_embedding": "rope", "max_seq_len": 8192, "bias": False}


def scenario(model=None, **kw):
    raw = {"model": model or "llama3-8b", "cluster": kw.pop("cluster", "dgx-h100"), "gpus": kw.pop("gpus", 16),
           "layout": {k: kw.pop(k) for k in ("tp", "pp", "dp", "cp", "ep", "vpp") if k in kw},
           "training": {"seq_len": kw.pop("seq_len", 2048), "global_batch": kw.pop("global_batch", 32), **kw}}
    return build_scenario(raw, {})


def lever(expl, name):
    return next(lv for lv in expl.levers if lv.lever == name)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("engine", [False, True])
@pytest.mark.parametrize("p,m", [(4, 8), (2, 6)])
def test_no_bubble_gain_is_the_bubble_fraction(schedule, engine, p, m):
    # Uniform stages, free network: the bubble is (p-1)/(m+p-1) of the pipeline span (SC21 eq. for GPipe/1F1B);
    # removing it gains exactly that, and the step differs from the span only by the optimizer step.
    scn = scenario(UNIFORM, gpus=p, pp=p, seq_len=4096, global_batch=m, schedule=schedule)
    expl = explain(scn, engine=engine, ideal_network=True)
    base = predict(scn, fast=not engine, ideal_network=True)
    lv = lever(expl, "no pipeline bubble")
    bubble = (p - 1) / (m + p - 1)
    assert lv.gain_s == pytest.approx(bubble * base.breakdown_s["pipeline_span"], rel=0.005)
    assert lv.gain_fraction == pytest.approx(bubble, abs=0.02)
    assert lv.peak_bytes == base.peak_bytes  # a ceiling on time; the schedule's memory as it is


def test_ideal_network_lever_gains_nothing_on_an_ideal_network(capsys):
    code = main(["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--tp", "2", "--pp",
                 "2", "--seq-len", "2048", "--global-batch", "32", "--ideal-network", "--explain", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    net = next(e for e in out["explain"] if e["lever"] == "ideal network")
    assert net["gain_s"] == 0.0 and net["step_time_s"] == out["explain"][0]["baseline_step_time_s"]


def test_ideal_network_lever_equals_ideal_network_prediction():
    scn = scenario(tp=2, pp=2)
    expl = explain(scn)
    ideal = predict(scn, fast=True, ideal_network=True)
    base = predict(scn, fast=True)
    lv = lever(expl, "ideal network")
    assert lv.step_time_s == ideal.step_time_s
    assert lv.gain_fraction == pytest.approx(1 - ideal.step_time_s / base.step_time_s)
    assert expl.baseline_step_time_s == base.step_time_s


def test_ranked_by_gain_and_not_applicable_last():
    scn = scenario(tp=2, pp=2, sequence_parallel=True)
    expl = explain(scn)
    gains = [lv.gain_s for lv in expl.levers if lv.applicable]
    assert gains == sorted(gains, reverse=True)
    flags = [lv.applicable for lv in expl.levers]
    assert flags == sorted(flags, reverse=True)  # every applicable lever before every listed reason


def test_lever_that_does_not_fit_is_marked():
    # Llama 3 70B TP4 PP8 VPP5 (the README example): twice the micro-batch doubles the in-flight activations
    # past 80 GiB; the lever's peak is the variant's own prediction.
    scn = build_scenario({"model": "llama3-70b", "cluster": "dgx-h100", "gpus": 1024,
                          "layout": {"tp": 4, "pp": 8, "vpp": 5},
                          "training": {"seq_len": 8192, "global_batch": 1024, "schedule": "interleaved",
                                       "sequence_parallel": True, "distributed_optimizer": True}}, {})
    expl = explain(scn)
    lv = lever(expl, "twice the micro-batch")
    other = predict(changed(scn, training={"micro_batch": 2}), fast=True)
    assert lv.peak_bytes == other.peak_bytes > scn.cluster.gpu.memory_bytes
    assert lv.fits is False and lv.free_bytes < 0
    assert lever(expl, "next ZeRO stage").peak_bytes < expl.baseline_peak_bytes  # ZeRO-2 shards the gradients
    # 80 layers on pp 8: vpp 6..9 leave 48..72 virtual stages that divide neither 80 nor 82; 10 does.
    assert lever(expl, "one more interleaving depth").change.startswith("vpp 5 -> 10")


def test_not_applicable_levers_give_their_reason():
    scn = scenario(tp=1, pp=1, framework="megatron-2021", recompute="full", zero=0)
    by = {v.lever: v for v in variants(scn)}
    assert "pp=1" in by["no pipeline bubble"].reason
    assert "pp=1" in by["one more interleaving depth"].reason
    assert "tp=1" in by["TP comm overlap"].reason
    assert by["DP comm overlap"].scenario.training.overlap_grad_reduce is True  # Megatron 2021 reduces after backward
    assert "already full" in by["recompute one level heavier"].reason
    # one level lighter than full is selective recompute, which Megatron-LM of 2021 predates (specs.framework_era)
    assert by["recompute one level lighter"].scenario is None
    assert "predates it" in by["recompute one level lighter"].reason
    assert by["next ZeRO stage"].scenario.training.effective_zero == 1
    lighter = {v.lever: v for v in variants(scenario(tp=1, pp=1, framework="megatron-2022", recompute="full",
                                                     zero=0))}["recompute one level lighter"]
    assert lighter.scenario.training.recompute == "selective"


def test_interleaving_refused_by_the_resolver_gives_its_reason():
    # Global batch 12 on dp 4: 3 micro-batches, which Megatron's interleaved schedule cannot split over pp=2.
    scn = scenario(gpus=8, pp=2, global_batch=12, dp=4)
    v = deeper_interleaving(scn)
    assert v.scenario is None and "num_microbatches" in v.reason


def test_tp_overlap_lever_is_the_tp_comm_overlap_setting():
    scn = scenario(tp=4, pp=1, gpus=8, sequence_parallel=True)
    expl = explain(scn)
    lv = lever(expl, "TP comm overlap")
    on = predict(changed(scn, training={"tp_comm_overlap": True}), fast=True)
    assert lv.step_time_s == on.step_time_s and lv.gain_s > 0


@pytest.mark.parametrize("extra", [["--jitter", "0.1"], ["--straggler", "0.01:1.5"]])
def test_explain_with_monte_carlo_refused(capsys, extra):
    code = main(["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--explain", *extra])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: explain:")


def test_explain_engine_with_fast_refused(capsys):
    code = main(["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--explain-engine",
                 "--fast"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "explain_engine" in err


def test_table_lists_every_lever(capsys):
    code = main(["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--tp", "2", "--pp",
                 "2", "--seq-len", "2048", "--global-batch", "32", "--explain"])
    out = capsys.readouterr().out
    assert code == 0
    for name in ("ideal network", "no pipeline bubble", "one more interleaving depth", "TP comm overlap",
                 "DP comm overlap", "recompute one level", "twice the micro-batch", "next ZeRO stage"):
        assert name in out


def test_report_section_is_the_same_table():
    from trainsim.reports.whatif import levers_section
    from trainsim.simulator.levers import explain_rows
    scn = scenario(tp=2, pp=2, sequence_parallel=True)
    sec = levers_section(scn, None)
    expl = explain(scn)
    assert sec.id == "levers" and sec.tables[0].rows == explain_rows(expl)
    # the paragraph names the best real setting that fits, passing over the two ceilings ranked above it
    best = next(lv for lv in expl.levers if lv.kind == "setting" and lv.fits and lv.gain_s > 0)
    assert expl.levers[0].kind == "ceiling" and f"{best.lever} ({best.change})" in sec.paragraphs[0]


def test_compile_lever_is_the_compile_setting_and_only_where_the_framework_compiles():
    """torch.compile on for torchtitan's framework gives the prediction of the same scenario with compile true;
    Megatron-Core does not compile its blocks: not applicable, with the reason."""
    scn = scenario(framework="torch", zero=3)
    lv = lever(explain(scn), "torch.compile")
    assert lv.step_time_s == pytest.approx(predict(changed(scn, training={"compile": True}), fast=True).step_time_s)
    mc = lever(explain(scenario()), "torch.compile")
    assert mc.step_time_s is None and "does not compile" in mc.reason


def test_float8_all_gather_lever_only_for_torchao_fp8():
    """Listed where torchao runs the fp8 linears (framework torch, dtype fp8): the prediction with float8 all-gather
    and precomputed scales; absent for Transformer Engine fp8 and for bf16."""
    scn = scenario(framework="torch", zero=3, dtype="fp8")
    lv = lever(explain(scn), "float8 all-gather")
    on = changed(scn, training={"float8_all_gather": True, "float8_precompute_scale": True})
    assert lv.step_time_s == pytest.approx(predict(on, fast=True).step_time_s)
    for other in (scenario(dtype="fp8"), scenario(framework="torch", zero=3)):
        assert "float8 all-gather" not in {v.lever for v in variants(other)}
