"""Count the aten ops a module issues in eager mode, forward and backward, without a GPU or real memory.

A ``TorchDispatchMode`` sees every aten op the dispatcher runs; under ``FakeTensorMode`` tensors carry only
shapes, so a block of any width is "run" in milliseconds on any machine. Views (``view``, ``t``,
``transpose``, ``detach``, ``expand``, ...) are dispatched but launch no kernel: they are counted apart.
These counts are what ``cost_models.host_issue.BLOCK_OPS`` states for the executor's block.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from trainsim.specs import ModelSpec

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


def count_block_ops(spec: ModelSpec, *, micro_batch: int = 1, seq_len: int = 64) -> OpCount:
    """Aten ops of one eager forward and backward of the executor's block of ``spec`` (fake tensors)."""
    with FakeTensorMode():
        block = Block(spec, ModelOptions())
        x = torch.randn(micro_batch, seq_len, spec.hidden, requires_grad=True)
        grad = torch.randn(micro_batch, seq_len, spec.hidden)
        fwd = _Counter()
        with fwd:
            y = block(x)
        bwd = _Counter()
        with bwd:
            y.backward(grad)
    return OpCount(fwd.ops, fwd.kernels, bwd.ops, bwd.kernels)
