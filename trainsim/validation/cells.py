"""Reading the cells of published-run CSVs, and cluster mappings built from presets (shared by the loaders)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from trainsim.specs import SpecError, load_cluster

# The one yes/no vocabulary of the published-run and settings CSVs: yes / no (hand-entered tables) and true / false
# (tables parsed from configs), any case, optionally followed by a remark in parentheses ("yes (sdpa)",
# "no (predates SP)"). Anything else -- "on", "1", "maybe", an empty cell -- is refused rather than guessed.
YES = ("yes", "true")
NO = ("no", "false")
_YES_NO = re.compile(r"^(yes|no|true|false)(?:\s*\(.*\))?$")


PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def num(text: str | None) -> float | None:
    """A cell as a float, or None when empty / not a plain number (e.g. 'not stated', '~230'): ASCII digits with
    thousands commas, a point and an exponent -- not Python's wider float() ('1_6', full-width digits, 'inf')."""
    if text is None:
        return None
    t = text.strip().replace(",", "")
    if not PLAIN_NUMBER.fullmatch(t):
        return None
    v = float(t)
    return v if math.isfinite(v) else None


def integer(text: str | None) -> int | None:
    """A cell as an int, or None when empty or not a whole number."""
    v = num(text)
    return None if v is None or v != int(v) else int(v)


def yes_no(row: Mapping[str, str | None], key: str) -> bool:
    """The yes/no cell ``row[key]`` as a bool (the YES / NO vocabulary above); SpecError naming ``key`` otherwise."""
    text = row.get(key)
    m = _YES_NO.match((text or "").strip().lower())
    if m is None:
        raise SpecError(key, f"{text!r} is neither yes nor no (one of {', '.join(YES + NO)}, optionally followed by "
                             "a remark in parentheses)")
    return m.group(1) in YES


def cluster(preset_name: str, gpus: int, **overrides) -> dict:
    """A cluster mapping: a preset with top-level overrides (nested dicts merged one level deep)."""
    base = load_cluster(preset_name).model_dump()
    for k, v in overrides.items():
        base[k] = {**base[k], **v} if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    base["num_gpus"] = gpus
    return base
