"""What FSDP2 (torch ``fully_shard``, framework ``torch``) keeps unsharded at the three moments its step can peak.

FSDP2 wraps each transformer block as a unit and the chunk itself as the root unit, which holds what no block
holds: the embedding, the final norm and the output layer (the executor's kernels/parallelize.py, torchtitan's
``apply_fsdp``). The root's parameters are unsharded for the whole forward (its post-forward runs after every
block's) and stay unsharded through the whole backward: FSDP2 does not reshard the root after forward
(_fsdp_state.py ``_lazy_init`` sets its ``post_forward_mesh_info = None``, find_string id 59218098) and its
post-backward reshards them after the embedding's: it is gathered once per step, never double-buffered. The
blocks are gathered one after another, each with the next one prefetched. Per unit FSDP2 allocates a flat
all-gather output and copies it out into the unsharded parameters (torch/distributed/fsdp/_fully_shard/
_fsdp_param_group.py ``unshard`` / ``wait_for_unshard``, _fsdp_collectives.py ``foreach_all_gather`` /
``foreach_all_gather_copy_out``); after the backward it copies each unit's unsharded gradients into a flat
reduce-scatter input of the reduce dtype (``foreach_reduce``: ``reduce_scatter_comm.allocate(..., dtype=
reduce_dtype)``) once the unit's parameters are resharded (``post_backward``: ``self.reshard()`` before
``foreach_reduce``).

* **the loss's backward** (the activation peak where the loss's workspace outgrows the recomputed block): only the
  units left unsharded after their forward (TrainingSpec.fsdp_unsharded_after_forward: none from torch 2.8 on,
  pytorch/pytorch#154704; the root before it, #131965; torchtitan also keeps its last block, parallelize_llama.py
  ``reshard_after_forward = layer_id < len(model.layers) - 1`` since PR #165) -- the root's pre-backward hook, which
  gathers it and prefetches the last block, fires on the logits' gradient, after the loss's backward. Taken where
  it exceeds a bound on the last block's backward (the loss's saved tensors and workspace gone, that block's
  working set, the backward term, one block's reduce-scatter input and the output layer's unsharded gradient);
  otherwise the lumped backward term below stands.
* **forward, at the first block's copy-out** -- "in forward with implicit prefetching ... we save a reference to
  the current all-gather result to free after the next copy-out" (``wait_for_unshard``'s docstring): the root's
  unsharded parameters and its all-gather output, the first block's all-gather output and its copy-out. No
  block's activations exist yet.
* **backward, at the activation peak** (the loss's backward into the last block): the root unsharded, the last
  block unsharded, the all-gather output of the block before it (the backward prefetch; in the backward an
  all-gather output is freed right after its copy-out) and one block's unsharded gradient before its
  reduce-scatter, beside every saved activation and the loss's workspace.
* **the root's reduce-scatter**, the end of the backward: the root's unsharded gradients (``param_dtype``) and
  their reduce-dtype copy, beside the other units' sharded gradients; activations and unsharded parameters are
  gone.

torch's FSDPMemTracker, run on the executor's model under FakeTensorMode (tests/test_memory_oracle.py), peaks at
the loss's backward where its workspace dominates (sequence 4096: no unit unsharded, as the model says) and at
each of the other three: the forward one for fp32 with full recompute, the backward one for fp32 without recompute
(inside the last block's backward, where the output layer's gradient and the block's first gradients take the
place of freed activations, which the lumped one-block gradient stands for), the reduce-scatter for the bf16
MixedPrecisionPolicy (an fp32 reduce-scatter input of the root's size).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainsim.specs.framework_behaviour import BEHAVIOURS

from . import activations as act
from . import torchao_float8
from .model_states import state_bytes
from .param_tensors import blocks_among, rank_tensors

if TYPE_CHECKING:
    from trainsim.specs import Scenario

    from .memory import RankParams


@dataclass(frozen=True)
class Fsdp2Phases:
    """Bytes of FSDP2's unsharded parameters, all-gather outputs and unsharded / reduce-scatter gradients."""

    backward: float  # beside the activations and the loss's workspace, at the activation peak
    forward: float   # at the first block's copy-out, without activations
    reduce: float    # at the root's reduce-scatter, without activations or the other units' sharded gradients
    gather_outputs: dict  # flat all-gather outputs allocated at each moment
    loss: float = 0.0  # units left unsharded after forward, at the loss's backward


def fsdp2_phases(root: float, block: float, param_bytes: int, grad_bytes: int, reduce_bytes: int,
                 unsharded_after_forward: str = "none", block_param_bytes: float | None = None) -> Fsdp2Phases:
    """The moments (module doc) for a rank whose root unit holds ``root`` parameters and whose largest block
    ``block``; ``param_bytes``: the compute (``param_dtype``) copy, ``grad_bytes``: the unsharded gradient (same
    dtype), ``reduce_bytes``: the reduce-scatter input (``reduce_dtype``); ``unsharded_after_forward``: the units
    kept unsharded from forward to backward (TrainingSpec.fsdp_unsharded_after_forward); ``block_param_bytes``: a
    block's gathered bytes per parameter where they differ from ``param_bytes`` (torchao's float8 all-gather:
    torchao_float8.gather_bytes_per_param)."""
    bp = param_bytes if block_param_bytes is None else block_param_bytes
    kept = {"none": 0.0, "root": root * param_bytes,
            "root_and_last_block": root * param_bytes + block * bp}[unsharded_after_forward]
    return Fsdp2Phases(backward=root * param_bytes + 2 * block * bp + block * grad_bytes,
                       forward=2 * (root * param_bytes + block * bp),
                       reduce=root * (grad_bytes + reduce_bytes),
                       gather_outputs={"backward": block * bp, "forward": root * param_bytes + block * bp,
                                       "reduce": 0.0, "loss": 0.0},
                       loss=kept)


