"""Count the aten ops a module issues in eager mode, forward and backward, without a GPU or real memory.

A ``TorchDispatchMode`` sees every aten op the dispatcher runs; under ``FakeTensorMode`` tensors carry only
shapes, so a block of any width is "run" in milliseconds on any machine. Views (``view``, ``t``,
``transpose``, ``detach``, ``expand``, ...) are dispatched but launch no kernel: they are counted apart.
These counts are what ``cost_models.host_issue.BLOCK_OPS`` states: the executor's block (``torch_model.Block``)
for the GPT- and Llama-style block styles, Megatron's legacy GPT layer (``megatron_block.MegatronLayer``) for
``"megatron-gpt-unfused"``. ``python -m trainsim.kernels.op_count`` counts every style again and says whether the
table still holds them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from trainsim.cost_models.host_issue import BLOCK_OPS
from trainsim.specs import ModelSpec

from .megatron_block import MegatronLayer
from .megatron_head import MegatronHead
from .torch_model import Block, ModelOptions

# aten ops that only make a new view or alias of a tensor (no kernel launch on a GPU).
VIEW_OPS = frozenset({"view", "t", "transpose", "detach", "expand", "_unsafe_view", "reshape", "permute",
                      "unsqueeze", "squeeze", "slice", "select", "split", "alias", "as_strided", "_reshape_alias"})


@dataclass(frozen=True)
class OpCount:
    """Aten ops of one block per micro-batch: dispatched (all) and kernel-launching, forward and backward."""

    fwd_ops: int
    fwd_kernels: int
    bwd_ops: int
    bwd_kernels: int

    def as_tuple(self) -> tuple[int, int, int, int]:
        return self.fwd_ops, self.fwd_kernels, self.bwd_ops, self.bwd_kernels


class _Counter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.kernels = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "aten":
            self.ops += 1
            if func.overloadpacket.__name__ not in VIEW_OPS:
                self.kernels += 1
        return func(*args, **(kwargs or {}))


def _count(make_module, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> OpCount:
    """Ops of one forward and backward of ``make_module()`` on an input of ``shape``, all under fake tensors."""
    with FakeTensorMode():
        module = make_module()
        x = torch.randn(*shape, dtype=dtype, requires_grad=True)
        grad = torch.randn(*shape, dtype=dtype)
        fwd = _Counter()
        with fwd:
            y = module(x)
        bwd = _Counter()
        with bwd:
            y.backward(grad)
    return OpCount(fwd.ops, fwd.kernels, bwd.ops, bwd.kernels)


def count_block_ops(spec: ModelSpec, *, micro_batch: int = 1, seq_len: int = 64) -> OpCount:
    """Aten ops of one eager forward and backward of the executor's block of ``spec`` (fake tensors)."""
    return _count(lambda: Block(spec, ModelOptions()), (micro_batch, seq_len, spec.hidden))


def count_block_ops_autocast(spec: ModelSpec, *, micro_batch: int = 1, seq_len: int = 64) -> tuple[int, int, int, int]:
    """(first forward ops, kernels, later forward ops, kernels) of the executor's block under bf16 autocast
    (CPU autocast, fake tensors): two forwards in one autocast region, the second hitting autocast's weight-cast
    cache as a step's later micro-batches do (cost_models.host_issue.BLOCK_OPS_AUTOCAST)."""
    with FakeTensorMode():
        module = Block(spec, ModelOptions())
        x = torch.randn(micro_batch, seq_len, spec.hidden, requires_grad=True)
        first, later = _Counter(), _Counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with first:
                module(x)
            with later:
                module(x)
    return first.ops, first.kernels, later.ops, later.kernels


def count_megatron_layer_ops(hidden: int, heads: int, ffn: int, *, micro_batch: int = 1,
                             seq_len: int = 64, fused_softmax: bool = True) -> OpCount:
    """Aten ops of one forward and backward of Megatron's legacy GPT layer (megatron_block), sequence-major; its
    eager softmax path (``fused_softmax=False``) on fp16 tensors, whose fp32 casts dispatch as in training."""
    dtype = torch.float32 if fused_softmax else torch.float16
    return _count(lambda: MegatronLayer(hidden, heads, ffn, fused_softmax=fused_softmax, seq_len=seq_len,
                                        dtype=dtype), (seq_len, micro_batch, hidden), dtype)


def count_megatron_head_ops(hidden: int, vocab: int, *, micro_batch: int = 1, seq_len: int = 64) -> OpCount:
    """Aten ops of one forward and backward of Megatron's GPT head and loss (megatron_head), sequence-major, from
    the last block's output to the scaled loss (cost_models.loss_issue.HEAD_LOSS_OPS)."""
    with FakeTensorMode():
        module = MegatronHead(hidden, vocab, seq_len=seq_len, micro_batch=micro_batch)
        x = torch.randn(seq_len, micro_batch, hidden, requires_grad=True)
        fwd = _Counter()
        with fwd:
            loss = module(x)
        bwd = _Counter()
        with bwd:
            loss.backward()
    return OpCount(fwd.ops, fwd.kernels, bwd.ops, bwd.kernels)


