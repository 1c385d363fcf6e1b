"""The vTrain single-node A100 measurements as validation cases (a small adapter beside the other sources').

Bang et al., "vTrain: A Simulation Framework for Evaluating Cost-effective and Compute-optimal Large Language
Model Training", MICRO 2024 (arXiv:2312.12391), publish measured Megatron iterations on one node of 8 A100s
(repository VIA-Research/vTrain, ``data/ground_truth_single.csv``). The table is parsed from that repository, so
trainsim does not bundle it: ``trainsim validate --dataset PATH`` reads it wherever it lies (the shared
validation directory of this project: ``vtrain_a100_single_node.csv``), recognised by its columns.

What the files state is used as stated (the repository's ``config/validation/single/*.json``): GPT blocks,
16 heads, sequence 1,024, full activation checkpointing (``"use_checkpoint": true``), the 1F1B schedule, no
gradient bucketing (``"use_gradient_bucket": false``: the gradients are reduced after the backward pass),
8 GPUs per node and 800 Gb/s between nodes per node (``"inter_node_bandwidth": 800``, the total per node in Gb/s by
vTrain's ``src/config.py``; it matters to the repository's multi-node table, ``data/ground_truth_multi.csv``, which
``validate --dataset`` reads as published, as it reads ``ground_truth_single.csv``). The runs were taken with
Microsoft's Megatron-DeepSpeed (the repository's ``data/README.md``), and vTrain's own profiling model is built in fp16 (``src/predictor.py``: ``torch.set_default_dtype(torch.float16)``),
so the rows are fp16. What the files do not state is chosen once for every row: the GPT-2 vocabulary (50,257,
padded by Megatron to a multiple of 128 x TP), the cluster preset ``dgx-a100`` (A100-SXM4, NVSwitch; the
repository's measured 8-GPU all-reduce table, ``trace/a100/AR_GPU8_1M_1024M_LUT``, peaks at ~220 GB/s bus
bandwidth, an NVSwitch node's), no FlashAttention (Megatron's fused softmax) and dropout 0.1 (Megatron GPT
defaults).

Framework ``megatron-deepspeed``: the behaviours of ``megatron-2021`` that Megatron-DeepSpeed's layer code shares,
and that fork's host syncs (one per block forward, one per micro-batch; cost_models.framework ``host_syncs``). Its ``megatron/mpu/layers.py`` builds ``ColumnParallelLinear.forward`` from
``copy_to_tensor_model_parallel_region`` and ``F.linear``: the input-gradient all-reduce runs inside the copy's
backward, waited for on the compute stream (no overlap with the weight-gradient GEMM), and ``F.linear``'s autograd
writes ``param.grad``, which autograd's AccumulateGrad adds into from the second micro-batch on (no fused
``main_grad`` accumulation); its ``megatron/arguments.py`` of that time has neither
``--async-tensor-model-parallel-allreduce`` nor gradient-accumulation fusion, and the later one switches the
asynchronous all-reduce off whenever DeepSpeed runs (``if args.deepspeed:
args.async_tensor_model_parallel_allreduce = False``). Gradients are all-reduced after the backward pass and
pipeline sends block, as in ``megatron-2021``. ``ParallelTransformerLayer.forward`` copies two Python scalars to
the GPU between attention and MLP (``torch.tensor(0.0, device=...)``, a blocking copy) and ``get_batch`` reads the
broadcast sizes back with ``.cpu()``: the host cannot run ahead of the GPU past either.

Each case carries its regimes (micro-batch, TP, layers) so the report prints the error per regime: the
work per kernel falls with the micro-batch and rises with 1/TP, which separates per-kernel fixed costs from
FLOP- and bandwidth-bound time. The report's structure fit reads, per (TP, micro-batch), the cost per micro-batch
outside the blocks (``c``): the head (padded-vocabulary logits GEMMs, the fork's fp32 cross-entropy passes,
megatron/core/tensor_parallel/cross_entropy.py), the embedding's dense gradient and the tied table's gradient sum.
Published ``c`` grows 1.55 ms per sequence at TP 2, below the TP 2 head's own floor (3 GEMMs of
2 x 1024 x 2048 x 25,216 = 317 GFLOP at the 312 TFLOP/s fp16 peak, 1.02 ms; 52 bytes per fp32 logit over
1024 x 25,216 logits = 1.34 GB at 2.04 TB/s, 0.66 ms), while at TP 1 it grows 8.3 ms per sequence, twice the
modelled head: no per-rank head cost fits both, so the gap at TP 1 is left open rather than fitted. The TP 1
rows with pp > 1 say the same independently: their last stage carries the head, so the slowest stage's time per
micro-batch is (L / pp) blocks plus the head, and their error grows with the number of micro-batches (pp 4, 12
layers, micro-batch 1: -7 % at 2 micro-batches, -19 % at 16), as a head about 5 ms short per sequence would make it.
The fork's head path, read from its code, adds no pass over the logits to those counted: GPTModelPipe's
``float16_to_fp32`` layer is the one ``.float()`` and ``CrossEntropy``'s ``output.contiguous().float()`` is a
no-op on it; ``_VocabParallelCrossEntropy`` is Megatron's (38 bytes per fp16 logit forward, 14 backward:
tests/test_vtrain_head.py); DeepSpeed's ``_is_checkpointable`` checkpoints GPTModelPipe's transformer layers only,
so the head is not recomputed. A per-logit pass large enough to close TP 1 (about 140 more bytes per logit at the
A100's 1.69 TB/s) would add its bytes per logit at every TP too: the per-sequence ``c`` of TP 2 / 4 / 8 would go
from 2.12 / 1.12 / 0.50 ms to about 4.2 / 2.2 / 1.0 ms against the published 1.58 / 1.52 / 1.07.
Over TP, the published cost per sequence outside the blocks against trainsim's head (8.16 / 1.56 / 1.46 / 1.12
against 4.07 / 2.13 / 1.12 / 0.46 ms at TP 1 / 2 / 4 / 8: x2.0, x0.73, x1.30, x2.4) follows the alignment of the
shards vTrain's own model builds, which do not pad (``nn.Embedding(vocab_size // world_size, hidden_size)``,
src/model/gpt_modeling.py; ``vocab_size // tensor_parallel_size`` rows, src/predictor.py; commit f8dda84): 50,257
rows at TP 1 (odd), 25,128 at TP 2 (a multiple of 8), 12,564 at TP 4 (of 4), 6,282 at TP 8 (of 2). A 16-bit GEMM
whose leading dimension is not a multiple of 8 elements runs cuBLAS's alignment-1 kernels (on an A100:
pegainfer-project/pegainfer PR #1046, ``cutlass_75_tensorop_bf16_s1688gemm_bf16_128x64_tn_align1`` for an odd
vocabulary; pytorch/pytorch issue #146817). No 16-bit A100 measurement of that slowdown was found, so the shards are
padded as Megatron pads them and no factor is modelled (one read off this table would be fitted to it);
benchmarks/device/head_alignment.py measures it on a device. Closing c would not bring the table under 8 % either:
with c's gap closed at TP 1 alone the MAPE is 9.83 %, at TP 2 / 4 / 8 alone 8.77 / 8.95 / 8.76 % (the report's
"closed at one TP degree only" line, structure.leverage_by_tp), because the published e at TP 1 sits below the
modelled one: at micro-batch 2 and 4 it leaves the block's GEMMs 3.45 / 6.53 ms for 0.89 / 1.79 TFLOP (the
non-GEMM time as modelled), 259 / 274 TFLOP/s, above the 256.5 TFLOP/s the A100's cuBLASLt reaches at 16384^3
(a100_azure), which trainsim takes as the ceiling; its tile model gives 203 / 224 TFLOP/s at these shapes. With
c and e closed together at TP 1 (term_leverage's construction on both) the MAPE is 8.38 %; with e closed at every
TP it is 5.59 % (at TP 2 alone 7.30 %).

The per-block, per-step term ``b`` (the update of one block's parameters and, at DP > 1, their all-reduce) is
over-predicted at every TP, but it is not where the error lives: the report's line "MAPE with one term's gap
closed" (structure.term_leverage) gives about 8.7 % with ``b`` closed and about 5.6 % with ``e`` closed, against
8.8 % as predicted. The published ``b`` at DP 1 is 20.1-20.8 ps per local parameter at TP 2, 4 and 8 (0.507 /
0.253 / 0.131 ms per block over 25.2 / 12.6 / 6.3 M parameters), i.e. at most 41 bytes per parameter at the
A100-80GB's 2.039 TB/s peak (the 40 GB part's 1.555 TB/s allows 31; the source files name only "A100"). Every fp16
master-weight update in the fork's code moves more: Megatron's Float16OptimizerWithFloat16Params copies the fp16
gradient to fp32 (2 + 4), unscales it (4 + 4), reads it for the L2 norm (4), runs apex's fused Adam (gradient 4,
master, m, v read and written: 28) and copies the master back (4 + 2): 52 bytes, which trainsim costs as 50 at
83 % of the peak (29.5 ps); DeepSpeed's FP16_Optimizer, which the engine wraps apex's FusedAdam in at ZeRO 0
(deepspeed/runtime/fp16/fused_optimizer.py, read_file id 186267960), adds the flattening copy and a per-tensor
overflow check (``float(x.float().sum())``, a host sync per tensor: deepspeed/runtime/utils.py ``CheckOverflow``,
find_string id 51821472028) -- about 70 bytes and a dozen syncs per block,
which the published 0.131 ms per block at TP 8 cannot hold. No code path read reproduces the published update,
so ``b`` is left at the Megatron optimizer's bytes. The published ``b`` at TP 1 is also the same at DP 2, 4 and 8
(1.49 / 1.44 / 1.42 ms per block), so no gradient all-reduce of the block's 100 MB shows there, while at TP 2 and
4 DP 2 adds 0.20 and 0.13 ms per block (the same source's nccl-tests table, trace/a100/AR_GPU2_1M_1024M_LUT, times
a 128 MB all-reduce over 2 GPUs at 0.76 ms); and the TP 1, TP 4 and TP 8 rows follow the bilinear form to about
1 us rms while TP 2's scatter by 248 us. The remaining error is in ``e``, whose published values fall with the
micro-batch at TP 4 and TP 8 (the report's checks): a scatter no per-kernel mechanism follows.

The TP all-reduces are not where ``e`` falls short: the same source's nccl-tests tables of that node
(``trace/a100/AR_GPU{2,4,8}_1M_1024M_LUT``, the times vTrain's own predictor charges per TP all-reduce) time the
blocks' 4-32 MiB all-reduces within 18 % of trainsim's (tests/test_vtrain_tp_allreduce.py), and a block charges six
of them per micro-batch (forward, recomputed forward, backward, each twice). Pairs of regimes with the same GEMM work
per GPU disagree on what doubling TP costs: published ``e`` grows 1.39 ms from TP 1 micro-batch 1 to TP 2
micro-batch 2 (six 8 MiB all-reduces on 2 GPUs measure 0.52 ms there), 1.46 ms from TP 1 micro-batch 2 to TP 2
micro-batch 4, 0.88 ms from TP 4 micro-batch 1 to TP 8 micro-batch 2, and falls 0.65 ms from TP 2 micro-batch 1 to
TP 4 micro-batch 2, though the latter has the larger all-reduces, twice the replicated norm and residual work and
twice the ranks to wait for. No cost that grows with the TP degree, the all-reduce's size or the rank count
follows both signs, so none is added for these rows.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

from trainsim.validation.cases import Case, Dataset, read_rows, scenario_or_skip
from trainsim.validation.cells import cluster as _cluster
from trainsim.validation.cells import integer as _int
from trainsim.validation.cells import num as _num

VTRAIN_COLUMNS = frozenset({"row_id", "num_gpus", "global_batch", "micro_batch", "hidden", "heads", "layers",
                            "seq_len", "tp", "dp", "pp", "step_time_s"})
VTRAIN_FILE = "vtrain_a100_single_node.csv"
VTRAIN_VOCAB = 50257  # GPT-2 BPE tokenizer (Megatron --vocab-file gpt2-vocab.json)
# Megatron-DeepSpeed pads the tokenizer's vocabulary to a multiple of make_vocab_size_divisible_by (default 128)
# times the TP degree (megatron/tokenizer/tokenizer.py ``_vocab_size_with_padding``; read_file id 9869772981), so
# each TP rank holds an equal shard of whole 128-row tiles: 50,304 rows at TP 1, 51,200 at TP 8.
VTRAIN_VOCAB_DIVISIBLE_BY = 128
VTRAIN_FRAMEWORK = "megatron-deepspeed"  # synchronous TP all-reduce, param.grad, host syncs (module doc)
# Every config/validation/*.json states "inter_node_bandwidth": 800, which vTrain's src/config.py documents as the
# "total bandwidth of inter-node communication in Gbps" of a node: the dgx-a100 preset's 8 NICs at 100 Gb/s each.
VTRAIN_NODE_GBPS = 800
VTRAIN_SEQ = 1024  # the single-node configs' "max_length"
VTRAIN_CITATION_MULTI = ('Bang et al., "vTrain: A Simulation Framework for Evaluating Cost-effective and '
                         'Compute-optimal Large Language Model Training", MICRO 2024 (arXiv:2312.12391); measured '
                         'iterations from VIA-Research/vTrain data/ground_truth_multi.csv, run settings from '
                         'config/validation/multi/*.json')
VTRAIN_CITATION = ('Bang et al., "vTrain: A Simulation Framework for Evaluating Cost-effective and Compute-optimal '
                   'Large Language Model Training", MICRO 2024 (arXiv:2312.12391); measured iterations from '
                   'VIA-Research/vTrain data/ground_truth_single.csv, run settings from '
                   'config/validation/single/*.json')


# The columns of the vTrain repository's own files (data/ground_truth_single.csv and ground_truth_multi.csv, whose
# first column states the model's size), mapped to this adapter's; their times are in milliseconds.
RAW_COLUMNS = {"# GPUs": "num_gpus", "global batch": "global_batch", "micro batch": "micro_batch",
               "hidden size": "hidden", "attention heads": "heads", "# layers": "layers",
               "sequence length": "seq_len", "tensor parallelism": "tp", "data parallelism": "dp",
               "pipeline parallelism": "pp"}
RAW_TIME_MS = "iteration time (ms)"
RAW_HEADER = frozenset(RAW_COLUMNS) | {RAW_TIME_MS}


def is_vtrain(columns: set[str]) -> bool:
    """Whether a CSV's header is the vTrain single-node table's (common-run files name ``global_batch_seqs``)."""
    return VTRAIN_COLUMNS <= columns and "global_batch_seqs" not in columns


def is_vtrain_raw(columns: set[str]) -> bool:
    """Whether a CSV's header is one of the vTrain repository's measured tables, as published (RAW_COLUMNS)."""
    return RAW_HEADER <= columns


INT_COLUMNS = ("num_gpus", "global_batch", "micro_batch", "hidden", "heads", "layers", "seq_len", "tp", "dp", "pp")
SHOWN = {k: k for k in (*INT_COLUMNS, "step_time_s")}           # this adapter's columns, as its CSV names them
RAW_SHOWN = {**{new: old for old, new in RAW_COLUMNS.items()}, "step_time_s": RAW_TIME_MS}


def row_problem(r: dict, shown: dict[str, str]) -> str | None:
    """Why a row (in this adapter's keys) cannot be predicted, naming the file's column (``shown``), or None:
    more or fewer cells than the header, a count that is not a whole number >= 1, a time that is not a positive
    finite number, or TP x PP x DP not the row's GPUs."""
    if None in r:
        return "more cells than the header"
    if any(v is None for v in r.values()):
        return "fewer cells than the header"
    for k in INT_COLUMNS:
        v = _int(r.get(k))
        if v is None or v < 1:
            return f"{shown[k]}: {r.get(k)!r} is not a whole number >= 1"
    t = _num(r.get("step_time_s"))
    if t is None or not math.isfinite(t) or t <= 0:
        return f"{shown['step_time_s']}: {r.get('step_time_s')!r} is not a positive finite number"
    tp, pp, dp, gpus = (_int(r[k]) for k in ("tp", "pp", "dp", "num_gpus"))
    if tp * pp * dp != gpus:
        return (f"{shown['tp']} x {shown['pp']} x {shown['dp']} = {tp} x {pp} x {dp} is not {shown['num_gpus']} "
                f"{gpus}")
    return None


def with_row_ids(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The rows of a vTrain repository table, each with a ``row_id`` ``vt_<n>``: its record number, the header
    being record 1 (a blank line or a quoted cell over several lines makes it differ from the line number)."""
    return [{"row_id": f"vt_{line}", **r} for line, r in enumerate(rows, 2)]


def from_raw(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The rows of a vTrain repository table (``with_row_ids``'s) in this adapter's columns, the iteration time in
    seconds; a row that cannot be predicted carries ``skip_reason`` naming the file's own column (``row_problem``)."""
    out = []
    for r in rows:
        row = {new: r.get(old) for old, new in RAW_COLUMNS.items()}
        why = row_problem({**row, "step_time_s": r.get(RAW_TIME_MS), **({None: r[None]} if None in r else {})},
                          RAW_SHOWN)
        ms = None if why else _num(r[RAW_TIME_MS])
        out.append({"row_id": r["row_id"], **row, "step_time_s": "" if ms is None else repr(ms / 1000),
                    **({"skip_reason": why} if why else {})})
    return out


def padded_vocab(vocab: int, tp: int) -> int:
    """Megatron's padded vocabulary: ``vocab`` rounded up to a multiple of 128 x ``tp`` (VTRAIN_VOCAB_DIVISIBLE_BY)."""
    multiple = VTRAIN_VOCAB_DIVISIBLE_BY * tp
    return -(-vocab // multiple) * multiple


def load_vtrain(path: Path, *, name: str = "vtrain", rows: list[dict[str, str]] | None = None):
    """The vTrain rows of ``path`` (or ``rows`` already in this adapter's columns, e.g. ``from_raw``'s) as a Dataset
    (module docstring for every choice); the title and notes say what the rows hold (one node or several, their
    sequence lengths)."""
    rows = read_rows(path, ragged=True) if rows is None else rows
    cases = tuple(_vtrain_case(r) for r in rows)
    scenarios = [c.scenario for c in cases if c.scenario is not None]
    seqs = sorted({s.training.seq_len for s in scenarios}) or [VTRAIN_SEQ]
    multi = any(s.num_gpus > s.cluster.gpus_per_node for s in scenarios)
    notes = (
        "metric: seconds per iteration as measured (the published milliseconds / 1000).",
        (f"stated by the source's run configs: GPT blocks, sequence {', '.join(map(str, seqs))}, full activation "
         "checkpointing, 1F1B, no gradient bucketing, 8 GPUs per node, 800 Gb/s of inter-node bandwidth per node."),
        ("measured with Megatron-DeepSpeed (source data/README.md) in fp16 (vTrain's profiling model is built in "
         "fp16); framework megatron-deepspeed, the behaviours of that fork's layer code (TP input-gradient all-reduce "
         "waited for on the compute stream, gradients accumulated in param.grad, a host sync per block forward and "
         "per micro-batch); chosen for every row (not stated): vocab 50,257 (GPT-2 tokenizer) padded to a multiple "
         "of 128 x TP, cluster preset dgx-a100, no FlashAttention, dropout 0.1."),
        "regimes: every row is counted under its micro-batch, its TP degree, its layer count and its width.",
    )
    title = ("vTrain: Megatron GPT on 8xA100 nodes (MICRO 2024)" if multi
             else "vTrain: Megatron GPT on one 8xA100 node (MICRO 2024)")
    return Dataset(name=name, title=title, metric="step_time_s", unit="s",
                   citation=VTRAIN_CITATION_MULTI if multi else VTRAIN_CITATION, notes=notes, cases=cases,
                   structure=True)


@functools.cache
def _node_nic_Bps() -> float:
    """Bytes per second of each of the dgx-a100 preset's NICs at the configs' stated node total
    (VTRAIN_NODE_GBPS)."""
    from trainsim.specs.loaders import load_cluster

    return VTRAIN_NODE_GBPS * 1e9 / 8 / load_cluster("dgx-a100").scale_out.nics_per_node


def _vtrain_case(r: dict):
    rid = r["row_id"]
    why = r.get("skip_reason") or row_problem(r, SHOWN)
    published = _num(r.get("step_time_s"))
    if why:
        return Case(rid, rid, published if published and published > 0 else float("nan"), skip_reason=why)
    gpus, gbs, mbs, hidden, heads, layers, seq, tp, dp, pp = (_int(r[k]) for k in INT_COLUMNS)
    label = f"L{layers} n={gpus} tp{tp} pp{pp} dp{dp} mb{mbs} gb{gbs}"
    raw = {
        "model": {"name": f"gpt-h{hidden}-l{layers}", "num_layers": layers, "hidden": hidden, "num_heads": heads,
                  "ffn_hidden": 4 * hidden, "vocab_size": padded_vocab(VTRAIN_VOCAB, tp),
                  "max_seq_len": seq},
        "cluster": _cluster("dgx-a100", gpus, scale_out={"nic_bw_Bps": _node_nic_Bps()}),
        "layout": {"tp": tp, "pp": pp},
        "training": {"seq_len": seq, "global_batch": gbs, "micro_batch": mbs, "dtype": "fp16",
                     "recompute": "full", "sequence_parallel": False, "zero": 0, "schedule": "1f1b",
                     "flash_attention": False, "dropout": True, "framework": VTRAIN_FRAMEWORK},
    }
    scenario, why = scenario_or_skip(raw, rid)
    regimes = (f"micro-batch {mbs}", f"TP {tp}", f"layers {layers}", f"hidden {hidden}")
    return Case(rid, label, published, scenario=scenario, skip_reason=why, category=f"micro-batch {mbs}",
                regimes=regimes)
