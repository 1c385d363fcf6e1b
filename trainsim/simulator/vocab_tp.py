"""The TP collectives of Megatron's vocabulary-parallel embedding, output layer and cross-entropy, per micro-batch.

Under tensor parallelism Megatron splits the word embedding, the output layer (logits) and the cross-entropy over
the vocabulary, and each of them talks over the TP group once per micro-batch, outside the transformer blocks
(Megatron-LM and Megatron-DeepSpeed ``megatron/mpu/layers.py`` / ``megatron/core/tensor_parallel/layers.py``,
``megatron/model/language_model.py``, ``.../cross_entropy.py``):

* ``VocabParallelEmbedding.forward`` looks up the tokens of its shard and sums the partial embeddings over the TP
  ranks: ``reduce_from_tensor_model_parallel_region`` -- an all-reduce of the ``[s, b, h]`` activation forward
  (with sequence parallelism ``reduce_scatter_to_sequence_parallel_region``: a reduce-scatter); its backward is
  the identity. First pipeline stage.
* ``parallel_lm_logits`` feeds the final norm's output to the vocabulary-parallel logits GEMM through
  ``copy_to_tensor_model_parallel_region``, whose backward all-reduces the input gradient (with sequence
  parallelism the input is all-gathered forward and the gradient reduce-scattered backward). Frameworks with the
  asynchronous input-gradient reduction (``FrameworkBehaviour.tp_dgrad_overlap``: the logits layer is a
  ``LinearWithGradAccumulationAndAsyncAllreduce`` there) run it behind the logits' weight-gradient GEMM; the others
  wait for it on the compute stream. Last pipeline stage.
* ``_VocabParallelCrossEntropy.forward`` all-reduces three per-token fp32 vectors over the TP group: the logits'
  maximum (``ReduceOp.MAX``), the target's logit and the sum of the exponentials -- ``[s, b]`` x 4 bytes each,
  latency-bound calls. Its backward has none. Last pipeline stage.

The per-block collectives (builder.py) do not include these; Megatron-lineage frameworks
(``FrameworkBehaviour.model_parallel_groups``) only: torch's own TP plans (trainsim execute) shard no vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainsim.cost_models.loss_issue import CE_ALL_REDUCE_CALLS
from trainsim.specs import Scenario

from .exposures import _coll

if TYPE_CHECKING:
    from trainsim.cost_models.profile import CalibrationProfile

CE_BYTES_PER_TOKEN = 4      # each an fp32 value per token


@dataclass(frozen=True)
class VocabTp:
    """Seconds on the compute stream per micro-batch: the embedding's forward collective (first stage) and the
    output layer's and loss's forward and backward collectives (last stage)."""

    emb_fwd_s: float = 0.0
    head_fwd_s: float = 0.0
    head_bwd_s: float = 0.0


def vocab_parallel_tp(scenario: Scenario, group, profile: CalibrationProfile | None, act_msg: float,
                      tokens: int, head_wgrad_s: float, fw) -> VocabTp:
    """The vocabulary-parallel layers' TP seconds (module doc) on the TP ``group`` for one micro-batch of
    ``tokens`` tokens (``act_msg`` activation bytes); ``head_wgrad_s`` is the output layer's weight-gradient time
    that an asynchronous input-gradient reduction hides behind."""
    lay, tr = scenario.layout, scenario.training
    if lay.tp <= 1 or group is None or not fw.model_parallel_groups:
        return VocabTp()
    ce = CE_ALL_REDUCE_CALLS * sum(_coll("all_reduce", CE_BYTES_PER_TOKEN * tokens, group, scenario, profile))
    sp = tr.sequence_parallel
    emb = sum(_coll("reduce_scatter" if sp else "all_reduce", act_msg, group, scenario, profile))
    head_f = ce + (sum(_coll("all_gather", act_msg, group, scenario, profile)) if sp else 0.0)
    head_b = max(0.0, emb - head_wgrad_s) if fw.tp_dgrad_overlap else emb
    return VocabTp(emb_fwd_s=emb, head_fwd_s=head_f, head_bwd_s=head_b)

