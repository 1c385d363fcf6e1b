"""FLOPs and bytes moved by every op of a transformer block, embedding and head, on ONE rank per micro-batch.

Conventions (stated once, used everywhere):

* A GEMM (m×k)·(k×n) is 2·m·n·k FLOPs. Forward ``Y = X·W``; backward splits into the input gradient
  ``dX = dY·Wᵀ`` (shape m×k, inner n) and the weight gradient ``dW = Xᵀ·dY`` (shape k×n, inner m): the
  zero-bubble schedules run them separately.
* Attention scores and attention·values are counted over the FULL s×s matrix, as SC21 eq. 3 and
  Korthikanti eq. 7/8 do (formulas.csv rows ``flops_sc21``, ``flops_model_korth``): fwd 4·b·a·s²·d per
  layer, bwd 2× fwd. A causal fused kernel skips about half of that work; ``Op.work_fraction`` carries this
  to the *time* model only, so model/hardware FLOPs keep the published convention.
* Model and hardware FLOPs, these ops' matmul FLOPs summed by pass per block and per step: model_flops.py.
* Per rank: TP shards heads and MLP columns (``/tp``), CP shards the sequence (queries ``s/cp`` attend
  to all ``s`` keys), SP shards the norm/dropout/residual region over ``tp``, EP places ``E/ep`` experts
  per rank; balanced routing with capacity factor 1 gives every rank ``tokens·top_k`` expert tokens.
* fp8 training: the block's weight GEMMs run on fp8 operands (1 byte); attention, router and logits stay
  16-bit. Transformer Engine quantizes each GEMM input (activation, output gradient) into two fp8 copies, the
  tensor and its transpose (Hopper: ``fp8_cast_transpose_fused`` / ``fp8_cast_transpose_bgrad_fused``, the fp8
  GEMM needs both layouts; MXFP8: row- and column-wise quantizations): read e, write 2 bytes per element. The
  weight is quantized the same way (read e, write 2 per parameter) on every forward unless the caller passes
  ``is_first_microbatch`` so TE caches it for the step's later micro-batches (Megatron-Core does; a bare
  ``te.Linear`` call, as llm-foundry makes, does not): ``LayerShape.fp8_weight_casts`` per micro-batch.
* nvfp4 training: the same GEMMs on NVFP4 operands (0.5625 bytes per element) with the NVFP4 recipe's casts
  (amax pass, rowwise quantize, random-Hadamard columnwise quantize): nvfp4.py.

Bytes are the compulsory HBM traffic of each kernel (inputs read + outputs written), which the roofline
in ``compute.py`` turns into time for memory-bound ops.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from trainsim.specs.memo import memoised

from . import nvfp4, titan_ops, torchao_float8
from .autocast import RESIDUAL_BYTES, norm_output_casts
from .framework import cross_entropy_bytes, eager_ce_cast_bytes, train_metric_bytes_per_logit
from .host_issue import megatron_fused_softmax
from .inductor_bytes import titan_compiled_ops
from .mcore_experts import MCORE_EXPERT_BIAS_RW, MCORE_GLU_CLAMP_RW, fp32_expert_bias_bytes
from .shapes import DEFAULT_SELECTIVE as _CORE_ATTN
from .shapes import LayerShape, as_layer_shape

if TYPE_CHECKING:
    from trainsim.specs import Scenario

Gemm = tuple[int, int, int]  # (m, n, k)
MATMUL_KINDS = frozenset({"gemm", "bmm", "attention", "ssd"})  # ssd: Mamba-2's chunked scan (cost_models/mamba.py)

# Elementwise FLOPs per element (only for completeness of hardware work; these ops are memory-bound and
# not part of model FLOPs): LayerNorm ~5 (mean, var, normalize, scale, shift), RMSNorm ~3, GeLU (tanh) ~8,
# SwiGLU ~6 (sigmoid, 2 mul), softmax ~5, add/dropout 1.
_NORM_FLOPS = {"layernorm": 5.0, "rmsnorm": 3.0}
_SOFTCAP_FLOPS = 3.0  # soft-capping c·tanh(x/c): divide, tanh, multiply
# gpt-oss's clamped SwiGLU (transformers GptOssExperts.forward, read_file id 44441688634; Megatron-Core
# activation_func_clamp_value / glu_linear_offset): besides SwiGLU's sigmoid and two multiplies, the gate's
# upper clamp, the up projection's two-sided clamp, the sigmoid's gain alpha and the +1 on up: 5 more per element.
_GLU_CLAMP_FLOPS = 5.0
# Megatron-Core's eager clamp and fc2-bias passes over gpt-oss's expert activations: mcore_experts.py.
# Megatron-Core's MoEAlltoAllTokenDispatcher (megatron/core/transformer/moe/token_dispatcher.py at b0cc2706): with
# more than one local expert, the tokens the dispatch all-to-all delivers arrive grouped by source rank, so
# dispatch_postprocess sorts them by local expert (sort_chunks_by_idxs, fused with moe_permute_fusion) and
# combine_preprocess restores the rank order before the combine all-to-all: each a copy of the routed tokens (read 1,
# write 1, in units of the element size e, the probabilities' 4 bytes per token aside), and its backward the same
# copy of the gradient through the inverse order. The flex dispatcher (DeepEP / HybridEP) has no such step.
A2A_SORT_RW = (2, 2)
# An attention sink (gpt-oss, Megatron-Core softmax_type "learnable") adds exp(sink - max) to each score row's
# denominator: subtract, exp, add per row and head forward; the backward reduces the sink's gradient over rows.
_SINK_FLOPS = 3.0
# Megatron's fused causal softmax (``ScaledUpperTriangMaskedSoftmax``, megatron/fused_kernels/
# scaled_upper_triang_masked_softmax.h, read_file id 942379751): the forward kernel loads a row's elements only
# below ``local_seq = blockIdx.x + 1`` (the row's unmasked keys), sets the rest to -inf without reading them and
# writes every element (zeros above the diagonal); the backward kernel loads the output gradient and the saved
# output under the same bound and writes every element. The kernel's dispatch asserts at most 2,048 keys
# (``TORCH_INTERNAL_ASSERT(softmax_elements >= 0 && softmax_elements <= 2048)``); beyond, Megatron's softmax
# takes another path, which reads the whole score matrix.
CAUSAL_SOFTMAX_MAX_KEYS = 2048


@dataclass(frozen=True)
class Op:
    """One kernel (or a fused group) of a layer on one rank for one micro-batch. FLOPs and bytes.

    ``fwd_gemms`` etc. list the (m, n, k) of each GEMM in a pass, each repeated ``batch`` times (bmm batch
    or local experts). ``modules`` names the TrainingSpec.recompute_modules whose selective recompute re-runs the
    op (the attention core: core_attn, Megatron's default).
    ``attn`` = (batch, heads, seq_q, seq_kv, dhead) for fused attention, for calibration-profile queries.
    """

    name: str
    kind: str
    fwd_flops: float
    bwd_input_flops: float
    bwd_weight_flops: float
    fwd_bytes: float
    bwd_input_bytes: float
    bwd_weight_bytes: float = 0.0
    fwd_gemms: tuple[Gemm, ...] = ()
    bwd_input_gemms: tuple[Gemm, ...] = ()
    bwd_weight_gemms: tuple[Gemm, ...] = ()
    batch: int = 1
    fp8: bool = False
    fp4: bool = False  # NVFP4 operands on the FP4 tensor cores (dtype nvfp4, nvfp4.py)
    hp_weight_grad: bool = False  # fp8 but the weight-gradient GEMM on 16-bit operands (torchao rowwise_with_gw_hp)
    modules: frozenset = frozenset()  # TrainingSpec.recompute_modules whose recompute re-runs this op
    work_fraction: float = 1.0
    attn: tuple[int, int, int, int, int] | None = None
    # Kernels one forward / backward pass launches, each paying GPUSpec.kernel_overhead_s (cost_models/mamba.py: the
    # Mamba mixer's conv1d, norm, layout copies and SSD scan launch several per pass).
    launches: tuple[int, int] = (1, 1)

    @property
    def is_matmul(self) -> bool:
        return self.kind in MATMUL_KINDS

    @property
    def bwd_flops(self) -> float:
        return self.bwd_input_flops + self.bwd_weight_flops

    @property
    def total_flops(self) -> float:
        return self.fwd_flops + self.bwd_input_flops + self.bwd_weight_flops


def _tag(ops, *modules: str) -> list[Op]:
    """``ops`` marked as re-run when any of ``modules`` is recomputed (TrainingSpec.recompute_modules)."""
    tag = frozenset(modules)
    return [replace(op, modules=op.modules | tag) for op in ops]


def _flops(gemms: tuple[Gemm, ...], batch: int = 1) -> float:
    return float(batch * sum(2 * m * n * k for m, n, k in gemms))


def _linear(name: str, m: int, n: int, k: int, e: int, *, fp8: bool = False, fp4: bool = False, batch: int = 1,
            kind: str = "gemm", weight_casts: float = 1.0, ao: int = 0, ao_recipe: str = "") -> Op:
    """Y(m×n) = X(m×k)·W(k×n): fwd, dX = dY·Wᵀ, dW = Xᵀ·dY; bytes with fp8 (or NVFP4, ``fp4``) operands and their
    casts (``weight_casts``: quantizations of W per micro-batch, see the module docstring and nvfp4.py); ``ao``:
    torchao's casts instead of Transformer Engine's (LayerShape.torchao_fp8, torchao_float8.py) under ``ao_recipe``
    (rowwise_with_gw_hp: dW on 16-bit operands, Op.hp_weight_grad)."""
    ob = nvfp4.NVFP4_BYTES if fp4 else (1 if fp8 else e)
    hp_dw = bool(fp8 and ao and ao_recipe == "rowwise_with_gw_hp")
    fwd, dx, dw = ((m, n, k),), ((m, k, n),), ((k, n, m),)
    q, cast_x, cast_dy = e + 2, 0.0, 0.0     # q: read e, write the fp8 tensor and its transpose
    if fp8 and ao:
        cast_x, cast_dy = torchao_float8.linear_cast_bytes(m, n, k, e, weight_gathered_fp8=ao == 2,
                                                           weight_casts=weight_casts, recipe=ao_recipe)
    elif fp8:
        cast_x = m * k * q + k * n * q * weight_casts  # X each call; W as cached
        cast_dy = m * n * q                  # dY once, shared by dX and dW
    elif fp4:
        cast_x = nvfp4.rht_cast_bytes(m * k, e) + nvfp4.weight_cast_bytes(k * n, e) * weight_casts
        cast_dy = nvfp4.rht_cast_bytes(m * n, e)
    return Op(
        name=name, kind=kind,
        fwd_flops=_flops(fwd, batch), bwd_input_flops=_flops(dx, batch), bwd_weight_flops=_flops(dw, batch),
        fwd_bytes=float(batch * ((m * k + k * n) * ob + m * n * e + cast_x)),
        bwd_input_bytes=float(batch * ((m * n + k * n) * ob + m * k * e + cast_dy)),
        bwd_weight_bytes=float(batch * ((m * k + m * n) * (e if hp_dw else ob) + k * n * e)),
        fwd_gemms=fwd, bwd_input_gemms=dx, bwd_weight_gemms=dw, batch=batch, fp8=fp8, fp4=fp4, hp_weight_grad=hp_dw,
    )


def _elementwise(name: str, kind: str, n_elems: float, fwd_rw: float, bwd_rw: float, flops_per: float = 1.0,
                 *, modules: frozenset = frozenset(), extra_fwd_bytes: float = 0.0, extra_bwd_bytes: float = 0.0,
                 launches: tuple[int, int] = (1, 1)) -> Op:
    """A memory-bound op over ``n_elems`` elements: ``fwd_rw``/``bwd_rw`` bytes moved per element, in ``launches``
    kernels per forward / backward pass."""
    return Op(
        name=name, kind=kind,
        fwd_flops=flops_per * n_elems, bwd_input_flops=2 * flops_per * n_elems, bwd_weight_flops=0.0,
        fwd_bytes=n_elems * fwd_rw + extra_fwd_bytes, bwd_input_bytes=n_elems * bwd_rw + extra_bwd_bytes,
        modules=modules, launches=launches,
    )


def _norm(name: str, shp: LayerShape, n_tok: float) -> Op:
    """LayerNorm/RMSNorm over n_tok tokens: fwd reads x, writes y (+ fp32 stats); bwd reads x, dy, writes dx.
    Under torch.autocast the norms run on CUDA's fp32 list on the fp32 residual stream (cost_models/autocast.py,
    mechanism 2): x, y, dy and dx are 4 bytes."""
    e, h = (RESIDUAL_BYTES if shp.autocast else shp.e), shp.h
    if shp.titan and not shp.titan_fused_norm:  # torchtitan's eager RMSNorm: fp32 aten ops (titan_ops.norm_rw)
        return _elementwise(name, "norm", n_tok * h, *titan_ops.norm_rw(e), _NORM_FLOPS["rmsnorm"],
                            launches=titan_ops.NORM_LAUNCHES)
    stats = (8 if shp.norm == "layernorm" else 4) * n_tok
    # torchtitan's Triton fused_rmsnorm moves a fused norm's bytes in its own kernels (titan_ops)
    launches = titan_ops.FUSED_NORM_LAUNCHES if shp.titan_fused_norm else (1, 1)
    return _elementwise(name, "norm", n_tok * h, 2 * e, 3 * e, _NORM_FLOPS.get(shp.norm, 5.0),
                        extra_fwd_bytes=stats, extra_bwd_bytes=stats, launches=launches)


def _residual(name: str, shp: LayerShape, n_tok: float) -> Op:
    """(bias-)dropout-add: fwd reads 2, writes 1 (+ 1-byte mask with dropout); bwd adds the two grad branches.
    Under torch.autocast the add type-promotes the 16-bit branch output onto the fp32 stream (autocast.py,
    mechanism 2): forward reads e + 4 and writes 4 bytes; backward adds the two fp32 gradient branches (read 4 + 4,
    write 4) and AddBackward casts the branch's gradient back to the branch's dtype (read 4, write e)."""
    e = shp.e
    if shp.autocast and not shp.dropout:
        r = RESIDUAL_BYTES
        return _elementwise(name, "elementwise", n_tok * shp.h, e + 2 * r, 3 * r + r + e)
    mask = 1 if shp.dropout else 0
    return _elementwise(name, "elementwise", n_tok * shp.h, 3 * e + mask, 3 * e + mask + (2 * e if shp.dropout else 0))


# Bytes per element (in units of e) of eager rotary embedding on halves as torch code writes it (trainsim execute's
# kernels/torch_model.py ``apply_rope``, HF Llama's ``rotate_half`` form alike): forward four half-width multiplies
# (read and write half an element each: 4 x 1), a subtract and an add of two halves (2 x 1.5) and the ``cat``
# (read 1, write 1): 9; backward the subtract's negation (1), the four multiplies' input gradients (4), the sum of
# each half's two gradients (2 x 1.5), each slice's backward writing a zero-filled full tensor and copying its half
# (2 x 2) and the sum of the two slices' gradients (3): 15. A fused RoPE kernel reads and writes once (2, 2).
EAGER_ROPE_RW = (9, 15)
# Megatron-Core's unfused RoPE (_apply_rotary_pos_emb_bshd, models/common/embeddings/rope_utils.py at b0cc2706), which
# Megatron-Bridge runs for YaRN (utils/fusions.py validate_rope_fusion_compatibility: apply_rope_fusion only with
# position_embedding_type rope; gpt_provider.py provide() turns it off): forward ``t * cos`` (2), _rotate_half's
# negation of one half (1) and ``cat`` (2), ``* sin`` (2), the add (3) and the final ``cat`` with the empty pass-through
# part (2): 12; backward the two multiplies' input gradients (2 x 2), the negation (1), the chunk's halves joined (2),
# the two gradients of t summed (3) and the rot_dim slice's backward (zero-fill and copy: 3): 13.
MCORE_EAGER_ROPE_RW = (12, 13)
# Bytes per element (units of e) of SwiGLU as two eager ops, ``F.silu(gate(x)) * fc1(x)`` (kernels/torch_model.py
# MLP): forward silu (read 1, write 1) and the multiply (read 2, write 1): 5; backward the multiply's two input
# gradients (read 2, write 1 each) and silu's backward (read its input and gradient, write 1): 9. A fused kernel
# reads gate and up and writes once (3), and its backward reads gate, up, dy and writes both gradients (5).
EAGER_SWIGLU_RW = (5, 9)


def _rope(shp: LayerShape, n_elems: float) -> Op:
    """RoPE on the local query and key heads: a fused kernel, under torch.autocast (trainsim execute's eager
    block code) the eager op sequence of ``EAGER_ROPE_RW``, or Megatron-Core's unfused one (``MCORE_EAGER_ROPE_RW``)."""
    e = shp.e
    if shp.titan:  # torchtitan's complex multiplication in fp32 (titan_ops.rope_rw)
        return _elementwise("rope", "elementwise", n_elems, *titan_ops.rope_rw(e), 3.0,
                            launches=titan_ops.ROPE_LAUNCHES)
    fwd, bwd = EAGER_ROPE_RW if shp.autocast else MCORE_EAGER_ROPE_RW if shp.mcore_rope_eager else (2, 2)
    return _elementwise("rope", "elementwise", n_elems, fwd * e, bwd * e, 3.0)


