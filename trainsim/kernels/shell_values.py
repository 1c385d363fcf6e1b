"""Values that reach shell text (an sbatch script, a torchrun command line) are checked against their syntax.

A value written into a job script is code: a newline in ``--partition`` would add its own ``#SBATCH`` lines
and then any shell command. Every value is therefore validated against what Slurm accepts for it and every
argument on a command line is ``shlex.quote``d; control characters (newline, carriage return, NUL, escape, ...)
are refused everywhere, quoted or not, because no partition, account, time, path or flag contains one.
"""

from __future__ import annotations

import re

from trainsim.specs.errors import SpecError

# sbatch --time: "minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours", "days-hours:minutes" and
# "days-hours:minutes:seconds" (sbatch(1), option -t/--time).
_TIME_FORMS = (
    (re.compile(r"(\d+)"), ("m",)),
    (re.compile(r"(\d+):(\d+)"), ("m", "s")),
    (re.compile(r"(\d+):(\d+):(\d+)"), ("h", "m", "s")),
    (re.compile(r"(\d+)-(\d+)"), ("d", "h")),
    (re.compile(r"(\d+)-(\d+):(\d+)"), ("d", "h", "m")),
    (re.compile(r"(\d+)-(\d+):(\d+):(\d+)"), ("d", "h", "m", "s")),
)
_UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}
# The leading field may be large ("90" minutes, "48:00:00"); a field after a separator is bounded like a clock.
_FIELD_MAX = {"h": 23, "m": 59, "s": 59}
MAX_TIME_S = 365 * 86400  # one year: no cluster grants more, and a typo of 10^6 minutes is caught

# Slurm partition and account names: letters, digits, '_', '-', '.' (Slurm's own names and sacctmgr's accounts
# use no others; a space, quote, '$', ';' or newline would be shell or directive syntax).
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def refuse_control_chars(value: str, field: str) -> str:
    """``value`` unless it holds a control character (newline, tab, NUL, ESC, ...)."""
    m = _CONTROL.search(value)
    if m:
        raise SpecError(field, f"contains a control character ({m.group(0)!r}); refused in job scripts and "
                               "command lines")
    return value


def slurm_time(text: str, field: str = "time") -> str:
    """An sbatch ``--time`` value in one of Slurm's six forms, positive and at most a year."""
    refuse_control_chars(text, field)
    for pattern, units in _TIME_FORMS:
        m = pattern.fullmatch(text)
        if not m:
            continue
        values = [int(g) for g in m.groups()]
        for i, (unit, v) in enumerate(zip(units, values)):
            if i > 0 and v > _FIELD_MAX[unit]:
                name = {"h": "hours", "m": "minutes", "s": "seconds"}[unit]
                raise SpecError(field, f"{text!r}: the {name} field must be <= {_FIELD_MAX[unit]}")
        total = sum(_UNIT_S[u] * v for u, v in zip(units, values))
        if total <= 0:
            raise SpecError(field, f"{text!r} is no time at all (a job needs a positive limit)")
        if total > MAX_TIME_S:
            raise SpecError(field, f"{text!r} is more than a year")
        return text
    raise SpecError(field, f"{text!r} is not a Slurm time (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS)")


def slurm_name(text: str, field: str, allow_list: bool = False) -> str:
    """A partition or account name (``allow_list``: sbatch's comma-separated list of partitions)."""
    refuse_control_chars(text, field)
    parts = text.split(",") if allow_list else [text]
    for part in parts:
        if not _NAME.fullmatch(part):
            raise SpecError(field, f"{text!r} is not a Slurm name (letters, digits, '_', '-', '.'; at most 64)")
    return text


def safe_args(args: list[str], field: str = "command line") -> list[str]:
    """Every argument free of control characters (quoting is the caller's: shlex.quote / argv lists)."""
    for a in args:
        refuse_control_chars(a, field)
    return args
