"""Host issue time of trainsim execute's eager micro-batch and optimizer step, per block and per micro-batch.

A tiny model whose kernels do ~no work (``microbench.eager_block_styles``) is run exactly as the executor's
``Parallel._accumulate`` runs a micro-batch (kernels/parallelize.py): the chunk's forward and
``F.cross_entropy`` on an fp32 copy of the logits under the executor's autocast (bf16/fp16 on CUDA), then
``(loss / n).backward()`` with the gradients already held (``AccumulateGrad`` adds, as from the second
micro-batch on), and ``torch.optim.Adam``'s step as ``_make_optimizer`` builds it. On a GPU each pass's
event time is then its host's issue time.

Each pass is timed at two depths, ``LAYERS`` = (2, 8) blocks: the slope is one block's issue time inside a
running pass, the intercept what the pass pays once (the embedding, norm, head and loss, the autograd engine's
start, and the first ops after the host sync that starts each timed call: a host that has just waited for its
GPU issues its first ops slower, which a one-block measurement would charge to the block). The optimizer step's
slope is per parameter tensor (each block adds ``ModelSpec.block_param_tensors`` of them): torch's foreach Adam
still loops over the tensors in Python for the bias corrections (``_get_value(step)`` per tensor) and steps the
CPU step counters one by one. Full recompute (``checkpoint(..., use_reentrant=False)``) is timed apart: its
backward re-issues each block's forward.
"""

from __future__ import annotations

import contextlib
import statistics

import torch
import torch.nn.functional as F

from trainsim.cost_models.profile import ChunkHostIssue
from trainsim.specs import ModelSpec

from .microbench import BenchConfig, eager_block_styles, time_fn
from .parallelize import _make_optimizer
from .torch_model import ModelOptions, build_chunk

LAYERS = (2, 8)


def _model(style_spec: dict, layers: int, recompute: str, device: torch.device):
    spec = ModelSpec(**dict(style_spec, num_layers=layers))
    return build_chunk(spec, list(range(layers)), True, True, ModelOptions(recompute=recompute), seed=0,
                       device=device), spec


def _time_passes(chunk, spec, cfg, autocast_dtype) -> tuple[list[float], list[float], list[float]]:
    """Per-rep seconds of (forward + loss, backward, optimizer step) of one micro-batch (microbench.time_fn)."""
    dev = cfg.device
    ids = torch.randint(0, spec.vocab_size, (1, spec.max_seq_len), device=dev)
    tgt = torch.randint(0, spec.vocab_size, (1, spec.max_seq_len), device=dev)
    opt = _make_optimizer(list(chunk.parameters()), "adam", lr=1e-3)
    state: dict = {}

    def ctx():
        return torch.autocast(device_type=dev.type, dtype=autocast_dtype) if autocast_dtype else contextlib.nullcontext()

    def fwd() -> None:
        with ctx():
            state["loss"] = F.cross_entropy(chunk(ids).flatten(0, 1).float(), tgt.flatten())

    def bwd() -> None:
        (state.pop("loss") / 4).backward()

    many = BenchConfig(device=dev, warmup=max(cfg.warmup, 5), reps=max(cfg.reps, 30), max_point_s=0.5)
    fwd()
    bwd()   # the gradients exist from here on: later backwards accumulate, as micro-batches 2..n do
    f = time_fn(fwd, many, setup=lambda: state.pop("loss", None))
    b = time_fn(bwd, many, setup=fwd)
    s = time_fn(opt.step, many)
    return f, b, s


def _fit(lo: list[float], hi: list[float], x_lo: int, x_hi: int) -> tuple[float, float]:
    """(seconds per unit, seconds at zero units) through the medians of two depths' times."""
    a, b = statistics.median(lo), statistics.median(hi)
    per = max(0.0, (b - a) / (x_hi - x_lo))
    return per, max(0.0, a - x_lo * per)


def chunk_issue_from_runs(runs: dict) -> dict:
    """``{style key: ChunkHostIssue}`` from raw timings ``{"<style>|<bf16|fp16|none>|<none|full>|<layers>":
    {"tensors": n, "fwd": [s...], "bwd": [...], "step": [...]}}`` at the two depths ``LAYERS``; the key carries
    ``+autocast-<dtype>`` where the passes ran under autocast."""
    lo, hi = LAYERS
    out = {}
    for style in sorted({k.split("|")[0] for k in runs}):
        for ac in sorted({k.split("|")[1] for k in runs if k.startswith(style + "|")}):
            r = {(rc, n): runs.get(f"{style}|{ac}|{rc}|{n}") for rc in ("none", "full") for n in LAYERS}
            if any(v is None for v in r.values()):
                continue
            bf, mf = _fit(r["none", lo]["fwd"], r["none", hi]["fwd"], lo, hi)
            bb, mb = _fit(r["none", lo]["bwd"], r["none", hi]["bwd"], lo, hi)
            bfull, _ = _fit(r["full", lo]["bwd"], r["full", hi]["bwd"], lo, hi)
            st, sf = _fit(r["none", lo]["step"], r["none", hi]["step"], r["none", lo]["tensors"],
                          r["none", hi]["tensors"])
            out[style + ("" if ac == "none" else f"+autocast-{ac}")] = ChunkHostIssue(
                layers=LAYERS, block_fwd_s=bf, block_bwd_s=bb, block_bwd_full_recompute_s=bfull,
                microbatch_fwd_s=mf, microbatch_bwd_s=mb, step_per_tensor_s=st, step_fixed_s=sf,
                reps=min(len(v[p]) for v in r.values() for p in ("fwd", "bwd", "step")))
    return out


def bench_chunk_issue(cfg, autocast_dtypes=(torch.bfloat16, None)) -> dict:
    """``{style key: ChunkHostIssue}`` for both executor block styles, under each of ``autocast_dtypes``
    (None: no autocast), measured on ``cfg.device``."""
    runs = {}
    for style, base in eager_block_styles().items():
        for dt in autocast_dtypes:
            ac = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dt, "none")
            for rc in ("none", "full"):
                for n in LAYERS:
                    torch.manual_seed(0)
                    chunk, spec = _model(base, n, rc, cfg.device)
                    f, b, s = _time_passes(chunk, spec, cfg, dt)
                    runs[f"{style}|{ac}|{rc}|{n}"] = {"tensors": len(list(chunk.parameters())),
                                                       "fwd": f, "bwd": b, "step": s}
    return chunk_issue_from_runs(runs)
