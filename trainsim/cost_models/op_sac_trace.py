"""The compute stream's allocations of torchtitan's eager Llama step under per-op selective activation
checkpointing, generated op by op from the shapes, and the caching allocator's reserved-but-free bytes they leave.

Under torchtitan's per-op policy (``_save_list``: every aten.mm but each block's second, fourth and sixth, and
SDPA; torchtitan/parallelisms/parallelize_llama.py of 2024, read_file id 16980159914) a block keeps q, v, the
attention output and its logsumexp, w1's and w2's outputs and its input, and frees every other forward tensor as
soon as its consumer ran; the backward recomputes the block's forward up to each saved op, interleaving the
recomputed temporaries with the activation gradients and the freed saved tensors. The kept tensors of later
blocks are allocated between an earlier block's freed temporaries, so the backward's requests -- of the same
sizes, in another order -- find free blocks split by tensors that are still alive: the allocator cudaMallocs new
segments while cached bytes sit free (caching_allocator.py says which request takes which block). The
loss-stage term (allocator_reserve.loss_stage_cached_bytes) sees only the cached blocks at the loss.

The tables below are the step's allocations and frees per aten op, in the order torch issues them, read from
torch's own trace of one block (kernels/alloc_trace.py, recorded under FakeTensorMode; the same sequence at any
layer, step and width): per op ``+SIZE`` allocates the phase's next tensor and ``-i`` frees the phase's tensor
``i``; ``-fI`` frees the block's forward tensor ``I`` (a saved tensor), ``-in`` the block's input (the previous
block's output or the embedding's), ``-g`` the gradient the phase above passed down, ``-hI`` the loss phase's
tensor ``I``. Sizes: ``T`` tokens of the micro-batch, ``h`` width, ``k`` key/value width (heads x head_dim), ``f``
MLP width, ``V`` vocabulary, trailing digit the bytes per element; ``bas4`` the fp32 logsumexp (batch x heads x
sequence), ``sd4`` RoPE's conjugated complex64 frequencies (sequence x head_dim / 2 x 8 B), ``S4`` a scalar.
Phases: ``FORWARD`` (a block: its RMSNorms upcast to fp32, q/k/v, RoPE in fp32, SDPA, wo, SwiGLU), ``HEAD`` (final
norm, output layer, the fp32 logits torchtitan keeps through the backward, ``F.cross_entropy`` and its backward
into the last block), ``BACKWARD`` (a block's recompute and gradients; each weight gradient freed once produced, as
FSDP reduces and frees the unsharded gradient), ``TAIL`` (the embedding's gradient, then ``del pred, loss``). With
grouped-query attention ``repeat_kv`` copies k and v to the query heads (``FORWARD_GQA``: two ``clone``s, freed
with q and v's inputs after wo; ``BACKWARD_GQA``: their gradients summed back to the key/value heads); torchtitan's
loss of late 2024 (``HEAD_FREED``, ``TAIL_FREED``) takes the 16-bit logits, casts them to fp32 inside ``loss_fn``,
and train.py deletes them before the backward (pytorch/torchtitan 9dec370 train.py; kernels/alloc_trace.py
``logits_kept=False``). Adam's two fp32 states of every parameter's 1/``shard`` piece are created after the first
step's backward (torch.optim's lazy ``_init_group``); the replay runs two steps (caching_allocator.replay).

``op_sac_cached_bytes`` returns the replay's reserved peak less its allocated peak: the compute stream's cached
bytes at the reserved peak, in place of the loss-stage term, where the scenario runs this code -- torch FSDP (1 or
2) over eager torchtitan blocks (shapes.LayerShape.titan) with per-op SAC, multi-head or grouped-query attention
(not one key/value head, whose ``repeat_kv`` is a view), no TP / CP / PP, one micro-batch per step and torchtitan's
eager fp32 loss (cross_entropy eager_fp32 or eager_fp32_kept), or that step compiled (below); ``None`` elsewhere.
Left out, as in the trace: FSDP's side-stream pools (fsdp_stream_pools.py), its unsharded parameters and gradients
(FSDP2 holds a unit's unsharded gradients until its reduce-scatter copy-in; FSDP1 concatenates them into the flat
gradient), CUDA's flash-attention workspaces (the trace dispatches to the CPU kernel), the optimizer's foreach
temporaries. Held against the trace's replay in tests/test_op_sac_trace.py. PR #165's Llama 2 7B step: 4.29 GiB
where the loss-stage term gives 2.0 (FSDP1) and 2.9 (FSDP2) (benchmarks/bench_titan_allocator_trace.py); late
2024's Llama 3.1 8B step (local batch 2 x 8192): 7.45 GiB on 8 ranks and 6.71 on 128, where it gives 6.2.

Adam's lazily created states land in the segments the first step's loss and blocks left cached, so the reserved
peak hardly depends on the shard they are cut to once they fit there: on Llama 3.1 8B's step (local batch 2 x
8192, grouped-query attention, late 2024's loss) the replay reserves 62.15 GiB without states and 62.21, 62.31,
62.23 GiB with the 1.87, 0.93, 0.47 GiB of states of 32, 64 and 128 ranks (the 7.48 GiB of 8 ranks do not fit
there: 69.98); the reserved figure falls from 32 to 64 ranks by what the rank's fp32 parameters and gradients lose,
not by the states' 0.93 GiB (tests/test_op_sac_trace.py; the June 2025 H200 runs, memory_runs.csv tt25_h200_32/64,
fall by 0.99 GiB, where counting the states as allocated would make the model fall by 2.34).

**Compiled steps** (``compiled_stand_in``): torchtitan compiles each block (and, from 2025, its loss) with the
per-op policy inside; AOTAutograd's partitioner saves what the policy marks MUST_SAVE, so the saved tensors and
their order are the eager step's, and torchao's float8 Linear keeps the 16-bit outputs of its scaled mm. The
eager tables stand for the compiled step, the eager late-2024 loss for a compiled one: an upper estimate of its
cached bytes, since Inductor fuses the RMSNorms' fp32 temporaries and the loss's fp32 copy -- the compiled rows
of memory_runs.csv come out 1.4-2.5 % high with local batch 2 x 8192 (tt24_t1/t3_compile, tt25_h200) or 8 x 2048
(tt165_fsdp2_sac_compile_resv), 5.2 % with 16 x 2048, where the loss-stage term leaves them up to 8.8 % low.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainsim.specs.framework_behaviour import behaviour
from trainsim.specs.memo import memoised

from .caching_allocator import replay
from .shapes import layer_shape

if TYPE_CHECKING:
    from trainsim.specs import Scenario, TrainingSpec

FP32_BYTES = 4


Table = tuple[tuple[str, ...], ...]  # one phase: per op its ``+SIZE`` / ``-REF`` tokens


def _table(*lines: str) -> Table:
    """One phase's ops: each ``op +SIZE ... -REF ...`` (module doc), ``|`` between ops."""
    return tuple(tuple(op.split()[1:]) for line in lines for op in line.split("|"))