def _autocast_casts(name: str, shp: LayerShape, n_tok: float, casts: int) -> Op:
    """torch.autocast's casts of one fp32 norm output, once per Linear reading it (``cached_cast`` caches leaves
    only; autocast.py mechanism 3): forward reads 4 and writes e bytes per cast; backward each cast's
    ``ToCopyBackward0`` converts its e-byte gradient to fp32 and the autograd engine sums the ``casts`` fp32
    gradients into the norm's input buffer (InputBuffer::accumulate, read 4 + 4, write 4 per extra branch)."""
    e, r = shp.e, RESIDUAL_BYTES
    return _elementwise(name, "cast", n_tok * shp.h, casts * (r + e), casts * (e + r) + (casts - 1) * 3 * r)


def _attention_ops(shp: LayerShape) -> list[Op]:
    """Scores and attention·values (core attention) on one rank: fused (flash) or unfused (bmm + softmax).
    Scores use ``dqk`` dims per head, values ``dvh`` (both the head dim but with MLA)."""
    e, dq, dv = shp.e, shp.dqk, shp.dvh
    b, heads, kvh = shp.b, shp.a // shp.tp, shp.kv // shp.tp
    sq, sk = shp.s // shp.cp, shp.s
    fwd = 2.0 * b * heads * sq * sk * (dq + dv)  # QKᵀ and P·V, full s×s
    ops: list[Op] = []
    if shp.flash:
        # A fused kernel with a sliding window skips the key blocks outside it (FlashAttention-2 window_size,
        # TE's window_size): its work is that of attn_keys keys per query. Soft-capped logits (Gemma 2) are
        # capped inside the kernel (FlashAttention-2 softcap), and attention sinks (gpt-oss) enter the running
        # softmax denominator inside it (TE's FusedAttention with softmax_type learnable runs cuDNN >= 9.13.1's
        # sink attention, NVIDIA/TransformerEngine PR #2148): no extra kernel, no HBM traffic beyond the sink vector.
        sk_eff = shp.attn_keys
        fwd = 2.0 * b * heads * sq * sk_eff * (dq + dv)
        q_bytes, o_bytes = b * sq * heads * dq * e, b * sq * heads * dv * e
        kv_bytes = b * sk * kvh * (dq + dv) * e       # every key/value block is read (CP: incl. received chunks)
        lse = 4 * b * heads * sq
        ops.append(Op(
            name="attention", kind="attention", fwd_flops=fwd, bwd_input_flops=2 * fwd, bwd_weight_flops=0.0,
            fwd_bytes=float(q_bytes + o_bytes + kv_bytes + lse),
            bwd_input_bytes=float(2 * (q_bytes + o_bytes) + 2 * kv_bytes + lse),
            modules=_CORE_ATTN, work_fraction=0.5 if shp.causal else 1.0,
            attn=(b, heads, sq, max(1, round(sk_eff)), dq),
        ))
        return ops
    # Unfused attention computes the whole s×s score matrix and masks it (a sliding window is a mask too), so a
    # window changes neither its FLOPs nor its saved probabilities.
    batch = b * heads
    if kvh < heads:  # unfused GQA expands K and V to all query heads before the bmm (Megatron's path)
        ops.append(_elementwise("kv_repeat", "elementwise", b * sk * heads * (dq + dv), e, e, 0.0, modules=_CORE_ATTN))
    scores = _bmm("attn_scores", batch, (sq, sk, dq), ((sq, dq, sk), (sk, dq, sq)), e)
    probs = b * heads * sq * sk
    ops.append(scores)
    if shp.attn_softcap:  # c·tanh(x/c) on the scores before the softmax (Gemma 2's attn_logit_softcapping)
        ops.append(_elementwise("attn_softcap", "elementwise", probs, 2 * e, 3 * e, _SOFTCAP_FLOPS, modules=_CORE_ATTN))
    fwd_rw, bwd_rw = causal_softmax_bytes(shp) if causal_fused_softmax(shp) else (2 * e, 3 * e)
    ops.append(_elementwise("softmax", "softmax", probs, fwd_rw, bwd_rw, 5.0, modules=_CORE_ATTN))
    if shp.sinks:  # the sink column of each row: its logit read, its exp added to the row's denominator
        ops.append(_elementwise("attn_sinks", "elementwise", b * heads * sq, 2 * e, 3 * e, _SINK_FLOPS,
                                modules=_CORE_ATTN))
    if shp.dropout:
        ops.append(_elementwise("attn_dropout", "elementwise", probs, 2 * e + 1, 2 * e + 1, 1.0, modules=_CORE_ATTN))
    ops.append(_bmm("attn_values", batch, (sq, dv, sk), ((sq, sk, dv), (sk, dv, sq)), e))
    return ops


