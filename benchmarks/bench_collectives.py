"""Query rates of the network model on a 16,384-GPU cluster (prints figures; no assertions).

    python benchmarks/bench_collectives.py

* placement: `place(scenario)` and the tp/cp/ep/dp/pp GroupShapes of Llama-3-405B on 16,384 H100
  (TP8 PP16 DP128), cold (caches cleared) and warm;
* collective_time calls/s on those groups: uncached (a new size each call) and cached;
* GroupShape construction for groups of 128 and 2,048 ranks (cost grows with the group, not the cluster);
* max-min fair rates for 100 and 1,000 concurrent flows on the fabric;
* the explicit networkx graph of a 1,024-GPU cluster (what the report figure would build).
"""

from __future__ import annotations

import random
import time

from bench_common import per_call_s

from trainsim.cost_models import collectives as C
from trainsim.cost_models.contention import Flow, max_min_rates
from trainsim.specs import build_scenario, load_cluster
from trainsim.specs.memo import active_memo, memo_scope
from trainsim.topologies import Fabric, GroupShape, build_graph, place
from trainsim.topologies import placement as P


def main() -> None:
    s = build_scenario({"model": "llama3-405b", "cluster": "dgx-h100", "gpus": 16384,
                        "layout": {"tp": 8, "pp": 16}, "training": {"global_batch": 2048, "seq_len": 8192}})
    print(f"cluster: {s.cluster.name}, {s.num_gpus} GPUs, layout tp={s.layout.tp} pp={s.layout.pp} dp={s.dp}")

    def cold_place():
        memo = active_memo()
        memo.forget(P._placement_cached.memo_name)
        memo.forget(P._shape_cached.memo_name)
        pl = place(s)
        return {d: pl.group(d) for d in ("tp", "cp", "ep", "dp", "pp")}, pl.pp_p2p(0)

    t_cold = per_call_s(cold_place, 20)
    t_warm = per_call_s(lambda: place(s).groups(), 2000)
    print(f"placement + 5 group shapes + pp pair, cold: {t_cold * 1e3:.2f} ms; warm: {t_warm * 1e6:.1f} us")

    groups, pair = cold_place()
    rng = random.Random(0)
    for dim, op in (("tp", "all_reduce"), ("dp", "all_reduce"), ("dp", "reduce_scatter"), ("pp", "send_recv")):
        g = pair if dim == "pp" else groups[dim]
        n = 3000
        sizes = [rng.uniform(1e3, 4e9) for _ in range(n)]
        C.clear_cache()
        t0 = time.perf_counter()
        for x in sizes:
            C.collective_time(op, x, g)
        unc = n / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(n):
            C.collective_time(op, 2**28, g)
        cached = n / (time.perf_counter() - t0)
        print(f"collective_time {op:14s} on {dim} ({g.describe()}): {unc:9.0f} calls/s uncached, "
              f"{cached:9.0f} calls/s cached")

    fab = Fabric.of(s.cluster)
    for size, stride in ((128, 128), (2048, 8)):
        ranks = list(range(0, size * stride, stride))
        t = per_call_s(lambda: GroupShape.of_ranks(ranks, fab), 50)
        print(f"GroupShape.of_ranks({size} ranks) on 16,384 GPUs: {t * 1e3:.3f} ms")

    for nflows in (100, 1000):
        flows = [Flow.between(fab, rng.randrange(16384), rng.randrange(16384), 1e9) for _ in range(nflows)]
        t = per_call_s(lambda: max_min_rates(flows, fab.capacity), 3)
        print(f"max_min_rates with {nflows} flows: {t * 1e3:.1f} ms")

    c1k = load_cluster("dgx-h100", 1024)
    t = per_call_s(lambda: build_graph(c1k), 3)
    g = build_graph(c1k)
    print(f"build_graph(1,024 GPUs): {t * 1e3:.0f} ms ({g.number_of_nodes()} vertices, {g.number_of_edges()} edges)")


if __name__ == "__main__":
    with memo_scope():  # one memo for the run, as a CLI command has (specs.memo)
        main()
