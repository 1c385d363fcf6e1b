"""Specs: Hugging Face configs load as is, scenarios resolve, flags override, layout rules name the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainsim.specs import SpecError, build_scenario, load_cluster, load_model, preset_names

HF = Path(__file__).parent / "data" / "hf"

# Parameter counts of the released checkpoints (safetensors metadata of each Hugging Face repo).
RELEASED = {
    "llama3-8b": 8_030_261_248,      # meta-llama/Meta-Llama-3-8B
    "mixtral-8x7b": 46_702_792_704,  # mistralai/Mixtral-8x7B-v0.1
    "mistral-7b": 7_241_732_096,     # mistralai/Mistral-7B-v0.1
    "qwen2-7b": 7_615_616_512,       # Qwen/Qwen2-7B
    "gpt2": 124_439_808,             # openai-community/gpt2
}


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_hf_config_loads_as_is_with_exact_parameter_count(name):
    model = load_model(str(HF / f"{name}-config.json"))
    assert model.total_params() == RELEASED[name]


def test_hf_config_fields_are_mapped():
    m = load_model(str(HF / "mixtral-8x7b-config.json"))
    assert (m.num_experts, m.top_k, m.kv_heads, m.activation, m.norm) == (8, 2, 8, "swiglu", "rmsnorm")
    g = load_model(str(HF / "gpt2-config.json"))
    assert (g.num_layers, g.hidden, g.num_heads, g.activation, g.tie_embeddings) == (12, 768, 12, "gelu", True)
    assert g.position_embedding == "learned" and g.max_seq_len == 1024


@pytest.mark.parametrize("key, value", [
    ("shared_expert_intermediate_size", 5632),   # mapped for qwen2_moe only
    ("n_shared_experts", 1),                     # mapped for deepseek_v2/v3, kimi_k2, glm4_moe only
    ("kv_lora_rank", 512),                       # multi-head latent attention: deepseek_v2/v3, kimi_k2 only
    ("first_k_dense_replace", 3),                # mapped for deepseek_v2/v3, kimi_k2, glm4_moe only
    ("decoder_sparse_step", 2),                  # MoE on every 2nd layer: never
])
def test_hf_config_with_unmodelled_architecture_is_refused(tmp_path, key, value):
    """A feature ModelSpec cannot represent (here: keys a Mixtral config does not have, whose meaning was checked
    for other architectures only) is an error naming it, not a model with other parameter counts. The mapped
    architectures are tested in test_model_deepseek.py."""
    cfg = json.loads((HF / "mixtral-8x7b-config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, key: value}))
    with pytest.raises(SpecError) as ei:
        load_model(str(path))
    assert ei.value.field == f"model.{key}"


def test_mixtral_active_parameters_match_published_12_9b():
    # Mistral AI: "12.9B active parameters per token" for Mixtral 8x7B.
    m = load_model("mixtral-8x7b")
    assert m.active_params() == pytest.approx(12.9e9, rel=0.01)


def test_scenario_derives_dp_and_microbatches():
    s = build_scenario({"model": "llama3-70b", "cluster": "dgx-h100", "gpus": 1024,
                        "layout": {"tp": 8, "pp": 4}, "training": {"global_batch": 1024, "seq_len": 8192}})
    assert s.dp == 32 and s.num_microbatches == 32 and s.layers_per_stage == 20
    assert s.cluster.num_nodes == 128


def test_flags_override_scenario_values():
    raw = {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 64, "layout": {"tp": 8},
           "training": {"global_batch": 64, "micro_batch": 1}}
    s = build_scenario(raw, {"tp": 4, "micro_batch": 2, "gpus": 128})
    assert (s.layout.tp, s.training.micro_batch, s.num_gpus, s.dp) == (4, 2, 128, 32)


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"tp": 3}, "gpus"),                       # 64 GPUs not divisible by tp=3
        ({"tp": 16, "gpus": 64}, "layout.tp"),     # 8 kv heads
        ({"pp": 3, "gpus": 24}, "layout.pp"),      # 32 layers
        ({"dp": 3}, "layout.dp"),
        ({"global_batch": 100}, "training.global_batch"),
        ({"ep": 2}, "layout.ep"),                  # dense model
        ({"vpp": 2}, "layout.vpp"),                # vpp without interleaved
        ({"schedule": "interleaved"}, "training.schedule"),
        ({"dtype": "fp8", "cluster": "dgx-a100"}, "training.dtype"),
        ({"cp": 2, "seq_len": 4094, "gpus": 16}, "training.seq_len"),
        ({"sequence_parallel": True, "tp": 1}, "training.sequence_parallel"),
    ],
)
def test_invalid_layouts_name_the_field(overrides, field):
    raw = {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 64, "training": {"global_batch": 64}}
    with pytest.raises(SpecError) as err:
        build_scenario(raw, overrides)
    assert err.value.field == field


def test_presets_cover_the_design_card():
    assert {"dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200", "mi300x"} <= set(preset_names("clusters"))
    assert {"gpt3-175b", "llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b", "tiny-gpt"} <= set(
        preset_names("models"))
    a100 = load_cluster("dgx-a100")
    # hardware.csv a100_80_ds: 312 TFLOP/s bf16 dense, 2.039 TB/s; a100_papers: 8x 200 Gb/s HDR.
    assert a100.gpu.peak("bf16") == 312e12 and a100.gpu.hbm_bw_Bps == 2.039e12
    assert a100.scale_out.nic_bw_Bps * 8 == 200e9
    h100 = load_cluster("dgx-h100", gpus=16)
    assert h100.gpu.peak("fp8") == 1978.9e12 and h100.num_nodes == 2  # hardware.csv h100_ds


def test_gpu_preset_inside_a_cluster_preset_replaces_the_clusters_gpu():
    """`gpu: {preset: a100-40gb, ...}` is that GPU (+ its overrides), not the base cluster's A100-80GB."""
    eighty = load_cluster("dgx-a100", gpus=8)
    for gpu in ({"preset": "a100-40gb", "pcie_bw_Bps": 2e10}, "a100-40gb"):
        c = load_cluster({"preset": "dgx-a100", "gpu": gpu}, gpus=8)
        assert c.gpu.memory_bytes == load_cluster({"preset": "dgx-a100", "gpu": "a100-40gb"}).gpu.memory_bytes
        assert c.gpu.memory_bytes < eighty.gpu.memory_bytes
    assert load_cluster({"preset": "dgx-a100", "gpu": {"preset": "a100-40gb", "pcie_bw_Bps": 2e10}}).gpu.pcie_bw_Bps == 2e10
    # a plain field override still merges into the cluster's own GPU
    c = load_cluster({"preset": "dgx-a100", "gpu": {"pcie_bw_Bps": 2e10}})
    assert c.gpu.memory_bytes == eighty.gpu.memory_bytes and c.gpu.pcie_bw_Bps == 2e10


