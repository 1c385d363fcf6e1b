"""Pipeline schedules: the order in which each stage runs its forward / backward work.

A schedule is, per stage, a list of ops ``(kind, microbatch, chunk)``. Kinds: F (forward), BW (full
backward: input and weight gradients together), B (input-gradient backward only) and W (weight-gradient
backward), the last two for zero-bubble schedules. ``chunk`` is the model chunk on that stage (0 unless
interleaved or DualPipeV); chunk c of stage s is virtual stage ``c * p + s`` (Megatron's layer assignment),
except for DualPipeV's V, where chunk 1 of stage s is virtual stage ``2p - 1 - s`` (see virtual_stage).

The engine executes each list in order, waiting for cross-stage data dependencies, so the schedule fixes
the order and the simulation finds the timing.
"""

from __future__ import annotations

from collections import Counter
from typing import get_args

from trainsim.specs.training import Schedule

F, B, W, BW = 0, 1, 2, 3
KIND_NAMES = {F: "F", B: "B", W: "W", BW: "BW"}
SCHEDULES: tuple[str, ...] = get_args(Schedule)

Op = tuple[int, int, int]


def gpipe(p: int, m: int) -> list[list[Op]]:
    """GPipe: all forwards, then all backwards (micro-batch order as torch's ScheduleGPipe)."""
    return [[(F, i, 0) for i in range(m)] + [(BW, i, 0) for i in range(m)] for _ in range(p)]


def one_f_one_b(p: int, m: int) -> list[list[Op]]:
    """1F1B (PipeDream-Flush, Megatron non-interleaved): p-s-1 warm-up forwards, then alternate, then drain."""
    out = []
    for s in range(p):
        warm = min(p - s - 1, m)
        ops: list[Op] = [(F, i, 0) for i in range(warm)]
        remaining = m - warm
        for i in range(remaining):
            ops.append((F, warm + i, 0))
            ops.append((BW, i, 0))
        ops.extend((BW, i, 0) for i in range(remaining, m))
        out.append(ops)
    return out


def _interleaved_chunk(k: int, p: int, v: int, forward: bool) -> int:
    chunk = (k % (p * v)) // p
    return chunk if forward else v - 1 - chunk


