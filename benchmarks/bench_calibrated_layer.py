"""Loop check on CPU: does a calibrated cost model predict a transformer layer it never measured?

1. Calibrate this host (`trainsim calibrate --device cpu --quick`: 2 gloo ranks, one core each), or
   reuse a profile given with --profile; without --profile, calibrate again after measuring, so the
   drift of a shared machine shows as the spread between the two calibrated errors.
2. For a few GPT blocks whose shapes are NOT calibration points (the quick suite measures GEMMs of
   hidden 256 and 1024 only), predict forward+backward of one block with
   ``trainsim.cost_models.compute.layer_times(scenario, profile=...)`` — and, for contrast, with the
   uncalibrated `cpu` preset defaults.
3. Measure the same block (trainsim.kernels.torch_model.Block, the executor's block) in torch on one
   CPU thread: median of repeated forward+backward.
4. Print predicted, measured and the error in percent.

Run: python benchmarks/bench_calibrated_layer.py [--profile p.json] [--reps 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # the calibration's ranks run one thread each

# (name, hidden, heads, ffn, seq_len, micro_batch): none of these GEMM shapes is in the quick suite.
LAYERS = [
    ("tiny-gpt block (h128, s256, b4)", 128, 4, 512, 256, 4),
    ("h384 block (s256, b2)", 384, 6, 1536, 256, 2),
    ("h512 block (s256, b2)", 512, 8, 2048, 256, 2),
    ("h768 block (s512, b1)", 768, 12, 3072, 512, 1),
]


def calibrate(path: str) -> float:
    """Run the real calibration command's worker under torchrun (2 processes); returns seconds."""
    from trainsim.kernels.launch import run_torchrun

    res = run_torchrun("trainsim.kernels.calibrate", ["--device", "cpu", "--quick", "--out", path], 2, timeout_s=600)
    if res.returncode != 0 or not os.path.exists(path):
        sys.exit(f"calibration failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
    return res.elapsed_s


def scenario_for(hidden: int, heads: int, ffn: int, seq: int, mb: int):
    from trainsim.specs import build_scenario

    model = {"name": f"block-h{hidden}", "num_layers": 1, "hidden": hidden, "num_heads": heads, "ffn_hidden": ffn,
             "vocab_size": 1024, "max_seq_len": max(seq, 256), "tie_embeddings": False}
    return build_scenario({"model": model, "cluster": "cpu-host", "gpus": 1,
                           "training": {"seq_len": seq, "global_batch": mb, "micro_batch": mb, "dtype": "fp32"}})


def measure_block(scenario, reps: int) -> tuple[float, float]:
    """Median (thread CPU seconds, wall seconds) of forward + backward of one Block in torch (fp32).

    Thread CPU time is what the calibration measures on CPU (see microbench.cpu_clock): on a shared
    host it excludes time the process spent descheduled; wall time is printed alongside.
    """
    import torch

    from trainsim.kernels.microbench import cpu_clock
    from trainsim.kernels.torch_model import Block, ModelOptions

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    torch.manual_seed(0)
    clock = cpu_clock()
    t = scenario.training
    block = Block(scenario.model, ModelOptions())
    x = torch.randn(t.micro_batch, t.seq_len, scenario.model.hidden, requires_grad=True)
    grad = torch.randn_like(x)
    cpu, wall = [], []
    for i in range(reps + 3):
        block.zero_grad(set_to_none=True)
        x.grad = None
        c0, w0 = clock(), time.perf_counter()
        block(x).backward(grad)
        c1, w1 = clock(), time.perf_counter()
        if i >= 3:  # warm-up
            cpu.append(c1 - c0)
            wall.append(w1 - w0)
    return statistics.median(cpu), statistics.median(wall)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", help="existing CPU profile (default: calibrate now, and again after measuring)")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()

    from trainsim.cost_models.compute import layer_times
    from trainsim.cost_models.profile import load_profile

    tmp = tempfile.mkdtemp(prefix="trainsim-bench-")
    if args.profile:
        before = load_profile(args.profile)
        print(f"profile: {before.describe()}")
    else:
        path = os.path.join(tmp, "before.json")
        secs = calibrate(path)
        before = load_profile(path)
        print(f"calibrated in {secs:.1f} s (trainsim calibrate --device cpu --quick, 2 gloo ranks)")
        print(f"  {before.describe()}")
    rows = []
    for name, h, heads, ffn, seq, mb in LAYERS:
        sc = scenario_for(h, heads, ffn, seq, mb)
        meas, wall = measure_block(sc, args.reps)
        rows.append((name, sc, meas, wall))
    after = None
    if not args.profile:
        # A second calibration after the measurements brackets the machine's drift (shared host).
        path = os.path.join(tmp, "after.json")
        calibrate(path)
        after = load_profile(path)

    def total(sc, prof) -> float:
        t = layer_times(sc, profile=prof)
        return t.fwd_s + t.bwd_input_s + t.bwd_weight_s

    print()
    header = (f"{'layer (fp32, fwd+bwd)':<34} {'calibrated':>11} {'defaults':>10} {'measured':>10} {'(wall)':>10}"
              f" {'err cal':>8} {'err cal2':>9} {'err def':>8}")
    print(header)
    print("-" * len(header))
    errs_cal, errs_cal2, errs_def = [], [], []
    for name, sc, meas, wall in rows:
        pred_cal, pred_def = total(sc, before), total(sc, None)
        e_cal = (pred_cal - meas) / meas * 100
        e_def = (pred_def - meas) / meas * 100
        errs_cal.append(abs(e_cal))
        errs_def.append(abs(e_def))
        e2 = ""
        if after is not None:
            e_cal2 = (total(sc, after) - meas) / meas * 100
            errs_cal2.append(abs(e_cal2))
            e2 = f"{e_cal2:+.1f}%"
        print(f"{name:<34} {pred_cal * 1e3:>9.2f}ms {pred_def * 1e3:>8.2f}ms {meas * 1e3:>8.2f}ms {wall * 1e3:>8.2f}ms "
              f"{e_cal:>+7.1f}% {e2:>9} {e_def:>+7.1f}%")
    print()
    print("measured = median thread CPU time (what calibration measures on CPU); (wall) = median wall time;")
    print("err cal = calibration before the measurements, err cal2 = a second calibration right after them")
    line = f"mean |error|: calibrated {statistics.mean(errs_cal):.1f}%"
    if errs_cal2:
        line += f" (second calibration {statistics.mean(errs_cal2):.1f}%)"
    print(line + f", uncalibrated `cpu` preset defaults {statistics.mean(errs_def):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
