"""The moment of the last block's unfused-softmax backward under full activation checkpointing.

With full recompute a checkpointed block keeps only its input; its backward re-runs the block's forward and
back-propagates through it (fairseq's and torch's CheckpointFunction save only the inputs, read_file id
184911184). The loss's backward runs first, so when the last block's backward reaches its attention softmax
the head's saved tensors and the loss's workspace are gone, while every block's checkpoint stays. Where the
attention is torch's own unfused softmax -- a plain ``torch.softmax`` on the ``[b·heads, sq, sk]`` scores, not
Megatron's fused ``FusedScaleMaskSoftmax`` kernels nor a flash kernel (``applies``) -- that moment holds, for
one block:

* score-sized tensors ``P = e·b·(a/tp)·sq·sk``: the saved probabilities, their gradient (the value GEMM's
  backward), ``softmax_backward_cuda``'s ``Tensor tmp = grad * output`` temporary (ATen SoftMax.cu, find_string
  ids 93421119 / 49345204161) and the scores' gradient; torch up to 1.10 also keeps the softmax input, which
  ``_softmax_backward_data(grad, result, dim, self)`` takes (pytorch/pytorch#49600, removed by #65242 for torch
  1.11; TrainingSpec.softmax_backward_keeps_input): four or five ``P``;
* token-sized tensors: q over the local queries, k and v over all keys (the unfused layout,
  activations.py), v's gradient (the value GEMM's backward ran), and four hidden-width tensors -- the first
  norm's output (the QKV projection's saved input), the block's recomputed output, its incoming gradient and
  the residual branch's gradient waiting for the attention branch's;
* under FSDP1 full sharding (ZeRO-3 by flat units): the root unit kept unsharded from forward to backward (torch
  FSDP1 and fairscale do not reshard the root after forward; fairscale ``reshard_after_forward`` False for the
  root, find_string id 1012932386) with its output layer's 16-bit gradient, and the last block's unit unsharded
  with the gradients of the weights after the attention core (out-projection and MLP), whose backward ran.

The moment replaces the activation peak's recompute working set, ZeRO-3 gather buffers and logits workspace
(memory.stage_memory); ``softmax_backward_beyond`` returns what it adds beyond them. Scope: full recompute, a
16-bit softmax (attention_softmax_fp32 false), no torch.autocast, and ZeRO below 3 or FSDP1's flat units; elsewhere
the activation peak stands. Attention dropout with p = 0 adds no tensor (ATen's dropout returns its input,
read_file id 152822613); with p > 0 its backward, which frees its mask, runs before the softmax's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainsim.specs.framework_behaviour import behaviour

from . import activations as act
from .shapes import LayerShape, layer_shape

if TYPE_CHECKING:
    from trainsim.specs import Scenario

    from .memory import RankParams

SCORE_TENSORS = 4  # probabilities, their gradient, grad * output, the scores' gradient (module doc)
HIDDEN_TENSORS = 4  # norm output, recomputed block output, incoming gradient, residual gradient (module doc)


def applies(scenario: Scenario) -> bool:
    """Whether the stage can peak at the unfused torch softmax's backward of a fully recomputed block: torch's
    own training loops (FrameworkBehaviour.torch_training_loop: FSDP1, FSDP2/DDP), whose model code calls
    torch's softmax; Megatron's and Megatron-DeepSpeed's unfused attention runs the fused scale-mask-softmax
    kernels (backward in place on the incoming gradient, nothing but the probabilities saved), and a
    ``deepspeed`` scenario does not tell which attention code it runs."""
    t = scenario.training
    fw = behaviour(t.framework)
    sharded_units_ok = t.effective_zero < 3 or not (fw.zero3_gather == "tensor" or fw.fsdp2)
    return (not t.flash_attention and fw.torch_training_loop and t.recompute == "full"
            and not t.attention_softmax_fp32 and not t.autocast and sharded_units_ok)


def working_bytes(shp: LayerShape, keeps_input: bool) -> float:
    """One block's tensors at its softmax backward (module doc): score-sized and token-sized, bytes."""
    e, heads = shp.e, shp.a // shp.tp
    sq, sk = shp.s // shp.cp, shp.s
    scores = (SCORE_TENSORS + (1 if keeps_input else 0)) * e * shp.b * heads * sq * sk
    qkv = e * shp.tokens * heads * shp.dqk + e * shp.b * sk * heads * (shp.dqk + shp.dvh)
    v_grad = e * shp.b * sk * heads * shp.dvh
    hidden = HIDDEN_TENSORS * e * shp.tokens * shp.h / shp.sp_div
    return float(scores + qkv + v_grad + hidden)


def unit_bytes(scenario: Scenario, rp: RankParams, stage: int) -> float:
    """FSDP1's unsharded units and pending gradients at the moment (module doc); 0 below ZeRO-3."""
    t, m, lay = scenario.training, scenario.model, scenario.layout
    if t.effective_zero < 3:
        return 0.0
    pb, gb = t.param_bytes, t.grad_bytes
    head_grad = m.vocab_size * m.embed_dim / lay.tp * gb if stage == scenario.loss_stage else 0.0
    qkv_bias = m.bias if m.qkv_bias is None else m.qkv_bias  # ModelSpec.attention_params' rule
    qkv_params = (m.hidden + (1 if qkv_bias else 0)) * (m.num_heads + 2 * m.kv_heads) * m.dhead / lay.tp
    after_core = max(0.0, rp.block_params - qkv_params)
    return rp.root_params * pb + head_grad + rp.block_params * pb + after_core * gb


def softmax_backward_beyond(scenario: Scenario, stage: int, rp: RankParams, details: dict) -> float:
    """Bytes by which the moment outgrows the stage's activation peak (0 where it does not, or out of scope):
    the moment's working set and units, less the head's saved tensors (freed), less what the activation peak
    holds instead (its recompute working set, ZeRO-3 gather buffers and logits workspace)."""
    if not applies(scenario):
        return 0.0
    keeps = scenario.training.softmax_backward_keeps_input
    head = act.head_activation_bytes(scenario) if stage == scenario.loss_stage else 0.0
    moment = working_bytes(layer_shape(scenario), keeps) + unit_bytes(scenario, rp, stage) - head
    instead = sum(details.get(k, 0.0) for k in ("recompute_working", "zero3_gather_buffers", "logits_workspace"))
    return max(0.0, moment - instead)
