"""Range checks on every numeric cell of every dataset row: a row with a negative or non-finite number is
skipped with the column and the value as its reason, never compared.

No published quantity in the bundled schemas (step times, throughputs, bandwidths, sizes, counts, degrees,
years, TFLOP/s) is negative, so one rule covers every column: a cell that parses as a number must be finite
and >= 0. The compared values themselves (the published metric and each secondary metric) must also be
positive: a zero step time or busbw cannot be the denominator of an error.
"""

from __future__ import annotations

import dataclasses
import math

from trainsim.validation.cases import Dataset


def _number(text: str | None) -> float | None:
    try:
        return float(str(text).strip().replace(",", ""))
    except (TypeError, ValueError):
        return None


def row_range_errors(rows: list[dict[str, str]]) -> dict[str, str]:
    """row_id -> the first out-of-range numeric cell of that row, as a skip reason."""
    out: dict[str, str] = {}
    for r in rows:
        rid = r.get("row_id")
        if not rid:
            continue
        for col, cell in r.items():
            if col is None or col == "row_id":
                continue
            v = _number(cell) if isinstance(cell, str) and cell.strip() else None
            if v is not None and (not math.isfinite(v) or v < 0):
                text = cell.strip()
                shown = text if len(text) <= 40 else f"a number of {len(text)} characters ({text[:12]}...)"
                out.setdefault(rid, f"{col}: must be a finite number >= 0, got {shown}")
                break
    return out


def _value_error(name: str, v: float) -> str | None:
    if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
        return f"{name}: published value must be a positive finite number, got {v}"
    return None


def range_checked(ds: Dataset, rows: list[dict[str, str]] | None = None) -> Dataset:
    """``ds`` with every case whose row has an out-of-range cell (that reason replaces any other: it is the
    first thing wrong with the row), and every active case whose published or secondary value is not positive
    and finite, turned into a skipped case that says why."""
    bad_rows = row_range_errors(rows or [])
    cases = []
    for c in ds.cases:
        if c.row_id in bad_rows:
            c = dataclasses.replace(c, skip_reason=bad_rows[c.row_id])
        elif c.skip_reason is None:
            why = _value_error(ds.metric, c.published)
            why = why or next((e for k, v in c.secondary.items() if (e := _value_error(k, v))), None)
            if why:
                c = dataclasses.replace(c, skip_reason=why)
        cases.append(c)
    return dataclasses.replace(ds, cases=tuple(cases))
