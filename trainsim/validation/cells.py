"""Reading the cells of published-run CSVs, and cluster mappings built from presets (shared by the loaders)."""

from __future__ import annotations

import math

from trainsim.specs import load_cluster


def num(text: str | None) -> float | None:
    """A cell as a float, or None when empty / not a plain number (e.g. 'not stated', '~230')."""
    if text is None:
        return None
    t = text.strip().replace(",", "")
    try:
        v = float(t)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def integer(text: str | None) -> int | None:
    """A cell as an int, or None when empty or not a whole number."""
    v = num(text)
    return None if v is None or v != int(v) else int(v)


def cluster(preset_name: str, gpus: int, **overrides) -> dict:
    """A cluster mapping: a preset with top-level overrides (nested dicts merged one level deep)."""
    base = load_cluster(preset_name).model_dump()
    for k, v in overrides.items():
        base[k] = {**base[k], **v} if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    base["num_gpus"] = gpus
    return base
