"""Validation tables trainsim does not bundle (trainsim.data): tests read them from shared/validation beside
the checkout (conftest.py) and skip, with the reason, where they are absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainsim.data import EXTERNAL_FILES, external_validation_path, validation_path


def without(file: str) -> pytest.MarkDecorator:
    """Skip marker for tests that need the unbundled ``file``."""
    return pytest.mark.skipif(external_validation_path(file) is None,
                              reason=f"{file} is not bundled and TRAINSIM_VALIDATION_DIR does not hold it")


def table_path(file: str) -> Path:
    """The bundled or unbundled validation table ``file``; skips the test where an unbundled one is absent."""
    if file not in EXTERNAL_FILES:
        return validation_path(file)
    found = external_validation_path(file)
    if found is None:
        pytest.skip(f"{file} is not bundled and TRAINSIM_VALIDATION_DIR does not hold it")
    return found


MOSAIC = without("mosaic_mpt_benchmarks.csv")
NEMO = without("nemo_megatron_bridge_perf.csv")