FORWARD = _table(
    "_to_copy +Th4 | pow +Th4 | mean +T4 -1 | add +T4 -2 | rsqrt +T4 -3 | mul +Th4 -4 | _to_copy +Th2 -5",
    "mul +Th2 -6 -0 | mm +Th2 | mm +Th2 | mm +Th2 | _to_copy +Th4 | _to_copy +Th4 | mul +Th4",
    "_to_copy +Th2 -13 | mul +Th4 | _to_copy +Th2 -15 -11 -12 -9 | sdpa +Th2 | sdpa +bas4",
    "mm +Th2 -7 -14 -16 | add +Th2 -19 | _to_copy +Th4 | pow +Th4 | mean +T4 -22 | add +T4 -23",
    "rsqrt +T4 -24 | mul +Th4 -25 | _to_copy +Th2 -26 | mul +Th2 -27 -21 | mm +Tf2 | silu +Tf2 | mm +Tf2",
    "mul +Tf2 -30 -31 | mm +Th2 -32 | add +Th2 -20 -28",
)

HEAD = _table(
    "_to_copy +Th4 | pow +Th4 | mean +T4 -1 | add +T4 -2 | rsqrt +T4 -3 | mul +Th4 | _to_copy +Th2 -5",
    "mul +Th2 | mm +TV2 | _to_copy +TV4 -8 | _log_softmax +TV4 | nll_loss_forward +S4",
    "nll_loss_forward +S4 -in | ones_like +S4 | nll_loss_backward +TV4 -12",
    "_log_softmax_backward_data +TV4 -14 -10 | _to_copy +TV2 -15 | mm +Vh2 | mm +Th2 -16 -7 -17 | mul +Th2",
    "mul +Th2 | sum +h2 -19 -18 -6 -21 | _to_copy +Th4 -20 | mul +Th4 | mul +Th4 | sum +T4 -23 -22 | pow +T4",
    "mul +T4 | mul +T4 -27 -26 -25 -4 | div +Th4 -28 | pow +Th4 | mul +Th4 | mul +Th4 -31 -30 -29 -0",
    "add +Th4 -24 -32 | _to_copy +Th2 -33",
)

