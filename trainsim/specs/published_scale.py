"""How far an input is from anything built: a job beyond the published record is answered with a warning.

The cost models are derived from, and validated on, clusters and batches that exist. An input far beyond them
(a 10-million-GPU job, a token count typed as a sequence count) is still answered, because the arithmetic
holds, but with a warning that says the fabric and the batch are extrapolations, not something a run has shown.

References:
* Largest published training cluster: Meta's 24K-GPU H100 clusters (24,576 GPUs each; one RoCE, one
  InfiniBand), on which Llama 3 405B trained with up to 16,384 GPUs -- Llama Team, "The Llama 3 Herd of
  Models", arXiv:2407.21783, Sec. 3.3.1. A job more than 10x that, 245,760 GPUs, is warned about.
* Largest published global batch in tokens: DeepSeek-V3, 15,360 sequences of 4,096 tokens = 62,914,560 tokens
  per step -- DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437, Sec. 4.2.
* Largest published global batch in sequences: LAMB's BERT pre-training, 65,536 sequences (of 128 tokens) --
  You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes", arXiv:1904.00962.
"""

from __future__ import annotations

LARGEST_PUBLISHED_CLUSTER_GPUS = 24_576  # Meta's Llama 3 RoCE cluster (arXiv:2407.21783, Sec. 3.3.1)
WARN_GPUS = 10 * LARGEST_PUBLISHED_CLUSTER_GPUS
LARGEST_PUBLISHED_BATCH_TOKENS = 15_360 * 4_096  # DeepSeek-V3 (arXiv:2412.19437, Sec. 4.2)
LARGEST_PUBLISHED_BATCH_SEQS = 65_536  # LAMB / BERT (arXiv:1904.00962)


def scale_warnings(num_gpus: int | None, global_batch: int | None, seq_len: int | None) -> list[str]:
    """One sentence per quantity beyond the published record (empty for anything a real run has matched)."""
    out = []
    if num_gpus is not None and num_gpus > WARN_GPUS:
        out.append(f"{num_gpus:,} GPUs is more than 10x the largest published training cluster "
                   f"({LARGEST_PUBLISHED_CLUSTER_GPUS:,} GPUs, Llama 3, arXiv:2407.21783); the fabric assumed "
                   "for it is an extrapolation no run has shown")
    if global_batch is not None and global_batch > LARGEST_PUBLISHED_BATCH_SEQS:
        out.append(f"a global batch of {global_batch:,} sequences is above any published run's "
                   f"({LARGEST_PUBLISHED_BATCH_SEQS:,}, LAMB/BERT, arXiv:1904.00962); is it a token count?")
    elif global_batch is not None and seq_len is not None and global_batch * seq_len > LARGEST_PUBLISHED_BATCH_TOKENS:
        out.append(f"a global batch of {global_batch * seq_len:,} tokens is above any published run's "
                   f"({LARGEST_PUBLISHED_BATCH_TOKENS:,}, DeepSeek-V3, arXiv:2412.19437)")
    return out
