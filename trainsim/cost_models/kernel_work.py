"""FLOPs and bytes of the kernels a calibration profile measures -- GEMMs and fused attention -- counted one
way for calibrate's fits (kernels/calibrate.py) and for the profile's queries (profile.py).

Attention FLOP convention (as FlashAttention's benchmarks): forward = 4·b·h·sq·skv·d, halved when causal;
backward = 2.5 × forward. Bytes are each kernel's compulsory HBM traffic.
"""

from __future__ import annotations

from trainsim.specs.errors import SpecError

DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "float": 4, "half": 2, "double": 8}


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a measured dtype (DTYPE_BYTES; 2 for one it does not list)."""
    return DTYPE_BYTES.get(dtype, 2)


def gemm_flops(m: int, n: int, k: int) -> float:
    """FLOPs of C = A·B with A m×k and B k×n: 2mnk."""
    return 2.0 * m * n * k


def gemm_bytes(m: int, n: int, k: int, dtype: str) -> float:
    """Compulsory traffic of C = A·B: read A (m×k) and B (k×n), write C (m×n)."""
    return float(dtype_bytes(dtype) * (m * k + k * n + m * n))


def attention_flops(batch: int, heads: int, seq_q: int, seq_kv: int, dhead: int, causal: bool = True,
                    pass_: str = "fwd") -> float:
    """FLOPs of a fused-attention pass by the module doc's convention: forward 4·b·h·sq·skv·d, halved when
    causal; backward 2.5 × forward."""
    fwd = 4.0 * batch * heads * seq_q * seq_kv * dhead * (0.5 if causal else 1.0)
    if pass_ == "fwd":
        return fwd
    if pass_ == "bwd":
        return 2.5 * fwd
    raise SpecError("attention.pass", f"must be 'fwd' or 'bwd', got {pass_!r}")


def attention_bytes(batch: int, heads: int, seq_q: int, seq_kv: int, dhead: int, dtype: str,
                    pass_: str = "fwd") -> float:
    """Compulsory traffic of fused attention: q, o (and dq, do in bwd) over seq_q; k, v (dk, dv) over seq_kv."""
    e = dtype_bytes(dtype)
    q_side = batch * heads * seq_q * dhead * e
    kv_side = batch * heads * seq_kv * dhead * e
    fwd = 2 * q_side + 2 * kv_side
    return float(fwd if pass_ == "fwd" else 2 * fwd + 2 * q_side)
