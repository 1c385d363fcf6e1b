"""DeepSpeed ZeRO-3 rows of two published datasets: the collective throughput each published step implies,
beside the throughput trainsim's collective model gives the same calls.

    python benchmarks/bench_zero3_throughput.py

Rows: SC21 Table 2's DeepSpeed ZeRO-3 runs (``validate --dataset sc21``, sc21_t2_1..6, framework
deepspeed-2021) and AMSP's DeepSpeed ZeRO-3 13B runs (``validate --dataset amsp``, deepspeed-2023). Per row:
GPUs, micro-batches per rank, the predicted step and its compute, the published step, and the bytes one rank
moves per step through ZeRO-3's collectives -- every gathered (above ``stage3_param_persistence_threshold``)
parameter's bytes once per forward, once more per recomputed forward, once per backward, and every gradient's
bytes in the reduce-scatter, times the micro-batches. ``pub GB/s`` divides those bytes by the published step
less the predicted compute (the time the published step leaves for ZeRO-3's communication and host work, were
nothing overlapped); ``model GB/s`` divides one average all-gather's bytes by its modelled time over the
data-parallel group (latency included, cost_models/collectives.py); ``NIC GB/s`` is the cluster's NIC bandwidth
per GPU. A published figure far under the modelled one, on both datasets, is the gap the rows show: ZeRO-3's
communication in those runs moved bytes several times slower than the collective model's ring over all ranks.

Then, per AMSP row (DeepSpeed v0.12.3's code, framework deepspeed-2023), the inventory of one micro-batch's ZeRO-3
calls over the data-parallel group: the prefetcher's all-gathers of one pass (zero3_gathers.prefetch_calls: calls,
the elements each holds, the per-rank shard), the reduce-scatters of the 5e8-element buckets, each costed by the
collective model (the algorithm and protocol it picks, the latency part -- the ring's n-1 steps over NVLink and
the network -- and the bandwidth part); then the host: one block pass's counted issue, the same with the rank
loops and hooks, and at the pace of the shard group's slowest host (simulator/zero3_reduce.py ``shard_paced``),
times the blocks, beside the published step.
"""

from __future__ import annotations

from trainsim.cost_models import host_issue, zero3_gathers
from trainsim.cost_models.collectives import collective_time
from trainsim.cost_models.grad_buffer import whole_tensor_buckets
from trainsim.cost_models.param_tensors import rank_tensors
from trainsim.simulator import zero3_reduce
from trainsim.simulator.predict import predict
from trainsim.specs.framework_behaviour import DEEPSPEED_REDUCE_BUCKET_PARAMS
from trainsim.topologies.placement import place
from trainsim.validation.datasets import load_dataset

ROWS = {"sc21": ("sc21_t2_1", "sc21_t2_2", "sc21_t2_3", "sc21_t2_4", "sc21_t2_5", "sc21_t2_6"),
        "amsp": ("amsp_13b_zero3_8", "amsp_13b_zero3_1024")}


def step_bytes(scenario) -> tuple[float, float, int]:
    """(bytes one rank moves through ZeRO-3's collectives per step, bytes of one average gather call, gather calls
    per pass) -- module doc."""
    tr = scenario.training
    tensors = rank_tensors(scenario, 0)
    gathered = zero3_gathers.gathered(tensors)
    g_bytes = sum(t.elems for t in gathered) * tr.param_bytes
    r_bytes = sum(t.elems for t in tensors) * tr.grad_bytes
    passes = 3 if tr.recompute == "full" else 2
    calls = max(1, zero3_gathers.gather_calls(tensors, tr.framework))
    return scenario.num_microbatches * (passes * g_bytes + r_bytes), g_bytes / calls, calls


def row(case) -> tuple:
    """One printed row of the module doc's columns."""
    sc = case.scenario
    res = predict(sc)
    total, per_call, calls = step_bytes(sc)
    group = place(sc).group("dp")
    call_s = float(collective_time("all_gather", per_call, group, sc.cluster).time_s)
    left = case.published - res.breakdown_s.get("compute", 0.0)
    out = sc.cluster.scale_out
    nic = out.nics_per_node * out.nic_bw_Bps / sc.cluster.gpus_per_node
    return (case.row_id, sc.dp, sc.num_microbatches, calls, total / 1e9, case.published, res.step_time_s,
            res.breakdown_s.get("compute", 0.0), total / left / 1e9 if left > 0 else float("nan"),
            per_call / call_s / 1e9, nic / 1e9)


def _call_line(label: str, calls: list[float], op: str, group, cluster, ranks: int) -> float:
    """Print one kind of call (``calls``: bytes of each) and return their modelled seconds."""
    costs = [collective_time(op, b, group, cluster) for b in calls]
    lat, total = sum(c.latency_s for c in costs), sum(c.time_s for c in costs)
    picks = sorted({c.label for c in costs})
    mean = sum(calls) / len(calls)
    print(f"  {label:<22} {len(calls):>5} calls, mean {mean / 1e6:8.1f} MB ({mean / ranks / 1e3:8.1f} KB per rank), "
          f"{', '.join(picks):<24} latency {lat:7.3f} s + bandwidth {total - lat:7.3f} s = {total:7.3f} s")
    return total


def inventory(case) -> None:
    """The calls and host work of one micro-batch of a DeepSpeed ZeRO-3 row (module doc)."""
    sc = case.scenario
    tr, group = sc.training, place(sc).group("dp")
    tensors = list(rank_tensors(sc, 0))
    gathers = zero3_gathers.prefetch_calls(zero3_gathers._submodules(tensors))
    params = sum(t.elems for t in tensors)
    buckets = whole_tensor_buckets(params, DEEPSPEED_REDUCE_BUCKET_PARAMS, len(tensors))
    print(f"{case.row_id}: {sc.dp} ranks, {sc.num_microbatches} micro-batches, published {case.published:.1f} s")
    g = _call_line("all-gather, one pass", [sum(c) * tr.param_bytes for c in gathers], "all_gather", group,
                   sc.cluster, sc.dp)
    r = _call_line("reduce-scatter", [params * tr.grad_bytes / buckets] * buckets, "reduce_scatter", group,
                   sc.cluster, sc.dp)
    base = host_issue.scenario_block_issue(sc)
    looped, paced = zero3_reduce.rank_loops(sc, base), zero3_reduce.with_rank_loops(sc, base)
    layers = sc.model.num_layers
    print(f"  per micro-batch: collectives {2 * g + r:.3f} s (two gather passes + reduce-scatters); host issue of "
          f"the blocks {layers * (base.fwd_s + base.bwd_s):.3f} s counted, {layers * (looped.fwd_s + looped.bwd_s):.3f}"
          f" s with rank loops and hooks, {layers * (paced.fwd_s + paced.bwd_s):.3f} s at the pace of {sc.dp} hosts")


def main() -> None:
    head = ("row", "GPUs", "m", "calls", "GB/step", "pub s", "pred s", "compute s", "pub GB/s", "model GB/s",
            "NIC GB/s")
    print(" ".join(f"{h:>10}" for h in head))
    for name, ids in ROWS.items():
        for case in load_dataset(name).cases:
            if case.row_id in ids and case.scenario is not None:
                r = row(case)
                print(f"{r[0]:>10} " + " ".join(f"{x:>10.1f}" if isinstance(x, float) else f"{x:>10}"
                                                for x in r[1:]))
    print()
    for case in load_dataset("amsp").cases:
        if case.row_id in ROWS["amsp"] and case.scenario is not None:
            inventory(case)


if __name__ == "__main__":
    main()
