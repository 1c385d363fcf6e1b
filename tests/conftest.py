"""Test session set-up: the unbundled validation tables (trainsim.data) are read from shared/validation
beside the checkout, where the project's shared data and CI lay them, unless TRAINSIM_VALIDATION_DIR is set."""

from __future__ import annotations

import os
from pathlib import Path

from trainsim.data import VALIDATION_DIR_ENV

_SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "validation"
if not os.environ.get(VALIDATION_DIR_ENV) and _SHARED.is_dir():
    os.environ[VALIDATION_DIR_ENV] = str(_SHARED)
