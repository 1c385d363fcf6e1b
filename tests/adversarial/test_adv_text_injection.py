"""Text from a file reaching the console, a report or stderr: a terminal escape sequence, a lone UTF-16 surrogate or
live HTML in a model, cluster or scenario name. YAML's "\\e" and JSON's "\\u001b" escapes carried ESC through the
safe reader into the predict table (and into report.md, index.html and matplotlib's warnings on stderr); a YAML
"\\ud83d\\ude80" pair decoded to two lone surrogates that crashed the JSON serializer with a traceback; a name such as
<img onerror=...> was live HTML in report.md. Each is refused on reading (control characters, surrogates) or
written as text (``<`` as ``&lt;`` in Markdown), and a name in a script the plot font lacks does not print
matplotlib's glyph warnings."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, assert_refused, run_cli

PROFILE = REPO / "benchmarks" / "data" / "profile_h200.json"
SC21 = REPO / "trainsim" / "data" / "validation" / "megatron_sc21_table1.csv"
HF_LLAMA = REPO / "tests" / "data" / "hf" / "llama3-8b-config.json"


@pytest.mark.parametrize("suffix, text, where", [
    (".yaml", 'model: {preset: tiny-gpt, name: "\\e[31mred"}\ncluster: cpu-host\ngpus: 1\n', "model.name"),
    (".yaml", 'name: "x\\e]0;title\\a"\nmodel: tiny-gpt\ncluster: cpu-host\ngpus: 1\n', "name"),
    (".json", '{"model": "tiny-gpt", "cluster": {"preset": "cpu-host", "name": "\\u001b[2J"}, "gpus": 1}', "cluster.name"),
    (".json", '{"model": "tiny-gpt", "cluster": "cpu-host", "gpus": 1, "description": "a\\u009b31mb"}', "description"),
    (".json", '{"model": "tiny-gpt", "cluster": "cpu-host", "gpus": 1, "na\\u0007me": 1}', "key"),
    (".yaml", 'name: "\\ud83d\\ude80"\nmodel: tiny-gpt\ncluster: cpu-host\ngpus: 1\n', "surrogate"),
    (".json", '{"model": "tiny-gpt", "cluster": {"preset": "cpu-host", "name": "a\\ud800"}, "gpus": 1}', "surrogate"),
    # YAML's !!binary is bytes, which pydantic decodes into a name: ESC [31m RED past the text check
    (".yaml", 'model: {preset: tiny-gpt, name: !!binary G1szMW1SRUQ=}\ncluster: cpu-host\ngpus: 1\n',
     "model.name is binary data"),
    (".yaml", 'model: tiny-gpt\ncluster: cpu-host\ngpus: 1\ntraining: {? !!binary c2VxX2xlbg== : 128}\n',
     "training.b'seq_len' is binary data"),
])
def test_control_characters_and_surrogates_in_a_scenario_are_refused(tmp_path, suffix, text, where):
    f = tmp_path / f"s{suffix}"
    f.write_text(text, encoding="utf-8")
    for cmd in (["predict", f, "--fast"], ["plan", f], ["report", f, "--no-plan", "--out", tmp_path / "r"]):
        r = run_cli(cmd)
        assert_refused(r, "scenario: ")
        assert where in r.err and "\x1b" not in r.err
    assert not (tmp_path / "r").exists()


def test_a_hugging_face_name_and_a_profile_string_with_an_escape_are_refused(tmp_path):
    cfg = json.loads(HF_LLAMA.read_text())
    cfg["_name_or_path"] = "meta-llama\x1b[8m"
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps(cfg))
    assert_refused(run_cli(["predict", "--model", hf, "--cluster", "dgx-h100", "--fast"]), "model: ")
    prof = json.loads(PROFILE.read_text())
    prof["fingerprint"]["device_name"] = "NVIDIA H200\x1b[2J"
    p = tmp_path / "profile.json"
    p.write_text(json.dumps(prof))
    r = run_cli(["predict", "--model", "llama3-8b", "--cluster", "hgx-h200", "--fast", "--calibration", p])
    assert_refused(r, "calibration: ")
    assert "fingerprint.device_name" in r.err


def _rows():
    return list(csv.DictReader(SC21.open(encoding="utf-8")))[:2]


def _write(path: Path, rows: list[dict], bom: bool = False) -> Path:
    with path.open("w", newline="", encoding="utf-8-sig" if bom else "utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def test_a_dataset_cell_with_an_escape_is_refused(tmp_path):
    rows = _rows()
    rows[1]["description"] = "Table 1\x1b[31m"
    r = run_cli(["validate", "--dataset", _write(tmp_path / "d.csv", rows)])
    assert_refused(r, "dataset: ")
    assert "row 3, column 'description'" in r.err


def test_tabs_newlines_and_windows_line_breaks_in_text_are_read(tmp_path):
    """A notes cell typed with a tab, a newline or a spreadsheet's CR LF line break, and a scenario description
    holding them, read as before; a lone carriage return (it returns the cursor over the text before it) does not."""
    rows = _rows()
    rows[0]["notes"] = "first\tsecond\r\nthird\nfourth"
    r = run_cli(["validate", "--dataset", _write(tmp_path / "d.csv", rows), "--json"])
    assert r.code == 0, r.err
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"model": "tiny-gpt", "cluster": "cpu-host", "gpus": 1, "training": {"seq_len": 128},
                             "description": "a\tb\r\nc\nd"}))
    assert run_cli(["predict", f, "--fast"]).code == 0
    f.write_text(json.dumps({"model": "tiny-gpt", "cluster": "cpu-host", "gpus": 1, "training": {"seq_len": 128},
                             "description": "a\rb"}))
    assert_refused(run_cli(["predict", f, "--fast"]), "scenario: ")


def test_a_dataset_saved_with_a_byte_order_mark_is_read(tmp_path):
    """Excel's "CSV UTF-8" starts with a BOM; its first column was read as '\\ufeffrow_id' ("has no row_id
    column")."""
    plain = run_cli(["validate", "--dataset", _write(tmp_path / "a.csv", _rows()), "--json"])
    bom = run_cli(["validate", "--dataset", _write(tmp_path / "b.csv", _rows(), bom=True), "--json"])
    assert plain.code == bom.code == 0, bom.err
    assert [r["predicted"] for r in json.loads(bom.out)["rows"]] == [r["predicted"] for r in json.loads(plain.out)["rows"]]


