"""Reserved bytes the first optimizer step adds by creating Adam's states after the activations were freed.

torch.optim.Adam creates ``exp_avg`` and ``exp_avg_sq`` (``torch.zeros_like(p)``) for each parameter lazily,
in ``_init_group`` at the first ``step()``; apex's and Transformer Engine's FusedAdam, which Megatron's
optimizers wrap, do the same on their first step (``if len(state) == 0``). The first step runs after the
first backward has freed the activations, so the states land -- best fit, split -- in the segments the
activations left cached, and the second step's activations need segments of their own. With the states
created before the first forward, they would take their own segments and the activations would reuse theirs.

``first_step_extra_reserved`` replays both orders of one stage's default-stream tensors through the caching
allocator (caching_allocator.py) -- per micro-batch in flight each block's saved tensors, as activations.py
counts them, allocated in forward order and freed in reverse; the stage's embedding / head activations; then
the states of every parameter tensor the rank's optimizer holds (with ZeRO-1+ the tensor pieces of its shard,
grad_buffer.optimizer_tensor_elems, as the distributed optimizer creates them) --
and returns the difference of the two reserved peaks. Weights, gradient buffers and fp32 main parameters are
allocated before the first forward and never freed, and FSDP's all-gathered parameters and reduce-scattered
gradients live in their side streams' pools, which default-stream requests never use (allocator_reserve.py),
so none of them changes the difference. Left out: transient workspaces (the loss's logits, a recomputed
block's working set) and the interleaving of forwards and backwards of a pipeline schedule (the in-flight
micro-batches are allocated together and freed in reverse).

``None`` where the trace cannot be built faithfully -- MoE or MLA blocks, a saved set the tensor list below does
not add up to, a non-default optimizer -- and the caller keeps its own estimate. torch.optim's Adam / AdamW create
their states lazily too (``_init_group``), but torch's FSDP runs are not replayed: their answer depends on
tensors the trace leaves out. Where the loss's logits are the largest tensor, a state that splits an activation's
segment pushes that activation into the logits' freed segment and the next step's logits into a new one, so
adding the blocks' recompute working sets to the trace, or leaving the logits out, moves the replay's figure by
the logits' size: 7.7, 0.0 and 0.04 GiB on torchtitan's Llama 3.1 8B run on 128 H100s (memory_runs.csv
tt24_t3_fsdp, predicted -0.0 % without it), 2.7, 1.2 and 2.7 GiB on PR #165's FSDP1 run with per-op SAC
(benchmarks/bench_first_step_sensitivity.py prints every torch FSDP row). torch's own trace of PR #165's eager
step, every tensor included (kernels/alloc_trace.py, benchmarks/bench_titan_allocator_trace.py), reserves 1.0 GiB
(full AC) and 1.1 GiB (per-op SAC) less with the states created lazily than up front; where a scenario runs that
per-op SAC step, op_sac_trace.py replays it op by op, lazy states included.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from trainsim.specs.framework_behaviour import behaviour
from trainsim.specs.memo import memoised

from .activations import (
    MASK_BYTES,
    _fp8_saved,
    _gemm_input_bytes,
    _gemm_input_e,
    _norm_bytes,
    embedding_activation_bytes,
    head_activation_bytes,
    kernels,
    layer_activation_bytes,
    op_sac_saved_tensors,
)
from .caching_allocator import replay
from .shapes import LayerShape, layer_shape

if TYPE_CHECKING:
    from trainsim.specs import Scenario, TrainingSpec

# The tensor list may miss this share of activations.py's per-block total (its small terms are several fp32
# statistics tensors, listed as one).
REST_TOLERANCE = 0.02
# The replay folds in the micro-batches in flight (GPipe holds all of a step's) as simulator/fold.py folds the
# engine's step: every micro-batch allocates and frees the same tensors, so past a transient the difference of the
# two orders' reserved peaks is periodic in the micro-batches on the stages tried (constant from 12 to 15
# micro-batches on Llama 3 8B's stages at 1024 tokens, full or no recompute; period 5 on a two-block stage whose
# 595 MiB recompute temporary the states split, tests/test_first_step_fragmentation.py). The fold replays a window
# of 2 FOLD_PERIOD + 1 consecutive counts from FOLD_START, takes the smallest period p <= FOLD_PERIOD with which
# the window repeats exactly (every value equals the one p counts later), and reads the count asked at its phase
# in the window. Where the difference is periodic from the window's start with a period of at most FOLD_PERIOD, the
# window has that period and the smallest one it has divides it (Fine and Wilf: a word of length n with periods
# p and q, n >= p + q - gcd(p, q), has period gcd(p, q)), so the answer is the whole replay's. What the window
# cannot see, and the fold then misreads, is a transient that outlasts it or a longer period. Both occur on random
# traces whose sub-10 MiB tensors share cached segments: the difference can stay constant for 77 counts and then
# change, or repeat with period 7 in regimes that alternate every few dozen counts (tests: a strict xfail). Where
# no period fits, the window moves out (start and period times FOLD_GROWTH); the fold is used only where the
# window's counts add up to fewer micro-batches than the count asked (a replay's cost is linear in its events).
FOLD_START = 32
FOLD_PERIOD = 16
FOLD_GROWTH = 4


def block_saved_tensors(shp: LayerShape, impl: str) -> tuple[float, ...] | None:
    """Sizes (bytes) of the tensors one dense block saves for its backward, in forward order; ``None`` where
    this list does not cover the block (MoE, MLA, per-op checkpointing, LoRA, hybrid Mamba stacks) or misses more
    than REST_TOLERANCE."""
    if shp.is_moe or shp.mla or shp.te_cp_p2p or shp.qk_norm or shp.lora_rank or shp.kind:
        return None
    impl = kernels(shp, impl)
    total = layer_activation_bytes(shp, impl).total
    if shp.recompute == "full":
        return (total,)
    if shp.recomputes("op_sac"):
        return _checked(op_sac_saved_tensors(shp), total)
    e, h, t, r, T = shp.e, shp.h, shp.tp, shp.sp_div, shp.tokens
    norm_in, _norm_small = _norm_bytes(shp, T / r, impl)
    gemm_in = 0.0 if shp.recomputes("layernorm") else _gemm_input_bytes(shp, impl)
    mask = [MASK_BYTES * T * h / r] if shp.dropout else []
    heads = shp.a // t
    kv = shp.a if impl == "titan" else shp.kv  # torchtitan's repeat_kv copies
    qkv = [e * T * heads * shp.d, e * T * kv * shp.d / t, e * T * kv * shp.d / t]
    if impl == "fused":
        qkv = [sum(qkv)]  # Megatron's fused QKV projection: one output, viewed as q, k, v
    o, ge = T * heads * shp.dvh, _gemm_input_e(shp, impl)
    attn_out = [ge * o]  # the out-projection's input; flash's own 16-bit copy beside an fp8 one
    if not shp.recomputes("core_attn") and (_fp8_saved(shp, impl) or (impl == "eager" and shp.rope)):
        attn_out.append(e * o)
    f = shp.f / t
    if shp.recomputes("mlp"):
        mlp = []
    elif shp.gated:  # fused: gate|up, product (fc2's input); eager/titan: gate, up, silu(gate), product
        mlp = [2 * e * T * f, ge * T * f] if impl == "fused" else [e * T * f] * 3 + [ge * T * f]
    else:  # fc1's output, GeLU's output (fc2's input)
        mlp = [e * T * f, ge * T * f]
    tensors = [norm_in, gemm_in, *qkv, *attn_out, *mask, norm_in, gemm_in, *mlp, *mask]
    if not shp.flash and not shp.recomputes("core_attn"):
        probs = shp.b * heads * (shp.s // shp.cp) * shp.s
        tensors += [e * probs] + ([MASK_BYTES * probs, e * probs] if shp.dropout else [])
    return _checked(tensors, total)


def _checked(tensors: list[float], total: float) -> tuple[float, ...] | None:
    """``tensors`` (zero sizes dropped) with the rest of activations.py's ``total`` as one last tensor, or ``None``
    where they exceed the total or miss more than REST_TOLERANCE of it."""
    tensors = [x for x in tensors if x > 0]
    rest = total - sum(tensors)
    if rest < -1.0 or rest > REST_TOLERANCE * total:
        return None
    return tuple(tensors) + ((rest,) if rest > 0 else ())


def head_saved_tensors(scenario: Scenario, impl: str) -> tuple[float, ...]:
    """The loss stage's tensors per micro-batch (activations.head_activation_bytes): the final norm's input and
    statistics, its output (the output layer's input), then what the loss saves and the targets, as one."""
    shp = layer_shape(scenario)
    n = shp.tokens / shp.sp_div
    norm_in, norm_small = _norm_bytes(shp, n, impl)
    out = _gemm_input_bytes(shp, impl, fp8_input=False)
    return norm_in, norm_small, out, head_activation_bytes(scenario, impl) - norm_in - norm_small - out


def _micro_batch(k: int, blocks: tuple[tuple[float, ...], tuple[float, ...]], layers: int, first: tuple[float, ...],
                 last: tuple[float, ...]) -> tuple[list, list]:
    """Forward and backward events of micro-batch ``k``: ``blocks`` = (kept, temporaries) per block --
    temporaries are a checkpointed block's forward, alive while it runs forward and again while it is recomputed
    in its backward; kept tensors are freed in reverse order by the backward."""
    kept, temps = blocks
    fwd, bwd = [], []

    def keep(tag, sizes):
        fwd.extend(("alloc", (k, tag, i), x) for i, x in enumerate(sizes))
        return [("free", (k, tag, i)) for i in reversed(range(len(sizes)))]

    def transient(tag, out):
        out.extend(("alloc", (k, tag, i), x) for i, x in enumerate(temps))
        out.extend(("free", (k, tag, i)) for i in reversed(range(len(temps))))

    frees = [keep("first", first)]
    for layer in range(layers):
        frees.append(keep(("block", layer), kept))
        transient(("fwd", layer), fwd)
    frees.append(keep("last", last))
    for layer_frees in reversed(frees):
        if layer_frees and layer_frees[0][1][1] not in ("first", "last"):
            transient(("re", layer_frees[0][1][1][1]), bwd)
        bwd.extend(layer_frees)
    return fwd, bwd


@memoised(maxsize=1024)
def _extra_reserved(blocks, layers: int, first, last, inflight: int, states: tuple[float, ...]) -> int:
    """The lazy order's reserved peak less the up-front order's, folded in ``inflight`` (FOLD_START's comment)
    where a window of counts cheaper than the whole replay repeats, else replayed whole."""
    start, period = FOLD_START, FOLD_PERIOD
    while _window_cost(start, period) < inflight:
        folded = _folded(blocks, layers, first, last, inflight, states, start, period)
        if folded is not None:
            return folded
        start, period = start * FOLD_GROWTH, period * FOLD_GROWTH
    return _replayed(blocks, layers, first, last, inflight, states)


def _window_cost(start: int, period: int) -> int:
    """Micro-batches the window from ``start`` replays: counts start .. start + 2 period."""
    return sum(range(start, start + 2 * period + 1))


def _folded(blocks, layers: int, first, last, inflight: int, states: tuple[float, ...], start: int = FOLD_START,
            period: int = FOLD_PERIOD) -> int | None:
    """The difference at ``inflight`` >= ``start`` read at its phase in the window of counts start .. start +
    2 ``period``, replayed whole, with the smallest period (at most ``period``) the window repeats with; ``None``
    where it repeats with none."""
    window = [_replayed(blocks, layers, first, last, start + i, states) for i in range(2 * period + 1)]
    p = smallest_period(window, period)
    return None if p is None else window[(inflight - start) % p]


def smallest_period(values: list, longest: int) -> int | None:
    """The smallest p <= ``longest`` with values[i] == values[i + p] wherever both exist; ``None`` if none."""
    return next((p for p in range(1, longest + 1)
                 if all(values[i] == values[i + p] for i in range(len(values) - p))), None)


@memoised(maxsize=1024)
def _replayed(blocks, layers: int, first, last, inflight: int, states: tuple[float, ...]) -> int:
    """The difference of the two orders' reserved peaks, every micro-batch replayed."""
    def step(tag):
        passes = [_micro_batch((tag, k), blocks, layers, first, last) for k in range(inflight)]
        return [e for f, _ in passes for e in f] + [e for _, b in reversed(passes) for e in b]

    st = [("alloc", ("s", i), x) for i, x in enumerate(states)]
    step1, step2 = step(1), step(2)
    lazy = replay(step1 + st + step2).peak_reserved
    upfront = replay(st + step1 + step2).peak_reserved
    return max(0, lazy - upfront)


def first_step_extra_reserved(scenario: Scenario, stage: int, *, inflight: int, layers: int,
                              param_elems: tuple[float, ...], state_bytes: tuple[int, ...],
                              impl: str) -> float | None:
    """Reserved bytes on one rank of ``stage`` that the lazily created optimizer states add (module doc).

    ``inflight``: micro-batches whose activations are alive at the peak; ``layers``: the stage's blocks;
    ``param_elems``: the elements of each tensor (or shard piece) the rank's optimizer updates, in its order
    (grad_buffer.optimizer_tensor_elems); ``state_bytes``: the bytes per element of each lazily created state
    tensor (Adam m, v).
    """
    shp = layer_shape(scenario)
    kept = block_saved_tensors(shp, impl)
    temps = block_saved_tensors(replace(shp, recompute="none"), impl) if shp.recompute == "full" else ()
    if kept is None or temps is None or inflight < 1:
        return None
    first = (embedding_activation_bytes(scenario),) if stage == 0 else ()
    last = head_saved_tensors(scenario, impl) if stage == scenario.loss_stage else ()
    states = tuple(n * b for n in param_elems if n > 0 for b in state_bytes)
    return float(_extra_reserved((kept, temps), layers, first, last, inflight, states))


def lazy_state_bytes(training: TrainingSpec) -> tuple[tuple[int, ...] | None, str]:
    """Bytes per element of the optimizer-state tensors created at the first step (Adam m, v), or ``None``,
    with the sentence the prediction's memory assumptions state either way."""
    fw = training.framework
    if training.offload_optimizer:
        return None, "optimizer states on the host: no first-step fragmentation of device segments"
    if behaviour(fw).deepspeed_engine:
        return None, ("DeepSpeed creates its optimizer states at construction (ZeRO initialize_optimizer_states, "
                      "deepspeed/runtime/zero/stage_1_and_2.py): no first-step fragmentation")
    if not behaviour(fw).lazy_optimizer_states:
        return None, ("Adam's states are created at the first step (torch.optim.Adam _init_group), not replayed "
                      "for this framework: the replay of its runs moves by the logits' size with the transient "
                      "tensors the trace leaves out (first_step_fragmentation.py); the reserved figure leaves the "
                      "first-step fragmentation out")
    if training.optimizer == "muon":
        return None, ("Muon's momentum buffers (cost_models/muon.py) are not replayed: the first-step "
                      "fragmentation is left out")
    if training.optimizer_bytes_per_param not in (8, 12):
        return None, (f"optimizer_bytes_per_param {training.optimizer_bytes_per_param:g} is not Adam's: the "
                      "first-step fragmentation is not replayed")
    return (4, 4), ("Adam's m, v created at the first step (FusedAdam): reserved bytes from the caching-allocator "
                    "replay of the first two steps (first_step_fragmentation.py)")
