"""One layer of a hybrid Mamba-2 / attention / MLP / MoE stack (ModelSpec.hybrid_pattern) on one rank per
micro-batch: its ops (FLOPs and HBM bytes, flops.py conventions) and its saved activations.

A hybrid layer is one pre-norm sub-layer with its residual add (Megatron-Core MambaLayer / TransformerLayer in
megatron/core/ssm/mamba_block.py): ``*`` the attention half of a transformer block, ``-`` its dense-MLP half,
``E`` its MoE half -- each taken from flops.py's block ops, split after the first residual add -- and ``M`` the
Mamba-2 mixer of Megatron-Core's MambaMixer (megatron/core/ssm/mamba_mixer.py) on the memory-efficient path it
trains with (``use_mamba_mem_eff_path``, mamba_ssm's ``mamba_split_conv1d_scan_combined``,
mamba_ssm/ops/triton/ssd_combined.py):

* ``in_proj`` h -> (z, x, B, C, dt): 2·d_inner + 2·G·N + H outputs, column-parallel (TP splits heads and groups);
* the depthwise causal conv1d (d_conv taps, SiLU) over x, B, C (causal_conv1d's CUDA kernel), whose backward
  first recomputes it;
* the chunked SSD scan (Dao & Gu 2024, arXiv:2405.21060 Sec. 6): per chunk of Q tokens the quadratic
  "attention-like" part C·Bᵀ (2·Q·N per token and group) masked by the decays and applied to x (2·Q·P per token
  and head), the chunk states Bᵀ·x (2·N·P per token and head), and the states' contribution C·h (2·N·P per token
  and head); the inter-chunk recurrence over T/Q states is O(T/Q·N·P) and only moves bytes. The output is gated
  by SiLU(z) inside the scan kernel (``_chunk_scan_fwd`` with z). Backward: the Triton backward kernels recompute
  CB and the states and form two gradients per product, and _chunk_scan_bwd_ddAcs_stable forms dout·xᵀ once more
  (ssd_bwd_flops counts the products kernel by kernel);
* the group RMSNorm over d_inner (Megatron's ExtendedRMSNorm, group size d_inner / G);
* ``out_proj`` d_inner -> h, row-parallel.

The SSD kernels are Triton tile programs (tl.dot on Q x N / Q x P tiles) that also stream the chunk tensors and fp32
states through HBM: op kind ``ssd``, timed as a roofline of its FLOPs at the GPU's fused-attention efficiency
(the measured efficiency of FlashAttention's tiled tensor-core kernels, GPUSpec.attention_efficiency -- the SSD
paper's Sec. 6 casts the intra-chunk part as masked attention over the chunk) and of its bytes at HBM bandwidth.
Its FLOPs count as model FLOPs (they are matmuls), beside in_proj and out_proj. At the Nemotron shapes (Q = 128,
P = 64, N = 128-256) the scan moves 14-19 FLOPs per byte, so its FLOPs bind only below 4.7-6.7 % of the 16-bit peak
(benchmarks/bench_ssd_balance.py): the time is the bytes at the STREAM-measured bandwidth, whatever tile efficiency
above that the Triton kernels reach.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from trainsim.specs.model import mamba_conv_channels, mamba_in_proj_width

from . import activations as act
from .flops import _NORM_FLOPS, Op, _elementwise, _linear, _norm, _residual
from .shapes import LayerShape

if TYPE_CHECKING:
    from trainsim.specs import ModelSpec

STATE_BYTES = 4  # mamba_ssm keeps the chunk states, dA cumsums and CB in fp32 (states_in_fp32, CB fp32)
# HBM passes over each tensor family of the SSD scan, counted kernel by kernel in mamba_ssm's
# _mamba_chunk_scan_combined_fwd / _bwd (ssd_combined.py). The per-head kernels run one program per head (grid axis
# 2) and read their group's B, C and CB (``pid_h // nheads_ngroups_ratio``, ssd_chunk_scan.py _chunk_scan_fwd_kernel,
# ssd_chunk_state.py _chunk_state_fwd_kernel), so those tensors cross HBM once per head ("hn": H·N per token of B or C,
# "cb_h": Q·H fp32 per token of CB) besides the per-group passes ("gn", "cb_g"). Forward -- x read by _chunk_state_fwd
# and _chunk_scan_fwd, z read and out, out_x written by _chunk_scan_fwd: 5 passes of d_inner; B per head
# (_chunk_state_fwd) and C per head (_chunk_scan_fwd): 2 hn; B and C by _bmm_chunk_fwd: 2 gn; CB written per group
# once, read per head once. Backward -- the recomputed CB, states and chunk states; _chunk_scan_bwd_dz (out_x, z, dout
# read; dz, dout written), _chunk_scan_bwd_dstates (dout), _chunk_scan_chunk_state_bwd_dx (x, dout read, dx written),
# _chunk_state_bwd_db (x), _chunk_scan_bwd_dC (dout), _chunk_scan_bwd_dcb (x, dout), _chunk_scan_bwd_ddAcs_stable
# (x, dout) and the chunk-state recompute (x): 16 of d_inner; B per head in the recompute and dx kernels, C per head
# in dstates, dB and dC written per head and reduced: 7 hn; _bmm_chunk_fwd's and _bmm_chunk_bwd's B, C, dB, dC with
# their residuals: 8 gn; CB and dCB 3 per group, 4 per head (dx, ddAcs reads, dcb's per-head write and its reduction).
SSD_PASSES_FWD = {"inner": 5, "hn": 2, "gn": 2, "cb_g": 1, "cb_h": 1}
SSD_PASSES_BWD = {"inner": 16, "hn": 7, "gn": 8, "cb_g": 3, "cb_h": 4}
# HBM traffic per element of the chunk states (T/Q · H · P · N per rank), as (fp32 passes, activation-dtype passes).
# Forward: _chunk_state_fwd writes them in fp32 (states_in_fp32=True), _state_passing_fwd reads fp32 and writes
# ``out_dtype`` -- Megatron's MambaMixer passes state_dtype = mamba_training_ssm_states_dtype or params_dtype, the
# 16-bit dtype (megatron/core/ssm/mamba_mixer.py _ssm_training) -- which _chunk_scan_fwd reads: 2 fp32 + 2 16-bit.
# Backward: the recompute's _chunk_state_fwd write and _state_passing_fwd read and write (fp32: no out_dtype there),
# _chunk_scan_bwd_dstates' write (dtype=states.dtype, fp32), _state_passing_bwd's reads of states and dstates (fp32) and
# its 16-bit writes of dstates and the converted states, then the 16-bit reads of dstates by
# _chunk_scan_chunk_state_bwd_dx and _chunk_state_bwd_db and of states by _chunk_scan_bwd_dC: 6 fp32 + 5 16-bit.
SSD_STATE_PASSES_FWD = (2, 2)
SSD_STATE_PASSES_BWD = (6, 5)
# Kernels one pass of the scan launches, each with its own GPUSpec.kernel_overhead_s. Forward: the five Triton
# kernels of _mamba_chunk_scan_combined_fwd (_chunk_cumsum_fwd, _chunk_state_fwd, _state_passing_fwd, _bmm_chunk_fwd,
# _chunk_scan_fwd) and MambaMixer._ssm_training's parameter casts (A = -exp(A_log.float()): cast, exp, neg;
# dt_bias.float(): Megatron's Float16Module keeps them in the 16-bit dtype; D is passed uncast unless D_has_hdim,
# which the Nemotron configs leave off -- Megatron-LM megatron/core/ssm/mamba_mixer.py, MambaMixer._ssm_training).
# Backward: the fifteen Triton kernels of _mamba_chunk_scan_combined_bwd (the recomputed cumsum, CB, chunk states
# and state passing; bwd_dz, dstates, state_passing_bwd, the dx, dB, dC, dCB kernels, two _bmm_chunk_bwd,
# ddAcs_stable, _chunk_cumsum_bwd), its torch ops (dt.clone; dD's zeros and sum; the dB, dC and dCB split sums;
# ddA_prev's in-place add, flip, cumsum, flip; the two adds into ddA) and the four casts' gradients.
SSD_KERNELS_FWD = 5 + 4
SSD_KERNELS_BWD = 15 + 12 + 4


def _ssd_bytes(shp: LayerShape, passes: dict[str, int], state_passes: tuple[int, int]) -> float:
    """HBM bytes of one pass of the SSD scan on one rank: ``passes`` over each tensor family (``SSD_PASSES_*``),
    ``state_passes`` over the chunk states (``SSD_STATE_PASSES_*``), and the fp32 dt, softplus(dt) and dA cumsum."""
    e, T, t = shp.e, shp.tokens, shp.tp
    inner, heads, groups = shp.mh * shp.mp // t, shp.mh // t, shp.mg // t
    state_elems = (T / shp.mchunk) * heads * shp.mp * shp.mn
    cb = T * shp.mchunk * STATE_BYTES
    return (e * T * (passes["inner"] * inner + passes["hn"] * heads * shp.mn + passes["gn"] * groups * shp.mn)
            + state_elems * (state_passes[0] * STATE_BYTES + state_passes[1] * e)
            + cb * (passes["cb_g"] * groups + passes["cb_h"] * heads)
            + 3 * STATE_BYTES * T * heads)  # dt, dt softplus, dA cumsum


def ssd_fwd_flops(shp: LayerShape) -> float:
    """Forward FLOPs of the chunked SSD scan on one rank (module doc): C·Bᵀ per group, the masked product with x,
    the chunk states and their output contribution per head."""
    T, t, Q, N, P = shp.tokens, shp.tp, shp.mchunk, shp.mn, shp.mp
    return 2.0 * T * Q * N * (shp.mg // t) + (shp.mh // t) * (2.0 * T * Q * P + 4.0 * T * N * P)


def ssd_bwd_flops(shp: LayerShape) -> float:
    """Backward FLOPs of the chunked SSD scan on one rank, the tl.dot products of mamba_ssm's
    _mamba_chunk_scan_combined_bwd kernel by kernel. Per group (Q x Q x N products, 2·T·Q·N each): the recomputed
    C·Bᵀ (_bmm_chunk_fwd) and the two _bmm_chunk_bwd (dB, dC from dCB). Per head, Q x Q x P products (2·T·Q·P each):
    CBᵀ·dout in _chunk_scan_chunk_state_bwd_dx, dout·xᵀ in _chunk_scan_bwd_dcb and again in
    _chunk_scan_bwd_ddAcs_stable; P x N products (2·T·N·P each): the recomputed chunk states (_chunk_state_fwd),
    Cᵀ·dout (_chunk_scan_bwd_dstates), B·dstates (dx kernel), x·dstates (_chunk_state_bwd_db) and dout·states
    (_chunk_scan_bwd_dC)."""
    T, t, Q, N, P = shp.tokens, shp.tp, shp.mchunk, shp.mn, shp.mp
    return 3 * 2.0 * T * Q * N * (shp.mg // t) + (shp.mh // t) * (3 * 2.0 * T * Q * P + 5 * 2.0 * T * N * P)


def _ssd_op(shp: LayerShape) -> Op:
    return Op(name="ssd_scan", kind="ssd", fwd_flops=ssd_fwd_flops(shp), bwd_input_flops=ssd_bwd_flops(shp),
              bwd_weight_flops=0.0, fwd_bytes=_ssd_bytes(shp, SSD_PASSES_FWD, SSD_STATE_PASSES_FWD),
              bwd_input_bytes=_ssd_bytes(shp, SSD_PASSES_BWD, SSD_STATE_PASSES_BWD),
              launches=(SSD_KERNELS_FWD, SSD_KERNELS_BWD))


def _conv_op(shp: LayerShape) -> Op:
    """causal_conv1d with SiLU over the x, B, C channels: d_conv multiply-adds per element; forward reads and writes
    each element once, backward recomputes the forward (read, write) and reads input and gradient, writes dx. One
    forward kernel; backward six: the recomputed forward (mamba_split_conv1d_scan_combined's backward), then
    causal_conv1d_bwd_function's fp32 zeros for dweight and dbias, the backward kernel and the two casts back
    (causal-conv1d causal_conv1d/cpp_functions.py)."""
    e = shp.e
    ch = mamba_conv_channels(shp.mh * shp.mp, shp.mg, shp.mn) // shp.tp
    n = shp.tokens * ch
    return _elementwise("mamba_conv1d", "elementwise", n, 2 * e, 5 * e, 2.0 * shp.mconv + 4.0, launches=(1, 6))


def _in_proj_width(shp: LayerShape) -> int:
    """Whole (before TP) output width of the layer's in_proj (specs/model.py mamba_in_proj_width)."""
    return mamba_in_proj_width(shp.mh * shp.mp, shp.mg, shp.mn, shp.mh)


def mamba_mixer_ops(shp: LayerShape) -> list[Op]:
    """The Mamba-2 layer's ops (module doc): pre-norm, in_proj, the batch-first layout copies, conv1d, SSD scan,
    group RMSNorm, out_proj, residual."""
    e, h, t = shp.e, shp.h, shp.tp
    T, T_seq = shp.tokens, shp.tokens // shp.sp_div
    fp8, casts = shp.dtype == "fp8", shp.fp8_weight_casts
    inner = shp.mh * shp.mp // t
    proj_out = _in_proj_width(shp) // t
    ops = [
        _norm("norm1", shp, T_seq),  # fused into in_proj (TELayerNormColumnParallelLinear): not a recompute module
        _linear("mamba_in_proj", T, proj_out, h, e, fp8=fp8, weight_casts=casts),
    ]
    if shp.b > 1:
        # MambaMixer._ssm_training turns in_proj's [s, b, ...] output batch-first with
        # rearrange(..., "l b d -> b l d").contiguous() and the scan's output back with "b l d -> l b d": two copies
        # (read and write) with more than one sequence per micro-batch, and their gradients' copies in backward.
        ops.append(_elementwise("mamba_layout_copies", "elementwise", T * (proj_out + inner), 2 * e, 2 * e, 0.0,
                                launches=(2, 2)))
    return ops + [
        _conv_op(shp),
        _ssd_op(shp),
        # The group RMSNorm (mamba_ssm layernorm_gated): one Triton kernel forward; backward _layer_norm_bwd's
        # kernel, then the weight gradient's _dw.sum(0) and its cast to the weight's dtype.
        _elementwise("mamba_norm", "norm", T * inner, 2 * e, 3 * e, _NORM_FLOPS["rmsnorm"],
                     extra_fwd_bytes=4 * T * shp.mg // t, extra_bwd_bytes=4 * T * shp.mg // t, launches=(1, 3)),
        _linear("mamba_out_proj", T, h, inner, e, fp8=fp8, weight_casts=casts),
        _residual("residual1", shp, T_seq),
    ]


def hybrid_layer_ops(shp: LayerShape, block_ops: Callable[[LayerShape], tuple[Op, ...]]) -> tuple[Op, ...]:
    """The ops of one hybrid layer of kind ``shp.kind``: the Mamba mixer's, or the attention half (up to and with
    the first residual add) / the MLP or MoE half (the rest) of ``block_ops(shape)``, flops.py's block. Megatron's
    hybrid stack (megatron/core/models/hybrid/hybrid_layer_specs.py) fuses the pre-norm into the first linear of
    the Mamba, attention and MLP layers (TELayerNormColumnParallelLinear in_proj / linear_qkv / linear_fc1); only
    the MoE layer has a norm module of its own (pre_mlp_layernorm=TENorm)."""
    if shp.kind == "M":
        return tuple(mamba_mixer_ops(shp))
    ops = block_ops(replace(shp, kind="", norms=2))
    cut = next(i for i, op in enumerate(ops) if op.name == "residual1") + 1
    half = ops[:cut] if shp.kind == "*" else ops[cut:]
    if shp.kind == "E":
        return tuple(half)
    # The attention and MLP layers' norms are fused into linear_qkv / linear_fc1 (fused_norm_layers): Megatron's
    # "layernorm" recompute cannot re-run them.
    return tuple(replace(op, modules=op.modules - {"layernorm"}) for op in half)


def mamba_activation_bytes(shp: LayerShape, gemm_input_e: int) -> float:
    """Bytes one Mamba-2 layer saves for its backward (no recompute), one rank: the pre-norm's input (the residual
    stream, sequence-sharded with SP) and fp32 rstd; in_proj's input (the norm output, at ``gemm_input_e`` bytes:
    fp8 copies under fp8; sequence-sharded with SP, since in_proj is TELayerNormColumnParallelLinear, which saves its
    local sequence shard and all-gathers it again in backward, as the transformer's fused norm linears do:
    activations._gemm_input_bytes); what mamba_split_conv1d_scan_combined saves -- zxbcdt (in_proj's whole output) and
    out_x (the ungated scan output, d_inner); the group RMSNorm's input and rstd; out_proj's input (d_inner)."""
    e, T, t, h = shp.e, shp.tokens, shp.tp, shp.h
    inner = shp.mh * shp.mp // t
    zxbcdt = _in_proj_width(shp) // t
    return (e * T * h / shp.sp_div + STATE_BYTES * T / shp.sp_div + gemm_input_e * T * h / shp.sp_div
            + e * T * (zxbcdt + 2 * inner) + STATE_BYTES * T * shp.mg // t + gemm_input_e * T * inner)


def hybrid_activation_bytes(shp: LayerShape, impl: str) -> act.ActivationBytes:
    """Saved activations of one hybrid layer (activations.ActivationBytes). Full recompute keeps each layer's input
    (Megatron checkpoints every layer). A Mamba layer saves mamba_activation_bytes. The attention and MLP / MoE
    layers are the halves of activations.py's transformer block, which sums one norm's input, statistics and output
    (the next linear's saved input) per half plus each half's own tensors: the attention half is the block without
    an MLP (ffn 0) less the second norm's terms, the MLP / MoE half the whole block less the attention half."""
    if shp.kind not in ("M", "*", "-", "E"):
        raise ValueError("a hybrid stack of several layer kinds is costed kind by kind (shapes.block_kinds)")
    e, T, r = shp.e, shp.tokens, shp.sp_div
    if shp.recompute == "full":
        return act.ActivationBytes(main=e * T * shp.h / r, small=0.0)
    if shp.kind == "M":
        return act.ActivationBytes(main=mamba_activation_bytes(shp, act._gemm_input_e(shp, impl)), small=0.0)
    # Fused norms (hybrid_layer_ops): the attention and MLP layers keep their norm output whatever "layernorm" says;
    # the MoE layer's own TENorm drops its output (the router's 16-bit input) when "layernorm" is recomputed.
    fused_rc = shp.rc_modules - {"layernorm"}
    block = replace(shp, kind="", norms=2, rc_modules=fused_rc,
                    recompute=shp.recompute if fused_rc or "layernorm" not in shp.rc_modules else "none")
    no_mlp = act._layer(replace(block, experts=1, top_k=1, fs=0, f=0), impl)
    norm_main, norm_small = act._norm_bytes(block, T / r, impl)
    norm_out = act._gemm_input_bytes(block, impl)
    attn = act.ActivationBytes(main=no_mlp.main - norm_main - norm_out, small=no_mlp.small - norm_small)
    if shp.kind == "*":
        return attn
    whole = act._layer(block, impl)
    dropped = act._gemm_input_bytes(block, impl, fp8_input=False) if shp.kind == "E" and shp.recomputes(
        "layernorm") else 0.0
    return act.ActivationBytes(main=whole.main - attn.main - dropped, small=whole.small - attn.small)


def hybrid_params_rank(model: ModelSpec, attn: float, mlp: Callable[..., float], tp: int, ep: int,
                       etp: int | None) -> tuple[float, float]:
    """(dense, expert) parameters of a hybrid stack's mean layer on one rank (memory.layer_params_per_rank): each
    kind with its pre-norm -- the Mamba mixer wholly split over TP (in_proj, conv, dt_bias, A_log, D, its norm and
    out_proj are all partitioned in MambaMixer), ``attn`` the TP-split attention, ``mlp(ffn[, split, width])`` a
    TP-split MLP of ``ffn`` (split over ``split`` ranks, input width ``width``); a MoE layer's router, shared
    expert and LatentMoE projections (duplicated over TP) dense, its routed experts (at the latent width with
    LatentMoE) over ep (and etp)."""
    norm = model.norm_params()
    per_kind = {"M": (model.mamba_params() / tp, 0.0), "*": (attn, 0.0), "-": (mlp(model.ffn), 0.0)}
    if model.is_moe:
        shared = mlp(model.shared_expert_ffn) if model.shared_expert_ffn else 0.0
        per_kind["E"] = (model.router_params() + shared + model.latent_proj_params(),
                         (model.num_experts / ep) * mlp(model.expert_ffn, etp or tp, model.expert_width))
    counts = model.hybrid_counts()
    n = sum(counts.values())
    dense = sum(c * (per_kind[k][0] + norm) for k, c in counts.items()) / n
    expert = sum(c * per_kind[k][1] for k, c in counts.items()) / n
    return dense, expert
