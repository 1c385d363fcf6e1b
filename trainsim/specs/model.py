"""ModelSpec: the architecture of a decoder-only transformer (GPT, Llama, Mixtral, DeepSeek, Gemma, OPT style) or of a
hybrid Mamba-2 / attention stack (Nemotron-H, Nemotron 3)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from .errors import SpecError
from .spec_config import MAX_NAME_CHARS, SPEC_CONFIG


def mamba_conv_channels(inner: int, groups: int, state: int) -> int:
    """Channels of a Mamba-2 mixer's depthwise conv1d over (x, B, C) (Megatron-Core MambaMixer,
    megatron/core/ssm/mamba_mixer.py ``conv_dim``): d_inner + 2·G·N for G groups of state size N."""
    return inner + 2 * groups * state


def mamba_in_proj_width(inner: int, groups: int, state: int, heads: int) -> int:
    """Output width of a Mamba-2 mixer's in_proj h -> (z, x, B, C, dt) (Megatron-Core MambaMixer,
    megatron/core/ssm/mamba_mixer.py): z (d_inner), the conv channels (x, B, C) and dt (H) -- 2·d_inner + 2·G·N + H
    for d_inner = H·P."""
    return inner + mamba_conv_channels(inner, groups, state) + heads


MAMBA_FIELDS = ("mamba_state_dim", "mamba_groups", "mamba_head_dim", "mamba_heads", "mamba_expand",
                "mamba_conv_kernel", "mamba_chunk_size")


class ModelSpec(BaseModel):
    """A decoder-only transformer. Dense unless ``num_experts > 1``: then every block but the first
    ``first_dense_layers`` has a MoE MLP (routed experts, plus an always-active shared expert when
    ``shared_expert_ffn`` is set). Attention is multi-head / grouped-query, or DeepSeek's multi-head latent
    attention (MLA) when ``kv_lora_rank`` is set. ``block_norms``, ``qk_norm``, ``sliding_window`` /
    ``global_every``, the soft-caps and ``embed_proj_dim`` describe the Gemma, Qwen3, Falcon, Mistral and OPT blocks;
    ``attn_sinks``, ``router_bias`` and ``swiglu_limit`` gpt-oss's (specs/hf_config.py maps each accepted Hugging
    Face architecture onto them). With ``hybrid_pattern`` the layers are Megatron-Core's hybrid stack instead: each
    a Mamba-2 mixer, an attention, a dense-MLP or a MoE sub-layer with its own pre-norm (the ``mamba_*`` dims;
    ``mtp_pattern`` for its MTP depths)."""

    model_config = SPEC_CONFIG

    name: str = Field(default="custom", max_length=MAX_NAME_CHARS,
                      description=f"the model's name in outputs, at most {MAX_NAME_CHARS} characters")
    num_layers: int = Field(gt=0, le=10_000)
    hidden: int = Field(gt=0, le=1_000_000)
    num_heads: int = Field(gt=0, le=100_000)
    num_kv_heads: int | None = Field(default=None, gt=0, le=100_000)
    head_dim: int | None = Field(default=None, gt=0, le=100_000,
                                 description="dims per attention head (MLA: the no-RoPE q/k dims); none = hidden / "
                                             "num_heads; even with position_embedding rope, which rotates pairs of "
                                             "dims")
    ffn_hidden: int | None = Field(default=None, gt=0, le=10_000_000)
    vocab_size: int = Field(gt=0, le=100_000_000)
    activation: Literal["gelu", "swiglu", "geglu"] = Field(
        default="gelu", description="MLP: gelu = two matrices (fc1, fc2; GeLU or ReLU between), swiglu / geglu = gated "
                                    "(gate, up, down; SiLU or GeLU on the gate: Llama / Gemma)")
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    position_embedding: Literal["learned", "rope", "none"] = Field(
        default="learned", description="learned absolute positions, rotary (RoPE) on q and k, or none (Nemotron-H's "
                                       "attention layers: Megatron-Bridge HybridModelProvider position_embedding_type)")
    max_seq_len: int = Field(default=2048, gt=0, le=100_000_000)
    bias: bool = True
    qkv_bias: bool | None = Field(default=None, description="biases on q, k, v only (Qwen2); None = same as bias")
    tie_embeddings: bool = True
    block_norms: Literal[1, 2, 4] = Field(
        default=2,
        description="norm layers per block: 2 (before attention and before the MLP), 1 (Falcon-7B's parallel "
                    "attention/MLP reading one input norm), 4 (Gemma 2/3: a norm before and after each sub-layer)")
    embedding_norm: bool = Field(
        default=False, description="a norm right after the token embedding (BLOOM's word_embeddings_layernorm; "
                                   "Megatron-DeepSpeed --embed-layernorm): its parameters and saved input on the "
                                   "first stage")
    qk_norm: bool = Field(default=False, description="RMSNorm of head_dim on every query and key head (Qwen3, Gemma 3)")
    sliding_window: int | None = Field(
        default=None, gt=0, le=100_000_000,
        description="local attention: each query attends to the last sliding_window keys (Mistral, Phi-3, Gemma 2/3)")
    global_every: int | None = Field(
        default=None, gt=0, le=10_000,
        description="with sliding_window: block i attends globally when (i + 1) % global_every == 0 (Gemma 2: 2, "
                    "Gemma 3: 6); None = every block is local")
    attn_softcap: float | None = Field(default=None, gt=0, description="attention logits capped c*tanh(x/c) (Gemma 2)")
    final_softcap: float | None = Field(default=None, gt=0, description="output logits capped c*tanh(x/c) (Gemma 2)")
    attn_sinks: bool = Field(
        default=False,
        description="a learned logit per query head in every softmax denominator (gpt-oss sinks; Megatron-Core "
                    "softmax_type learnable): num_heads parameters per block and one more term per score row")
    swiglu_limit: float | None = Field(
        default=None, gt=0, le=1_000_000,
        description="gpt-oss's clamped SwiGLU: gate clamped to <= limit, up to +-limit, out = gate*sigmoid(1.702*gate)"
                    "*(up + 1) (transformers GptOssExperts, swiglu_limit 7.0): elementwise work only; needs swiglu")
    rope_yarn: bool = Field(
        default=False,
        description="YaRN-scaled rotary embedding (gpt-oss rope_scaling yarn): the same rotation, cos/sin scaled; "
                    "Megatron-Bridge runs it unfused (apply_rope_fusion off for position_embedding_type yarn); "
                    "needs position_embedding rope")
    embed_proj_dim: int | None = Field(
        default=None, gt=0, le=1_000_000,
        description="word embeddings of this width, projected to hidden after the lookup and back before the output "
                    "layer by bias-free linears (OPT word_embed_proj_dim); None (or hidden) = no projection")
    num_experts: int = Field(default=1, gt=0, le=100_000)
    top_k: int = Field(default=1, gt=0, le=100_000)
    router_bias: bool = Field(default=False, description="MoE router with a bias per expert (gpt-oss)")
    moe_ffn_hidden: int | None = Field(default=None, gt=0, le=10_000_000)
    shared_expert_ffn: int | None = Field(
        default=None, gt=0, le=10_000_000,
        description="MoE blocks: hidden size of the shared expert MLP every token runs, summed over shared experts "
                    "(DeepSeek n_shared_experts x moe_intermediate_size; Megatron moe_shared_expert_intermediate_size)")
    moe_latent_size: int | None = Field(
        default=None, gt=0, le=1_000_000,
        description="LatentMoE (Megatron-Core moe_latent_size; Nemotron 3 Super): the routed experts read and write "
                    "this width -- a hidden->latent linear (fc1_latent_proj, duplicated over TP) before the dispatch "
                    "and latent->hidden (fc2_latent_proj) after the combine, so the all-to-all carries latent-wide "
                    "tokens; router and shared expert stay at hidden; None = experts at hidden. Hybrid stacks only")
    first_dense_layers: int = Field(
        default=0, ge=0, le=10_000,
        description="MoE models: the first k blocks have a dense MLP of ffn_hidden (DeepSeek first_k_dense_replace)")
    kv_lora_rank: int | None = Field(default=None, gt=0, le=1_000_000,
                                     description="MLA: rank of the compressed key/value latent (MLA on when set)")
    q_lora_rank: int | None = Field(default=None, gt=0, le=1_000_000,
                                    description="MLA: rank of the compressed query latent (None: full-rank query)")
    qk_rope_head_dim: int | None = Field(default=None, gt=0, le=100_000,
                                         description="MLA: decoupled RoPE dims per head added to head_dim for q.k; "
                                                     "even (RoPE rotates pairs of dims)")
    v_head_dim: int | None = Field(default=None, gt=0, le=100_000, description="MLA: value dims per head")
    mtp_layers: int = Field(
        default=0, ge=0, le=100,
        description="multi-token prediction modules on the last pipeline stage (DeepSeek-V3 Sec. 2.2, Megatron-Core "
                    "--mtp-num-layers): each a block like the model's own plus a 2h->h projection, sharing the "
                    "embedding and output head; trained compute, not counted in total_params (the paper's 671B)")
    hybrid_pattern: str | None = Field(
        default=None, min_length=1, max_length=10_000, pattern=r"^[M*E-]+$",
        description="hybrid Mamba/attention stack (Megatron-Core hybrid_layer_pattern, formerly "
                    "hybrid_override_pattern): one character per layer, each layer one pre-norm sub-layer with its "
                    "residual -- M Mamba-2 mixer, * self-attention, - dense MLP, E MoE; its length is num_layers "
                    "(Nemotron-H, Nemotron 3); None = every layer an attention + MLP block")
    mamba_state_dim: int = Field(default=128, gt=0, le=100_000,
                                 description="Mamba-2 SSM state size N per group (Megatron mamba_state_dim)")
    mamba_groups: int = Field(default=8, gt=0, le=100_000,
                              description="Mamba-2 groups G sharing the B and C projections (mamba_num_groups)")
    mamba_head_dim: int = Field(default=64, gt=0, le=100_000, description="Mamba-2 head dim P (mamba_head_dim)")
    mamba_heads: int | None = Field(
        default=None, gt=0, le=100_000,
        description="Mamba-2 heads H (mamba_num_heads); None = mamba_expand * hidden / mamba_head_dim")
    mamba_expand: int = Field(default=2, gt=0, le=64,
                              description="Mamba-2 inner width over hidden where mamba_heads is unset (expand)")
    mamba_conv_kernel: int = Field(default=4, gt=0, le=64, description="Mamba-2 causal conv1d width (d_conv)")
    mamba_chunk_size: int = Field(default=128, gt=0, le=100_000,
                                  description="Mamba-2 SSD chunk length Q of the chunked scan (chunk_size)")
    mtp_pattern: str | None = Field(
        default=None, min_length=1, max_length=100, pattern=r"^[M*E-]+$",
        description="hybrid stacks: the layers of one multi-token-prediction depth (Megatron-Core "
                    "mtp_hybrid_override_pattern, e.g. '*E'); needs hybrid_pattern and mtp_layers")
    mtp_shared: bool = Field(
        default=False, description="hybrid MTP: every depth runs the same layers' weights (Megatron-Core "
                                   "mtp_use_repeated_layer): parameters once, compute mtp_layers times")
    published_params: float | None = Field(default=None, gt=0, description="as released, for tests")
    published_active_params: float | None = Field(default=None, gt=0,
                                                  description="active parameters per token as released, for tests")

    @model_validator(mode="before")
    @classmethod
    def _no_projection_to_its_own_width(cls, data: Any) -> Any:
        """An ``embed_proj_dim`` equal to ``hidden`` is no projection (transformers OPTDecoder builds project_in /
        project_out only when word_embed_proj_dim != hidden_size): read as None, not costed as two extra linears."""
        if isinstance(data, dict) and data.get("embed_proj_dim") is not None \
                and data.get("embed_proj_dim") == data.get("hidden") and not isinstance(data.get("hidden"), bool):
            return {**data, "embed_proj_dim": None}
        return data

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        kv = self.kv_heads
        if self.num_heads % kv != 0:
            raise ValueError(f"num_kv_heads={kv} must divide num_heads={self.num_heads}")
        if self.head_dim is None and self.hidden % self.num_heads != 0:
            raise ValueError(f"num_heads={self.num_heads} must divide hidden={self.hidden} (or give head_dim)")
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k={self.top_k} exceeds num_experts={self.num_experts}")
        if not self.is_moe and (self.shared_expert_ffn or self.first_dense_layers or self.moe_ffn_hidden):
            raise ValueError("moe_ffn_hidden, shared_expert_ffn and first_dense_layers need a MoE model "
                             "(num_experts > 1)")
        self._check_latent()
        if self.router_bias and not self.is_moe:
            raise ValueError("router_bias needs a MoE model (num_experts > 1)")
        if self.swiglu_limit is not None and self.activation != "swiglu":
            raise ValueError(f"swiglu_limit clamps a SwiGLU MLP; activation is {self.activation!r}")
        if self.rope_yarn and self.position_embedding != "rope":
            raise ValueError(f"rope_yarn scales a rotary embedding; position_embedding is {self.position_embedding!r}")
        self._check_rope_pairs()
        if self.attn_sinks and self.is_mla:
            raise ValueError("attention sinks with multi-head latent attention are not modelled")
        if self.first_dense_layers >= self.num_layers:
            raise ValueError(f"first_dense_layers={self.first_dense_layers} must be below num_layers={self.num_layers}")
        mla_only = {"q_lora_rank": self.q_lora_rank, "qk_rope_head_dim": self.qk_rope_head_dim,
                    "v_head_dim": self.v_head_dim}
        if self.global_every is not None and self.sliding_window is None:
            raise ValueError("global_every needs sliding_window (the local blocks' window)")
        if self.global_every == 1:
            raise ValueError("global_every=1 makes every block global: leave sliding_window unset instead")
        self._check_hybrid()
        if self.kv_lora_rank is None:
            given = [k for k, v in mla_only.items() if v is not None]
            if given:
                raise ValueError(f"{', '.join(given)} need kv_lora_rank (multi-head latent attention)")
        else:
            if self.qk_rope_head_dim is None or self.head_dim is None:
                raise ValueError("multi-head latent attention (kv_lora_rank) needs head_dim (the no-RoPE q/k dims "
                                 "per head) and qk_rope_head_dim")
            if self.num_kv_heads not in (None, self.num_heads):
                raise ValueError("multi-head latent attention expands keys and values to every head: "
                                 "num_kv_heads must equal num_heads or be unset")
            if self.bias or self.qkv_bias:
                raise ValueError("multi-head latent attention has no projection biases: set bias: false")
        return self

    def _check_latent(self) -> None:
        """LatentMoE is costed as Megatron-Core's MoELayer builds it in a hybrid stack (Nemotron 3): bias-free."""
        if self.moe_latent_size is None:
            return
        if not self.is_moe:
            raise ValueError("moe_latent_size projects the routed experts of a MoE model: num_experts must be > 1")
        if self.hybrid_pattern is None:
            raise ValueError("moe_latent_size is modelled for hybrid stacks (hybrid_pattern, Nemotron 3) only")
        if self.bias:
            raise ValueError("moe_latent_size with biases (add_bias_linear) is not modelled: set bias: false")

    def _check_hybrid(self) -> None:
        """A hybrid pattern names every layer; Megatron's Mamba mixer splits its heads and groups over TP."""
        p = self.hybrid_pattern
        mamba = [k for k in MAMBA_FIELDS if getattr(self, k) != ModelSpec.model_fields[k].default]
        if mamba and not (p and "M" in p):
            raise ValueError(f"{', '.join(mamba)} describe the Mamba-2 layers of a hybrid stack: they need "
                             f"hybrid_pattern with M layers")
        if (self.mtp_pattern is not None or self.mtp_shared) and not (p and self.mtp_layers):
            raise ValueError("mtp_pattern and mtp_shared describe the MTP depths of a hybrid stack: they need "
                             "hybrid_pattern and mtp_layers")
        if p is None:
            return
        if self.mtp_layers and not self.mtp_pattern:
            raise ValueError("mtp_layers of a hybrid stack need mtp_pattern (the layers of one MTP depth)")
        if self.mtp_pattern and "E" in self.mtp_pattern and not self.is_moe:
            raise ValueError("mtp_pattern has MoE layers (E) but num_experts is 1")
        if len(p) != self.num_layers:
            raise ValueError(f"hybrid_pattern has {len(p)} layers but num_layers={self.num_layers}")
        if ("E" in p) != self.is_moe:
            raise ValueError("hybrid_pattern has MoE layers (E) exactly when num_experts > 1")
        if self.block_norms != 1:
            raise ValueError("hybrid_pattern layers have one pre-norm each: set block_norms: 1")
        other = {"first_dense_layers": self.first_dense_layers, "kv_lora_rank": self.kv_lora_rank,
                 "sliding_window": self.sliding_window, "embed_proj_dim": self.embed_proj_dim}
        given = [k for k, v in other.items() if v]
        if given:
            raise ValueError(f"{', '.join(given)} not modelled with hybrid_pattern")
        if "M" in p and (self.mamba_inner % self.mamba_head_dim or self.mamba_nheads % self.mamba_groups):
            raise ValueError(f"mamba_groups={self.mamba_groups} must divide the {self.mamba_nheads} Mamba heads "
                             f"(mamba_heads, or mamba_expand * hidden / mamba_head_dim)")

    # Derived sizes; names say what they are so cost models read naturally.
    @property
    def is_hybrid(self) -> bool:
        return self.hybrid_pattern is not None

    @property
    def mamba_nheads(self) -> int:
        """Mamba-2 heads H (Megatron MambaMixer: mamba_num_heads, else expand * hidden // head_dim)."""
        return self.mamba_heads or self.mamba_expand * self.hidden // self.mamba_head_dim

    @property
    def mamba_inner(self) -> int:
        """Mamba-2 inner width d_inner = H * P (the x and z streams)."""
        return self.mamba_nheads * self.mamba_head_dim if self.mamba_heads else self.mamba_expand * self.hidden

    @property
    def mamba_in_proj(self) -> int:
        """Output width of a Mamba-2 layer's in_proj (mamba_in_proj_width)."""
        return mamba_in_proj_width(self.mamba_inner, self.mamba_groups, self.mamba_state_dim, self.mamba_nheads)

    @property
    def mamba_conv_channels(self) -> int:
        """Channels of a Mamba-2 layer's conv1d (mamba_conv_channels)."""
        return mamba_conv_channels(self.mamba_inner, self.mamba_groups, self.mamba_state_dim)

    def hybrid_counts(self) -> dict[str, int]:
        """Layers of each kind of a hybrid stack, in the order they first occur ({} without a pattern)."""
        p = self.hybrid_pattern or ""
        return {c: p.count(c) for c in dict.fromkeys(p)}

    def hybrid_kind(self, kind: str) -> ModelSpec:
        """The model of one layer kind of a hybrid stack (pattern ``kind``, one layer), not re-validated: the
        per-layer costs of that kind come from it."""
        return self.model_copy(update={"hybrid_pattern": kind, "num_layers": 1})

    def mtp_block(self) -> ModelSpec:
        """One MTP depth's layers of a hybrid stack as a hybrid model of its own (pattern mtp_pattern), not
        re-validated: the per-depth costs of its layers come from it."""
        return self.model_copy(update={"hybrid_pattern": self.mtp_pattern, "num_layers": len(self.mtp_pattern),
                                       "mtp_layers": 0, "mtp_pattern": None, "mtp_shared": False})

    def mamba_params(self) -> int:
        """One Mamba-2 mixer (Megatron-Core MambaMixer, megatron/core/ssm/mamba_mixer.py): in_proj h -> (z, x, B,
        C, dt) = 2 d_inner + 2 G N + H, no bias; the depthwise causal conv1d over x, B, C (d_conv taps + a bias per
        channel); dt_bias, A_log and D (one per head, D_has_hdim False); the gated RMSNorm's d_inner weights;
        out_proj d_inner -> h, no bias. The layer's pre-norm is added by _hybrid_layer_params."""
        h, di, H = self.hidden, self.mamba_inner, self.mamba_nheads
        return h * self.mamba_in_proj + self.mamba_conv_channels * (self.mamba_conv_kernel + 1) + 3 * H + di + di * h

    def _moe_mlp_params(self, experts: int | None = None) -> int:
        """A MoE MLP: ``experts`` routed experts (default all of them; top_k for the ones a token touches), the
        router, the shared expert and LatentMoE's two projections."""
        n = self.num_experts if experts is None else experts
        return (n * self.expert_params() + self.router_params() + self.latent_proj_params()
                + (self.mlp_params(self.shared_expert_ffn) if self.shared_expert_ffn else 0))

    @property
    def expert_width(self) -> int:
        """Width the routed experts read and write (and the dispatcher moves): moe_latent_size, else hidden."""
        return self.moe_latent_size or self.hidden

    def expert_params(self) -> int:
        """One routed expert: an MLP of expert_ffn at expert_width (Megatron-Core TEGroupedMLP: linear_fc1
        moe_latent_size -> ffn, linear_fc2 ffn -> moe_latent_size with LatentMoE)."""
        return self.mlp_params(self.expert_ffn, self.expert_width)

    def latent_proj_params(self) -> int:
        """LatentMoE's fc1_latent_proj (hidden -> latent) and fc2_latent_proj (latent -> hidden), bias-free
        (Megatron-Core MoELayer, megatron/core/transformer/moe/moe_layer.py); 0 without moe_latent_size."""
        return 2 * self.hidden * self.moe_latent_size if self.moe_latent_size else 0

    def _hybrid_layer_params(self, kind: str, active: bool = False) -> int:
        """One hybrid layer of ``kind`` with its pre-norm (all experts, or the active ones)."""
        if kind == "E":
            return self._moe_mlp_params(self.top_k if active else None) + self.norm_params()
        mixer = {"M": self.mamba_params, "*": self.attention_params, "-": self.mlp_params}[kind]
        return mixer() + self.norm_params()

    def _hybrid_stack_params(self, active: bool = False) -> int:
        """Every layer of a hybrid stack (all experts, or the active ones), embeddings excluded."""
        return sum(n * self._hybrid_layer_params(k, active) for k, n in self.hybrid_counts().items())

    def _check_rope_pairs(self) -> None:
        """RoPE rotates each pair of a head's dims by one angle (RoFormer, arXiv:2104.09864 eq. 14-15): the rotated
        dims are even -- MLA's decoupled qk_rope_head_dim, else the whole head of a rope model."""
        if self.qk_rope_head_dim is not None and self.qk_rope_head_dim % 2:
            raise SpecError("qk_rope_head_dim", f"RoPE rotates pairs of dims: must be even, got {self.qk_rope_head_dim}")
        if self.position_embedding == "rope" and self.kv_lora_rank is None and self.dhead % 2:
            given = "head_dim" if self.head_dim else "hidden / num_heads"
            raise SpecError("head_dim", f"RoPE (position_embedding rope) rotates pairs of dims: the head dim must be "
                                        f"even, got {given} = {self.dhead}")

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def dhead(self) -> int:
        return self.head_dim or self.hidden // self.num_heads

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn_hidden or self.ffn

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def qk_head_dim(self) -> int:
        """Query/key dims per head in the attention scores (MLA: no-RoPE part + decoupled RoPE part)."""
        return self.dhead + (self.qk_rope_head_dim or 0)

    @property
    def v_dim(self) -> int:
        """Value (and attention output) dims per head."""
        return self.v_head_dim or self.dhead

    @property
    def num_moe_layers(self) -> int:
        """Blocks with a MoE MLP (0 for a dense model)."""
        return self.num_layers - self.first_dense_layers if self.is_moe else 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    def dense_block(self) -> ModelSpec:
        """This model's dense block as a model of its own (num_experts 1, same attention): the first
        ``first_dense_layers`` blocks of a MoE model cost what a block of this model costs."""
        return self.model_copy(update={"num_experts": 1, "top_k": 1, "moe_ffn_hidden": None,
                                       "shared_expert_ffn": None, "first_dense_layers": 0, "moe_latent_size": None,
                                       "router_bias": False})

    @property
    def gated_mlp(self) -> bool:
        return self.activation in ("swiglu", "geglu")

    @property
    def plain_llama_block(self) -> bool:
        """A dense Llama block as torchtitan's eager model code implements it: RMSNorm before attention and MLP,
        RoPE, SwiGLU, no biases, no MoE, MLA, QK-norm or sliding window (TrainingSpec.block_code)."""
        return (self.gated_mlp and self.norm == "rmsnorm" and self.position_embedding == "rope" and not self.bias
                and not self.is_moe and not self.is_mla and self.block_norms == 2 and not self.qk_norm
                and not self.sliding_window)

    @property
    def num_global_layers(self) -> int:
        """Blocks with full (global) attention: all without a sliding window, every global_every-th with one."""
        if self.sliding_window is None:
            return self.num_layers
        return self.num_layers // self.global_every if self.global_every else 0

    @property
    def embed_dim(self) -> int:
        """Width of the word embedding table (and of the output layer's input)."""
        return self.embed_proj_dim or self.hidden

    # Parameter counts (exact for the architectures described; tested against released models).
    def attention_params(self) -> int:
        if self.is_mla:
            return self._mla_params()
        h, q, kv = self.hidden, self.num_heads * self.dhead, self.kv_heads * self.dhead
        weights = h * q + 2 * h * kv + q * h
        qkv_bias = self.bias if self.qkv_bias is None else self.qkv_bias
        biases = ((q + 2 * kv) if qkv_bias else 0) + (h if self.bias else 0)
        return weights + biases + (2 * self.dhead if self.qk_norm else 0) + (self.num_heads if self.attn_sinks else 0)

    def _mla_params(self) -> int:
        """MLA (DeepSeek-V2 Sec. 2.1): query down/up projections (or one full-rank one), the joint key/value
        down-projection plus the shared RoPE key, their latents' RMSNorm weights, key/value up-projection and
        the output projection; no biases."""
        h, a, qk, v = self.hidden, self.num_heads, self.qk_head_dim, self.v_dim
        ql, kvl, dr = self.q_lora_rank, self.kv_lora_rank or 0, self.qk_rope_head_dim or 0
        q = (h * ql + ql + ql * a * qk) if ql else h * a * qk
        kv = h * (kvl + dr) + kvl + kvl * a * (self.dhead + v)
        return q + kv + a * v * h

    def mlp_params(self, ffn: int | None = None, width: int | None = None) -> int:
        """An MLP of hidden ``ffn`` (default ffn_hidden) reading and writing ``width`` (default hidden)."""
        h, f = width or self.hidden, ffn or self.ffn
        n_in = 2 if self.gated_mlp else 1
        weights = n_in * h * f + f * h
        biases = (n_in * f + h) if self.bias else 0
        return weights + biases

    def norm_params(self) -> int:
        return self.hidden * (2 if self.norm == "layernorm" else 1)

    def router_params(self) -> int:
        """A MoE block's router: a hidden x experts linear (+ a bias per expert with router_bias)."""
        return self.num_experts * (self.hidden + (1 if self.router_bias else 0)) if self.is_moe else 0

    def layer_params(self) -> float:
        """Parameters of one MoE block (all experts counted; the shared expert and router included), or of a
        dense block for a dense model; for a hybrid stack one layer of its kind (hybrid_kind), or the mean layer."""
        if self.is_hybrid:  # one kind: a layer of it; several: the mean layer (exact times num_layers)
            return self._hybrid_stack_params() / self.num_layers
        mlp = self._moe_mlp_params() if self.is_moe else self.mlp_params()
        return self.attention_params() + mlp + self.block_norm_params()

    def block_norm_params(self) -> int:
        """Norm weights of one block (block_norms norms of hidden width)."""
        return self.block_norms * self.norm_params()

    def dense_layer_params(self) -> int:
        """Parameters of one dense block (a dense model's block, or a MoE model's first_dense_layers)."""
        return self.attention_params() + self.mlp_params() + self.block_norm_params()

    def input_embedding_params(self) -> int:
        """First stage: the word embedding table (+ learned positions, + BLOOM's embedding norm, + OPT's
        project_in)."""
        emb = self.vocab_size * self.embed_dim
        if self.position_embedding == "learned":
            emb += self.max_seq_len * self.hidden
        emb += self.norm_params() if self.embedding_norm else 0
        return emb + (self.embed_dim * self.hidden if self.embed_proj_dim else 0)

    def output_layer_params(self) -> int:
        """Last stage: final norm, OPT's project_out, and the output layer when it is not tied to the embedding."""
        head = 0 if self.tie_embeddings else self.vocab_size * self.embed_dim
        return self.norm_params() + head + (self.embed_dim * self.hidden if self.embed_proj_dim else 0)

    def embedding_params(self) -> int:
        """Token embedding (+ learned positions) + final norm + untied output head (+ OPT's projections)."""
        return self.input_embedding_params() + self.output_layer_params()

    def total_params(self) -> int:
        if self.is_hybrid:
            return self._hybrid_stack_params() + self.embedding_params()
        if not self.is_moe:
            return self.num_layers * self.layer_params() + self.embedding_params()
        return (self.num_moe_layers * self.layer_params() + self.num_dense_layers * self.dense_layer_params()
                + self.embedding_params())

    def active_params(self) -> int:
        """Parameters touched per token (top-k routed experts and the shared expert only)."""
        if self.is_hybrid:
            return self._hybrid_stack_params(active=True) + self.embedding_params()
        if not self.is_moe:
            return self.total_params()
        active = self.attention_params() + self._moe_mlp_params(self.top_k) + self.block_norm_params()
        return (self.num_moe_layers * active + self.num_dense_layers * self.dense_layer_params()
                + self.embedding_params())

    def describe(self) -> str:
        mtp = f", {self.mtp_layers} MTP" if self.mtp_layers else ""
        return f"{self.name} ({self.total_params() / 1e9:.1f}B params, {self.num_layers} layers{mtp}, h={self.hidden})"
