"""docs/scenario-reference.md is what the pydantic models accept: regenerated, it must be unchanged, and every
key it documents is accepted by the loader."""

from __future__ import annotations

from pathlib import Path

from trainsim.specs import Layout, TrainingSpec, build_scenario
from trainsim.specs.reference import SECTIONS, scenario_reference, type_text

DOC = Path(__file__).resolve().parents[1] / "docs" / "scenario-reference.md"


def test_the_reference_is_in_sync_with_the_models():
    assert DOC.read_text() == scenario_reference(), (
        "docs/scenario-reference.md is stale: python -m trainsim.specs.reference > docs/scenario-reference.md")


def test_every_field_of_every_section_is_documented():
    text = DOC.read_text()
    for title, model in SECTIONS:
        section = text.split(f"### {title}\n", 1)[1].split("\n### ", 1)[0]
        for name in model.model_fields:
            assert f"| `{name}` |" in section, (title, name)


def test_documented_defaults_are_what_the_loader_fills_in():
    sc = build_scenario({"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8})
    assert sc.layout.tp == Layout.model_fields["tp"].default == 1
    assert sc.training.zero == TrainingSpec.model_fields["zero"].default


def test_type_names():
    from typing import Literal
    assert type_text(int | None) == "integer or none"
    assert type_text(Literal["a", "b"]) == "`a` \\| `b`"
    assert type_text(tuple[int, ...]) == "list of integer"
