"""The `trainsim` command line: one subcommand per module in trainsim.reports.commands.

Invalid input exits with status 2 and one line on stderr naming the field and the reason.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from trainsim import __version__
from trainsim.reports.commands import COMMANDS
from trainsim.specs import SpecError


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
            module = importlib.import_module(f"trainsim.reports.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"trainsim.reports.commands.{name}":
                continue  # subcommand not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        code = args.func(args)
        return int(code or 0)
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
