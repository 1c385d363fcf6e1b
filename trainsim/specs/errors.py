"""One error type for every invalid input: it names the field and the reason in one line."""

from __future__ import annotations

from pydantic import ValidationError


class SpecError(ValueError):
    """Invalid user input. ``str(err)`` is the one line the CLI prints: ``<field>: <reason>``."""

    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


def from_validation_error(err: ValidationError, prefix: str = "") -> SpecError:
    """Turn pydantic's multi-line report into a SpecError for its first problem."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first.get("loc", ()) if p != "__root__")
    field = ".".join(p for p in (prefix, loc) if p) or prefix or "input"
    msg = first.get("msg", "invalid value")
    msg = msg.removeprefix("Value error, ")
    return SpecError(field, msg.replace("\n", " "))
