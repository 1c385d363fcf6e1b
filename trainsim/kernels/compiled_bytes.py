"""Bytes the kernels Inductor emits for torchtitan's Llama block move, read from Inductor's own scheduler.

``torch.compile`` of a block lowers its forward and backward graphs to Inductor's scheduler nodes: extern calls
(the matrix multiplies and SDPA, costed as GEMMs and attention elsewhere), fallback calls of aten ops Inductor
does not lower (torchtitan's RoPE multiplies complex tensors, which Inductor does not generate code for), and the
generated kernels that fuse every other pointwise and reduction op. Inductor counts the bytes each scheduler
node reads and writes (``GraphLowering.count_bytes``: ``get_read_write_buffers_sizes``, each buffer at most its
size, buffers internal to a fused node not at all) when its ``inductor_metrics`` log is on; this module compiles
``titan_block.TitanBlock`` on CPU, forward and backward, and sums those counts over the generated kernels and the
non-view fallbacks (views such as ``view_as_complex`` move nothing, though Inductor books bytes on them). CPU's
scheduler also fuses kernels that share an outer loop (``OuterLoopFusedSchedulerNode``), which CUDA runs as
separate kernels each reading its inputs, so the count is a floor of what the CUDA kernels move.

The nodes fall into regions (``_region``): RoPE with repeat_kv, SwiGLU, the norms with the residual adds, and the
rest ("other", which should be about nothing). Each region's bytes are linear in its widths -- query, key-value
and token x head-dim elements, FFN elements, hidden elements -- so ``fit_regions`` solves for one coefficient per
width over a few shapes (grouped-query attention; multi-head attention apart, where repeat_kv copies nothing);
cost_models.inductor_bytes holds the result and ``python -m trainsim.kernels.compiled_bytes`` measures it again
(a few seconds of compilation per shape). ``hf_block_bytes`` counts the executor's Hugging Face-style block the
same way.
"""

from __future__ import annotations

import contextlib
import logging
import re

import numpy as np
import torch

from .titan_block import TitanBlock, block_forward

# Fallback calls that only re-view their input (no kernel, no traffic); MultiOutput unpacks a fallback's tuple.
VIEW_FALLBACKS = ("view_as_complex", "view_as_real", "_conj", "view", "expand", "as_strided", "permute",
                  "transpose", "unsqueeze", "squeeze", "alias", "MultiOutput")
MATMUL_OR_ATTENTION = ("mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "_scaled_dot_product_flash_attention_for_cpu",
                       "_scaled_dot_product_flash_attention_for_cpu_backward", "_scaled_dot_product_flash_attention",
                       "_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_efficient_attention",
                       "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_cudnn_attention",
                       "_scaled_dot_product_cudnn_attention_backward")
# (hidden, query heads, KV heads, FFN width) of the grouped-query shapes fit_regions solves over: hidden, FFN
# width, KV heads, query heads and head dim (64, 128) each varied; FFN widths are no multiple of 3 x hidden, so no q/k/v-sized
# buffer is mistaken for an FFN one
SHAPES = ((512, 8, 2, 1792), (512, 8, 2, 2304), (512, 8, 4, 1792), (768, 12, 3, 2688), (1024, 8, 2, 3584),
          (1024, 16, 4, 3584))
MHA_SHAPES = ((512, 8, 8, 1792), (512, 4, 4, 1792))  # kv = heads: repeat_kv returns its input (no copies)
SEQ = 256
REGIONS = ("rope", "swiglu", "norms", "other")
NORM_FUNCTIONS = {"forward", "block_forward"}  # RMSNorm.forward and the block's residual adds
def _kind(node) -> str:
    """"generated", "fallback", "view" or "matmul" for one Inductor scheduler node."""
    from torch._inductor.scheduler import ExternKernelSchedulerNode

    if not isinstance(node, ExternKernelSchedulerNode):
        return "generated"
    ir = node.node
    name = str(getattr(ir, "op_overload", None) or getattr(ir, "python_kernel_name", None) or type(ir).__name__)
    op = name.split(".")[1] if name.startswith("aten.") else name
    if op in MATMUL_OR_ATTENTION:
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
    """The region of a generated or fallback node: "rope" (from RoPE or repeat_kv code, the complex fallbacks
    included), "swiglu" (touching a tokens x FFN tensor), "norms" (from the norms' or the block's residual code) or
    "other" (the rest: nothing of the block's own)."""
    origins = _origin_functions(node)
    if origins & {"rope", "repeat_kv"}:
        return "rope"
    numels = set()
    for dep in (*node.read_writes.reads, *node.read_writes.writes):
        with contextlib.suppress(Exception):
            numels.add(int(dep.get_numel()))
    if ffn_elems in numels:
        return "swiglu"
    return "norms" if origins & NORM_FUNCTIONS else "other"


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


