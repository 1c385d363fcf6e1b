"""Host (CPU) time to issue a block's kernels in eager PyTorch, and the GPU idle it causes. Pure.

A GPU stream runs only what its host has enqueued: in eager PyTorch every aten op is dispatched from Python
(or from the C++ autograd engine in backward) and every kernel launched by ``cudaLaunchKernel``, one after
the other on one CPU thread per rank. Where issuing a pass over a chunk takes the host longer than the GPU
needs to run it, the GPU idles and the pass lasts as long as its issue:

    effective pass time = max(GPU time of the pass, host issue time of the pass)

(the host runs ahead of the GPU while it can, so the two overlap and only the excess shows; a chunk pass is
the unit because Megatron's schedules synchronise host and GPU at most at pipeline sends and collectives
between passes).

Counts per block and micro-batch (``BLOCK_OPS``): the aten ops the executor's block
(``trainsim.kernels.torch_model.Block``) dispatches in eager mode, forward and backward, and how many of them
launch a kernel (the rest are views: ``view``, ``t``, ``transpose``, ``detach``, ``expand``, ...). They were
counted with a dispatch-mode counter under torch's FakeTensorMode (``trainsim.kernels.op_count``); they do not
depend on the width, and ``tests/test_host_issue_time.py`` holds these numbers against the counter. A recomputed
forward (full recompute) issues the forward's ops again before the backward; selective recompute issues again the
forwards of the modules it recomputes (``RECOMPUTED_MODULE_OPS``, counted the same way per module: the attention
core, the MLP, the norms). The checkpoint's own Python work around a recomputed module is priced for Megatron's
legacy layer (its reentrant checkpoint call, cost_models.legacy_layer_wrappers) and not for other blocks; torchtitan's
per-op policy (op_sac) re-issues op by op and is not counted.

Seconds per op on an x86 host (``ATEN_DISPATCH_S``, ``KERNEL_LAUNCH_S``):

* 3.3 us per aten op dispatched from Python: PyTorch's operator micro-benchmark timed an eager ``split``
  (views only, no kernel) on CUDA tensors at 3.33-3.47 us per call (pytorch/pytorch PR #32194, "Forward
  Execution Time (us)" before the change);
* 3.8 us more per op that launches a kernel: NVIDIA's "Getting Started with CUDA Graphs" (A. Gray, 2019)
  measured back-to-back stream launches of a 2.9 us kernel at 3.8 us per kernel, launch-bound.

Cross-check (independent measurement): one ``torch.nn.Linear`` forward is ``t`` + ``addmm`` (+ a ``view``
for 3-D inputs), 3 x 3.3 + 3.8 = 13.7 us, against the 13.5 us Transformer Engine issue #2053 measured for the
CPU side of a BF16 ``nn.Linear`` forward on a Xeon Platinum 8480C. A Grace host is 2.6x slower per op (the same
issue: 33-37 us), as ``cost_models.host`` states. For Megatron's layer at TP 8 the counted forward (0.32 ms, see
"Megatron's layer") lies inside the bracket that facebookresearch/metaseq PR #270 measured on OPT-175B (96
Megatron-style layers, TP 8, 8 A100s): ~95 ms per decoded token eager, ~66 ms as one CUDA graph, i.e. at least
0.30 ms of exposed host time per layer forward and at most 0.99 ms of issue time.

A GPU calibration profile (``trainsim calibrate --device cuda``) times the executor's tiny blocks on the GPU,
whose kernels do ~no work, so the time is the host's issue time of a block pass (``host_issue``); it replaces the
counted seconds for that block style. Without it, a profile's CPU eager overhead (``eager_overhead``: per
modelled op x the block's modelled ops, ``compute.eager_overhead_s``) stands in for the host's time.

Megatron's layer: frameworks that run Megatron's legacy ``ParallelTransformerLayer``
(``FrameworkBehaviour.megatron_layer``: megatron-2021, megatron-2022) issue more forward ops than the
executor's block where attention is not FlashAttention: the unfused core attention (``baddbmm`` into a
preallocated buffer, softmax, attention dropout, ``bmm``, ``permute().contiguous()`` and their views), biases
added apart from the GEMMs and two bias-dropout-adds. ``trainsim.kernels.megatron_block`` writes that layer op
for op from Megatron-DeepSpeed's ``megatron/model/transformer.py``; the counter gives 59 ops / 30 kernels
forward and 87 / 28 backward (``"megatron-gpt-unfused"``) against the executor block's 39 / 12 and 94 / 26.
Megatron's ``FusedScaleMaskSoftmax`` runs its fused kernel only where the kernel's constraints hold
(``megatron_fused_softmax``: fp16/bf16 scores, more than 16 keys, the query length and ``b * np`` -- micro-batch
times heads per TP rank -- multiples of 4; Megatron-DeepSpeed ``megatron/model/fused_softmax.py``, read_file id
20226917267, the same ``attn_batches % 4`` rule in every Megatron version found, e.g. find_string id 25104479622);
elsewhere, e.g. 16 heads at TP 8 and micro-batch 1 (2 attention batches), it takes its eager path: the cast to
fp32, the scale, ``masked_fill_``, ``Softmax`` and the cast back, 63 / 34 forward and 91 / 32 backward
(``"megatron-gpt-unfused-eager-softmax"``, counted on fp16 tensors). The version-dependent upper bound on the key
length (2,048 in Megatron-DeepSpeed, 4,096 in later Megatron-LM) is not applied, and the eager path's extra fp32
HBM passes over the ``b x np x s x s`` scores are not added to the GPU time (the generic softmax op stands for
them; where the path applies the scores are small: 8 MB in fp32 at s = 1,024 with 2 attention batches).
Host work outside aten dispatch -- the legacy layer's Python ``autograd.Function`` wrappers (TP region mappings,
apex's layer norm, the fused softmax, the bias-GeLU, 2022's async linears), its TorchScript calls, the RNG-tracker
fork around attention dropout and, under full recompute, each block's reentrant ``CheckpointFunction`` call -- is
counted per call from the layer code and priced in unit aten ops as ``kernels/host_wrappers_bench.py`` measured
them (``legacy_wrapper_s``, cost_models.legacy_layer_wrappers), at the TP pace and without the frame ratios below
(the measured prices carry their own Python frames). None of it synchronises with the device
(``torch.cuda.get_rng_state`` copies the generator's seed and offset on the host).

Host syncs (``FrameworkBehaviour.block_forward_syncs`` / ``microbatch_syncs`` / ``chunk_forward_syncs``,
cost_models.framework ``host_syncs``): a blocking host-device sync drains the GPU's queue, so the host cannot be
ahead when it returns; the GPU then idles until the host has issued the next kernel that does work. That lead-in
is counted from the code after the sync, at the same per-op seconds, and charged as GPU idle per sync (where the
host is the bottleneck the sync costs instead the GPU's tail after the host's last issue, of the same order; the
lead-in stands for both). A sync in every block forward also bounds how far the host runs ahead: a block's host
excess over its own GPU time is idle on its own, and the chunk's other GPU work (embedding, logits, loss) cannot
hide it (``chunk_idle_s``):

* per block forward (``SYNC_LEAD_BLOCK``, Megatron-DeepSpeed's ``ParallelTransformerLayer.forward``): the second
  scalar, ``mlp_bias = torch.tensor(0.0, device=...)`` (``lift_fresh``, ``_to_copy``: 2 dispatches and its
  copy), then ``dense_h_to_4h``'s ``torch.matmul(input, weight.t())`` up to its GEMM (``t``, ``view``, ``mm``:
  3 dispatches, 1 kernel): 5 dispatches, 2 launches (the dispatch counter sees exactly these ops,
  ``tests/test_host_issue_time.py``). A recomputed forward pays it again.
* the block forward's sync waits for the GPU to drain, and what it drains ends with the attention's output
  collective: Megatron-DeepSpeed's layer runs ``self_attention`` (whose ``RowParallelLinear`` all-reduces its
  output), ``bias_dropout_add``, ``post_attention_layernorm`` and then creates the scalars. Where the pass is
  host-bound, the GPU starts that collective only once the slowest rank's host has launched it (a TP collective
  completes only when every rank has joined), so the sync returns a collective's time after that launch, of which
  the host's own issue of the ops in between (``SYNC_TAIL_HOST``: the bias-dropout-add's ``expand``, ``add``,
  ``native_dropout``, ``add``, the layer norm, the first scalar's ``lift_fresh`` and copy: 7 dispatches,
  5 launches) hides a part: the rest (``sync_tail_s``) adds to the host's time of the pass (``chunk_idle_s``). The
  kernels in between (a few microseconds each) are not added.
* per micro-batch (``SYNC_LEAD_MICROBATCH``, from the first sync of ``broadcast_data``, the sizes copied to the
  GPU as ``get_accelerator().LongTensor(sizes)``, to the first block's QKV GEMM; pretrain_gpt.py ``get_batch``,
  megatron/utils.py ``get_ltor_masks_and_position_ids`` with its defaults, megatron/model/language_model.py
  ``Embedding``): the sizes' broadcast and ``.cpu()`` copy back (2 dispatches, 2 launches or copies), unpacking
  the sizes from the CPU tensor
  (3 x (``select``, ``gt``) and 2 ``mul``: 8 CPU dispatches), packing and copying the tokens to the GPU
  (``contiguous``, ``view``, ``cat``, ``_to_copy``: 4, 1 copy), the broadcast (1, 1), ``narrow`` and ``view``
  (2), ``long`` and the two shifted ``contiguous`` token tensors (7, 2), the masks and positions (``ones``,
  ``tril``, ``view``, ``ones``, ``arange``, ``unsqueeze``, ``expand_as``, ``lt``: 8, 5), the word and position
  embeddings, their sum, the transpose to ``[s, b, h]`` and the embedding dropout (6, 5), the checkpoint's RNG
  state copies, the first layer norm and the QKV ``t``, ``view``, ``mm`` (7, 2): 45 dispatches, 18 launches. Under
  TP the vocab-parallel embedding masks the tokens outside its shard and all-reduces (``lt``, ``ge``, ``or``,
  ``clone``, ``sub``, ``masked_fill_``, ``index_put_``, ``all_reduce``: 8 more of each). The kernels in between
  (token copies, masks, embedding lookups of one micro-batch) do too little work to hide the host.
* per forward of a model chunk that does not start the micro-batch (``SYNC_LEAD_CHUNK``; Megatron-LM 2021-2022
  runs ``get_batch`` in every chunk's forward on every stage, specs/framework_behaviour.py ``host_syncs``): the
  micro-batch's lead-in without the embeddings (6, 5) and without the checkpoint's RNG state copies (3, 0): the
  sizes' round trip, the tokens' broadcast, the masks and positions, the chunk's first layer norm and QKV GEMM:
  36 dispatches, 13 launches.

Per-parameter hooks (``ddp_hook_adds``): Megatron-LM's local DDP (megatron/model/distributed.py of 2021-2022,
``_make_param_hook``; the same in Megatron-Core's ``_make_backward_post_hook``, find_string ids 1654539297 and
983298283) registers a hook on every parameter's AccumulateGrad node that runs, each micro-batch's backward,
``param.main_grad.add_(param.grad.data)`` where autograd produced a ``param.grad``: one dispatch and one kernel
per such tensor. megatron-2021 (``grad_accumulation_pass``) does it for every tensor of Megatron's layer (fused
QKV, out-projection, two MLP linears, their biases, two norms); megatron-2022's gradient-accumulation fusion lets
the linears' wgrad GEMMs write ``main_grad`` ("The gradient function of linear layers is fused with GEMMs"), so
only biases and norms pass through the hook. The hook's own Python frame has no measurement of its own; it enters
only through ``MODULE_FRAME_RATIO`` where that applies.

Python frames (``MODULE_FRAME_RATIO``): a whole block pass costs its host more than its aten dispatches and
launches -- module ``__call__`` and hook frames, the autograd graph's nodes (the executor's block has no Python
``autograd.Function`` of its own; the legacy layer's are priced apart, above). The one
whole-pass timing on a GPU host with the op count known is the calibrated executor block's forward: 0.329 ms
median on an H200 host (``trainsim calibrate --device cuda``, benchmarks/data/profile_h200.json) against its
counted 174 us, 1.89x. Frameworks that run Megatron's legacy Python layer (``FrameworkBehaviour.megatron_layer``)
are charged their counted forward seconds (forward passes, recomputed forwards and the sync lead-ins) times that
ratio where no profile measured the host. The single-call backward timing (1.72 ms against 0.41 counted) is not
used per block: it is one ``backward()`` call per block there, so it holds the autograd engine's start per call,
which a training step pays once per micro-batch. The backward's per-block cost is measured apart, without that
start: the executor's GPT chunk timed at 2 and 8 blocks (``kernels/host_issue_bench.py``, gradients held so every
AccumulateGrad adds, as from a step's second micro-batch on) gives a slope of 1.225 ms per block backward on the
same H200 host (``profile_h200.json`` ``host_issue_chunk``), 3.00x its counted 0.41 ms
(``BACKWARD_FRAME_RATIO``): the autograd engine's per-node work (graph-task bookkeeping, input buffers, stream
guards, the saved-tensor unpacking of each node) is host time the aten dispatch count does not see, and the
backward has no module frames to share it with the forward's ratio. The legacy layer's own backward (its ops, TP
collectives and DDP hooks) is charged at that ratio. With the ratios, the TP 8 Megatron layer forward is 0.61 ms
(0.92 ms at the pace of 8 ranks, ``host_jitter``), inside metaseq PR #270's 0.30-0.99 ms bracket above, and its
own backward 1.22 ms (1.49 ms at the pace of 8 ranks). The ratio rests on one block style
(GPT) timed on one host (the H200 machine's Xeon) and carries that host's speed relative to the older x86 sources
of ``ATEN_DISPATCH_S`` / ``KERNEL_LAUNCH_S``; the same profile's Llama block gives 2.41 forward (single call) and
1.15 backward (chunk slope, 0.865 ms against 0.752 counted), so the ratios are estimates of Python-frame and
autograd-engine cost for the GPT block style that Megatron's legacy layer shares, not constants of every block. Megatron-Core (``megatron``) runs Transformer Engine's layers and keeps
the counted seconds.

TP pace (``tp_paced``, cost_models.host_jitter): under TP every rank's pass waits for its peers at each TP
collective, so a host-bound pass lasts the expected slowest of the ``tp`` ranks' issue times, not their mean.

Scenario settings that cut the count (``TrainingSpec.host_issue``): ``"cuda_graphs"`` captures each block's
forward and backward as graphs, so the host launches one graph per block and pass (``KERNEL_LAUNCH_S`` each);
``"compile"`` (torch.compile / Inductor; also what ``TrainingSpec.compile`` implies) drops the views and the Python
dispatch of the captured ops and fuses the pointwise and norm ops between the GEMMs and attention, leaving one
launch per compiled kernel (cost_models.compiled_issue). Megatron's own fusions (fused bias-GeLU, bias-dropout-add, softmax) are not counted
separately: the executor's block has no dropout and one SDPA attention kernel, so it is a floor for Megatron.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from trainsim.specs.framework_behaviour import behaviour

from .compiled_issue import compiled_kernel_count
from .framework import autocast_tag
from .host_jitter import MEASURED_FWD, measured_sigma, pace
from .legacy_layer_wrappers import WrapperSeconds, block_wrapper_s, layer_calls
from .loss_issue import head_idle_s
from .param_tensors import block_tensors, module_style
from .shapes import layer_shape

if TYPE_CHECKING:
    from trainsim.specs import Scenario

    from .profile import CalibrationProfile, ChunkHostIssue
    from .shapes import LayerShape

ATEN_DISPATCH_S = 3.3e-6
KERNEL_LAUNCH_S = 3.8e-6
GRACE_SLOWDOWN = 35.0 / 13.5   # TE issue #2053: nn.Linear forward CPU time, Grace vs Xeon 8480C


def op_seconds(host_cpu: str = "x86") -> tuple[float, float]:
    """(seconds per dispatched aten op, extra seconds per kernel launch) on a ``host_cpu`` host."""
    scale = GRACE_SLOWDOWN if host_cpu == "grace" else 1.0
    return ATEN_DISPATCH_S * scale, KERNEL_LAUNCH_S * scale


def issue_s(ops: float, kernels: float, host_cpu: str = "x86") -> float:
    """Host seconds to issue ``ops`` aten ops of which ``kernels`` launch a kernel, in eager mode:
    ``ATEN_DISPATCH_S`` per op and ``KERNEL_LAUNCH_S`` more per kernel (module doc)."""
    dispatch, launch = op_seconds(host_cpu)
    return ops * dispatch + kernels * launch


# (forward aten ops, forward kernels, backward aten ops, backward kernels) per block and micro-batch, by the
# block style of cost_models.eager.block_style (counted by trainsim.kernels.op_count, see module doc;
# `python -m trainsim.kernels.op_count` counts every row again).
BLOCK_OPS = {
    "layernorm-gelu-learned": (39, 12, 94, 26),
    "rmsnorm-swiglu-rope": (85, 48, 144, 73),
    # Megatron's legacy GPT layer without FlashAttention (trainsim.kernels.megatron_block, see "Megatron's layer")
    "megatron-gpt-unfused": (59, 30, 87, 28),
    # ... where its fused softmax kernel does not apply and FusedScaleMaskSoftmax runs its eager path (module doc)
    "megatron-gpt-unfused-eager-softmax": (63, 34, 91, 32),
}
# (forward aten ops, forward kernels) of each Megatron-Core --recompute-modules module one block of a style has, which
# its selective recompute issues again before the backward (counted by trainsim.kernels.op_count
# count_recomputed_module_ops: the executor block's SDPA core, MLP and two norms; the legacy layer's core attention
# from q, k, v to the relaid-out context, its MLP and two layer norms). Modules a style lacks re-issue nothing here.
RECOMPUTED_MODULE_OPS = {
    "layernorm-gelu-learned": {"core_attn": (2, 1), "mlp": (9, 3), "layernorm": (2, 2)},
    "rmsnorm-swiglu-rope": {"core_attn": (2, 1), "mlp": (14, 5), "layernorm": (14, 12)},
    "megatron-gpt-unfused": {"core_attn": (22, 9), "mlp": (10, 4), "layernorm": (2, 2)},
    "megatron-gpt-unfused-eager-softmax": {"core_attn": (26, 13), "mlp": (10, 4), "layernorm": (2, 2)},
}
# Megatron's fused scaled-masked-softmax kernel needs ``b * np`` (micro-batch x heads per TP rank) and the query
# length to be multiples of 4, more than 16 keys and fp16/bf16 scores (module doc, "Megatron's layer").
FUSED_SOFTMAX_MULTIPLE = 4
FUSED_SOFTMAX_MIN_KEYS = 16
# Host seconds of a whole eager block pass over its counted aten dispatch and launch seconds, as measured on a
# GPU host (module doc, "Python frames"): the executor's GPT block forward, 0.329 ms median (trainsim calibrate
# --device cuda on an H200 host, benchmarks/data/profile_h200.json host_issue; host_jitter.MEASURED_FWD) against
# its counted 39 x 3.3 + 12 x 3.8 = 174.3 us: 1.89.
MODULE_FRAME_RATIO = MEASURED_FWD[0] / issue_s(*BLOCK_OPS["layernorm-gelu-learned"][:2])
# Host seconds of one block's backward inside a running backward pass over its counted seconds (module doc, "Python
# frames"): the slope of the executor's GPT chunk timed at 2 and 8 blocks with the gradients held, 1.225 ms per
# block (trainsim calibrate --device cuda on an H200 host, benchmarks/data/profile_h200.json
# host_issue_chunk["layernorm-gelu-learned"].block_bwd_s), against its counted 94 x 3.3 + 26 x 3.8 = 408.8 us: 3.00.
MEASURED_BWD_SLOPE_S = 0.001225295960903168
BACKWARD_FRAME_RATIO = MEASURED_BWD_SLOPE_S / issue_s(*BLOCK_OPS["layernorm-gelu-learned"][2:])
# Host seconds torch's non-reentrant checkpoint adds to one block's backward under full recompute, beyond the
# recomputed forward and the plain backward (its saved-tensor pack and unpack hooks, the recomputation's frame; a
# count of saved tensors, not of their size), per block style and autocast (FrameworkBehaviour.checkpoint_hooks): the
# executor's blocks timed at two depths on an H200 host (trainsim calibrate --device cuda,
# benchmarks/data/profile_h200.json host_issue_chunk), full-recompute backward less backward less forward. The
# checkpoint's forward-side cost (the forward under its hooks) is not in that measurement, which keeps no
# full-recompute forward timing.
CHECKPOINT_HOOKS_S = {"layernorm-gelu-learned": 0.0009616639316081998,
                      "layernorm-gelu-learned+autocast-bf16": 0.0007374080618222557,
                      "rmsnorm-swiglu-rope": 0.002472464084625243,
                      "rmsnorm-swiglu-rope+autocast-bf16": 0.0012813893357912702}


def checkpoint_hooks_s(style: str, autocast: bool, host_cpu: str = "x86") -> float:
    """Host seconds torch's non-reentrant checkpoint adds to one block's backward (``CHECKPOINT_HOOKS_S``: the
    style's measurement, under autocast the autocast one; a style not measured takes the GPT block's), scaled from
    the measuring x86 host to ``host_cpu`` as the per-op seconds are."""
    key = style if style in ("layernorm-gelu-learned", "rmsnorm-swiglu-rope") else "layernorm-gelu-learned"
    scale = op_seconds(host_cpu)[0] / ATEN_DISPATCH_S
    return CHECKPOINT_HOOKS_S[key + ("+autocast-bf16" if autocast else "")] * scale


# The executor's block under bf16 autocast (trainsim execute on a GPU: fp32 weights, torch.autocast around the
# step's micro-batches), counted the same way under CPU autocast, whose lower-precision list casts the same linears
# (aten addmm/mm): (first forward ops, kernels, later forward ops, kernels). The first forward of a step casts every
# weight and bias to bf16; autocast caches those casts of leaf tensors until the autocast region ends
# (torch/csrc/autograd/autocast_mode: ``cached_cast``), so the step's later micro-batches cast only activations.
BLOCK_OPS_AUTOCAST = {
    "layernorm-gelu-learned": (55, 28, 43, 16),
    "rmsnorm-swiglu-rope": (101, 64, 94, 57),
}
# A TP collective issued from Python (torch.distributed call on the NCCL process group): one dispatch and one
# kernel launch, as any other op.
COLLECTIVE_OPS = (1, 1)
# (aten dispatches, kernel launches or copies) the host issues after a sync before the GPU has work again (module
# doc, "Host syncs"): per block forward, per micro-batch, and what TP adds to the micro-batch's (vocab-parallel
# embedding).
SYNC_LEAD_BLOCK = (2 + 3, 1 + 1)
SYNC_LEAD_MICROBATCH = (2 + 8 + 4 + 1 + 2 + 7 + 8 + 6 + 7, 2 + 0 + 1 + 1 + 0 + 2 + 5 + 5 + 2)
SYNC_LEAD_VOCAB_PARALLEL = (8, 8)
# A chunk forward's lead-in where the chunk does not start the micro-batch: SYNC_LEAD_MICROBATCH less the word and
# position embeddings with their sum, transpose and dropout (6, 5) and the checkpoint's RNG state copies (3, 0).
SYNC_LEAD_CHUNK = (SYNC_LEAD_MICROBATCH[0] - 6 - 3, SYNC_LEAD_MICROBATCH[1] - 5)
# (aten dispatches, kernel launches or copies) the host issues between the attention's output all-reduce and the
# block forward's sync (module doc, "Host syncs"): bias-dropout-add 4 / 3, layer norm 1 / 1, the scalar 2 / 1.
SYNC_TAIL_HOST = (4 + 1 + 2, 3 + 1 + 1)


@dataclass(frozen=True)
class PassIssue:
    """Host seconds to issue one block's forward and backward for one micro-batch (recompute included)."""

    fwd_s: float
    bwd_s: float
    fwd_ops: int
    bwd_ops: int
    sync_fwd_s: float = 0.0         # GPU idle after the host syncs of one block's forward (module doc)
    sync_bwd_s: float = 0.0         # ... of its backward pass (the recomputed forward's)
    microbatch_sync_s: float = 0.0  # ... after the micro-batch's sync, before the first block
    chunk_sync_s: float = 0.0       # ... after the sync of a chunk forward that does not start the micro-batch
    microbatch_fwd_s: float = 0.0   # host seconds per micro-batch outside the blocks: embedding, head, loss, start
    microbatch_bwd_s: float = 0.0   # ... of its backward (the loss's and head's backward, the autograd engine's start)
    sync_overlap_s: float = 0.0     # host seconds between the collective a block forward's sync drains and the sync


