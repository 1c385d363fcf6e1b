"""What the frameworks' behaviours (specs/framework_behaviour.py: ``FrameworkBehaviour``, ``BEHAVIOURS``) cost.

The per-framework facts and their citations live in specs/framework_behaviour.py; this module holds the constants
and pure functions that turn them into bytes, calls and defaults for the cost models and the engine builder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainsim.specs.framework_behaviour import BEHAVIOURS

if TYPE_CHECKING:
    from trainsim.specs import Scenario, TrainingSpec

# DeepSpeed ZeRO config default allgather_bucket_size (elements): ZeRO-1/2 gather the updated parameters in
# ``max(1, partition_numel * dp // allgather_bucket_size)`` sequential all-gathers per parameter group
# (deepspeed/runtime/utils.py ``all_gather_dp_groups``, find_string id 48284869659).
DEEPSPEED_ALLGATHER_BUCKET_PARAMS = 5e8
# Composer DecoupledAdamW, one pass per eager op over fp32 state and gradient (specs/framework_behaviour.py
# docstring, "optimizer_update"): exp_avg mul_ (r4 w4) and add_ (r8 w4), exp_avg_sq mul_ (8) and addcmul_ (r8 w4),
# sqrt (8), / c2 (8), add_ eps (8), param.addcdiv_ (r12 w4). HBM bytes per parameter.
PER_PARAM_LOOP_ADAM_BYTES = 8 + 12 + 8 + 12 + 8 + 8 + 8 + 16
# torch.optim.Adam foreach (specs/framework_behaviour.py docstring, "optimizer_update"): lerp_, mul_, addcmul_,
# sqrt, div_, add_, addcdiv_.
FOREACH_ADAM_BYTES = 12 + 8 + 16 + 8 + 8 + 8 + 16
# FSDP keeps the sharded parameter (and so its gradient shard) in fp32 under mixed precision.
FSDP_SHARD_GRAD_BYTES = 4
# DeepSpeed ZeRO-3 default stage3_param_persistence_threshold (elements): smaller parameters stay resident.
DEEPSPEED_PERSISTENCE_THRESHOLD = 1e5
# DeepSpeed ZeRO-3 defaults stage3_prefetch_bucket_size (elements one prefetch gathers at least, unless the queue
# ends) and stage3_max_live_parameters (gathered elements beyond which nothing more is prefetched):
# deepspeed/runtime/zero/config.py, ``pp_int(5e7)`` and ``pp_int(1e9)`` in v0.10.0, v0.12.3 and 38327e07.
DEEPSPEED_PREFETCH_BUCKET = 5e7
DEEPSPEED_MAX_LIVE_PARAMS = 1e9


def p2p_blocks(training: TrainingSpec) -> bool:
    """Whether the sender's compute waits for its pipeline sends (TrainingSpec.overlap_p2p or the default)."""
    if training.overlap_p2p is not None:
        return not training.overlap_p2p
    mode = BEHAVIOURS[training.framework].p2p_overlap
    return mode == "never" or (mode == "interleaved" and training.schedule != "interleaved")


def p2p_batched(training: TrainingSpec) -> bool:
    """Whether Megatron's interleaved schedule exchanges with both neighbours once per steady-state iteration,
    after its forward and its backward (``send_forward_backward_recv_forward_backward``: Megatron-LM's
    megatron/schedules.py at 285068c8 and Megatron-Core's schedule without ``overlap_p2p_comm``): the blocking p2p
    of a framework built on Megatron-LM's schedules (``megatron_arguments``)."""
    return p2p_blocks(training) and BEHAVIOURS[training.framework].megatron_arguments


def default_overlap_grad_reduce(training: TrainingSpec) -> bool:
    """Whether the framework overlaps gradient reduction with the backward at the training's ZeRO stage by default
    (``TrainingSpec.overlap_grad_reduce`` unset)."""
    fw = BEHAVIOURS[training.framework]
    return fw.overlap_grad_reduce and (fw.overlap_below_zero3 or training.effective_zero >= 3)


