"""MosaicML llm-foundry MPT benchmarks as validation cases: tokens/s of pure-FSDP runs on A100 40/80GB and H100
(BF16, FP8), MFU on MosaicML's own formula (``mosaic_flops_per_seq``). The table is not bundled
(trainsim.data); the per-GPU settings it does not print are in settings/mosaic_gpus.csv."""

from __future__ import annotations

from pathlib import Path

from trainsim.specs import SpecError, preset
from trainsim.specs.memo import memoised
from trainsim.validation.cases import Case, Dataset, read_rows, scenario_or_skip
from trainsim.validation.cells import cluster as _cluster
from trainsim.validation.cells import integer as _int
from trainsim.validation.cells import num as _num
from trainsim.validation.cells import yes_no
from trainsim.validation.external_tables import external_table
from trainsim.validation.settings import read_settings

# --- MosaicML llm-foundry MPT benchmarks -----------------------------------------------------------

MOSAIC_CITATION = ("MosaicML llm-foundry, scripts/train/benchmarking/README.md (MPT training benchmarks, "
                   "throughput/MFU/HFU tables); architecture from scripts/train/yamls/pretrain/mpt-*.yaml")


@memoised(maxsize=64)
def _gpu_settings() -> tuple[dict[str, tuple[str, dict]], dict[tuple[str, str], float]]:
    """settings/mosaic_gpus.csv (with sources): one cluster per GPU type (never per row) -- preset and GPU override
    -- and the peak each MFU was divided by (llm-foundry's GPU_AVAILABLE_FLOPS), per (GPU, precision)."""
    clusters: dict[str, tuple[str, dict]] = {}
    peaks: dict[tuple[str, str], float] = {}
    for s in read_settings("mosaic_gpus.csv"):
        cluster = (s["cluster_preset"], {"gpu": s["gpu_preset"]} if s["gpu_preset"] else {})
        if clusters.setdefault(s["gpu"], cluster) != cluster:
            raise SpecError("settings", f"mosaic_gpus.csv: GPU {s['gpu']} names two clusters")
        peaks[(s["gpu"], s["precision"])] = float(s["peak_flops"])
    return clusters, peaks


def mosaic_clusters() -> dict[str, tuple[str, dict]]:
    """GPU -> (cluster preset, overrides), read on first use (settings/mosaic_gpus.csv)."""
    return _gpu_settings()[0]


def mosaic_peak_flops() -> dict[tuple[str, str], float]:
    """(GPU, dtype) -> the peak FLOP/s each MFU was divided by (A100 312 TFLOP/s, H100 989 bf16, 1979 fp8), read
    on first use (settings/mosaic_gpus.csv)."""
    return _gpu_settings()[1]


def mosaic_flops_per_seq(n_params: float, layers: int, d_model: int, seq: int, factor: int = 3) -> float:
    """MosaicML's FLOPs per sequence: factor * (2 N T + 4 L d T^2); factor 3 for MFU, 4 for HFU with AC."""
    return factor * (2.0 * n_params * seq + 4.0 * layers * d_model * seq**2)


