"""HBM bytes and kernel launches of the memory-bound ops of torchtitan's eager Llama block (``LayerShape.titan``).

A fused block (Megatron-Core / Transformer Engine) runs each norm, RoPE and SwiGLU as one kernel; torchtitan's eager
model code runs each as a chain of aten ops, every one a kernel that reads its inputs from HBM and writes its output
back (pytorch/torchtitan torchtitan/models/llama/model.py and models/norms.py at 1ea476e9f, the code of its April 2024
``docs/performance.md`` tables; the same code at 83c879f18 and ba2469780, activations.py). The ops and their output
sizes are those of torch's own trace of the block (cost_models/op_sac_trace.py ``FORWARD_GQA`` / ``BACKWARD_GQA``,
kernels/alloc_trace.py); the reads below follow from each op's inputs. Per element, with ``e``-byte activations:

* **RMSNorm** ``self._norm(x.float()).type_as(x) * self.weight``, ``_norm(x) = x * rsqrt(x.pow(2).mean(-1) + eps)``.
  Forward: ``_to_copy`` (read e, write 4), ``pow`` (4 + 4), ``mean`` (read 4), ``mul`` by rsqrt (4 + 4), ``_to_copy``
  back (4 + e), ``mul`` by the weight (e + e): ``4e + 28`` bytes in 8 kernels (``add`` and ``rsqrt`` on one value per
  token among them). Backward (autograd of that chain): the weight ``mul``'s two gradients (read e, write e; read 2e,
  write e) and the weight's ``sum`` (read e); ``ToCopyBackward`` (e + 4); the rsqrt ``mul``'s input gradient (4 + 4)
  and the rstd's (read 8, write 4) with its ``sum`` (read 4); ``MeanBackward``'s ``div`` (write 4); ``PowBackward``'s
  ``pow``, ``mul`` by 2 and ``mul`` by the gradient (8, 8, 12); the two input gradients' ``add`` (12); the last
  ``ToCopyBackward`` (4 + e): ``8e + 76`` bytes in 16 kernels. A fused norm moves 2e forward and 3e backward.
* **RoPE** ``torch.view_as_real(torch.view_as_complex(xq.float().reshape(...)) * freqs_cis).flatten(3).type_as(xq)``
  for q and for k: ``_to_copy`` to fp32 (e + 4), the complex ``mul`` (read 4, write 4; the shared ``freqs_cis`` is
  s x d/2 complex64, read once per head through the cache and not counted), ``_to_copy`` back (4 + e): ``2e + 16``;
  backward the gradient's ``_to_copy`` to fp32, the ``mul`` by the conjugated frequencies and the ``_to_copy`` back:
  ``2e + 16`` again. Kernels: 3 per tensor forward, 4 backward (the ``clone`` of the conjugate). A fused kernel
  reads and writes once (2e, 2e).
* **repeat_kv** (grouped-query attention): ``x[:, :, :, None, :].expand(...).reshape(...)`` copies k and v to the
  query heads (two ``clone`` kernels, each reading the key/value width and writing the query width); its backward
  sums each gradient back (two ``sum`` kernels, reading the query width, writing the key/value width).
* **SwiGLU** ``w2(F.silu(w1(x)) * w3(x))``: flops.EAGER_SWIGLU_RW, the same two eager ops as trainsim execute's.

``op_sac_rerun`` lists what torchtitan's per-op selective checkpointing re-runs before a block's backward
(torchtitan/parallelisms/parallelize_llama.py at 1ea476e9f ``_get_custom_policy``: "Saves output of all compute ops,
except every second mm"; ``no_recompute_list`` = aten.mm, the flash / efficient SDPA ops, reduce_scatter_tensor).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # flops.py builds the ops and imports this module
    from .flops import Op


def norm_rw(e: int) -> tuple[float, float]:
    """(forward, backward) HBM bytes per normalised element of torchtitan's eager RMSNorm (module docstring)."""
    return float(4 * e + 28), float(8 * e + 76)


NORM_LAUNCHES = (8, 16)


# torchtitan's Triton ``TritonFusedRMSNorm`` (``norm_type = "fused_rmsnorm"``, torchtitan/models/norms.py at
# 1ea476e9f) moves a fused norm's bytes (``_rms_norm_fwd_kernel`` reads x and writes y, ``_rms_norm_bwd_kernel_sm``
# reads x and dy and writes dx, plus the fp32 rstd per token) in these kernels: the forward kernel; the backward
# kernel, ``_dw.sum(0)`` over the per-SM weight-gradient partials and its ``.to(weight.dtype)``.
FUSED_NORM_LAUNCHES = (1, 3)


def rope_rw(e: int) -> tuple[float, float]:
    """(forward, backward) HBM bytes per rotated q or k element of RoPE by complex multiplication in fp32."""
    return float(2 * e + 16), float(2 * e + 16)


ROPE_LAUNCHES = (6, 8)  # q and k: _to_copy, mul, _to_copy each; backward a clone of the conjugate too


def repeat_kv_rw(e: int, heads: int, kv_heads: int) -> float:
    """HBM bytes per element of the two expanded (query-width) copies, forward or backward: one element written
    (read) and ``kv_heads / heads`` of one read (written)."""
    return e * (1.0 + kv_heads / heads)


def op_sac_rerun(ops: tuple[Op, ...]) -> tuple[Op, ...]:
    """The ops torchtitan's per-op policy (recompute_modules op_sac, activations.py; flops.recompute_ops) re-runs
    in a dense block: every op whose output it does not save -- norms, RoPE, residual adds, the activation
    function, torchtitan's repeat_kv copies -- and every second ``aten.mm`` of the block: wk (matmul 2), the
    out-projection wo (4) and, gated, w3 (6; with GeLU the block's 6th matmul is fc2). The fused qkv and SwiGLU fc1
    ops hold wk and w3 beside the saved wq, wv and w1, so their re-run shares are ops of their own (``_gemm_share``)."""
    gated = any(op.name == "swiglu" for op in ops)
    saved = {"qkv", "attention", "fc1"} | ({"fc2"} if gated else set())
    rerun = [op for op in ops if op.name not in saved]
    by_name = {op.name: op for op in ops}
    qkv, attn = by_name.get("qkv"), by_name.get("attention")
    if qkv is not None and attn is not None and attn.attn is not None:
        q_width = attn.attn[1] * attn.attn[4]  # local query heads x head dim
        rerun.append(_gemm_share(qkv, (qkv.fwd_gemms[0][1] - q_width) // 2, "wk_rerun"))
    if gated and "fc1" in by_name:
        rerun.append(_gemm_share(by_name["fc1"], by_name["fc1"].fwd_gemms[0][1] // 2, "w3_rerun"))
    return tuple(rerun)


def _gemm_share(op: Op, n_part: int, name: str) -> Op:
    """The forward of ``n_part`` of the ``n`` output columns of the one-GEMM op ``op`` (one of the linears it fuses):
    its GEMM (m x n_part x k) and that share of its FLOPs and bytes; no backward (a re-run is forward only)."""
    m, n, k = op.fwd_gemms[0]
    frac = n_part / n
    return replace(op, name=name, fwd_flops=op.fwd_flops * frac, bwd_input_flops=0.0, bwd_weight_flops=0.0,
                   fwd_bytes=op.fwd_bytes * frac, bwd_input_bytes=0.0, bwd_weight_bytes=0.0,
                   fwd_gemms=((m, n_part, k),), bwd_input_gemms=(), bwd_weight_gemms=())