# The block of each BLOCK_OPS style as counted (any width gives the same counts: tests/test_host_issue_time.py).
STYLE_ARCH = {
    "layernorm-gelu-learned": {"activation": "gelu", "norm": "layernorm", "position_embedding": "learned"},
    "rmsnorm-swiglu-rope": {"activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope", "bias": False,
                            "tie_embeddings": False},
}


def style_spec(style: str, hidden: int = 256, heads: int = 4) -> ModelSpec:
    """The small model whose block the counters build for a STYLE_ARCH style: two layers of width ``hidden``, a 4x
    MLP, a 1,000-token vocabulary, 64 positions (the counts do not depend on the sizes)."""
    return ModelSpec(name=style, num_layers=2, hidden=hidden, num_heads=heads, ffn_hidden=4 * hidden,
                     vocab_size=1000, max_seq_len=64, **STYLE_ARCH[style])


def counted_block_ops(hidden: int = 256, heads: int = 4) -> dict[str, OpCount]:
    """Every cost_models.host_issue.BLOCK_OPS style counted from its source block at width ``hidden``."""
    out = {style: count_block_ops(style_spec(style, hidden, heads)) for style in STYLE_ARCH}
    out["megatron-gpt-unfused"] = count_megatron_layer_ops(hidden, heads, 4 * hidden)
    out["megatron-gpt-unfused-eager-softmax"] = count_megatron_layer_ops(hidden, heads, 4 * hidden,
                                                                        fused_softmax=False)
    return out


def _count_forward(fn, *shapes: tuple[int, ...], dtype: torch.dtype = torch.float32) -> tuple[int, int]:
    """(aten ops, kernels) of one forward of ``fn(*inputs)`` on inputs of ``shapes`` (fake tensors)."""
    with FakeTensorMode():
        inputs = [torch.randn(*shape, dtype=dtype, requires_grad=True) for shape in shapes]
        made = fn()
        counter = _Counter()
        with counter:
            made(*inputs)
    return counter.ops, counter.kernels


def count_recomputed_module_ops(style: str, hidden: int = 256, heads: int = 4, *, micro_batch: int = 1,
                                seq_len: int = 64) -> dict[str, tuple[int, int]]:
    """(aten ops, kernels) of one forward of each Megatron-Core ``--recompute-modules`` module a block of ``style``
    has (cost_models.host_issue.RECOMPUTED_MODULE_OPS): ``core_attn`` the attention core from q, k, v to the
    context (the executor's SDPA call; the legacy layer's baddbmm, softmax, dropout, bmm and relayout), ``mlp`` the
    MLP from its input to its output, ``layernorm`` the block's two norms."""
    b, s, h = micro_batch, seq_len, hidden
    if style.startswith("megatron-gpt-unfused"):
        fused = style == "megatron-gpt-unfused"
        dtype = torch.float32 if fused else torch.float16

        def layer() -> MegatronLayer:
            return MegatronLayer(h, heads, 4 * h, fused_softmax=fused, seq_len=s, dtype=dtype)

        qkv = (s, b, heads, h // heads)
        norm = _count_forward(lambda: layer().ln1, (s, b, h), dtype=dtype)
        return {"core_attn": _count_forward(lambda: layer()._core_attention, qkv, qkv, qkv, dtype=dtype),
                "mlp": _count_forward(lambda: layer()._mlp, (s, b, h), dtype=dtype),
                "layernorm": (2 * norm[0], 2 * norm[1])}
    spec = style_spec(style, hidden, heads)

    def block() -> Block:
        return Block(spec, ModelOptions())

    q, kv = (b, spec.num_heads, s, spec.dhead), (b, spec.kv_heads, s, spec.dhead)
    norm = _count_forward(lambda: block().norm1, (b, s, h))
    return {"core_attn": _count_forward(lambda: block().attn.core, q, kv, kv),
            "mlp": _count_forward(lambda: block().mlp, (b, s, h)),
            "layernorm": (2 * norm[0], 2 * norm[1])}


def main() -> int:
    """Print each style's counts beside BLOCK_OPS; exit status 1 where they differ."""
    counted = counted_block_ops()
    print(f"{'style':<36} {'fwd ops':>8} {'fwd kernels':>12} {'bwd ops':>8} {'bwd kernels':>12}  BLOCK_OPS")
    for style, c in counted.items():
        same = BLOCK_OPS.get(style) == c.as_tuple()
        print(f"{style:<36} {c.fwd_ops:>8} {c.fwd_kernels:>12} {c.bwd_ops:>8} {c.bwd_kernels:>12}  "
              f"{'same' if same else f'differs: {BLOCK_OPS.get(style)}'}")
    return 0 if all(BLOCK_OPS.get(s) == c.as_tuple() for s, c in counted.items()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
