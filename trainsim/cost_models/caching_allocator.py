"""A replay of PyTorch's CUDA caching allocator in its default segment mode: which segments a sequence of
allocations and frees makes it reserve, and so the reserved peak (``torch.cuda.max_memory_reserved``).

The rules are those of c10/cuda/CUDACachingAllocator.cpp (pytorch/pytorch; read via find_string id 171536164,
and id 8419022891 for the version with expandable segments):

* ``round_size``: every request is rounded up to a multiple of ``kMinBlockSize`` (512 B; the optional
  ``roundup_power2_divisions`` setting is off by default);
* ``get_pool``: requests of at most ``kSmallSize`` (1 MiB) use the small pool, larger ones the large pool;
* ``get_free_block``: the pool's free blocks are ordered by (stream, size, address) and the request takes the
  ``lower_bound`` -- the smallest cached free block of its own stream at least as large (best fit; the
  ``max_split_size`` conditions are inactive by default, ``max_split_size`` = SIZE_MAX);
* ``get_allocation_size``: with no such block, a new segment is cudaMalloc'd: ``kSmallBuffer`` (2 MiB) for a
  small request, ``kLargeBuffer`` (20 MiB) for one below ``kMinLargeAlloc`` (10 MiB), else the request rounded
  up to ``kRoundLarge`` (2 MiB);
* ``should_split``: the block serving a request is split when the remainder is at least ``kMinBlockSize`` in
  the small pool, more than ``kSmallSize`` in the large pool; the remainder stays cached as a free block;
* ``free_block`` / ``try_merge_blocks``: a freed block merges with its free neighbours of the same segment
  (never across segments) and returns to its pool's cache. Segments are returned to CUDA only when a
  cudaMalloc fails or on ``empty_cache``, so the reserved bytes never shrink in a replay (no capacity limit is
  modelled: a trace that would exceed the device is the caller's business).

cudaMalloc's addresses are not predictable; segments here take increasing addresses in the order they are
created, which only decides between free blocks of equal size.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass, field
from heapq import heappop, heappush

K_MIN_BLOCK_SIZE = 512            # kMinBlockSize
K_SMALL_SIZE = 1 << 20            # kSmallSize: largest small-pool request
K_SMALL_BUFFER = 2 << 20          # kSmallBuffer: small-pool segment
K_LARGE_BUFFER = 20 << 20         # kLargeBuffer: segment for requests of (1 MiB, 10 MiB)
K_MIN_LARGE_ALLOC = 10 << 20      # kMinLargeAlloc: from here a request gets its own segment
K_ROUND_LARGE = 2 << 20           # kRoundLarge: rounding of such a segment


def round_size(size: int) -> int:
    """Bytes the allocator hands out for a request of ``size`` bytes (``round_size``)."""
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    return K_MIN_BLOCK_SIZE * (-(-size // K_MIN_BLOCK_SIZE))


def allocation_size(size: int) -> int:
    """Bytes of the segment cudaMalloc'd for a rounded request no cached block holds (``get_allocation_size``)."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * (-(-size // K_ROUND_LARGE))


def should_split(block_size: int, size: int, small: bool) -> bool:
    """Whether a free block of ``block_size`` serving ``size`` is split (``should_split``)."""
    remaining = block_size - size
    return remaining >= K_MIN_BLOCK_SIZE if small else remaining > K_SMALL_SIZE


class _Block:
    """A block of a segment: its address, size, stream and pool, whether handed out, and its neighbours."""

    __slots__ = ("addr", "allocated", "next", "prev", "size", "small", "stream")

    def __init__(self, addr: int, size: int, stream: int, small: bool, prev: _Block | None = None,
                 next: _Block | None = None) -> None:  # ``next``: the allocator's own field name
        self.addr, self.size, self.stream, self.small = addr, size, stream, small
        self.allocated, self.prev, self.next = False, prev, next

    def key(self) -> tuple[int, int]:
        return (self.stream, self.size)


