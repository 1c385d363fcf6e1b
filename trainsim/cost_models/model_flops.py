"""Model and hardware FLOPs: the FLOPs of flops.py's ops summed by pass, per block per micro-batch on one rank
and per optimizer step on all GPUs.

Model FLOPs (docs/design.md) are the FLOPs of the matmul ops (``flops.MATMUL_KINDS``) of forward +
backward with no recompute; hardware FLOPs add what the recompute mode re-runs: ``selective`` = the
attention core, 2Bs²h + 2Bs²h per layer as Korthikanti's Appendix A text states (their printed eq. 8,
with s/3h, adds three times that; tests/test_cost_flops.py pins the factor), ``full`` = the whole block
forward (SC21 eq. 3). FlashAttention's own internal recompute in backward is a kernel detail (it shows
up in time, not in hardware FLOPs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from trainsim.specs.memo import memoised

from .flops import Op, _head_ops, _layer_ops, _mtp_ops, recompute_ops
from .moe_balance import executed_expert_fraction
from .shapes import LayerShape, as_layer_shape, block_kinds, layer_shape, mtp_kinds

if TYPE_CHECKING:
    from trainsim.specs import Scenario


@dataclass(frozen=True)
class PassFlops:
    """FLOPs of one block (or embedding/head) per micro-batch per rank, by pass."""

    fwd: float
    bwd_input: float
    bwd_weight: float
    recompute: float

    @property
    def model(self) -> float:
        return self.fwd + self.bwd_input + self.bwd_weight

    @property
    def hardware(self) -> float:
        return self.model + self.recompute

    def __add__(self, other: PassFlops) -> PassFlops:
        return PassFlops(self.fwd + other.fwd, self.bwd_input + other.bwd_input, self.bwd_weight + other.bwd_weight,
                         self.recompute + other.recompute)

    def scaled(self, k: float) -> PassFlops:
        return PassFlops(k * self.fwd, k * self.bwd_input, k * self.bwd_weight, k * self.recompute)


def pass_flops(ops: tuple[Op, ...], recompute: str = "none", matmul_only: bool = True,
               modules: frozenset = frozenset()) -> PassFlops:
    """Sum FLOPs of ``ops`` by pass (matmul kinds only by default, as model FLOPs count them)."""
    sel = [op for op in ops if op.is_matmul] if matmul_only else list(ops)
    rec = recompute_ops(tuple(sel), recompute, modules)
    return PassFlops(
        fwd=sum(op.fwd_flops for op in sel),
        bwd_input=sum(op.bwd_input_flops for op in sel),
        bwd_weight=sum(op.bwd_weight_flops for op in sel),
        recompute=sum(op.fwd_flops for op in rec),
    )


def layer_flops(scenario: Scenario | LayerShape, matmul_only: bool = True) -> PassFlops:
    """FLOPs of one block per micro-batch on one rank, by pass, with the scenario's recompute mode."""
    shp = as_layer_shape(scenario)
    return pass_flops(_layer_ops(shp), shp.recompute, matmul_only, shp.rc_modules)


def _per_microbatch_unsharded(scenario) -> tuple[PassFlops, PassFlops]:
    """(all blocks, head) matmul FLOPs of one micro-batch of b sequences with no model parallelism; a MoE
    model's dense blocks (first_dense_layers) counted as dense blocks, its experts' GEMMs at the share of the
    routed tokens they execute (moe_balance.executed_expert_fraction: a capacity factor below 1 drops tokens)."""
    kept = executed_expert_fraction(scenario)
    per_kind = [_unsharded_flops(_unsharded(layer_shape(scn)), count, kept) for scn, count in block_kinds(scenario)]
    blocks = sum((b for b, _ in per_kind[1:]), per_kind[0][0])
    head = per_kind[0][1]
    k = scenario.model.mtp_layers
    if k:  # each MTP module: a main block (a hybrid stack: its mtp_pattern's layers), its projection, another head
        shp = _unsharded(layer_shape(scenario))
        if shp.kind:
            parts = [_unsharded_flops(_unsharded(layer_shape(scn)), n, kept)[0] for scn, n in mtp_kinds(scenario)]
            main = sum(parts[1:], parts[0])
        else:
            main, _ = _unsharded_flops(shp, 1, kept)
        blocks = blocks + (main + pass_flops(_mtp_ops(shp), "none")).scaled(k)
        head = head.scaled(1 + k)
    return blocks, head


_unsharded = memoised(maxsize=4096)(LayerShape.unsharded)


@memoised(maxsize=4096)
def _unsharded_flops(shp: LayerShape, L: int, expert_share: float = 1.0) -> tuple[PassFlops, PassFlops]:
    ops = _layer_ops(shp)
    if expert_share != 1.0:  # the routed experts' GEMMs ("expert_" ops) on the tokens they execute
        ops = tuple(replace(op, fwd_flops=op.fwd_flops * expert_share,
                            bwd_input_flops=op.bwd_input_flops * expert_share,
                            bwd_weight_flops=op.bwd_weight_flops * expert_share)
                    if op.name.startswith("expert_") else op for op in ops)
    lay = pass_flops(ops, shp.recompute, modules=shp.rc_modules)
    head = pass_flops(_head_ops(shp), "none")
    return lay.scaled(L), head


def model_flops_per_step(scenario: Scenario) -> float:
    """Model FLOPs of one optimizer step, all GPUs: matmul FLOPs of fwd + bwd, no recompute (docs/design.md)."""
    blocks, head = _per_microbatch_unsharded(scenario)
    n_micro = scenario.training.global_batch / scenario.training.micro_batch
    return n_micro * (blocks.model + head.model)


def hardware_flops_per_step(scenario: Scenario) -> float:
    """Hardware FLOPs of one optimizer step, all GPUs: model FLOPs + the recompute mode's re-run forward."""
    blocks, head = _per_microbatch_unsharded(scenario)
    n_micro = scenario.training.global_batch / scenario.training.micro_batch
    return n_micro * (blocks.hardware + head.hardware)


def model_flops_per_token(scenario: Scenario) -> float:
    """Model FLOPs per trained token (for tokens/s ↔ MFU conversions)."""
    return model_flops_per_step(scenario) / scenario.tokens_per_step
