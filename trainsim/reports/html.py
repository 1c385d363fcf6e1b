"""Render a report (sections of text, tables and figures) as one self-contained HTML file, with every
image embedded as base64, and as a Markdown twin whose figures sit in ``figures/`` beside it."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from trainsim import __version__
from trainsim.specs import SpecError
from trainsim.specs.safe_write import check_output_dir, write_atomic

TEMPLATE_DIR = Path(__file__).parent / "templates"
# Cells that read as a number (optionally signed, with a unit or currency) are right-aligned.
_NUMERIC = re.compile(r"^[-+$]?[0-9.,]*[0-9]([0-9.,]*)(%|\s+\S{1,6})?$|^—$")


@dataclass
class FigureBlob:
    """A rendered figure: file stem, title, caption and PNG bytes."""

    name: str
    title: str
    caption: str
    png: bytes

    @property
    def data_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""


@dataclass
class Section:
    id: str
    title: str
    paragraphs: list[str] = field(default_factory=list)
    figures: list[FigureBlob] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)


@dataclass
class Report:
    title: str
    subtitle: str
    metrics: list[tuple[str, str]]
    sections: list[Section]
    notes: list[str] = field(default_factory=list)


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html", "j2"), default_for_string=False),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
    )
    env.filters["md_cell"] = lambda s: str(s).replace("|", "\\|").replace("\n", " ")
    env.filters["anchor"] = lambda s: re.sub(r"[^a-z0-9-]+", "-", str(s).lower()).strip("-")
    env.tests["numeric"] = lambda s: bool(_NUMERIC.match(str(s)))
    return env


def render_html(report: Report) -> str:
    return _env().get_template("report.html.j2").render(r=report, version=__version__)


def render_markdown(report: Report, figure_dir: str = "figures") -> str:
    """The report as Markdown. Every interpolated value has its ``<`` written ``&lt;`` (which renders as ``<``):
    Markdown passes inline HTML through, so a model or cluster name such as ``<img onerror=...>`` would otherwise
    be live HTML wherever report.md is rendered."""
    env = _env()
    env.autoescape = False
    env.finalize = lambda v: v.replace("<", "&lt;") if isinstance(v, str) else v
    return env.get_template("report.md.j2").render(r=report, version=__version__, figure_dir=figure_dir)


def write_report(report: Report, out_dir: str | Path) -> dict[str, Path]:
    """Write ``index.html`` (self-contained), ``report.md`` and ``figures/*.png`` into ``out_dir``."""
    out = check_output_dir(out_dir, "out")
    figs = out / "figures"
    try:
        figs.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SpecError("out", f"cannot create {figs}: {e.strerror or type(e).__name__}") from None
    for sec in report.sections:
        for f in sec.figures:
            write_atomic(figs / f"{f.name}.png", f.png, "out")
    html_path = write_atomic(out / "index.html", render_html(report), "out")
    md_path = write_atomic(out / "report.md", render_markdown(report), "out")
    return {"html": html_path, "markdown": md_path, "figures": figs}
