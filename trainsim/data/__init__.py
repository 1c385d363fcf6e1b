"""Data shipped with trainsim: published measurements (validation/) copied from the project's shared set."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def validation_path(name: str) -> Path:
    """Path of a bundled validation file, e.g. ``validation_path("nccl_busbw.csv")``."""
    return Path(str(resources.files("trainsim.data").joinpath("validation", name)))