def causal_fused_softmax(shp: LayerShape) -> bool:
    """Whether the scores' softmax is Megatron's fused upper-triangular (causal) kernel: Megatron's
    FusedScaleMaskSoftmax (``LayerShape.megatron_softmax``) on causal scores where its fused kernel applies
    (host_issue.megatron_fused_softmax: fp16/bf16, query length and ``b * np`` multiples of 4, more than 16 keys)
    and the keys fit the kernel (``CAUSAL_SOFTMAX_MAX_KEYS``)."""
    return (shp.megatron_softmax and shp.causal and not shp.flash and shp.cp == 1
            and shp.s <= CAUSAL_SOFTMAX_MAX_KEYS and megatron_fused_softmax(shp))


def causal_softmax_bytes(shp: LayerShape) -> tuple[float, float]:
    """(forward, backward) HBM bytes per score of Megatron's fused causal softmax (module doc of
    ``CAUSAL_SOFTMAX_MAX_KEYS``): row i reads its i + 1 unmasked scores (forward: the input; backward: the output
    gradient and the saved output) and writes all s entries, zeros above the diagonal. Averaged over the rows,
    (s + 1) / (2 s) of each read."""
    e, s = shp.e, shp.s
    kept = (s + 1) / (2 * s)
    return e * kept + e, 2 * e * kept + e


