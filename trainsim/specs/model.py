"""ModelSpec: the architecture of a decoder-only transformer (GPT, Llama, Mixtral style)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

PosInt = Field(gt=0, le=10_000_000)


class ModelSpec(BaseModel):
    """A decoder-only transformer. Dense unless ``num_experts > 1`` (MoE MLP in every layer)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "custom"
    num_layers: int = Field(gt=0, le=10_000)
    hidden: int = Field(gt=0, le=1_000_000)
    num_heads: int = Field(gt=0, le=100_000)
    num_kv_heads: int | None = Field(default=None, gt=0, le=100_000)
    head_dim: int | None = Field(default=None, gt=0, le=100_000)
    ffn_hidden: int | None = Field(default=None, gt=0, le=10_000_000)
    vocab_size: int = Field(gt=0, le=100_000_000)
    activation: Literal["gelu", "swiglu"] = "gelu"
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    position_embedding: Literal["learned", "rope"] = "learned"
    max_seq_len: int = Field(default=2048, gt=0, le=100_000_000)
    bias: bool = True
    qkv_bias: bool | None = Field(default=None, description="biases on q, k, v only (Qwen2); None = same as bias")
    tie_embeddings: bool = True
    num_experts: int = Field(default=1, gt=0, le=100_000)
    top_k: int = Field(default=1, gt=0, le=100_000)
    moe_ffn_hidden: int | None = Field(default=None, gt=0, le=10_000_000)
    published_params: float | None = Field(default=None, gt=0, description="as released, for tests")

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        kv = self.kv_heads
        if self.num_heads % kv != 0:
            raise ValueError(f"num_kv_heads={kv} must divide num_heads={self.num_heads}")
        if self.head_dim is None and self.hidden % self.num_heads != 0:
            raise ValueError(f"num_heads={self.num_heads} must divide hidden={self.hidden} (or give head_dim)")
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k={self.top_k} exceeds num_experts={self.num_experts}")
        return self

    # Derived sizes; names say what they are so cost models read naturally.
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
    def gated_mlp(self) -> bool:
        return self.activation == "swiglu"

    # Parameter counts (exact for the architectures described; tested against released models).
    def attention_params(self) -> int:
        h, q, kv = self.hidden, self.num_heads * self.dhead, self.kv_heads * self.dhead
        weights = h * q + 2 * h * kv + q * h
        qkv_bias = self.bias if self.qkv_bias is None else self.qkv_bias
        biases = ((q + 2 * kv) if qkv_bias else 0) + (h if self.bias else 0)
        return weights + biases

    def mlp_params(self, ffn: int | None = None) -> int:
        h, f = self.hidden, ffn or self.ffn
        n_in = 2 if self.gated_mlp else 1
        weights = n_in * h * f + f * h
        biases = (n_in * f + h) if self.bias else 0
        return weights + biases

    def norm_params(self) -> int:
        return self.hidden * (2 if self.norm == "layernorm" else 1)

    def layer_params(self) -> int:
        """Parameters of one transformer block (all experts counted for MoE)."""
        if self.is_moe:
            mlp = self.num_experts * self.mlp_params(self.expert_ffn) + self.hidden * self.num_experts
        else:
            mlp = self.mlp_params()
        return self.attention_params() + mlp + 2 * self.norm_params()

    def embedding_params(self) -> int:
        """Token embedding (+ learned positions) + final norm + untied output head."""
        emb = self.vocab_size * self.hidden
        if self.position_embedding == "learned":
            emb += self.max_seq_len * self.hidden
        head = 0 if self.tie_embeddings else self.vocab_size * self.hidden
        return emb + head + self.norm_params()

    def total_params(self) -> int:
        return self.num_layers * self.layer_params() + self.embedding_params()

    def active_params(self) -> int:
        """Parameters touched per token (top-k experts only)."""
        if not self.is_moe:
            return self.total_params()
        dense = self.attention_params() + 2 * self.norm_params() + self.hidden * self.num_experts
        active = dense + self.top_k * self.mlp_params(self.expert_ffn)
        return self.num_layers * active + self.embedding_params()

    def describe(self) -> str:
        return f"{self.name} ({self.total_params() / 1e9:.1f}B params, {self.num_layers} layers, h={self.hidden})"