BACKWARD = _table(
    "_to_copy +Th4 | pow +Th4 | mean +T4 -1 | add +T4 -2 | rsqrt +T4 -3 | mul +Th4 | _to_copy +Th2 -5",
    "mul +Th2 | mm +Th2 | _to_copy +Th4 | _to_copy +Th4 | mul +Th4 | _to_copy +Th2 -11 | mul +Th4",
    "_to_copy +Th2 -13 -9 -10 -f8 -8 | mm +Th2 | add +Th2 -15 | _to_copy +Th4 | pow +Th4 | mean +T4 -18",
    "add +T4 -19 | rsqrt +T4 -20 | mul +Th4 | _to_copy +Th2 -22 | mul +Th2 | silu +Tf2 | mm +Tf2",
    "mul +Tf2 -16 | mm +hf2 | mm +Tf2 -27 -28 | mul +Tf2 | mul +Tf2 -25 -26 -29 | mm +hf2 | mm +Th2 -30 -32",
    "silu_backward +Tf2 -f29 -31 | mm +hf2 | mm +Th2 -24 -34 | add +Th2 -33 -36 -35 | mul +Th2 | mul +Th2 -23",
    "sum +h2 -38 -37 -40 | _to_copy +Th4 -39 | mul +Th4 | mul +Th4 | sum +T4 -42 -41 | pow +T4 | mul +T4",
    "mul +T4 -46 -45 -21 -44 | div +Th4 -47 | pow +Th4 | mul +Th4 | mul +Th4 -50 -49 -17 -48",
    "add +Th4 -43 -51 | _to_copy +Th2 -52 | add +Th2 -g -53 | mm +hh2 | mm +Th2 -55 | sdpa_backward +Th2",
    "sdpa_backward +Th2 | sdpa_backward +Th2 -f17 -f18 -f10 -12 -14 -56 | _to_copy +Th4 -58 | clone +sd4",
    "mul +Th4 -61 -60 | _to_copy +Th4 -57 | clone +sd4 | mul +Th4 -64 -63 | _to_copy +Th2 -62",
    "_to_copy +Th2 -65 | mm +hh2 | mm +Th2 -59 -68 | mm +hh2 | mm +Th2 -66 | add +Th2 -69 -71 -70 | mm +hh2",
    "mm +Th2 -7 -67 | add +Th2 -72 -74 -73 | mul +Th2 | mul +Th2 -6 | sum +h2 -76 -75 -78 | _to_copy +Th4 -77",
    "mul +Th4 | mul +Th4 | sum +T4 -80 -79 | pow +T4 | mul +T4 | mul +T4 -84 -83 -4 -82 | div +Th4 -85",
    "pow +Th4 | mul +Th4 | mul +Th4 -88 -87 -0 -86 -f33 -in | add +Th4 -81 -89 | _to_copy +Th2 -90",
    "add +Th2 -54 -91",
)

TAIL = _table(
    "embedding_dense_backward +Vh2 -g -0 -h13 -h9 -h11",
)


FORWARD_GQA = _table(
    "_to_copy +Th4 | pow +Th4 | mean +T4 -1 | add +T4 -2 | rsqrt +T4 -3 | mul +Th4 -4 | _to_copy +Th2 -5",
    "mul +Th2 -6 -0 | mm +Th2 | mm +Tk2 | mm +Tk2 | _to_copy +Th4 | _to_copy +Tk4 | mul +Th4",
    "_to_copy +Th2 -13 | mul +Tk4 | _to_copy +Tk2 -15 -11 -12 -9 | clone +Th2 | clone +Th2 | sdpa +Th2",
    "sdpa +bas4 | mm +Th2 -7 -14 -16 -17 -18 | add +Th2 -21 | _to_copy +Th4 | pow +Th4 | mean +T4 -24",
    "add +T4 -25 | rsqrt +T4 -26 | mul +Th4 -27 | _to_copy +Th2 -28 | mul +Th2 -29 -23 | mm +Tf2 | silu +Tf2",
    "mm +Tf2 | mul +Tf2 -32 -33 | mm +Th2 -34 | add +Th2 -22 -30",
)

