"""The memo of engine runs (fold.simulate_once, kept by the caller's memo scope) and the engine's event count.

A remembered run must be the run itself: the same numbers as a fresh simulate(), a private copy per caller,
a distinct entry per stage_scale, no second engine run for the same table within a scope, and nothing
remembered outside one or carried from one scope into the next.
"""

from __future__ import annotations

from dataclasses import asdict, replace

import simpy

from trainsim.simulator import engine, fold
from trainsim.simulator.costtable import uniform_table
from trainsim.simulator.engine import simulate
from trainsim.specs.memo import active_memo, memo_scope


@memo_scope()
def test_remembered_run_equals_a_fresh_one_and_is_a_private_copy():
    fold.clear_cache()
    table = uniform_table(4, 12, vpp=2, schedule="interleaved")
    fresh = simulate(table)
    first = fold.simulate_once(table)
    first.stages[0].compute_s = -1.0            # a caller adjusting its copy
    again = fold.simulate_once(table)
    for res in (first, again):
        assert res.step_time_s == fresh.step_time_s and res.events == fresh.events
    assert [asdict(s) for s in again.stages] == [asdict(s) for s in fresh.stages]


@memo_scope()
def test_same_table_runs_the_engine_once_and_stage_scale_is_part_of_the_key(monkeypatch):
    fold.clear_cache()
    calls = []
    monkeypatch.setattr(fold, "simulate", lambda table, **kw: calls.append(kw) or simulate(table, **kw))
    table = uniform_table(2, 8)
    a = fold.simulate_once(table)
    b = fold.simulate_once(replace(table))                 # equal, not identical
    slow = fold.simulate_once(table, [1.0, 2.0])
    assert len(calls) == 2 and calls[1] == {"stage_scale": [1.0, 2.0]}
    assert a.step_time_s == b.step_time_s < slow.step_time_s
    # 1F1B, uniform stages of 1 s per pass, free network: (m + p - 1) x (fwd + bwd) = 9 x 3 s
    assert a.step_time_s == 27.0


def test_nothing_is_remembered_outside_a_scope_or_across_scopes(monkeypatch):
    """A result never depends on what ran before: no memo outside a scope, a fresh one in each new scope, the
    enclosing one in a nested scope."""
    calls = []
    monkeypatch.setattr(fold, "simulate", lambda table, **kw: calls.append(1) or simulate(table, **kw))
    table = uniform_table(2, 8)
    assert active_memo() is None
    fold.simulate_once(table)
    fold.simulate_once(table)
    assert len(calls) == 2                                  # no scope: run each time
    with memo_scope() as outer:
        fold.simulate_once(table)
        with memo_scope() as inner:
            assert inner is outer
            fold.simulate_once(table)
        assert len(calls) == 3 and outer.size(fold._simulate_memo.memo_name) == 1
    with memo_scope():
        fold.simulate_once(table)
    assert len(calls) == 4 and active_memo() is None       # the second scope started empty


class _StepCounting(simpy.Environment):
    """Counts every step() call, the engine's definition of its events."""

    def __init__(self) -> None:
        super().__init__()
        self.events = 0

    def step(self) -> None:
        self.events += 1
        super().step()

    def run_counted(self) -> None:
        self.run()                     # its last step() finds the schedule empty


def test_event_count_is_the_number_of_steps(monkeypatch):
    table = uniform_table(4, 16, vpp=2, schedule="interleaved")
    counted = simulate(table).events
    monkeypatch.setattr(engine, "_Counting", _StepCounting)
    assert simulate(table).events == counted > 16 * 4 * 2 * 2   # at least one timeout per op (F, BW)
