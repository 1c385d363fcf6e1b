"""Hostile files against every reader: each is refused in one line naming the input, at once, no traceback.

Every file type the tool takes is fed every hostile file of conftest.HOSTILE (empty, binary, not UTF-8, NUL,
deep nesting in YAML flow/block and JSON, alias bombs, recursive aliases, Python tags, wrong top-level types,
NaN/Infinity, truncated JSON, duplicate keys, a directory, a FIFO, an 80 MiB file, a missing path).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import MEASURED, NCCL_H100, assert_refused, hostile_names, run_cli

# (reader id, argv template with {f} for the hostile file and {out} for a scratch directory, field named)
READERS = [
    ("scenario/predict", ["predict", "{f}"], "scenario"),
    ("scenario/plan", ["plan", "{f}"], "scenario"),
    ("model", ["predict", "--model", "{f}", "--cluster", "dgx-h100"], "model"),
    ("cluster", ["predict", "--model", "tiny-gpt", "--cluster", "{f}"], "cluster"),
    ("cluster/collective", ["collective", "--cluster", "{f}"], "cluster"),
    ("profile", ["predict", "--model", "tiny-gpt", "--cluster", "cpu-host", "--seq-len", "128", "--calibration", "{f}"],
     "calibration"),
    ("dataset", ["validate", "--dataset", "{f}"], "dataset"),
    ("nccl-tests", ["calibrate", "--import-nccl-tests", "{f}", "--out", "{out}/p.json"], "nccl-tests"),
    ("merge-into", ["calibrate", "--import-nccl-tests", str(NCCL_H100), "--out", "{out}/p.json", "--merge-into", "{f}"],
     "calibration"),
    ("suite", ["regress", "--suite", "{f}"], "suite"),
    ("baseline", ["regress", "--suite", "{suite}", "--baseline", "{f}"], "baseline"),
    ("plan-json", ["report", "--plan", "{f}", "--out", "{out}/r"], "plan"),
    ("measured", ["report", "--model", "tiny-gpt", "--cluster", "cpu-host", "--measured", "{f}", "--out", "{out}/r"],
     "measured"),
]
SKIP = {("merge-into", n) for n in ()}


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("suite")
    (d / "tiny.yaml").write_text("model: tiny-gpt\ncluster: cpu-host\ngpus: 1\n"
                                 "training: {seq_len: 128, global_batch: 8, micro_batch: 1, dtype: fp32}\n")
    return d


@pytest.mark.parametrize("reader, argv, field", READERS, ids=[r[0] for r in READERS])
@pytest.mark.parametrize("name", hostile_names())
def test_hostile_file_is_refused(reader, argv, field, name, hostile_dir, suite_dir, tmp_path):
    f = hostile_dir / name
    args = [a.format(f=f, out=tmp_path, suite=suite_dir) for a in argv]
    before = sorted(tmp_path.iterdir())
    r = run_cli(args)
    assert_refused(r, field)
    assert sorted(tmp_path.iterdir()) == before, "a refused command left a file behind"


@pytest.mark.parametrize("name, argv, message", [
    ("dup-top-yaml.yaml", ["predict", "{f}"], "duplicate key 'gpus' at line 4 (first given at line 3)"),
    ("dup-nested-yaml.yaml", ["predict", "{f}"], "duplicate key 'tp' at line 3"),
    ("dup-bool-yaml.yaml", ["predict", "{f}"], "duplicate key True at line 2 (first given at line 1)"),
    ("crlf-dup.yaml", ["predict", "{f}"], "duplicate key 'gpus' at line 3"),
    ("dup-top-json.json", ["predict", "{f}"], "duplicate key 'gpus' at line 1"),
    ("dup-nested-json.json", ["predict", "{f}"], "duplicate key 'tp' at line 3"),
    ("dup-top-yaml.yaml", ["predict", "--model", "{f}", "--cluster", "dgx-h100"], "model:"),
    ("dup-top-yaml.yaml", ["predict", "--model", "tiny-gpt", "--cluster", "{f}"], "cluster:"),
    ("alias-bomb.yaml", ["predict", "--model", "{f}", "--cluster", "dgx-h100"], "aliases expand to more than"),
    ("alias-bomb.yaml", ["predict", "--model", "tiny-gpt", "--cluster", "{f}"], "aliases expand to more than"),
    ("alias-bomb-nested.yaml", ["predict", "{f}"], "aliases expand to more than"),
    ("recursive-alias.yaml", ["predict", "{f}"], "aliases expand to more than"),
    ("deep-flow-yaml.yaml", ["predict", "{f}"], "nesting deeper than 64"),
    ("deep-block-yaml.yaml", ["predict", "{f}"], "nesting deeper than 64"),
    ("deep-mapping-yaml.yaml", ["predict", "{f}"], "nesting deeper than 64"),
    ("deep-json.json", ["predict", "--model", "{f}", "--cluster", "dgx-h100"], "nesting deeper than 64"),
    ("deep-json-objects.json", ["predict", "--model", "tiny-gpt", "--cluster", "cpu-host", "--seq-len", "128",
                                "--calibration", "{f}"],
     "nesting deeper than 64"),
    ("json-nan.json", ["predict", "--model", "tiny-gpt", "--cluster", "cpu-host", "--seq-len", "128",
                       "--calibration", "{f}"],
     "non-finite number NaN"),
    ("huge.yaml", ["predict", "{f}"], "limited to 4 MiB"),
    ("a-directory.yaml", ["predict", "{f}"], "is a directory"),
    ("missing.yaml", ["predict", "{f}"], "no such file"),
    ("python-tag.yaml", ["predict", "{f}"], "not valid YAML"),
    ("latin1.yaml", ["predict", "{f}"], "not UTF-8"),
    ("nul-bytes.yaml", ["predict", "{f}"], "U+0000"),
    ("bigint-yaml.yaml", ["predict", "{f}"], "an integer of 5000 digits at line 2; numbers are limited to 4300"),
    ("bigint-json.json", ["predict", "--model", "{f}", "--cluster", "dgx-h100"], "an integer of 5000 digits"),
    ("bigint-json.json", ["predict", "--model", "tiny-gpt", "--cluster", "cpu-host", "--seq-len", "128",
                          "--calibration", "{f}"], "calibration: "),
])
def test_refusal_names_the_key_and_line(name, argv, message, hostile_dir):
    r = run_cli([a.format(f=hostile_dir / name) for a in argv])
    assert_refused(r, message)


def test_fifo_is_not_waited_on(hostile_dir):
    if not (hostile_dir / "fifo.yaml").exists():
        pytest.skip("no FIFOs on this platform")
    assert_refused(run_cli(["predict", str(hostile_dir / "fifo.yaml")]), "not a regular file")


def test_hf_config_with_duplicate_key(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"model_type": "llama", "num_hidden_layers": 32,\n "hidden_size": 4096,\n'
                   ' "num_hidden_layers": 2}')
    assert_refused(run_cli(["predict", "--model", str(cfg), "--cluster", "dgx-h100"]),
                   "duplicate key 'num_hidden_layers' at line 3")


def test_measured_with_duplicate_step_time(tmp_path):
    text = MEASURED.read_text().replace('"step_time_s":', '"step_time_s": 1.0, "step_time_s":', 1)
    f = tmp_path / "m.json"
    f.write_text(text)
    assert_refused(run_cli(["report", "--model", "tiny-gpt", "--cluster", "cpu-host", "--measured", str(f),
                            "--out", str(tmp_path / "r")]), "duplicate key 'step_time_s'")
    assert not (tmp_path / "r").exists()


def test_csv_with_duplicated_column(tmp_path):
    f = tmp_path / "d.csv"
    f.write_text("row_id,busbw_GBps,busbw_GBps\nr1,1,2\n")
    assert_refused(run_cli(["validate", "--dataset", str(f)]), "duplicate column 'busbw_GBps'")


def test_nccl_json_with_duplicate_key(tmp_path):
    f = tmp_path / "all_reduce_perf.json"
    f.write_text('{"results": [], "results": []}')
    assert_refused(run_cli(["calibrate", "--import-nccl-tests", str(f), "--out", str(tmp_path / "p.json")]),
                   "duplicate key 'results'")
    assert not (tmp_path / "p.json").exists()


def test_yaml_merge_key_override_is_not_a_duplicate(tmp_path):
    """'<<' merges followed by an explicit key are YAML's documented override, not a duplicate."""
    f = tmp_path / "s.yaml"
    f.write_text("base: &b {seq_len: 128, global_batch: 8, micro_batch: 1, dtype: fp32}\n"
                 "model: tiny-gpt\ncluster: cpu-host\ngpus: 1\ntraining:\n  <<: *b\n  global_batch: 16\n")
    from trainsim.specs.safe_read import read_structured

    data = read_structured(f, "scenario")
    assert data["training"]["global_batch"] == 16 and data["training"]["seq_len"] == 128


