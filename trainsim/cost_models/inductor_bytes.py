"""Memory traffic of torchtitan's Llama block under torch.compile, as Inductor's own scheduler counts it. Pure.

A compiled block's GEMMs and attention are extern calls; everything else runs in the kernels Inductor generates or
in aten fallbacks for what it does not lower. torchtitan's RoPE multiplies complex tensors in fp32
(``torch.view_as_complex(xq.float()...) * freqs_cis``), and Inductor generates no code for complex operators
(``lowering.py``: "Torchinductor does not support code generation for complex operators"): the multiply runs as an
aten fallback between generated kernels that cast each query and key element to fp32 and back, and
``repeat_kv``'s expanded keys and values are copies SDPA reads. So the RoPE region is not one fused 16-bit pass
(what cost_models.flops gives a fused block: read and write each element once) but about six times that.

``kernels/compiled_bytes.py`` compiles ``kernels/titan_block.TitanBlock`` in bf16 on CPU, forward and backward,
and sums Inductor's per-node byte counts (``GraphLowering.count_bytes``) by region: RoPE with repeat_kv (nodes from
``rope``/``repeat_kv`` code, the complex fallbacks included), SwiGLU (nodes touching a tokens x FFN tensor), and
the norms with the residual adds (nodes from their code); what falls outside all three is under 0.2 % of a pass.
``python -m trainsim.kernels.compiled_bytes`` measures them again. Each region is linear in its widths: over six
grouped-query and two multi-head shapes (head dim 64 and 128) the fit leaves 0.03 %, and it gives Llama 3 8B's
own shape (4096 hidden, 32 / 8 heads, FFN 14,336), which it was not fitted on, exactly. CPU's scheduler fuses
kernels that share an outer loop, which CUDA runs apart, so these counts are floors of what CUDA's kernels move.

Measured (torch 2.13, bf16; bytes per element of each region's width, forward / backward):

* RoPE and repeat_kv: 24 / 24 per local query element (tokens x query heads x head dim / tp) and 20 / 20 per local
  key-value element, plus 12 / 16 per token x head dim (the shared ``freqs_cis`` table each complex multiply
  reads); with kv = heads (repeat_kv returns its input) 20 / 20 per query or key-value element plus the same
  12 / 16. The fused model has 4 / 4 per query or key element. One KV head (multi-query) measures 3 % / 15 %
  above this: Inductor broadcasts the single head differently; left as is.
* the two norms and residual adds together: 18.0 / 38.1 per tokens x hidden element on the rank (sequence-sharded
  under sequence parallelism) -- against 20.0 / 24.0 (the backward recomputes the norm statistics and reduces the
  weight gradient in kernels of its own);
* SwiGLU: 6 / 10 per tokens x FFN element, as the fused model has it (so that op keeps its bytes).

Recomputation re-runs these ops at their forward bytes before the backward (flops.recompute_ops). Under torch.compile
the partitioner moves the re-run into the backward graph instead, where Inductor fuses part of it: the same count
with the block under full activation checkpointing gives 237 bytes per tokens x hidden element for the forward
and backward passes, against the 243 this costing gives (hidden 1024, 8 / 2 heads, FFN 3,584), so the re-run is
costed about 3 % high.

The host issues a compiled torchtitan block at the kernel count of the Hugging Face-style block
(cost_models/compiled_issue.py: 16 forward, 28 backward); Inductor schedules 20 / 28 for TitanBlock (forward: 9
generated kernels, 3 fallbacks, 8 extern calls), a difference left as is.

Other compiled blocks keep the fused model's bytes. The same count on the executor's Hugging Face-style blocks
(``compiled_bytes.hf_block_bytes``: hidden 512, 8 heads, FFN 1,536, 256 tokens) gives, per tokens x hidden element,
45.0 / 78.2 bytes for RMSNorm-SwiGLU-RoPE with 2 KV heads (fused model 43.0 / 59.0) and 30.0 / 68.3 for
LayerNorm-GeLU with biases (32.0 / 58.0): their backward moves 18-32 % more than costed.
"""

from __future__ import annotations

from dataclasses import replace

from .shapes import LayerShape

# (forward, backward) bytes per element, 16-bit blocks (module doc; kernels/compiled_bytes.py)
ROPE_Q_BYTES = (24.0, 24.0)  # grouped-query: per local query element, repeat_kv's expanded copies included
ROPE_KV_BYTES = (20.0, 20.0)  # grouped-query: per local key-value element
ROPE_MHA_BYTES = (20.0, 20.0)  # kv = heads: per local query or key-value element (repeat_kv copies nothing)
ROPE_FREQS_BYTES = (12.0, 16.0)  # per local token x head dim: the freqs_cis table the complex multiplies read
NORM_RESIDUAL_BYTES = (18.03, 38.05)
SWIGLU_BYTES = (6.0, 10.0)  # per local FFN element, equal to the fused model's: the SwiGLU op keeps its bytes
NORM_RESIDUAL_OPS = ("norm1", "residual1", "norm2", "residual2")


def titan_compiled_ops(shp: LayerShape, ops: tuple) -> tuple:
    """``ops`` of a torchtitan block under torch.compile (``shp.titan_compiled``) with Inductor's bytes for RoPE
    (and repeat_kv) and for the norms and residual adds (module doc); the GEMMs, attention and SwiGLU as given."""
    tp = shp.tp
    q_elems, kv_elems = shp.tokens * shp.a * shp.d / tp, shp.tokens * shp.kv * shp.d / tp
    q_bytes, kv_bytes = (ROPE_Q_BYTES, ROPE_KV_BYTES) if shp.kv < shp.a else (ROPE_MHA_BYTES, ROPE_MHA_BYTES)
    freqs_elems = shp.tokens * shp.d  # every rank reads the whole table for its tokens
    nr_elems = shp.tokens // shp.sp_div * shp.h
    fused = [op for op in ops if op.name in NORM_RESIDUAL_OPS]
    fused_f = sum(op.fwd_bytes for op in fused)
    fused_b = sum(op.bwd_input_bytes + op.bwd_weight_bytes for op in fused)
    scale_f = NORM_RESIDUAL_BYTES[0] * nr_elems / fused_f if fused_f else 1.0
    scale_b = NORM_RESIDUAL_BYTES[1] * nr_elems / fused_b if fused_b else 1.0
    rope = [q_bytes[i] * q_elems + kv_bytes[i] * kv_elems + ROPE_FREQS_BYTES[i] * freqs_elems for i in (0, 1)]
    out = []
    for op in ops:
        if op.name == "rope":
            op = replace(op, fwd_bytes=rope[0], bwd_input_bytes=rope[1], bwd_weight_bytes=0.0)
        elif op.name in NORM_RESIDUAL_OPS:
            op = replace(op, fwd_bytes=op.fwd_bytes * scale_f, bwd_input_bytes=op.bwd_input_bytes * scale_b,
                         bwd_weight_bytes=op.bwd_weight_bytes * scale_b)
        out.append(op)
    return tuple(out)