def issue_style(style: str, *, megatron_layer: bool, flash: bool, fused_softmax: bool = True) -> str:
    """Key of ``BLOCK_OPS`` for a block of ``style``: Megatron's unfused GPT layer where the framework runs it
    without FlashAttention (with its eager softmax path where the fused kernel does not apply), else the
    executor's block of that style."""
    if megatron_layer and not flash and style == "layernorm-gelu-learned":
        return "megatron-gpt-unfused" if fused_softmax else "megatron-gpt-unfused-eager-softmax"
    return style


def megatron_fused_softmax(shp: LayerShape) -> bool:
    """Whether Megatron's ``FusedScaleMaskSoftmax`` runs its fused kernel for a block of shape ``shp`` (module doc,
    "Megatron's layer"): fp16/bf16 scores, more than 16 keys, query length and ``b * np`` multiples of 4."""
    attn_batches = shp.b * (shp.a // shp.tp)
    sq = shp.s // shp.cp
    return (shp.dtype in ("fp16", "bf16") and shp.s > FUSED_SOFTMAX_MIN_KEYS
            and sq % FUSED_SOFTMAX_MULTIPLE == 0 and attn_batches % FUSED_SOFTMAX_MULTIPLE == 0)


def block_counts(style: str) -> tuple[int, int, int, int]:
    """(fwd ops, fwd kernels, bwd ops, bwd kernels) of one block; an unknown style gets the GPT block's."""
    return BLOCK_OPS.get(style, BLOCK_OPS["layernorm-gelu-learned"])


def with_collectives(counts: tuple[int, int, int, int], calls: tuple[int, int]) -> tuple[int, int, int, int]:
    """(fwd ops, fwd kernels, bwd ops, bwd kernels) ``counts`` plus (forward, backward) ``calls`` collective calls,
    one dispatch and one launch each (``COLLECTIVE_OPS``)."""
    f_ops, f_k, b_ops, b_k = counts
    return (f_ops + calls[0] * COLLECTIVE_OPS[0], f_k + calls[0] * COLLECTIVE_OPS[1],
            b_ops + calls[1] * COLLECTIVE_OPS[0], b_k + calls[1] * COLLECTIVE_OPS[1])


def eager_issue_s(counts: tuple[int, int, int, int], host_cpu: str = "x86") -> tuple[float, float]:
    """(forward, backward) host seconds to issue (fwd ops, fwd kernels, bwd ops, bwd kernels) ``counts`` in eager
    mode (``issue_s`` of each pass)."""
    f_ops, f_k, b_ops, b_k = counts
    return issue_s(f_ops, f_k, host_cpu), issue_s(b_ops, b_k, host_cpu)


def paced_s(fwd_s: float, bwd_s: float, tp: int, sigma: tuple[float, float]) -> tuple[float, float]:
    """(forward, backward) host seconds at the pace of the slowest of ``tp`` ranks' hosts (cost_models.host_jitter):
    ``pace(tp, sigma_fwd)`` and ``pace(tp, sigma_bwd)`` times the one rank's; the TP collectives of every pass make
    the ranks wait for one another."""
    return fwd_s * pace(tp, sigma[0]), bwd_s * pace(tp, sigma[1])


def block_issue(style: str, *, recompute_full: bool, tp_collectives: tuple[int, int] = (0, 0),
                mode: str = "eager", host_cpu: str = "x86",
                measured: tuple[float, float] | None = None,
                extra: tuple[int, int, int, int] = (0, 0, 0, 0)) -> PassIssue:
    """Host issue time of one block per micro-batch: forward, and backward with a recomputed forward first.

    ``tp_collectives`` is (forward, backward) TP collective calls of the block (Megatron: 2 and 2);
    ``measured`` the (forward, backward) eager seconds of one block a calibration profile measured, which
    replace the block style's counted ones in eager mode; ``extra`` (fwd ops, fwd kernels, bwd ops, bwd kernels) adds kernels
    beyond the block style's (LoRA adapters: lora.adapter_issue_counts)."""
    style_counts = tuple(c + x for c, x in zip(block_counts(style), extra))
    counts = with_collectives(style_counts, tp_collectives)
    f_ops, f_k, b_ops, b_k = counts
    launch = op_seconds(host_cpu)[1]
    if mode == "cuda_graphs":
        f_s = b_s = issue_s(1, 1, host_cpu)
        f_n = b_n = 1
    elif mode == "compile":
        f_k, b_k = compiled_kernel_count(style, (f_k, b_k), block_counts(style)[1::2])
        f_s, b_s, f_n, b_n = f_k * launch, b_k * launch, f_k, b_k
    else:
        f_s, b_s = eager_issue_s(counts, host_cpu)
        f_n, b_n = f_ops, b_ops
        if measured is not None and (measured[0] or measured[1]):
            # the profile timed the executor's block, which has no LoRA adapters: theirs are counted on top
            x_f, x_b = eager_issue_s(extra, host_cpu)
            f_s, b_s = measured[0] + x_f, measured[1] + x_b
    if recompute_full:
        b_s, b_n = b_s + f_s, b_n + f_n
    return PassIssue(f_s, b_s, f_n, b_n)


def tp_paced(issue: PassIssue, tp: int, sigma: tuple[float, float], *, recompute_full: bool) -> PassIssue:
    """``issue`` at the pace of the slowest of ``tp`` ranks' hosts (``paced_s``): the forward (and the recomputed
    forward) at the forward's pace, the backward's own issue at the backward's."""
    own_bwd = issue.bwd_s - (issue.fwd_s if recompute_full else 0.0)
    fwd, own_bwd = paced_s(issue.fwd_s, own_bwd, tp, sigma)
    return replace(issue, fwd_s=fwd, bwd_s=own_bwd + (fwd if recompute_full else 0.0))


def host_idle_s(gpu_s: float, host_s: float) -> float:
    """Seconds the GPU waits for its host over a pass: what the host issue time exceeds the GPU time by."""
    return max(0.0, host_s - gpu_s)


def queued_idle_s(host_f: float, host_b: float, gpu_f: float, gpu_b: float, n: int) -> float:
    """GPU idle over ``n`` micro-batches (forward, backward, forward, ...) that one host issues back to back with
    no host sync between them, from a drained queue (the step starts after one).

    The GPU ends pass ``p`` at ``E_p = max(E_{p-1} + gpu_p, H_p)`` (``H_p``: the host's clock when it has issued
    pass ``p``), so its idle over the sequence is the largest excess of the host's cumulative time over the GPU's
    at a pass boundary, not the sum of each pass's excess: a backward the host issues faster than the GPU runs it
    lets the host start the next micro-batch's forward early, and that lead covers the forward's issue. With
    ``D = host_f + host_b - gpu_f - gpu_b`` per micro-batch the boundaries give ``k D + (gpu_b - host_b)`` after
    the k-th forward and ``k D`` after the k-th backward, whose maximum over k = 1..n is below."""
    d = host_f + host_b - gpu_f - gpu_b
    return max(0.0, host_f - gpu_f, n * d + max(0.0, gpu_b - host_b))


def sync_tail_s(issue: PassIssue, collective_s: float) -> float:
    """Seconds a host-bound block forward's sync waits beyond the host's own issue (module doc, "Host syncs"):
    the collective it drains (``collective_s``, launched last by the slowest rank) less the host's issue of the ops
    between that collective and the sync; 0 without a sync per block forward."""
    if issue.sync_fwd_s <= 0:
        return 0.0
    return max(0.0, collective_s - issue.sync_overlap_s)


def chunk_issue_s(issue: PassIssue | None, layers: int, first: bool = False,
                  head: tuple[float, ...] | None = None) -> tuple[float, float]:
    """(forward, backward) host seconds to issue a chunk of ``layers`` blocks for one micro-batch: its blocks'
    passes, on the chunk that starts the micro-batch (``first``) the micro-batch's own work outside the blocks, and
    on the chunk that ends it the output head and loss (``head``: their host forward and backward seconds first);
    (0, 0) where the host is not modelled apart (``issue`` None) or no blocks."""
    if issue is None or layers <= 0:
        return 0.0, 0.0
    mb_f, mb_b = (issue.microbatch_fwd_s, issue.microbatch_bwd_s) if first else (0.0, 0.0)
    head_f, head_b = head[:2] if head is not None else (0.0, 0.0)
    return layers * issue.fwd_s + mb_f + head_f, layers * issue.bwd_s + mb_b + head_b


def chunk_idle_s(issue: PassIssue | None, layers: int, gpu_fwd_s: float, gpu_bwd_s: float,
                 first: bool = False, blocks: tuple[tuple[float, ...], ...] = (),
                 queued: int = 0, head: tuple[float, float, float, float] | None = None) -> tuple[float, float]:
    """(forward, backward) GPU idle of a chunk of ``layers`` blocks per micro-batch whose passes keep the GPU busy
    ``gpu_fwd_s`` / ``gpu_bwd_s``, the lead-ins after the framework's host syncs included (``first``: the chunk
    that starts the micro-batch, after its sync, and carries the micro-batch's host work outside the blocks);
    (0, 0) where the host is not modelled apart (``issue`` None) or no blocks.

    ``blocks`` are the chunk's (count, forward GPU seconds, backward GPU seconds[, seconds of the collective the
    forward's sync drains]) per block kind: where the framework syncs in every block's forward (``issue.sync_fwd_s``;
    its backward too under full recompute, ``issue.sync_bwd_s``) the host cannot run ahead past a block, so each
    block's host excess, with the collective's tail past the host at the sync (``sync_tail_s``), is idle on its own
    (module doc, "Host syncs") and the chunk's other GPU work (embedding, logits and loss) hides none of it.
    ``queued`` > 0: the chunk is the whole model and its ``queued`` micro-batches are issued back to back without
    host syncs (trainsim execute's gradient accumulation): the step's idle is ``queued_idle_s``, charged evenly to
    each micro-batch's forward.
    ``head``: (host forward, host backward, GPU forward, GPU backward) seconds of the output head and loss on the
    chunk that ends the model (cost_models.loss_issue): its host time joins the chunk's; where the blocks sync
    the host cannot be ahead when the head starts, so the head idles for its own excess (``loss_issue.head_idle_s``)."""
    if issue is None or layers <= 0:
        return 0.0, 0.0
    lead_f = layers * issue.sync_fwd_s + (issue.microbatch_sync_s if first else issue.chunk_sync_s)
    mb_f, mb_b = (issue.microbatch_fwd_s, issue.microbatch_bwd_s) if first else (0.0, 0.0)
    if head is not None and issue.sync_fwd_s <= 0:
        mb_f, mb_b = mb_f + head[0], mb_b + head[1]
    elif head is not None:
        idle_head = head_idle_s(head[:2], head[2:])
        mb_f, mb_b = mb_f + idle_head[0], mb_b + idle_head[1]
    host_f, host_b = layers * issue.fwd_s + mb_f, layers * issue.bwd_s + mb_b
    if queued > 0:
        idle = queued_idle_s(host_f, host_b, gpu_fwd_s, gpu_bwd_s, queued)
        return idle / queued + lead_f, layers * issue.sync_bwd_s
    idle_f = host_idle_s(gpu_fwd_s, host_f)
    idle_b = host_idle_s(gpu_bwd_s, host_b)
    tails = [sync_tail_s(issue, kind[3] if len(kind) > 3 else 0.0) for kind in blocks]
    if blocks and issue.sync_fwd_s > 0:
        idle_f = sum(kind[0] * host_idle_s(kind[1], issue.fwd_s + t) for kind, t in zip(blocks, tails)) + mb_f
    if blocks and issue.sync_bwd_s > 0:
        idle_b = sum(kind[0] * host_idle_s(kind[2], issue.bwd_s + t) for kind, t in zip(blocks, tails)) + mb_b
    return idle_f + lead_f, idle_b + layers * issue.sync_bwd_s


def sync_leads(block_syncs: int, microbatch_syncs: int, *, tp: int, recompute_full: bool,
               host_cpu: str = "x86") -> tuple[float, float, float]:
    """(per block forward, per block backward, per micro-batch) GPU idle after ``block_syncs`` host syncs per block
    forward and ``microbatch_syncs`` per micro-batch (module doc, "Host syncs"); a recomputed forward (full
    recompute) syncs again in the backward pass."""
    block = block_syncs * issue_s(*SYNC_LEAD_BLOCK, host_cpu)
    ops, launches = SYNC_LEAD_MICROBATCH
    if tp > 1:
        ops, launches = ops + SYNC_LEAD_VOCAB_PARALLEL[0], launches + SYNC_LEAD_VOCAB_PARALLEL[1]
    per_mb = microbatch_syncs * issue_s(ops, launches, host_cpu)
    return block, (block if recompute_full else 0.0), per_mb


def ddp_hook_adds(scenario: Scenario) -> int:
    """``main_grad.add_`` calls one block's backward issues from Megatron's local-DDP parameter hooks (module doc,
    "Per-parameter hooks"): megatron-2021 every tensor of Megatron's layer, megatron-2022 its biases and norms
    (its wgrad GEMMs accumulate into ``main_grad``), other frameworks none. The tensors are the block's
    (param_tensors.block_tensors)."""
    m, lay, name = scenario.model, scenario.layout, scenario.training.framework
    fw = behaviour(name)
    if fw.megatron_ddp != "local":
        return 0
    hooked = ("norm", "bias", "weight") if fw.grad_accumulation_pass else ("norm", "bias")
    tensors = block_tensors(m, lay.tp, lay.ep, scenario.expert_tp, module_style(name))
    return sum(t.kind in hooked for t in tensors)


def legacy_wrapper_s(scenario: Scenario, shp: LayerShape,
                     profile: CalibrationProfile | None = None) -> WrapperSeconds:
    """Host seconds per block and micro-batch of the Python wrappers around Megatron's legacy layer's ops
    (cost_models.legacy_layer_wrappers): its autograd Functions, TorchScript calls and RNG-tracker fork in every
    forward (the recomputed one apart) and their backward halves, and under full recompute the block's reentrant
    checkpoint call; at the seconds per call a GPU calibration measured on its host
    (``CalibrationProfile.host_wrappers_s``), else at ``ATEN_DISPATCH_S`` per unit aten op."""
    calls = layer_calls(async_linears=behaviour(scenario.training.framework).tp_dgrad_overlap,
                        tp=scenario.layout.tp, hidden=scenario.model.hidden,
                        fused_softmax=shp.flash or megatron_fused_softmax(shp), dropout=shp.dropout)
    measured = getattr(profile, "host_wrappers_s", None) if profile is not None else None
    core = "core_attn" in recomputed_modules(scenario)
    selective = {"function_wrap": int(megatron_fused_softmax(shp)), "rng_fork": int(shp.dropout)} if core else None
    return block_wrapper_s(calls, scenario.training.recompute == "full", op_seconds(scenario.cluster.host_cpu)[0],
                           measured, selective_core=selective)


def recomputed_modules(scenario: Scenario) -> tuple[str, ...]:
    """The modules a block's selective recompute re-runs, as the host issues them: the scenario's module list
    (Megatron's default is the core attention); none where Megatron's legacy layer runs FlashAttention (its
    ``checkpoint_core_attention`` applies without flash only) or under torchtitan's per-op policy (``op_sac``,
    whose re-run set is op by op, not a module's: not counted here)."""
    t = scenario.training
    modules = tuple(t.recompute_modules or ("core_attn",))
    if t.recompute != "selective" or "op_sac" in modules:
        return ()
    if behaviour(t.framework).megatron_layer and layer_shape(scenario).flash:
        return ()
    return modules


def selective_rerun_counts(scenario: Scenario, style: str) -> tuple[int, int]:
    """(aten ops, kernels) a block's selective recompute issues again before its backward, per micro-batch: the
    forwards of the recomputed modules (``recomputed_modules``, ``RECOMPUTED_MODULE_OPS``), a recomputed MLP's
    column/row-parallel pair with its forward TP collectives (half the block's, as the GPU side re-runs them:
    simulator/block.py)."""
    modules = recomputed_modules(scenario)
    table = RECOMPUTED_MODULE_OPS.get(style, RECOMPUTED_MODULE_OPS["layernorm-gelu-learned"])
    counts = [table[m] for m in modules if m in table]
    if "mlp" in modules:
        counts.append(tuple(n * tp_collective_calls(scenario)[0] // 2 for n in COLLECTIVE_OPS))
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


def tp_collective_calls(scenario: Scenario) -> tuple[int, int]:
    """(forward, backward) TP collective calls of one dense block: Megatron's two column/row-parallel pairs
    issue 2 all-reduces each way (sequence parallel: 2 all-gathers + 2 reduce-scatters)."""
    if scenario.layout.tp <= 1:
        return 0, 0
    per_pass = 4 if scenario.training.sequence_parallel else 2
    return per_pass, per_pass


def steady_autocast_fwd_s(style: str, cast: ChunkHostIssue, plain: ChunkHostIssue | None,
                          host_cpu: str = "x86") -> float:
    """Host seconds of one block forward under autocast once the step's weight casts are cached (micro-batches
    2..n of a step).

    The profile times the block forward under autocast in a fresh autocast region per call, so each timed forward
    casts every weight (``cast.block_fwd_s``), and without autocast (``plain.block_fwd_s``, the same tiny block in
    the same calibration). A weight cast is not an average op: autocast's ``cached_cast`` (aten/src/ATen/
    autocast_mode.cpp) runs ``to(bf16)`` -- a fresh allocation, a copy kernel and an autograd ``ToCopyBackward``
    node -- and inserts it in the cast cache; on the H200 profile the 16 extra forward ops of the GPT block cost
    0.68 ms (42 us each) against 7.1 us for a counted dispatch and launch. Scaling the casting forward by op counts
    would leave most of that cost in every later micro-batch; the steady forward is therefore the plain forward
    scaled by its counted ops (``BLOCK_OPS_AUTOCAST`` steady vs ``BLOCK_OPS``: the activation casts autocast still
    dispatches). Without a plain measurement the casting forward is scaled by the counted ops."""
    f_ops, f_k, s_ops, s_k = BLOCK_OPS_AUTOCAST[style]
    steady = issue_s(s_ops, s_k, host_cpu)
    if plain is not None and plain.block_fwd_s > 0:
        return min(cast.block_fwd_s, plain.block_fwd_s * steady / issue_s(*BLOCK_OPS[style][:2], host_cpu))
    return cast.block_fwd_s * steady / issue_s(f_ops, f_k, host_cpu)


def profiled_chunk(scenario: Scenario, profile: CalibrationProfile | None):
    """The profile's two-depth measurement of trainsim execute's own chunk (``CalibrationProfile.host_issue_chunk``)
    for the scenario's block style under its autocast, or None where the profile has none or the scenario does not
    run as the executor does: no ``autocast_tag``, a CPU "GPU", a MoE model."""
    from .eager import block_style  # cycle: flops imports this module, and eager imports flops

    tag = autocast_tag(scenario)
    if tag is None or getattr(scenario.cluster.gpu, "num_sms", None) is None or scenario.model.is_moe:
        return None
    return (getattr(profile, "host_issue_chunk", None) or {}).get(block_style(layer_shape(scenario)) + tag)


def executor_block_issue(scenario: Scenario, profile: CalibrationProfile | None) -> PassIssue | None:
    """Host issue time of trainsim execute's eager micro-batch from the profile's two-depth measurement of the
    executor's own chunk under its autocast (``CalibrationProfile.host_issue_chunk``), or None where the profile
    has none for this block style or the scenario does not run that way (``autocast_tag``).

    Per block: the measured forward casts every weight (each timed call is a fresh autocast region); the step's
    later micro-batches hit autocast's weight cache, so their forward is the profile's plain forward at the
    steady autocast op count (``steady_autocast_fwd_s``) and the micro-batches averaged. The
    backward is measured with the gradients held (AccumulateGrad adds), under full recompute apart (it re-issues
    the forward). Per micro-batch: the embedding, head, loss and each pass's start (``microbatch_*_s``)."""
    from .eager import block_style  # cycle: flops imports this module, and eager imports flops

    m = profiled_chunk(scenario, profile)
    style = block_style(layer_shape(scenario))
    if m is None or style not in BLOCK_OPS_AUTOCAST or scenario.training.host_issue_mode != "eager":
        return None
    s_ops = BLOCK_OPS_AUTOCAST[style][2]
    plain = (getattr(profile, "host_issue_chunk", None) or {}).get(style)
    steady = steady_autocast_fwd_s(style, m, plain, scenario.cluster.host_cpu)
    n = scenario.num_microbatches
    full = scenario.training.recompute == "full"
    # the first forward of the step casts the weights; under full recompute every forward does (the recompute's
    # autocast region clears the cache: cost_models/autocast.py)
    fwd = m.block_fwd_s if full else (m.block_fwd_s + (n - 1) * steady) / n
    rerun = selective_rerun_counts(scenario, style)  # at the measured forward's seconds per counted op
    bwd = m.block_bwd_full_recompute_s if full else m.block_bwd_s + steady * issue_s(*rerun) / issue_s(
        *BLOCK_OPS_AUTOCAST[style][2:])
    return PassIssue(fwd, bwd, s_ops, BLOCK_OPS[style][2] + (s_ops if full else rerun[0]),
                     microbatch_fwd_s=m.microbatch_fwd_s, microbatch_bwd_s=m.microbatch_bwd_s)


def scenario_block_issue(scenario: Scenario, profile: CalibrationProfile | None = None) -> PassIssue | None:
    """Host issue time of one dense block of ``scenario`` per micro-batch, or None where the host is not
    modelled apart: CPU ranks (their eager time is the ops' own time, cost_models.eager) and MoE blocks
    (Megatron-Core's MoE host work and its per-layer host sync: cost_models.moe_issue) and hybrid Mamba
    stacks (no measured issue time of their layers)."""
    from .compute import eager_overhead_s  # cycle: flops imports this module, and these import flops
    from .eager import block_style, count_passes  # cycle: flops imports this module, and eager imports flops
    from .flops import layer_ops  # cycle: flops imports this module
    from .lora import adapter_issue_counts  # cycle: lora -> flops -> here

    if getattr(scenario.cluster.gpu, "num_sms", None) is None or scenario.model.is_moe or scenario.model.is_hybrid:
        return None
    executed = executor_block_issue(scenario, profile) if profile is not None else None
    if executed is not None:
        return executed
    shp = layer_shape(scenario)
    gpu_measured = getattr(profile, "host_issue_block_s", None) if profile is not None else None
    measured = gpu_measured(block_style(shp)) if gpu_measured is not None else None
    ov_f, ov_b = eager_overhead_s(shp, profile)
    if measured is None and (ov_f or ov_b):
        n_f, n_b = count_passes(layer_ops(shp))
        measured = (ov_f * n_f, ov_b * n_b)
    t = scenario.training
    fw = behaviour(t.framework)
    style = issue_style(block_style(shp), megatron_layer=fw.megatron_layer, flash=shp.flash,
                        fused_softmax=megatron_fused_softmax(shp))
    issue = block_issue(style, recompute_full=t.recompute == "full",
                        tp_collectives=tp_collective_calls(scenario), mode=t.host_issue_mode,
                        host_cpu=scenario.cluster.host_cpu, measured=measured, extra=adapter_issue_counts(shp))
    if fw.checkpoint_hooks and t.recompute == "full" and t.host_issue_mode == "eager":
        issue = replace(issue, bwd_s=issue.bwd_s + checkpoint_hooks_s(style, t.autocast, scenario.cluster.host_cpu))
    hooks = ddp_hook_adds(scenario)
    if hooks:
        issue = replace(issue, bwd_s=issue.bwd_s + hooks * issue_s(1, 1, scenario.cluster.host_cpu),
                        bwd_ops=issue.bwd_ops + hooks)
    frames = MODULE_FRAME_RATIO if fw.megatron_layer and measured is None and t.host_issue_mode == "eager" else 1.0
    recompute = issue.fwd_s if t.recompute == "full" else 0.0
    bwd_frames = BACKWARD_FRAME_RATIO if frames != 1.0 else 1.0
    issue = replace(issue, fwd_s=issue.fwd_s * frames,
                    bwd_s=recompute * frames + (issue.bwd_s - recompute) * bwd_frames)
    sigma = measured_sigma(profile, block_style(shp))
    if t.host_issue_mode == "eager" and scenario.layout.tp > 1:
        issue = tp_paced(issue, scenario.layout.tp, sigma, recompute_full=t.recompute == "full")
    rerun = selective_rerun_counts(scenario, style)
    if rerun[0] and t.host_issue_mode == "eager":  # a captured graph or compiled region holds its recompute
        r_s = paced_s(issue_s(*rerun, scenario.cluster.host_cpu) * frames, 0.0, scenario.layout.tp, sigma)[0]
        issue = replace(issue, bwd_s=issue.bwd_s + r_s, bwd_ops=issue.bwd_ops + rerun[0])
    if t.host_issue_mode == "eager" and fw.megatron_layer and block_style(shp) == "layernorm-gelu-learned":
        w = legacy_wrapper_s(scenario, shp, profile)
        w_f, w_b = paced_s(w.fwd_s, w.bwd_s, scenario.layout.tp, sigma)
        w_r = paced_s(w.recompute_s, 0.0, scenario.layout.tp, sigma)[0]  # the recomputed forward at the forward's pace
        issue = replace(issue, fwd_s=issue.fwd_s + w_f, bwd_s=issue.bwd_s + w_b + w_r)
    syncs = fw.block_forward_syncs or fw.microbatch_syncs or fw.chunk_forward_syncs
    if t.host_issue_mode != "eager" or not syncs:
        return issue  # a captured graph cannot hold a host sync
    f, b, mb = sync_leads(fw.block_forward_syncs, fw.microbatch_syncs, tp=scenario.layout.tp,
                          recompute_full=t.recompute == "full", host_cpu=scenario.cluster.host_cpu)
    chunk = fw.chunk_forward_syncs * issue_s(*SYNC_LEAD_CHUNK, scenario.cluster.host_cpu)
    f_pace = pace(scenario.layout.tp, measured_sigma(profile, block_style(shp))[0])
    tail_host = issue_s(*SYNC_TAIL_HOST, scenario.cluster.host_cpu)
    overlap = tail_host * frames * f_pace if fw.block_forward_syncs else 0.0
    return replace(issue, sync_fwd_s=f * frames, sync_bwd_s=b * frames, microbatch_sync_s=mb * frames,
                   chunk_sync_s=chunk * frames,
                   sync_overlap_s=overlap)
