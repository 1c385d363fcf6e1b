"""Bytes the kernels Inductor emits for torchtitan's Llama block move, read from Inductor's own scheduler.

``torch.compile`` of a block lowers its forward and backward graphs to Inductor's scheduler nodes: extern calls
(the matrix multiplies and SDPA, costed as GEMMs and attention elsewhere), fallback calls of aten ops Inductor
does not lower (torchtitan's RoPE multiplies complex tensors, which Inductor does not generate code for), and the
generated kernels that fuse every other pointwise and reduction op. Inductor counts the bytes each scheduler
node reads and writes (``GraphLowering.count_bytes``: ``get_read_write_buffers_sizes``, each buffer once per
node) when its ``inductor_metrics`` log is on; this module compiles ``titan_block.TitanBlock`` on CPU, forward and
backward, and sums those counts over the generated kernels and the non-view fallbacks (views such as
``view_as_complex`` move nothing). CPU's scheduler also fuses kernels that share an outer loop
(``OuterLoopFusedSchedulerNode``), which CUDA runs as separate kernels each reading its inputs, so the count is
a floor of what the CUDA kernels move.

The nodes fall into three regions (``_region``): RoPE with repeat_kv, SwiGLU, and the norms with the residual adds.
Each region's bytes are linear in its widths -- query and key-value elements, FFN elements, hidden elements --
so ``fit_regions`` solves for one coefficient per width over a few shapes (grouped-query attention; multi-head
attention apart, where repeat_kv copies nothing); cost_models.inductor_bytes holds the result and ``python -m
trainsim.kernels.compiled_bytes`` measures it again (a few seconds of compilation per shape).
"""

from __future__ import annotations

import contextlib
import logging
import re

import numpy as np
import torch

from .titan_block import TitanBlock, block_forward

# Fallback calls that only re-view their input (no kernel, no traffic).
VIEW_FALLBACKS = ("view_as_complex", "view_as_real", "_conj", "reshape", "view", "expand", "as_strided",
                  "permute", "transpose", "unsqueeze", "squeeze", "alias")
MATMUL_OR_ATTENTION = ("mm", "addmm", "bmm", "baddbmm", "scaled_dot_product", "flash_attention",
                       "efficient_attention", "_scaled_mm")
# (hidden, query heads, KV heads, FFN width) of the shapes fit_regions solves over: each width varied alone
SHAPES = ((512, 8, 2, 1536), (512, 8, 2, 2048), (512, 8, 4, 1536), (768, 12, 3, 1536))
MHA_SHAPE = (512, 8, 8, 1536)  # kv = heads: repeat_kv returns its input (no copies)
SEQ = 256
REGIONS = ("rope", "swiglu", "norms")


def _kind(node) -> str:
    """"generated", "fallback", "view" or "matmul" for one Inductor scheduler node."""
    from torch._inductor.scheduler import ExternKernelSchedulerNode

    if not isinstance(node, ExternKernelSchedulerNode):
        return "generated"
    ir = node.node
    name = str(getattr(ir, "op_overload", None) or getattr(ir, "python_kernel_name", "") or "")
    op = name.split(".")[1] if name.startswith("aten.") else name
    if any(k in op for k in MATMUL_OR_ATTENTION):
        return "matmul"
    return "view" if op in VIEW_FALLBACKS else "fallback"


def _origin_functions(node) -> set[str]:
    """Names of the innermost user functions whose code produced a scheduler node (its FX origins' stack traces)."""
    names = set()
    for sub in node.get_nodes():
        for origin in getattr(sub.node, "origins", ()) or ():
            frames = re.findall(r"in (\w+)\n", origin.meta.get("stack_trace") or "")
            if frames:
                names.add(frames[-1])
    return names


def _region(node, ffn_elems: int) -> str:
    """"rope" (RoPE and repeat_kv, and the complex fallbacks), "swiglu" (a node touching a tokens x FFN tensor) or
    "norms" (the norms and residual adds: the rest) for a generated or fallback node."""
    if _kind(node) == "fallback" or _origin_functions(node) & {"rope", "repeat_kv"}:
        return "rope"
    numels = set()
    for dep in (*node.read_writes.reads, *node.read_writes.writes):
        with contextlib.suppress(Exception):
            numels.add(int(dep.get_numel()))
    return "swiglu" if ffn_elems in numels else "norms"


def _pass_regions(nodes, ffn_elems: int) -> dict[str, float]:
    """Bytes per region of the generated kernels and non-view fallbacks among one graph's (node, bytes // 4)."""
    out = dict.fromkeys(REGIONS, 0.0)
    for node, n4 in nodes:
        if _kind(node) in ("generated", "fallback"):
            out[_region(node, ffn_elems)] += 4.0 * n4
    return out


