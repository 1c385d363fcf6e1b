"""Hand-written run-table rows for the reader tests: one base row, varied one cell at a time."""

from __future__ import annotations

import csv
from pathlib import Path


def write_rows(path: Path, base: dict[str, str], changes: dict[str, dict[str, str]]) -> Path:
    """A CSV at ``path`` in ``base``'s columns: one row per ``changes`` entry, ``base`` with that row id and cells."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(base))
        w.writeheader()
        w.writerows({**base, "row_id": rid, **cells} for rid, cells in changes.items())
    return path
