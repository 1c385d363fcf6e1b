"""Link contention: max-min fair sharing (progressive filling) of links among concurrent flows.

A `Flow` crosses a path of link ids (`trainsim.topologies.Fabric` ids, or any hashable names) and may
put a different load on each (``weights``: bytes on that link per byte of the flow's progress, e.g. 2
for a link a ring crosses twice) and have its own rate limit (``max_rate_Bps``: a protocol efficiency or
an endpoint limit). ``max_min_rates`` gives every flow its max-min fair rate: the allocation in which no
flow can go faster without slowing a flow that is not faster (Bertsekas & Gallager, Data Networks, §6.5.2,
progressive filling). ``completion_times`` replays a set of flows with start times and sizes: rates are
recomputed each time a flow starts or ends (a fluid model), which is what the engine asks when DP
all-reduces, pipeline sends and an oversubscribed spine overlap.

Capacities come from a mapping {link: bytes/s} or a callable (e.g. ``Fabric.capacity``), in one
direction; link ids therefore name a direction (``nic_out`` vs ``nic_in``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

from trainsim.specs import SpecError

Capacity = Mapping[Hashable, float] | Callable[[Hashable], float]
_EPS = 1e-12


@dataclass(frozen=True)
class Flow:
    """One transfer: the links it crosses, its size, when it starts and its own rate limit."""

    path: tuple[Hashable, ...]
    nbytes: float = 0.0
    start_s: float = 0.0
    max_rate_Bps: float = math.inf
    weights: tuple[float, ...] | None = None
    latency_s: float = 0.0

    def load(self) -> dict[Hashable, float]:
        """Bytes on each link per byte of progress (repeated links add up)."""
        w = self.weights or (1.0,) * len(self.path)
        if len(w) != len(self.path):
            raise SpecError("flow.weights", f"has {len(w)} entries for a path of {len(self.path)} links")
        out: dict[Hashable, float] = {}
        for link, x in zip(self.path, w):
            if x < 0 or not math.isfinite(x):
                raise SpecError("flow.weights", f"must be finite and >= 0, got {x}")
            out[link] = out.get(link, 0.0) + x
        return out

    @staticmethod
    def between(fabric, src: int, dst: int, nbytes: float = 0.0, **kw) -> Flow:
        """A flow along the fabric's path from GPU ``src`` to GPU ``dst``."""
        return Flow(tuple(fabric.path(src, dst)), nbytes, **kw)


def _cap_fn(capacity: Capacity) -> Callable[[Hashable], float]:
    if callable(capacity):
        return capacity
    def get(link: Hashable) -> float:
        if link not in capacity:
            raise SpecError("capacity", f"no capacity given for link {link!r}")
        return capacity[link]
    return get


def max_min_rates(flows: Sequence[Flow | Sequence[Hashable]], capacity: Capacity) -> list[float]:
    """Max-min fair rate (bytes/s) of each flow; a flow with an empty path runs at its own limit."""
    fl = [f if isinstance(f, Flow) else Flow(tuple(f)) for f in flows]
    cap = _cap_fn(capacity)
    loads = [f.load() for f in fl]
    remaining: dict[Hashable, float] = {}
    users: dict[Hashable, list[int]] = {}
    for i, ld in enumerate(loads):
        for link, w in ld.items():
            if link not in remaining:
                c = float(cap(link))
                if not c >= 0:
                    raise SpecError("capacity", f"link {link!r} has capacity {c}")
                remaining[link] = c
            if w > 0:
                users.setdefault(link, []).append(i)
    rate = [0.0] * len(fl)
    active = set(range(len(fl)))
    for i in list(active):
        if not any(w > 0 for w in loads[i].values()):
            rate[i] = fl[i].max_rate_Bps  # nothing shared: limited only by itself
            active.discard(i)
    while active:
        # The largest equal increment every active flow can take before a link or a flow limit binds.
        delta = math.inf
        for link, idx in users.items():
            w = sum(loads[i][link] for i in idx if i in active)
            if w > 0:
                delta = min(delta, remaining[link] / w)
        for i in active:
            delta = min(delta, fl[i].max_rate_Bps - rate[i])
        if not math.isfinite(delta):
            raise SpecError("flows", "unbounded rate: a flow crosses only infinite-capacity links and has no limit")
        delta = max(delta, 0.0)
        for i in active:
            rate[i] += delta
        frozen = set()
        for link, idx in users.items():
            w = sum(loads[i][link] for i in idx if i in active)
            if w > 0:
                remaining[link] -= delta * w
                if remaining[link] <= _EPS * max(1.0, delta * w):
                    remaining[link] = 0.0
                    frozen.update(i for i in idx if i in active)
        for i in active:
            if rate[i] >= fl[i].max_rate_Bps * (1 - 1e-12):
                frozen.add(i)
        if not frozen:  # numerical safety: should not happen
            break
        active -= frozen
    return rate


def completion_times(flows: Sequence[Flow], capacity: Capacity) -> list[float]:
    """Finish time (s) of each flow when all share the links max-min fairly, re-shared at every start/finish.

    A flow finishes at ``start_s + transfer time + latency_s``; zero-byte flows finish after their latency.
    """
    n = len(flows)
    left = [float(f.nbytes) for f in flows]
    for f in flows:
        if f.nbytes < 0 or not math.isfinite(f.nbytes) or not math.isfinite(f.start_s):
            raise SpecError("flow", "nbytes and start_s must be finite and nbytes >= 0")
    done = [math.nan] * n
    t = min((f.start_s for f in flows), default=0.0)
    for i, f in enumerate(flows):
        if left[i] <= 0:
            done[i] = f.start_s + f.latency_s
    pending = {i for i in range(n) if math.isnan(done[i])}
    while pending:
        running = [i for i in pending if flows[i].start_s <= t + _EPS]
        next_start = min((flows[i].start_s for i in pending if flows[i].start_s > t + _EPS), default=math.inf)
        if not running:
            t = next_start
            continue
        rates = max_min_rates([flows[i] for i in running], capacity)
        dt_finish = min((left[i] / r if r > 0 else math.inf) for i, r in zip(running, rates))
        dt = min(dt_finish, next_start - t)
        if not math.isfinite(dt):
            raise SpecError("flows", "a flow can never finish (zero capacity on its path)")
        for i, r in zip(running, rates):
            left[i] -= r * dt
        t += dt
        for i, r in zip(running, rates):
            if left[i] <= 1e-9 * max(1.0, flows[i].nbytes):
                done[i] = t + flows[i].latency_s
                pending.discard(i)
    return done


def slowdown(flows: Sequence[Flow], capacity: Capacity) -> list[float]:
    """Each flow's shared rate divided by the rate it would get alone (1 = no contention)."""
    shared = max_min_rates(flows, capacity)
    alone = [max_min_rates([f], capacity)[0] for f in flows]
    return [s / a if a > 0 else 1.0 for s, a in zip(shared, alone)]