def loss_moment_rules(phases: Fsdp2Phases, *, workspace: float, working: float, head_saved: float,
                      head_grad: float, block_reduce: float) -> bool:
    """Whether the loss's backward (its ``workspace`` beside every saved activation, ``phases.loss`` unsharded)
    outgrows a bound on the last block's backward: the loss's saved tensors (``head_saved``) and workspace freed,
    the block's recompute ``working`` set, the lumped backward term, one block's reduce-scatter input
    (``block_reduce``) and the output layer's unsharded gradient (``head_grad``)."""
    return workspace + phases.loss >= working - head_saved + phases.backward + block_reduce + head_grad


def peak_moment(phases: Fsdp2Phases, at_activation_peak: float, other_grad_shards: float,
                activation_moment: str = "backward") -> tuple[str, float]:
    """The moment the step peaks at and the bytes by which it outgrows the activation peak, whose FSDP2-dependent
    part is ``at_activation_peak`` (activations, the loss's workspace, ``phases.backward``); at the reduce-scatter
    the other units' sharded gradients that the activation peak does not hold (``other_grad_shards``) exist."""
    forward = phases.forward - at_activation_peak
    reduce = phases.reduce + other_grad_shards - at_activation_peak
    if max(forward, reduce) <= 0:
        return activation_moment, 0.0
    return ("forward", forward) if forward >= reduce else ("reduce", reduce)


def fsdp2_of(scenario: Scenario, rp: RankParams, stage: int = 0) -> Fsdp2Phases:
    """FSDP2's unsharded bytes at its peak moments on a rank of ``stage`` (module doc); the reduce-scatter input is
    in the sharded gradient's dtype (the MixedPrecisionPolicy's reduce_dtype)."""
    t = scenario.training
    return fsdp2_phases(rp.root_params, rp.block_params, t.param_bytes, t.grad_bytes, state_bytes(t).grads,
                        t.fsdp_unsharded_after_forward or "none", block_gather_bytes(scenario, stage))


def block_gather_bytes(scenario: Scenario, stage: int) -> float | None:
    """A block's gathered bytes per parameter under torchao's float8 all-gather, averaged over the stage's blocks
    (param_tensors.blocks_among: their linear weights in 1 byte, the rest in the parameter dtype); None without
    it or without blocks."""
    if not scenario.training.float8_all_gather:
        return None
    tensors = blocks_among(rank_tensors(scenario, stage))
    blocks = sum(p.elems for p in tensors)
    return torchao_float8.gather_bytes_per_param(scenario, tensors, blocks) if blocks > 0 else None


@dataclass(frozen=True)
class Fsdp2Peak:
    """FSDP2's phases on a rank and its moment at the stage's activation peak, worked out once per stage."""

    phases: Fsdp2Phases
    moment: str       # "loss" or "backward" (``activation_peak``)
    gathered: float   # the unsharded bytes at that moment


def applies(scenario: Scenario) -> bool:
    """Whether the scenario gathers parameters as FSDP2 does: ZeRO-3 under a framework that runs ``fully_shard``."""
    t = scenario.training
    return t.effective_zero >= 3 and BEHAVIOURS[t.framework].fsdp2 and BEHAVIOURS[t.framework].zero3_gather != "tensor"


def activation_peak(scenario: Scenario, stage: int, rp: RankParams, working: float) -> Fsdp2Peak:
    """FSDP2's moment at the stage's activation peak and its unsharded bytes there: ("loss", the units kept after
    forward) on the loss stage where the loss's backward rules (``loss_moment_rules``), else ("backward", the
    lumped backward term)."""
    phases = fsdp2_of(scenario, rp, stage)
    if stage != scenario.loss_stage:
        return Fsdp2Peak(phases, "backward", phases.backward)
    t, m = scenario.training, scenario.model
    rules = loss_moment_rules(phases, workspace=act.logits_workspace_bytes(scenario), working=working,
                              head_saved=act.head_activation_bytes(scenario),
                              head_grad=m.vocab_size * m.embed_dim / scenario.layout.tp * t.param_bytes,
                              block_reduce=rp.block_params * state_bytes(t).grads)
    return Fsdp2Peak(phases, "loss", phases.loss) if rules else Fsdp2Peak(phases, "backward", phases.backward)


def activation_peak_gather(scenario: Scenario, stage: int, rp: RankParams,
                           working: float) -> tuple[str, float]:
    """(moment, unsharded bytes) of ``activation_peak``."""
    peak = activation_peak(scenario, stage, rp, working)
    return peak.moment, peak.gathered


def fsdp2_moment(peak: Fsdp2Peak | None, rp: RankParams, details: dict, activations: float = 0.0,
                 off_peak: float = 0.0) -> tuple[str, float] | None:
    """FSDP2's peak moment on the stage and its bytes beyond the activation peak (module doc) from its ``peak``
    (``activation_peak``); the blocks' off-peak gradient shards exist at the root's reduce-scatter. None outside
    FSDP2's ZeRO-3 (``peak`` None)."""
    if peak is None:
        return None
    at_peak = activations + details.get("logits_workspace", 0.0) + details["zero3_gather_buffers"]
    shards = off_peak * (rp.held - rp.root_params) / rp.held if rp.held else 0.0
    return peak_moment(peak.phases, at_peak, shards, peak.moment)
