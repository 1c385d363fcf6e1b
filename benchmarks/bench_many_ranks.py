"""Error against GPU count for the multi-scale families of docs/probe_runs.csv (same source table and model).

    python benchmarks/bench_many_ranks.py [--family SUBSTRING]

Per family: each run's GPU count, published step, predicted step, signed error (predicted/published - 1) and
the exposed data-parallel / sharding communication of the predicted step, so the trend of the error with
rank count at fixed work per GPU can be read off (issue 22 item 3). Rows that state the code they ran
(``framework`` / ``flash_attention_version`` columns, e.g. MegaScale's Megatron-LM commit 285068c8 of January
2023) also show the prediction under the year rule alone (the same CSV with those columns blank), so what the
stated code changes is visible. Then a 7B Llama (LLaMA-1 7B shape) in pure
ZeRO-1 data parallelism on DGX A100, one 4,096-token sequence per GPU, from 8 to 1,024 GPUs per framework: the
step's growth with ranks and its exposed DP time (``deepspeed-2021``: DeepSpeed before v0.12.4, whose ZeRO-1/2
reduce each owner rank's slice of every bucket in a call of its own, about one ring over all ranks per GPU).
Last, the AMSP paper's runs at a fixed 4M-token batch (``validate --dataset amsp``): each layout's published
slowdown from 8 to 1,024 A800 GPUs beside trainsim's, with the overlap the paper states and without it.
"""

from __future__ import annotations

import argparse
import csv
import math
import tempfile
from collections import defaultdict
from pathlib import Path

from trainsim.cost_models import framework as fwk
from trainsim.cost_models.collectives import collective_time
from trainsim.cost_models.param_tensors import chunk_tensors
from trainsim.simulator.builder import build_cost_table
from trainsim.simulator.predict import predict
from trainsim.specs import build_scenario
from trainsim.specs.framework_behaviour import DEEPSPEED_REDUCE_BUCKET_PARAMS
from trainsim.topologies.placement import place
from trainsim.topologies.shape import GroupShape
from trainsim.validation.common_run_cases import load_common_runs
from trainsim.validation.measured_runs import step_time_of
from trainsim.validation.residual_sources import REPO

PROBE = REPO / "docs" / "probe_runs.csv"
STATED_CODE = ("framework", "flash_attention_version")


def _year_rule_cases() -> dict:
    """row_id -> case of the probe CSV with the stated-code columns blank (the loader's year rule decides)."""
    with open(PROBE, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "probe_year_rule.csv"
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows({k: ("" if k in STATED_CODE else v) for k, v in r.items()} for r in rows)
        return {c.row_id: c for c in load_common_runs(path, name="probe_year_rule").active}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="", help="only families whose source table contains this text")
    args = ap.parse_args()
    ds = load_common_runs(PROBE, name="probe_runs")
    year_rule = _year_rule_cases()
    fams: dict[tuple, list] = defaultdict(list)
    for c in ds.active:
        if math.isfinite(c.published) and c.published > 0 and args.family.lower() in c.category.lower():
            fams[(c.category, c.scenario.model.name)].append(c)
    for (table, model), cases in sorted(fams.items()):
        if len({c.scenario.num_gpus for c in cases}) < 2:
            continue
        _family(table, model, sorted(cases, key=lambda c: c.scenario.num_gpus), ds.metric, year_rule)
    small_collectives([c for c in ds.active if c.row_id.startswith("megascale_mlm_175b_")])
    zero1_growth()
    deepspeed_comm_opt()
    amsp_slowdowns()


def small_collectives(cases: list) -> None:
    """The per-step scalar collectives of Megatron-LM (commit 285068c8) over many ranks, from the collective model:
    the loss all-reduce over the data-parallel group every micro-batch on the last stage (pretrain_gpt.py
    ``average_losses_across_data_parallel_group``) and the gradient-norm all-reduce over the model-parallel group
    (optimizer/clip_grads.py); bf16 has no grad scaler, so no ``found_inf`` all-reduce, and the timers of log level 0
    place no barrier inside the step (timers.py returns a dummy for level-1 timers). Not in the engine: their sum
    is printed against the step to show its size."""
    if not cases:
        return
    print("\nMegaScale baseline: per-step scalar collectives (4 B each), closed form")
    print(f"{'GPUs':>7} {'dp':>4} {'micro-batches':>13} {'loss AR us':>10} {'norm AR us':>10} {'sum ms':>7} {'of step':>8}")
    for c in sorted(cases, key=lambda c: c.scenario.num_gpus):
        sc = c.scenario
        loss = collective_time("all_reduce", 4, place(sc).group("dp"), sc.cluster)
        mp = GroupShape.contiguous(sc.layout.tp * sc.layout.pp, sc.cluster)
        norm = collective_time("all_reduce", 4, mp, sc.cluster)
        total = sc.num_microbatches * loss.time_s + norm.time_s
        step = predict(sc).step_time_s
        print(f"{sc.num_gpus:>7} {sc.dp:>4} {sc.num_microbatches:>13} {loss.time_s * 1e6:>10.1f} "
              f"{norm.time_s * 1e6:>10.1f} {total * 1e3:>7.2f} {total / step:>8.3%}")