def _bmm(name: str, batch: int, fwd: Gemm, bwd: tuple[Gemm, ...], e: int) -> Op:
    """A batched matmul without weights: both backward GEMMs are input gradients."""
    def nbytes(g: tuple[Gemm, ...]) -> float:
        return float(batch * sum((m * k + k * n + m * n) * e for m, n, k in g))
    return Op(name=name, kind="bmm", fwd_flops=_flops((fwd,), batch), bwd_input_flops=_flops(bwd, batch),
              bwd_weight_flops=0.0, fwd_bytes=nbytes((fwd,)), bwd_input_bytes=nbytes(bwd),
              fwd_gemms=(fwd,), bwd_input_gemms=bwd, batch=batch, modules=_CORE_ATTN)


def _lowp(shp: LayerShape, on: bool = True) -> dict:
    """A block ``_linear``'s low-precision arguments (fp8 / NVFP4, weight casts, torchao); ``on`` false: 16-bit."""
    return {"fp8": on and shp.dtype == "fp8", "fp4": on and shp.dtype == "nvfp4", "weight_casts": shp.fp8_weight_casts,
            "ao": shp.torchao_fp8, "ao_recipe": shp.ao_recipe}


def _mlp_ops(shp: LayerShape, tokens: int, ffn: int, prefix: str, *, batch: int = 1, split: int = 0,
             module: str = "mlp", width: int = 0, low_precision: bool = True) -> list[Op]:
    """fc1 (or gate+up), activation, fc2 for ``tokens`` tokens of ``width`` (default h); ``batch`` identical copies
    (local experts); the hidden ``ffn`` split over ``split`` ranks (default tp; experts: etp); ``module`` is the
    recompute module it belongs to (the experts' activation function is also moe_act); ``low_precision`` false
    keeps the linears in the 16-bit dtype under fp8 / nvfp4 training."""
    e, h, t = shp.e, width or shp.h, split or shp.tp
    f_local = ffn // t
    n_in = 2 if shp.gated else 1
    lp = _lowp(shp, low_precision)
    act_elems = batch * tokens * f_local
    if shp.gated:  # silu(gate) * up: reads 2, writes 1; bwd reads gate, up, dy, writes dgate, dup
        eager = shp.autocast or shp.titan  # silu and the multiply as two eager ops (torchtitan's FeedForward too)
        fwd_rw, bwd_rw = EAGER_SWIGLU_RW if eager else (3, 5)
        act = _elementwise(f"{prefix}swiglu", "elementwise", act_elems, fwd_rw * e, bwd_rw * e,
                           6.0 + (_GLU_CLAMP_FLOPS if shp.glu_clamp else 0.0), launches=(2, 3) if eager else (1, 1))
    else:
        act = _elementwise(f"{prefix}gelu", "elementwise", act_elems, 2 * e, 3 * e, 8.0)
    acts = [act]
    if module == "moe":
        if shp.glu_clamp and shp.mcore_experts:  # Megatron-Core's eager clamp before the fused activation
            fwd_rw, bwd_rw = MCORE_GLU_CLAMP_RW
            acts.insert(0, _elementwise(f"{prefix}glu_clamp", "elementwise", n_in * act_elems, fwd_rw * e,
                                        bwd_rw * e, 0.0))
        acts = [replace(a, modules=frozenset({"moe_act"})) for a in acts]
    ops = [_linear(f"{prefix}fc1", tokens, n_in * f_local, h, e, batch=batch, **lp), *acts,
           _linear(f"{prefix}fc2", tokens, h, f_local, e, batch=batch, **lp)]
    return _tag(ops, module)


