"""Megatron's GPT output head and loss at TP 1, written op for op as its eager code issues them, for op counting.

``trainsim.kernels.op_count`` counts the aten ops this module dispatches under FakeTensorMode
(``count_megatron_head_ops``: cost_models.loss_issue.HEAD_LOSS_OPS), as ``megatron_block`` does for the layer. It
follows Megatron-DeepSpeed on the path its GPT runs take after the last transformer layer, sequence-major
``[s, b, h]``:

* the encoder's final layer norm (one fused kernel, apex's ``FusedLayerNorm``);
* ``parallel_lm_logits``: ``copy_to_tensor_model_parallel_region`` (identity forward; its backward all-reduces
  the input gradient, counted apart as a TP collective) and ``F.linear`` of the input against the tied word
  embedding, no bias;
* ``post_language_model_processing``: the logits cast to fp32 (``output.float()``, no ``--fp16-lm-cross-entropy``)
  into ``vocab_parallel_cross_entropy`` (``megatron/core/tensor_parallel/cross_entropy.py``, read_file id
  20787179573): the maximum over the vocabulary, its subtraction, the target mask of the shard's vocabulary range
  (``<``, ``>=``, ``|``), the shifted target (``clone() - start``, ``masked_target[target_mask] = 0``), the target
  logits gathered by ``logits_2d[arange_1d, masked_target_1d]`` and cloned, zeroed outside the shard, ``exp``,
  ``sum``, ``log(sum) - predicted``, the softmax kept for the backward (``div_``); backward: the saved softmax
  minus one at the targets (``grad_2d[arange_1d, masked_target_1d] -= softmax_update``) times the loss gradient.
  Its three TP all-reduces are counted apart (``loss_issue.CE_ALL_REDUCE_CALLS``);
* ``loss_func`` (pretrain_gpt.py, read_file id 20367238795): ``losses.float()``, ``loss_mask.view(-1).float()``,
  ``torch.sum(losses.view(-1) * loss_mask) / loss_mask.sum()``;
* the fp16 loss scaling before ``backward`` (Megatron's ``optimizer.scale_loss``: ``loss * scale``).

The fp16 tensors of training are fp32 here where the counts do not depend on the dtype; the logits' cast to fp32
dispatches a copy either way (``_to_copy``), as there.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

LOSS_SCALE = 4096.0  # any loss scale: one multiply either way


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Megatron's vocabulary-parallel cross-entropy at TP 1 (module doc), the all-reduces left out."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logits_max = torch.max(logits, dim=-1)[0]
        logits = logits - logits_max.unsqueeze(dim=-1)
        vocab = logits.size()[-1]
        start, end = 0, vocab
        target_mask = (target < start) | (target >= end)
        masked_target = target.clone() - start
        masked_target[target_mask] = 0
        logits_2d = logits.view(-1, vocab)
        masked_target_1d = masked_target.view(-1)
        arange_1d = torch.arange(start=0, end=logits_2d.size()[0], device=logits_2d.device)
        predicted_1d = logits_2d[arange_1d, masked_target_1d]
        predicted_1d = predicted_1d.clone().contiguous()
        predicted = predicted_1d.view_as(target)
        predicted[target_mask] = 0.0
        exp_logits = torch.exp(logits)
        sum_exp = exp_logits.sum(dim=-1)
        loss = torch.log(sum_exp) - predicted
        exp_logits.div_(sum_exp.unsqueeze(dim=-1))
        ctx.save_for_backward(exp_logits, target_mask, masked_target_1d)
        return loss

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        softmax, target_mask, masked_target_1d = ctx.saved_tensors
        grad_input = softmax
        vocab = softmax.size()[-1]
        grad_2d = grad_input.view(-1, vocab)
        arange_1d = torch.arange(start=0, end=grad_2d.size()[0], device=grad_2d.device)
        softmax_update = 1.0 - target_mask.view(-1).float()
        grad_2d[arange_1d, masked_target_1d] -= softmax_update
        grad_input.mul_(grad_output.unsqueeze(dim=-1))
        return grad_input, None


class MegatronHead(nn.Module):
    """Final layer norm, logits against the tied embedding, fp32 vocabulary-parallel loss, masked mean and loss
    scale for a micro-batch of ``micro_batch`` sequences of ``seq_len`` tokens. The labels and the loss mask are
    ``get_batch``'s (built before the model runs: host_issue.SYNC_LEAD_MICROBATCH), so they are made here once."""

    def __init__(self, hidden: int, vocab: int, *, seq_len: int = 64, micro_batch: int = 1) -> None:
        super().__init__()
        self.final_layernorm = nn.LayerNorm(hidden)
        self.word_embeddings_weight = nn.Parameter(torch.randn(vocab, hidden) * 0.02)
        self.register_buffer("labels", torch.zeros(seq_len, micro_batch, dtype=torch.long), persistent=False)
        self.register_buffer("loss_mask", torch.ones(micro_batch, seq_len), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.final_layernorm(x)
        logits = F.linear(hidden, self.word_embeddings_weight)
        losses = _VocabParallelCrossEntropy.apply(logits.float(), self.labels)
        losses = losses.float()
        mask = self.loss_mask.view(-1).float()
        loss = torch.sum(losses.view(-1) * mask) / mask.sum()
        return loss * LOSS_SCALE
