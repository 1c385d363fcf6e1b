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
"""

from __future__ import annotations

from trainsim.cost_models import zero3_gathers
from trainsim.cost_models.collectives import collective_time
from trainsim.cost_models.param_tensors import rank_tensors
from trainsim.simulator.predict import predict
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


if __name__ == "__main__":
    main()