def overlap_grad_reduce(training: TrainingSpec) -> bool:
    """Whether the step overlaps gradient reduction with the backward: ``TrainingSpec.overlap_grad_reduce`` where
    set, else the framework's default (``default_overlap_grad_reduce``)."""
    given = training.overlap_grad_reduce
    return default_overlap_grad_reduce(training) if given is None else given


def _deepspeed_reduce(training) -> str:
    """The ZeRO 0-2 reduction mode: the framework's, but DeepSpeed ZeRO-0 and its BF16_Optimizer (ZeRO-1) reduce
    through the engine's ``buffered_allreduce_fallback``: all-reduces of ``elements_per_buffer`` = 5e8 elements."""
    mode = BEHAVIOURS[training.framework].dp_grad_calls
    if mode != "ddp_bucket" and (training.effective_zero == 0 or bf16_optimizer(training)):
        return "bucket_all_reduce"
    return mode


def grad_reduce_op(training: TrainingSpec) -> str:
    """The collective that reduces gradients across data-parallel ranks at the training's ZeRO stage."""
    z, fw = training.effective_zero, BEHAVIOURS[training.framework]
    if z == 0 or (z == 1 and (fw.param_gather == "broadcast_per_param" or training.optimizer == "muon")):
        # torch's ZeroRedundancyOptimizer shards only the optimizer, and so does Megatron-Core's dist_muon (its
        # LayerWise optimizer on DDP without use_distributed_optimizer, cost_models/muon.py): DDP all-reduces
        return "all_reduce"
    mode = _deepspeed_reduce(training) if z <= 2 else "ddp_bucket"
    return {"per_rank_reduce": "reduce", "bucket_all_reduce": "all_reduce"}.get(mode, "reduce_scatter")


def zero12_reduce_calls(training: TrainingSpec, params: float, dp: int, bucket_params: float,
                        max_buckets: int | None = None) -> int | None:
    """Collective calls of one ZeRO 0-2 reduction of ``params`` gradients over ``dp`` ranks in DeepSpeed's buckets
    of ``bucket_params`` elements; None where the framework reduces in DDP buckets. A bucket holds whole
    tensors, so there are at most ``max_buckets`` (the parameter tensors) of them. Each rank owns a contiguous
    1/dp of the flat gradient, so the per-rank ``reduce`` path issues one call per (bucket, owner) pair: the
    owners' ranges split ``buckets - 1`` times more, ``buckets + dp - 1`` calls in all."""
    from .grad_buffer import (
        whole_tensor_buckets,  # lazy: grad_buffer imports this module inside its functions
    )

    mode = _deepspeed_reduce(training) if training.effective_zero <= 2 else "ddp_bucket"
    if mode == "ddp_bucket":
        return None
    buckets = whole_tensor_buckets(params, bucket_params, max_buckets)
    return buckets + dp - 1 if mode == "per_rank_reduce" else buckets


# DeepSpeed's BF16_Optimizer keeps each parameter's bf16 gradient (``lp.grad``) beside its fp32 accumulation
# buffer: ``update_hp_grads(clear_lp_grads=False)`` adds the bf16 grads into ``fp32_groups_gradients_flat`` (a
# ``zeros_like`` of the whole flat bf16 group in fp32, not partitioned) and leaves them allocated until
# ``clear_lp_grads`` before the next backward (deepspeed/runtime/bf16_optimizer.py and pipe/engine.py
# ``_exec_backward_pass``, from PR #1801 "bf16+pipeline parallelism", 56c522386, 2022-04-19, through 38327e07f).
BF16_LP_GRAD_BYTES = 2


def bf16_optimizer(training: TrainingSpec) -> bool:
    """Whether DeepSpeed runs its BF16_Optimizer: bf16 with fp32 gradient accumulation at ZeRO stage 0 or 1 and
    no CPU offload (deepspeed/runtime/engine.py ``_do_optimizer_sanity_check`` returns BFLOAT16 for ZeRO-1 with
    grad_accum_dtype fp32; stage 0 bf16 always takes it)."""
    return (BEHAVIOURS[training.framework].deepspeed_optimizer and training.dtype == "bf16"
            and training.effective_zero <= 1 and training.grad_bytes == 4 and not training.offload_optimizer)