def test_recursion_error_never_escapes(monkeypatch):
    """The readers bound nesting; should anything else recurse too deep, main() still answers in one line."""
    import trainsim.cli.common as common

    def deep(*a, **k):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(common, "build_scenario", deep)
    assert_refused(run_cli(["predict", "--model", "tiny-gpt", "--cluster", "cpu-host"]), "nested too deeply")


@pytest.mark.parametrize("value, message", [
    ("0x" + "f" * 4000, "gpus: an integer of more than 4300 (decimal) digits at line 3"),
    ("1" + ":1" * 2500, "an integer of more than 4300 digits at line 3"),  # YAML 1.1 base 60
    ("-" + "9" * 4301, "an integer of 4301 digits at line 3"),
], ids=["hex", "base-60", "decimal"])
def test_an_integer_past_4300_digits_is_refused_however_written(tmp_path, value, message):
    """A hex or base-60 integer is converted without CPython's digit limit, but its value past 10^4300 could not
    be printed in a refusal (str() raised a bare ValueError)."""
    f = tmp_path / "s.yaml"
    f.write_text(f"model: llama3-8b\ncluster: dgx-h100\ngpus: {value}\n")
    assert_refused(run_cli(["predict", str(f)]), message.removeprefix("gpus: "))


def test_a_string_behind_many_aliases_is_scanned_once(tmp_path, monkeypatch):
    """The control-character scan walks the loaded document, where every alias of a string is that one string:
    a 3.5 MB description behind 1000 aliases was scanned 1000 times (28 s; 45 min at the 100 000-node limit)."""
    from trainsim.specs import safe_read

    scanned: list[int] = []

    class Counting:
        def __init__(self, pattern):
            self.pattern = pattern

        def search(self, text):
            scanned.append(len(text))
            return self.pattern.search(text)

    monkeypatch.setattr(safe_read, "CONTROL", Counting(safe_read.CONTROL))
    f = tmp_path / "s.yaml"
    f.write_text("description: &d " + "A" * 100_000 + "\nx: [" + ", ".join(["*d"] * 1000) + "]\nl: &l [*d, *d]\n"
                 "y: [*l, *l, *l]\n")
    assert_refused(run_cli(["predict", str(f)]), ": unknown key")
    assert scanned.count(100_000) == 1