BACKWARD_GQA = _table(
    "_to_copy +Th4 | pow +Th4 | mean +T4 -1 | add +T4 -2 | rsqrt +T4 -3 | mul +Th4 | _to_copy +Th2 -5",
    "mul +Th2 | mm +Tk2 | _to_copy +Th4 | _to_copy +Tk4 | mul +Th4 | _to_copy +Th2 -11 | mul +Tk4",
    "_to_copy +Tk2 -13 -9 -10 -f8 -8 | clone +Th2 | clone +Th2 | mm +Th2 -14 -f10 | add +Th2 -17",
    "_to_copy +Th4 | pow +Th4 | mean +T4 -20 | add +T4 -21 | rsqrt +T4 -22 | mul +Th4 | _to_copy +Th2 -24",
    "mul +Th2 | silu +Tf2 | mm +Tf2 | mul +Tf2 -18 | mm +hf2 | mm +Tf2 -29 -30 | mul +Tf2",
    "mul +Tf2 -27 -28 -31 | mm +hf2 | mm +Th2 -32 -34 | silu_backward +Tf2 -f31 -33 | mm +hf2",
    "mm +Th2 -26 -36 | add +Th2 -35 -38 -37 | mul +Th2 | mul +Th2 -25 | sum +h2 -40 -39 -42",
    "_to_copy +Th4 -41 | mul +Th4 | mul +Th4 | sum +T4 -44 -43 | pow +T4 | mul +T4 | mul +T4 -48 -47 -23 -46",
    "div +Th4 -49 | pow +Th4 | mul +Th4 | mul +Th4 -52 -51 -19 -50 | add +Th4 -45 -53 | _to_copy +Th2 -54",
    "add +Th2 -g -55 | mm +hh2 | mm +Th2 -57 | sdpa_backward +Th2 | sdpa_backward +Th2",
    "sdpa_backward +Th2 -f19 -f20 -16 -12 -15 -58 | sum +Tk2 -61 | sum +Tk2 -60 | _to_copy +Tk4 -63",
    "clone +sd4 | mul +Tk4 -65 -64 | _to_copy +Th4 -59 | clone +sd4 | mul +Th4 -68 -67 | _to_copy +Tk2 -66",
    "_to_copy +Th2 -69 | mm +hk2 | mm +Th2 -62 -72 | mm +hk2 | mm +Th2 -70 | add +Th2 -73 -75 -74 | mm +hh2",
    "mm +Th2 -7 -71 | add +Th2 -76 -78 -77 | mul +Th2 | mul +Th2 -6 | sum +h2 -80 -79 -82 | _to_copy +Th4 -81",
    "mul +Th4 | mul +Th4 | sum +T4 -84 -83 | pow +T4 | mul +T4 | mul +T4 -88 -87 -4 -86 | div +Th4 -89",
    "pow +Th4 | mul +Th4 | mul +Th4 -92 -91 -0 -90 -f35 -in | add +Th4 -85 -93 | _to_copy +Th2 -94",
    "add +Th2 -56 -95",
)

HEAD_FREED = _table(
    "_to_copy +Th4 | pow +Th4 | mean +T4 -1 | add +T4 -2 | rsqrt +T4 -3 | mul +Th4 | _to_copy +Th2 -5",
    "mul +Th2 | mm +TV2 | _to_copy +TV4 | _log_softmax +TV4 | nll_loss_forward +S4",
    "nll_loss_forward +S4 -9 -8 -in | ones_like +S4 | nll_loss_backward +TV4 -12",
    "_log_softmax_backward_data +TV4 -14 -10 | _to_copy +TV2 -15 | mm +Vh2 | mm +Th2 -16 -7 -17 | mul +Th2",
    "mul +Th2 | sum +h2 -19 -18 -6 -21 | _to_copy +Th4 -20 | mul +Th4 | mul +Th4 | sum +T4 -23 -22 | pow +T4",
    "mul +T4 | mul +T4 -27 -26 -25 -4 | div +Th4 -28 | pow +Th4 | mul +Th4 | mul +Th4 -31 -30 -29 -0",
    "add +Th4 -24 -32 | _to_copy +Th2 -33",
)

TAIL_FREED = _table(
    "embedding_dense_backward +Vh2 -g -0 -h13 -h11",
)


