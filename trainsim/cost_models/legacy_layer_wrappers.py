"""Host time of the Python wrappers Megatron's legacy layer runs around its aten ops, per block and micro-batch.
Pure.

A dispatch counter (cost_models.host_issue.BLOCK_OPS) sees the aten ops of Megatron's ``ParallelTransformerLayer``,
not the Python layers around them, which cost the host time of their own (kernels/host_wrappers_bench.py says
why). What the legacy layer runs per block forward, read from Megatron-DeepSpeed before its July 2023 merge with
Megatron-LM (microsoft/Megatron-DeepSpeed at 1f640c00, May 2023: megatron/mpu/layers.py, mappings.py,
model/transformer.py, fused_layer_norm.py, fused_softmax.py, fused_bias_gelu.py; the layer code of Megatron-LM 2021):

* Python ``torch.autograd.Function`` subclasses, each called once per forward and called back once per backward:
  ``FusedLayerNormAffineFunction`` for both layer norms; ``ScaledUpperTriangMaskedSoftmax`` where the fused softmax
  applies (its eager path is plain ops); ``GeLUFunction`` (``bias_gelu_impl``; ``--no-bias-gelu-fusion`` is a
  ``store_false`` flag, so on by default); the TP region mappings, ``_CopyToModelParallelRegion`` before both
  column-parallel linears and ``_ReduceFromModelParallelRegion`` after both row-parallel ones, called at every TP
  degree (``F.linear`` does the matmul) -- identities apart from their all-reduce, which the host-issue count holds
  as a collective call.
* TorchScript functions: ``bias_dropout_add_fused_train`` twice (``--no-bias-dropout-fusion`` is ``store_false``)
  and ``bias_gelu`` inside ``GeLUFunction``'s forward (``bias_gelu_back`` in its backward, a plain script call); the
  counter counts their eager ops, the graph executor's own call is extra. A bias-dropout-add's backward runs its
  autodiff graph; the GeLU's is priced the same way.
* ``get_cuda_rng_tracker().fork()`` around the attention dropout.
* Under selective recompute of the attention core (``--recompute-activations``) each block's core attention is one
  reentrant ``tensor_parallel.checkpoint`` call (``ParallelAttention._checkpointed_attention_forward``), whose
  backward re-runs the core's forward: its softmax Function (where fused) and RNG fork again.
* Under full recompute each block is one reentrant ``CheckpointFunction`` call (``mpu.checkpoint`` or DeepSpeed's
  ``checkpointing.checkpoint``, one layer per call by default): RNG states saved in forward, restored around the
  recomputation and a nested ``torch.autograd.backward`` in backward. It is priced as torch's own reentrant
  checkpoint, which DeepSpeed's is "adapted from"; DeepSpeed 0.14.4's, timed the same way on the same host
  (``--deepspeed``, benchmarks/data/host_wrappers_deepspeed_cpu.json), costs 4.4 forward / 9.8 backward units against
  torch's 6.8 / 10.3 in that run, so the price is high by about 2.4 units per block for Megatron-DeepSpeed.

Megatron-LM's layer code of 2022 (``FrameworkBehaviour.tp_dgrad_overlap``; read at NVIDIA/Megatron-LM 285068c8,
January 2023: megatron/core/tensor_parallel/layers.py, model/fused_layer_norm.py, model/transformer.py) runs every
linear through ``LinearWithGradAccumulationAndAsyncCommunication`` -- four more Functions -- and skips the
column-side copy region where its asynchronous all-reduce is on, which needs TP > 1
(``async_tensor_model_parallel_allreduce and world_size > 1``); it turns the layer's output into a viewless tensor
(``make_viewless_tensor(..., keep_graph=True)``, a ``MakeViewlessTensor`` Function), and at the widths its persistent
layer-norm kernel supports (``persist_ln_hidden_sizes``, on unless ``--no-persist-layer-norm``) runs apex's
``FastLayerNormFN`` followed by another viewless Function after each layer norm; the viewless Functions are priced as
identity Functions. Megatron-DeepSpeed after its merge (f4157bea) runs these too; the ``megatron-deepspeed`` preset
follows the older fork throughout (its synchronous TP all-reduce too), and the source runs it stands for do not
state their version. A block style other than Megatron's GPT layer (``layernorm-gelu-learned``) runs other wrappers,
which are not priced.

Each call is priced in unit aten ops (``y * 1.0`` dispatched with autograd, the unit that ``ATEN_DISPATCH_S``
prices) as ``python -m trainsim.kernels.host_wrappers_bench`` measured them on an x86 host (AMD EPYC, torch
2.13.0+cpu, Python 3.11.7, one thread; benchmarks/data/host_wrappers_cpu.json, median of 3 trials, whose spread is
under 7 % except the script call's, 0.41-0.47 forward and 0.84-0.91 backward). The ratios carry the wrappers' Python
frames, so the legacy layer's frame ratios (host_issue.MODULE_FRAME_RATIO, BACKWARD_FRAME_RATIO, measured on a block
with no such wrappers) do not apply to them. What the stand-ins leave out: under full recompute the first forward
runs under ``no_grad``, where a Function call builds no graph node and costs less (charged at the grad-mode price,
as the counted aten ops are); the CPU run times the CPU generator's RNG state where Megatron's checkpoint and
fork copy the CUDA generator's and its tracker's; older PyTorch and Python releases (the 2021-2023 runs these
frameworks stand for) have not been timed. torch's non-reentrant checkpoint (saved-tensor hooks, what torchtitan
runs) is a different mechanism and much dearer per block (about 0.96 ms on the H200 host of
benchmarks/data/profile_h200.json), priced apart for the frameworks that run it (host_issue.CHECKPOINT_HOOKS_S). ``trainsim calibrate --device cuda`` times the same
wrappers on the GPU host it runs on (``CalibrationProfile.host_wrappers_s``, seconds per call); a prediction with
that profile pays those instead.
"""

