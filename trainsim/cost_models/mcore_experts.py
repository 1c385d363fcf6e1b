"""Bytes of the eager passes Megatron-Core's TEGroupedMLP makes over gpt-oss's expert activations (clamp, fc2 bias).

Megatron-Core's TEGroupedMLP (megatron/core/transformer/moe/experts.py and fusions/fused_bias_geglu.py at
NVIDIA/Megatron-LM b0cc2706, the commit Megatron-Bridge v0.3.0 pins; unchanged at d7288711 and d0b3b775, the
v0.4.0 and v0.5.0 pins) runs two gpt-oss steps as eager torch ops outside its fused kernels, each a full pass over
the experts' activations (bytes per element, in units of the activation size e unless stated):

* the clamp (weighted_bias_quick_geglu_impl with clamp_value): fc1's output chunked, ``x_glu.clamp(max=c)`` and
  ``x_linear.clamp(-c, c)`` (read 1/2, write 1/2 each) and ``torch.cat`` of the two (read 1, write 1) before the
  fused activation: 4; backward each clamp's masked gradient (read the gradient and the input, write: 3 x 1/2)
  and the chunk's backward joining the two halves (read 1, write 1): 5. It lies inside the moe_act checkpoint.
* fc2's bias (linear_fc2 built with skip_bias_add=True; TEGroupedMLP._apply_bias): per local expert
  ``t + b * p`` over the expert's slice of fc2's output ``t`` (e-byte), its bias ``b`` (e-byte, one row) and its
  tokens' router probabilities ``p`` (one per token), ``torch.cat`` of the experts and ``.to(t.dtype)``.
  With 16-bit probabilities (Megatron-Core's alltoall dispatcher: the router's top-k softmax is cast back to the
  logits' dtype, moe_utils.py ``.type_as(logits)``, and Transformer Engine's fused router allocates its probs in
  the logits' dtype) every tensor is e-byte and the cast a no-op: forward write the b*p product (1), the add
  (read 2, write 1), the cat (2): 6; backward the split's gradient joined into one tensor (2), the bias gradient
  ``(g * p)`` summed over tokens (3) and the probability gradient ``(g * b)`` summed over hidden (3): 8.
  The flex dispatcher (HybridEP / DeepEP) hands the experts fp32 probabilities (token_dispatcher.py: "HybridEP
  only supports float32 probs", ``self.token_probs = self.token_probs.float()``; DeepEP asserts fp32), so torch's
  type promotion makes ``b * p``, the add and the cat fp32 (4 bytes) and ``.to`` a real cast:
  ``fp32_expert_bias_bytes``.
"""

from __future__ import annotations

MCORE_GLU_CLAMP_RW = (4, 5)
MCORE_EXPERT_BIAS_RW = (6, 8)
FP32 = 4  # bytes of an fp32 element


def fp32_expert_bias_bytes(e: int) -> tuple[float, float]:
    """(forward, backward) bytes per element of fc2's output for ``_apply_bias`` with fp32 probabilities and
    e-byte activations. Forward: ``b * p`` writes fp32 (4); ``t + bp`` reads e + 4 and writes 4; ``torch.cat``
    reads and writes 4 + 4; ``.to(t.dtype)`` reads 4 and writes e (no kernel when e is already 4 bytes).
    Backward: the cast's gradient back to fp32 (read e, write 4) and the add's gradient for ``t`` cast to its
    dtype (read 4, write e) -- both absent when e is 4 --, the split's gradient joined (read e, write e), the bias
    gradient ``g * p`` (read 4, write 4) summed over tokens (read 4) and the probability gradient ``g * b``
    (read 4, write 4) summed over hidden (read 4). At e = 4 both equal MCORE_EXPERT_BIAS_RW x e."""
    casts = e != FP32
    fwd = FP32 + (e + 2 * FP32) + 2 * FP32 + (FP32 + e if casts else 0)
    bwd = (2 * (e + FP32) if casts else 0) + 2 * e + 2 * (3 * FP32)
    return float(fwd), float(bwd)
