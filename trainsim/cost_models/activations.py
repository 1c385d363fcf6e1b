"""Bytes of activations saved for backward per transformer block per micro-batch on one rank.

The count follows Korthikanti et al. (formulas.csv rows ``act_none``, ``act_tp``, ``act_tp_sp``,
``act_tp_sel``, ``act_tp_sp_sel``, ``act_full``) tensor by tensor, generalised to GQA, SwiGLU, MoE, CP,
flash attention, no-dropout and any element size ``e``:

* sequence region (replicated over TP, sharded by it with sequence parallelism): both norms' inputs and
  outputs (the norm output is the QKV / fc1 input), ``4·e·T·h``; with dropout the two residual-dropout
  masks (1 byte per element, as on CUDA) ``2·T·h``;
* TP-sharded: q, k, v (``(a + 2·kv)·d`` per token; the unfused path expands k, v to ``a`` heads and saves
  them over all ``s`` keys), the attention output (out-projection input) ``a·d``, the MLP inner
  activations (GeLU: fc1 output and GeLU output ``2·f``; SwiGLU: ``3·f`` with Megatron's fused kernel
  (gate|up and product), ``4·f`` in eager autograd (gate, up, silu(gate), product)), MoE: dispatched tokens
  ``k·h``, experts' inner ``k·(2|3|4)·fe``, expert outputs for the weighted combine ``k·h`` (fp32 probabilities
  ``4·k`` instead where Megatron-Core's weighted SwiGLU applies them: ``_combine_saved_bytes``);
* attention core, unfused only: softmax output ``e·a·sq·sk`` (``(4 + e)·a·sq·sk`` where the softmax runs in fp32
  and its 16-bit cast feeds the value GEMM: TrainingSpec.attention_softmax_fp32), with dropout its 1-byte mask and
  output (a sliding window is a mask on the whole matrix there, so it saves the same; flash attention saves no s×s
  term either way);
* small terms (``ActivationBytes.small``): norm statistics in fp32 (LayerNorm mean + rstd, RMSNorm rstd),
  flash attention's fp32 logsumexp ``4·b·a·sq``, MoE router probabilities (fp32) and top-k indices.

fp8 (Transformer Engine): every TE linear saves its input for the weight-gradient GEMM already quantized,
1 byte per element (``FP8_SAVED_BYTES``) -- ``_Linear`` saves ``inputmat``/``inputmat_t`` in fp8 and
``LayerNormLinear`` its fp8 ``ln_out`` (TransformerEngine module/linear.py, layernorm_linear.py; MXFP8 keeps
only the column-wise copy, 1 + 1/32 bytes with its e8m0 scales: ``MXFP8_BYTES``). So the norm outputs (QKV / fc1 inputs) and the
fc2 input (the SwiGLU product or GeLU output) take 1 byte, the out-projection keeps a 1-byte copy of the
attention output besides the bf16 one flash attention saves, and MoE experts save their dispatched input in
fp8. Norm inputs, q/k/v/o, the activation function's input, the expert outputs, and the inputs of 16-bit
GEMMs (a MoE router, the output layer) stay 2 bytes. nvfp4 saves the same tensors as the NVFP4 columnwise copy the
wgrad GEMM reads, 0.5625 bytes per element (``TE_SAVED_BYTES``; nvfp4.py).

fp8 (torchao, ``LayerShape.torchao_fp8``): ``Float8Linear``'s autograd Function saves its 16-bit input
(``ctx.save_for_backward(input_hp, weight_hp_t)``, torchao/float8/float8_linear.py), so an eager block saves what a
16-bit block saves. Under torch.compile AOTAutograd's min-cut partitioner decides. Traced on CPU (torch 2.13, torchao
0.18, real ``_scaled_mm`` on float8 operands; the executor's Llama block, kernels/torch_model.py, in bf16 at h 128,
4 heads, 2 K/V heads, f 352, 64 tokens, converted by ``convert_to_float8_training`` with
``Float8LinearConfig.from_recipe_name``, compiled through ``aot_autograd`` with ``min_cut_rematerialization_partition``
as tests/test_compile_oracle.py does): where the weight-gradient GEMM reads a float8 copy of X (recipes tensorwise,
rowwise) a linear input that is a pointwise function of tensors kept anyway is not saved at all -- both norm outputs
(rebuilt from the norm input and its rstd, which the norm's backward keeps) and the SwiGLU product (from the gate and
up outputs) are recomputed in the backward with their float8 casts; a linear input that nothing else keeps and that no
pointwise chain rebuilds is saved as its 1-byte column-major copy plus its scale (tensorwise one fp32, rowwise the
16-bit amax of each of its columns) instead of the 16-bit tensor -- on CPU the out-projection's input, a copy of the
attention output there, 8,192 bytes in place of 16,384. The block saved 267,776 bytes in bf16, 181,806 tensorwise,
182,016 rowwise, 267,776 rowwise_with_gw_hp. The same happens in isolation: a Float8Linear fed by ``tanh`` (whose
backward keeps its input or output) saves no copy, one fed by a matmul or by the graph's input saves the float8 copy
and its scale. Here the unfused attention's output (a value-GEMM output nothing else keeps) is such an input; flash
attention's output, which flash keeps for its own backward, is saved once (``_attention_output_bytes``): on CUDA the
out-projection's input is a view of it, so its float8 copy is rebuilt as the ``tanh`` probe's is (inferred from that
probe: CPU's flash output layout makes the input a copy and cannot show it). With rowwise_with_gw_hp the weight gradient runs in 16 bits on X itself, so a compiled
block saves the 16-bit block's tensors exactly. The weights' float8 copies are never saved (the weight's amax or
nothing; the backward re-casts the 16-bit weight, what torchtitan's ``force_recompute_fp8_weight_in_bwd`` asks for),
nor are a few scalar amaxes counted (under 100 bytes per block). Full AC and op_sac keep what they keep in 16 bits
(the per-op policy's matmul outputs are the scaled mm's 16-bit outputs, plus a few fp32 scalars).

LoRA (``LayerShape.lora_rank``, cost_models/lora.py): a frozen linear saves no input (Transformer Engine skips the
save without ``weight.requires_grad``), a target's adapter saves the base input 16-bit for its own weight gradient
(once with flash attention's copy of the attention output), and each adapter its B input, ``e·T·rank``.

Here ``T = b·s/cp`` tokens per rank; with CP every token-proportional term is divided by ``cp`` (ring
attention keeps only the local q, k, v, o; received k/v chunks are re-sent in backward).
Recompute: ``selective`` drops what its modules (TrainingSpec.recompute_modules, Megatron-Core
--recompute-modules) recompute -- core_attn (the default, Korthikanti's selective recompute): the attention core's
softmax/dropout terms and the logsumexp, q, k, v and the output stay; mla_up_proj: MLA's per-head q, k, v;
layernorm: the two norms' outputs (the linears' saved inputs); mlp: a dense block's MLP inner activations;
moe_act: the experts' activation output; shared_experts: the shared expert's inner activations; moe: everything
of the MoE layer after its input. ``op_sac`` (alone) is torchtitan's per-op policy, see ``op_sac_saved_tensors``.
``full`` keeps only the block input ``e·T·h`` (``/tp`` with SP, the input is
sharded).

``impl`` selects the kernels: ``"fused"`` (default; Megatron/TE: fused norms and SwiGLU) or ``"eager"``
(plain torch autograd, the executor's model in trainsim/kernels/torch_model.py: RMSNorm in fp32 saving
its normalised tensor, SwiGLU 4·f, a copy of the attention output after RoPE, per-layer RoPE tables, and
with torch's SequenceParallel the all-gathered norm outputs saved whole by the following linears).
``"titan"`` is what torchtitan's eager Llama code saves with 16-bit parameters (FSDP2's MixedPrecisionPolicy
casts parameters, not activations, so the residual stream is 16-bit): its RMSNorm
``self._norm(x.float()).type_as(x) * self.weight`` saves the fp32 copy of the input (``pow`` and ``mul``), the
fp32 rstd and the 16-bit normalised tensor (the weight ``mul``): ``(4 + e)·h`` per token; RoPE by complex
multiplication in fp32 saves only the shared ``freqs_cis`` buffer; ``repeat_kv`` expands k and v to the query
heads by a copy, which SDPA saves (``3·a·d`` for q, k, v); SDPA's output and the out-projection's input
are one tensor (q after RoPE is (b, s, a, d)-contiguous and flash attention, CUDA's and CPU's, allocates its
output in that layout, so ``output.transpose(1, 2).contiguous()`` is a view); ``w2(F.silu(w1(x)) * w3(x))``
saves ``4·f``
(pytorch/torchtitan torchtrain/models/llama/model.py @ 83c879f18 of March 2024; torchtitan/models/norms.py
``RMSNorm`` under the default ``norm_type = "rmsnorm"`` and models/llama/model.py @ ba2469780 of December 2024).
A block is costed so when ``LayerShape.titan`` (shapes._titan_block: framework torch, uncompiled, dense Llama);
``kernels`` maps the default ``"fused"`` to it. Measured against torch's autograd in tests/test_titan_oracle.py.
The norm term is torchtitan's own RMSNorm class, its code until 3b39d7ab0 (2025-03-19, PR #985 switched to
``nn.RMSNorm``, whose CUDA ``_fused_rms_norm`` in recent torch saves the input and rstd as ``"fused"``); framework
``torch`` has no era to tell them apart, and every uncompiled torchtitan row of the memory dataset predates it.
Blocks under torch.compile (TrainingSpec.compile) keep what AOTAutograd's min-cut partitioner saves, measured
in tests/test_compile_oracle.py: without AC the ``"fused"`` block (norm inputs and outputs, SwiGLU 3·f), with full
AC the block input, with op_sac all but the unread last matmul output (``op_sac_saved_tensors``).
For a dropout-free GPT block with LayerNorm, SDPA and GeLU both agree and this is exactly what torch saves
(``saved_tensors_hooks`` deduplicated by storage): ``16·e·s·b·h`` + LayerNorm stats ``2·8·b·s`` +
logsumexp ``4·b·a·s`` (/shared/notes/torch-distributed-on-cpu.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from trainsim.specs.errors import SpecError
from trainsim.specs.memo import memoised

from .autocast import RESIDUAL_BYTES, norm_output_casts
from .fp8_weights import MXFP8_BYTES
from .nvfp4 import NVFP4_BYTES
from .shapes import LayerShape, as_layer_shape, block_kinds, mtp_kinds

if TYPE_CHECKING:
    from trainsim.specs import Scenario

MASK_BYTES = 1  # dropout masks are bool/uint8 on CUDA (Korthikanti's assumption)
FP32_SOFTMAX_BYTES = 4  # an fp32 softmax output per attention probability (TrainingSpec.attention_softmax_fp32)
STAT_BYTES = 4  # norm statistics and logsumexp are fp32
FP8_SAVED_BYTES = 1  # a TE linear's input saved for backward in fp8 (E4M3)
# nvfp4: the columnwise NVFP4 copy the wgrad GEMM reads, 4 bits + an E4M3 scale per 16 elements (nvfp4.py)
TE_SAVED_BYTES = {"fp8": FP8_SAVED_BYTES, "nvfp4": NVFP4_BYTES}


@dataclass(frozen=True)
class ActivationBytes:
    """Saved-for-backward bytes: ``main`` (Korthikanti's terms) + ``small`` (stats, logsumexp, router)."""

    main: float
    small: float

    @property
    def total(self) -> float:
        return self.main + self.small


def _fp8_saved(shp: LayerShape, impl: str) -> bool:
    """Whether GEMM inputs are saved quantized: fp8 or nvfp4 training through Transformer Engine's fused modules, or
    torchao tensorwise float8 under tensor parallelism (torchtitan's ``enable_float8_tensorwise_tp``: torchao's
    ``Float8ColwiseParallel`` / ``Float8RowwiseParallel`` cast each linear's input to float8 in their input hook,
    before its all-gather, so the Float8Linear saves that float8 tensor; costed as Transformer Engine's 1-byte saved
    inputs, not traced). Elsewhere torchao's Float8Linear saves its 16-bit input (module doc, ``_ao_recomputed``)."""
    if shp.torchao_fp8:
        return impl == "fused" and shp.tp > 1 and shp.ao_recipe == "tensorwise"
    return shp.dtype in TE_SAVED_BYTES and impl == "fused"


def _ao_recomputed(shp: LayerShape) -> bool:
    """Whether the block's torchao float8 linears run under torch.compile with a float8 weight-gradient GEMM (recipes
    tensorwise, rowwise): the partitioner then saves no input that a pointwise chain from kept tensors rebuilds, and
    the 1-byte column-major copy of one that none does (module doc; traced without tensor parallelism)."""
    return (bool(shp.torchao_fp8) and shp.compiled and shp.tp == 1 and shp.ao_recipe != "rowwise_with_gw_hp"
            and not shp.autocast and not shp.lora_rank)


def _ao_copy_bytes(shp: LayerShape, n: float, cols: float) -> float:
    """The saved float8 copy of an ``n``-element linear input with ``cols`` columns (``_ao_recomputed``): 1 byte per
    element and its scale -- one fp32 (tensorwise) or the 16-bit amax of each column (rowwise's per-column scaling
    of X for the weight gradient, torchao ``axiswise_dim=0``)."""
    return FP8_SAVED_BYTES * n + (shp.e * cols if shp.ao_recipe == "rowwise" else STAT_BYTES)


def _gemm_input_e(shp: LayerShape, impl: str) -> float:
    """Bytes per element of a linear layer's saved input (MXFP8's columnwise copy with its e8m0 scales)."""
    if not _fp8_saved(shp, impl):
        return shp.e
    return MXFP8_BYTES if shp.mxfp8 else TE_SAVED_BYTES[shp.dtype]


def _saved_input_e(shp: LayerShape, impl: str, targets: tuple[str, ...], fp8_input: bool = True) -> float:
    """Bytes per element a base linear (one of ``targets``, Megatron-Bridge names) saves of its input. Under LoRA
    a frozen linear saves none (Transformer Engine skips the save when ``weight.requires_grad`` is False,
    cost_models/lora.py) and a target's adapter saves it 16-bit for its own weight gradient (a Megatron-Core
    linear, not an fp8 one); else ``_gemm_input_e`` (16-bit where ``fp8_input`` is False)."""
    if shp.lora_rank:
        return shp.e if any(t in shp.lora_targets for t in targets) else 0
    return _gemm_input_e(shp, impl) if fp8_input else shp.e


def _mlp_inner_bytes(shp: LayerShape, ffn: int, impl: str = "fused", float8_fc2: bool = False) -> float:
    """Inner MLP bytes saved per token: GeLU 2·f (fc1 out, GeLU out = fc2 input); SwiGLU fused 3·f (gate|up,
    product = fc2 input), eager 4·f (gate, up, silu(gate), product). The fc2 input is the linear's own save, none
    where fc2 is a compiled torchao float8 linear (``float8_fc2`` and ``_ao_recomputed``: rebuilt from fc1's
    outputs)."""
    fc2_in = 0.0 if float8_fc2 and _ao_recomputed(shp) else _saved_input_e(shp, impl, ("linear_fc2",)) * ffn
    if shp.gated:
        return shp.e * (3 if impl in EAGER_IMPLS else 2) * ffn + fc2_in
    return shp.e * ffn + fc2_in


IMPLS = ("fused", "eager", "titan")
EAGER_IMPLS = ("eager", "titan")  # un-fused SwiGLU; torch's SequenceParallel hands linears the gathered input


def kernels(shp: LayerShape, impl: str) -> str:
    """The kernels a block runs: the framework's own where ``impl`` is the default ``"fused"`` and the block is
    torchtitan's eager Llama code (``LayerShape.titan``), else ``impl``."""
    return "titan" if impl == "fused" and shp.titan else impl


def _check_impl(impl: str) -> None:
    if impl not in IMPLS:
        raise SpecError("impl", f"must be one of {', '.join(IMPLS)}, got {impl!r}")


def _norm_bytes(shp: LayerShape, n_tok: float, impl: str) -> tuple[float, float]:
    """(main, small) bytes one norm saves beyond its output: its input and statistics.

    Fused kernels (LayerNorm everywhere; Apex/TE RMSNorm) save the input (``e``) and fp32 statistics.
    Eager ``nn.RMSNorm`` computes in fp32 and saves the fp32 input and the fp32 normalised tensor
    (before the weight) besides rstd: ``8·h`` bytes per token instead of ``e·h``.
    """
    e, h = shp.e, shp.h
    if shp.autocast:  # fp32 residual input, fp32 stats; CUDA's fused rms_norm saves no normalised copy (autocast.py)
        return RESIDUAL_BYTES * n_tok * h, (2 if shp.norm == "layernorm" else 1) * STAT_BYTES * n_tok
    if shp.norm == "layernorm":
        return e * n_tok * h, 2 * STAT_BYTES * n_tok
    if impl == "eager":
        return 2 * STAT_BYTES * n_tok * h, STAT_BYTES * n_tok
    if impl == "titan" and not shp.titan_fused_norm:  # fp32 input copy and 16-bit normalised tensor (docstring)
        return (STAT_BYTES + e) * n_tok * h, STAT_BYTES * n_tok
    return e * n_tok * h, STAT_BYTES * n_tok


def _gemm_input_bytes(shp: LayerShape, impl: str, fp8_input: bool = True, targets: tuple[str, ...] = ()) -> float:
    """A norm output saved as the input of the column-parallel GEMMs after it; ``fp8_input=False`` when the
    consumer is not a Transformer Engine fp8 linear (the output layer, a MoE router), so it stays 16-bit.

    With sequence parallelism Megatron saves the sequence-sharded tensor and all-gathers it again in
    backward (Korthikanti Sec. 4.2.2); torch's ``PrepareModuleInput(Shard(1) -> Replicate())`` hands the
    linears the gathered tensor, which they save whole (``eager``).
    """
    r = 1 if impl in EAGER_IMPLS else shp.sp_div
    return _saved_input_e(shp, impl, targets, fp8_input) * shp.tokens * shp.h / r


def _norm_output_bytes(shp: LayerShape, impl: str) -> float:
    """The block's norm outputs, saved as the inputs of the linears after them.

    Two norms: each output is the next GEMM's saved input -- the QKV projection, then fc1, or in a MoE block the
    router (a 16-bit GEMM; the experts save their own input). Recomputing "layernorm" drops both outputs (Megatron
    discards them once the linears have consumed them). One norm (Falcon-7B's parallel block): its output feeds
    QKV and fc1 both, saved once. Four (Gemma 2/3): the post-norms save their inputs and statistics; their outputs
    go to the residual add, which saves nothing. Under torch.autocast every linear after a norm saves its own
    16-bit cast of the fp32 norm output (autocast.py, ``norm_output_casts``).
    """
    c_attn, c_mlp = norm_output_casts(shp.gated, shp.mla, shp.is_moe) if shp.autocast else (1, 1)
    if _ao_recomputed(shp):  # rebuilt from the norm input and rstd (module doc); a MoE router reads it in 16 bits
        c_attn, c_mlp = 0, (1 if shp.is_moe else 0)
    if shp.norms < 2 and shp.autocast:
        c_attn += c_mlp  # one norm feeds the attention and MLP linears: a cast for each
    one = ("linear_qkv",) if shp.norms >= 2 else ("linear_qkv", "linear_fc1")
    return c_attn * _gemm_input_bytes(shp, impl, targets=one) + (
        c_mlp * _gemm_input_bytes(shp, impl, fp8_input=not shp.is_moe, targets=("linear_fc1",))
        if shp.norms >= 2 else 0.0)


def _qkv_bytes(shp: LayerShape, impl: str) -> tuple[float, float, float]:
    """(sequence-region, q/k/v, small) bytes the attention's inputs save per micro-batch: MLA's latents and
    per-head q, k, v, or the q, k, v projections (with QK-norm's un-normed copies and statistics)."""
    e, t, T, r = shp.e, shp.tp, shp.tokens, shp.sp_div
    heads = shp.a // t
    if shp.mla:
        # MLA: the latents replicated on every TP rank -- each RMSNorm's input (e) and output (the up-
        # projection's saved input), the shared RoPE key -- then per-head q, k (dqk) and v (dvh), which
        # "mla_up_proj" recompute drops (re-projected from the latents before the backward).
        # With SP the latents are saved sequence-sharded (gathered again for the up-projections' backward).
        lat_in = _gemm_input_e(shp, impl)
        seq = (T / r) * ((shp.e + lat_in) * (shp.ql + shp.kvl) + shp.e * shp.dr)
        small = STAT_BYTES * (T / r) * (2 if shp.ql else 1)
        qkv = 0.0 if shp.recomputes("mla_up_proj") else e * T * heads * (2 * shp.dqk + shp.dvh)
        return seq, qkv, small
    # torchtitan's repeat_kv copies k and v to the query heads before SDPA, which saves the copies
    qkv = e * T * (3 * shp.a if impl == "titan" else shp.a + 2 * shp.kv) * shp.d / t
    small = 0.0
    if shp.qk_norm:  # QK-norm saves the un-normed q and k and an fp32 rstd per head (q, k after it as above)
        qkv += e * T * (shp.a + shp.kv) * shp.d / t
        small += STAT_BYTES * T * (shp.a + shp.kv) / t
    return 0.0, qkv, small


def _attention_bytes(shp: LayerShape, impl: str, qkv_saved: float) -> tuple[float, float, float]:
    """(attention, core, small) bytes of the attention per micro-batch, given what its q/k/v save
    (_qkv_bytes): flash attention's inputs, output and statistics, or the unfused path's expanded q, k, v and
    its saved probabilities (``core``, none where the core is recomputed)."""
    e, t, T = shp.e, shp.tp, shp.tokens
    heads = shp.a // t
    sq, sk = shp.s // shp.cp, shp.s
    qd = heads * shp.dvh  # attention output (out-projection input) per token
    core_rc = shp.recomputes("core_attn")
    small = 0.0
    if shp.flash:
        # q, k, v; the output is saved by the out-projection (its input) and, unless the core is recomputed
        # (core_attn), by flash attention for its own backward -- one 16-bit tensor, or with fp8 the
        # projection's fp8 copy besides flash's 16-bit one.
        attn = qkv_saved + _attention_output_bytes(shp, impl, T * qd, flash_keeps=not core_rc)
        if not core_rc:
            small += STAT_BYTES * shp.b * heads * sq
            attn += _te_cp_received_kv_bytes(shp)
        core = 0.0
    else:
        # q over local queries; k, v expanded to all query heads over all s keys; the output (saved only by
        # the out-projection: the batched GEMMs' backward needs the probabilities and v).
        qkv_unfused = e * T * heads * shp.dqk + e * shp.b * sk * heads * (shp.dqk + shp.dvh)
        attn = ((0.0 if shp.mla and shp.recomputes("mla_up_proj") else qkv_unfused)
                + _attention_output_bytes(shp, impl, T * qd, flash_keeps=False))
        probs = shp.b * heads * sq * sk
        # an fp32 softmax saves its fp32 output (SoftmaxBackward) besides the 16-bit cast the value GEMM saves
        saved_probs = e + (FP32_SOFTMAX_BYTES if shp.softmax_fp32 else 0)
        core = 0.0 if core_rc else saved_probs * probs + ((MASK_BYTES + e) * probs if shp.dropout else 0.0)
    if impl == "eager" and shp.rope:
        # RoPE by torch.cat leaves q in (b, a, s, d) order, so the attention output's transpose back to
        # (b, s, a·d) is a copy the out-projection saves (besides the output SDPA saves, unless the core
        # is checkpointed); cos/sin tables are saved per layer.
        if not core_rc:
            attn += e * T * qd
        small += (2 if e == STAT_BYTES else 4) * sq * ((shp.dr or shp.d) // 2) * e
    return attn, core, small


@memoised(maxsize=8192)
def _layer(shp: LayerShape, impl: str = "fused") -> ActivationBytes:
    """Saved activations of one block per micro-batch on one rank (layer_activation_bytes' per-shape step):
    the norms' region, the attention and the MLP or MoE, under the shape's recompute mode."""
    impl = kernels(shp, impl)
    if shp.kind:  # one layer of a hybrid Mamba stack (cost_models/mamba.py)
        from .mamba import hybrid_activation_bytes  # cycle: mamba.py imports this module
        return hybrid_activation_bytes(shp, impl)
    e, h, t, r = shp.e, shp.h, shp.tp, shp.sp_div
    T = shp.tokens
    if shp.recompute == "full":
        return ActivationBytes(main=(RESIDUAL_BYTES if shp.autocast else e) * T * h / r, small=0.0)

    rc = shp.recomputes  # selective recompute by module (TrainingSpec.recompute_modules)
    if rc("op_sac"):
        return _op_sac_layer(shp)
    norm_main, norm_small = _norm_bytes(shp, T / r, impl)
    norm_outs = _norm_output_bytes(shp, impl)
    seq = (shp.norms * norm_main + (0.0 if rc("layernorm") else norm_outs)
           + (2 * MASK_BYTES * T * h / r if shp.dropout else 0.0))
    small = shp.norms * norm_small
    seq_qkv, qkv_saved, small_qkv = _qkv_bytes(shp, impl)
    attn, core, small_attn = _attention_bytes(shp, impl, qkv_saved)
    seq += seq_qkv
    small += small_qkv + small_attn
    if shp.is_moe:
        mlp, router = _moe_bytes(shp, impl)
        small += router
    else:
        mlp = 0.0 if rc("mlp") else T * _mlp_inner_bytes(shp, shp.f, impl, float8_fc2=True) / t
    return ActivationBytes(main=seq + attn + core + mlp + _lora_adapter_bytes(shp), small=small)


def _moe_bytes(shp: LayerShape, impl: str) -> tuple[float, float]:
    """(main, small) bytes a MoE layer saves per micro-batch beyond the norm output it starts from: each routed
    token-copy's expert MLP (its input, inner activations and output) and the shared expert's inner activations;
    the router's fp32 logits and its top-k choices (small). LatentMoE (``shp.lat``): the routed tensors are
    latent-wide, fc2_latent_proj saves its input (the combined latent tokens of this rank), and under fp8 / nvfp4
    fc1_latent_proj saves its quantized copy of the norm output (in 16 bits it is the router's input, kept once).
    Selective recompute drops the activation's output (``moe_act``), the shared expert (``shared_experts``) or the
    whole layer (``moe``)."""
    rc = shp.recomputes
    e, t, r, T = shp.e, shp.tp, shp.sp_div, shp.tokens
    k, xt = shp.top_k, shp.xtp
    routed = shp.routed_tokens  # T·k·etp/tp token-copies on this rank, each expert's MLP split over etp
    inner = routed * _mlp_inner_bytes(shp, shp.fe, impl) / xt
    if rc("moe_act"):  # the activation's output (fc2's saved input) is recomputed from its kept input
        inner -= routed * _gemm_input_e(shp, impl) * shp.fe / xt
    elif shp.glu_clamp and shp.mcore_experts:  # Megatron-Core's eager clamps keep fc1's raw output besides
        inner += e * routed * 2 * shp.fe / xt  # the clamped copy the fused activation saves (flops.py)
    mlp = _gemm_input_e(shp, impl) * routed * shp.xw + inner + _combine_saved_bytes(shp, routed)
    if shp.lat:
        mlp += _gemm_input_e(shp, impl) * (T / r) * shp.lat
        mlp += _gemm_input_bytes(shp, impl) if _fp8_saved(shp, impl) else 0.0
    router = STAT_BYTES * (T / r) * shp.experts + 8 * (T / r) * k
    if shp.fs and not rc("shared_experts"):  # shared expert: its inner activations (input = the router's)
        mlp += T * _mlp_inner_bytes(shp, shp.fs, impl) / t
    if rc("moe"):  # the whole MoE layer is recomputed from its input (the norm output, kept above)
        mlp, router = 0.0, 0.0
    return mlp, router


def _combine_saved_bytes(shp: LayerShape, routed: float) -> float:
    """What the weighting of the experts' outputs saves for ``routed`` token copies: the expert outputs (16-bit)
    where the combine multiplies them by the probabilities; the fp32 probabilities where the weighted SwiGLU applies
    them inside the experts instead (LayerShape.moe_weighted_act, FrameworkBehaviour.moe_probs_in_activation)."""
    return STAT_BYTES * routed if shp.moe_weighted_act else shp.e * routed * shp.xw


def _attention_output_bytes(shp: LayerShape, impl: str, n: float, flash_keeps: bool) -> float:
    """The attention output (``n`` elements), saved by the out-projection as its input and, where ``flash_keeps``
    (fused attention whose core is not recomputed), by flash attention for its own backward: one 16-bit tensor,
    or with fp8 the projection's fp8 copy besides flash's 16-bit one. Under LoRA a frozen out-projection saves
    nothing and an adapted one the 16-bit tensor flash keeps too (``_saved_input_e``). A compiled torchao float8
    out-projection (``_ao_recomputed``) rebuilds its copy from flash's tensor, or saves its float8 copy where flash
    keeps none."""
    if _ao_recomputed(shp):
        return shp.e * n if flash_keeps else _ao_copy_bytes(shp, n, n / shp.tokens)
    lin = _saved_input_e(shp, impl, ("linear_proj",))
    if lin == shp.e and flash_keeps:
        return shp.e * n  # one tensor, saved twice
    return lin * n + (shp.e * n if flash_keeps else 0.0)


def _lora_adapter_bytes(shp: LayerShape) -> float:
    """LoRA: the input of each adapter's B (T x rank, 16-bit), kept for its weight gradient, unless the target's
    module is recomputed (MLP recompute re-runs fc1's and fc2's adapters); A's input is the base's (above)."""
    mlp_rc = shp.recomputes("mlp")
    kept = sum(1 for t in shp.lora_targets if not (mlp_rc and t in ("linear_fc1", "linear_fc2")))
    return float(shp.e * shp.tokens * shp.lora_rank * kept)


def _te_cp_received_kv_bytes(shp: LayerShape) -> float:
    """K/V bytes Transformer Engine's ring context-parallel attention saves beyond the local q, k, v.

    ``AttnFuncWithCPAndKVP2P.forward`` (transformer_engine/pytorch/attention/dot_product_attention/
    context_parallel.py, TE v2.4) saves ``q``, ``kv = p2p_comm_buffers[-1]`` -- the K/V block received at the last
    ring step, a buffer of its own (``torch.cat`` of k and v, then received into ``empty_like`` copies) -- and
    the output. Megatron-Core hands it q, k, v as views of the fused QKV GEMM output; without RoPE (which makes q
    and k new tensors and the layout check copies v) and with as many K/V heads as query heads, q stays a view
    (``sbh3d`` layout: no copy), so the saved q keeps the whole QKV output alive and the received K/V block is
    memory beyond it: ``2·e·T·kv·d/tp`` per block. 0 for every other case (GQA copies q in Megatron's reshape)."""
    if not shp.te_cp_p2p or shp.rope or shp.mla or shp.kv != shp.a:
        return 0.0
    return float(2 * shp.e * shp.tokens * shp.kv * shp.d / shp.tp)


def _op_sac_lse_bytes(shp: LayerShape) -> float:
    """The fp32 logsumexp flash or memory-efficient SDPA saves beside its output (0 on the math path)."""
    return STAT_BYTES * shp.b * (shp.a // shp.tp) * (shp.s // shp.cp) if shp.flash else 0.0


def op_sac_saved_tensors(shp: LayerShape) -> list[float]:
    """Sizes (bytes) of the tensors torchtitan's per-op selective checkpointing keeps for one dense block, in
    forward order.

    torchtitan (``activation_checkpoint.mode = "selective"``, ``selective_ac_option = "op"``) wraps each
    transformer block in torch's non-reentrant checkpoint with a ``create_selective_checkpoint_contexts``
    policy: ops in ``_save_list`` -- ``aten.mm``, ``aten._scaled_dot_product_flash_attention`` /
    ``_efficient_attention``, ``_c10d_functional.reduce_scatter_tensor`` -- are MUST_SAVE, except every
    second ``aten.mm`` of the block (a per-block counter, ``meta[mm_count_key] % 2 == 0``), and every other
    op is recomputed (pytorch/torchtitan torchtitan/parallelisms/parallelize_llama.py of 2024, read_file id
    16980159914; the same policy in torchtitan/distributed/activation_checkpoint.py, read_file id
    21885465056). So a block keeps: its input (the checkpoint's argument), the outputs of matmuls 1, 3, 5, ...
    in forward order -- wq, wk, wv, wo, then w1, w3, w2 (SwiGLU) or fc1, fc2 (GeLU): q, v, w1's output and
    w2's output (the row-parallel output before its reduction: ``T·h`` on every TP rank) --, the attention
    kernel's output and fp32 logsumexp (flash or memory-efficient SDPA only: the math path is recomputed),
    and with sequence parallelism the two reduce-scatter outputs. torchao's float8 linears count the same:
    their ``torch.mm`` on Float8Tensor arguments reaches the checkpoint's dispatch mode as ``aten.mm`` (a mode
    sees an op before a tensor subclass does) and the subclass lowers it to ``_scaled_mm`` underneath, so the
    bf16 outputs of matmuls 1, 3, 5, ... are saved as with bf16 linears. The 2024 list's ``aten.abs`` /
    ``aten.max`` (float8 amax) outputs are left out: torch.compile, which every float8 run uses, fuses the
    abs into its max reduction.

    Under torch.compile (``shp.compiled``) AOTAutograd's ``min_cut_rematerialization_partition`` saves a
    MUST_SAVE output only where the backward graph reads it: the block's last matmul (SwiGLU's w2, number 7)
    feeds only the residual add, whose backward reads nothing, so it is not kept; with sequence parallelism the
    MLP's reduce-scatter output (the block's last op before that add) is dropped for the same reason, while the
    attention's is kept (the second norm's backward reads the residual sum recomputed from it); every other kept
    tensor is read (q before RoPE, which the backward recomputes). Measured against torch's partitioner in
    tests/test_compile_oracle.py, under sequence parallelism on a fake process group at TP 2, 4 and 8.
    """
    e, h, t, r, T = shp.e, shp.h, shp.tp, shp.sp_div, shp.tokens
    heads = shp.a // t
    widths = [shp.a * shp.d / t, shp.kv * shp.d / t, shp.kv * shp.d / t, h]
    widths += [shp.f / t, shp.f / t, h] if shp.gated else [shp.f / t, h]
    kept = widths[0::2]  # matmuls 1, 3, 5, ... of the block
    if shp.compiled and len(widths) % 2:
        kept = kept[:-1]  # under torch.compile the last matmul's output (no backward op reads it) is not kept
    rs = [e * T * h / t] if shp.sp and t > 1 else []
    last_rs = [] if shp.compiled else rs  # compiled: the MLP's reduce-scatter output feeds only the residual add
    sdpa = [e * T * heads * shp.dvh, _op_sac_lse_bytes(shp)] if shp.flash else []
    return [e * T * h / r, e * T * kept[0], e * T * kept[1], *sdpa, *rs, *(e * T * w for w in kept[2:]), *last_rs]


def _op_sac_layer(shp: LayerShape) -> ActivationBytes:
    """Bytes torchtitan's per-op selective checkpointing keeps for one dense block (``op_sac_saved_tensors``):
    the logsumexp as small, the rest as main."""
    small = _op_sac_lse_bytes(shp)
    return ActivationBytes(main=sum(op_sac_saved_tensors(shp)) - small, small=small)


def layer_activation_bytes(scenario: Scenario | LayerShape, impl: str = "fused") -> ActivationBytes:
    """Saved activations of one block per micro-batch on one rank (Scenario or LayerShape).

    ``impl="fused"``: Megatron/TE-style kernels (fused norms, fused SwiGLU); ``"eager"``: plain torch
    autograd as the executor's model (trainsim/kernels/torch_model.py) runs it.
    """
    _check_impl(impl)
    shp = as_layer_shape(scenario)
    if shp.kind == "mix":  # a hybrid stack: its mean layer, exact for the whole stack
        if isinstance(scenario, LayerShape):
            raise ValueError("a hybrid stack's activations are costed from its Scenario (shapes.block_kinds)")
        kinds = [(layer_activation_bytes(scn, impl), n) for scn, n in block_kinds(scenario)]
        n_all = sum(n for _, n in kinds)
        return ActivationBytes(main=sum(a.main * n for a, n in kinds) / n_all,
                               small=sum(a.small * n for a, n in kinds) / n_all)
    return _layer(shp, impl)


@memoised(maxsize=8192)
def _no_recompute(shp: LayerShape, impl: str) -> ActivationBytes:
    return _layer(replace(shp, recompute="none"), impl)


def recompute_working_bytes(scenario: Scenario | LayerShape, impl: str = "fused") -> float:
    """Transient bytes while one block is recomputed and back-propagated (on top of the saved ones).

    full: that block's whole activation set lives during its backward; selective: the recomputed attention
    core of one block (the unfused softmax terms, or flash's logsumexp); none: 0.
    """
    shp = as_layer_shape(scenario)
    if shp.recompute == "full":
        return _no_recompute(shp, impl).total
    if shp.recompute == "selective":
        return _no_recompute(shp, impl).total - _layer(shp, impl).total
    return 0.0


def embedding_activation_bytes(scenario: Scenario | LayerShape) -> float:
    """First stage, per micro-batch: token ids (and position ids, int64) for the embedding backward, + dropout mask.

    With ``ModelSpec.embedding_norm`` (BLOOM) the norm saves its input, the embedding's 16-bit output (the
    sequence-parallel shard), and an fp32 mean and inverse deviation per token (apex/Megatron fused layer
    norm ``save_for_backward(input, mean, invvar)``); its output is the dropout's input, which dropout does not
    keep. The embedding is not recomputed (Megatron-DeepSpeed checkpoints transformer layers only).
    """
    shp = as_layer_shape(scenario)
    T = shp.tokens
    mask = MASK_BYTES * T * shp.h / shp.sp_div if shp.dropout else 0.0
    model = getattr(scenario, "model", None)
    learned = getattr(model, "position_embedding", "rope") == "learned"
    norm = (shp.e * T * shp.h + 8.0 * T) / shp.sp_div if getattr(model, "embedding_norm", False) else 0.0
    return 8.0 * T + (8.0 * shp.s / shp.cp if learned else 0.0) + mask + norm


def pipeline_output_bytes(scenario: Scenario | LayerShape) -> float:
    """One model chunk's output activation for one micro-batch (hidden states of its tokens, sequence-parallel
    shard), which frameworks with ``behaviour(...).pipeline_output_kept`` hold until that micro-batch's backward."""
    shp = as_layer_shape(scenario)
    return float((RESIDUAL_BYTES if shp.autocast else shp.e) * shp.tokens * shp.h / shp.sp_div)


def head_activation_bytes(scenario: Scenario | LayerShape, impl: str = "fused") -> float:
    """Last stage, per micro-batch: final norm input (+ stats) and output, what the loss saves, targets.

    The output layer saves its (SP-sharded) input. The loss saves, per logit of this rank's vocabulary
    shard: Megatron's vocab-parallel cross-entropy its fp32 softmax ``4·T·V/tp`` (Korthikanti's ``4·sbv/t``
    term; the in-place ops reuse the fp32 copy of the logits); a fused kernel (flash-attn's xentropy,
    ``framework_behaviour.behaviour(...).fused_cross_entropy``) the 16-bit logits themselves and a logsumexp per
    token. Plus the integer targets ``8·T``.
    """
    _check_impl(impl)
    shp = as_layer_shape(scenario)
    impl = kernels(shp, impl)
    T, r = shp.tokens, shp.sp_div
    norm_main, norm_small = _norm_bytes(shp, T / r, impl)
    v_local = -(-shp.vocab // shp.tp)
    loss = (shp.e * T * v_local + STAT_BYTES * T) if shp.fused_ce else STAT_BYTES * T * v_local
    # OPT's project_out saves the norm output and the output layer its word_embed_proj_dim-wide input; Gemma 2's
    # logit soft-capping saves its tanh output for the backward.
    proj = shp.e * T * shp.proj if shp.proj else 0.0
    cap = shp.e * T * v_local if shp.final_softcap else 0.0
    # The output layer stays 16-bit under fp8 (flops.py, the logits GEMM), so its saved input does too.
    return norm_main + norm_small + _gemm_input_bytes(shp, impl, fp8_input=False) + proj + cap + loss + 8.0 * T


def mtp_activation_bytes(scenario: Scenario, impl: str = "fused") -> float:
    """One multi-token-prediction module, per micro-batch: its block (as the model's block), its pass through
    the output head, the two norms' inputs and the projection's input (the concatenated 2h), token ids."""
    _check_impl(impl)
    shp = as_layer_shape(scenario)
    impl = kernels(shp, impl)
    T, r = shp.tokens, shp.sp_div
    norms = 2 * sum(_norm_bytes(shp, T / r, impl))
    proj_in = 2 * _gemm_input_e(shp, impl) * T * shp.h / r
    if shp.kind:  # a hybrid stack's depth: its mtp_pattern's layers (shapes.mtp_kinds)
        block = sum(n * layer_activation_bytes(scn, impl).total for scn, n in mtp_kinds(scenario))
    else:
        block = _layer(shp, impl).total
    return block + head_activation_bytes(scenario, impl) + norms + proj_in + 8.0 * T


# torch's eager loss on fp32 logits, bytes per logit beside the saved fp32 log-softmax at its peak, the backward:
# nll_loss's zero-filled fp32 input gradient and log_softmax's fp32 backward output (PyTorch
# tools/autograd/derivatives.yaml: log_softmax saves its ``result`` and ``_log_softmax_backward_data`` returns a
# new tensor; nll_loss_backward allocates ``zeros_like(self)``), the 16-bit logits already freed (torchtitan
# ``del pred`` before ``loss.backward()``). The forward holds the 16-bit logits and their fp32 copy: ``e + 4``.
EAGER_CE_BACKWARD_BYTES = 8
# The same loss over vocabulary shards (tp > 1: torch.distributed.tensor.parallel.loss_parallel, torchtitan's
# default with TP): its fused backward ``_nll_loss_and_log_softmax_backward`` holds ``zeros_like(x)``, then
# ``grad_input + torch.exp(x)`` and that times the loss gradient -- three fp32 tensors at once (read_file id
# 60317242654).
LOSS_PARALLEL_BACKWARD_BYTES = 12
# Its forward, DTensor's ``_log_softmax`` (torch/distributed/tensor/parallel/loss.py, find_string id 1893107656),
# holds the fp32 copy ``x``, ``shifted = x - x_max`` and ``torch.exp(shifted)`` at once before the saved ``result``
# exists: three fp32 tensors, beside the caller's 16-bit logits (torchtitan's ``pred``, deleted only after the
# loss; ``eager_fp32_kept`` needs whole logits, tp = 1).
LOSS_PARALLEL_FORWARD_BYTES = 12
# With the fp32 logits kept by the caller through the backward (cross_entropy "eager_fp32_kept": torchtitan's
# model of early 2024 returns ``self.output(h).float()`` and its loop holds ``pred`` across ``loss.backward()``,
# pytorch/torchtitan torchtrain/models/llama/model.py and train.py @ 83c879f18, PR #165), the backward's peak
# holds them too: 4 more bytes per logit (torch's MemTracker: 16 per logit in all, tests/test_memory_loss.py).
KEPT_FP32_LOGITS_BYTES = 4


def logits_workspace_bytes(scenario: Scenario | LayerShape) -> float:
    """Transient bytes on the last stage while the loss runs, beyond what it saves.

    Megatron: the 16-bit logits live while ``.float()`` copies them (the fp32 copy is the saved softmax, which
    the in-place ops reuse), and in backward autograd casts the fp32 gradient back to a new 16-bit tensor;
    fused kernel: the 16-bit logit gradient is allocated while the saved logits are alive. Either way
    ``e·T·V/tp``. torch's eager ``F.cross_entropy`` on fp32 logits (framework torch, un-fused): the larger of its
    forward (``e + 4`` per logit; ``LOSS_PARALLEL_FORWARD_BYTES`` beside the ``e`` of the 16-bit logits on
    vocabulary shards) and backward (``EAGER_CE_BACKWARD_BYTES``, ``LOSS_PARALLEL_BACKWARD_BYTES`` on vocabulary
    shards, plus ``KEPT_FP32_LOGITS_BYTES`` where the caller keeps the fp32 logits) transients.
    """
    shp = as_layer_shape(scenario)
    v_local = -(-shp.vocab // shp.tp)
    backward = LOSS_PARALLEL_BACKWARD_BYTES if shp.tp > 1 else EAGER_CE_BACKWARD_BYTES
    forward = shp.e + 4
    if shp.tp > 1:
        forward = LOSS_PARALLEL_FORWARD_BYTES + shp.e
    if shp.ce_logits_kept:
        backward += KEPT_FP32_LOGITS_BYTES
    per_logit = max(forward, backward) if shp.eager_ce else shp.e
    return float(per_logit * shp.tokens * v_local)


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
