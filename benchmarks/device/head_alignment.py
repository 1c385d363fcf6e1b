"""The output layer's GEMMs and fp32 cross-entropy passes at a padded and an unpadded vocabulary shard, per TP.

Why: trainsim costs a GEMM by its FLOPs and a 128x128 tile model (cost_models/compute.py), blind to whether a
leading dimension is a multiple of 16 bytes. cuBLAS's vectorised tensor-core kernels need that alignment; a
16-bit GEMM with an odd leading dimension runs an alignment-1 kernel instead (an A100 nsys attribution names
``cutlass_75_tensorop_bf16_s1688gemm_bf16_128x64_tn_align1`` for an odd 248,077-row vocabulary,
pegainfer-project/pegainfer PR #1046; PyTorch issue #146817 another align1 kernel on A100). Megatron pads the
GPT-2 vocabulary (50,257) to a multiple of 128 x TP, so its shards are aligned; vTrain's own model of its runs
shards the unpadded table, ``vocab // TP`` rows per rank (VIA-Research/vTrain src/model/gpt_modeling.py,
src/predictor.py): 50,257 rows at TP 1 (odd), 25,128 at TP 2 (a multiple of 8), 12,564 at TP 4 (of 4), 6,282 at
TP 8 (of 2). The vTrain single-node table's cost per sequence outside the blocks, against trainsim's aligned head,
follows that order (trainsim/validation/vtrain.py); this script measures the slowdown a device actually has, so a
per-alignment factor can be taken from a measurement instead of from the table it would be judged on.

What it times, per TP degree, micro-batch and shard width (padded: Megatron's; unpadded: vocab // TP), with CUDA
events, median of ``--reps`` after warm-up, in the layouts ``F.linear``'s autograd uses:

* ``fwd``: logits = F.linear(x [T, h], w [V, h]);  ``dgrad``: dy [T, V] @ w;  ``wgrad``: dy.t() @ x;
* ``ce_fwd`` / ``ce_bwd``: Megatron's fp32 vocabulary-parallel cross-entropy op sequence on one rank (``.float()``,
  max, subtract, exp, sum, divide; then the gradient's multiply and the cast back to 16 bits), no collectives.

Run on the device machine: ``python3 benchmarks/device/head_alignment.py > $OUT/head_alignment_<gpu>.json``; each
record carries the device, torch and CUDA versions. ``--device cpu --hidden 64 --seq 32`` is a dry run of the
code path (its times say nothing about a GPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def shard_widths(vocab: int, tp: int, divisible_by: int = 128) -> dict[str, int]:
    """Rows per rank: Megatron's padded shard (multiple of divisible_by x TP, split TP ways) and vocab // TP."""
    multiple = divisible_by * tp
    return {"padded": -(-vocab // multiple) * multiple // tp, "unpadded": vocab // tp}


def alignment(width: int) -> int:
    """Largest of 8, 4, 2, 1 elements dividing ``width`` (16-bit elements: 16, 8, 4, 2 bytes)."""
    return next(a for a in (8, 4, 2, 1) if width % a == 0)


def _timer(torch, device):
    """Median seconds of ``fn`` over ``reps`` calls after ``warmup`` (CUDA events on a GPU)."""
    def run(fn, reps: int, warmup: int = 3) -> float:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(reps):
            if device.type == "cuda":
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b) / 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        return statistics.median(times)
    return run


def _cross_entropy_fwd(torch, logits16, target):
    """Megatron's _VocabParallelCrossEntropy forward on one rank, without its all-reduces."""
    logits = logits16.float()
    logits = logits - logits.max(dim=-1)[0].unsqueeze(-1)
    predicted = logits.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    exp = torch.exp(logits, out=logits)
    total = exp.sum(dim=-1)
    exp.div_(total.unsqueeze(-1))
    return torch.log(total) - predicted, exp


def _cross_entropy_bwd(softmax, target, grad_loss, dtype):
    """Its backward, in place on the saved softmax as Megatron's is: minus one at the target, times the loss
    gradient, cast back to the logits' dtype (the ``.float()``'s backward)."""
    softmax.scatter_add_(-1, target.unsqueeze(-1), -softmax.new_ones(target.shape).unsqueeze(-1))
    return softmax.mul_(grad_loss.unsqueeze(-1)).to(dtype)


def measure(torch, device, dtype, tokens: int, hidden: int, width: int, reps: int) -> dict:
    """Seconds of the head's three GEMMs and its cross-entropy passes at one shard width."""
    timed = _timer(torch, device)
    x = torch.randn(tokens, hidden, device=device, dtype=dtype)
    w = torch.randn(width, hidden, device=device, dtype=dtype) * 0.02
    dy = torch.randn(tokens, width, device=device, dtype=dtype)
    target = torch.randint(0, width, (tokens,), device=device)
    grad_loss = torch.ones(tokens, device=device)
    lin = torch.nn.functional.linear
    out = {"fwd_s": timed(lambda: lin(x, w), reps), "dgrad_s": timed(lambda: torch.mm(dy, w), reps),
           "wgrad_s": timed(lambda: torch.mm(dy.t(), x), reps)}
    logits = lin(x, w)
    out["ce_fwd_s"] = timed(lambda: _cross_entropy_fwd(torch, logits, target), reps)
    _, softmax = _cross_entropy_fwd(torch, logits, target)
    out["ce_bwd_s"] = timed(lambda: _cross_entropy_bwd(softmax, target, grad_loss, dtype), reps)
    gemm_s = out["fwd_s"] + out["dgrad_s"] + out["wgrad_s"]
    out["gemm_tflops"] = 3 * 2.0 * tokens * hidden * width / gemm_s / 1e12
    return out


def records(args) -> list[dict]:
    """One record per (TP, micro-batch, padded | unpadded)."""
    import torch

    device = torch.device(args.device)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    env = {"device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu", "torch": torch.__version__,
           "cuda": torch.version.cuda, "dtype": args.dtype, "hidden": args.hidden, "seq": args.seq}
    out = []
    for tp in args.tps:
        for mb in args.micro_batches:
            for kind, width in shard_widths(args.vocab, tp).items():
                rec = measure(torch, device, dtype, mb * args.seq, args.hidden, width, args.reps)
                out.append({**env, "tp": tp, "micro_batch": mb, "shard": kind, "width": width,
                            "alignment": alignment(width), **rec})
    return out


def _gemm_per_row(r: dict) -> float:
    return (r["fwd_s"] + r["dgrad_s"] + r["wgrad_s"]) / r["width"]


def _ce_per_row(r: dict) -> float:
    return (r["ce_fwd_s"] + r["ce_bwd_s"]) / r["width"]


def summary(recs: list[dict]) -> list[str]:
    """Per (TP, micro-batch): unpadded / padded time of the GEMMs and of the cross-entropy, per row of each."""
    by = {(r["tp"], r["micro_batch"], r["shard"]): r for r in recs}
    lines = []
    for tp, mb, kind in by:
        if kind != "unpadded":
            continue
        u, p = by[(tp, mb, "unpadded")], by[(tp, mb, "padded")]
        lines.append(f"TP {tp} mb {mb}: width {u['width']} (align {u['alignment']}) vs {p['width']}: GEMMs per row "
                     f"x{_gemm_per_row(u) / _gemm_per_row(p):.2f} ({u['gemm_tflops']:.0f} vs {p['gemm_tflops']:.0f} TFLOP/s), "
                     f"cross-entropy per row x{_ce_per_row(u) / _ce_per_row(p):.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cuda (the measurement) or cpu (a dry run)")
    ap.add_argument("--dtype", default="fp16", choices=("fp16", "bf16", "fp32"))
    ap.add_argument("--vocab", type=int, default=50257, help="unpadded vocabulary rows, >= 1 (GPT-2: 50,257)")
    ap.add_argument("--hidden", type=int, default=2048, help="hidden size, >= 1 (vTrain's table: 2048)")
    ap.add_argument("--seq", type=int, default=1024, help="sequence length, >= 1; tokens = micro-batch x seq")
    ap.add_argument("--tps", type=int, nargs="+", default=[1, 2, 4, 8], help="TP degrees to shard by, each >= 1")
    ap.add_argument("--micro-batches", type=int, nargs="+", default=[1, 2, 4], help="sequences per micro-batch, >= 1")
    ap.add_argument("--reps", type=int, default=20, help="timed repetitions per point (median kept), >= 1")
    args = ap.parse_args(argv)
    bad = [(n, v) for n, v in (("vocab", args.vocab), ("hidden", args.hidden), ("seq", args.seq),
                               ("reps", args.reps)) if v < 1]
    bad += [("tps", v) for v in args.tps if v < 1] + [("micro-batches", v) for v in args.micro_batches if v < 1]
    if bad:
        print(f"{bad[0][0]}: must be a positive integer, got {bad[0][1]}", file=sys.stderr)
        return 2
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("device: cuda is not available here (--device cpu runs a dry run)", file=sys.stderr)
        return 2
    recs = records(args)
    print(json.dumps(recs, indent=1))
    print("\n".join(summary(recs)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