def load_mosaic(path: Path | None = None, *, name: str = "mosaic") -> Dataset:
    """MosaicML MPT FSDP runs: tokens/s per run on A100 40/80GB and H100 (BF16, FP8)."""
    rows = read_rows(path or external_table("mosaic", "mosaic_mpt_benchmarks.csv"))
    cases = [_mosaic_case(r) for r in rows]
    notes = (
        ("metric: tokens/s over all GPUs as published (Throughput T/s); MFU on MosaicML's own formula "
        "3(2NT + 4LdT^2) x seq/s / (GPUs x 312|989|1979 TFLOP/s)."),
        ("layout: pure FSDP (tp = pp = 1, dp = GPUs); FULL_SHARD -> zero 3, SHARD_GRAD_OP -> zero 2; "
        "activation checkpointing -> recompute full; the row's micro-batch and grad accumulation; "
        "first-generation fused attention: the benchmarks ran MPT's Triton FlashAttention kernel "
        "(submit_benchmarks.py --attn_impl default 'triton'; ALiBi needs it), flash_attention_version 1; "
        "no dropout; framework pytorch-fsdp (llm-foundry/Composer: per-block FSDP gathers and "
        "reduce-scatters overlapped with compute, fused cross-entropy loss_fn)."),
        ("precision: amp_bf16/bf16 -> bf16; amp_fp8/fp8 -> fp8 (Transformer Engine); another name skips its "
        "row. Gradients are reduced in bf16 under both MP modes: PURE sets reduce_dtype bf16, and DEFAULT in the "
        "Composer of the torch 2.0.1 benchmark image (0.14-0.16) set only param/buffer dtypes, so FSDP reduced in the param "
        "dtype (fp32 reduction came with Composer PR #2628, October 2023); fp32 gradient shards and "
        "master weights for the optimizer."),
        ("hardware, one cluster per GPU type: A100 40/80GB -> dgx-a100 network (1600 Gbps RoCE per node "
        "= 8 x 200 Gb/s, per the section titles); H100 -> dgx-h100 (8 x 400 Gb/s; CoreWeave HGX H100, "
        "network not stated in the table)."),
        ("model: MPT presets (learned positions sized to the run's seq_len, biases on, tied embeddings); "
        "total_params() equals the published NumParams for every row."),
    )
    return Dataset(name=name, title="MosaicML MPT FSDP throughput (llm-foundry)", metric="tokens_per_s",
                   unit="tok/s", citation=MOSAIC_CITATION, notes=notes, cases=tuple(cases),
                   higher_is_better=True)


# llm-foundry's precision names (Composer's Precision enum: amp_bf16, amp_fp8; the tables also print bf16) and the
# TrainingSpec dtype each runs in; fp32 / amp_fp16 runs are not in the benchmark tables and are not guessed.
MOSAIC_PRECISIONS = {"amp_bf16": "bf16", "bf16": "bf16", "amp_fp8": "fp8", "fp8": "fp8"}


def _layout_disagreement(r: dict, gpus: int, mbs: int, accum: int) -> str | None:
    """Why a row's stated global batch or parallel degrees contradict its micro-batch, accumulation and GPU count
    (the runs are pure FSDP: tp = pp = 1, dp = GPUs; batch = micro-batch x accumulation x GPUs), or None."""
    degrees = {k: _int(r.get(k)) for k in ("tp", "pp", "dp") if (r.get(k) or "").strip()}
    if any(v is None or v <= 0 for v in degrees.values()):
        bad = next(k for k, v in degrees.items() if v is None or v <= 0)
        return f"{bad}: {r.get(bad)!r} is not a positive whole number"
    if degrees.get("tp", 1) != 1 or degrees.get("pp", 1) != 1:
        return f"tp, pp: {degrees.get('tp', 1)} x {degrees.get('pp', 1)}: the benchmarks are pure FSDP (tp = pp = 1)"
    if "dp" in degrees and degrees["dp"] != gpus:
        return f"dp: {r.get('dp')!r} x tp 1 x pp 1 is not num_gpus {gpus}"
    gbs = _int(r.get("global_batch_seqs"))
    if (r.get("global_batch_seqs") or "").strip() and gbs != mbs * accum * gpus:
        return (f"global_batch_seqs: {r.get('global_batch_seqs')!r} is not micro_batch x grad_accum x num_gpus = "
                f"{mbs} x {accum} x {gpus}")
    return None


