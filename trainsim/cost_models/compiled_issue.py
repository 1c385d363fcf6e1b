"""Kernels a block issues under torch.compile, for the host's issue time (cost_models.host_issue). Pure.

Eager PyTorch launches one kernel per non-view aten op (host_issue.BLOCK_OPS). Under ``torch.compile`` Inductor
calls the matrix multiplies and the attention op as extern kernels and fuses the pointwise and reduction ops
between them into generated kernels, one per connected region (PyTorch 2 paper, Ansel et al., ASPLOS 2024,
Sec. 5; trainsim.kernels.compiled_count counts the regions in the graphs AOTAutograd hands to Inductor, with the
partitioner Inductor uses). A compiled pass therefore launches

    GEMMs + attention calls + one fused kernel per pointwise/norm region

per block, fewer than eager's kernels, and dispatches no Python per op (host_issue, "compile"). The counts are a
lower bound of Inductor's launches (it may split a region: compiled_count's module doc), so a compiled pass's
issue time is a floor, never below the launches it cannot avoid.
"""

from __future__ import annotations

# (forward kernels, backward kernels) of one block under torch.compile, by host_issue.BLOCK_OPS style
# (`python -m trainsim.kernels.compiled_count` counts them again; tests/test_compiled_issue.py holds them).
# Eager (host_issue.BLOCK_OPS kernels) for comparison: 12/26, 48/73, 30/28.
COMPILED_BLOCK_KERNELS: dict[str, tuple[int, int]] = {
    # q, k, v, o, fc1, fc2 + SDPA; norm1 | residual add + norm2 | GeLU | residual add
    "layernorm-gelu-learned": (11, 20),
    "rmsnorm-swiglu-rope": (16, 28),
    "megatron-gpt-unfused": (14, 19),
    # the eager softmax fallback (fp32 cast, scale, masked_fill, softmax, cast back) fuses into the same regions
    "megatron-gpt-unfused-eager-softmax": (14, 19),
}


def compiled_kernel_count(style: str, eager: tuple[int, int], block_eager: tuple[int, int]) -> tuple[int, int]:
    """(forward, backward) kernel launches of a compiled block pass: the style's compiled block kernels plus what
    the eager count holds beyond the block's own kernels (``eager`` - ``block_eager``: collectives issued from
    Python, which compile leaves as calls). An unknown style keeps its eager count."""
    compiled = COMPILED_BLOCK_KERNELS.get(style)
    if compiled is None:
        return eager
    return (compiled[0] + eager[0] - block_eager[0], compiled[1] + eager[1] - block_eager[1])
