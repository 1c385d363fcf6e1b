"""One error type for every invalid input: it names the field and the reason in one line."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from typing import get_args

from pydantic import BaseModel, ValidationError


class SpecError(ValueError):
    """Invalid user input. ``str(err)`` is the one line the CLI prints: ``<field>: <reason>``."""

    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


def did_you_mean(name: object, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest known name (difflib's ratio >= 0.6), else ``""``."""
    close = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def unknown_name(field: str, what: str, name: object, known: Sequence[str]) -> SpecError:
    """The refusal of a name that is not one of ``known`` (a preset, a dataset...), with the closest match."""
    return SpecError(field, f"unknown {what} {name!r}{did_you_mean(name, known)} (known: {', '.join(known)})")


def _fields_at(model: type[BaseModel] | None, loc: Sequence) -> list[str]:
    """Field names of the (nested) pydantic model that holds the last element of ``loc``."""
    for part in loc[:-1]:
        info = getattr(model, "model_fields", {}).get(part) if model else None
        if info is None:
            return []
        kinds = (info.annotation, *get_args(info.annotation))
        model = next((k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)), None)
    return list(getattr(model, "model_fields", {})) if model else []


def from_validation_error(err: ValidationError, prefix: str = "", model: type[BaseModel] | None = None) -> SpecError:
    """Turn pydantic's multi-line report into a SpecError for its first problem; an unknown key of ``model``
    gets the closest allowed key."""
    first = err.errors()[0]
    raw_loc = [p for p in first.get("loc", ()) if p != "__root__"]
    loc = ".".join(str(p) for p in raw_loc)
    field = ".".join(p for p in (prefix, loc) if p) or prefix or "input"
    msg = first.get("msg", "invalid value")
    msg = msg.removeprefix("Value error, ")
    inner = (first.get("ctx") or {}).get("error")
    if isinstance(inner, SpecError):  # a validator named the field it refuses, relative to the model it checks
        field = ".".join(p for p in (prefix, loc, inner.field) if p)
        msg = inner.reason
    if first.get("type") == "extra_forbidden" and raw_loc:
        msg = "unknown key" + did_you_mean(raw_loc[-1], _fields_at(model, raw_loc))
    if first.get("type") == "string_too_long" and isinstance(first.get("input"), str):
        msg = f"must be at most {(first.get('ctx') or {}).get('max_length')} characters, got {len(first['input'])}"
    if first.get("type") == "finite_number":  # "inf", "nan", "1e400" as text (spec_config.SPEC_CONFIG)
        msg = f"must be a finite number, got {first.get('input')!r}"
    if first.get("type") == "int_parsing" and (hint := yaml11_hint(first.get("input"))):
        msg += f", got {first['input']!r}{hint}"
    return SpecError(field, msg.replace("\n", " "))


def yaml11_hint(value) -> str:
    """" (why)" where ``value`` is a string YAML 1.2 reads as a number but YAML 1.1 (PyYAML) leaves as text
    (``1e3``, ``2E+4``), else ""."""
    if isinstance(value, str) and re.fullmatch(r"[-+]?[0-9]+(\.[0-9]*)?[eE][-+]?[0-9]+", value.strip()):
        return " (YAML 1.1, which PyYAML reads, takes an exponent without a dot as text: write the integer out)"
    return ""
