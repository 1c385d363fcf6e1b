"""The rich console of trainsim's terminal output: every string is printed as the characters it holds.

Names, notes and paths come from the user's files: a model called ``x[/bold]y``, a cluster called
``[link=http://x]click[/link]``, a calibration profile's hostname, a scenario file's path. rich reads ``[...]`` in a
printed string as console markup: a closing tag with nothing to close raises ``rich.errors.MarkupError`` (a
traceback instead of the table), and a valid tag is applied (a colour, a terminal hyperlink) instead of shown;
``:name:`` codes become emoji. Every console made here has markup and emoji codes off, so a line, a table cell,
a title or a caption is printed as given; styling goes on ``rich.text.Text`` spans (``styled``), never inline.

rich is imported on use: `trainsim` imports every subcommand's module to build its parser, and rich takes
0.4-4 s to import.
"""

from __future__ import annotations

from typing import Any


def text_console(**kwargs: Any):
    """A ``rich.console.Console`` (``kwargs`` as rich takes them) that reads no markup and no emoji codes."""
    from rich.console import Console

    return Console(markup=False, emoji=False, **kwargs)


def styled(*parts: str | tuple[str, str]):
    """A ``rich.text.Text`` of plain strings and (text, style) pairs, e.g. ``styled(("no", "red"))``: each text is
    kept as given, the style names rich's (``bold``, ``red``, ``dim`` ...)."""
    from rich.text import Text

    return Text.assemble(*parts)
