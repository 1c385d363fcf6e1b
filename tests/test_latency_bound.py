"""A latency-bound step: the collectives' fixed costs (NCCL launch, base and per-step latency) as a share of the step,
held against the closed form of the calls a Megatron TP layout issues, and said in predict's notes and the report."""

from __future__ import annotations

import pytest

from trainsim.simulator.predict import LATENCY_BOUND_SHARE, predict
from trainsim.specs import build_scenario

# NCCL tuning.cc (v2.20/v2.21): ring LL baseLat 6.6 us + 2(n-1) = 14 NVLink steps x hwLat 0.6 us, plus one 5 us launch
# per call (nccl-tests#123); the ring LL is the fastest of NCCL's choices for these sub-MB all-reduces on 8 A100s.
RING_LL_8_US = 6.6 + 14 * 0.6 + 5.0


def tp8(hidden=512, layers=8, seq=256, mb=1, micro_batches=8, host_issue="cuda_graphs"):
    model = {"name": "tiny-gpt", "num_layers": layers, "hidden": hidden, "num_heads": 8, "ffn_hidden": 4 * hidden,
             "vocab_size": 32000, "max_seq_len": seq}
    training = {"seq_len": seq, "global_batch": micro_batches * mb, "micro_batch": mb, "framework": "megatron-2022",
                "host_issue": host_issue}
    return build_scenario({"model": model, "cluster": "dgx-a100", "gpus": 8, "layout": {"tp": 8},
                           "training": training})


def test_fixed_costs_are_the_tp_calls_closed_form():
    """Megatron (2022) TP without sequence parallelism: two all-reduces forward and two backward per block, all on
    the critical path, so the fixed costs add calls x per-call latency to the step; per micro-batch also the
    vocabulary-parallel layers' five (simulator/vocab_tp.py: the embedding's, the cross-entropy's three and the
    logits' input gradient, which hides partly behind its weight-gradient GEMM)."""
    s = tp8()
    pred = predict(s, fixed_costs=True)
    calls = (4 * s.model.num_layers + 5) * s.num_microbatches
    assert pred.extra["collective_fixed_cost_s"] == pytest.approx(calls * RING_LL_8_US * 1e-6, rel=0.02)
    share = pred.extra["collective_fixed_cost_s"] / pred.step_time_s
    assert share >= LATENCY_BOUND_SHARE
    assert any(w.startswith(f"latency-bound: collectives' fixed costs (each call's launch and base latency plus per-step latency: ring "
                            f"2(n-1) steps, tree 2 log n) take {100 * share:.0f} % of the step") for w in pred.warnings)


def test_large_messages_are_not_latency_bound():
    """Wide blocks and long sequences: the same call count, but bytes dominate each call."""
    pred = predict(tp8(hidden=4096, layers=2, seq=4096, micro_batches=2), fixed_costs=True)
    assert pred.extra["collective_fixed_cost_s"] / pred.step_time_s < 0.05
    assert not any(w.startswith("latency-bound") for w in pred.warnings)


def test_a_host_bound_step_hides_the_fixed_costs():
    """Eager issue of tiny kernels: the GPU already waits for its host, so removing the collectives' fixed costs
    only lengthens that wait -- the step does not shrink by them."""
    eager = predict(tp8(host_issue="eager"), fixed_costs=True)
    assert any("GPU idle waiting for the host" in w for w in eager.warnings)
    graphs = predict(tp8(), fixed_costs=True)
    assert eager.extra["collective_fixed_cost_s"] < 0.5 * graphs.extra["collective_fixed_cost_s"]


def test_fixed_costs_only_on_request():
    pred = predict(tp8())
    assert "collective_fixed_cost_s" not in pred.extra
    assert not any("fixed costs" in w for w in pred.warnings)


def test_predict_cli_and_report_say_it(monkeypatch, capsys, tmp_path):
    import yaml

    from trainsim.cli import main as cli
    from trainsim.reports.whatif import _bound_sentence
    s = tp8()
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"model": s.model.model_dump(exclude_none=True), "cluster": "dgx-a100",
                                    "gpus": 8, "layout": {"tp": 8}, "training": {
                                        "seq_len": 256, "global_batch": 8, "micro_batch": 1,
                                        "framework": "megatron-2022", "host_issue": "cuda_graphs"}}))
    assert cli.main(["predict", str(path)]) == 0
    out = capsys.readouterr().out
    assert "collectives' fixed costs" in out and "latency-bound" in out
    pred = predict(s, fixed_costs=True)
    sentence = _bound_sentence(pred)
    assert "GPU idle waiting for the host: 0.0% of the step." in sentence
    assert "(latency-bound)" in sentence


def test_plan_rows_say_latency_bound():
    """`plan` confirms rows with the same prediction: a small model data-parallel over 64 A100s with ZeRO-3 (a
    gather and a reduce-scatter per block per micro-batch over 8 nodes) carries the note, and its step includes
    those fixed costs."""
    from trainsim.simulator.planner import PlanRequest, plan
    from trainsim.simulator.search_space import SearchLimits
    from trainsim.specs import load_cluster
    model = tp8().model
    req = PlanRequest(model=model, cluster=load_cluster("dgx-a100"), gpu_counts=(64,), global_batch=64, seq_len=256,
                      top_k=1, limits=SearchLimits(fixed={"tp": 1, "pp": 1, "cp": 1, "ep": 1, "micro_batch": 1,
                                                          "zero": 3},
                                                   training_extra={"framework": "megatron",
                                                                   "host_issue": "cuda_graphs"}))
    row = plan(req).rows[0]
    assert any(w.startswith("latency-bound: ") for w in row.warnings)


def test_predict_and_report_call_a_step_host_bound_at_one_bar():
    """predict's warning and the what-if report's sentence label a step host-bound from the same share of GPU idle
    waiting for the host (predict.HOST_BOUND_SHARE): a one-stage step of 1 s with idle just at and just below it."""
    from types import SimpleNamespace

    from trainsim.reports.whatif import _bound_sentence
    from trainsim.simulator.predict import HOST_BOUND_SHARE, host_idle_warning

    s = tp8()
    for idle, labelled in ((HOST_BOUND_SHARE, True), (0.99 * HOST_BOUND_SHARE, False)):
        chunk = SimpleNamespace(host_idle_fwd_s=idle, host_idle_bwd_s=0.0)
        table = SimpleNamespace(num_microbatches=1, stages=[SimpleNamespace(chunks=[chunk], optimizer_host_idle_s=0.0)])
        pred = SimpleNamespace(step_time_s=1.0, breakdown_s={"host_idle": idle}, extra={})
        assert (host_idle_warning(s, table, 1.0) is not None) is labelled
        assert ("(host-bound)" in _bound_sentence(pred)) is labelled
