"""A mistyped preset, dataset or key is refused with the closest valid name (difflib), exit 2, one line."""

from __future__ import annotations

import pytest

from trainsim.cli.main import main
from trainsim.specs.errors import did_you_mean


def test_closest_name_or_nothing():
    assert did_you_mean("llama3-8", ["llama3-8b", "llama3-70b"]) == "; did you mean 'llama3-8b'?"
    assert did_you_mean("zzzz", ["llama3-8b"]) == ""


@pytest.mark.parametrize("argv, line", [
    (["predict", "--model", "llama3-8", "--cluster", "dgx-h100", "--gpus", "8"],
     "error: model: unknown preset 'llama3-8'; did you mean 'llama3-8b'?"),
    (["predict", "--model", "llama3-8b", "--cluster", "dgx-h10", "--gpus", "8"],
     "error: cluster: unknown preset 'dgx-h10'; did you mean 'dgx-h100'?"),
    (["validate", "--dataset", "mosiac"], "error: dataset: unknown dataset 'mosiac'; did you mean 'mosaic'?"),
])
def test_mistyped_names(argv, line, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1


@pytest.mark.parametrize("text, line", [
    ("model: llama3-8b\ncluster: dgx-h100\ngpus: 8\nlayuot: {tp: 2}\n",
     "error: scenario.layuot: unknown key; did you mean 'layout'?"),
    ("model: llama3-8b\ncluster: dgx-h100\ngpus: 8\nlayout: {tpp: 2}\n", "error: layout.tpp: unknown key; did you mean 'tp'?"),
    ("model: llama3-8b\ncluster: {preset: dgx-h100, gpu: {memory_byts: 1}}\ngpus: 8\n",
     "error: cluster.gpu.memory_byts: unknown key; did you mean 'memory_bytes'?"),
])
def test_mistyped_keys(text, line, tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert main(["predict", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1
