"""Pipeline schedules: the order in which each stage runs its forward / backward work.

A schedule is, per stage, a list of ops ``(kind, microbatch, chunk)``. Kinds: F (forward), BW (full
backward: input and weight gradients together), B (input-gradient backward only) and W (weight-gradient
backward), the last two for zero-bubble schedules. ``chunk`` is the model chunk on that stage (0 unless
interleaved); chunk c of stage s is virtual stage ``c * p + s`` (Megatron's layer assignment).

The engine executes each list in order, waiting for cross-stage data dependencies, so the schedule fixes
the order and the simulation finds the timing.
"""

from __future__ import annotations

from collections import Counter

F, B, W, BW = 0, 1, 2, 3
KIND_NAMES = {F: "F", B: "B", W: "W", BW: "BW"}
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb")

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


def build_schedule(name: str, p: int, m: int, v: int = 1) -> list[list[Op]]:
    """The per-stage op lists of a named schedule (gpipe, 1f1b, interleaved, zb)."""
    if name == "gpipe":
        return gpipe(p, m)
    if name == "1f1b":
        return one_f_one_b(p, m)
    if name == "interleaved":
        return interleaved(p, m, v)
    if name == "zb":
        return zb_h1(p, m)
    raise ValueError(f"unknown schedule {name!r}; expected one of {', '.join(SCHEDULES)}")


def check_schedule(ops: list[list[Op]], m: int, v: int = 1) -> None:
    """Raise ValueError unless every stage runs each (micro-batch, chunk) forward and backward exactly once,
    with F before its backward and B before its W on the same stage."""
    for s, stage_ops in enumerate(ops):
        counts = Counter(stage_ops)
        seen: dict[tuple[int, int, int], int] = {}
        for idx, op in enumerate(stage_ops):
            seen[op] = idx
        split = any(k in (B, W) for k, _, _ in stage_ops)
        for mb in range(m):
            for c in range(v):
                need = (F, B, W) if split else (F, BW)
                for kind in need:
                    if counts[(kind, mb, c)] != 1:
                        raise ValueError(f"stage {s}: {KIND_NAMES[kind]} of micro-batch {mb} chunk {c} "
                                         f"appears {counts[(kind, mb, c)]} times")
                order = [seen[(k, mb, c)] for k in need]
                if order != sorted(order):
                    raise ValueError(f"stage {s}: micro-batch {mb} chunk {c} runs out of order")
        if len(stage_ops) != sum(counts.values()):
            raise ValueError(f"stage {s}: duplicated ops")
