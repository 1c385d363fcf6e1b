"""Memoisation of functions of one frozen spec object, keyed by the object's identity while it lives."""

from __future__ import annotations

import weakref
from collections.abc import Callable
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
