"""The scenario-file reference (docs/scenario-reference.md), generated from the pydantic models themselves so
the documented keys, types, defaults and meanings cannot drift from what the loader accepts."""

from __future__ import annotations

import enum
import types
import typing
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from .hardware import BackgroundLoadSpec, ClusterSpec, GPUSpec, PoolSpec, ScaleOutSpec, ScaleUpSpec
from .layout import Layout
from .model import ModelSpec
from .spec_config import MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS
from .training import TrainingSpec

TOP_LEVEL = (
    ("name", "string", f"the scenario's name, shown in every output, at most {MAX_NAME_CHARS} characters"),
    ("description", "string", f"free text, ignored by the engine, at most {MAX_DESCRIPTION_CHARS} characters"),
    ("model", "preset name, path or mapping", ("a model preset (`trainsim predict --model x` lists them), a "
                                               "YAML/JSON file, a Hugging Face `config.json`, or the keys of "
                                               "**model** below inline")),
    ("cluster", "preset name, path or mapping", ("a cluster preset, a YAML/JSON file, or a mapping: "
                                                 "`preset: NAME` plus any keys of **cluster** below to "
                                                 "override, or a full description")),
    ("gpus", "integer", "GPUs in the job (the cluster's `num_gpus`)"),
    ("layout", "mapping", "the keys of **layout** below"),
    ("training", "mapping", "the keys of **training** below"),
)

SECTIONS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("model", ModelSpec),
    ("cluster", ClusterSpec),
    ("cluster.gpu", GPUSpec),
    ("cluster.scale_up", ScaleUpSpec),
    ("cluster.scale_out", ScaleOutSpec),
    ("cluster.scale_out.background_load", BackgroundLoadSpec),
    ("cluster.pools[]", PoolSpec),
    ("layout", Layout),
    ("training", TrainingSpec),
)


def type_text(annotation: Any) -> str:
    """A reader's name for a field's type: choices of a Literal, ``x | none`` for optionals."""
    origin = get_origin(annotation)
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_text(a) for a in get_args(annotation))
    if origin is tuple:
        args = [a for a in get_args(annotation) if a is not Ellipsis]
        return f"list of {type_text(args[0])}" if args else "list"
    if annotation is type(None):
        return "none"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " \\| ".join(f"`{m.value}`" for m in annotation)
    return {int: "integer", float: "number", bool: "boolean", str: "string"}.get(annotation, str(annotation))


def default_text(info: Any) -> str:
    """A field's default as the reference table prints it."""
    if info.default is PydanticUndefined:
        return "required" if info.default_factory is None else "(computed)"
    value = info.default
    if isinstance(value, BaseModel):
        return "(defaults below)"
    if isinstance(value, tuple):
        value = list(value)
    return f"`{value}`" if value is not None else "none"


def section_table(title: str, model: type[BaseModel]) -> str:
    """One Markdown table of a model's fields: key, type, default, meaning."""
    doc = " ".join((model.__doc__ or "").strip().split("\n\n")[0].split())
    lines = [f"### {title}", "", doc, "", "| key | type | default | meaning |", "|---|---|---|---|"]
    for name, info in model.model_fields.items():
        meaning = (info.description or "").replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{name}` | {type_text(info.annotation)} | {default_text(info)} | {meaning} |")
    return "\n".join(lines) + "\n"


def scenario_reference() -> str:
    """docs/scenario-reference.md: every key a scenario file may hold."""
    intro = ("Generated from trainsim's pydantic models by `python -m trainsim.specs.reference > "
             "docs/scenario-reference.md`; a test keeps the file in sync. Flags of `trainsim predict`/`plan` "
             "override the same keys (`--tp` sets `layout.tp`). Unknown keys are refused with the closest "
             "valid one.")
    head = ["# Scenario-file reference", "", intro, "", "## Top level", "", "| key | type | meaning |",
            "|---|---|---|"]
    head += [f"| `{k}` | {t} | {m} |" for k, t, m in TOP_LEVEL]
    body = [section_table(title, model) for title, model in SECTIONS]
    return "\n".join(head) + "\n\n## Sections\n\n" + "\n".join(body)


if __name__ == "__main__":
    print(scenario_reference(), end="")
