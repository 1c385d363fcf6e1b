"""A GPT- or Llama-style decoder built from a ModelSpec, as pipeline chunks with name-seeded weights.

Every parameter is initialised from its own generator seeded by (seed, fully qualified name), so a
pipeline chunk built alone holds exactly the weights of the same layers in the full model: the
single-process reference and every parallel layout start from identical weights.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from trainsim.specs import ModelSpec

INIT_STD = 0.02
NORM_EPS = 1e-5
ROPE_THETA = 10_000.0


@dataclass(frozen=True)
class ModelOptions:
    """How the torch model is run: recompute mode (none|selective|full)."""

    recompute: str = "none"


def make_norm(spec: ModelSpec) -> nn.Module:
    """LayerNorm (weight + bias, as counted by ModelSpec.norm_params) or RMSNorm (weight only)."""
    if spec.norm == "layernorm":
        return nn.LayerNorm(spec.hidden, eps=NORM_EPS)
    return nn.RMSNorm(spec.hidden, eps=NORM_EPS)


def rope_tables(seq_len: int, dhead: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables (seq, dhead/2) of rotary position embedding (non-interleaved halves, as in HF Llama)."""
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, dhead, 2, dtype=torch.float32, device=device) / dhead))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32, device=device), inv)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (b, heads, s, dhead) by position; computed in x's dtype."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Attention(nn.Module):
    """Multi-head / grouped-query causal self-attention on SDPA; q, k, v, o are separate Linears (TP-shardable)."""

    def __init__(self, spec: ModelSpec, options: ModelOptions):
        super().__init__()
        h, dh = spec.hidden, spec.dhead
        self.dhead = dh
        self.rope = spec.position_embedding == "rope"
        self.selective = options.recompute == "selective"
        qkv_bias = spec.bias if spec.qkv_bias is None else spec.qkv_bias
        self.q = nn.Linear(h, spec.num_heads * dh, bias=qkv_bias)
        self.k = nn.Linear(h, spec.kv_heads * dh, bias=qkv_bias)
        self.v = nn.Linear(h, spec.kv_heads * dh, bias=qkv_bias)
        self.o = nn.Linear(spec.num_heads * dh, h, bias=spec.bias)

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal attention over (b, heads, s, dhead); GQA when k/v have fewer heads."""
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s = x.shape[0], x.shape[1]
        q = self.q(x).view(b, s, -1, self.dhead).transpose(1, 2)
        k = self.k(x).view(b, s, -1, self.dhead).transpose(1, 2)
        v = self.v(x).view(b, s, -1, self.dhead).transpose(1, 2)
        if self.rope:
            cos, sin = rope_tables(s, self.dhead, q.device)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.selective:  # Korthikanti's selective recompute: keep only the attention core's inputs
            out = checkpoint(self.core, q, k, v, use_reentrant=False)
        else:
            out = self.core(q, k, v)
        return self.o(out.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    """GeLU MLP (fc1, fc2) or SwiGLU (fc1 = up, gate, fc2 = down)."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.gated = spec.gated_mlp
        self.fc1 = nn.Linear(spec.hidden, spec.ffn, bias=spec.bias)
        if self.gated:
            self.gate = nn.Linear(spec.hidden, spec.ffn, bias=spec.bias)
        self.fc2 = nn.Linear(spec.ffn, spec.hidden, bias=spec.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            return self.fc2(F.silu(self.gate(x)) * self.fc1(x))
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm1 x), then + mlp(norm2 x)."""

    def __init__(self, spec: ModelSpec, options: ModelOptions):
        super().__init__()
        self.norm1 = make_norm(spec)
        self.attn = Attention(spec, options)
        self.norm2 = make_norm(spec)
        self.mlp = MLP(spec)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Embeddings(nn.Module):
    """Token embedding plus learned positions (GPT) or nothing (RoPE models rotate inside attention)."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.tok = nn.Embedding(spec.vocab_size, spec.hidden)
        self.pos = nn.Embedding(spec.max_seq_len, spec.hidden) if spec.position_embedding == "learned" else None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids)
        if self.pos is not None:
            x = x + self.pos(torch.arange(ids.shape[1], device=ids.device))
        return x


