"""Published runs as validation cases: the shapes every dataset adapter builds, and the two steps they share.

A dataset is a list of ``Case``s. A case is one published row: its ``row_id``, the published value of the
dataset's primary metric (step time, tokens/s, samples/s/GPU or bus bandwidth), and what trainsim needs to
predict it (a Scenario, or a collective to time). Rows trainsim cannot represent stay in the list with a
``skip_reason`` so the report shows them instead of dropping them silently.

Every modelling choice a source leaves open is made once per dataset (never per row), by a rule written into
``Dataset.notes`` so `trainsim validate` prints it next to the numbers, or read from the recipe's settings
table (trainsim/validation/settings.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainsim.specs import ClusterSpec, Scenario, SpecError, build_scenario
from trainsim.specs.memo import memoised
from trainsim.specs.safe_read import read_csv_rows

# --- the shapes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CollectiveCase:
    """One nccl-tests measurement: an op of ``nbytes`` over ``num_gpus`` GPUs of ``cluster``."""

    op: str
    nbytes: float
    num_gpus: int
    cluster: ClusterSpec
    algo: str | None = None
    # GPUs one host thread drives (nccl-tests -g): the thread enqueues the collective on each in turn, every
    # iteration (cost_models.collectives.single_thread_issue_s).
    gpus_per_thread: int = 1
    # That thread's host CPU family (a key of cost_models.nccl_model.HOST_LAUNCH_S); None = the generic launch cost.
    host_cpu: str | None = None
    # The NCCL release measured ("2.18.5"), where its work split differs (collectives.collective_time).
    nccl_version: str | None = None


@dataclass(frozen=True)
class Case:
    """One published row and what is needed to predict it."""

    row_id: str
    label: str
    published: float
    scenario: Scenario | None = None
    collective: CollectiveCase | None = None
    skip_reason: str | None = None
    group: str | None = None  # rows compared with each other (zero-bubble: same model and m)
    category: str = ""  # for the per-category MAPE lines of the report (table, GPU type, size class)
    # Secondary metrics on the source's own basis: name -> published value. ``secondary_fns`` turn the
    # predicted primary value into the same quantity (e.g. SC21 eq. 3 TFLOP/s from a step time).
    secondary: dict[str, float] = field(default_factory=dict)
    secondary_fns: dict[str, Callable[[float], float]] = field(default_factory=dict, compare=False)
    # The predicted value of a row whose quantity is not the dataset's step metric (e.g. peak memory on the
    # counter the row's source printed): prediction -> value in the dataset's unit.
    value_fn: Callable[[Any], float] | None = field(default=None, compare=False)
    # Further groupings the report prints beside the category (e.g. "micro-batch 1", "TP 8", "layers 24").
    regimes: tuple[str, ...] = ()
    # The measured counter the published value was read on, where a dataset mixes counters with different
    # targets (memory rows: "allocated/active peak", "reserved peak", "nvidia-smi", "not stated"); the report
    # prints one summary per counter beside the categories.
    counter: str = ""


@dataclass(frozen=True)
class Dataset:
    """A named set of cases with one primary metric, its citation and the documented assumptions."""

    name: str
    title: str
    metric: str  # step_time_s | tokens_per_s | samples_per_gpu_per_s | busbw_GBps | peak_memory_gib
    unit: str
    citation: str
    notes: tuple[str, ...]
    cases: tuple[Case, ...]
    higher_is_better: bool = False
    # The report also prints the step's per-block, per-micro-batch and per-step parts, published beside
    # predicted (validation.structure), for tables whose rows span a grid of layer counts and micro-batches.
    structure: bool = False

    @property
    def active(self) -> list[Case]:
        return [c for c in self.cases if c.skip_reason is None]

    @property
    def skipped(self) -> list[Case]:
        return [c for c in self.cases if c.skip_reason is not None]


# --- helpers ---------------------------------------------------------------------------------------

@memoised(maxsize=32)
def _csv_rows(path: Path, ragged: bool = False) -> tuple[dict[str, str], ...]:
    return tuple(read_csv_rows(path, "dataset", ragged=ragged))


def read_rows(path: Path, *, ragged: bool = False) -> list[dict[str, str]]:
    """The rows of a dataset CSV (the safe reader; SpecError naming 'dataset' on a bad file), each a fresh dict;
    ``ragged``: rows of more or fewer cells than the header are kept for the caller to skip (else refused).
    The file is read once per memo scope (``load_dataset`` opens one: its loader and its range checks share it)."""
    return [dict(r) for r in _csv_rows(Path(path), ragged)]


def scenario_or_skip(raw: dict, name: str) -> tuple[Scenario | None, str | None]:
    """build_scenario, turning a SpecError into a skip reason."""
    try:
        return build_scenario({**raw, "name": name}), None
    except SpecError as e:
        return None, f"not representable: {e}"
