"""`trainsim report`: the README's main job end to end, the HTML is self-contained with every figure a
real PNG, the Markdown twin's figures exist, numbers in the report are the engine's, the timeline figure's
idle time is the textbook bubble, and --plan / --measured work (the latter on a real `execute` result)."""

import argparse
import base64
import json
import re
import struct
from html.parser import HTMLParser
from pathlib import Path

import pytest

from trainsim.cli.main import main
from trainsim.reports import plots
from trainsim.reports.tables import fmt_time
from trainsim.reports.timeline import events_from_engine
from trainsim.simulator import goodput as gp
from trainsim.simulator.costtable import uniform_table
from trainsim.simulator.engine import simulate
from trainsim.simulator.predict import predict
from trainsim.specs import build_scenario, load_scenario_file

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
MEASURED = Path(__file__).parent / "data" / "report" / "execute-tiny-gpt-cpu.json"


class _Imgs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs, self.external, self.h2 = [], [], []
        self._in_h2 = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a)
        for key in ("src", "href"):
            v = a.get(key) or ""
            if re.match(r"^(https?:)?//", v) or (tag == "link" and v):
                self.external.append((tag, v))
        if tag == "script" and a.get("src"):
            self.external.append((tag, a["src"]))
        self._in_h2 = tag == "h2"

    def handle_data(self, data):
        if self._in_h2:
            self.h2.append(data.strip())
            self._in_h2 = False


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def check_self_contained(html_path: Path) -> _Imgs:
    p = _Imgs()
    p.feed(html_path.read_text(encoding="utf-8"))
    assert not p.external, f"external resources: {p.external}"
    for img in p.imgs:
        src = img["src"]
        assert src.startswith("data:image/png;base64,")
        w, h = png_size(base64.b64decode(src.split(",", 1)[1]))
        assert w >= 300 and h >= 200
        assert img.get("alt")
    return p


@pytest.fixture(scope="module")
def main_job(tmp_path_factory):
    out = tmp_path_factory.mktemp("report70")
    assert main(["report", str(EXAMPLES / "llama3-70b-h100.yaml"), "--out", str(out)]) == 0
    return out


def test_main_job_writes_a_self_contained_report(main_job):
    p = check_self_contained(main_job / "index.html")
    names = {i["alt"] for i in p.imgs}
    assert {"Pipeline timeline of one step", "Memory per pipeline stage", "MFU heatmap over (TP, PP)",
            "Weak and strong scaling", "Time to train vs checkpoint interval"} <= names
    for title in ("Scenario", "One training step", "Memory per GPU", "MFU over tensor and pipeline parallelism",
                  "Weak and strong scaling", "Ranked layouts", "Time to train, cost and goodput"):
        assert title in p.h2


def test_markdown_twin_references_existing_figures(main_job):
    md = (main_job / "report.md").read_text(encoding="utf-8")
    assert md.startswith("# trainsim what-if report: llama3-70b on 1024 × H100")
    assert "<title>trainsim what-if report: llama3-70b" in (main_job / "index.html").read_text(encoding="utf-8")
    refs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert len(refs) >= 5
    for ref in refs:
        data = (main_job / ref).read_bytes()
        png_size(data)
    assert "## Ranked layouts" in md and "| # | GPUs | layout |" in md


def test_report_numbers_are_the_engines(main_job):
    scn = build_scenario(load_scenario_file(EXAMPLES / "llama3-70b-h100.yaml"))
    pred = predict(scn)
    html = (main_job / "index.html").read_text(encoding="utf-8")
    assert f"The discrete-event engine predicts {fmt_time(pred.step_time_s)} per step" in html
    assert f"{100 * pred.mfu:.1f}%" in html
    # Ranked table: up to 10 engine-confirmed rows.
    table = html.split('id="layouts"')[1].split("</section>")[0]
    assert 1 <= table.count("<td>engine</td>") <= 10


