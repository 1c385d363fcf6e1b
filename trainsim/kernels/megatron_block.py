"""Megatron's GPT transformer layer at TP 1, written op for op as its eager code issues them, for op counting.

``trainsim.kernels.op_count`` counts the aten ops a block dispatches under FakeTensorMode (this layer's in
``count_megatron_layer_ops``: cost_models.host_issue.BLOCK_OPS["megatron-gpt-unfused"]); the executor's own block
(``torch_model.Block``: SDPA attention, no dropout, ``nn.Linear``) is a floor for Megatron's layer, which issues
more ops per micro-batch. This module follows Megatron-DeepSpeed's ``megatron/model/transformer.py``
(microsoft/Megatron-DeepSpeed@f4157bea, the same layer code as Megatron-LM's of 2021-2022) on the path its GPT
runs take without FlashAttention, sequence-major ``[s, b, h]``:

* ``ParallelTransformerLayer.forward``: input layernorm; self-attention; ``bias_dropout_add`` of the
  attention output (its bias ``expand_as`` the residual) and the residual; post-attention layernorm; MLP;
  ``bias_dropout_add`` again (hidden dropout);
* ``ParallelAttention``: the fused QKV ``ColumnParallelLinear`` (bias added inside: ``matmul`` of the input and
  ``weight.t()``, then ``+ bias``), ``view`` to ``[s, b, np, 3 hn]``, ``split_tensor_along_last_dim`` into
  q, k, v; ``CoreAttention``: q and k ``view`` to ``[s, b*np, hn]``, ``baddbmm`` into the preallocated global
  buffer with ``beta=0`` and ``alpha=1/sqrt(hn)`` over ``q.transpose(0, 1)`` and ``k.transpose(0, 1).transpose(1,
  2)``, ``view`` to ``[b, np, s, s]``, the scaled causal softmax (one fused kernel), attention dropout, v and the
  probabilities ``view``-ed, ``bmm`` with ``v.transpose(0, 1)``, ``view``, ``permute(2, 0, 1, 3).contiguous()``,
  ``view`` to ``[s, b, h]``; the output ``RowParallelLinear`` returns its bias apart (``skip_bias_add``);
* ``ParallelMLP``: ``dense_h_to_4h`` with its bias apart, ``bias_gelu`` (bias add and GeLU), ``dense_4h_to_h``
  with its bias apart.

The fused CUDA kernels (apex's layer norm, the upper-triangular masked softmax) are one aten op each here as
there. Megatron's ``FusedScaleMaskSoftmax`` runs its fused kernel only where the kernel's constraints hold
(Megatron-DeepSpeed ``megatron/model/fused_softmax.py``, read_file id 20226917267: 16 < sk <= 2048, sq % 4 == 0
and ``b * np`` % 4 == 0, fp16/bf16 input); elsewhere it takes the eager path, which ``fused_softmax=False`` writes
out: the fp16 scores cast to fp32 (``softmax_in_fp32``, which query-key layer scaling switches on), scaled by the
layer's coefficient, masked in place (``attention_mask_func``: ``masked_fill_(mask, -10000.0)``), ``Softmax`` and
the cast back to fp16; that variant is counted on fp16 tensors so the casts dispatch as they do there; the TorchScript-fused ``bias_gelu`` and ``bias_dropout_add`` are counted as their eager ops (TorchScript's
executor fuses their kernels but dispatches through its own interpreter, whose per-call cost is not counted).
Dropout probability 0.1 (Megatron's ``--attention-dropout`` and ``--hidden-dropout`` defaults).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

DROPOUT = 0.1


class _Linear(nn.Module):
    """Megatron's column/row-parallel linear at TP 1: ``matmul(x, weight.t())`` and the bias added or returned."""

    def __init__(self, fan_in: int, fan_out: int, skip_bias_add: bool, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(fan_out, fan_in, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(fan_out, dtype=dtype))
        self.skip_bias_add = skip_bias_add

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        out = torch.matmul(x, self.weight.t())
        if self.skip_bias_add:
            return out, self.bias
        return out + self.bias, None


def _bias_dropout_add(x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return residual + F.dropout(x + bias, p=DROPOUT, training=True)


class MegatronLayer(nn.Module):
    """One GPT ``ParallelTransformerLayer`` of hidden ``hidden`` and ``heads`` heads at TP 1 (module doc)."""

    def __init__(self, hidden: int, heads: int, ffn: int, *, fused_softmax: bool = True, seq_len: int = 64,
                 dtype: torch.dtype = torch.float32):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.fused_softmax = fused_softmax
        # the causal mask get_batch builds once per micro-batch (outside the layer), used by the eager softmax path
        self.register_buffer("mask", torch.ones(1, 1, seq_len, seq_len, dtype=torch.bool).triu(1), persistent=False)
        self.ln1, self.ln2 = nn.LayerNorm(hidden, dtype=dtype), nn.LayerNorm(hidden, dtype=dtype)
        self.qkv = _Linear(hidden, 3 * hidden, skip_bias_add=False, dtype=dtype)
        self.dense = _Linear(hidden, hidden, skip_bias_add=True, dtype=dtype)
        self.fc1 = _Linear(hidden, ffn, skip_bias_add=True, dtype=dtype)
        self.fc2 = _Linear(ffn, hidden, skip_bias_add=True, dtype=dtype)

    def _core_attention(self, q, k, v) -> torch.Tensor:
        s, b, np_, hn = q.shape
        q, k = q.view(s, b * np_, -1), k.view(s, b * np_, -1)
        buf = torch.empty(b * np_, s, s, dtype=q.dtype, device=q.device)
        scores = torch.baddbmm(buf, q.transpose(0, 1), k.transpose(0, 1).transpose(1, 2),
                               beta=0.0, alpha=1.0 / math.sqrt(hn)).view(b, np_, s, s)
        probs = F.dropout(self._softmax(scores), p=DROPOUT, training=True)
        v = v.view(s, b * np_, -1)
        ctx = torch.bmm(probs.view(b * np_, s, -1), v.transpose(0, 1)).view(b, np_, s, hn)
        return ctx.permute(2, 0, 1, 3).contiguous().view(s, b, np_ * hn)

    def _softmax(self, scores: torch.Tensor) -> torch.Tensor:
        if self.fused_softmax:
            return torch.softmax(scores, dim=-1)
        x = scores.float() * 1.0  # Megatron's scale: the layer coefficient of query-key layer scaling
        return torch.softmax(x.masked_fill_(self.mask, -10000.0), dim=-1).half()

    def _attention(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s, b, _ = x.shape
        mixed, _ = self.qkv(x)
        mixed = mixed.view(s, b, self.heads, 3 * self.head_dim)
        q, k, v = torch.split(mixed, self.head_dim, dim=-1)
        return self.dense(self._core_attention(q, k, v))

    def _mlp(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inter, bias = self.fc1(x)
        return self.fc2(F.gelu(inter + bias, approximate="tanh"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, bias = self._attention(self.ln1(x))
        x = _bias_dropout_add(out, bias.expand_as(x), x)
        out, bias = self._mlp(self.ln2(x))
        return _bias_dropout_add(out, bias.expand_as(x), x)
