"""Every flag of every command says what it is for: argparse help text on each option."""

from __future__ import annotations

import argparse

import pytest

from trainsim.cli import COMMANDS
from trainsim.cli.main import build_parser


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_has_help(command):
    sub = _subparsers()[command]
    # a bare "range 1..N" (appended by cli.main.document_ranges) does not say what the flag is for
    missing = [a.option_strings[0] for a in sub._actions
               if a.option_strings and not isinstance(a, argparse._HelpAction)
               and not (a.help or "").split("range ")[0].strip()]
    assert not missing, f"{command}: options without help text: {missing}"


def test_validate_help_lists_every_dataset():
    from trainsim.validation.datasets import dataset_names
    text = _subparsers()["validate"].format_help()
    assert all(name in text for name in dataset_names())


def test_trace_says_what_it_wrote(tmp_path, capsys):
    import json

    from trainsim.cli.main import main

    out = tmp_path / "step.json"
    assert main(["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "16",
                 "--trace", str(out), "--json"]) == 0
    err = capsys.readouterr().err
    n = len(json.loads(out.read_text())["traceEvents"])
    assert f"wrote {out}: {n:,} trace events" in err