@pytest.mark.parametrize("sched", ["gpipe", "1f1b"])
def test_timeline_bubbles_are_the_textbook_bubble(sched):
    """Uniform stages, free communication: the idle time the figure hatches is (p-1)/(m+p-1) of the span."""
    p, m = 4, 8
    table = uniform_table(p, m, schedule=sched, fwd_s=1.0, bwd_input_s=1.0, bwd_weight_s=1.0)
    res = simulate(table, record=True)
    events = events_from_engine(res.trace, table)
    span = res.pipeline_span_s
    for s in range(p):
        busy = [(e.start_s, e.dur_s) for e in events if e.stage == s and e.stream == "compute" and e.kind != "optimizer"]
        idle = sum(d for _, d in plots._idle_gaps(busy, 0.0, span))
        assert idle / span == pytest.approx((p - 1) / (m + p - 1), rel=1e-9)
    fig = plots.timeline_figure(events, p, step_time_s=res.step_time_s)
    ax = fig.axes[0]
    assert ax.get_title() and "time" in ax.get_xlabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "forward" in labels and "idle (bubble)" in labels
    plots.figure_png(fig)


def test_every_figure_has_title_units_and_legend():
    figs = [
        plots.memory_figure([{"weights": 1e9, "grads": 1e9, "optimizer": 2e9, "activations": 3e9, "other": 1e8}] * 2, 8e10),
        plots.scaling_figure([{"gpus": 8, "tokens_per_s": 1e4, "mfu": 0.5}, {"gpus": 16, "tokens_per_s": 1.9e4, "mfu": 0.48}],
                             [{"gpus": 8, "tokens_per_s": 1e4, "mfu": 0.5}, {"gpus": 16, "tokens_per_s": 2e4, "mfu": 0.5}]),
        plots.goodput_figure([(60.0, 1e6), (600.0, 9e5), (6000.0, 1e6)], 600.0, 590.0, 8e5),
        plots.predicted_vs_measured_figure([("step", 1.0, 1.2)], "seconds"),
        plots.pareto_figure([{"gpus": 8, "time_to_train_s": 1e6, "gpu_hours": 10.0}], [{"gpus": 8, "time_to_train_s": 1e6, "gpu_hours": 10.0}]),
    ]
    for fig in figs:
        ax = fig.axes[0]
        assert ax.get_title()
        assert "(" in ax.get_ylabel() or ax.get_ylabel() in ("seconds",)
        assert ax.get_legend() is not None
        plots.figure_png(fig)
    hm = plots.mfu_heatmap({(1, 1): 0.4, (2, 1): "OOM"}, [1, 2], [1], marked=(1, 1))
    assert hm.axes[0].get_title() and "TP" in hm.axes[0].get_xlabel() and "MFU (%)" in hm.axes[1].get_ylabel()
    plots.figure_png(hm)