def _compiled_regions(fn, x: torch.Tensor, ffn_elems: int) -> tuple[dict[str, float], dict[str, float]]:
    """Region bytes (_pass_regions) of one compiled forward and backward of ``fn`` on ``x``."""
    from torch._inductor import metrics

    torch._dynamo.reset()
    with _inductor_metrics():
        compiled = torch.compile(fn, fullgraph=True)
        metrics.reset()
        y = compiled(x)
        fwd = _pass_regions(metrics.nodes_num_elem, ffn_elems)
        metrics.reset()
        y.backward(torch.ones_like(y))  # AOTAutograd compiles the backward graph on its first call
        bwd = _pass_regions(metrics.nodes_num_elem, ffn_elems)
    torch._dynamo.reset()
    return fwd, bwd


def region_bytes(hidden: int, heads: int, kv_heads: int, ffn: int, seq: int = SEQ,
                 dtype: torch.dtype = torch.bfloat16) -> dict[str, tuple[float, float]]:
    """Region -> (forward, backward) bytes of one compiled TitanBlock pass over ``seq`` tokens (module doc)."""
    torch.manual_seed(0)
    block = TitanBlock(hidden, heads, kv_heads, ffn).to(dtype)
    d = hidden // heads
    angles = torch.outer(torch.arange(seq).float(), 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d)))
    freqs_cis = torch.polar(torch.ones_like(angles), angles)
    x = torch.randn(1, seq, hidden, dtype=dtype, requires_grad=True)
    fwd, bwd = _compiled_regions(lambda t: block_forward(block, t, freqs_cis), x, seq * ffn)
    return {r: (fwd[r], bwd[r]) for r in REGIONS}


def hf_block_bytes(norm: str = "rmsnorm", activation: str = "swiglu", hidden: int = 512, heads: int = 8,
                   kv_heads: int = 2, ffn: int = 1536, seq: int = SEQ) -> tuple[float, float]:
    """(forward, backward) bytes of the generated kernels and non-view fallbacks of one compiled pass of the
    executor's Hugging Face-style block (kernels/torch_model.Block) in bf16: the figures
    cost_models.inductor_bytes quotes for blocks it leaves at the fused model's bytes."""
    from trainsim.specs.model import ModelSpec

    from .torch_model import Block, ModelOptions

    gated = activation == "swiglu"
    spec = ModelSpec(name="hf", num_layers=2, hidden=hidden, num_heads=heads, num_kv_heads=kv_heads if gated else heads,
                     ffn_hidden=ffn, vocab_size=1000, max_seq_len=seq, tie_embeddings=False, norm=norm,
                     activation=activation, position_embedding="rope" if gated else "learned", bias=not gated)
    torch.manual_seed(0)
    block = Block(spec, ModelOptions()).to(torch.bfloat16)
    x = torch.randn(1, seq, hidden, dtype=torch.bfloat16, requires_grad=True)
    fwd, bwd = _compiled_regions(block, x, seq * ffn)
    return sum(fwd.values()), sum(bwd.values())


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


def fit_regions(shapes=SHAPES, mha_shapes=MHA_SHAPES, seq: int = SEQ) -> dict[str, tuple[float, ...]]:
    """(forward, backward) bytes per element of each region's widths (cost_models.inductor_bytes), least squares
    over ``shapes`` (grouped-query) and ``mha_shapes`` (kv = heads); "residual" holds each fit's largest relative
    residual over its shapes (rope, swiglu, norms, multi-head rope) and "other" the largest share of a pass's
    bytes outside the block's regions."""
    measured = [(shape, region_bytes(*shape, seq=seq)) for shape in shapes]
    mha = [(shape, region_bytes(*shape, seq=seq)) for shape in mha_shapes]
    (q, kv, freqs), r_rope = _solve([[seq * h, seq * k * (h // a), seq * (h // a)] for (h, a, k, _), _ in measured],
                                    [m["rope"] for _, m in measured])
    (f,), r_swiglu = _solve([[seq * ffn] for (*_, ffn), _ in measured], [m["swiglu"] for _, m in measured])
    (nr,), r_norms = _solve([[seq * h] for (h, *_), _ in measured], [m["norms"] for _, m in measured])
    (qkv, mha_freqs), r_mha = _solve([[2 * seq * h, seq * (h // a)] for (h, a, _, _), _ in mha],
                                     [m["rope"] for _, m in mha])
    other = max(m["other"][k] / sum(m[r][k] for r in REGIONS) for _, m in measured + mha for k in (0, 1))
    return {"rope_q": q, "rope_kv": kv, "rope_freqs": freqs, "rope_mha": qkv, "rope_mha_freqs": mha_freqs,
            "swiglu": f, "norms_residuals": nr, "residual": (r_rope, r_swiglu, r_norms, r_mha), "other": (other,)}


def main() -> int:
    """Print the fitted regions beside cost_models.inductor_bytes's constants."""
    from trainsim.cost_models import inductor_bytes as ib

    table = {"rope_q": ib.ROPE_Q_BYTES, "rope_kv": ib.ROPE_KV_BYTES, "rope_freqs": ib.ROPE_FREQS_BYTES,
             "rope_mha": ib.ROPE_MHA_BYTES, "rope_mha_freqs": ib.ROPE_FREQS_BYTES, "swiglu": ib.SWIGLU_BYTES,
             "norms_residuals": ib.NORM_RESIDUAL_BYTES}
    for name, values in fit_regions().items():
        print(f"{name:<16} {' '.join(f'{v:9.4f}' for v in values)}   table {table.get(name, '-')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
