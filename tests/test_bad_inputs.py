"""The bad-input corpus: every case exits 2 with one line on stderr naming the field, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trainsim.cli.main import main

BAD = Path(__file__).parent / "bad_inputs"
P = ["predict"]
L8 = ["--model", "llama3-8b", "--cluster", "dgx-h100"]


def f(name: str) -> str:
    return str(BAD / name)


# (case id, argv after `trainsim`, text the message must name)
CASES = [
    ("malformed-yaml", P + [f("malformed.yaml")], "scenario"),
    ("malformed-json-model", P + ["--model", f("malformed-model.json"), "--cluster", "dgx-h100"], "model"),
    ("scenario-is-a-list", P + [f("list-not-mapping.yaml")], "scenario"),
    ("scenario-unknown-key", P + [f("unknown-key.yaml")], "scenario.layers"),
    ("empty-scenario", P + [f("empty.yaml")], "scenario"),
    ("binary-scenario", P + [f("binary.yaml")], "scenario"),
    ("python-object-tag", P + [f("python-tag.yaml")], "scenario"),
    ("missing-scenario-file", P + [f("does-not-exist.yaml")], "scenario"),
    ("unknown-model-preset", P + ["--model", "llama9-1t", "--cluster", "dgx-h100"], "model"),
    ("unknown-cluster-preset", P + ["--model", "llama3-8b", "--cluster", "dgx-z900"], "cluster"),
    ("no-model", P + ["--cluster", "dgx-h100"], "model"),
    # docs/scenario-reference.md: `trainsim predict --model x` lists the model presets, with no cluster given too
    ("unknown-model-no-cluster", P + ["--model", "llama9-1t"], "model: unknown preset 'llama9-1t'"),
    ("plan-unknown-model-no-cluster", ["plan", "--model", "llama9-1t"], "model: unknown preset 'llama9-1t'"),
    ("model-missing-field", P + ["--model", f("model-missing-layers.yaml"), "--cluster", "dgx-h100"], "model.num_layers"),
    ("model-wrong-type", P + ["--model", f("model-wrong-type.yaml"), "--cluster", "dgx-h100"], "model.hidden"),
    ("model-negative", P + ["--model", f("model-negative-layers.yaml"), "--cluster", "dgx-h100"], "model.num_layers"),
    ("model-zero-heads", P + ["--model", f("model-zero-heads.yaml"), "--cluster", "dgx-h100"], "model.num_heads"),
    ("model-nan", P + ["--model", f("model-nan.yaml"), "--cluster", "dgx-h100"], "model.hidden"),
    ("model-huge-vocab", P + ["--model", f("model-huge-vocab.yaml"), "--cluster", "dgx-h100"], "model.vocab_size"),
    ("model-kv-heads", P + ["--model", f("model-kv-not-dividing.yaml"), "--cluster", "dgx-h100"], "num_kv_heads"),
    ("model-topk", P + ["--model", f("model-topk-too-big.yaml"), "--cluster", "dgx-h100"], "top_k"),
    ("hf-missing-hidden", P + ["--model", f("hf-missing-hidden.json"), "--cluster", "dgx-h100"], "hidden_size"),
    ("hf-bad-activation", P + ["--model", f("hf-bad-activation.json"), "--cluster", "dgx-h100"], "model.hidden_act"),
    ("micro-batch-negative", P + [f("micro-batch-negative.yaml")], "training.micro_batch"),
    ("seq-len-string", P + [f("seq-len-string.yaml")], "training.seq_len"),
    ("training-not-mapping", P + [f("training-list.yaml")], "training"),
    # gradients are 2 (bf16 / fp16) or 4 (fp32) bytes wide: no 3-byte dtype exists
    ("grad-dtype-bytes-3", P + [f("grad-dtype-bytes-3.yaml")], "training.grad_dtype_bytes"),
    ("layout-unknown-key", P + [f("layout-unknown-key.yaml")], "layout.tq"),
    # plan searches tp/pp/dp itself, but a value predict refuses in the same file is refused, not ignored
    ("plan-layout-pp-negative", ["plan", f("layout-pp-negative.yaml")], "layout.pp"),
    ("gpus-string-in-yaml", P + [f("gpus-string.yaml")], "gpus"),
    ("cluster-undersubscribed", P + ["--model", "tiny-gpt", "--cluster", f("cluster-undersubscribed.yaml")],
     "cluster.scale_out.oversubscription"),
    ("cluster-unknown-kind", P + ["--model", "tiny-gpt", "--cluster", f("cluster-unknown-kind.yaml")],
     "cluster.scale_up.kind"),
    ("gpus-zero", P + L8 + ["--gpus", "0"], "--gpus"),
    ("gpus-negative", P + L8 + ["--gpus", "-8"], "--gpus"),
    ("gpus-not-a-number", P + L8 + ["--gpus", "abc"], "--gpus"),
    ("gpus-huge", P + L8 + ["--gpus", "99999999999"], "--gpus"),
    ("gpus-not-whole-nodes", P + L8 + ["--gpus", "12"], "num_gpus"),
    ("tp-zero", P + L8 + ["--tp", "0"], "--tp"),
    ("tp-not-dividing-gpus", P + L8 + ["--gpus", "64", "--tp", "3"], "gpus"),
    ("tp-exceeds-kv-heads", P + L8 + ["--gpus", "64", "--tp", "16"], "layout.tp"),
    ("pp-not-dividing-layers", P + L8 + ["--gpus", "56", "--pp", "7"], "layout.pp"),
    ("dp-contradicts-gpus", P + L8 + ["--gpus", "64", "--tp", "8", "--dp", "4"], "layout.dp"),
    ("batch-not-divisible", P + L8 + ["--gpus", "64", "--global-batch", "100"], "training.global_batch"),
    ("ep-on-dense-model", P + L8 + ["--gpus", "64", "--ep", "2"], "layout.ep"),
    ("ep-not-dividing-experts", P + ["--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "48", "--ep", "3",
                                     "--global-batch", "48"], "layout.ep"),
    ("vpp-with-1f1b", P + L8 + ["--gpus", "64", "--pp", "2", "--vpp", "2", "--schedule", "1f1b"], "layout.vpp"),
    ("interleaved-without-vpp", P + L8 + ["--gpus", "64", "--pp", "2", "--schedule", "interleaved"], "training.schedule"),
    ("fp8-on-a100", P + ["--model", "llama3-8b", "--cluster", "dgx-a100", "--dtype", "fp8"], "training.dtype"),
    ("sp-without-tp", P + L8 + ["--sequence-parallel"], "training.sequence_parallel"),
    ("cp-odd-seq", P + L8 + ["--gpus", "16", "--cp", "2", "--seq-len", "4094"], "training.seq_len"),
    ("seq-beyond-learned-positions", P + ["--model", "gpt3-175b", "--cluster", "dgx-a100", "--gpus", "64", "--tp", "8",
                                          "--pp", "8", "--seq-len", "4096"], "training.seq_len"),
    ("zero-stage-5", P + L8 + ["--zero", "5"], "zero"),
    ("recompute-unknown", P + L8 + ["--recompute", "partial"], "recompute"),
    ("micro-batch-zero", P + L8 + ["--micro-batch", "0"], "--micro-batch"),
    ("unknown-flag", P + L8 + ["--tensor-parallel", "8"], "--tensor-parallel"),
    ("fp8-param-gather-without-distributed-optimizer", P + [f("fp8-param-gather-no-distopt.yaml")],
     "training.fp8_param_gather"),
    ("gpus-disagree-in-file", P + [f("gpus-disagree.yaml")], "gpus: the scenario gives gpus: 8 and cluster.num_gpus"),
    ("num-gpus-unreadable-beside-gpus", P + [f("num-gpus-unreadable-beside-gpus.yaml")], "cluster.num_gpus"),
    ("num-gpus-unreadable-in-cluster-file", P + [f("num-gpus-unreadable-in-cluster-file.yaml")], "cluster.num_gpus"),
    ("num-gpus-unreadable-under-gpus-flag", P + [f("num-gpus-unreadable-beside-gpus.yaml"), "--gpus", "64"],
     "cluster.num_gpus"),
    # plan: pins no layout can satisfy are refused as predict refuses them, not answered with an empty table
    ("plan-ep-on-dense-model", ["plan", *L8, "--gpus", "8", "--global-batch", "128", "--seq-len", "8192", "--ep", "2"],
     "layout.ep"),
    ("plan-tp-not-dividing", ["plan", *L8, "--gpus", "8", "--global-batch", "128", "--seq-len", "8192", "--tp", "3"],
     "gpus"),
    # a setting every enumerated layout refuses: the first layout's reason, not "no layout is valid" with exit 0
    ("plan-setting-every-layout-refuses", ["plan", *L8, "--gpus", "16", "--global-batch", "64", "--seq-len", "4096",
                                           "--mics-hierarchical-gather"], "training.mics_hierarchical_gather"),
    ("plan-headroom-above-memory", ["plan", *L8, "--gpus", "8", "--global-batch", "128", "--seq-len", "8192",
                                    "--memory-headroom", "1000"], "memory_headroom"),
    ("plan-tokens-zero", ["plan", *L8, "--gpus", "8", "--global-batch", "128", "--seq-len", "8192", "--tokens", "0"],
     "--tokens: must be in the range"),
    ("report-checkpoint-write-absurd", ["report", "examples/llama3-8b-h100-8.yaml", "--no-plan",
                                        "--checkpoint-write-s", "1e300", "--out", "report-not-written"],
     "--checkpoint-write-s"),
    ("nccl-version-superscript", ["collective", "--cluster", "dgx-h100", "--sizes", "1M", "--nccl-version", "2.\u00b9\u2079"],
     "nccl_version"),
    ("nccl-version-four-parts", ["collective", "--cluster", "dgx-h100", "--sizes", "1M", "--nccl-version", "2.19.0.1"],
     "nccl_version"),
    ("dataset-separated-by-semicolons", ["validate", "--dataset", f("semicolon-separated.csv")],
     "separated by commas, not ';'s"),
    ("regress-baseline-is-a-directory", ["regress", "--baseline", str(BAD)], "is a directory, not a file"),
    ("trace-to-stdout", P + L8 + ["--trace", "-"], "trace: '-' (standard output)"),
    ("moe-load-cv-at-ep-1", P + ["--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "16", "--tp", "2",
                                 "--ep", "1", "--sequence-parallel", "--moe-load-cv", "0.5"], "training.moe_load_cv"),
    ("recompute-modules-under-deepspeed", P + L8 + ["--framework", "deepspeed", "--recompute-modules", "mlp"],
     "training.recompute_modules"),
    ("zero3-under-megatron-2022", P + L8 + ["--framework", "megatron-2022", "--zero", "3"], "training.zero"),
]


@pytest.mark.parametrize("case, argv, field", CASES, ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_line(case, argv, field, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, f"{case}: exit {code}, stderr={err!r}"
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"{case}: expected one line, got {err!r}"
    assert lines[0].startswith("error: ") and field in lines[0], f"{case}: {lines[0]!r} does not name {field!r}"
    assert "Traceback" not in err and out == ""


def test_corpus_is_large_enough():
    assert len(CASES) >= 30


def test_50_megabyte_file_is_refused_quickly(tmp_path, capsys):
    big = tmp_path / "big.yaml"
    with big.open("w") as fh:
        line = "# " + "x" * 1021 + "\n"
        for _ in range(50 * 1024):
            fh.write(line)
    assert big.stat().st_size >= 50 * 2**20
    code = main(P + [str(big)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "scenario" in err and "MiB" in err


@pytest.mark.parametrize("argv", [P + [f("malformed.yaml")], P + L8 + ["--gpus", "64", "--tp", "3"]])
def test_real_process_prints_no_traceback(argv):
    proc = subprocess.run([sys.executable, "-m", "trainsim.cli.main", *argv], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_report_refuses_a_plan_row_no_plan_writes(tmp_path, capsys):
    """A plan file's ranked figures are shown as they are, so a negative step time is refused, naming the row."""
    import json
    assert main(["plan", *L8, "--gpus", "8", "--global-batch", "64", "--seq-len", "4096", "--top", "1", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    plan["rows"][0]["step_time_s"] = -5
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    assert main(["report", "--plan", str(path), "--no-plan", "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.strip() == "error: plan.rows[1].step_time_s: must be > 0, got -5"


def test_an_output_is_never_one_of_the_inputs(tmp_path, capsys):
    """A trace written over the scenario it came from, or a profile over the nccl-tests output it was read from,
    would destroy the input: refused before any work, the file left as it was."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(Path("examples/tiny-gpt-cpu.yaml").read_text())
    nccl = tmp_path / "all_reduce_perf.txt"
    nccl.write_text((Path(__file__).parent / "data" / "nccl_tests" / "all_reduce_perf_8xH100.txt").read_text())
    for argv, path, field in ((["predict", str(scenario), "--trace", str(scenario)], scenario, "trace"),
                              (["calibrate", "--import-nccl-tests", str(nccl), "--out", str(nccl)], nccl, "out")):
        before = path.read_text()
        assert main(argv) == 2
        assert capsys.readouterr().err.strip().startswith(f"error: {field}: {path} is one of this command's inputs")
        assert path.read_text() == before