class _FreeIndex:
    """One pool's cached free blocks in the allocator's order (stream, size, address), as the sorted (stream, size)
    keys that hold blocks and, per key, a heap of their addresses (with the addresses taken out since kept until
    they surface): a lookup or change costs the log of the distinct sizes and blocks, not a scan of every cached
    block."""

    __slots__ = ("addrs", "keys")

    def __init__(self) -> None:
        self.keys: list[tuple[int, int]] = []
        self.addrs: dict[tuple[int, int], tuple[list[int], set[int]]] = {}

    def add(self, key: tuple[int, int], addr: int) -> None:
        bucket = self.addrs.get(key)
        if bucket is None:
            bucket = self.addrs[key] = ([], set())
            insort(self.keys, key)
        heappush(bucket[0], addr)
        bucket[1].add(addr)

    def remove(self, key: tuple[int, int], addr: int) -> None:
        live = self.addrs[key][1]
        live.remove(addr)
        if not live:
            del self.addrs[key]
            del self.keys[bisect_left(self.keys, key)]

    def take(self, stream: int, size: int) -> int | None:
        """The address of the first block at or after (stream, size, -1) of ``stream``, taken out; None if none."""
        i = bisect_left(self.keys, (stream, size))
        if i == len(self.keys) or self.keys[i][0] != stream:
            return None
        key = self.keys[i]
        heap, live = self.addrs[key]
        while heap[0] not in live:
            heappop(heap)
        addr = heappop(heap)
        self.remove(key, addr)
        return addr


@dataclass
class CachingAllocator:
    """The allocator's state during a replay: its cached free blocks per pool and its segments."""

    free: dict[bool, _FreeIndex] = field(default_factory=lambda: {True: _FreeIndex(), False: _FreeIndex()})
    blocks: dict[int, _Block] = field(default_factory=dict)  # free blocks by address
    live: dict[object, _Block] = field(default_factory=dict)  # handed-out blocks by the caller's handle
    reserved: int = 0
    allocated: int = 0
    peak_reserved: int = 0
    peak_allocated: int = 0
    _next_addr: int = 0

    def malloc(self, handle: object, nbytes: float, stream: int = 0) -> None:
        """Allocate ``nbytes`` on ``stream`` for ``handle`` (``DeviceCachingAllocator::malloc``)."""
        size = round_size(int(nbytes))
        small = size <= K_SMALL_SIZE
        block = self._best_fit(size, stream, small) or self._new_segment(size, stream, small)
        if should_split(block.size, size, small):
            rest = _Block(block.addr + size, block.size - size, stream, small, prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next, block.size = rest, size
            self._cache(rest)
        block.allocated = True
        self.live[handle] = block
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free_tensor(self, handle: object) -> None:
        """Return ``handle``'s block to the cache, merged with free neighbours (``free_block``)."""
        block = self.live.pop(handle)
        block.allocated = False
        self.allocated -= block.size
        for nb in (block.prev, block.next):
            if nb is not None and not nb.allocated:
                self._uncache(nb)
                if nb is block.prev:  # merge into the lower block's address
                    nb.size += block.size
                    nb.next = block.next
                    if block.next is not None:
                        block.next.prev = nb
                    block = nb
                else:
                    block.size += nb.size
                    block.next = nb.next
                    if nb.next is not None:
                        nb.next.prev = block
        self._cache(block)

    def _best_fit(self, size: int, stream: int, small: bool) -> _Block | None:
        addr = self.free[small].take(stream, size)
        return None if addr is None else self.blocks.pop(addr)

    def _new_segment(self, size: int, stream: int, small: bool) -> _Block:
        nbytes = allocation_size(size)
        block = _Block(self._next_addr, nbytes, stream, small)
        self._next_addr += nbytes
        self.reserved += nbytes
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return block

    def _cache(self, block: _Block) -> None:
        self.free[block.small].add(block.key(), block.addr)
        self.blocks[block.addr] = block

    def _uncache(self, block: _Block) -> None:
        self.free[block.small].remove(block.key(), block.addr)
        del self.blocks[block.addr]


@dataclass(frozen=True)
class Replay:
    """What a replayed trace leaves: the peaks of reserved and allocated bytes, and the reserved bytes at the
    end."""

    peak_reserved: int
    peak_allocated: int
    reserved: int


def replay(events) -> Replay:
    """Replay ``events`` -- ``("alloc", handle, bytes[, stream])`` and ``("free", handle)`` -- in order."""
    alloc = CachingAllocator()
    for ev in events:
        if ev[0] == "alloc":
            alloc.malloc(ev[1], ev[2], ev[3] if len(ev) > 3 else 0)
        elif ev[0] == "free":
            alloc.free_tensor(ev[1])
        else:
            raise ValueError(f"replay event: {ev[0]!r} is neither 'alloc' nor 'free'")
    return Replay(peak_reserved=alloc.peak_reserved, peak_allocated=alloc.peak_allocated, reserved=alloc.reserved)
