"""Newer scenario fields read silently as something the named framework or model does not run.

``host_issue: compile`` under Megatron or DeepSpeed was costed as torch.compile's fused kernel issue (a
host-bound small model's step fell 3.5x) while ``compile: true`` -- the same request -- is refused there."""

from __future__ import annotations

import json

import pytest
from conftest import assert_refused, run_cli

SMALL = ("{name: tl, num_layers: 8, hidden: 512, num_heads: 8, ffn_hidden: 1408, vocab_size: 32000, max_seq_len: 256, "
         "activation: swiglu, norm: rmsnorm, position_embedding: rope, bias: false, tie_embeddings: false}")


def _scenario(tmp_path, training: str, model: str = SMALL):
    f = tmp_path / "s.yaml"
    f.write_text(f"model: {model}\ncluster: dgx-h100\ngpus: 8\ntraining: {{seq_len: 256, global_batch: 8, {training}}}\n")
    return f


@pytest.mark.parametrize("framework", ["megatron", "megatron-2021", "megatron-deepspeed", "deepspeed",
                                       "deepspeed-2023"])
def test_compiled_host_issue_outside_a_torch_loop_is_refused(tmp_path, framework):
    f = _scenario(tmp_path, f"framework: {framework}, host_issue: compile")
    for cmd in ("predict", "plan"):
        r = run_cli([cmd, f])
        assert_refused(r, "training.host_issue")
        assert f"framework {framework}" in r.err
    f = _scenario(tmp_path, f"framework: {framework}, compile: true")
    assert_refused(run_cli(["predict", f]), "training.compile")


@pytest.mark.parametrize("framework", ["torch", "pytorch-fsdp"])
def test_compiled_host_issue_in_a_torch_loop_is_compile_true(tmp_path, framework):
    steps = []
    for training in (f"framework: {framework}, host_issue: compile", f"framework: {framework}, compile: true",
                     f"framework: {framework}"):
        r = run_cli(["predict", _scenario(tmp_path, training), "--json"])
        assert r.code == 0, r.err
        steps.append(json.loads(r.out)["step_time_s"])
    assert steps[0] == steps[1] < steps[2]


def test_cuda_graphs_stay_open_to_megatron(tmp_path):
    r = run_cli(["predict", _scenario(tmp_path, "framework: megatron, host_issue: cuda_graphs"), "--json"])
    assert r.code == 0, r.err


@pytest.mark.parametrize("pools", ["[{node: dgx-h100, nodes: 1}, {node: dgx-a100, nodes: 1}]",
                                   "[{node: dgx-a100, nodes: 1}, {node: dgx-h100, nodes: 1}]",
                                   "[{node: dgx-h100, nodes: 1}, {gpu: h200, nodes: 1}]"])
def test_collective_on_a_mixed_cluster_is_refused(tmp_path, pools):
    """`trainsim collective` prices one fabric: on pools it priced the first pool's alone (an H100 + A100 group
    got the H100 figure, the same pools in the other order the A100's)."""
    f = tmp_path / "c.yaml"
    f.write_text(f"preset: dgx-h100\npools: {pools}\n")
    assert_refused(run_cli(["collective", "--cluster", f, "--gpus", "16", "--sizes", "1G"]), "cluster.pools")
    f.write_text("preset: dgx-h100\n")
    assert run_cli(["collective", "--cluster", f, "--gpus", "16", "--sizes", "1G"]).code == 0


@pytest.mark.parametrize("line, field", [("name: [1, 2]", "name"), ("name: {a: 1}", "name"), ("name: 2024", "name"),
                                         ("description: [draft]", "description")])
def test_a_scenario_name_that_is_not_text_is_refused(tmp_path, line, field):
    """A scenario's name is text: a list, a mapping or a number would be printed as its repr in every output."""
    f = tmp_path / "s.yaml"
    f.write_text(f"{line}\nmodel: tiny-gpt\ncluster: cpu-host\ngpus: 1\ntraining: {{seq_len: 128, global_batch: 8}}\n")
    assert_refused(run_cli(["predict", f, "--fast"]), f"{field}: must be a string")
    f.write_text(f.read_text().replace(line, "name: '2024'\ndescription: a draft"))
    r = run_cli(["predict", f, "--fast", "--json"])
    assert r.code == 0 and json.loads(r.out)["scenario"] == "2024", r.err


@pytest.mark.parametrize("name", ["[1]", "{a: 1}", "5", "true"])
def test_a_pool_name_that_is_not_text_is_refused(tmp_path, name):
    f = tmp_path / "s.yaml"
    f.write_text(f"model: llama3-8b\ncluster: {{preset: dgx-h100, pools: [{{node: dgx-a100, nodes: 1, name: {name}}}, "
                 "{node: dgx-h100, nodes: 1}]}\ntraining: {seq_len: 4096, global_batch: 16}\nlayout: {tp: 8, pp: 2}\n")
    assert_refused(run_cli(["predict", f, "--fast"]), "cluster.pools[0].name: must be a string")


@pytest.mark.parametrize("line", ["name: null", "name:", "description:", "name: ''"])
def test_a_blank_name_or_description_is_not_given(tmp_path, line):
    """A template's blank name or description (null, or empty text) is as if absent: the scenario is named
    model@cluster, not 'None'."""
    f = tmp_path / "s.yaml"
    f.write_text(f"{line}\nmodel: tiny-gpt\ncluster: cpu-host\ngpus: 1\ntraining: {{seq_len: 128, global_batch: 8}}\n")
    r = run_cli(["predict", f, "--fast", "--json"])
    assert r.code == 0, r.err
    assert json.loads(r.out)["scenario"] != "None" and "@" in json.loads(r.out)["scenario"]
