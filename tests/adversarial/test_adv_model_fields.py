"""Model fields accepted and then ignored, and Hugging Face switches read by their truth.

``moe_ffn_hidden`` on a dense model and the ``mamba_*`` dimensions on a model without Mamba layers changed nothing
(a model file meant as MoE or hybrid was costed as the dense transformer without a word); a config.json switch
written as a string -- ``"tie_word_embeddings": "false"`` -- was true (an output head of V x h parameters
dropped), ``"bias": "false"`` on Falcon added biases."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, assert_refused, run_cli

HF = REPO / "tests" / "data" / "hf"


@pytest.mark.parametrize("override, named", [
    ("moe_ffn_hidden: 1024", "moe_ffn_hidden"),
    ("mamba_state_dim: 64", "mamba_state_dim"),
    ("mamba_heads: 4", "mamba_heads"),
    ("mamba_expand: 4, mamba_chunk_size: 64", "mamba_expand, mamba_chunk_size"),
])
def test_a_field_of_an_absent_layer_kind_is_refused(tmp_path, override, named):
    f = tmp_path / "s.yaml"
    f.write_text(f"model: {{preset: llama3-8b, {override}}}\ncluster: dgx-h100\ngpus: 8\n"
                 "training: {seq_len: 4096, global_batch: 8}\n")
    r = run_cli(["predict", f, "--fast"])
    assert_refused(r, "model")
    assert named in r.err


@pytest.mark.parametrize("model, message", [
    ("{preset: llama3-8b, block_norms: 3}", "model.block_norms: Input should be 1, 2 or 4"),
    ("{preset: llama3-8b, block_norms: 0}", "model.block_norms: Input should be 1, 2 or 4"),
    ("{preset: llama3-8b, head_dim: 3}", ("model.head_dim: RoPE (position_embedding rope) rotates pairs of dims: "
                                          "the head dim must be even, got head_dim = 3")),
    ("{preset: llama3-8b, head_dim: 1}", "model.head_dim: RoPE"),
    ("{name: odd, num_layers: 2, hidden: 12, num_heads: 4, vocab_size: 1000, position_embedding: rope}",
     "got hidden / num_heads = 3"),
    ("{preset: deepseek-v3, qk_rope_head_dim: 63}", ("model.qk_rope_head_dim: RoPE rotates pairs of dims: must be "
                                                     "even, got 63")),
])
def test_a_model_value_outside_its_documented_choices_is_refused(tmp_path, model, message):
    """block_norms is 1, 2 or 4 (its description; 3 was costed as three norms per block), and RoPE rotates a
    head's dims in pairs (RoFormer eq. 14-15), so an odd rotated head dim is no model."""
    f = tmp_path / "s.yaml"
    f.write_text(f"model: {model}\ncluster: dgx-h100\ngpus: 8\ntraining: {{seq_len: 4096, global_batch: 8}}\n")
    assert_refused(run_cli(["predict", f, "--fast"]), message)


def test_an_odd_head_dim_without_rope_is_read(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("model: {preset: gpt3-175b, num_layers: 2, head_dim: 3}\ncluster: dgx-h100\ngpus: 8\n"
                 "training: {seq_len: 2048, global_batch: 8}\n")
    r = run_cli(["predict", f, "--fast"])
    assert r.code == 0, r.err


def test_moe_and_hybrid_presets_keep_their_fields():
    for preset in ("mixtral-8x7b", "deepseek-v3", "nemotron-h-8b"):
        r = run_cli(["predict", "--model", preset, "--cluster", "dgx-h100", "--gpus", "64", "--global-batch", "64",
                     "--seq-len", "4096", "--fast"])
        assert "moe_ffn_hidden" not in r.err and "mamba" not in r.err, (preset, r.err)


@pytest.mark.parametrize("config, key, value", [
    ("llama3-8b-config.json", "tie_word_embeddings", "false"),
    ("llama3-8b-config.json", "tie_word_embeddings", 0),
    ("llama3-8b-config.json", "attention_bias", "false"),
    ("gpt2-config.json", "add_cross_attention", "no"),
    ("qwen2-7b-config.json", "use_sliding_window", 0.0),
    ("llama3-8b-config.json", "_name_or_path", ["meta-llama/Meta-Llama-3-8B"]),   # named "['meta-llama/...']"
])
def test_a_hugging_face_switch_that_is_not_a_boolean_is_refused(tmp_path, config, key, value):
    cfg = json.loads((HF / config).read_text())
    cfg[key] = value
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    assert_refused(run_cli(["predict", "--model", f, "--cluster", "dgx-h100", "--fast"]), f"model.{key}")
    cfg[key] = False if key != "_name_or_path" else "meta-llama/Meta-Llama-3-8B"
    f.write_text(json.dumps(cfg))
    r = run_cli(["predict", "--model", f, "--cluster", "dgx-h100", "--fast"])
    assert f"model.{key}" not in r.err, r.err


@pytest.mark.parametrize("cluster, field", [
    ("{preset: dgx-h100, gpu: {memory_bytes: 80}}", "cluster.gpu.memory_bytes"),          # 80 for 80 GiB
    ("{preset: dgx-h100, gpu: {preset: h200, memory_bytes: 141}}", "cluster.gpu.memory_bytes"),
    ("{preset: dgx-h100, host_memory_bytes: 2}", "cluster.host_memory_bytes"),             # 2 for 2 TB
    ("{preset: dgx-h100, scale_up: {kind: pcie, nvls: true}}", "cluster.scale_up"),
    ("{preset: dgx-a100, scale_up: {nvls: true, kind: nvlink}}", "cluster.scale_up"),
])
def test_a_cluster_figure_off_by_its_unit_or_a_switch_without_its_fabric_is_refused(tmp_path, cluster, field):
    """A GPU of 80 bytes was costed (every layout out of memory), and NVLink SHARP on PCIe or direct NVLink was
    accepted and silently dropped (topologies/fabric.py needs an NVSwitch)."""
    f = tmp_path / "s.yaml"
    f.write_text(f"model: llama3-8b\ncluster: {cluster}\ngpus: 16\ntraining: {{seq_len: 4096, global_batch: 32}}\n")
    assert_refused(run_cli(["predict", f, "--fast"]), field)


def test_another_in_node_fabric_does_not_inherit_the_presets_nvls(tmp_path):
    """dgx-h100 with its NVSwitch replaced by PCIe: the preset's NVLink SHARP goes with its switch (nvls off), as
    stating nvls: false gives; NVLS on PCIe stated outright is refused (above)."""
    f = tmp_path / "s.yaml"
    body = "model: llama3-8b\ngpus: 16\ntraining: {seq_len: 4096, global_batch: 32}\ncluster: "
    f.write_text(body + "{preset: dgx-h100, scale_up: {kind: pcie}}\n")
    inherited = run_cli(["predict", f, "--fast", "--json"])
    f.write_text(body + "{preset: dgx-h100, scale_up: {kind: pcie, nvls: false}}\n")
    stated = run_cli(["predict", f, "--fast", "--json"])
    assert inherited.code == stated.code == 0, inherited.err
    assert json.loads(inherited.out)["step_time_s"] == json.loads(stated.out)["step_time_s"]
