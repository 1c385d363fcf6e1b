"""Eager-PyTorch framework overhead (CPU): which ops pay it, per block style, and optimizer tensor counts.

In eager PyTorch every op the cost model lists (``flops.layer_ops``: a linear layer, a norm, the attention
core, ...) launches several aten ops around its kernel (views, transposes, bias-gradient reductions,
AccumulateGrad) and records/executes autograd nodes, from Python. On a GPU this host work overlaps the
asynchronous kernels (``GPUSpec.kernel_overhead_s`` is the per-kernel launch cost); on a CPU it is on the
critical path (on a GPU, ``host_issue`` makes each pass last at least the host's issue time instead).
``trainsim calibrate --device cpu`` measures it per modelled op on tiny executor blocks
(``CalibrationProfile.eager_overhead``); this module says how many modelled ops each pass runs. Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .flops import Op, layer_ops
from .param_tensors import rank_tensors
from .shapes import LayerShape, layer_shape

if TYPE_CHECKING:
    from trainsim.specs import Scenario


def block_style(shp: LayerShape) -> str:
    """Key of the calibrated tiny block closest to this block: norm-activation-positions."""
    return f"{shp.norm}-{'swiglu' if shp.gated else 'gelu'}-{'rope' if shp.rope else 'learned'}"


def tp_wrapper(shp: LayerShape) -> str | None:
    """The executor's tensor-parallel wrapping of a block: DTensor ops in every pass ('tp', 'tp-sp') or None."""
    if shp.tp <= 1:
        return None
    return "tp-sp" if shp.sp else "tp"


def op_passes(op: Op) -> tuple[bool, bool]:
    """(runs in forward, runs in backward): an op pays the eager overhead once in each pass it works in."""
    fwd = op.fwd_flops > 0 or op.fwd_bytes > 0
    bwd = (op.bwd_input_flops + op.bwd_weight_flops) > 0 or (op.bwd_input_bytes + op.bwd_weight_bytes) > 0
    return fwd, bwd


def count_passes(ops: tuple[Op, ...]) -> tuple[int, int]:
    """Number of ops that run in forward and in backward."""
    fb = [op_passes(op) for op in ops]
    return sum(f for f, _ in fb), sum(b for _, b in fb)


def modelled_ops(scenario: Scenario) -> tuple[int, int]:
    """(forward, backward) modelled ops of one block of ``scenario`` (the divisor of the calibration)."""
    return count_passes(layer_ops(layer_shape(scenario)))


def stage_param_tensors(scenario: Scenario, stage: int) -> tuple[int, int]:
    """(plain, DTensor) parameter tensors one rank of pipeline stage ``stage`` holds (all its chunks) in the
    executor's model (param_tensors.rank_tensors, torch style).

    torch's FSDP2 (ZeRO-3 over dp > 1) makes every parameter a DTensor; TP (parallelize_module) makes every
    tensor of a parallelized linear (its replicated row-parallel bias too), the vocab-parallel embedding and the
    output layer DTensors, and with sequence parallelism the norms too (``SequenceParallel`` replicates them as
    DTensors); learned positions stay plain under TP.
    """
    tensors = rank_tensors(scenario, stage, "torch")
    t = scenario.training
    if scenario.dp > 1 and t.effective_zero >= 3:
        return 0, len(tensors)
    if scenario.layout.tp <= 1:
        return len(tensors), 0
    plain = sum(1 for x in tensors if x.kind == "position" or (x.kind == "norm" and not t.sequence_parallel))
    return plain, len(tensors) - plain
