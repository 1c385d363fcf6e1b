"""The files `trainsim calibrate --from-runs` reads, as MeasuredRuns.

A ``.csv`` is a table `trainsim validate --dataset PATH` reads (the common run schema, or another bundled
schema); every row must be a run trainsim can cost. Anything else is a training log: Megatron-LM (its
arguments block / iteration lines) or torchtitan (its ``step: ... tps:`` lines, with the job TOML given by
``--config``). Published values that are rates are turned into step times with the run's own batch.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from trainsim.simulator.run_fit import MeasuredRun
from trainsim.specs import SpecError
from trainsim.specs.safe_read import not_a_file

from .datasets import Case, Dataset, load_dataset
from .run_logs import _err, is_megatron_log, is_torchtitan_log, megatron_run, read_lines
from .titan_logs import titan_run


def step_time_of(case: Case, metric: str) -> float:
    """The measured step time of a case whose published value is in ``metric``."""
    s, v = case.scenario, case.published
    assert s is not None
    if metric == "step_time_s":
        return v
    if metric == "tokens_per_s":
        return s.tokens_per_step / v
    if metric == "tokens_per_s_per_gpu":
        return s.tokens_per_step / (v * s.num_gpus)
    if metric == "samples_per_gpu_per_s":
        return s.training.global_batch / (v * s.num_gpus)
    raise SpecError("metric", f"{metric} is not a step metric")


def run_of_case(case: Case, dataset: Dataset, source: str) -> MeasuredRun:
    """A validation case as a MeasuredRun of ``source``: its scenario and measured step time."""
    return MeasuredRun(name=case.row_id, source=source, scenario=case.scenario,
                       step_time_s=step_time_of(case, dataset.metric))


def _row_lines(path: Path) -> dict[str, int]:
    """row_id -> line number in the file (header is line 1)."""
    out: dict[str, int] = {}
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        for row in reader:
            out.setdefault(row.get("row_id") or "", reader.line_num)
    return out


def runs_from_csv(path: Path) -> list[MeasuredRun]:
    """Every row of a run table; a row trainsim cannot cost, or without a positive step time, is an error."""
    ds = load_dataset(str(path))
    if ds.metric not in ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "samples_per_gpu_per_s"):
        raise _err(path, None, "metric", f"{ds.metric} tables hold no training runs")
    lines = _row_lines(path)
    runs = []
    for c in ds.cases:
        line = lines.get(c.row_id)
        if c.skip_reason:
            field, _, reason = c.skip_reason.removeprefix("not representable: ").partition(": ")
            raise _err(path, line, field if reason else "row", reason or field)
        if not (math.isfinite(c.published) and c.published > 0):
            raise _err(path, line, ds.metric, f"{c.published} is not a positive finite value")
        runs.append(run_of_case(c, ds, f"{path}:{line}"))
    if not runs:
        raise _err(path, None, "rows", "no runs")
    return runs


def clusters_for_logs(files: list[str], cluster: list[str] | None) -> list[str | None]:
    """One cluster per log file (CSV rows name their GPU): a single --cluster serves every log, else one each."""
    logs = [f for f in files if Path(f).suffix.lower() != ".csv"]
    given = list(cluster or [])
    if given and not logs:
        raise SpecError("cluster", "applies to log files only; a CSV's rows name their GPU (gpu_type): drop it")
    if len(given) <= 1:
        return [given[0] if given else None] * len(logs)
    if len(given) != len(logs):
        raise SpecError("cluster", f"{len(given)} given for {len(logs)} log file(s): give one, or one per log")
    return given


def load_runs(files: list[str], config: list[str] | None, cluster: list[str] | None) -> list[MeasuredRun]:
    """MeasuredRuns of every file; torchtitan logs take their TOMLs from ``config`` and logs their clusters from
    ``cluster`` in order of appearance."""
    configs = list(config or [])
    clusters = clusters_for_logs(files, cluster)
    runs: list[MeasuredRun] = []
    for name in files:
        path = Path(name)
        if (why := not_a_file(path)) is not None:
            raise SpecError(name, why)
        if path.suffix.lower() == ".csv":
            runs += runs_from_csv(path)
            continue
        lines = read_lines(path)
        cluster_of_log = clusters.pop(0)
        if is_megatron_log(lines):
            runs.append(megatron_run(path, cluster_of_log))
        elif is_torchtitan_log(lines):
            if not configs:
                raise _err(path, None, "config", "a torchtitan log needs its job TOML: --config FILE.toml")
            runs.append(titan_run(path, Path(configs.pop(0)), cluster_of_log))
        else:
            raise _err(path, None, "format", "neither a CSV, a Megatron-LM log (arguments block, 'elapsed time per "
                                             "iteration' lines) nor a torchtitan log ('step: ... tps:' lines)")
    if configs:
        raise SpecError("config", f"{len(configs)} TOML file(s) left over: one per torchtitan log")
    return runs