def _moe_ops(shp: LayerShape) -> list[Op]:
    """Router + top-k dispatch, local experts' MLPs, and combine (balanced, capacity factor 1). LatentMoE
    (``shp.lat``; Megatron-Core MoELayer.preprocess / postprocess): the router reads the hidden states, then
    fc1_latent_proj (hidden -> latent) runs before the dispatch and fc2_latent_proj (latent -> hidden) after the
    combine -- both duplicated over TP, each rank on its own (SP-sharded) tokens -- so the routed tokens, the
    experts' fc1 input and fc2 output are latent-wide."""
    e, h, E, w = shp.e, shp.h, shp.experts, shp.xw
    n_tok = shp.tokens // shp.sp_div            # router runs on this rank's (SP-sharded) tokens
    routed = shp.routed_tokens                   # expert tokens per rank: T·k·etp/tp (balanced, any ep)
    local_experts = E // shp.ep
    per_expert = max(1, routed // local_experts)
    lowp = _lowp(shp)
    ops = [
        _linear("router", n_tok, E, h, e),
        _elementwise("router_topk", "softmax", n_tok * E, 2 * 4, 3 * 4, 5.0),
        *([_linear("moe_latent_fc1", n_tok, w, h, e, **lowp)] if shp.lat else []),
        _elementwise("moe_permute", "elementwise", routed * w, 2 * e, 2 * e, 0.0),
    ]
    sort = shp.a2a_sort and local_experts > 1
    if sort:  # MoEAlltoAllTokenDispatcher.dispatch_postprocess: the received tokens sorted by local expert
        ops.append(_elementwise("moe_sort_chunks", "elementwise", routed * w, A2A_SORT_RW[0] * e,
                                A2A_SORT_RW[1] * e, 0.0))
    # torchao float8 converts nn.Linear only; torchtitan's GroupedExperts stay bf16 (moe.py _run_experts_grouped_mm)
    ops += _mlp_ops(shp, per_expert, shp.fe, "expert_", batch=local_experts, split=shp.xtp, module="moe", width=w,
                    low_precision=not shp.torchao_fp8)
    if shp.bias and shp.mcore_experts:  # fc2's bias, added per local expert by TEGroupedMLP._apply_bias
        fwd_b, bwd_b = (fp32_expert_bias_bytes(e) if shp.fp32_probs
                        else (MCORE_EXPERT_BIAS_RW[0] * e, MCORE_EXPERT_BIAS_RW[1] * e))
        ops.append(_elementwise("expert_fc2_bias", "elementwise", routed * h, fwd_b, bwd_b, 2.0))
    if sort:  # combine_preprocess: the experts' outputs put back in the order the all-to-all delivered them
        ops.append(_elementwise("moe_unsort_chunks", "elementwise", routed * w, A2A_SORT_RW[0] * e,
                                A2A_SORT_RW[1] * e, 0.0))
    ops.append(_elementwise("moe_unpermute", "elementwise", routed * w, 2 * e, 3 * e, 1.0))
    if shp.lat:
        ops.append(_linear("moe_latent_fc2", n_tok, h, w, e, **lowp))
    if shp.fs:  # shared expert: a TP-sharded dense MLP every token runs, its output added to the routed one
        ops += _mlp_ops(shp, shp.tokens, shp.fs, "shared_", module="shared_experts")
    return _tag(ops, "moe")  # Megatron's "moe" recompute re-runs the whole MoE layer


def _mla_projection_ops(shp: LayerShape) -> list[Op]:
    """MLA's projections up to the attention core (Megatron-Core MLASelfAttention, DeepSeek-V2 Sec. 2.1):
    the down-projections to the query latent and to the key/value latent + the shared RoPE key are not split
    over TP (duplicated: every rank computes them on its tokens -- its sequence shard with SP, whose latents are
    then all-gathered for the up-projections); their RMSNorms; the up-projections to per-head
    queries (dqk) and to per-head no-RoPE keys + values (d + dvh), column-parallel; RoPE on the queries'
    and the shared key's RoPE parts."""
    e, h, t, T = shp.e, shp.h, shp.tp, shp.tokens
    Ts = T // shp.sp_div  # the down-projections run on the rank's sequence shard (SP), latents gathered after
    lp = _lowp(shp)
    heads = shp.a // t
    ops: list[Op] = []
    if shp.ql:
        ops += [_linear("q_down", Ts, shp.ql, h, e, **lp),
                _elementwise("q_norm", "norm", Ts * shp.ql, 2 * e, 3 * e, _NORM_FLOPS["rmsnorm"]),
                _linear("q_up", T, heads * shp.dqk, shp.ql, e, **lp)]
    else:
        ops.append(_linear("q_proj", T, heads * shp.dqk, h, e, **lp))
    ops += [_linear("kv_down", Ts, shp.kvl + shp.dr, h, e, **lp),
            _elementwise("kv_norm", "norm", Ts * shp.kvl, 2 * e, 3 * e, _NORM_FLOPS["rmsnorm"]),
            _linear("kv_up", T, heads * (shp.d + shp.dvh), shp.kvl, e, **lp),
            _elementwise("rope", "elementwise", T * (heads + 1) * shp.dr, 2 * e, 2 * e, 3.0)]
    # mla_up_proj recompute re-runs the up-projections and RoPE (the down-projections' outputs are kept).
    return [replace(op, modules=frozenset({"mla_up_proj"})) if op.name in ("q_up", "q_proj", "kv_up", "rope")
            else op for op in ops]


@memoised(maxsize=4096)
def _layer_ops(shp: LayerShape) -> tuple[Op, ...]:
    if shp.kind:  # one layer of a hybrid Mamba stack
        if shp.kind not in ("M", "*", "-", "E"):
            raise ValueError("a hybrid stack of several layer kinds is costed kind by kind (shapes.block_kinds)")
        from .mamba import hybrid_layer_ops  # cycle: mamba.py builds its ops with this module's
        return hybrid_layer_ops(shp, _layer_ops)
    e, h, t = shp.e, shp.h, shp.tp
    T = shp.tokens
    T_seq = T // shp.sp_div
    lp = _lowp(shp)
    qkv_out = (shp.a + 2 * shp.kv) * shp.d // t
    ops: list[Op] = _tag([_norm("norm1", shp, T_seq)], "layernorm")
    ac_casts = norm_output_casts(shp.gated, shp.mla, shp.is_moe) if shp.autocast else (0, 0)
    if ac_casts[0]:
        ops += _tag([_autocast_casts("norm1_casts", shp, T_seq, ac_casts[0])], "layernorm")
    if shp.mla:
        ops += _mla_projection_ops(shp)
    else:
        ops.append(_linear("qkv", T, qkv_out, h, e, **lp))
        if shp.qk_norm:  # RMSNorm over head_dim of every local query and key head (Qwen3, Gemma 3)
            ops.append(_elementwise("qk_norm", "norm", T * (shp.a + shp.kv) * shp.d // t, 2 * e, 3 * e,
                                    _NORM_FLOPS["rmsnorm"]))
        if shp.rope:
            ops.append(_rope(shp, T * (shp.a + shp.kv) * shp.d // t))
        if shp.titan and shp.kv < shp.a:  # torchtitan's repeat_kv: k and v copied to the query heads
            ops.append(_elementwise("repeat_kv", "elementwise", 2 * T * shp.a * shp.d // t,
                                    *(titan_ops.repeat_kv_rw(e, shp.a, shp.kv),) * 2, 0.0, launches=(2, 2)))
    ops += _attention_ops(shp)
    ops.append(_linear("out_proj", T, h, shp.a * shp.dvh // t, e, **lp))
    if shp.norms == 4:  # Gemma 2/3: a norm after each sub-layer too, before its residual add
        ops.append(_norm("post_attn_norm", shp, T_seq))
    ops.append(_residual("residual1", shp, T_seq))
    if shp.norms >= 2:  # one norm only: Falcon-7B's parallel attention and MLP read the same input norm
        ops += _tag([_norm("norm2", shp, T_seq)], "layernorm")
        if ac_casts[1]:
            ops += _tag([_autocast_casts("norm2_casts", shp, T_seq, ac_casts[1])], "layernorm")
    ops += _moe_ops(shp) if shp.is_moe else _mlp_ops(shp, T, shp.f, "")
    if shp.norms == 4:
        ops.append(_norm("post_mlp_norm", shp, T_seq))
    ops.append(_residual("residual2", shp, T_seq))
    if shp.bias_grad_pass and not shp.is_moe:
        ops.append(_bias_grads(shp, T, T_seq, qkv_out))
    if shp.titan_compiled:  # Inductor's bytes for torchtitan's RoPE and norms (inductor_bytes.py)
        ops = list(titan_compiled_ops(shp, tuple(ops)))
    return _lora_block(shp, ops)


def _lora_block(shp: LayerShape, ops: list[Op]) -> tuple[Op, ...]:
    """A block's ops, under LoRA (``shp.lora_rank``) with frozen base weights and the adapters (lora.py)."""
    if not shp.lora_rank:
        return tuple(ops)
    from .lora import with_adapters  # lora.py builds its ops with this module's _linear
    return tuple(with_adapters(shp, ops))


def _lora_frozen(shp: LayerShape, ops) -> tuple[Op, ...]:
    """Embedding or head ops, under LoRA with their weights frozen (no weight-gradient pass: lora.py)."""
    if not shp.lora_rank:
        return tuple(ops)
    from .lora import frozen  # cycle: lora.py builds its ops with this module's _linear
    return tuple(frozen(op) for op in ops)


def _bias_grads(shp: LayerShape, T: int, T_seq: int, qkv_out: int) -> Op:
    """Bias gradients reduced over the tokens in separate kernels (framework.py fused_bias_grad): one read of
    each biased linear's output gradient -- QKV and MLP-in on their TP shard of all T tokens, out_proj and
    MLP-out (whose bias is added on the full hidden after the TP reduction) on the rank's T_seq tokens.
    Counted as weight-gradient work (the W pass of zero-bubble schedules)."""
    e, h = shp.e, shp.h
    n_in = 2 if shp.gated else 1
    dy_bytes = e * (T * qkv_out + T * n_in * shp.f // shp.tp + 2 * T_seq * h)
    return Op(name="bias_grads", kind="elementwise", fwd_flops=0.0, bwd_input_flops=0.0,
              bwd_weight_flops=dy_bytes / e, fwd_bytes=0.0, bwd_input_bytes=0.0, bwd_weight_bytes=float(dy_bytes))


def layer_ops(scenario: Scenario | LayerShape) -> tuple[Op, ...]:
    """Every op of one transformer block for one micro-batch on one rank (accepts a Scenario or LayerShape)."""
    return _layer_ops(as_layer_shape(scenario))


def recompute_ops(ops: tuple[Op, ...], mode: str, modules: frozenset = frozenset()) -> tuple[Op, ...]:
    """The ops whose forward is re-run before backward: none, those of the recomputed ``modules`` (selective;
    default the attention core), or all (full)."""
    if mode == "full":
        return ops
    if mode == "selective" and "op_sac" in modules:
        return titan_ops.op_sac_rerun(ops)
    if mode == "selective":
        mods = modules or _CORE_ATTN
        return tuple(op for op in ops if op.modules & mods)
    return ()


@memoised(maxsize=4096)
def _embedding_ops(shp: LayerShape, learned_positions: bool) -> tuple[Op, ...]:
    e, h = shp.e, shp.h
    T = shp.tokens
    # Vocab-parallel lookup: each TP rank writes its rows (zeros elsewhere) for all T tokens, then the
    # partial sums are all-reduced (reduce-scattered with SP). bwd: read dY, scatter-add into the grad rows of
    # a dense gradient of the rank's whole table: torch's embedding_dense_backward (sparse=False, nn.Embedding's
    # and Megatron's VocabParallelEmbedding's default) allocates it with at::zeros, a write of every row
    # (aten/src/ATen/native/cuda/Embedding.cu ``embedding_dense_backward_cuda``; find_string id 45737010).
    extra = 2 * e * T * h if learned_positions else 0  # + position rows read and added
    w = shp.proj or h  # OPT: rows of word_embed_proj_dim, then project_in (p -> h, no bias)
    dense_zero = e * -(-shp.vocab // shp.tp) * w
    ops = [Op(name="embedding", kind="embedding", fwd_flops=0.0, bwd_input_flops=0.0, bwd_weight_flops=T * w,
              fwd_bytes=float(2 * e * T * w + extra + 8 * T), bwd_input_bytes=0.0,
              bwd_weight_bytes=float(3 * e * T * w + 8 * T + dense_zero))]
    if shp.proj:
        ops.append(_linear("project_in", T, h, shp.proj, e))
    if shp.dropout:
        ops.append(_elementwise("embedding_dropout", "elementwise", T // shp.sp_div * h, 2 * e + 1, 2 * e + 1))
    return _lora_frozen(shp, ops)


def embedding_ops(scenario: Scenario | LayerShape) -> tuple[Op, ...]:
    """Token (+ learned position) embedding on the first pipeline stage, per micro-batch per rank."""
    shp = as_layer_shape(scenario)
    learned = getattr(getattr(scenario, "model", None), "position_embedding", "rope") == "learned"
    return _embedding_ops(shp, learned)


@memoised(maxsize=4096)
def _head_ops(shp: LayerShape) -> tuple[Op, ...]:
    return _lora_frozen(shp, _head_ops_trained(shp))


def _head_ops_trained(shp: LayerShape) -> tuple[Op, ...]:
    e, h = shp.e, shp.h
    T = shp.tokens
    v_local = -(-shp.vocab // shp.tp)
    logits = T * v_local
    # OPT: project_out (h -> word_embed_proj_dim, no bias) before the output layer; Gemma 2: c·tanh(x/c) on the
    # logits before the loss (final_logit_softcapping), a memory-bound pass over them.
    proj = (_linear("project_out", T, shp.proj, h, e),) if shp.proj else ()
    cap = ((_elementwise("logit_softcap", "elementwise", logits, 2 * e, 3 * e, _SOFTCAP_FLOPS),)
           if shp.final_softcap else ())
    cast = (_autocast_casts("final_norm_cast", shp, T // shp.sp_div, 1),) if shp.autocast else ()
    return (
        (_norm("final_norm", shp, T // shp.sp_div),) + cast + proj
        + (_linear("logits", T, v_local, shp.proj or h, e),)  # output layer stays 16-bit under fp8 recipes
        + cap
        # Cross-entropy over this rank's vocabulary shard: fused kernel or Megatron's fp32 op sequence,
        # bytes per logit from framework.cross_entropy_bytes (the framework's own implementation).
        + _loss_ops(shp, logits)
    ) + ((_elementwise("train_metrics", "loss", logits, shp.metric_ce_passes * train_metric_bytes_per_logit(e),
                       0.0, 5.0 * shp.metric_ce_passes),) if shp.metric_ce_passes else ())


def _loss_ops(shp: LayerShape, logits: float) -> tuple[Op, ...]:
    """The loss over ``logits`` values: one op, or for torch's eager ``F.cross_entropy`` on an fp32 copy its two
    kernel families apart (framework.cross_entropy_bytes): the casts (``.float()`` and autograd's cast of the
    gradient back, copy kernels) and log-softmax + NLL (softmax kernels), so each gets its measured bandwidth."""
    fwd, bwd = cross_entropy_bytes(shp.fused_ce, shp.e, shp.eager_ce)
    if shp.eager_ce and not shp.fused_ce:
        cf, cb = eager_ce_cast_bytes(shp.e)
        return (_elementwise("cross_entropy_cast", "cast", logits, cf, cb, 0.0),
                _elementwise("cross_entropy", "loss", logits, fwd - cf, bwd - cb, 5.0))
    return (_elementwise("cross_entropy", "loss", logits, fwd, bwd, 5.0),)


@memoised(maxsize=4096)
def _mtp_ops(shp: LayerShape) -> tuple[Op, ...]:
    """One multi-token-prediction module's own ops (Megatron-Core MultiTokenPredictionLayer): the embedding
    of the shifted tokens, RMSNorms of it and of the previous depth's hidden state, and the projection of
    their concatenation 2h -> h (column-parallel). Its transformer block and its pass through the shared
    output head are the model's block and head ops (the builder adds them)."""
    e, h, T = shp.e, shp.h, shp.tokens
    T_seq = T // shp.sp_div
    lp = _lowp(shp)
    lookup = Op(name="mtp_embedding", kind="embedding", fwd_flops=0.0, bwd_input_flops=0.0, bwd_weight_flops=T * h,
                fwd_bytes=float(2 * e * T * h + 8 * T), bwd_input_bytes=0.0, bwd_weight_bytes=float(3 * e * T * h))
    return (lookup, _norm("mtp_enorm", shp, T_seq), _norm("mtp_hnorm", shp, T_seq),
            _linear("mtp_eh_proj", T, h // shp.tp, 2 * h, e, **lp))


def head_ops(scenario: Scenario | LayerShape) -> tuple[Op, ...]:
    """Final norm, output projection (logits) and cross-entropy loss on the last stage, per micro-batch per rank."""
    return _head_ops(as_layer_shape(scenario))