def test_a_datasets_trailing_rows_of_bare_commas_are_no_rows(tmp_path):
    """A spreadsheet saves trailing empty rows as lines of commas: they are dropped, not refused as rows with an
    empty row_id."""
    path = _write(tmp_path / "d.csv", _rows())
    plain = run_cli(["validate", "--dataset", path, "--json"])
    path.write_text(path.read_text() + "," * (len(_rows()[0]) - 1) + "\r\n" + "," * (len(_rows()[0]) - 1) + "\r\n")
    trailing = run_cli(["validate", "--dataset", path, "--json"])
    assert plain.code == trailing.code == 0, trailing.err
    assert json.loads(trailing.out)["rows"] == json.loads(plain.out)["rows"]


def test_html_in_a_name_is_text_in_both_report_files(tmp_path):
    name = "<img src=x onerror=alert(1)>"
    f = tmp_path / "s.yaml"
    f.write_text(f"name: {json.dumps(name)}\nmodel: {{preset: tiny-gpt, name: {json.dumps(name)}}}\ncluster: cpu-host\n"
                 "gpus: 1\ntraining: {seq_len: 128, global_batch: 8}\n")
    r = run_cli(["report", f, "--no-plan", "--out", tmp_path / "r"])
    assert r.code == 0, r.err
    md = (tmp_path / "r" / "report.md").read_text(encoding="utf-8")
    html = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    assert "<img" not in md and "&lt;img src=x onerror=alert(1)>" in md
    assert "<img src=x" not in html


