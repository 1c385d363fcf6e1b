"""The caching-allocator replay against closed forms derived from c10/cuda/CUDACachingAllocator.cpp's rules."""

import random

import pytest

from trainsim.cost_models.caching_allocator import (
    CachingAllocator,
    allocation_size,
    replay,
    round_size,
    should_split,
)

MiB = 1 << 20


def test_round_size_to_512_bytes():
    assert round_size(1) == 512
    assert round_size(512) == 512
    assert round_size(513) == 1024
    assert round_size(3 * MiB + 1) == 3 * MiB + 512


def test_segment_sizes_by_request():
    assert allocation_size(MiB) == 2 * MiB          # small pool: kSmallBuffer
    assert allocation_size(MiB + 512) == 20 * MiB   # (1, 10) MiB: kLargeBuffer
    assert allocation_size(10 * MiB - 512) == 20 * MiB
    assert allocation_size(10 * MiB) == 10 * MiB    # kMinLargeAlloc: own segment, 2 MiB multiples
    assert allocation_size(11 * MiB) == 12 * MiB


def test_split_thresholds():
    assert should_split(2 * MiB, 2 * MiB - 512, small=True)
    assert not should_split(2 * MiB, 2 * MiB - 256, small=True)
    assert not should_split(12 * MiB, 11 * MiB, small=False)  # remainder 1 MiB: not > kSmallSize
    assert should_split(12 * MiB, 11 * MiB - 512, small=False)


def test_small_requests_pack_into_2mib_segments():
    # 5 x 400 KiB = 2000 KiB fit one 2 MiB segment (2048 KiB); the sixth opens a second one.
    ev = [("alloc", i, 400 * 1024) for i in range(6)]
    r = replay(ev)
    assert r.peak_reserved == 4 * MiB
    assert r.peak_allocated == 6 * 400 * 1024


def test_medium_requests_share_a_20mib_segment_and_reuse_it():
    # three 6 MiB tensors: one 20 MiB segment holds three? 6+6 = 12, remainder 8 > 1 -> split; 18, remainder 2 -> split.
    ev = [("alloc", i, 6 * MiB) for i in range(3)] + [("free", i) for i in range(3)]
    ev += [("alloc", "x", 19 * MiB)]  # the merged free segment (20 MiB) serves it: nothing new
    r = replay(ev)
    assert r.peak_reserved == 20 * MiB


def test_best_fit_takes_the_smallest_block_that_fits():
    a = CachingAllocator()
    a.malloc("big", 40 * MiB)
    a.malloc("mid", 24 * MiB)
    a.free_tensor("big")
    a.free_tensor("mid")
    a.malloc("r", 22 * MiB)  # best fit: the 24 MiB segment (remainder 2 MiB > 1 MiB: split), not the 40 MiB one
    a.malloc("s", 38 * MiB)  # still fits the 40 MiB one
    assert a.reserved == 64 * MiB
    a.malloc("t", 2 * MiB)   # the 2 MiB remainder of the 24 MiB segment
    assert a.reserved == 64 * MiB
    a.malloc("u", 2 * MiB)   # 40 - 38 = 2 MiB remainder of the big one
    assert a.reserved == 64 * MiB


def test_no_merge_across_segments():
    # two 12 MiB segments freed: a 20 MiB request fits neither (they are not adjacent in one segment)
    ev = [("alloc", 0, 12 * MiB), ("alloc", 1, 12 * MiB), ("free", 0), ("free", 1), ("alloc", 2, 20 * MiB)]
    assert replay(ev).peak_reserved == 44 * MiB


def test_free_neighbours_coalesce_within_a_segment():
    a = CachingAllocator()
    for i in range(3):
        a.malloc(i, 6 * MiB)       # 0-6, 6-12, 12-18 of one 20 MiB segment, 2 MiB free at its end
    a.free_tensor(0)
    a.free_tensor(2)               # merges with the free tail: 8 MiB
    a.malloc("x", 7 * MiB)         # fits the merged 8 MiB block
    assert a.reserved == 20 * MiB
    a.free_tensor(1)
    a.free_tensor("x")             # whole segment free again: one 20 MiB block
    a.malloc("y", 19 * MiB)
    assert a.reserved == 20 * MiB


def test_streams_do_not_share_blocks():
    ev = [("alloc", 0, 12 * MiB, 1), ("free", 0), ("alloc", 1, 12 * MiB, 0)]
    assert replay(ev).peak_reserved == 24 * MiB


def test_first_step_states_fragment_the_activation_segments():
    """Two 30 MiB activations per step; at the first step's end two 16 MiB optimizer states land, best fit, in
    the freed 30 MiB segments (remainder 14 MiB > 1 MiB: split); the second step's activations fit neither
    remainder and take two new 30 MiB segments: 2 x 30 + 2 x 30 = 120 MiB reserved. Created before the first
    step, the states take their own two 16 MiB segments and the activations reuse theirs: 92 MiB."""
    acts = [("alloc", ("a", i), 30 * MiB) for i in range(2)] + [("free", ("a", i)) for i in (1, 0)]
    step2 = [("alloc", ("b", i), 30 * MiB) for i in range(2)]
    states = [("alloc", ("s", i), 16 * MiB) for i in range(2)]
    assert replay(acts + states + step2).peak_reserved == 120 * MiB
    assert replay(states + acts + step2).peak_reserved == 92 * MiB


def test_unknown_event_is_refused():
    with pytest.raises(ValueError, match="neither"):
        replay([("realloc", 0, 1)])


class _ScannedFree:
    """The reference free list: every cached block as (stream, size, address), best fit found by scanning them all
    for the smallest at or after (stream, size, -1), as the allocator's ordered set's lower_bound."""

    def __init__(self) -> None:
        self.blocks: set[tuple[int, int, int]] = set()

    def add(self, key, addr):
        self.blocks.add((*key, addr))

    def remove(self, key, addr):
        self.blocks.remove((*key, addr))

    def take(self, stream, size):
        fits = [b for b in self.blocks if b[0] == stream and b[1] >= size]
        if not fits:
            return None
        best = min(fits)
        self.blocks.remove(best)
        return best[2]


def test_free_index_agrees_with_a_scan_of_every_cached_block():
    """Random traces over both pools and two streams, with sizes that tie (equal-size blocks: the lowest address)
    and free in random order (merges): the indexed allocator and the scanning one agree after every event."""
    rng = random.Random(1)
    sizes = (512, 4096, 300_000, 1 << 20, (1 << 20) + 512, 3 << 20, 8 << 20, 9_500_000, 12 << 20, 33_000_000)
    for _ in range(30):
        fast, ref = CachingAllocator(), CachingAllocator(free={True: _ScannedFree(), False: _ScannedFree()})
        live = []
        for i in range(400):
            if live and rng.random() < 0.45:
                h = live.pop(rng.randrange(len(live)))
                fast.free_tensor(h)
                ref.free_tensor(h)
            else:
                nbytes, stream = rng.choice(sizes), rng.choice((0, 0, 0, 1))
                fast.malloc(i, nbytes, stream)
                ref.malloc(i, nbytes, stream)
                live.append(i)
            assert (fast.reserved, fast.allocated, fast.peak_reserved) == (ref.reserved, ref.allocated,
                                                                            ref.peak_reserved)
            assert {h: (b.addr, b.size) for h, b in fast.live.items()} == {h: (b.addr, b.size)
                                                                           for h, b in ref.live.items()}