def _family(table: str, model: str, cases: list, metric: str, year_rule: dict) -> None:
    stated = any(c.scenario.training != year_rule[c.row_id].scenario.training for c in cases)
    fw = cases[0].scenario.training.framework
    print(f"\n{table} / {model}" + (f" (stated code: {fw}; year rule: "
                                   f"{year_rule[cases[0].row_id].scenario.training.framework})" if stated else ""))
    extra = f" {'year rule s':>12} {'error':>8} {'DP s':>7}" if stated else ""
    print(f"{'GPUs':>7} {'published s':>12} {'predicted s':>12} {'error':>8} {'exposed DP s':>12}{extra}")
    for c in cases:
        pub = step_time_of(c, metric)
        r = predict(c.scenario)
        line = (f"{c.scenario.num_gpus:>7} {pub:>12.3f} {r.step_time_s:>12.3f} {r.step_time_s / pub - 1:>+8.1%} "
                f"{r.exposed_comm_s.get('dp', 0.0):>12.3f}")
        if stated:
            y = predict(year_rule[c.row_id].scenario)
            line += f" {y.step_time_s:>12.3f} {y.step_time_s / pub - 1:>+8.1%} {y.exposed_comm_s.get('dp', 0.0):>7.3f}"
        print(line)


LLAMA_7B = {"num_layers": 32, "hidden": 4096, "num_heads": 32, "ffn_hidden": 11008, "vocab_size": 32000,
            "activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope", "max_seq_len": 4096,
            "bias": False, "tie_embeddings": False}


def zero1_growth() -> None:
    print("\nLlama 7B, ZeRO-1 over all ranks, DGX A100, seq 4096, one sequence per GPU")
    print(f"{'framework':>14} {'GPUs':>6} {'step s':>8} {'vs 8':>7} {'exposed DP s':>12}")
    for fw in ("deepspeed", "deepspeed-2023", "megatron", "torch"):
        base = None
        for g in (8, 64, 1024):
            sc = build_scenario({"model": LLAMA_7B, "cluster": "dgx-a100", "gpus": g,
                                 "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": g, "zero": 1,
                                              "framework": fw}})
            r = predict(sc)
            base = base or r.step_time_s
            print(f"{fw:>14} {g:>6} {r.step_time_s:>8.3f} {r.step_time_s / base - 1:>+7.1%} "
                  f"{r.exposed_comm_s.get('dp', 0.0):>12.3f}")



# DeepSpeed's blogs/comm-opt/README.md (PR #4695, microsoft/DeepSpeed@2afa1c7f2), Table 1: a dense 7B with ZeRO
# stage 1 or 2 on 1,024 A100 GPUs spends this many seconds per step in its gradient "AllReduce" -- per-owner
# dist.reduce calls before the PR (baseline), one all-reduce per bucket after it (optimized).
DEEPSPEED_BLOG_REDUCE_S = {"deepspeed-2023": 1.2, "deepspeed": 0.36}


def deepspeed_comm_opt() -> None:
    """The gradient reduction of a dense 7B, ZeRO-1, on 1,024 A100s (128 DGX nodes): the sum of its collective calls
    as trainsim prices them (latency + bandwidth, no overlap), beside DeepSpeed's own measurement of that phase."""
    print("\nDense 7B ZeRO-1 gradient reduction on 1,024 A100s: trainsim's calls vs DeepSpeed's blog (PR #4695)")
    print(f"{'framework':>14} {'calls':>6} {'latency s':>9} {'total s':>8} {'DeepSpeed s':>11} {'ratio':>6}")
    for fw, measured in DEEPSPEED_BLOG_REDUCE_S.items():
        sc = build_scenario({"model": LLAMA_7B, "cluster": "dgx-a100", "gpus": 1024,
                             "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 1024, "zero": 1,
                                          "framework": fw}})
        buckets = [b for ch in build_cost_table(sc).stages[0].chunks for b in ch.grad_buckets]
        calls = fwk.zero12_reduce_calls(sc.training, sc.model.total_params(), 1024, DEEPSPEED_REDUCE_BUCKET_PARAMS,
                                        max_buckets=len(chunk_tensors(sc, 0)))
        lat = sum(b.latency_s for b in buckets)
        total = sum(b.latency_s + b.transfer_s for b in buckets)
        print(f"{fw:>14} {calls:>6} {lat:>9.3f} {total:>8.3f} {measured:>11.2f} {total / measured:>6.2f}")


def amsp_slowdowns() -> None:
    """The AMSP paper's fixed-4M-token-batch runs (validate --dataset amsp): GPU time per token at 1,024 over 8 A800
    GPUs, published and predicted, with the overlap the paper states and with DeepSpeed's ZeRO-1 default (none)."""
    from trainsim.validation.amsp import SLOWDOWN
    from trainsim.validation.datasets import load_dataset
    ds = load_dataset("amsp")
    print("\nAMSP (arXiv:2311.00257): slowdown 8 -> 1,024 A800 GPUs at a fixed 4M-token batch")
    print(f"{'group':>24} {'published':>9} {'predicted':>9} {'no overlap':>10}")
    small = {c.group: c for c in ds.active if SLOWDOWN not in c.secondary}
    for c in ds.cases:
        if SLOWDOWN not in c.secondary:
            continue
        if c.skip_reason is not None:
            print(f"{c.group:>24} {c.secondary[SLOWDOWN]:>9.2f} {'refused':>9}")
            continue
        b = small[c.group]
        ratios = []
        for ovl in (None, False):
            sc, sb = ((x if ovl is None else x.model_copy(update={"training": x.training.model_copy(
                update={"overlap_grad_reduce": ovl})})) for x in (c.scenario, b.scenario))
            ratios.append(predict(sc).step_time_s * sc.num_gpus / (predict(sb).step_time_s * sb.num_gpus))
        print(f"{c.group:>24} {c.secondary[SLOWDOWN]:>9.2f} {ratios[0]:>9.2f} {ratios[1]:>10.2f}")


if __name__ == "__main__":
    main()
