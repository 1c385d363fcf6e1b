"""Named presets for GPUs, clusters and models, read from the YAML files beside this module."""

from __future__ import annotations

import copy
from functools import cache
from importlib import resources

import yaml


@cache
def _table(kind: str) -> dict[str, dict]:
    text = resources.files("trainsim.specs").joinpath("presets", f"{kind}.yaml").read_text()
    data = yaml.safe_load(text)
    return {k: dict(v, name=v.get("name", k)) for k, v in data.items()}


def preset_names(kind: str) -> list[str]:
    """Names of the presets of one kind: ``gpus``, ``clusters`` or ``models``."""
    return sorted(_table(kind))


def preset(kind: str, name: str) -> dict | None:
    """A fresh copy of a preset's raw fields, or None if there is no such preset."""
    entry = _table(kind).get(name.lower())
    return None if entry is None else copy.deepcopy(entry)
