"""The JSON keys docs/design.md lists ("JSON outputs") against the keys the commands emit, both ways: a key emitted
and not listed, or listed without ``?`` and missing where its parent is present, fails. The blocks are parsed from
the document, so a change to either the code or the document that is not made to the other fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from trainsim.cli.main import main
from trainsim.cost_models.profile import CalibrationProfile

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
SMALL = ["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--tp", "2", "--pp", "2",
         "--seq-len", "2048", "--global-batch", "32"]

Path_ = tuple[str, ...]


def _split(path: str) -> Path_:
    """'a.b[].c' -> ('a', 'b', '[]', 'c'); '[].x' -> ('[]', 'x')."""
    out: list[str] = []
    for part in path.split("."):
        name, brackets = re.fullmatch(r"([^\[\]]*)((?:\[\])*)", part).groups()
        out += ([name] if name else []) + ["[]"] * (len(brackets) // 2)
    return tuple(out)


def documented_blocks() -> dict[str, list[str]]:
    """Block name -> its lines (comments stripped) of every ``<!-- json-keys: NAME -->`` fenced block."""
    text = DESIGN.read_text()
    blocks = re.findall(r"<!-- json-keys: ([\w-]+) -->\n```text\n(.*?)```", text, flags=re.DOTALL)
    return {name: [ln.split("#")[0].strip() for ln in body.splitlines() if ln.split("#")[0].strip()]
            for name, body in blocks}


def contract(name: str, blocks: dict[str, list[str]]) -> tuple[set[Path_], set[Path_], set[Path_]]:
    """(required, optional, open) paths of block ``name``: ``open`` ones (``a.*``) may hold unlisted keys; a key
    under an optional one is required only where its parent is present, as every listed key is."""
    required: set[Path_] = set()
    optional: set[Path_] = set()
    opened: set[Path_] = set()
    for line in blocks[name]:
        if "<-" in line:
            prefix, _, include = (x.strip() for x in line.partition("<-"))
            req, opt, ope = contract(include, blocks)
            base = _split(prefix)
            required |= {base + p for p in req}
            optional |= {base + p for p in opt}
            opened |= {base + p for p in ope}
            continue
        path = _split(line.rstrip("?").removesuffix(".*"))
        if line.endswith(".*"):
            opened.add(path)
        elif line.endswith("?"):
            optional.add(path)
        else:
            required.add(path)
    # the ancestors of listed keys are listed too (a.b implies a)
    listed = required | optional | opened
    for p in list(listed):
        for i in range(1, len(p)):
            anc = p[:i]
            if anc not in listed and anc[-1] != "[]":
                required.add(anc)
                listed.add(anc)
    return required, optional, opened


def emitted(obj, prefix: Path_ = ()) -> set[Path_]:
    """Every key path of ``obj``; list elements under '[]' (lists of objects only)."""
    out: set[Path_] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.add(prefix + (k,))
            out |= emitted(v, prefix + (k,))
    elif isinstance(obj, list):
        for v in obj:
            if isinstance(v, dict):
                out |= emitted(v, prefix + ("[]",))
    return out


def _matches(pattern: Path_, path: Path_) -> bool:
    return len(pattern) == len(path) and all(a in ("{}", b) for a, b in zip(pattern, path))


def check(name: str, obj) -> list[str]:
    """What disagrees between block ``name`` and ``obj``."""
    required, optional, opened = contract(name, documented_blocks())
    listed = required | optional | opened
    problems = []
    for key in sorted(emitted(obj)):
        if any(_matches(p, key) for p in listed):
            continue
        if any(_matches(p, key[:len(p)]) for p in opened if len(key) > len(p)):
            continue
        problems.append(f"{_dotted(key)}: emitted, not in docs/design.md")
    for p in sorted(required):
        if p[-1] in ("[]", "{}"):
            continue
        if any(p[-1] not in parent for parent in _objects(obj, p[:-1])):
            problems.append(f"{_dotted(p)}: in docs/design.md, not emitted")
    return problems


def _dotted(path: Path_) -> str:
    return ".".join(path).replace(".[]", "[]")


def _objects(obj, path: Path_) -> list[dict]:
    """The objects at ``path``: '[]' takes every element of a list, '{}' every value of a map."""
    nodes = [obj]
    for seg in path:
        if seg == "[]":
            nodes = [x for n in nodes if isinstance(n, list) for x in n]
        elif seg == "{}":
            nodes = [v for n in nodes if isinstance(n, dict) for v in n.values()]
        else:
            nodes = [n[seg] for n in nodes if isinstance(n, dict) and seg in n]
    return [n for n in nodes if isinstance(n, dict)]


def run_json(capsys, *argv) -> object:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_blocks_parse():
    blocks = documented_blocks()
    assert {"predict", "plan", "plan-row", "collective", "validate", "execute", "profile"} <= set(blocks)
    for name in blocks:
        contract(name, blocks)


@pytest.mark.parametrize("extra", [
    [],
    ["--fast", "--explain"],
    ["--jitter", "0.05", "--samples", "3", "--ideal-network"],
    ["--framework", "torch", "--zero", "3", "--dp-shard", "2", "--straggler", "0.01:1.5", "--samples", "3"],
    ["--pool", "dgx-a100:1", "--pool", "dgx-h100:1", "--placement", "dp", "--fast"],
    ["--pool", "dgx-a100:1", "--pool", "dgx-h100:1", "--fast"],
])
def test_predict_json_keys_are_the_documented_ones(capsys, tmp_path, extra):
    out = run_json(capsys, "predict", *SMALL, *extra, "--trace", str(tmp_path / "t.json"), "--json") \
        if not extra else run_json(capsys, "predict", *SMALL, *extra, "--json")
    assert check("predict", out) == []


def test_predict_json_folded_step_keys(capsys):
    out = run_json(capsys, "predict", *SMALL, "--global-batch", "4096", "--json")
    assert "folded" in out["engine"]
    assert check("predict", out) == []


def test_predict_json_optional_keys_are_exercised(capsys, tmp_path):
    """Every optional key is emitted by one of a few runs (none is listed that the code does not emit), but the
    memory notes of recipes these runs do not use."""
    outs = [run_json(capsys, "predict", *SMALL, *extra, "--json") for extra in (
        ["--explain", "--trace", str(tmp_path / "t.json")],
        ["--jitter", "0.05", "--samples", "3", "--dtype", "fp8"],
        ["--pool", "dgx-a100:1", "--pool", "dgx-h100:1", "--placement", "dp", "--fast"],
        ["--pool", "dgx-a100:1", "--pool", "dgx-h100:1", "--fast", "--lora-rank", "16"],
        ["--global-batch", "4096", "--framework", "torch", "--zero", "3"],
    )]
    keys = set().union(*(emitted(o) for o in outs))
    _, optional, _ = contract("predict", documented_blocks())
    unexercised = {_dotted(p) for p in optional if not any(_matches(p, k) for k in keys)}
    assert unexercised <= {"memory.assumptions.compile", "memory.assumptions.optimizer_sharding",
                           "memory.assumptions.mixed_precision", "memory.assumptions.grads_off_peak_bytes"}


def test_plan_json_keys_are_the_documented_ones(capsys):
    out = run_json(capsys, "plan", *SMALL[:6], "--seq-len", "2048", "--global-batch", "32", "--tp", "2",
                   "--top", "2", "--json")
    assert out["rows"] and out["pareto"] and out["screened_top"]
    assert check("plan", out) == []
    rows_with_band = [r for r in out["rows"] if "step_time_p90_s" in r]
    assert rows_with_band, "no fitting row carries its interval"


def test_plan_json_says_what_was_refused_where_nothing_fits(capsys):
    """Llama 3 70B on one H100 node at 8K tokens fits in no layout, and a DP bucket size is refused beside ZeRO-3
    (no buckets there): the plan names the most common refusal, as predict gives it, beside the empty ranking."""
    out = run_json(capsys, "plan", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "8", "--seq-len", "8192",
                   "--global-batch", "64", "--dp-bucket-mb", "25", "--json")
    assert not [r for r in out["rows"] if r["fits"]] and out["counts"]["invalid"] > 0
    assert out["refused"]["field"] == "training.dp_bucket_mb" and 0 < out["refused"]["layouts"] <= out["counts"]["invalid"]
    assert check("plan", out) == []


def test_collective_json_keys_are_the_documented_ones(capsys):
    out = run_json(capsys, "collective", "--cluster", "dgx-h100", "--gpus", "16", "--sizes", "1K,1G", "--json")
    assert len(out) == 2
    assert check("collective", out) == []


def test_validate_json_keys_are_the_documented_ones(capsys):
    out = run_json(capsys, "validate", "--dataset", "llama3", "--fast", "--json")
    assert out["rows"]
    assert check("validate", out) == []


def test_validate_json_structure_keys_are_the_documented_ones(capsys, tmp_path):
    """The step-structure keys, on six synthetic runs in vTrain's raw format (one L x m grid, pp 1)."""
    header = ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,"
              "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)")
    rows = [f"1,{gb},1,1024,16,{layers},1024,1,1,1,{5 * layers * gb:.3f}" for layers in (12, 24) for gb in (2, 4, 8)]
    path = tmp_path / "vtrain_grid.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    out = run_json(capsys, "validate", "--dataset", str(path), "--fast", "--json")
    assert out["structure"] and out["term_leverage_mape_pct"]
    assert check("validate", out) == []