def _interleaved_mb(k: int, p: int, v: int) -> int:
    return (k // (p * v)) * p + k % p


def interleaved(p: int, m: int, v: int) -> list[list[Op]]:
    """Megatron's interleaved 1F1B (forward_backward_pipelining_with_interleaving), m divisible by p.

    Rank s warms up with (p-s-1)*2 + (v-1)*p virtual micro-batches (all of them when m == p), then
    alternates one forward and one backward virtual micro-batch; groups of p micro-batches go through
    chunk 0, then chunk 1, ... (backward in reverse chunk order).
    """
    if m % p:
        raise ValueError(f"interleaved schedule needs m ({m}) divisible by p ({p})")
    total = m * v
    out = []
    for s in range(p):
        if m == p:
            warm = total
        else:
            warm = min((p - s - 1) * 2 + (v - 1) * p, total)
        remaining = total - warm

        def fwd(k: int) -> Op:
            return (F, _interleaved_mb(k, p, v), _interleaved_chunk(k, p, v, True))

        def bwd(k: int) -> Op:
            return (BW, _interleaved_mb(k, p, v), _interleaved_chunk(k, p, v, False))

        ops = [fwd(k) for k in range(warm)]
        for k in range(remaining):
            ops.append(fwd(k + warm))
            ops.append(bwd(k))
        ops.extend(bwd(k) for k in range(remaining, total))
        out.append(ops)
    return out


def zb_h1(p: int, m: int) -> list[list[Op]]:
    """ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, Sec. 3.1 and Fig. 3).

    Same in-flight limit as 1F1B (p-s micro-batches on stage s); stage s postpones its first s weight-
    gradient passes W so that the input-gradient passes B, which alone form the critical path of the
    drain, run back to back, and the postponed W fill the tail. Ordering as the authors' DeepSpeed port
    (ZeroBubbleH1Pipeline: F, FB, FBW, BW and W sections).
    """
    out = []
    for s in range(p):
        ops: list[Op] = []
        f = b = w = 0
        for _ in range(p - s - 1):            # warm-up forwards
            if f < m:
                ops.append((F, f, 0))
                f += 1
        for _ in range(s):                     # F + B, weight passes postponed
            if f < m:
                ops.append((F, f, 0))
                ops.append((B, b, 0))
                f += 1
                b += 1
        while f < m:                           # steady state F + B + W
            ops.append((F, f, 0))
            ops.append((B, b, 0))
            ops.append((W, w, 0))
            f += 1
            b += 1
            w += 1
        while b < m:                           # drain: B + W
            ops.append((B, b, 0))
            ops.append((W, w, 0))
            b += 1
            w += 1
        while w < m:                           # postponed weight passes
            ops.append((W, w, 0))
            w += 1
        out.append(ops)
    return out


def stage_of(name: str, p: int, vs: int) -> int:
    """Pipeline stage holding virtual stage ``vs`` (inverse of virtual_stage)."""
    if name == "dualpipev" and vs >= p:
        return 2 * p - 1 - vs
    return vs % p


def dualpipev(p: int, m: int) -> list[list[Op]]:
    """DualPipeV's per-stage op lists (see dualpipev_with_pairs)."""
    return dualpipev_with_pairs(p, m)[0]


def dualpipev_with_pairs(p: int, m: int) -> tuple[list[list[Op]], list[frozenset[int]]]:
    """DualPipeV (DeepSeek-V3's DualPipe folded into a V, torch's ScheduleDualPipeV), m >= 2p.

    Rank s holds chunk 0 = virtual stage s and chunk 1 = virtual stage 2p-1-s, so the loss is on rank 0.
    Op order as ScheduleDualPipeV._calculate_single_rank_operations (torch 2.13, after deepseek-ai/DualPipe
    dualpipev.py): 1 F0 warm-up, 2 F0F1, 3 B1 W F1 (zero bubble), 4 main loop of overlapped F0&BW1, F1&BW0
    pairs, 5 BW1 F1&BW0, 6 B1B0 (second half split into B + postponed W), 7 W B0, 8 the remaining W.
    An overlapped forward/backward pair (torch's OVERLAP_F_B action) is the F at index i and the BW at i+1
    of a stage's list, with i in the returned set of pair heads: the pair starts once both inputs are in
    and both outputs leave when it ends (torch receives before and sends after the whole action; DeepSeek
    interleaves the two in one kernel sequence). Its compute is F + BW, no overlap gain is modelled (torch
    runs the sub-actions one after the other unless a custom overlap callback is registered). The last
    rank's first main-loop pair is not overlapped (as in both implementations). W ops pop the oldest
    postponed weight pass (FIFO).
    """
    if m < 2 * p:
        raise ValueError(f"dualpipev needs m ({m}) >= 2p ({2 * p})")
    ranks = [_dualpipev_rank(p, m, r) for r in range(p)]
    return [ops for ops, _ in ranks], [frozenset(pairs) for _, pairs in ranks]


def _dualpipev_rank(p: int, m: int, r: int) -> tuple[list[Op], set[int]]:
    """Rank r's DualPipeV op list and the indices of its overlapped-pair heads."""
    ops: list[Op] = []
    pairs: set[int] = set()
    count = {F: [0, 0], B: [0, 0]}      # next micro-batch per (kind, chunk); B counts B and BW
    pending: list[tuple[int, int]] = []  # postponed weight passes (mb, chunk), oldest first

    def fwd(c: int) -> None:
        ops.append((F, count[F][c], c))
        count[F][c] += 1

    def bwd(c: int, split: bool) -> None:
        mb = count[B][c]
        count[B][c] += 1
        if split:
            ops.append((B, mb, c))
            pending.append((mb, c))
        else:
            ops.append((BW, mb, c))

    def weight() -> None:
        if pending:
            mb, c = pending.pop(0)
            ops.append((W, mb, c))

    def pair(cf: int, cb: int) -> None:  # an overlapped F&B pair
        pairs.add(len(ops))
        fwd(cf)
        bwd(cb, False)

    for _ in range((p - r - 1) * 2):       # 1: F0
        fwd(0)
    for _ in range(r + 1):                 # 2: F0 F1
        fwd(0)
        fwd(1)
    for _ in range(p - r - 1):             # 3: B1 W F1
        bwd(1, True)
        weight()
        fwd(1)
    for i in range(m - 2 * p + r + 1):     # 4: F0&BW1, F1&BW0
        if i == 0 and r == p - 1:
            fwd(0)
            bwd(1, False)
        else:
            pair(0, 1)
        pair(1, 0)
    for _ in range(p - r - 1):             # 5: BW1, F1&BW0
        bwd(1, False)
        pair(1, 0)
    n6 = r + 1                             # 6: B1 B0, zero bubble from the middle on
    zb = False
    for i in range(n6):
        if i == n6 // 2 and r % 2 == 1:
            zb = True
        bwd(1, zb)
        if i == n6 // 2 and r % 2 == 0:
            zb = True
        bwd(0, zb)
    for _ in range(p - r - 1):             # 7: W B0
        weight()
        bwd(0, zb)
    while pending:                         # 8: W
        weight()
    return ops, pairs


def pair_heads(name: str, p: int, m: int, v: int = 1) -> list[frozenset[int]]:
    """Per stage, the op indices i whose op runs fused with op i+1 (DualPipeV's overlapped F&B); else empty."""
    return schedule_with_pairs(name, p, m, v)[1]


def schedule_with_pairs(name: str, p: int, m: int, v: int = 1, *, batched_p2p: bool = False
                        ) -> tuple[list[list[Op]], list[frozenset[int]]]:
    """build_schedule and pair_heads from one construction (the engine needs both). ``batched_p2p``: the
    interleaved schedule exchanges with its neighbours once per steady-state iteration (``batched_pairs``)."""
    if name == "dualpipev":
        return dualpipev_with_pairs(p, m)
    ops = build_schedule(name, p, m, v)
    if name == "interleaved" and batched_p2p:
        return ops, batched_pairs(ops)
    return ops, [frozenset() for _ in range(p)]


def batched_pairs(ops: list[list[Op]]) -> list[frozenset[int]]:
    """Per stage, the steady-state forwards of Megatron's interleaved schedule without overlapped p2p, each the
    head of a pair with the backward after it. Megatron-LM's forward_backward_pipelining_with_interleaving
    (megatron/schedules.py at 285068c8; Megatron-Core's without ``overlap_p2p_comm``) runs one forward and one
    backward per steady-state iteration and then one ``send_forward_backward_recv_forward_backward``: the
    forward's output leaves with the backward's input gradient after both, and the next iteration starts once
    both of its inputs are in (the engine's pair semantics). A rank whose forwards are all warm-up (m == p) has no
    steady state and no pair."""
    out = []
    for o in ops:
        first_bw = next((i for i, op in enumerate(o) if op[0] == BW), len(o))
        steady = any(op[0] == F for op in o[first_bw:])
        out.append(frozenset(i for i in range(len(o) - 1) if steady and o[i][0] == F and o[i + 1][0] == BW))
    return out


def build_schedule(name: str, p: int, m: int, v: int = 1) -> list[list[Op]]:
    """The per-stage op lists of a named schedule (gpipe, 1f1b, interleaved, zb, dualpipev)."""
    if name == "gpipe":
        return gpipe(p, m)
    if name == "1f1b":
        return one_f_one_b(p, m)
    if name == "interleaved":
        return interleaved(p, m, v)
    if name == "zb":
        return zb_h1(p, m)
    if name == "dualpipev":
        if v != 2:
            raise ValueError(f"dualpipev needs v = 2 chunks per stage, got {v}")
        return dualpipev(p, m)
    raise ValueError(f"unknown schedule {name!r}; expected one of {', '.join(SCHEDULES)}")


def check_schedule(ops: list[list[Op]], m: int, v: int = 1) -> None:
    """Raise ValueError unless every stage runs each (micro-batch, chunk) forward and backward exactly once,
    with F before its backward and B before its W on the same stage."""
    for s, stage_ops in enumerate(ops):
        counts = Counter(stage_ops)
        seen: dict[tuple[int, int, int], int] = {}
        for idx, op in enumerate(stage_ops):
            seen[op] = idx
        for mb in range(m):
            for c in range(v):
                # each (micro-batch, chunk) has a full backward or a split one (DualPipeV mixes both)
                need = (F, B, W) if counts[(B, mb, c)] or counts[(W, mb, c)] else (F, BW)
                for kind in need:
                    if counts[(kind, mb, c)] != 1:
                        raise ValueError(f"stage {s}: {KIND_NAMES[kind]} of micro-batch {mb} chunk {c} "
                                         f"appears {counts[(kind, mb, c)]} times")
                order = [seen[(k, mb, c)] for k in need]
                if order != sorted(order):
                    raise ValueError(f"stage {s}: micro-batch {mb} chunk {c} runs out of order")
        if len(stage_ops) != sum(counts.values()):
            raise ValueError(f"stage {s}: duplicated ops")
