"""docs/design.md's layering is a promise: lower layers never import upper ones; torch lives only in kernels."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "trainsim"

# Which trainsim subpackages each layer may import (docs/design.md, "Layers").
ALLOWED = {
    "specs": {"specs"},
    "topologies": {"specs", "topologies"},
    "cost_models": {"specs", "topologies", "cost_models"},
    "simulator": {"specs", "topologies", "cost_models", "simulator"},
    "kernels": {"specs", "cost_models", "kernels", "data"},
    "validation": {"specs", "topologies", "cost_models", "simulator", "validation", "data"},
    "reports": {"specs", "topologies", "cost_models", "simulator", "kernels", "validation", "reports", "data"},
    "cli": {"specs", "topologies", "cost_models", "simulator", "kernels", "validation", "reports", "cli", "data"},
}


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(module, at_top_level) for every import in a file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    top = {id(n) for n in tree.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.level:  # relative import: resolve against the file's package
                base = path.relative_to(PKG.parent).with_suffix("").parts[: -node.level]
                out.append((".".join((*base, node.module)), id(node) in top))
            else:
                out.append((node.module, id(node) in top))
    return out


def _layer_files():
    for layer in ALLOWED:
        for f in sorted((PKG / layer).rglob("*.py")):
            yield layer, f


@pytest.mark.parametrize("layer, path", list(_layer_files()), ids=lambda x: str(x).split("trainsim/")[-1])
def test_layer_imports_only_lower_layers(layer, path):
    for module, _ in _imports(path):
        parts = module.split(".")
        if parts[0] == "trainsim" and len(parts) > 1 and parts[1] in ALLOWED:
            assert parts[1] in ALLOWED[layer], f"{path.name} ({layer}) imports {module}"


@pytest.mark.parametrize("layer, path", list(_layer_files()), ids=lambda x: str(x).split("trainsim/")[-1])
def test_torch_only_in_kernels_and_lazily_outside_workers(layer, path):
    for module, at_top in _imports(path):
        if module.split(".")[0] == "torch":
            assert layer == "kernels", f"{path} imports torch"


def test_predict_and_plan_run_without_torch(tmp_path):
    """Block torch at import time; `trainsim predict` must still work."""
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ImportError('torch blocked for this test')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from trainsim.cli.main import main\n"
        "sys.exit(main(['predict', '--model', 'llama3-8b', '--cluster', 'dgx-h100', '--gpus', '16', '--tp', '8',"
        " '--json']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert '"step_time_s"' in proc.stdout
