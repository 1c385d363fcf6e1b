"""Data shipped with trainsim (published measurements entered by hand, validation/) and the lookup of the
validation tables trainsim does not ship.

Three tables, MosaicML's llm-foundry MPT benchmarks, NVIDIA Megatron-Bridge's performance summaries and vTrain's single-node A100 iterations, are
parsed mechanically from those projects' repositories; their licences do not let trainsim redistribute them,
so they live outside the package. ``external_validation_path`` finds them in the directory named by the
environment variable ``TRAINSIM_VALIDATION_DIR``; a user may also pass either file to
``trainsim validate --dataset PATH``.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

VALIDATION_DIR_ENV = "TRAINSIM_VALIDATION_DIR"
EXTERNAL_FILES = ("mosaic_mpt_benchmarks.csv", "nemo_megatron_bridge_perf.csv", "vtrain_a100_single_node.csv")


def validation_path(name: str) -> Path:
    """Path of a bundled validation file, e.g. ``validation_path("nccl_busbw.csv")``."""
    return Path(str(resources.files("trainsim.data").joinpath("validation", name)))


def external_dirs() -> list[Path]:
    """Directories searched for tables trainsim does not bundle, in order."""
    return [Path(os.environ[VALIDATION_DIR_ENV])] if os.environ.get(VALIDATION_DIR_ENV) else []


def external_validation_path(name: str) -> Path | None:
    """Path of a validation table that is not bundled (see the module docstring), or None where absent."""
    for d in external_dirs():
        if (d / name).is_file():
            return d / name
    return None
