"""Offload beyond a node's host memory does not fit: predict's fits, the plan's memory filter and the what-if
levers hold the host memory a node needs (what each GPU offloads times the GPUs of a node) against
ClusterSpec.host_memory_bytes, and say why."""

from __future__ import annotations

import json

import pytest

from trainsim.cli.main import main

# DeepSpeed ZeRO-Infinity (ZeRO-3, parameters and optimizer offloaded) of Llama 3 405B on one DGX H100 node: the
# host holds 18 bytes per parameter of each rank's partition (fp32 master weights, Adam m and v, fp32 gradients,
# bf16 parameters: tests/test_silent_overrides.py), 18 x 405.9e9 = 7.3 TB per node against the preset's 2 TB.
OFFLOAD = ["--framework", "deepspeed", "--zero", "3", "--offload-params", "--offload-optimizer", "--recompute", "full"]
BASE = ["--model", "llama3-405b", "--gpus", "8", "--global-batch", "8", "--seq-len", "2048"]


def _cluster(tmp_path, host_bytes: float) -> str:
    f = tmp_path / f"dgx-h100-host{host_bytes:.0e}.yaml"
    f.write_text(f"preset: dgx-h100\nhost_memory_bytes: {host_bytes}\n")
    return str(f)


def _predict(capsys, cluster: str) -> dict:
    assert main(["predict", *BASE, "--cluster", cluster, *OFFLOAD, "--json", "--fast"]) == 0
    return json.loads(capsys.readouterr().out)


def test_offload_beyond_the_nodes_host_memory_does_not_fit(capsys):
    pred = _predict(capsys, "dgx-h100")
    mem = pred["memory"]
    params = pred["model"]["total_params"]
    assert mem["host_node_bytes"] == pytest.approx(8 * mem["host_bytes"]) == pytest.approx(18 * params, rel=1e-3)
    assert mem["host_capacity_bytes"] == 2e12
    assert mem["peak_bytes"] < mem["gpu_bytes"]           # the GPUs hold their share ...
    assert pred["fits"] is False                          # ... the node's host memory does not
    need = f"does not fit: offload needs {mem['host_node_bytes'] / 1e9:.0f} GB of host memory per node"
    assert any(w.startswith(need) for w in pred["warnings"])
    assert main(["predict", *BASE, "--cluster", "dgx-h100", *OFFLOAD, "--fast"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "does not fit (offload needs more than the node's host memory)" in out
    assert "over the node's host memory: does not fit" in out


def test_the_same_offload_fits_a_node_with_the_host_memory(tmp_path, capsys):
    pred = _predict(capsys, _cluster(tmp_path, 8e12))
    assert pred["memory"]["host_node_bytes"] < pred["memory"]["host_capacity_bytes"] == 8e12
    assert pred["fits"] is True and not any("host memory" in w for w in pred["warnings"])


def test_plan_filters_offload_beyond_the_host_memory(tmp_path, capsys):
    """The review's case ranked the 7.3 TB layout first on a 2 TB node; the memory filter counts it out of memory."""
    def plan(cluster: str) -> dict:
        f = tmp_path / "s.yaml"
        f.write_text(f"model: llama3-405b\ncluster: {cluster}\ngpus: 8\ntraining: {{framework: deepspeed, "
                     "global_batch: 8, seq_len: 2048, offload_params: true, offload_optimizer: true}\n")
        assert main(["plan", str(f), "--zero", "3", "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    small = plan("dgx-h100")
    assert small["rows"] == [] and small["counts"]["host_oom"] == small["counts"]["oom"] > 0
    big = plan(_cluster(tmp_path, 8e12))
    assert big["rows"] and big["counts"]["host_oom"] == 0
    assert all(r["fits"] for r in big["rows"])
