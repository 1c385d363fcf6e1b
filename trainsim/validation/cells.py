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
# commas only between groups of three digits of the integer part ('1,048,576'; not '3,5' or '23,04')
THOUSANDS = re.compile(r"[+-]?[0-9]{1,3}(,[0-9]{3})+(\.[0-9]*)?([eE][+-]?[0-9]+)?")


def num(text: str | None) -> float | None:
    """A cell as a float, or None when empty / not a plain number (e.g. 'not stated', '~230'): ASCII digits with
    thousands commas, a point and an exponent -- not Python's wider float() ('1_6', full-width digits, 'inf')."""
    if text is None:
        return None
    t = text.strip()
    if "," in t and not THOUSANDS.fullmatch(t):  # '3,5' is a decimal comma or a typo, not 35
        return None
    t = t.replace(",", "")
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


# Negation words of the tables' free text ('full (not selective)', 'non-selective', 'plain DDP (no FSDP)', 'none
# (ZeRO-3 not used)', 'fp16 (bf16 unsupported)'): right before a value keyword ('not using bf16', 'without any FSDP'
# through a filler word), or right after it ('bf16 is not supported'). 'non-interleaved 1F1B' negates interleaving,
# not 1F1B: only filler words, never another keyword, stand between.
_NEG_BEFORE = r"\b(?:not|no|non|without|unsupported)[\s-]+(?:(?:using|any|a|an|the|with|plain)\s+)?"
_NEG_AFTER = r"[\s:,]+(?:(?:is|was|are|were|being)\s+)?(?:not|unsupported)\b"


def negation(text: str, keyword: str) -> str | None:
    """The words of ``text`` that negate ``keyword`` (a regex, matched case-insensitively), or None."""
    m = re.search(rf"{_NEG_BEFORE}(?:{keyword})|(?:{keyword}){_NEG_AFTER}", text, re.IGNORECASE)
    return m.group(0) if m else None


def named_values(column: str, text: str, values: Mapping[str, str], negatable: str = "") -> set[str]:
    """The values of ``values`` (name -> keyword regex) that the free-text cell ``text`` names; SpecError naming
    ``column`` when it names more than one, or when a negation stands next to one of them or to a ``negatable``
    keyword (a regex: words that name the column's values without being one, e.g. 'FSDP') -- such a cell says
    which value it is not, or is ambiguous, and is never read as one of them."""
    for keyword in (*values.values(), *([negatable] if negatable else [])):
        if words := negation(text, keyword):
            raise SpecError(column, f"{text!r} negates a value ({words!r}): state the value alone")
    found = {name for name, keyword in values.items() if re.search(keyword, text, re.IGNORECASE)}
    if len(found) > 1:
        raise SpecError(column, f"{text!r} names more than one of {', '.join(sorted(found))}: state one")
    return found


def optional_positive(row: Mapping[str, str | None], key: str) -> float | None:
    """The optional number cell ``row[key]``: None when empty, else a positive number; SpecError naming ``key`` for
    anything else ('lots', '0') -- an unreadable cell is not read as an empty one."""
    text = (row.get(key) or "").strip()
    if not text:
        return None
    v = num(text)
    if v is None or v <= 0:
        raise SpecError(key, f"{text!r} is not a positive number (leave the cell empty when not stated)")
    return v


def optional_count(row: Mapping[str, str | None], key: str) -> int | None:
    """The optional count cell ``row[key]`` (nodes, GPUs per node): None when empty, else a positive whole number;
    SpecError naming ``key`` for anything else ('eight', '0', '2.5')."""
    v = optional_positive(row, key)
    if v is not None and v != int(v):
        raise SpecError(key, f"{row.get(key)!r} is not a whole number")
    return None if v is None else int(v)


def cluster(preset_name: str, gpus: int, **overrides) -> dict:
    """A cluster mapping: a preset with top-level overrides (nested dicts merged one level deep)."""
    base = load_cluster(preset_name).model_dump()
    for k, v in overrides.items():
        base[k] = {**base[k], **v} if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    base["num_gpus"] = gpus
    return base
