"""Error against GPU count for the multi-scale families of docs/probe_runs.csv (same source table and model).

    python benchmarks/bench_many_ranks.py [--family SUBSTRING]

Per family: each run's GPU count, published step, predicted step, signed error (predicted/published - 1) and
the exposed data-parallel / sharding communication of the predicted step, so the trend of the error with
rank count at fixed work per GPU can be read off (issue 22 item 3). Then a 7B Llama (LLaMA-1 7B shape) in pure
ZeRO-1 data parallelism on DGX A100, one 4,096-token sequence per GPU, from 8 to 1,024 GPUs per framework: the
step's growth with ranks and its exposed DP time.
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict

from trainsim.simulator.predict import predict
from trainsim.specs import build_scenario
from trainsim.validation.measured_runs import step_time_of
from trainsim.validation.residual_sources import datasets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="", help="only families whose source table contains this text")
    args = ap.parse_args()
    ds = datasets()["probe"]()
    fams: dict[tuple, list] = defaultdict(list)
    for c in ds.active:
        if math.isfinite(c.published) and c.published > 0 and args.family.lower() in c.category.lower():
            fams[(c.category, c.scenario.model.name)].append(c)
    for (table, model), cases in sorted(fams.items()):
        if len({c.scenario.num_gpus for c in cases}) < 2:
            continue
        print(f"\n{table} / {model}")
        print(f"{'GPUs':>7} {'published s':>12} {'predicted s':>12} {'error':>8} {'exposed DP s':>12}")
        for c in sorted(cases, key=lambda c: c.scenario.num_gpus):
            pub = step_time_of(c, ds.metric)
            r = predict(c.scenario)
            dp = r.exposed_comm_s.get("dp", 0.0)
            print(f"{c.scenario.num_gpus:>7} {pub:>12.3f} {r.step_time_s:>12.3f} {r.step_time_s / pub - 1:>+8.1%} {dp:>12.3f}")
    zero1_growth()


LLAMA_7B = {"num_layers": 32, "hidden": 4096, "num_heads": 32, "ffn_hidden": 11008, "vocab_size": 32000,
            "activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope", "max_seq_len": 4096,
            "bias": False, "tie_embeddings": False}


def zero1_growth() -> None:
    print("\nLlama 7B, ZeRO-1 over all ranks, DGX A100, seq 4096, one sequence per GPU")
    print(f"{'framework':>10} {'GPUs':>6} {'step s':>8} {'vs 8':>7} {'exposed DP s':>12}")
    for fw in ("deepspeed", "megatron", "torch"):
        base = None
        for g in (8, 64, 1024):
            sc = build_scenario({"model": LLAMA_7B, "cluster": "dgx-a100", "gpus": g,
                                 "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": g, "zero": 1,
                                              "framework": fw}})
            r = predict(sc)
            base = base or r.step_time_s
            print(f"{fw:>10} {g:>6} {r.step_time_s:>8.3f} {r.step_time_s / base - 1:>+7.1%} "
                  f"{r.exposed_comm_s.get('dp', 0.0):>12.3f}")


if __name__ == "__main__":
    main()
