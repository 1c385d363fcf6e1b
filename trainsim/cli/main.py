"""The `trainsim` command line: one subcommand per module in trainsim.cli.

Invalid input exits with status 2 and one line on stderr naming the field and the reason; no command prints the
usage to stderr and exits 2.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys

from trainsim import __version__
from trainsim.cli import COMMANDS
from trainsim.cli.common import Bounded
from trainsim.specs import SpecError
from trainsim.specs.memo import memo_scope


class UsageError(Exception):
    """A command-line usage problem (argparse's complaints), reported in one line."""


class OneLineParser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage + error, so main() prints exactly one line."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="trainsim", description="Predict, plan, calibrate and execute distributed training.")
    parser.add_argument("--version", action="version", version=f"trainsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"trainsim.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"trainsim.cli.{name}":
                continue  # subcommand not built yet
            raise
        module.register(sub)
    for command in sub.choices.values():
        document_ranges(command)
    return parser


def document_ranges(parser: argparse.ArgumentParser) -> None:
    """Append each numeric flag's accepted range to its help (the same Bounded type enforces it)."""
    for action in parser._actions:
        if isinstance(action.type, Bounded) and action.help != argparse.SUPPRESS:
            rng = f"range {action.type.describe()}"
            action.help = f"{action.help} ({rng})" if action.help else rng


def one_line(text: str) -> str:
    """The message with control characters escaped: a value quoted from the user (a path with a newline, a
    terminal escape) can neither break the one-line contract nor drive the terminal."""
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: repr(m.group(0))[1:-1], text)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help(sys.stderr)  # no command: the usage goes where errors go, and it is one
            return 2
        with memo_scope():  # the command's memo of pure results: nothing outlives it (specs.memo)
            code = args.func(args)
        return int(code or 0)
    except (SpecError, UsageError) as e:
        print(f"error: {one_line(str(e))}", file=sys.stderr)
        return 2
    except RecursionError:  # the readers bound nesting to 64 levels; this is the backstop, never a traceback
        print("error: input: nested too deeply to process", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