def sizes(*, b: int, s: int, h: int, a: int, f: int, vocab: int, kv: int | None = None,
          e: int = 2) -> dict[str, int]:
    """Bytes of each size symbol of the tables (module doc); ``kv`` key/value heads (default ``a``), ``e`` bytes
    per 16-bit element."""
    t, k = b * s, (kv or a) * (h // a)
    return {"Th2": t * h * e, "Th4": t * h * 4, "T4": t * 4, "Tf2": t * f * e, "TV2": t * vocab * e,
            "TV4": t * vocab * 4, "h2": h * e, "S4": 4, "bas4": b * a * s * 4, "sd4": s * (h // a) * 4,
            "hh2": h * h * e, "hf2": h * f * e, "Vh2": vocab * h * e, "Tk2": t * k * e, "Tk4": t * k * 4,
            "hk2": k * h * e}


def tables(*, gqa: bool, logits_kept: bool) -> tuple[Table, Table, Table, Table]:
    """(FORWARD, HEAD, BACKWARD, TAIL) of the step: multi-head or grouped-query attention (``repeat_kv``'s two
    copies, and their gradients' sums), torchtitan's loss of March 2024 (fp32 logits kept) or of late 2024."""
    return ((FORWARD_GQA if gqa else FORWARD), HEAD if logits_kept else HEAD_FREED,
            (BACKWARD_GQA if gqa else BACKWARD), TAIL if logits_kept else TAIL_FREED)


def _last(table: Table) -> int:
    """Index of a phase's last allocation: a block's output, the gradient a backward phase passes down."""
    return sum(tok.startswith("+") for op in table for tok in op) - 1


def _phase(table: Table, tag: tuple, size: dict[str, int], refs: dict[str, object], fwd: tuple | None = None,
           head: tuple | None = None) -> list[tuple]:
    """The events of one phase: its tensors are ``(tag, i)``; ``refs`` maps ``in`` and ``g`` to handles."""
    events, n = [], 0
    for op in table:
        for tok in op:
            if tok[0] == "+":
                events.append(("alloc", (tag, n), size[tok[1:]]))
                n += 1
            elif tok[1:] in refs:
                events.append(("free", refs[tok[1:]]))
            elif tok[1] == "f":
                events.append(("free", (fwd, int(tok[2:]))))
            elif tok[1] == "h":
                events.append(("free", (head, int(tok[2:]))))
            else:
                events.append(("free", (tag, int(tok[1:]))))
    return events


def step_events(step: int, layers: int, size: dict[str, int],
                phases: tuple[Table, Table, Table, Table] | None = None) -> list[tuple]:
    """One training step's compute-stream events: embedding, the blocks' forwards, the loss, the blocks'
    backwards in reverse, the embedding's gradient; ``phases`` from ``tables`` (default multi-head attention,
    logits kept)."""
    fwd_t, head_t, bwd_t, tail_t = phases or tables(gqa=False, logits_kept=True)
    emb = (step, "emb")
    events = [("alloc", emb, size["Th2"])]

    def out(k: int):  # block k's output; block -1's is the embedding's
        return emb if k < 0 else ((step, "f", k), _last(fwd_t))

    for k in range(layers):
        events += _phase(fwd_t, (step, "f", k), size, {})
    head = (step, "head")
    events += _phase(head_t, head, size, {"in": out(layers - 1)})
    grad = (head, _last(head_t))
    for k in reversed(range(layers)):
        events += _phase(bwd_t, (step, "b", k), size, {"in": out(k - 1), "g": grad}, fwd=(step, "f", k))
        grad = ((step, "b", k), _last(bwd_t))
    return events + _phase(tail_t, (step, "tail"), size, {"g": grad}, head=head)


def titan_param_elems(*, layers: int, h: int, a: int, kv: int, f: int, vocab: int) -> tuple[int, ...]:
    """Elements of every parameter in torchtitan's order: the embedding, per block wq, wk, wv, wo, w1, w2, w3 and
    its two norms, the final norm, the output layer."""
    d = h // a
    block = (h * a * d, h * kv * d, h * kv * d, a * d * h, h * f, f * h, h * f, h, h)
    return (vocab * h, *block * layers, h, vocab * h)


@memoised(maxsize=64)
def trace_cached_bytes(layers: int, size_items: tuple, states: tuple[int, ...], gqa: bool = False,
                       logits_kept: bool = True) -> int:
    """Reserved less allocated peak of two steps' events, ``states`` (bytes) created after the first."""
    size, phases = dict(size_items), tables(gqa=gqa, logits_kept=logits_kept)
    st = [("alloc", ("state", i), x) for i, x in enumerate(states)]
    r = replay(step_events(0, layers, size, phases) + st + step_events(1, layers, size, phases))
    return r.peak_reserved - r.peak_allocated


def compiled_stand_in(scenario: Scenario) -> bool:
    """Whether the scenario compiles torchtitan's Llama blocks (and perhaps its loss) under per-op SAC, so that the
    eager step's tables stand in for the compiled step's (module doc): torchtitan's model code (the framework's
    eager Llama block, not fused block code), torch.compile, 16-bit or torchao float8 Linear layers, flash SDPA,
    no autocast, the architecture that code implements (ModelSpec.plain_llama_block)."""
    t, m = scenario.training, scenario.model
    return (t.compile and t.block_code != "fused" and behaviour(t.framework).eager_llama_block
            and t.dtype in ("bf16", "fp16", "fp8") and t.flash_attention and not t.autocast
            and m.plain_llama_block)


def covers(scenario: Scenario) -> bool:
    """Whether the scenario's step is the one these tables describe, or its compiled form they stand in for
    (``compiled_stand_in``; module doc). The tables free each weight gradient once produced and cut Adam's states
    to the FSDP shard: torch FSDP sharding its gradients (zero >= 2, as fsdp_stream_pools.py decides FSDP), not
    plain DDP (zero 0), which keeps every gradient until its all-reduce and the whole states."""
    shp, t, m, lay = layer_shape(scenario), scenario.training, scenario.model, scenario.layout
    eager = shp.titan and not shp.titan_fused_norm and shp.eager_ce and not shp.fused_ce  # the trace's norms are eager
    compiled = compiled_stand_in(scenario) and (shp.eager_ce or shp.fused_ce)
    fsdp = behaviour(t.framework).torch_fsdp and t.effective_zero >= 2
    return (fsdp and (eager or compiled) and shp.recomputes("op_sac")
            and shp.a % shp.kv == 0 and (shp.kv == shp.a or shp.kv > 1) and lay.tp == lay.cp == lay.pp == 1
            and scenario.num_microbatches == 1
            and not (shp.dropout or shp.is_moe or shp.mla or shp.qk_norm or shp.window or shp.bias)
            and shp.gated and shp.rope and shp.norm == "rmsnorm" and not m.tie_embeddings and not t.offload_params)


# What the memory assumptions state of Adam's lazily created states where the replay covers the step (no
# per-element bytes for first_step_fragmentation.py: the replay holds them).
STATES_NOTE = (None, ("Adam's m, v created at the first step (torch.optim _init_group): in the op-by-op replay of "
                     "the per-op SAC step (op_sac_trace.py)"))
COMPILED_NOTE = (None, ("Adam's m, v created at the first step (torch.optim _init_group): in the op-by-op replay of "
                       "the eager per-op SAC step, which stands in for the compiled one (op_sac_trace.py; an upper "
                       "estimate of its cached bytes: Inductor fuses the RMSNorms' fp32 temporaries and the loss)"))


def states_note(scenario: Scenario) -> tuple:
    """What the memory assumptions state of Adam's lazily created states where the replay covers the step."""
    return COMPILED_NOTE if scenario.training.compile else STATES_NOTE


def adam_state_element_bytes(training: TrainingSpec) -> int:
    """Bytes per element of each of Adam's two lazily created states (m, v): fp32 (4) under mixed precision, the
    parameters' dtype with master_weights false (torch.optim allocates them ``zeros_like`` the parameter;
    model_states.state_bytes' pure low-precision case)."""
    return FP32_BYTES if training.master_weights else training.param_bytes


def op_sac_cached_bytes(scenario: Scenario, shard: int) -> float | None:
    """The compute stream's cached-but-free bytes at the reserved peak of a scenario these tables cover (module
    doc), or ``None``; ``shard``: the FSDP group Adam's per-parameter states are split over."""
    if not covers(scenario):
        return None
    shp, m = layer_shape(scenario), scenario.model
    size = sizes(b=shp.b, s=shp.s, h=shp.h, a=shp.a, kv=shp.kv, f=shp.f, vocab=shp.vocab, e=int(shp.e))
    elems = titan_param_elems(layers=m.num_layers, h=shp.h, a=shp.a, kv=shp.kv, f=shp.f, vocab=shp.vocab)
    states = tuple(adam_state_element_bytes(scenario.training) * -(-n // shard) for n in elems for _ in range(2))
    return float(trace_cached_bytes(m.num_layers, tuple(sorted(size.items())), states, shp.kv < shp.a,
                                    shp.ce_logits_kept and not shp.fused_ce))