@contextlib.contextmanager
def _inductor_metrics():
    """Inductor's metrics log on, its compiled-graph caches off (a cached graph is not scheduled, so not counted)."""
    import torch._functorch.config as functorch_config
    from torch._inductor import config as inductor_config

    log = logging.getLogger("torch._inductor.compile_fx.__inductor_metrics")
    level, propagate = log.level, log.propagate
    log.setLevel(logging.INFO)  # Inductor counts the bytes only when this log would print them
    log.propagate = False  # ... which it does not: no handler of its own, none above it
    try:
        with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
            yield
    finally:
        log.setLevel(level)
        log.propagate = propagate


def region_bytes(hidden: int, heads: int, kv_heads: int, ffn: int, seq: int = SEQ,
                 dtype: torch.dtype = torch.bfloat16) -> dict[str, tuple[float, float]]:
    """Region -> (forward, backward) bytes of one compiled TitanBlock pass over ``seq`` tokens (module doc)."""
    from torch._inductor import metrics

    torch.manual_seed(0)
    block = TitanBlock(hidden, heads, kv_heads, ffn).to(dtype)
    d = hidden // heads
    angles = torch.outer(torch.arange(seq).float(), 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d)))
    freqs_cis = torch.polar(torch.ones_like(angles), angles)
    x = torch.randn(1, seq, hidden, dtype=dtype, requires_grad=True)
    torch._dynamo.reset()
    with _inductor_metrics():
        compiled = torch.compile(lambda t: block_forward(block, t, freqs_cis), fullgraph=True)
        metrics.reset()
        y = compiled(x)
        fwd = _pass_regions(metrics.nodes_num_elem, seq * ffn)
        metrics.reset()
        y.backward(torch.ones_like(y))
        bwd = _pass_regions(metrics.nodes_num_elem, seq * ffn)
    torch._dynamo.reset()
    return {r: (fwd[r], bwd[r]) for r in REGIONS}


def _solve(rows: list[list[float]], values: list[tuple[float, float]]) -> tuple[list[tuple[float, float]], float]:
    """Least-squares coefficients (forward, backward) per column of ``rows`` and the largest relative residual."""
    a = np.array(rows, dtype=float)
    coef, resid = [], 0.0
    for k in (0, 1):
        y = np.array([v[k] for v in values])
        c = np.linalg.lstsq(a, y, rcond=None)[0]
        resid = max(resid, float(np.max(np.abs(a @ c - y) / y)))
        coef.append(c)
    return [(float(coef[0][i]), float(coef[1][i])) for i in range(a.shape[1])], resid


def fit_regions(shapes=SHAPES, seq: int = SEQ) -> dict[str, tuple[float, float]]:
    """(forward, backward) bytes per element of each region's widths (cost_models.inductor_bytes), least squares
    over ``shapes`` (grouped-query; ``MHA_SHAPE`` alone for kv = heads), with each fit's largest relative
    residual."""
    measured = [(shape, region_bytes(*shape, seq=seq)) for shape in shapes]
    (q, kv), rope_resid = _solve([[seq * h, seq * k * (h // a)] for (h, a, k, _), _ in measured],
                                 [m["rope"] for _, m in measured])
    (f,), swiglu_resid = _solve([[seq * ffn] for (*_, ffn), _ in measured], [m["swiglu"] for _, m in measured])
    (nr,), norms_resid = _solve([[seq * h] for (h, *_), _ in measured], [m["norms"] for _, m in measured])
    h, _, _, _ = MHA_SHAPE
    mha = region_bytes(*MHA_SHAPE, seq=seq)["rope"]
    per_elem = tuple(v / (2 * seq * h) for v in mha)  # query and key-value elements alike: tokens x hidden each
    return {"rope_q": q, "rope_kv": kv, "rope_mha": per_elem, "swiglu": f, "norms_residuals": nr,
            "residual": (max(rope_resid, swiglu_resid, norms_resid),) * 2}


def main() -> int:
    """Print the fitted regions beside cost_models.inductor_bytes's constants."""
    from trainsim.cost_models import inductor_bytes as ib

    table = {"rope_q": ib.ROPE_Q_BYTES, "rope_kv": ib.ROPE_KV_BYTES, "rope_mha": ib.ROPE_MHA_BYTES,
             "swiglu": ib.SWIGLU_BYTES, "norms_residuals": ib.NORM_RESIDUAL_BYTES}
    for name, (f, b) in fit_regions().items():
        print(f"{name:<16} fwd {f:8.3f} bwd {b:8.3f}   table {table.get(name)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