def grad_accumulation_bytes_per_param(training: TrainingSpec, microbatches: int) -> float:
    """HBM bytes per parameter per micro-batch (averaged over the step's ``microbatches``) of adding each
    micro-batch's weight gradients into the accumulated ones in a pass of its own:

    * the framework's ``grad_accumulation_pass`` (specs/framework_behaviour.py): ``3 x grad_bytes``, on
      ``(m - 1) / m`` of the micro-batches where the first one's gradient is stolen
      (``grad_accumulation_steals_first``: megatron-deepspeed's ``param.grad``);
    * DeepSpeed's ZeRO-1 optimizer (DeepSpeedZeroOptimizer at stage 1, bf16 or fp16 gradients): its backward hooks
      act only at the accumulation boundary at stage 1 (``reduce_ready_partitions_and_remove_grads``: ``if
      self.partition_gradients or self.is_gradient_accumulation_boundary``, deepspeed/runtime/zero/
      stage_1_and_2.py of v0.12.3), so every later micro-batch's gradient reaches ``param.grad`` through autograd's
      AccumulateGrad ``grad += new`` (read both, write one: ``3 x grad_bytes``); the first micro-batch's gradient
      is stolen, not added: ``(m - 1) / m`` of the passes;
    * DeepSpeed's BF16_Optimizer (``bf16_optimizer``): ``backward`` runs ``update_hp_grads`` after every
      micro-batch, ``hp_grad.add_(lp.grad.to(fp32))`` per parameter (deepspeed/runtime/bf16_optimizer.py of v0.12.3):
      the cast reads the 16-bit gradient and writes it in fp32, the add reads both fp32 tensors and writes one.
    DeepSpeed's ZeRO-1/2 optimizer also copies each gradient into its contiguous reduce bucket in the backward hook,
    on the compute stream (``reduce_independent_p_g_buckets_and_remove_grads``: ``new_grad_tensor.copy_(grad_reduc
    .view(-1))`` into ``ipg_buffer``, ``contiguous_gradients`` on by default): read and write, ``2 x grad_bytes``,
    at the boundary micro-batch at stage 1 and every micro-batch at stage 2.
    ZeRO-2/3 reduce every micro-batch and accumulate only the 1/dp shard (folded into the optimizer's bytes); torch's
    FSDP at ZeRO-3 likewise frees each unsharded gradient once reduce-scattered (FSDP2 ``post_backward``), while at
    ZeRO-2 (unsharded parameters kept, Llama 3's fp32 accumulation) autograd's ``grad +=`` pass stays."""
    fw, g, m = BEHAVIOURS[training.framework], training.grad_bytes, max(1, microbatches)
    if fw.torch_fsdp and training.effective_zero >= 3:
        return 0.0
    if fw.grad_accumulation_pass:
        return 3.0 * g * ((m - 1) / m if fw.grad_accumulation_steals_first else 1.0)
    if bf16_optimizer(training):
        return float(training.param_bytes + 4 + 3 * 4)
    if fw.deepspeed_optimizer and training.effective_zero in (1, 2) and not training.offload_optimizer:
        bucket_copy = 2.0 * g * (1.0 / m if training.effective_zero == 1 else 1.0)
        return bucket_copy + (3.0 * g * (m - 1) / m if training.effective_zero == 1 else 0.0)
    return 0.0


def fsdp_divide_factors(world: int) -> tuple[float, float]:
    """FSDP's gradient (pre, post) divide factors for ``world`` ranks (default_hooks.DefaultState)."""
    factor = 1
    while world % factor == 0 and world / factor > factor:
        factor *= 2
    return float(factor), world / factor


def fsdp_grad_prep_bytes_per_param(e: int, g: int, world: int, accumulate: bool) -> float:
    """HBM bytes per parameter of one FSDP unit's gradient preparation in one micro-batch (specs/
    framework_behaviour.py docstring, ``fsdp_grad_prep``):
    ``e``-byte compute gradients reduced in ``g`` bytes over ``world`` ranks; shard passes divided by ``world``."""
    pre, post = fsdp_divide_factors(world)
    unsharded = 2 * e + (e + g if g != e else 0) + (2 * g if pre > 1 else 0)
    s = FSDP_SHARD_GRAD_BYTES
    shard = (2 * g if post > 1 else 0) + (g + s if g != s else 0) + (3 * s if accumulate else 0)
    return float(unsharded + shard / world)