from __future__ import annotations

from dataclasses import dataclass

# (forward, backward) host cost per call in unit aten ops (module doc; benchmarks/data/host_wrappers_cpu.json
# "units_per_call"): a Function that returns its input, a Function's cost over the aten op it wraps, a TorchScript
# call's over the same function eager, a reentrant checkpoint call's over the plain call and its recomputation, and
# the RNG tracker's fork (its measured backward, -0.04, is none).
FUNCTION_IDENTITY = (1.283, 0.789)
FUNCTION_WRAP = (0.867, 0.566)
SCRIPT_CALL = (0.433, 0.898)
REENTRANT_CHECKPOINT = (6.719, 10.365)
RNG_FORK = (1.211, 0.0)
PRICES = {"function_identity": FUNCTION_IDENTITY, "function_wrap": FUNCTION_WRAP, "script_call": SCRIPT_CALL,
          "reentrant_checkpoint": REENTRANT_CHECKPOINT, "rng_fork": RNG_FORK}

# Widths Megatron-LM's persistent layer-norm kernel supports (285068c8 megatron/model/fused_layer_norm.py).
PERSIST_LN_WIDTHS = frozenset({1024, 1536, 2048, 2304, 3072, 3840, 4096, 5120, 6144, 8192, 10240, 12288, 12800, 15360,
                               16384, 18432, 20480, 24576, 25600, 30720, 32768, 40960, 49152, 65536})
LAYER_NORMS = 2
SCRIPT_CALLS = 3          # two bias-dropout-adds and the bias-GeLU
LINEARS = 4               # QKV and dense_h_to_4h (column-parallel), dense and dense_4h_to_h (row-parallel)


@dataclass(frozen=True)
class WrapperCalls:
    """Python wrapper calls of one legacy Megatron block per forward (each is called back once in backward)."""

    identity_functions: int
    wrapping_functions: int
    script_calls: int
    rng_forks: int


@dataclass(frozen=True)
class WrapperSeconds:
    """Host seconds of one block's wrappers per micro-batch: in the forward pass, in the backward pass's own work,
    and in its recomputed forward (full recompute, or the core attention's under its selective recompute; paced as a
    forward)."""

    fwd_s: float
    bwd_s: float
    recompute_s: float


def layer_calls(*, async_linears: bool, tp: int, hidden: int, fused_softmax: bool, dropout: bool) -> WrapperCalls:
    """The wrapper calls of one block of Megatron's legacy GPT layer (module doc): ``async_linears`` for Megatron-LM's
    2022 layer code, whose linears run ``LinearWithGradAccumulationAndAsyncCommunication`` (its asynchronous
    all-reduce, and so the skipped copy region, needs ``tp`` > 1) and whose layer output and, at the persistent
    kernel's widths (``hidden``), layer-norm outputs pass a viewless-tensor Function; ``fused_softmax`` where its
    fused softmax kernel (a Function) applies; ``dropout`` where the attention dropout forks the RNG tracker."""
    column_copies = 0 if async_linears and tp > 1 else LINEARS // 2
    viewless = (1 + (LAYER_NORMS if hidden in PERSIST_LN_WIDTHS else 0)) if async_linears else 0
    wrapping = LAYER_NORMS + int(fused_softmax) + 1 + (LINEARS if async_linears else 0)
    return WrapperCalls(LINEARS // 2 + column_copies + viewless, wrapping, SCRIPT_CALLS, int(dropout))


def call_counts(calls: WrapperCalls, recompute_full: bool, selective_core: bool = False) -> dict[str, int]:
    """Calls of each priced kind (PRICES) per block and micro-batch: the layer's wrappers once per forward, and one
    reentrant checkpoint call per block under full recompute or around the core attention under its selective
    recompute."""
    return {"function_identity": calls.identity_functions, "function_wrap": calls.wrapping_functions,
            "script_call": calls.script_calls, "rng_fork": calls.rng_forks,
            "reentrant_checkpoint": int(recompute_full or selective_core)}


def block_wrapper_s(calls: WrapperCalls, recompute_full: bool, unit_s: float,
                    measured: dict[str, tuple[float, float]] | None = None, *,
                    selective_core: dict[str, int] | None = None) -> WrapperSeconds:
    """Host seconds of one block's wrappers per micro-batch: each call's forward half in the forward pass, its
    backward half in the backward pass, which under full recompute also runs the layer's wrappers' forward halves
    again (the recomputed forward; the checkpoint's own forward half is not repeated) and under selective recompute
    of the core attention the core's wrappers' (``selective_core``: calls of each kind in the core). Each kind costs
    what a calibration measured on the device's host (``measured``, seconds per call:
    CalibrationProfile.host_wrappers_s) or else its PRICES in unit aten ops at ``unit_s`` each."""
    price = {k: (measured or {}).get(k) or (u[0] * unit_s, u[1] * unit_s) for k, u in PRICES.items()}
    n = call_counts(calls, recompute_full, selective_core is not None)
    ck = n.pop("reentrant_checkpoint")
    fwd = sum(k_n * price[k][0] for k, k_n in n.items())
    bwd = sum(k_n * price[k][1] for k, k_n in n.items())
    ck_f, ck_b = ck * price["reentrant_checkpoint"][0], ck * price["reentrant_checkpoint"][1]
    rerun = fwd if recompute_full else sum(k_n * price[k][0] for k, k_n in (selective_core or {}).items())
    return WrapperSeconds(fwd + ck_f, bwd + ck_b, rerun)
