"""Host time of the Python wrappers Megatron's legacy layer runs around its aten ops, per block and micro-batch.
Pure.

A dispatch counter (cost_models.host_issue.BLOCK_OPS) sees the aten ops of Megatron's ``ParallelTransformerLayer``,
not the Python layers around them, which cost the host time of their own (kernels/host_wrappers_bench.py says
why). What the legacy layer's code runs per block forward, read from Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed
megatron/model/transformer.py, fused_layer_norm.py, fused_softmax.py, fused_bias_gelu.py,
core/tensor_parallel/mappings.py at f4157bea; the same layer code as Megatron-LM's of 2021-2022):

* Python ``torch.autograd.Function`` subclasses, each called once per forward and called back once per backward:
  apex's ``FusedLayerNormAffineFunction`` for both layer norms; ``ScaledUpperTriangMaskedSoftmax`` where the fused
  softmax applies (its eager path is plain ops); ``GeLUFunction`` (``bias_gelu_impl``, ``--bias-gelu-fusion`` on by
  default); the TP region mappings, ``_CopyToModelParallelRegion`` before both column-parallel linears and
  ``_ReduceFromModelParallelRegion`` after both row-parallel ones -- identities apart from their all-reduce, which
  the host-issue count already holds as a collective call. Where the linears run
  ``LinearWithGradAccumulationAndAsyncAllreduce`` (Megatron-LM 2022, ``FrameworkBehaviour.tp_dgrad_overlap``) each
  of the four linears is such a Function and the column-parallel ones skip the copy region.
* TorchScript functions: ``bias_dropout_add_fused_train`` twice (``--bias-dropout-fusion``, on by default) and
  ``bias_gelu`` inside ``GeLUFunction`` (``bias_gelu_back`` in its backward); the counter counts their eager ops,
  the graph executor's own call is extra.
* ``get_cuda_rng_tracker().fork()`` around the attention dropout: the device RNG state read and set twice.
* Under full recompute each block is one reentrant ``CheckpointFunction`` call (``mpu.checkpoint`` or DeepSpeed's
  ``checkpointing.checkpoint``, one layer per call by default): RNG states saved in forward, restored around the
  recomputation and a nested ``torch.autograd.backward`` in backward.

Each call is priced in unit aten ops (``y * 1.0`` dispatched with autograd, the unit that ``ATEN_DISPATCH_S``
prices) as ``python -m trainsim.kernels.host_wrappers_bench`` measured them on an x86 host (AMD EPYC, torch
2.13.0+cpu, Python 3.11.7, one thread; benchmarks/data/host_wrappers_cpu.json, median of 3 trials, spread of the
trials under 10 % except the script call's, 0.44-0.52 forward and 0.72-0.94 backward). The ratios carry the wrappers' Python frames, so
the legacy layer's frame ratios (host_issue.MODULE_FRAME_RATIO, BACKWARD_FRAME_RATIO, measured on a block with no
such wrappers) do not apply to them. Older PyTorch and Python releases (the 2021-2023 runs these frameworks stand
for) have not been timed. ``trainsim calibrate --device cuda`` times the same wrappers on the GPU host it runs on
(``CalibrationProfile.host_wrappers_s``, seconds per call); a prediction with that profile pays those instead.
"""

from __future__ import annotations

from dataclasses import dataclass

# (forward, backward) host cost per call in unit aten ops (module doc; benchmarks/data/host_wrappers_cpu.json
# "units_per_call"): a Function that returns its input, a Function's cost over the aten op it wraps, a TorchScript
# call's over the same function eager, a reentrant checkpoint call's over the plain call and its recomputation, and
# the RNG tracker's fork (its measured backward, -0.04, is none).
FUNCTION_IDENTITY = (1.277, 0.805)
FUNCTION_WRAP = (1.714, 1.608)
SCRIPT_CALL = (0.501, 0.888)
REENTRANT_CHECKPOINT = (7.242, 10.384)
RNG_FORK = (1.120, 0.0)

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


def layer_calls(*, async_linears: bool, fused_softmax: bool, dropout: bool) -> WrapperCalls:
    """The wrapper calls of one block of Megatron's legacy layer (module doc): ``async_linears`` where its linears
    run ``LinearWithGradAccumulationAndAsyncAllreduce``, ``fused_softmax`` where its fused softmax kernel (a Function)
    applies, ``dropout`` where the attention dropout forks the RNG tracker."""
    regions = LINEARS // 2 if async_linears else LINEARS
    wrapping = LAYER_NORMS + int(fused_softmax) + 1 + (LINEARS if async_linears else 0)
    return WrapperCalls(regions, wrapping, SCRIPT_CALLS, int(dropout))


PRICES = {"function_identity": FUNCTION_IDENTITY, "function_wrap": FUNCTION_WRAP, "script_call": SCRIPT_CALL,
          "reentrant_checkpoint": REENTRANT_CHECKPOINT, "rng_fork": RNG_FORK}


def call_counts(calls: WrapperCalls, recompute_full: bool) -> dict[str, int]:
    """Calls of each priced kind (PRICES) per block and micro-batch: the layer's wrappers once per forward, and one
    reentrant checkpoint call per block under full recompute."""
    return {"function_identity": calls.identity_functions, "function_wrap": calls.wrapping_functions,
            "script_call": calls.script_calls, "rng_fork": calls.rng_forks,
            "reentrant_checkpoint": int(recompute_full)}


def block_wrapper_s(calls: WrapperCalls, recompute_full: bool, unit_s: float,
                    measured: dict[str, tuple[float, float]] | None = None) -> tuple[float, float]:
    """(forward pass, backward pass) host seconds of one block's wrappers per micro-batch: each call's forward half
    in the forward pass, its backward half in the backward pass, which under full recompute also runs the layer's
    wrappers' forward halves again (the recomputed forward; the checkpoint's own forward half is not repeated).
    Each kind costs what a calibration measured on the device's host (``measured``, seconds per call:
    CalibrationProfile.host_wrappers_s) or else its PRICES in unit aten ops at ``unit_s`` each."""
    price = {k: (measured or {}).get(k) or (u[0] * unit_s, u[1] * unit_s) for k, u in PRICES.items()}
    n = call_counts(calls, recompute_full)
    ck = n.pop("reentrant_checkpoint")
    fwd = sum(k_n * price[k][0] for k, k_n in n.items())
    bwd = sum(k_n * price[k][1] for k, k_n in n.items())
    ck_f, ck_b = (ck * price["reentrant_checkpoint"][0], ck * price["reentrant_checkpoint"][1])
    return fwd + ck_f, bwd + ck_b + (fwd if recompute_full else 0.0)
