"""Code shape: no function over 80 lines and no module over 700 lines under trainsim/ (the brief's style rule,
issue 19 item 3), without exceptions.

A function's length runs from its ``def`` line to its last line (nested functions and methods count on
their own and within their enclosing function); a module's is its number of lines.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "trainsim"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 700


def _modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@cache
def _module_lines() -> dict[str, int]:
    return {_rel(p): len(p.read_text(encoding="utf-8").splitlines()) for p in _modules()}


@cache
def _function_lines() -> dict[tuple[str, str], int]:
    """(module, qualified name) -> lines of every function and method under trainsim/."""
    out: dict[tuple[str, str], int] = {}

    def visit(node: ast.AST, rel: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                out[(rel, name)] = child.end_lineno - child.lineno + 1
                visit(child, rel, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, rel, prefix + child.name + ".")
            else:
                visit(child, rel, prefix)

    for p in _modules():
        visit(ast.parse(p.read_text(encoding="utf-8"), filename=str(p)), _rel(p), "")
    return out


def test_the_scan_sees_the_package():
    """Guards against a vacuous pass: the scan finds the package's modules and their functions."""
    modules, functions = _module_lines(), _function_lines()
    assert "simulator/builder.py" in modules and len(modules) > 50
    assert ("simulator/builder.py", "build_cost_table") in functions
    assert ("simulator/engine.py", "_Engine._stage") in functions


def test_no_module_over_700_lines():
    over = {m: n for m, n in _module_lines().items() if n > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split out a concept): {over}"


def test_no_function_over_80_lines():
    over = {f"{m}:{f}": n for (m, f), n in _function_lines().items() if n > MAX_FUNCTION_LINES}
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines (split into named steps): {over}"
