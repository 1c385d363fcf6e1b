"""Memoisation: functions of one frozen spec object, keyed by the object's identity while it lives
(``IdentityMemo``), and pure functions whose results a caller-owned ``Memo`` keeps for the length of a
``memo_scope`` (``memoised``) -- a CLI command, a plan, one predict -- instead of a process-wide cache."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import wraps
from typing import TypeVar

T = TypeVar("T")


class IdentityMemo:
    """Memoise a function of one frozen (but unhashable) spec object by identity, while it lives.

    Specs are frozen pydantic models holding dicts, so they cannot key an lru_cache; the planner and the
    engine call several cost functions on the same Scenario object. Entries leave when the object dies.
    """

    def __init__(self, fn: Callable[..., T]):
        self.fn = fn
        self.memo: dict[tuple, tuple[weakref.ref, T]] = {}

    def __call__(self, obj, *args) -> T:
        key = (id(obj), *args)
        hit = self.memo.get(key)
        if hit is not None and hit[0]() is obj:
            return hit[1]
        value = self.fn(obj, *args)
        memo = self.memo
        try:
            ref = weakref.ref(obj, lambda _r, k=key: memo.pop(k, None))
        except TypeError:  # not weak-referenceable: no memo
            return value
        memo[key] = (ref, value)
        return value


# --- results of pure functions, kept by whoever opened the scope --------------------------------------------------

class Memo:
    """Results of the ``memoised`` pure functions, owned by the caller that opened a ``memo_scope`` (one CLI command,
    one plan, one predict): nothing outlives the scope, so a result never depends on what ran before it and no
    test leaks state into another. One table per function, each bounded (the oldest entry leaves first)."""

    def __init__(self) -> None:
        self.tables: dict[str, dict] = {}

    def lookup(self, name: str, key, compute: Callable[[], T], maxsize: int) -> T:
        """The value stored under ``key`` in table ``name``, computed and stored on a miss."""
        table = self.tables.get(name)
        if table is None:
            table = self.tables[name] = {}
        try:
            return table[key]
        except KeyError:
            pass
        value = compute()
        if len(table) >= maxsize:
            del table[next(iter(table))]
        table[key] = value
        return value

    def forget(self, prefix: str) -> None:
        """Drop the tables of the functions whose names start with ``prefix`` (benchmarks timing a cold run)."""
        for name in [n for n in self.tables if n.startswith(prefix)]:
            del self.tables[name]

    def size(self, name: str) -> int:
        """Entries held for function ``name`` (its distinct inputs so far)."""
        return len(self.tables.get(name, ()))


_SCOPE: ContextVar[Memo | None] = ContextVar("trainsim_memo", default=None)
_MISS = object()


@contextmanager
def memo_scope(memo: Memo | None = None) -> Iterator[Memo]:
    """Run the block with ``memo`` as the memo of every ``memoised`` function; without one, an enclosing scope's
    memo is kept, else a new one lives as long as the block."""
    current = _SCOPE.get()
    if memo is None and current is not None:
        yield current
        return
    token = _SCOPE.set(memo if memo is not None else Memo())
    try:
        yield _SCOPE.get()
    finally:
        _SCOPE.reset(token)


def active_memo() -> Memo | None:
    """The memo of the innermost open scope, or None outside every scope."""
    return _SCOPE.get()


def in_memo_scope(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` run inside a memo scope (the caller's when one is open)."""
    @wraps(fn)
    def call(*args, **kwargs):
        with memo_scope():
            return fn(*args, **kwargs)
    return call


def memoised(maxsize: int) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Keep a pure function's results (hashable arguments) in the active scope's Memo, at most ``maxsize`` of them;
    outside every scope it is computed at each call."""
    def wrap(fn: Callable[..., T]) -> Callable[..., T]:
        name = f"{fn.__module__}.{fn.__qualname__}"

        @wraps(fn)
        def call(*args, **kwargs):
            memo = _SCOPE.get()
            if memo is None:
                return fn(*args, **kwargs)
            key = (args, tuple(kwargs.items())) if kwargs else args
            table = memo.tables.get(name)
            if table is not None:
                hit = table.get(key, _MISS)
                if hit is not _MISS:
                    return hit
            return memo.lookup(name, key, lambda: fn(*args, **kwargs), maxsize)
        call.memo_name = name
        return call
    return wrap
