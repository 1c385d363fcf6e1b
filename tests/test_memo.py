"""Caller-owned memos (specs/memo.py): a memoised pure function remembers only inside a memo scope, each scope
starts empty, nested scopes share the outer one, and a table holds at most its bound (oldest entry out first)."""

from __future__ import annotations

from trainsim.specs.memo import Memo, active_memo, in_memo_scope, memo_scope, memoised

CALLS: list[int] = []


@memoised(maxsize=2)
def square(x: int) -> int:
    CALLS.append(x)
    return x * x


def test_outside_a_scope_every_call_computes():
    CALLS.clear()
    assert active_memo() is None
    assert square(3) == square(3) == 9
    assert CALLS == [3, 3]


def test_a_scope_remembers_and_the_next_starts_empty():
    CALLS.clear()
    with memo_scope() as memo:
        square(3), square(3), square(4)
        assert CALLS == [3, 4] and memo.size(square.memo_name) == 2
    with memo_scope():
        square(3)
    assert CALLS == [3, 4, 3]


def test_the_bound_drops_the_oldest_entry():
    CALLS.clear()
    with memo_scope() as memo:
        for x in (1, 2, 3, 1):       # 1 left when 3 came in: computed again
            square(x)
        assert CALLS == [1, 2, 3, 1] and memo.size(square.memo_name) == 2


def test_a_given_memo_and_nested_scopes():
    CALLS.clear()
    mine = Memo()
    with memo_scope(mine):
        square(5)
        assert in_memo_scope(active_memo)() is mine   # a scoped function inside reuses the caller's memo
    with memo_scope(mine):
        square(5)
    assert CALLS == [5]
    mine.forget(square.memo_name)
    assert mine.size(square.memo_name) == 0