def _mosaic_case(r: dict) -> Case:
    rid = r["row_id"]
    gpu = (r.get("gpu") or "").strip()
    size = (r.get("model") or "").strip().lower()
    seq, gpus = _int(r["seq_len"]), _int(r["num_gpus"])
    mbs, accum = _int(r["micro_batch"]), _int(r["grad_accum"])
    published = _num(r["throughput_tok_per_s"])
    label = f"{size} s={seq} n={gpus} mb{mbs}x{accum}"
    if None in (seq, gpus, mbs, accum) or published is None:
        return Case(rid, label, published or float("nan"), skip_reason="incomplete row")
    dtype = MOSAIC_PRECISIONS.get((r.get("precision") or "").strip().lower())
    if dtype is None:
        return Case(rid, label, published, skip_reason=f"precision: {r.get('precision')!r} is none of "
                                                       f"{', '.join(MOSAIC_PRECISIONS)}")
    if why := _layout_disagreement(r, gpus, mbs, accum):
        return Case(rid, label, published, skip_reason=why)
    per_gpu = _num(r.get("throughput_tok_per_s_per_gpu"))
    if per_gpu is not None and abs(per_gpu * gpus - published) > 0.01 * published + gpus:  # + a rounded digit each
        return Case(rid, label, published, skip_reason=f"throughput_tok_per_s: {published:g} is not "
                                                       f"throughput_tok_per_s_per_gpu x num_gpus = {per_gpu:g} x {gpus}")
    if gpu not in mosaic_clusters():
        return Case(rid, label, published, skip_reason=f"no cluster for GPU {gpu!r}")
    if preset("models", size) is None:
        return Case(rid, label, published, skip_reason=f"no model preset {size!r}")
    arch = preset("models", size)
    for col, key in (("n_layers", "num_layers"), ("d_model", "hidden"), ("n_heads", "num_heads"),
                     ("ffn_hidden", "ffn_hidden"), ("vocab", "vocab_size")):
        if _int(r.get(col)) != arch[key]:
            return Case(rid, label, published, skip_reason=f"architecture {col}={r.get(col)} differs from preset {size}")
    strategy = (r.get("fsdp_sharding_strategy") or "").upper()
    zero = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0}.get(strategy)
    if zero is None:
        return Case(rid, label, published, skip_reason=f"sharding strategy {strategy!r} not modelled")
    ac, offload = yes_no(r, "activation_checkpointing"), yes_no(r, "activation_cpu_offload")
    if offload:
        return Case(rid, label, published, skip_reason="activation CPU offload is not modelled")
    cpreset, cover = mosaic_clusters()[gpu]
    n_params = _num(r.get("num_params_reported"))
    raw = {
        "model": {"preset": size, "max_seq_len": seq,
                  **({"published_params": n_params} if n_params else {})},
        "cluster": _cluster(cpreset, gpus, **cover),
        "layout": {"tp": 1, "pp": 1},
        "training": {"seq_len": seq, "global_batch": mbs * accum * gpus, "micro_batch": mbs, "dtype": dtype,
                     "recompute": "full" if ac else "none", "zero": zero, "flash_attention": True,
                     "flash_attention_version": 1,
                     "dropout": False, "grad_dtype_bytes": 0,
                     "framework": "pytorch-fsdp"},
    }
    label += f" z{zero}" + (" AC" if ac else "") + (" fp8" if dtype == "fp8" else "")
    scenario, why = scenario_or_skip(raw, rid)
    n_params = n_params or float(arch.get("published_params") or 0)
    flops_seq = mosaic_flops_per_seq(n_params, arch["num_layers"], arch["hidden"], seq)
    peak = mosaic_peak_flops().get((gpu, dtype))
    secondary, fns = {}, {}
    mfu = _num(r.get("mfu_pct"))
    if mfu is not None and peak:
        secondary["mfu_pct"] = mfu
        fns["mfu_pct"] = lambda tok_s, f=flops_seq, T=seq, n=gpus, p=peak: 100.0 * f * (tok_s / T) / (n * p)
    category = f"{gpu} {'fp8' if dtype == 'fp8' else 'bf16'}" + (" AC" if ac else "")
    return Case(rid, label, published, scenario=scenario, skip_reason=why, secondary=secondary,
                secondary_fns=fns, category=category)