def test_report_from_a_plan(tmp_path, capsys):
    args = ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8:16", "--global-batch", "64",
            "--seq-len", "4096", "--top", "3", "--max-micro-batch", "2", "--schedule", "1f1b", "--json"]
    assert main(args) == 0
    plan_json = json.loads(capsys.readouterr().out)
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan_json))
    out = tmp_path / "rep"
    assert main(["report", "--plan", str(plan_path), "--out", str(out)]) == 0
    p = check_self_contained(out / "index.html")
    assert "Pareto front" in {i["alt"] for i in p.imgs}
    best = plan_json["rows"][0]
    html = (out / "index.html").read_text(encoding="utf-8")
    assert f"TP{best['tp']} PP{best['pp']} DP{best['dp']}" in html
    # scenario flags would change the plan's layout: refused, one line
    capsys.readouterr()
    assert main(["report", "--plan", str(plan_path), "--tp", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: plan:") and "--tp" in err
    # the plan as written: no drift note; its best row's step edited: the note names both figures
    assert "The plan file records" not in (out / "report.md").read_text(encoding="utf-8")
    plan_json["rows"][0]["step_time_s"] *= 1.5
    plan_path.write_text(json.dumps(plan_json))
    assert main(["report", "--plan", str(plan_path), "--no-plan", "--out", str(tmp_path / "edited")]) == 0
    md = (tmp_path / "edited" / "report.md").read_text(encoding="utf-8")
    assert "The plan file records" in md and "rank 1" in md


def test_report_of_a_plan_keeps_the_plans_goodput_settings(tmp_path, capsys):
    """Failure rate, restart time and storage bandwidth of the plan's request, unless a flag says otherwise."""
    from trainsim.cli.report import _goodput_knobs
    args = ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "64",
            "--seq-len", "4096", "--top", "1", "--max-micro-batch", "1", "--schedule", "1f1b", "--tokens", "100B",
            "--failure-rate-per-gpu-hour", "0.01", "--storage-write-gbps", "1", "--restart-s", "900", "--json"]
    assert main(args) == 0
    plan_json = json.loads(capsys.readouterr().out)
    req = plan_json["request"]
    parser = argparse.ArgumentParser()
    from trainsim.cli import report as report_cmd
    sub = parser.add_subparsers()
    report_cmd.register(sub)
    ns = parser.parse_args(["report", "--out", "x"])
    knobs = _goodput_knobs(ns, req)
    assert knobs == {"failure_rate_per_gpu_hour": 0.01, "checkpoint_write_s": None, "storage_write_Bps": 1e9,
                     "restart_s": 900.0}
    ns = parser.parse_args(["report", "--out", "x", "--restart-s", "60"])
    assert _goodput_knobs(ns, req)["restart_s"] == 60.0
    assert _goodput_knobs(parser.parse_args(["report", "--out", "x"]), {})["restart_s"] == gp.DEFAULT_RESTART_S
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan_json))
    assert main(["report", "--plan", str(plan_path), "--out", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    # the time-to-train section's own goodput (not the ranked table's copy of the plan rows)
    assert f"the run keeps {100 * plan_json['rows'][0]['goodput']:.1f}% of its time productive" in md
    assert main(["report", "--plan", str(plan_path), "--out", str(tmp_path / "rep2"), "--restart-s", "20000",
                 "--failure-rate-per-gpu-hour", "0.5"]) == 0
    md2 = (tmp_path / "rep2" / "report.md").read_text(encoding="utf-8")
    assert f"the run keeps {100 * plan_json['rows'][0]['goodput']:.1f}% of its time productive" not in md2


def test_report_with_a_real_execute_result(tmp_path):
    measured = json.loads(MEASURED.read_text())
    out = tmp_path / "cpu"
    assert main(["report", str(EXAMPLES / "tiny-gpt-cpu.yaml"), "--measured", str(MEASURED), "--out", str(out)]) == 0
    p = check_self_contained(out / "index.html")
    assert {"Predicted vs measured step time", "Predicted vs measured memory"} <= {i["alt"] for i in p.imgs}
    html = (out / "index.html").read_text(encoding="utf-8")
    pred_s, meas_s = measured["predicted"]["step_time_s"], measured["measured"]["step_time_s"]
    assert f"{100 * (pred_s - meas_s) / meas_s:+.1f}%" in html
    assert "Predicted step time: the execute result&#39;s own prediction" in html or \
        "Predicted step time: the execute result's own prediction" in html
    w_pred = measured["predicted"]["per_stage"][0]["params"] / 2**20
    assert f"{w_pred:.4g} MiB" in html


@pytest.mark.parametrize("extra, field", [
    (["--plan", "missing.json"], "plan"),
    (["--measured", "examples/llama3-70b-h100.yaml"], "measured"),
])
def test_report_bad_input_is_one_line(tmp_path, capsys, extra, field):
    args = ["report", "--out", str(tmp_path / "x")] + extra
    if extra[0] == "--measured":
        args = ["report", str(EXAMPLES / "tiny-gpt-cpu.yaml"), "--no-plan", "--out", str(tmp_path / "x"),
                "--measured", str(ROOT / extra[1])]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {field}")


def _edited(measured: dict, path: str, value) -> dict:
    """A deep copy of ``measured`` with the value at dotted ``path`` replaced."""
    out = json.loads(json.dumps(measured))
    *keys, last = path.split(".")
    node = out
    for k in keys:
        node = node[k]
    node[last] = value
    return out


@pytest.mark.parametrize("path, value, field", [
    ("predicted.prediction.model", {"total_params": 8_030_261_248}, "measured.predicted.prediction.model.total_params"),
    ("predicted.prediction.model", {"total_params": 1e400}, "measured"),  # Infinity: refused as it is read
    ("predicted.prediction.model", {"total_params": True}, "measured.predicted.prediction.model.total_params"),
    ("predicted.prediction", [1], "measured.predicted.prediction"),
    ("predicted.prediction.tokens_per_s", 1.0, "measured.predicted.prediction"),
    ("device", "cuda", "measured.device"),
    ("measured.step_time_s", 1e-300, "measured.measured.step_time_s"),
    ("measured.step_time_min_s", 100.0, "measured.measured.step_time_min_s"),
])
def test_an_execute_result_of_another_run_is_refused(tmp_path, capsys, path, value, field):
    """The bundled execute result of tiny-gpt on the CPU, one field changed: another model's parameter count, an
    unreadable count or prediction, another token count, another device, a step shorter than one kernel launch
    or a minimum above the median -- each refused in one line naming the field, never shown as this run's."""
    bad = tmp_path / "exec.json"
    bad.write_text(json.dumps(_edited(json.loads(MEASURED.read_text()), path, value)))
    code = main(["report", str(EXAMPLES / "tiny-gpt-cpu.yaml"), "--no-plan", "--out", str(tmp_path / "x"),
                 "--measured", str(bad)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith(f"error: {field}"), err


def test_measured_file_that_is_not_an_execute_result(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"step_time_s": 1.0}))
    code = main(["report", str(EXAMPLES / "tiny-gpt-cpu.yaml"), "--no-plan", "--out", str(tmp_path / "x"),
                 "--measured", str(bad)])
    assert code == 2
    assert capsys.readouterr().err.startswith("error: measured:")


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_every_example_scenario_resolves_and_fits(name):
    scn = build_scenario(load_scenario_file(EXAMPLES / name))
    pred = predict(scn, fast=True)
    assert pred.step_time_s > 0
    from trainsim.simulator.planner import peak_memory_bytes
    assert peak_memory_bytes(scn) <= scn.cluster.gpu.memory_bytes


def test_llama3_405b_example_is_the_validated_meta_run():
    """examples/llama3-405b-h100-16k.yaml describes the run of validation row l3_405b_16k (Llama 3 paper,
    arXiv:2407.21783 Sec. 3.3.2, Table 4): FSDP sharding optimizer states and gradients (ZeRO-2, not the
    distributed optimizer's ZeRO-1 with a whole fp32 gradient buffer), fp32 gradient reduce-scatter, 8 chunks per
    pipeline rank. Same model, layout and training settings, so the same prediction; it fits 80 GB."""
    from trainsim.simulator.planner import peak_memory_bytes
    from trainsim.validation.common_run_cases import load_llama3
    example = build_scenario(load_scenario_file(EXAMPLES / "llama3-405b-h100-16k.yaml"))
    row = next(c for c in load_llama3().cases if c.row_id == "l3_405b_16k").scenario
    assert example.layout == row.layout
    # the preset's name, context window and published size aside, the same architecture
    ignore = {"name", "max_seq_len", "published_params"}
    arch = [{k: v for k, v in m.model_dump().items() if k not in ignore} for m in (example.model, row.model)]
    assert arch[0] == arch[1]
    keys = ("framework", "effective_zero", "schedule", "recompute", "sequence_parallel", "global_batch",
            "micro_batch", "seq_len", "dtype", "grad_bytes")
    assert {k: getattr(example.training, k) for k in keys} == {k: getattr(row.training, k) for k in keys}
    assert example.training.framework == "torch" and example.training.effective_zero == 2
    assert predict(example, fast=True).step_time_s == pytest.approx(predict(row, fast=True).step_time_s, rel=1e-9)
    assert peak_memory_bytes(example) <= 80e9