class Chunk(nn.Module):
    """Consecutive blocks ``layer_ids`` of the model, with the embedding if first and norm + head if last.

    Parameter names are those of the full model (``layers.<global index>...``), so name-seeded init
    and state dicts agree between a chunk and the whole model.
    """

    def __init__(self, spec: ModelSpec, layer_ids: list[int], first: bool, last: bool, options: ModelOptions):
        super().__init__()
        self.full_recompute = options.recompute == "full"
        self.embed = Embeddings(spec) if first else None
        self.layers = nn.ModuleDict({str(i): Block(spec, options) for i in layer_ids})
        self.norm = make_norm(spec) if last else None
        self.head = nn.Linear(spec.hidden, spec.vocab_size, bias=False) if last else None
        self.tied = first and last and spec.tie_embeddings
        if self.tied:
            self.head.weight = self.embed.tok.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        for layer in self.layers.values():
            x = checkpoint(layer, x, use_reentrant=False) if self.full_recompute else layer(x)
        if self.head is not None:
            x = self.head(self.norm(x))
        return x


def _seed_for(seed: int, name: str) -> int:
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63)


def _local_view(p: torch.Tensor) -> tuple[torch.Tensor, tuple[slice, ...] | None]:
    """This rank's part of a (possibly DTensor-sharded) parameter and where it sits in the global tensor."""
    inner = getattr(p, "_local_tensor", None)
    if inner is None:
        return p, None
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    shape, offset = compute_local_shape_and_global_offset(p.shape, p.device_mesh, p.placements)
    view = inner[tuple(slice(0, n) for n in shape)] if tuple(inner.shape) != tuple(shape) else inner
    return view, tuple(slice(o, o + n) for o, n in zip(offset, shape))


@torch.no_grad()
def init_weights(module: nn.Module, seed: int) -> None:
    """Deterministic per-name init: Linear/Embedding weights N(0, 0.02), biases 0, norm weights 1.

    Works on TP/FSDP2-sharded parameters too: each rank draws the full tensor from the name's generator
    and keeps its own slice, so every layout starts from the single-process weights.
    """
    for name, p in module.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        owner = module.get_submodule(name.rsplit(".", 1)[0]) if "." in name else module
        local, where = _local_view(p)
        if isinstance(owner, (nn.LayerNorm, nn.RMSNorm)):
            local.fill_(1.0 if leaf == "weight" else 0.0)
        elif leaf == "bias":
            local.zero_()
        else:
            g = torch.Generator().manual_seed(_seed_for(seed, name))
            full = torch.randn(tuple(p.shape), generator=g, dtype=torch.float32) * INIT_STD
            local.copy_(full if where is None else full[where])


def build_chunk(spec: ModelSpec, layer_ids: list[int], first: bool, last: bool, options: ModelOptions,
                seed: int, device: torch.device | None, dtype: torch.dtype = torch.float32) -> Chunk:
    """Build one chunk on the meta device; with a ``device``, materialise and initialise it by name.

    ``device=None`` leaves it on meta, to be sharded (TP/FSDP2) first and then materialised with
    ``materialize`` — no rank ever holds more than its shards.
    """
    with torch.device("meta"):
        chunk = Chunk(spec, layer_ids, first, last, options)
    if device is not None:
        materialize(chunk, device, seed, dtype)
    return chunk


def materialize(chunk: Chunk, device: torch.device, seed: int, dtype: torch.dtype = torch.float32) -> Chunk:
    """Allocate a (possibly sharded) meta chunk on ``device`` and initialise its weights by name."""
    chunk.to_empty(device=device)
    if dtype != torch.float32:
        chunk.to(dtype)
    if chunk.embed is not None and chunk.head is not None and chunk.tied:
        chunk.head.weight = chunk.embed.tok.weight
    init_weights(chunk, seed)
    return chunk


def synthetic_batch(seed: int, step: int, global_batch: int, seq_len: int, vocab: int,
                    device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of one step: random tokens (B, s+1) -> inputs (B, s), next-token targets (B, s)."""
    g = torch.Generator().manual_seed(seed * 7919 + step)
    tokens = torch.randint(0, vocab, (global_batch, seq_len + 1), generator=g)
    return tokens[:, :-1].to(device), tokens[:, 1:].to(device)
