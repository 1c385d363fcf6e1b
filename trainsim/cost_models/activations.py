"""Bytes of activations saved for backward per transformer block per micro-batch on one rank.

The count follows Korthikanti et al. (formulas.csv rows ``act_none``, ``act_tp``, ``act_tp_sp``,
``act_tp_sel``, ``act_tp_sp_sel``, ``act_full``) tensor by tensor, generalised to GQA, SwiGLU, MoE, CP,
flash attention, no-dropout and any element size ``e``:

* sequence region (replicated over TP, sharded by it with sequence parallelism): both norms' inputs and
  outputs (the norm output is the QKV / fc1 input), ``4·e·T·h``; with dropout the two residual-dropout
  masks (1 byte per element, as on CUDA) ``2·T·h``;
* TP-sharded: q, k, v (``(a + 2·kv)·d`` per token; the unfused path expands k, v to ``a`` heads and saves
  them over all ``s`` keys), the attention output (out-projection input) ``a·d``, the MLP inner
  activations (GeLU: fc1 output and GeLU output ``2·f``; SwiGLU in eager autograd: gate, up, silu(gate),
  product ``4·f`` — Megatron's fused SwiGLU saves 3·f, not modelled), MoE: dispatched tokens ``k·h``,
  experts' inner ``k·(2|4)·fe``, expert outputs for the weighted combine ``k·h``;
* attention core, unfused only: softmax output ``e·a·sq·sk``, with dropout its 1-byte mask and output;
* small terms (``ActivationBytes.small``): norm statistics in fp32 (LayerNorm mean + rstd, RMSNorm rstd),
  flash attention's fp32 logsumexp ``4·b·a·sq``, MoE router probabilities (fp32) and top-k indices.

Here ``T = b·s/cp`` tokens per rank; with CP every token-proportional term is divided by ``cp`` (ring
attention keeps only the local q, k, v, o; received k/v chunks are re-sent in backward).
Recompute: ``selective`` drops the attention core (softmax/dropout terms and the logsumexp; q, k, v and
the output stay); ``full`` keeps only the block input ``e·T·h`` (``/tp`` with SP, the input is sharded).

For a dropout-free GPT block with LayerNorm, SDPA and GeLU this is exactly what torch saves
(``saved_tensors_hooks`` deduplicated by storage): ``16·e·s·b·h`` + LayerNorm stats ``2·8·b·s`` +
logsumexp ``4·b·a·s`` (/shared/notes/torch-distributed-on-cpu.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .shapes import LayerShape, layer_shape

MASK_BYTES = 1  # dropout masks are bool/uint8 on CUDA (Korthikanti's assumption)
STAT_BYTES = 4  # norm statistics and logsumexp are fp32


@dataclass(frozen=True)
class ActivationBytes:
    """Saved-for-backward bytes: ``main`` (Korthikanti's terms) + ``small`` (stats, logsumexp, router)."""

    main: float
    small: float

    @property
    def total(self) -> float:
        return self.main + self.small


def _mlp_inner(shp: LayerShape, ffn: int) -> int:
    return (4 if shp.gated else 2) * ffn


@lru_cache(maxsize=8192)
def _layer(shp: LayerShape) -> ActivationBytes:
    e, h, t, r = shp.e, shp.h, shp.tp, shp.sp_div
    b, T = shp.b, shp.tokens
    stats_per_tok = STAT_BYTES * (2 if shp.norm == "layernorm" else 1)
    if shp.recompute == "full":
        return ActivationBytes(main=e * T * h / r, small=0.0)

    seq = 4 * e * T * h / r + (2 * MASK_BYTES * T * h / r if shp.dropout else 0.0)
    small = 2 * stats_per_tok * T / r

    heads = shp.a // t
    sq, sk = shp.s // shp.cp, shp.s
    qd = heads * shp.d
    if shp.flash:
        attn = e * T * (shp.a + 2 * shp.kv) * shp.d / t + e * T * qd
        if shp.recompute != "selective":
            small += STAT_BYTES * b * heads * sq
        core = 0.0
    else:
        # q over local queries; k, v expanded to all query heads over all s keys; output.
        attn = e * T * qd + 2 * e * b * sk * qd + e * T * qd
        probs = b * heads * sq * sk
        core = e * probs + ((MASK_BYTES + e) * probs if shp.dropout else 0.0)
        if shp.recompute == "selective":
            core = 0.0

    if shp.is_moe:
        k = shp.top_k
        routed = T * k
        mlp = e * routed * h + e * routed * _mlp_inner(shp, shp.fe) / t + e * routed * h
        small += STAT_BYTES * (T / r) * shp.experts + 8 * (T / r) * k
    else:
        mlp = e * T * _mlp_inner(shp, shp.f) / t
    return ActivationBytes(main=seq + attn + core + mlp, small=small)


def _shape(x) -> LayerShape:
    return x if isinstance(x, LayerShape) else layer_shape(x)


def layer_activation_bytes(scenario) -> ActivationBytes:
    """Saved activations of one block per micro-batch on one rank (Scenario or LayerShape)."""
    return _layer(_shape(scenario))


@lru_cache(maxsize=8192)
def _no_recompute(shp: LayerShape) -> ActivationBytes:
    from dataclasses import replace
    return _layer(replace(shp, recompute="none"))


def recompute_working_bytes(scenario) -> float:
    """Transient bytes while one block is recomputed and back-propagated (on top of the saved ones).

    full: that block's whole activation set lives during its backward; selective: the recomputed attention
    core of one block (the unfused softmax terms, or flash's logsumexp); none: 0.
    """
    shp = _shape(scenario)
    if shp.recompute == "full":
        return _no_recompute(shp).total
    if shp.recompute == "selective":
        return _no_recompute(shp).total - _layer(shp).total
    return 0.0


def embedding_activation_bytes(scenario) -> float:
    """First stage, per micro-batch: token ids (int64) kept for the embedding backward, + dropout mask."""
    shp = _shape(scenario)
    T = shp.tokens
    mask = MASK_BYTES * T * shp.h / shp.sp_div if shp.dropout else 0.0
    return 8.0 * T + mask


def head_activation_bytes(scenario) -> float:
    """Last stage, per micro-batch: final norm input/output (+ stats), fp32 softmax of the loss, targets.

    The output layer saves its (SP-sharded) input; vocab-parallel cross-entropy keeps fp32 probabilities
    ``4·T·V/tp`` for its backward, as Korthikanti's ``4·sbv/t`` term; the integer targets ``8·T``.
    """
    shp = _shape(scenario)
    T, r = shp.tokens, shp.sp_div
    stats = STAT_BYTES * (2 if shp.norm == "layernorm" else 1) * T / r
    v_local = -(-shp.vocab // shp.tp)
    return 2 * shp.e * T * shp.h / r + stats + STAT_BYTES * T * v_local + 8.0 * T


def logits_workspace_bytes(scenario) -> float:
    """Transient bytes on the last stage while the loss runs: 16-bit logits and their fp32 copy."""
    shp = _shape(scenario)
    v_local = -(-shp.vocab // shp.tp)
    return (shp.e + STAT_BYTES) * shp.tokens * v_local


def korthikanti_bytes(s: int, b: int, h: int, a: int, t: int = 1, *, sp: bool = False,
                      recompute: str = "none") -> float:
    """Korthikanti et al.'s closed forms (formulas.csv act_*) in bytes per layer, for cross-checks."""
    sbh = s * b * h
    if recompute == "full":
        return 2.0 * sbh
    attn = 0.0 if recompute == "selective" else 5.0 * a * s / h
    if sp:
        return sbh / t * (34 + attn)
    return sbh * (10 + 24 / t + attn / t)
