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

from .flops import Op, layer_ops
from .shapes import LayerShape, layer_shape


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


def modelled_ops(scenario) -> tuple[int, int]:
    """(forward, backward) modelled ops of one block of ``scenario`` (the divisor of the calibration)."""
    return count_passes(layer_ops(layer_shape(scenario)))


def block_param_tensors(model) -> int:
    """Parameter tensors of one block as the executor builds it (specs.ModelSpec.block_param_tensors)."""
    return model.block_param_tensors()


def stage_param_tensors(scenario, stage: int) -> tuple[int, int]:
    """(plain, DTensor) parameter tensors one rank of pipeline stage ``stage`` holds (all its chunks).

    torch's FSDP2 (ZeRO-3 over dp > 1) makes every parameter a DTensor; TP makes the sharded linears,
    the vocab-parallel embedding and the output layer DTensors, and with sequence parallelism the norms
    too (``SequenceParallel`` replicates them as DTensors); learned positions stay plain under TP.
    """
    m, lay, t = scenario.model, scenario.layout, scenario.training
    p, v = lay.pp, lay.vpp
    layers = scenario.stage_layers
    norm_t = 2 if m.norm == "layernorm" else 1
    plain = dt = 0
    for c in range(v):
        vs = scenario.virtual_stage(stage, c)
        blk = block_param_tensors(m)
        norms = 2 * norm_t
        tp_dt = blk - (0 if t.sequence_parallel else norms)
        dt += layers[vs] * tp_dt
        plain += layers[vs] * (blk - tp_dt)
        if vs == 0:
            dt += 1
            plain += 1 if m.position_embedding == "learned" else 0
        if vs == p * v - 1:
            head = 0 if (m.tie_embeddings and p * v == 1) else 1
            dt += head + (norm_t if t.sequence_parallel else 0)
            plain += 0 if t.sequence_parallel else norm_t
    if lay.tp > 1 and not (scenario.dp > 1 and t.effective_zero >= 3):
        return plain, dt
    if scenario.dp > 1 and t.effective_zero >= 3:
        return 0, plain + dt
    return plain + dt, 0