def test_profile_keys_are_the_documented_ones(tmp_path, capsys):
    """An empty profile (CalibrationProfile.model_dump), the H200 microbenchmark profile `calibrate --device cuda`
    wrote (benchmarks/data/profile_h200.json) and a run calibration of the bundled logs (`calibrate --from-runs`)."""
    assert check("profile", CalibrationProfile().model_dump(mode="json")) == []
    h200 = json.loads((ROOT / "benchmarks" / "data" / "profile_h200.json").read_text())
    assert check("profile", h200) == []
    runs = ROOT / "tests" / "data" / "runs"
    out = tmp_path / "mine.json"
    assert main(["calibrate", "--from-runs", str(runs / "megatron_gpt1p3b_8xa100.log"),
                 str(runs / "torchtitan_llama3_8b_8xh100.log"), "--config", str(runs / "llama3_8b.toml"),
                 "--cluster", "dgx-a100", "--cluster", "dgx-h100", "--out", str(out)]) == 0
    capsys.readouterr()
    fitted = json.loads(out.read_text())
    assert fitted["run_calibration"] is not None
    assert check("profile", fitted) == []


def test_check_catches_drift():
    """The checker itself: an undocumented key and a missing documented one are both reported."""
    bad = [{"size_bytes": 1, "time_s": 1.0, "latency_s": 0.5, "bandwidth_s": 0.5, "bound": "latency",
            "algbw_GBps": 1.0, "busbw_GBps": 1.0, "algo": "ring", "background_load": {"nic": 0.0, "spine": 0.0},
            "new_key": 1}]
    assert check("collective", bad) == ["[].new_key: emitted, not in docs/design.md"]
    del bad[0]["new_key"], bad[0]["algo"]
    assert check("collective", bad) == ["[].algo: in docs/design.md, not emitted"]
