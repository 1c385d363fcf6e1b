"""The parameter tensors one rank holds: the one list every per-tensor cost reads. Pure.

Each entry is one ``nn.Parameter`` of the rank's model chunks, in registration (forward) order, with its
elements on this rank (after the tensor-, expert- and vocab-parallel splits), whether TP splits it, whether it is
an expert tensor (held by the expert-parallel rank, reduced over the expert-data-parallel group) and its kind.
All parameters are held in the training dtype (``TrainingSpec.param_bytes``); no entry carries its own.

Two module styles build the same model:

* ``torch`` -- the executor's model (trainsim/kernels/torch_model.py ``Block``, ``Embeddings``, ``Chunk``) and the
  Hugging Face style DeepSpeed and FSDP runs train: ``nn.Linear`` q, k, v, o, fc1, (gate), fc2, each with a bias
  where the spec has one; a norm's weight (and LayerNorm's bias); a MoE layer's router and per expert its two or
  three projections.
* ``fused`` -- Megatron (Megatron-Core ``TransformerLayer`` with ``SelfAttention``: ``linear_qkv`` (q, k, v in one
  ColumnParallelLinear) and ``linear_proj``; ``MLP``: ``linear_fc1`` (gate and up in one tensor when gated) and
  ``linear_fc2``; ``MoELayer``: ``TopKRouter.weight`` and per local expert ``linear_fc1`` / ``linear_fc2``
  (``TEGroupedMLP``'s ``weight{i}``); ``MLASelfAttention``: q down/up (or one q projection), kv down/up,
  their latents' norms, ``linear_proj``; Megatron-LM's legacy ``ParallelAttention.query_key_value`` and
  ``ParallelMLP.dense_h_to_4h`` fuse the same way). Transformer Engine keeps a fused norm's weight inside the
  next linear (``layer_norm_weight``), still one tensor of its own.

Row-parallel biases (attention output, fc2) and norms are replicated over TP; the word embedding and output
layer are vocab-parallel. The first virtual stage holds the embedding (+ learned positions, BLOOM's embedding
norm, OPT's project_in), the last the final norm (OPT's project_out) and the output layer -- absent only when the
embedding is tied and one module holds both (pp * vpp == 1: torch_model.Chunk ties them; Megatron keeps a copy on
the last stage) -- and each multi-token-prediction module (a block, ``eh_proj`` 2h->h, three norms; a word
embedding copy off stage 0), as cost_models/memory.py counts them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainsim.specs.framework_behaviour import behaviour
from trainsim.specs.lora import LORA_TARGETS, adapter_dims
from trainsim.specs.memo import IdentityMemo

if TYPE_CHECKING:
    from collections.abc import Sequence

    from trainsim.specs import ModelSpec, Scenario


@dataclass(frozen=True)
class ParamTensor:
    """One parameter tensor on one rank: ``elems`` its elements there; ``kind`` one of weight, bias, norm,
    embedding, position, head, router; ``tp_sharded`` split over TP (or the vocab); ``expert`` an EP-local
    expert's; ``shape`` a matrix's (rows, columns) on this rank (a linear's (out, in) after its TP split), None
    for a vector; ``split_dim`` the dimension of ``shape`` TP splits (0 column-parallel, 1 row-parallel), None
    where it is whole."""

    name: str
    elems: float
    kind: str = "weight"
    tp_sharded: bool = False
    expert: bool = False
    shape: tuple[float, float] | None = None
    split_dim: int | None = None


def module_style(framework: str) -> str:
    """'fused' for the Megatron family (Megatron-LM, Megatron-Core, Megatron-DeepSpeed's GPT) and for
    ``deepspeed-2021``, whose ZeRO-3 GPT runs train Megatron's model, else 'torch' (FrameworkBehaviour.module_style
    cites both)."""
    return behaviour(framework).module_style


def _norm(name: str, model, width: int | None = None) -> list[ParamTensor]:
    """A norm's weight, and LayerNorm's bias (nn.LayerNorm / TE LayerNorm; RMSNorm has a weight only)."""
    w = width or model.hidden
    out = [ParamTensor(f"{name}.weight", float(w), "norm")]
    if model.norm == "layernorm" and width is None:
        out.append(ParamTensor(f"{name}.bias", float(w), "norm"))
    return out


def _linear(name: str, fan_in: float, fan_out: float, bias: bool, split: int, column: bool,
            expert: bool = False) -> list[ParamTensor]:
    """A linear layer split ``split`` ways: column-parallel splits its outputs (and bias), row-parallel its inputs
    (its bias replicated)."""
    shape = (fan_out / split, float(fan_in)) if column else (float(fan_out), fan_in / split)
    w = ParamTensor(f"{name}.weight", fan_in * fan_out / split, "weight", split > 1, expert, shape,
                    (0 if column else 1) if split > 1 else None)
    if not bias:
        return [w]
    b = ParamTensor(f"{name}.bias", fan_out / (split if column else 1), "bias", column and split > 1, expert)
    return [w, b]


def _attention(model, tp: int, style: str, p: str) -> list[ParamTensor]:
    """The attention's tensors (and QK-norm weights) of one block."""
    h, d = model.hidden, model.dhead
    if model.is_mla:
        a, qk, v = model.num_heads, model.qk_head_dim, model.v_dim
        ql, kvl, dr = model.q_lora_rank, model.kv_lora_rank, model.qk_rope_head_dim or 0
        q = ([*_linear(f"{p}.q_down", h, ql, False, 1, True), *_norm(f"{p}.q_norm", model, ql),
              *_linear(f"{p}.q_up", ql, a * qk, False, tp, True)] if ql else _linear(f"{p}.q", h, a * qk, False, tp, True))
        kv = [*_linear(f"{p}.kv_down", h, kvl + dr, False, 1, True), *_norm(f"{p}.kv_norm", model, kvl),
              *_linear(f"{p}.kv_up", kvl, a * (d + v), False, tp, True)]
        return [*q, *kv, *_linear(f"{p}.proj", a * v, h, False, tp, False)]
    q, kv = model.num_heads * d, model.kv_heads * d
    qkv_bias = model.bias if model.qkv_bias is None else model.qkv_bias
    if style == "fused":
        out = _linear(f"{p}.linear_qkv", h, q + 2 * kv, qkv_bias, tp, True)
    else:
        out = [*_linear(f"{p}.q", h, q, qkv_bias, tp, True), *_linear(f"{p}.k", h, kv, qkv_bias, tp, True),
               *_linear(f"{p}.v", h, kv, qkv_bias, tp, True)]
    if model.qk_norm:
        out += [ParamTensor(f"{p}.q_norm.weight", float(d), "norm"), ParamTensor(f"{p}.k_norm.weight", float(d), "norm")]
    if model.attn_sinks:  # gpt-oss: one learned logit per head (Megatron-Core core_attention.softmax_offset)
        out.append(ParamTensor(f"{p}.sinks", model.num_heads / tp, "weight", tp > 1))
    return out + _linear(f"{p}.o", q, h, model.bias, tp, False)


def _mlp(model, ffn: int, split: int, style: str, p: str, expert: bool = False) -> list[ParamTensor]:
    """An MLP (or one expert, at the model's expert_width) of hidden width ``ffn`` split ``split`` ways: fc1,
    (gate), fc2."""
    h, gated = model.expert_width if expert else model.hidden, model.gated_mlp
    if style == "fused" or not gated:
        up = _linear(f"{p}.fc1", h, (2 if gated else 1) * ffn, model.bias, split, True, expert)
    else:
        up = [*_linear(f"{p}.fc1", h, ffn, model.bias, split, True, expert),
              *_linear(f"{p}.gate", h, ffn, model.bias, split, True, expert)]
    return up + _linear(f"{p}.fc2", ffn, h, model.bias, split, False, expert)


def _mamba(model, tp: int, p: str) -> list[ParamTensor]:
    """A Mamba-2 mixer's tensors (Megatron-Core MambaMixer, registration order): in_proj (z, x, B, C, dt), the conv1d
    weight and bias over x, B, C, dt_bias, A_log, D, the group RMSNorm weight and out_proj -- all split over TP."""
    h, di, heads = model.hidden, model.mamba_inner, model.mamba_nheads
    conv = model.mamba_conv_channels

    def split(name: str, elems: float, kind: str) -> ParamTensor:
        return ParamTensor(f"{p}.{name}", elems / tp, kind, tp > 1)
    return [*_linear(f"{p}.in_proj", h, model.mamba_in_proj, False, tp, True),
            split("conv1d_weight", conv * model.mamba_conv_kernel, "weight"), split("conv1d_bias", conv, "bias"),
            split("dt_bias", heads, "bias"), split("A_log", heads, "weight"), split("D", heads, "weight"),
            split("norm.weight", di, "norm"), *_linear(f"{p}.out_proj", di, h, False, tp, False)]


def hybrid_layer_tensors(model: ModelSpec, kind: str, tp: int, ep: int, etp: int, style: str,
                         p: str) -> list[ParamTensor]:
    """One layer of a hybrid stack (ModelSpec.hybrid_pattern): its pre-norm (TE keeps a fused one inside the next
    linear, still a tensor of its own), then the Mamba mixer, the attention, the MLP or the MoE layer."""
    out = _norm(f"{p}.norm", model)
    if kind == "M":
        return out + _mamba(model, tp, f"{p}.mixer")
    if kind == "*":
        return out + _attention(model, tp, style, f"{p}.attn")
    if kind == "-":
        return out + _mlp(model, model.ffn, tp, style, f"{p}.mlp")
    moe = block_tensors(model.model_copy(update={"hybrid_pattern": None, "block_norms": 2, "num_layers": 1}),
                        tp, ep, etp, style, p)
    return out + moe[moe.index(next(t for t in moe if t.kind == "router")):]


def block_tensors(model: ModelSpec, tp: int, ep: int, etp: int, style: str,
                  prefix: str = "layer") -> list[ParamTensor]:
    """One block's tensors on one rank (a MoE block for a MoE model; ``model.dense_block()`` for its dense ones):
    the first of its ``block_norms`` norms before the attention, the others before the MLP."""
    norms = [_norm(f"{prefix}.norm{i}", model) for i in range(model.block_norms)]
    out = [t for n in norms[:1] for t in n] + _attention(model, tp, style, f"{prefix}.attn")
    out += [t for n in norms[1:] for t in n]
    if not model.is_moe:
        return out + _mlp(model, model.ffn, tp, style, f"{prefix}.mlp")
    out.append(ParamTensor(f"{prefix}.router.weight", float(model.hidden * model.num_experts), "router",
                           shape=(float(model.num_experts), float(model.hidden))))
    if model.router_bias:
        out.append(ParamTensor(f"{prefix}.router.bias", float(model.num_experts), "router"))
    if model.shared_expert_ffn:
        out += _mlp(model, model.shared_expert_ffn, tp, style, f"{prefix}.shared_expert")
    if model.moe_latent_size:  # LatentMoE's fc1_latent_proj / fc2_latent_proj, duplicated over TP
        out += [*_linear(f"{prefix}.fc1_latent_proj", model.hidden, model.moe_latent_size, False, 1, True),
                *_linear(f"{prefix}.fc2_latent_proj", model.moe_latent_size, model.hidden, False, 1, False)]
    for e in range(model.num_experts // ep):
        out += _mlp(model, model.expert_ffn, etp, style, f"{prefix}.experts.{e}", expert=True)
    return out


def embedding_tensors(model: ModelSpec, tp: int) -> list[ParamTensor]:
    """The first virtual stage's: vocab-parallel word embedding, learned positions, embedding norm, project_in."""
    h, e = model.hidden, model.embed_dim
    out = [ParamTensor("embedding.word.weight", model.vocab_size * e / tp, "embedding", tp > 1)]
    if model.position_embedding == "learned":
        out.append(ParamTensor("embedding.position.weight", float(model.max_seq_len * h), "position",
                               shape=(float(model.max_seq_len), float(h))))
    if model.embedding_norm:
        out += _norm("embedding.norm", model)
    if model.embed_proj_dim:
        out.append(ParamTensor("embedding.project_in.weight", float(e * h), "weight", shape=(float(h), float(e))))
    return out


def head_tensors(model: ModelSpec, tp: int, with_output: bool) -> list[ParamTensor]:
    """The last virtual stage's: final norm, project_out, the vocab-parallel output layer (``with_output``)."""
    h, e = model.hidden, model.embed_dim
    out = _norm("final_norm", model)
    if model.embed_proj_dim:
        out.append(ParamTensor("project_out.weight", float(e * h), "weight", shape=(float(e), float(h))))
    if with_output:
        out.append(ParamTensor("output_layer.weight", model.vocab_size * e / tp, "head", tp > 1))
    return out


def mtp_tensors(model: ModelSpec, tp: int, ep: int, etp: int, style: str,
                embedding_copy: bool) -> list[ParamTensor]:
    """Multi-token-prediction modules (memory.mtp_params_per_rank): per module enorm, hnorm, eh_proj (2h->h,
    column-parallel), a block like the model's, its final norm; a word-embedding copy off stage 0."""
    h, out = model.hidden, []
    if embedding_copy:
        out.append(ParamTensor("mtp.embedding.word.weight", model.vocab_size * model.embed_dim / tp, "embedding", tp > 1))
    for k in range(1 if model.mtp_shared else model.mtp_layers):  # shared depths: one module's weights
        p = f"mtp.{k}"
        if model.is_hybrid:  # the layers of mtp_pattern
            block = [t for i, c in enumerate(model.mtp_pattern)
                     for t in hybrid_layer_tensors(model, c, tp, ep, etp, style, f"{p}.layers.{i}")]
        else:
            block = block_tensors(model, tp, ep, etp, style, f"{p}.layer")
        out += [*_norm(f"{p}.enorm", model), *_norm(f"{p}.hnorm", model),
                *_linear(f"{p}.eh_proj", 2 * h, h, False, tp, True), *block, *_norm(f"{p}.final_norm", model)]
    return out


def blocks_among(tensors: Sequence[ParamTensor]) -> tuple[ParamTensor, ...]:
    """The transformer blocks' tensors among ``tensors`` (chunk_tensors names them ``layers.<layer>.``): not the
    root's embedding, final norm, output layer or MTP module."""
    return tuple(t for t in tensors if t.name.startswith("layers."))


def layer_tensors(tensors: Sequence[ParamTensor], layer: int) -> tuple[ParamTensor, ...]:
    """The tensors of model layer ``layer`` among ``tensors`` (chunk_tensors names them ``layers.<layer>.``)."""
    prefix = f"layers.{layer}."
    return tuple(t for t in tensors if t.name.startswith(prefix))


def _named(template: list[ParamTensor], prefix: str) -> list[ParamTensor]:
    """``template`` (a block's tensors named from its root) under ``prefix``."""
    return [ParamTensor(f"{prefix}{t.name}", t.elems, t.kind, t.tp_sharded, t.expert, t.shape, t.split_dim)
            for t in template]


@dataclass(frozen=True)
class ChunkKey:
    """What one model chunk's tensor list depends on besides the model: the splits, the module style, its global
    layers ``start`` .. ``start + layers`` (the first ``dense`` of them dense blocks), whether it holds the
    embedding and the head (with the output layer, with an MTP word-embedding copy). Scenarios that differ only
    in batch, recompute, schedule or ZeRO share it, so the planner builds each chunk's list once per model."""

    tp: int
    ep: int
    etp: int
    style: str
    start: int
    layers: int
    dense: int
    first: bool
    last: bool
    with_output: bool
    mtp_embedding_copy: bool
    lora_rank: int = 0            # TrainingSpec.lora_rank: the chunk's trainable tensors are the adapters
    lora_targets: tuple[str, ...] = ()


def chunk_key(scenario: Scenario, vstage: int, style: str | None = None) -> ChunkKey:
    """The ChunkKey of ``scenario``'s virtual stage ``vstage``; ``style`` defaults to the framework's."""
    m, lay = scenario.model, scenario.layout
    last = lay.pp * lay.vpp - 1
    n = scenario.stage_layers[vstage]
    return ChunkKey(lay.tp, lay.ep, scenario.expert_tp, style or module_style(scenario.training.framework),
                    sum(scenario.stage_layers[:vstage]), n, scenario.dense_layers_in(vstage) if m.is_moe else n,
                    vstage == 0, vstage == last, not (m.tie_embeddings and last == 0),
                    vstage == last and bool(m.mtp_layers) and scenario.loss_stage != 0,
                    scenario.training.lora_rank, tuple(scenario.training.lora_target_modules)
                    if scenario.training.lora_rank else ())


def lora_block_tensors(model: ModelSpec, tp: int, rank: int, targets: tuple[str, ...]) -> list[ParamTensor]:
    """One block's LoRA adapter weights on one TP rank, in Megatron-Core's registration order of their bases
    (linear_qkv, linear_proj, linear_fc1, linear_fc2): rank x d_in / tp for A, rank x d_out / tp for B."""
    out = []
    for t in (x for x in LORA_TARGETS if x in targets):
        d_in, d_out = adapter_dims(model, t)
        out += [ParamTensor(f".{t}.adapter.linear_in.weight", rank * d_in / tp, "weight", tp > 1),
                ParamTensor(f".{t}.adapter.linear_out.weight", rank * d_out / tp, "weight", tp > 1)]
    return out


def _key_tensors(m, k: ChunkKey) -> tuple[ParamTensor, ...]:
    if k.lora_rank:
        template = lora_block_tensors(m, k.tp, k.lora_rank, k.lora_targets)
        return tuple(t for i in range(k.layers) for t in _named(template, f"layers.{k.start + i}"))
    out = embedding_tensors(m, k.tp) if k.first else []
    if m.is_hybrid:  # each layer of its kind (ModelSpec.hybrid_pattern)
        templates = {c: hybrid_layer_tensors(m, c, k.tp, k.ep, k.etp, k.style, "") for c in m.hybrid_counts()}
        for i in range(k.layers):
            out += _named(templates[m.hybrid_pattern[k.start + i]], f"layers.{k.start + i}")
    else:
        kinds = {"dense": m.dense_block() if m.is_moe and k.dense else m, "main": m}
        templates = {name: block_tensors(model, k.tp, k.ep, k.etp, k.style, "") for name, model in kinds.items()}
        for i in range(k.layers):
            out += _named(templates["dense" if i < k.dense else "main"], f"layers.{k.start + i}")
    if k.last:
        out += head_tensors(m, k.tp, with_output=k.with_output)
        if m.mtp_layers:
            out += mtp_tensors(m, k.tp, k.ep, k.etp, k.style, embedding_copy=k.mtp_embedding_copy)
    return tuple(out)


_KEY_TENSORS = IdentityMemo(_key_tensors)


def key_tensors(model: ModelSpec, key: ChunkKey) -> tuple[ParamTensor, ...]:
    """The tensors of the chunk ``key`` describes of ``model``, in registration order. Memoised per model object
    (specs/memo.py): the same tuple for every scenario of the model with that key."""
    return _KEY_TENSORS(model, key)


def _chunk_tensors(scenario, vstage: int, style: str) -> tuple[ParamTensor, ...]:
    return key_tensors(scenario.model, chunk_key(scenario, vstage, style))


_CHUNK_TENSORS = IdentityMemo(_chunk_tensors)


def chunk_tensors(scenario: Scenario, vstage: int, style: str | None = None) -> tuple[ParamTensor, ...]:
    """The tensors one rank holds of virtual stage ``vstage`` (its model chunk), in registration order; ``style``
    defaults to the scenario's framework's (module_style). Memoised per Scenario object and per model and
    ChunkKey (specs/memo.py)."""
    return _CHUNK_TENSORS(scenario, vstage, style or module_style(scenario.training.framework))


def rank_keys(scenario: Scenario, stage: int, style: str | None = None) -> tuple[ChunkKey, ...]:
    """The ChunkKeys of pipeline stage ``stage``'s chunks, in chunk order."""
    return tuple(chunk_key(scenario, scenario.virtual_stage(stage, c), style) for c in range(scenario.layout.vpp))


def _keys_tensors(model, keys: tuple[ChunkKey, ...]) -> tuple[ParamTensor, ...]:
    return tuple(t for k in keys for t in key_tensors(model, k))


_KEYS_TENSORS = IdentityMemo(_keys_tensors)


def rank_tensors(scenario: Scenario, stage: int, style: str | None = None) -> tuple[ParamTensor, ...]:
    """The tensors one rank of pipeline stage ``stage`` holds: its chunks' (chunk_tensors), in chunk order.
    Memoised per model and ChunkKeys."""
    return _KEYS_TENSORS(scenario.model, rank_keys(scenario, stage, style))


def rank_linear_weight_elems(scenario: Scenario, stage: int) -> float:
    """Elements of the linear weights (kind "weight": no norms, biases, embedding or output layer) one rank of
    pipeline ``stage`` holds: what Transformer Engine keeps quantized copies of under fp8 and NVFP4."""
    return float(sum(p.elems for p in rank_tensors(scenario, stage) if p.kind == "weight"))
