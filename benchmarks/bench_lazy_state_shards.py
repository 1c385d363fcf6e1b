"""Reserved peak of torchtitan's per-op SAC step as Adam's lazily created states shrink with the FSDP group: the
op-by-op replay (cost_models/op_sac_trace.py) of Llama 3.1 8B at local batch 2 x 8192 (grouped-query attention,
late 2024's loss), two steps, states created after the first backward, created before the first forward, or absent.

    python benchmarks/bench_lazy_state_shards.py [shard ...]

Prints GiB per shard count; about 3 s per shard on one core (measured here).
"""

from __future__ import annotations

import argparse
import time

from trainsim.cost_models import op_sac_trace as ot
from trainsim.cost_models.caching_allocator import replay

GiB = 1 << 30
LLAMA31_8B = {"h": 4096, "a": 32, "kv": 8, "f": 14336, "vocab": 128256}


def main(shards: list[int]) -> None:
    size = ot.sizes(b=2, s=8192, **LLAMA31_8B)
    elems = ot.titan_param_elems(layers=32, **LLAMA31_8B)
    phases = ot.tables(gqa=True, logits_kept=False)
    steps = ot.step_events(0, 32, size, phases), ot.step_events(1, 32, size, phases)
    bare = replay(steps[0] + steps[1])
    print(f"Llama 3.1 8B per-op SAC step, 2 x 8192 tokens: no states reserved {bare.peak_reserved / GiB:.2f}, "
          f"allocated {bare.peak_allocated / GiB:.2f} GiB")
    print("shard  states  lazy: reserved  - no states   upfront: reserved  - no states   (s)")
    for shard in shards:
        t0 = time.perf_counter()
        states = [("alloc", ("state", i), 4 * -(-n // shard)) for i, n in enumerate(x for x in elems for _ in "mv")]
        lazy = replay(steps[0] + states + steps[1]).peak_reserved
        upfront = replay(states + steps[0] + steps[1]).peak_reserved
        total = sum(e[2] for e in states)
        print(f"{shard:5d}  {total / GiB:6.2f}  {lazy / GiB:14.2f}  {(lazy - bare.peak_reserved) / GiB:11.2f}"
              f"   {upfront / GiB:17.2f}  {(upfront - bare.peak_reserved) / GiB:11.2f}   {time.perf_counter() - t0:.0f}")


def _shard(text: str) -> int:
    n = int(text) if text.isdigit() else 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"shard: {text!r} is not a whole number >= 1")
    return n


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shard", nargs="*", type=_shard, default=[8, 16, 32, 64, 128, 256],
                    help="FSDP group sizes the states are cut to (whole numbers >= 1; default 8 16 32 64 128 256)")
    main(ap.parse_args().shard)
