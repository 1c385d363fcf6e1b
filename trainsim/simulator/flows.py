"""Communication as fluid flows over shared links inside the simpy engine.

Each transfer is a flow that needs ``transfer_s`` seconds of its links' full bandwidth. Flows that share a
link split it max-min fairly (progressive filling); rates are recomputed only for the connected set of
flows a start or finish touches, so independent transfers (the common case) cost O(1) each. A flow is
never faster than it would be alone (rate cap 1). Link capacities are normalised to 1 because every
transfer time is already computed at its own path's bandwidth by the collective cost model (on a shared
fabric, the bandwidth other jobs' traffic leaves: `trainsim.topologies.fabric`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

import simpy

from trainsim.cost_models.contention import Flow, max_min_rates

from .costtable import Transfer


def max_min_unit_rates(flow_links: dict[int, tuple[str, ...]]) -> dict[int, float]:
    """Max-min fair rates of flows on unit-capacity links, each flow capped at 1 (progressive filling,
    `trainsim.cost_models.contention.max_min_rates`)."""
    ids = list(flow_links)
    flows = [Flow(path=tuple(flow_links[f]), max_rate_Bps=1.0) for f in ids]
    rates = max_min_rates(flows, _unit_capacity)
    return dict(zip(ids, rates))


def _unit_capacity(_link) -> float:
    return 1.0


class _Flow:
    __slots__ = (
        "active_at",
        "bulk",
        "done",
        "fid",
        "last",
        "links",
        "owner",
        "rate",
        "remaining",
        "t_join",
        "version",
    )

    def __init__(self, fid: int, links: tuple[str, ...], work: float, done: Callable[[], None],
                 owner: int, bulk: bool, now: float, active_at: float):
        self.fid = fid
        self.links = links
        self.remaining = work
        self.rate = 0.0
        self.last = now
        self.version = 0
        self.done = done
        self.owner = owner
        self.bulk = bulk
        self.t_join = now
        self.active_at = active_at  # end of its latency: bandwidth progress starts here


class FluidNetwork:
    """Shared links for the engine: ``start(transfer, done, owner)`` calls ``done()`` when it completes."""

    def __init__(self, env: simpy.Environment, rate_fn: Callable[[dict[int, tuple[str, ...]]], dict[int, float]]
                 = max_min_unit_rates):
        self.env = env
        self.rate_fn = rate_fn
        self.flows: dict[int, _Flow] = {}
        self.by_link: dict[str, set[int]] = defaultdict(set)
        self.bulk_by_owner: dict[int, set[int]] = defaultdict(set)
        self._next = 0

    def start(self, t: Transfer, done: Callable[[], None], owner: int = -1) -> None:
        """Begin a transfer now: latency first, then the bandwidth term shared with concurrent flows.

        The flow takes its share of its links from the start (during its latency too, a microsecond-scale
        pessimism for concurrent flows) so that an uncontended transfer costs one event.
        """
        self._join(t, done, owner)

    def bulk_remaining_s(self, owner: int) -> float:
        """Seconds until the owner's bulk collectives in flight finish at their current rates (0 if none)."""
        ids = self.bulk_by_owner.get(owner)
        if not ids:
            return 0.0
        now = self.env.now
        best = 0.0
        for fid in ids:
            fl = self.flows[fid]
            left = fl.remaining - fl.rate * max(0.0, now - max(fl.last, fl.active_at))
            if fl.rate > 0:
                best = max(best, max(0.0, fl.active_at - now) + left / fl.rate)
        return best

    # -- internals -------------------------------------------------------------------------------
    def _join(self, t: Transfer, done: Callable[[], None], owner: int) -> None:
        if t.transfer_s <= 0 or not t.links:  # nothing to share
            if t.time_s <= 0:
                done()
            else:
                ev = self.env.timeout(t.time_s)
                ev.callbacks.append(lambda _e: done())
            return
        fid = self._next
        self._next += 1
        fl = _Flow(fid, t.links, t.transfer_s, done, owner, t.bulk, self.env.now, self.env.now + t.latency_s)
        self.flows[fid] = fl
        for link in t.links:
            self.by_link[link].add(fid)
        if t.bulk:
            self.bulk_by_owner[owner].add(fid)
        if all(len(self.by_link[link]) == 1 for link in t.links):
            # Alone on its links (the common case): full rate, one completion event, nobody else changes.
            fl.rate = 1.0
            fl.version = 1
            ev = self.env.timeout(t.latency_s + t.transfer_s)
            ev.callbacks.append(self._make_finisher(fid, 1))
        else:
            self._rebalance(self._component(t.links))

    def _component(self, links: Iterable[str]) -> list[int]:
        seen_links = set()
        seen: set[int] = set()
        stack = list(links)
        while stack:
            link = stack.pop()
            if link in seen_links:
                continue
            seen_links.add(link)
            for fid in self.by_link.get(link, ()):
                if fid not in seen:
                    seen.add(fid)
                    stack.extend(self.flows[fid].links)
        return sorted(seen)

    def _rebalance(self, fids: list[int]) -> None:
        if not fids:
            return
        now = self.env.now
        if len(fids) == 1:
            rates = {fids[0]: 1.0}
        else:
            rates = self.rate_fn({f: self.flows[f].links for f in fids})
        for f in fids:
            fl = self.flows[f]
            fl.remaining -= fl.rate * max(0.0, now - max(fl.last, fl.active_at))
            fl.last = now
            new = rates[f]
            if new != fl.rate:
                fl.rate = new
                fl.version += 1
                if new > 0:
                    ev = self.env.timeout(max(0.0, fl.active_at - now) + max(fl.remaining, 0.0) / new)
                    ev.callbacks.append(self._make_finisher(f, fl.version))

    def _make_finisher(self, fid: int, version: int) -> Callable[[simpy.Event], None]:
        def finish(_e: simpy.Event) -> None:
            fl = self.flows.get(fid)
            if fl is None or fl.version != version:
                return  # rescheduled since; a newer timeout will finish it
            del self.flows[fid]
            for link in fl.links:
                self.by_link[link].discard(fid)
            if fl.bulk:
                self.bulk_by_owner[fl.owner].discard(fid)
            if any(self.by_link[link] for link in fl.links):
                self._rebalance(self._component(fl.links))
            fl.done()
        return finish
