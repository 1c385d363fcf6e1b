"""Where the Mamba-2 SSD scan's cost comes from on each GPU (prints a table; no assertions).

Run: python benchmarks/bench_ssd_balance.py

For the Mamba layer of Nemotron 3 Nano and Nemotron-H 8B / 56B (seq 8192, the micro-batch and TP given per row) it
prints, per pass, the SSD's FLOPs (ssd_fwd_flops / ssd_bwd_flops, the kernels' tl.dot products), its HBM bytes (the
kernel-by-kernel passes of cost_models/mamba.py), the FLOP time at the fused-attention efficiency the model uses, the
byte time at the STREAM-measured bandwidth, and the fraction of the 16-bit peak below which the FLOPs would bind
(intensity x bandwidth / peak). Where that fraction is a few per cent the scan's time is its bytes whatever tile
efficiency the Triton kernels reach above it; the last column is the whole Mamba layer's share of the non-GEMM time.

It then prints trainsim's step-time ratios between GPUs for a pure Mamba-2 stack against a measured one: state-spaces/
mamba issue #904 (2026-04-06, "Training throughput ... Measured with d_model=2048, n_layers=48, batch=4, bf16,
seq_len=4096") gives Mamba2 training at 102.5 (A100), 239.2 (H200) and 360.4 (GB200) TFLOP/s on one GPU; the same
FLOP count on each GPU makes the ratios of those figures the measured speed-ups, whatever FLOP formula the thread
used. The stack is mamba_ssm's default Mamba2 block (d_state 128, headdim 64, expand 2, one group, chunk 256,
vocabulary 50277 padded to 50288, tied embeddings).
"""

from __future__ import annotations

from trainsim.cost_models.compute import hw_of, layer_op_times
from trainsim.cost_models.mamba import mamba_mixer_ops
from trainsim.cost_models.shapes import block_kinds, layer_shape
from trainsim.specs import build_scenario

ROWS = (  # (model, cluster, gpus, tp, micro-batch)
    ("nemotron-3-nano-30b-a3b", "gb300-nvl72", 8, 1, 4),
    ("nemotron-3-nano-30b-a3b", "gb200-nvl72", 8, 1, 2),
    ("nemotron-3-nano-30b-a3b", "dgx-b300", 8, 1, 4),
    ("nemotron-3-nano-30b-a3b", "dgx-b200", 8, 1, 2),
    ("nemotron-3-nano-30b-a3b", "dgx-h100", 16, 1, 1),
    ("nemotron-h-8b", "dgx-h100", 8, 2, 1),
    ("nemotron-h-56b", "dgx-h100", 8, 8, 1),
)


def _mamba_scenario(model: str, cluster: str, gpus: int, tp: int, mb: int):
    scn = build_scenario({"model": model, "cluster": cluster, "gpus": gpus, "layout": {"tp": tp},
                          "training": {"seq_len": 8192, "global_batch": gpus * mb // tp, "micro_batch": mb,
                                       "dtype": "bf16", "recompute": "none", "sequence_parallel": tp > 1}})
    return next(s for s, _ in block_kinds(scn) if s.model.hybrid_pattern == "M")


# Measured Mamba2 training TFLOP/s of issue #904's table (hand-entered; the thread is cited in the module doc).
ISSUE_904_TFLOPS = {"dgx-a100": 102.5, "hgx-h200": 239.2, "gb200-nvl72": 360.4}
ISSUE_904_MODEL = {"name": "mamba2-2048x48", "num_layers": 48, "hidden": 2048, "num_heads": 32, "ffn_hidden": 8192,
                   "vocab_size": 50288, "norm": "rmsnorm", "position_embedding": "none", "max_seq_len": 4096,
                   "bias": False, "tie_embeddings": True, "mamba_heads": 64, "mamba_head_dim": 64, "mamba_groups": 1,
                   "mamba_state_dim": 128, "mamba_chunk_size": 256, "hybrid_pattern": "M" * 48, "block_norms": 1}


def _layers_s(cluster: str) -> float:
    scn = build_scenario({"model": ISSUE_904_MODEL, "cluster": cluster, "gpus": 1, "layout": {"tp": 1},
                          "training": {"seq_len": 4096, "global_batch": 4, "micro_batch": 4, "dtype": "bf16",
                                       "recompute": "none"}})
    return sum(n * sum(t.fwd_s + t.bwd_input_s + t.bwd_weight_s for t in layer_op_times(s))
               for s, n in block_kinds(scn))


def issue_904_ratios() -> None:
    t = {c: _layers_s(c) for c in ISSUE_904_TFLOPS}
    print("\npure Mamba-2 stack (issue #904 shape), step-time ratios of the 48 layers, predicted vs measured:")
    for slow, fast in (("dgx-a100", "hgx-h200"), ("hgx-h200", "gb200-nvl72")):
        measured = ISSUE_904_TFLOPS[fast] / ISSUE_904_TFLOPS[slow]
        print(f"  {fast} over {slow}: predicted x{t[slow] / t[fast]:.2f}, measured x{measured:.2f}")


def main() -> None:
    print(f"{'model':24s} {'cluster':12s} tp mb | pass  GFLOP    GB  flop-us  byte-us  binds<  | non-GEMM share")
    for model, cluster, gpus, tp, mb in ROWS:
        s = _mamba_scenario(model, cluster, gpus, tp, mb)
        shp, hw = layer_shape(s), hw_of(s.cluster.gpu, s.training.dtype)
        ssd = next(o for o in mamba_mixer_ops(shp) if o.name == "ssd_scan")
        times = layer_op_times(s)
        total = sum(t.fwd_s + t.bwd_input_s + t.bwd_weight_s for t in times)
        gemm = sum(t.fwd_s + t.bwd_input_s + t.bwd_weight_s for t in times if "proj" in t.name)
        for name, fl, nb in (("fwd", ssd.fwd_flops, ssd.fwd_bytes), ("bwd", ssd.bwd_input_flops, ssd.bwd_input_bytes)):
            binds = fl / nb * hw.mem_Bps / hw.peak
            print(f"{model:24s} {cluster:12s} {tp:2d} {mb:2d} | {name}  {fl / 1e9:6.1f} {nb / 1e9:5.2f} "
                  f"{fl / (hw.peak * hw.attn_eff) * 1e6:8.0f} {nb / hw.mem_Bps * 1e6:8.0f}  {binds:6.3f}  | "
                  f"{(total - gemm) / total:5.1%}")
    issue_904_ratios()


if __name__ == "__main__":
    main()