def fsdp2_copy_bytes_per_param(param_bytes: int, grad_bytes: int) -> tuple[float, float]:
    """HBM bytes per parameter of FSDP2's compute-stream copies (specs/framework_behaviour.py docstring,
    ``fsdp2_copies``): (the all-gather copy-out of one unshard: read and write the ``param_bytes``-byte parameter,
    the reduce-scatter copy-in of one reduction: read the ``param_bytes``-byte unsharded gradient, write it in the
    ``grad_bytes``-byte reduce dtype)."""
    return 2.0 * param_bytes, float(param_bytes + grad_bytes)


def eager_ce_cast_bytes(e: int) -> tuple[float, float]:
    """HBM bytes per logit, (forward, backward), of the dtype casts inside torch's eager fp32 cross-entropy:
    ``.float()`` (read e, write 4) and autograd's cast of the gradient back (read 4, write e)."""
    return float(e + 4), float(4 + e)


def train_metric_bytes_per_logit(e: int) -> float:
    """HBM bytes per logit of one eager no-grad cross-entropy (a train-metric update), e-byte logits."""
    return float(e + 4 + 12 + 4)


def cross_entropy_bytes(fused: bool, e: int, eager: bool = False) -> tuple[float, float]:
    """HBM bytes per logit of the loss, (forward, backward), for ``e``-byte logits (see the
    specs/framework_behaviour.py docstring):
    fused kernel, torch's eager ``F.cross_entropy`` on an fp32 copy (``eager``), else Megatron's."""
    if fused:
        return float(e + 4), float(4 + e)
    if eager:
        return float(e + 4 + 8), float(4 + 12 + 4 + e)
    return float(e + 4 + 32), float(8 + 4 + e)


def autocast_tag(scenario: Scenario) -> str | None:
    """``"+autocast-bf16"`` / ``"+autocast-fp16"`` where ``scenario`` runs as trainsim execute runs a one-GPU-deep
    layout under autocast (framework torch, 16-bit dtype, no TP, PP or FSDP2: kernels/parallelize.py
    ``build_parallel``), else None."""
    t, lay = scenario.training, scenario.layout
    if not t.autocast or t.framework != "torch" or lay.tp > 1 or lay.pp > 1:  # t.autocast implies a 16-bit dtype
        return None
    if scenario.dp > 1 and t.effective_zero >= 3:
        return None
    return f"+autocast-{t.dtype}"


def autocast_cast_bytes_per_param(scenario: Scenario) -> float:
    """HBM bytes per parameter per micro-batch of autocast's weight casts where trainsim execute runs the scenario
    under autocast (``autocast_tag``): the first forward of the step casts each fp32 weight to 16 bits (read 4,
    write e; cached for the step's later micro-batches, so 1/n per micro-batch) and every backward casts each
    weight's 16-bit gradient back to fp32 (``ToCopyBackward0``: read e, write 4) before AccumulateGrad. The
    profiled H200 step shows both: one bf16 copy kernel per weight in the first forward and one fp32 copy per
    weight and micro-batch (784 = 196 tensors x 4 micro-batches, benchmarks/data/trace_summary_h200.json). Under
    full recompute each checkpoint's recompute leaves its own autocast region, which clears the cache
    (cost_models/autocast.py): every micro-batch's forward and its recompute cast the weights again."""
    if autocast_tag(scenario) is None:
        return 0.0
    e = 2
    if scenario.training.recompute == "full":
        return 2 * (4 + e) + (e + 4)
    return (4 + e) / scenario.num_microbatches + (e + 4)


def queued_microbatches(scenario: Scenario) -> int:
    """Micro-batches one host issues back to back without a host sync between them, or 0 where each pass is
    bounded by its own issue: trainsim execute's one-stage gradient accumulation (``autocast_tag`` layouts,
    kernels/parallelize.py ``_accumulate``: no sync until the step's loss is read)."""
    return scenario.num_microbatches if autocast_tag(scenario) else 0