def test_cluster_yaml_with_preset_and_overrides(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("preset: dgx-h100\nscale_out: {nics_per_node: 4, nic_bw_Bps: 50.0e9, fabric: fat-tree, oversubscription: 2}\n")
    c = load_cluster(str(f), gpus=32)
    assert c.scale_out.nics_per_node == 4 and c.scale_out.oversubscription == 2 and c.gpu.name.startswith("H100")


@pytest.mark.parametrize("name, gpu, cluster", [
    ("NVIDIA GB200", "gb200", "gb200-nvl72"), ("NVIDIA B200", "b200", "dgx-b200"),
    ("NVIDIA GH200 480GB", "h200", None),                  # H200-class peaks, no Grace Hopper node preset
    ("NVIDIA A100-PCIE-40GB", "a100-40gb", None),          # the SXM part's peaks, not its NVSwitch node
    ("NVIDIA A100-SXM4-40GB", "a100-40gb", "dgx-a100"), ("NVIDIA A100-SXM4-80GB", "a100-80gb", "dgx-a100"),
    ("NVIDIA H100 PCIe", None, None), ("NVIDIA H100 NVL", None, None),
    ("NVIDIA H800", "h100-sxm", "dgx-h100"), ("AMD Instinct MI300X", "mi300x", "mi300x"), ("V100", None, None),
])
def test_one_gpu_name_table_answers_calibration_and_validation(name, gpu, cluster):
    from trainsim.specs.gpu_names import cluster_preset_for, gpu_preset_for
    assert gpu_preset_for(name) == gpu
    found = cluster_preset_for(name)
    assert (found[0] if found else None) == cluster


def test_gpu_name_table_names_existing_presets():
    from trainsim.specs.gpu_names import GPU_NAMES
    for g in GPU_NAMES:
        assert g.gpu in preset_names("gpus") and g.cluster in preset_names("clusters")
        load_cluster({"preset": g.cluster, **g.cluster_overrides})


@pytest.mark.parametrize("ref", ["mymodel.yaml", {"preset": "mymodel.yaml", "num_layers": 4}])
def test_a_model_file_is_read_beside_its_scenario(tmp_path, monkeypatch, ref):
    """A relative model file, plain or as the preset of overrides, is the one beside the scenario, not a file of the
    same name in the working directory."""
    import yaml

    from trainsim.specs.loaders import load_scenario_file
    (tmp_path / "sub").mkdir()
    (tmp_path / "cwd").mkdir()
    body = {"num_layers": 8, "hidden": 1024, "num_heads": 8, "ffn_hidden": 4096, "vocab_size": 32000}
    (tmp_path / "sub" / "mymodel.yaml").write_text(yaml.safe_dump({"name": "beside", **body}))
    (tmp_path / "cwd" / "mymodel.yaml").write_text(yaml.safe_dump({"name": "elsewhere", **body}))
    (tmp_path / "sub" / "s.yaml").write_text(yaml.safe_dump({"model": ref, "cluster": "dgx-h100", "gpus": 8}))
    monkeypatch.chdir(tmp_path / "cwd")
    raw = load_scenario_file(Path("..") / "sub" / "s.yaml")
    assert build_scenario({**raw, "training": {"seq_len": 1024, "global_batch": 8}}).model.name == "beside"


def test_an_embedding_projection_to_its_own_width_is_none():
    """OPT projects its word embeddings only when word_embed_proj_dim != hidden (transformers OPTDecoder): the same
    width is no projection, so no parameters are added (8.03 B stays 8.03 B for Llama 3 8B)."""
    plain = load_model("llama3-8b")
    same = load_model({"preset": "llama3-8b", "embed_proj_dim": plain.hidden})
    assert same.embed_proj_dim is None and same.total_params() == plain.total_params()
    # 2048 wide: embedding and output layer each lose V x (h - e), project_in / project_out add e x h each
    e, h, v = 2048, plain.hidden, plain.vocab_size
    narrow = load_model({"preset": "llama3-8b", "embed_proj_dim": e}).total_params()
    assert narrow == plain.total_params() - 2 * v * (h - e) + 2 * e * h


def test_a_cluster_file_builds_on_a_file_beside_it(tmp_path, monkeypatch):
    """A cluster file whose preset is another file reads that file beside itself, not in the working directory."""
    import yaml

    from trainsim.specs.loaders import load_scenario_file
    (tmp_path / "sub").mkdir()
    (tmp_path / "cwd").mkdir()
    (tmp_path / "sub" / "base.yaml").write_text(yaml.safe_dump({"preset": "dgx-h100", "name": "beside"}))
    (tmp_path / "sub" / "cl.yaml").write_text(yaml.safe_dump({"preset": "base.yaml", "gpus_per_node": 8}))
    (tmp_path / "sub" / "s.yaml").write_text(yaml.safe_dump({"model": "llama3-8b", "cluster": "cl.yaml", "gpus": 8}))
    monkeypatch.chdir(tmp_path / "cwd")
    raw = load_scenario_file(Path("..") / "sub" / "s.yaml")
    assert load_cluster(raw["cluster"]).scale_up.kind == "nvswitch"
    assert build_scenario({**raw, "training": {"seq_len": 1024, "global_batch": 8}}).num_gpus == 8