def test_a_name_the_plot_font_lacks_prints_no_warnings(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("name: 模型\nmodel: {preset: tiny-gpt, name: 模型}\ncluster: cpu-host\ngpus: 1\n"
                 "training: {seq_len: 128, global_batch: 8}\n", encoding="utf-8")
    # a process of its own: pytest's warning capture would hide what a user's terminal shows
    proc = subprocess.run([sys.executable, "-m", "trainsim.cli.main", "report", str(f), "--no-plan", "--out",
                           str(tmp_path / "r")], check=False, capture_output=True, text=True, timeout=120,
                          cwd=REPO)
    assert proc.returncode == 0 and "Glyph" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("text, value", [("layout: {tp: 010}", "octal number 8"),
                                         ("training: {seq_len: 4096, global_batch: 0100}", "octal number 64"),
                                         ("training: {seq_len: 1:30, global_batch: 64}", "sexagesimal) number 90"),
                                         ("training: {seq_len: 4096, global_batch: 64, dp_bucket_mb: 1:30.5}",
                                          "sexagesimal) number 90.5")])
def test_a_yaml_11_octal_or_base_60_number_is_refused(tmp_path, text, value):
    """PyYAML reads YAML 1.1: tp: 010 was tp 8, global_batch: 0100 was 64, seq_len: 1:30 was 90 -- silently."""
    f = tmp_path / "s.yaml"
    f.write_text(f"model: llama3-8b\ncluster: dgx-h100\ngpus: 16\n{text}\n")
    r = run_cli(["predict", f, "--fast"])
    assert_refused(r, "scenario: ")
    assert value in r.err and "line 4" in r.err


def test_plain_hex_underscored_and_quoted_numbers_still_read(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 0x10\nlayout: {tp: \"08\"}\n"
                 "training: {seq_len: 4_096, global_batch: 64}\n")
    r = run_cli(["predict", f, "--fast", "--json"])
    assert r.code == 0, r.err
    assert json.loads(r.out)["layout"]["tp"] == 8 and json.loads(r.out)["layout"]["dp"] == 2


# rich reads "[...]" in a printed string as console markup: a closing tag with nothing to close was a MarkupError
# traceback, a valid tag was applied (a colour, a terminal hyperlink) instead of shown
MARKUP = ["a[/]b", "x[/bold]y", "[bold]b", "[red]evil[/red] [link=http://x]click[/link]"]


def _flat(text: str) -> str:
    """``text`` with every run of whitespace one space (a table or a long line wraps a name at its spaces)."""
    return " ".join(text.split())


@pytest.mark.parametrize("name", MARKUP)
def test_markup_in_a_name_is_printed_as_text(tmp_path, name):
    q = json.dumps(name)
    f = tmp_path / "s.yaml"
    f.write_text(f"name: {q}\nmodel: {{preset: llama3-8b, name: {q}}}\n"
                 f"cluster: {{preset: dgx-h100, name: {q}, placement: dp, pools: "
                 f"[{{gpu: {{preset: h100-sxm, name: {q}}}, nodes: 1, name: {q}}}, {{gpu: h200, nodes: 1}}]}}\n"
                 "layout: {tp: 8}\ntraining: {seq_len: 4096, global_batch: 16}\n")
    pred = run_cli(["predict", f, "--fast"])
    assert pred.code == 0, pred.err[-500:]
    assert f"{_flat(name)} (8.0B params" in _flat(pred.out) and f"({_flat(name)})" in _flat(pred.out)
    plan = run_cli(["plan", f, "--top", "2"])
    assert plan.code == 0, plan.err[-500:]
    assert f"{name} on {name}, GPUs 16" in plan.out and f"pools: 0 = {name} (1 nodes of {name});" in plan.out
    c = tmp_path / "c.yaml"
    c.write_text(f"preset: dgx-h100\nname: {q}\n")
    coll = run_cli(["collective", "--cluster", c, "--sizes", "1M"])
    assert coll.code == 0, coll.err[-500:]
    assert f"8 GPU(s) of {_flat(name)} (1 node(s))" in _flat(coll.out)


def test_markup_in_a_profile_a_hugging_face_name_a_path_and_a_dataset_is_printed_as_text(tmp_path):
    prof = json.loads(PROFILE.read_text())
    prof["fingerprint"]["hostname"] = "vm[/]"
    (tmp_path / "x[").mkdir()
    p = tmp_path / "x[" / "]p.json"  # the path holds "[/]"
    p.write_text(json.dumps(prof))
    r = run_cli(["predict", "--model", "llama3-8b", "--cluster", "hgx-h200", "--fast", "--calibration", p])
    assert r.code == 0 and "vm[/]" in r.out, r.err[-500:]
    cfg = json.loads(HF_LLAMA.read_text())
    cfg["_name_or_path"] = "org/[red]x[/red][/]"
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps(cfg))
    r = run_cli(["predict", "--model", hf, "--cluster", "dgx-h100", "--fast"])
    assert r.code == 0 and "[red]x[/red][/]" in r.out, r.err[-500:]
    rows = _rows()
    rows[0]["row_id"] = "r[/]1"
    r = run_cli(["validate", "--dataset", _write(tmp_path / "d.csv", rows)])
    assert r.code == 0 and "│ r[/]1 " in r.out, r.err[-500:]


def _calls(name: str):
    import ast
    for path in sorted((REPO / "trainsim").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and name in (getattr(node.func, "id", None), getattr(node.func, "attr", None)):
                yield path.relative_to(REPO), node


def test_every_rich_console_reads_no_markup():
    """Each rich Console is made with markup and emoji codes off (reports/console.text_console, or the flags
    where a layer below reports makes one); a status line, whose text rich reads as markup whatever the console's
    setting, is given as rich Text."""
    import ast
    for path, call in _calls("Console"):
        flags = {k.arg: getattr(k.value, "value", None) for k in call.keywords}
        assert flags.get("markup") is False and flags.get("emoji") is False, f"{path}:{call.lineno}"
    for path, call in _calls("status"):
        assert not (call.args and isinstance(call.args[0], (ast.JoinedStr, ast.Constant))), f"{path}:{call.lineno}"


def test_a_json_file_with_a_byte_order_mark_is_read_as_yaml_is(tmp_path):
    """Windows editors start a UTF-8 file with a BOM: the YAML reader dropped it, JSON's refused the file ("not
    valid JSON ... Unexpected UTF-8 BOM") -- a scenario, a model, a cluster and a calibration profile alike."""
    def both(name: str, text: str) -> tuple[Path, Path]:
        plain, bom = tmp_path / f"{name}.json", tmp_path / f"{name}-bom.json"
        plain.write_text(text, encoding="utf-8")
        bom.write_text(text, encoding="utf-8-sig")
        assert bom.read_bytes()[:3] == b"\xef\xbb\xbf"
        return plain, bom

    scenario = both("s", '{"model": "tiny-gpt", "cluster": "cpu-host", "gpus": 1, "training": {"seq_len": 128}}')
    model = both("m", '{"name": "bom", "num_layers": 2, "hidden": 128, "num_heads": 4, "vocab_size": 1000}')
    cluster = both("c", '{"preset": "cpu-host", "name": "bom"}')
    profile = both("p", PROFILE.read_text(encoding="utf-8"))
    outs = []
    for s, m, c, p in zip(scenario, model, cluster, profile):
        runs = [run_cli(["predict", s, "--fast", "--json"]),
                run_cli(["predict", "--model", m, "--cluster", c, "--seq-len", "128", "--fast", "--json"]),
                run_cli(["predict", "--model", "llama3-8b", "--cluster", "hgx-h200", "--fast", "--json",
                         "--calibration", p])]
        assert all(r.code == 0 for r in runs), [r.err for r in runs]
        outs.append([json.loads(r.out)["step_time_s"] for r in runs])
    assert outs[0] == outs[1]


def _scenario_with(key: str, text: str) -> str:
    """A 16-GPU scenario on two pools with ``text`` as the value of ``key``."""
    q = json.dumps(text)
    names = {k: json.dumps("n") for k in ("model", "cluster", "gpu", "pool", "name", "description")}
    names[key] = q
    return (f"name: {names['name']}\ndescription: {names['description']}\n"
            f"model: {{preset: llama3-8b, name: {names['model']}}}\n"
            f"cluster: {{preset: dgx-h100, name: {names['cluster']}, placement: dp, pools: "
            f"[{{gpu: {{preset: h100-sxm, name: {names['gpu']}}}, nodes: 1, name: {names['pool']}}}, "
            "{gpu: h200, nodes: 1}]}\nlayout: {tp: 8}\ntraining: {seq_len: 4096, global_batch: 16}\n")


@pytest.mark.parametrize("key, field, limit", [
    ("model", "model.name", 255), ("cluster", "cluster.name", 255), ("gpu", "cluster.pools[0].gpu.name", 255),
    ("pool", "cluster.pools[0].name", 255), ("name", "name", 255), ("description", "description", 4096),
])
def test_a_name_or_description_past_its_limit_is_refused(tmp_path, key, field, limit):
    """rich wraps a long table cell in time quadratic in its length: a 30 000-character model name took 4 s to
    print, 300 000 more than 100 s. Names are at most 255 characters (NAME_MAX, so a file's stem fits), a
    description 4096; text at the limit is printed."""
    f = tmp_path / "s.yaml"
    f.write_text(_scenario_with(key, "x" * (limit + 1)))
    assert_refused(run_cli(["predict", f, "--fast"]), f"error: {field}: must be at most {limit} characters, "
                                                      f"got {limit + 1}")
    f.write_text(_scenario_with(key, "x" * limit))
    r = run_cli(["predict", f, "--fast"])
    assert r.code == 0, r.err


def test_a_hugging_face_checkpoint_path_past_the_limit_names_the_model_by_its_end(tmp_path):
    """save_pretrained writes the checkpoint directory into _name_or_path (up to PATH_MAX): a config transformers
    reads is read, its model named by the path's end behind an ellipsis, within the name limit."""
    cfg = json.loads(HF_LLAMA.read_text())
    cfg["_name_or_path"] = "/checkpoints/" + "x" * 300 + "/global_step_1000"
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps(cfg))
    r = run_cli(["predict", "--model", hf, "--cluster", "dgx-h100", "--fast", "--json"])
    assert r.code == 0, r.err
    name = json.loads(r.out)["scenario"].split("@")[0]
    assert len(name) == 255 and name.startswith("\u2026") and name.endswith("/global_step_1000")


def test_a_cluster_named_after_long_pool_names_is_read(tmp_path):
    """A cluster given by its pools alone is named after them ('a + b + c'): that label is shortened to the name
    limit, not refused as a name no one wrote."""
    pools = ", ".join(f"{{node: dgx-h100, nodes: 1, name: pool-{i}-{'y' * 100}}}" for i in range(3))
    f = tmp_path / "s.yaml"
    f.write_text(f"model: llama3-8b\ncluster: {{placement: dp, pools: [{pools}]}}\nlayout: {{tp: 8}}\n"
                 "training: {seq_len: 4096, global_batch: 24}\n")
    r = run_cli(["predict", f, "--fast", "--json"])
    assert r.code == 0, r.err
    name = json.loads(r.out)["scenario"].removeprefix("llama3-8b@")
    assert len(name) == 255 and name.startswith(f"pool-0-{'y' * 100} + pool-1-") and name.endswith("…")
