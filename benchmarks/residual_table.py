"""Regenerate trainsim/data/residual_quantiles.json: residual quantiles of the published runs per source.

    python benchmarks/residual_table.py [--only SOURCE ...] [--out PATH]

Predicts every costable row of every source (validation.residual_sources) with the engine and the presets,
and writes validation.intervals.build_table of the residuals. Prints each source's row count and median.
Takes a few minutes (the MosaicML and Megatron-Bridge tables dominate); predict reads the stored result.
"""

from __future__ import annotations

import argparse
import json
import time

from trainsim.simulator.predict import predict
from trainsim.validation.intervals import build_table, table_path
from trainsim.validation.residual_sources import datasets, residual_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", help="dataset names to include (default all)")
    ap.add_argument("--out", default=str(table_path()))
    args = ap.parse_args()
    rows = []
    for name, load in datasets().items():
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        got = residual_rows(name, load(), lambda s: predict(s).step_time_s)
        rows += got
        print(f"{name:12} {len(got):4d} rows  {time.perf_counter() - t0:6.1f} s", flush=True)
    table = build_table([(s, r, f) for s, r, f, _ in rows])
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(table, f, indent=1)
        f.write("\n")
    for s, v in table["sources"].items():
        print(f"  {s:48} n={v['n']:4d}  median residual {v['quantiles'][19]:+.3f}")


if __name__ == "__main__":
    main()
