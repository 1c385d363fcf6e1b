"""Rows of the common run schema (../shared/validation/README.md) become the scenario the row describes.

Truth: the schema's column meanings, the source's own statements (the arXiv id encodes year and month),
and the cluster presets' cited numbers (8 x HDR 200 Gb/s = 25 GB/s per NIC, NDR 400 Gb/s = 50 GB/s).
"""

from __future__ import annotations

import csv

import pytest

from trainsim.data import validation_path
from trainsim.specs import SpecError, load_cluster
from trainsim.validation import common_runs
from trainsim.validation.datasets import load_dataset

SC21_TITLE = ('Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", '
              'SC21 (arXiv:2104.04473)')
# Llama 3 405B on 16,384 H100s as the Llama 3 paper describes it (Table 4 layout; the step time is what
# 400 TFLOP/s per GPU means for 2,048 x 8,192 tokens at ~2.63e15 model FLOPs per token).
LLAMA_ROW = {
    "row_id": "l3_16k", "source_table": "Table 4", "record_type": "measured_throughput",
    "model_name": "Llama 3 405B", "layers": "126", "hidden": "16384", "heads": "128", "kv_heads": "8",
    "ffn_hidden": "53248", "vocab": "128256", "seq_len": "8192", "global_batch_seqs": "2048", "micro_batch": "1",
    "num_gpus": "16384", "gpu_type": "H100 80GB HBM3", "gpus_per_node": "8",
    "inter_node_link": "400 Gbps per GPU (RoCE)", "tp": "8", "pp": "16", "cp": "1", "ep": "", "vp_interleave": "",
    "sequence_parallel": "yes", "recompute": "none", "zero_or_sharding": "distributed optimizer",
    "pipeline_schedule": "interleaved 1F1B", "precision": "BF16", "step_time_s": "6.74", "tokens_per_s": "",
    "source_title": "The Llama 3 Herd of Models", "source_url": "https://arxiv.org/abs/2407.21783",
}


def test_source_year_from_arxiv_id_or_venue():
    assert common_runs.source_year({"source_title": SC21_TITLE}) == 2021
    assert common_runs.source_year({"source_url": "https://arxiv.org/abs/2407.21783"}) == 2024
    assert common_runs.source_year({"source_title": "MLSys 2023 (arXiv:2205.05198)"}) == 2022  # the id wins
    assert common_runs.source_year({"source_title": "Proceedings of SC22"}) == 2022
    assert common_runs.source_year({"source_title": "a blog post"}) is None


def test_cluster_follows_gpu_type_and_the_stated_nics():
    def mapped(row, gpus=8):
        return load_cluster(common_runs.cluster_mapping(row, gpus))

    h100 = mapped(LLAMA_ROW, 16384)
    assert h100.gpu.name.startswith("H100") and h100.scale_out.nic_bw_Bps == 50e9
    sc21 = mapped({"gpu_type": "A100-SXM4-80GB", "inter_node_link":
                   "8x Mellanox 200Gbps HDR InfiniBand HCAs per node; 3-level fat tree"}, 64)
    assert sc21.scale_out.nics_per_node == 8 and sc21.scale_out.nic_bw_Bps == 25e9
    assert sc21.scale_out.fabric == "fat-tree" and sc21.gpu.memory_bytes == 80 * 2**30
    assert mapped({"gpu_type": "A100 40GB"}).gpu.memory_bytes == 40 * 2**30
    assert mapped({"gpu_type": "H800"}).scale_up.bw_per_gpu_Bps == 200e9          # [h800_dsv3]
    assert mapped({"gpu_type": "B200", "gpus_per_node": "8"}).gpu.name.startswith("B200")
    with pytest.raises(SpecError, match="gpu_type"):
        common_runs.cluster_mapping({"gpu_type": "V100-SXM2-32GB"}, 8)
    with pytest.raises(SpecError, match="gpu_type"):
        common_runs.cluster_mapping({"gpu_type": ""}, 8)


def test_model_family_and_gqa():
    llama = common_runs.model_mapping(LLAMA_ROW)
    assert llama["num_kv_heads"] == 8 and llama["activation"] == "swiglu" and llama["norm"] == "rmsnorm"
    assert llama["position_embedding"] == "rope" and llama["bias"] is False and llama["ffn_hidden"] == 53248
    gpt = common_runs.model_mapping({"row_id": "g", "model_name": "GPT-3 175B", "layers": "96", "hidden": "12288",
                                     "heads": "96", "kv_heads": "96", "seq_len": "2048"})
    assert "num_kv_heads" not in gpt and "activation" not in gpt
    assert gpt["ffn_hidden"] == 4 * 12288 and gpt["vocab_size"] == 51200


@pytest.mark.parametrize("text, expected", [
    ("ZeRO-3 (DeepSpeed library integrated into Megatron codebase)", (3, False)),
    ("FULL_SHARD", (3, False)), ("FSDP", (3, False)), ("SHARD_GRAD_OP", (2, False)),
    ("distributed optimizer", (0, True)), ("ZeRO-1 (FSDP-style sharded optimizer)", (1, False)),
    ("none (plain DP all-reduce)", (0, False)), ("", (0, False)),
])
def test_zero_stage(text, expected):
    assert common_runs.zero_stage({"zero_or_sharding": text}) == expected


def test_framework_and_kernels_follow_the_sources_year():
    fw = common_runs.framework_for
    assert fw({}, 0, 2021) == "megatron-2021" and fw({}, 0, 2022) == "megatron-2022"
    assert fw({}, 0, 2024) == "megatron" and fw({}, 0, None) == "megatron"
    assert fw({"zero_or_sharding": "ZeRO-3 (DeepSpeed)"}, 3, 2021) == "deepspeed-2021"
    assert fw({"zero_or_sharding": "FULL_SHARD"}, 3, 2023) == "pytorch-fsdp"
    assert fw({"zero_or_sharding": "FSDP2"}, 3, 2024) == "torch"
    t = common_runs.scenario_mapping(LLAMA_ROW, 1, 2)["training"]
    assert t["flash_attention"] is True and t["dropout"] is False and t["sequence_parallel"] is True
    assert t["distributed_optimizer"] is True and t["schedule"] == "interleaved" and t["dtype"] == "bf16"


def test_step_time_from_printed_tokens_per_second():
    row = {**LLAMA_ROW, "step_time_s": "", "tokens_per_s": "2500000", "global_batch_tokens": ""}
    assert common_runs.published_step_time(row) == pytest.approx(2048 * 8192 / 2.5e6)
    row = {**row, "tokens_per_s": "", "tokens_per_s_per_gpu": "100"}
    assert common_runs.published_step_time(row) == pytest.approx(2048 * 8192 / (100 * 16384))


def load_runs(tmp_path, rows: list[dict]) -> dict:
    """Write ``rows`` as a common-run-schema CSV (the schema's columns, as megatron_sc21_table1.csv has them, plus
    any other a row names; absent cells empty) and load it: row_id -> Case."""
    with open(validation_path("megatron_sc21_table1.csv"), newline="") as f:
        header = next(csv.reader(f))
    cols = header + sorted({k for r in rows for k in r} - set(header))
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows([{c: r.get(c, "") for c in cols} for r in rows])
    return {c.row_id: c for c in load_dataset(str(path)).cases}


def test_a_user_csv_is_validated_with_each_rows_own_hardware(tmp_path):
    """An H100 Llama row, an unknown accelerator (skipped, with the reason) and SC21's 1T row [sc21_t1_10]."""
    with open(validation_path("megatron_sc21_table1.csv"), newline="") as f:
        sc21 = {r["row_id"]: r for r in csv.DictReader(f)}
    rows = [LLAMA_ROW, {**LLAMA_ROW, "row_id": "v100", "gpu_type": "V100-SXM2-32GB"}, sc21["sc21_t1_10"],
            # a stated dp that does not multiply out to the GPU count (the CP row as some copies print it)
            {**LLAMA_ROW, "row_id": "cp16", "cp": "16", "dp": "4", "seq_len": "131072", "global_batch_seqs": "128"}]
    cases = load_runs(tmp_path, rows)
    llama = cases["l3_16k"].scenario
    assert llama.cluster.gpu.name.startswith("H100") and llama.training.framework == "megatron"
    assert llama.model.num_kv_heads == 8 and llama.layout.vpp == 2  # 126 layers on 16 stages: uneven, 2 chunks
    assert "gpu_type" in cases["v100"].skip_reason
    assert "layout.dp" in cases["cp16"].skip_reason and "cp16" in cases["cp16"].label
    one_t = cases["sc21_t1_10"].scenario  # 1T: 128 layers, tp 8, pp 64 on 3,072 A100s (SC21, 2021)
    assert one_t.cluster.gpu.name.startswith("A100") and one_t.training.framework == "megatron-2021"
    assert one_t.training.dtype == "fp16" and one_t.training.flash_attention is False
    assert one_t.training.dropout is True and one_t.training.recompute == "full"
    assert one_t.cluster.scale_out.fabric == "fat-tree" and one_t.cluster.scale_out.nic_bw_Bps == 25e9
    assert (one_t.layout.tp, one_t.layout.pp, one_t.layout.vpp) == (8, 64, 2)  # 2 layers per stage: v = 2
    assert any("gpu_type" in n for n in load_dataset(str(tmp_path / "runs.csv")).notes)


def test_bad_cells_skip_the_row_with_the_field_named(tmp_path):
    """Nothing is silently replaced: a zero degree, an unknown dtype, an impossible GPU count, a non-positive step
    time each skip their row and say which field is wrong."""
    bad = {"tp0": {"tp": "0"}, "int4": {"precision": "int4"}, "gpus7": {"num_gpus": "7"},
           "vpneg": {"vp_interleave": "-3"}, "stepneg": {"step_time_s": "-5"}, "gpn0": {"gpus_per_node": "0"},
           "mb0": {"micro_batch": "0"}, "layers": {"layers": "abc"}}
    rows = [{**LLAMA_ROW, "row_id": k, **v} for k, v in bad.items()]
    why = {k: c.skip_reason for k, c in load_runs(tmp_path, rows).items()}
    assert all(why.values()), why
    assert "layout.tp" in why["tp0"] and "precision" in why["int4"] and "gpus" in why["gpus7"]
    # A negative cell is named by its column (reports/dataset_checks.py), before any scenario is built from it.
    assert "vp_interleave" in why["vpneg"] and "step_time_s" in why["stepneg"] and "gpus_per_node" in why["gpn0"]
    assert "micro_batch" in why["mb0"] and "layers" in why["layers"]


@pytest.mark.parametrize("text, want", [
    ("yes", True), ("Yes", True), (" TRUE ", True), ("yes (sdpa)", True), ("no", False), ("false", False),
    ("no (predates SP)", False), ("on", SpecError), ("off", SpecError), ("1", SpecError), ("0", SpecError),
    ("none", SpecError), ("", SpecError), (None, SpecError), ("yes please", SpecError), ("nope", SpecError),
])
def test_one_yes_no_vocabulary(text, want):
    """yes/no and true/false, with an optional remark in parentheses; anything else refused with the field named."""
    from trainsim.validation.cells import yes_no
    if want is SpecError:
        with pytest.raises(SpecError, match=r"^dropout: .* is neither yes nor no"):
            yes_no({"dropout": text}, "dropout")
    else:
        assert yes_no({"dropout": text}, "dropout") is want


def test_a_yes_no_cell_outside_the_vocabulary_skips_the_row_naming_it(tmp_path):
    rows = [{**LLAMA_ROW, "row_id": "on", "flash_attention": "on"}, {**LLAMA_ROW, "row_id": "sp", "sequence_parallel": "1"}]
    why = {k: c.skip_reason for k, c in load_runs(tmp_path, rows).items()}
    assert "flash_attention" in why["on"] and "neither yes nor no" in why["on"]
    assert "sequence_parallel" in why["sp"]


@pytest.mark.parametrize("text, vp, expected", [
    ("interleaved 1F1B", 2, "interleaved"), ("1F1B", 1, "1f1b"), ("GPipe", 1, "gpipe"),
    ("ZB-H1", 1, "zb"), ("DualPipe", 2, "dualpipev"), ("", 1, "1f1b"), ("non-interleaved 1F1B", 2, "1f1b"),
])
def test_schedule_text(text, vp, expected):
    assert common_runs.schedule({"pipeline_schedule": text}, vp) == expected


def _link(text, gpu="A100-SXM4-80GB"):
    k = load_cluster(common_runs.cluster_mapping({"gpu_type": gpu, "inter_node_link": text, "gpus_per_node": "8"}, 16))
    return k.scale_out.nics_per_node, k.scale_out.nic_bw_Bps


@pytest.mark.parametrize("text, nics, per_nic", [
    ("NDR 400", 8, 50e9),                                   # an A100 row on NDR: not the preset's HDR
    ("100 GB/s per GPU", 8, 100e9),                         # bytes, not bits
    ("3200 Gbps per node (400 Gbps per GPU)", 8, 50e9),     # the per-GPU statement wins
    ("2x 400 Gbps per GPU", 16, 50e9),
    ("400 Gbps EFA per node", 8, 6.25e9),                   # a node total split over one NIC per GPU
    ("8x400G", 8, 50e9), ("3.2 Tbps per node", 8, 50e9),
    ("4x HDR 200 Gb/s per node", 4, 25e9),
    ("eight 200G NICs per server", 8, 25e9),                # a spelled-out NIC count
    ("NDR, 400 Gbps per GPU (Quantum-2 switches with 64x400Gbps ports)", 8, 50e9),  # the switch's ports: not NICs
])
def test_inter_node_link_text(text, nics, per_nic):
    assert _link(text) == (nics, pytest.approx(per_nic))


@pytest.mark.parametrize("text", ["RoCE, 8 GPUs per node", "InfiniBand, 4 GPUs per node, rail-optimized",
                                  "Ethernet (2 GPUs per NIC)"])
def test_a_gpu_count_is_not_a_link_rate(text):
    """'8 GPUs' is no '8 G' rate: a link text that states no rate leaves the preset's NICs (None)."""
    assert common_runs.nics_from_text(text, 8) is None


@pytest.mark.parametrize("gpu", ["A100 40GB PCIe", "H100 PCIe", "H100 NVL", "GH200", "V100"])
def test_gpu_variants_without_a_preset_are_not_replaced(gpu):
    with pytest.raises(SpecError, match="gpu_type"):
        common_runs.cluster_mapping({"gpu_type": gpu}, 8)


@pytest.mark.parametrize("intra, ok", [
    ("PCIe Gen4, no NVLink", False), ("PCIe 4.0 x16", False), ("NVLink3 + NVSwitch (DGX A100)", True),
    ("NVSwitch; PCIe Gen4 to the NICs", True), ("", True),
])
def test_pcie_only_nodes_are_not_predicted_as_nvswitch(intra, ok):
    row = {"gpu_type": "A100-SXM4-80GB", "intra_node_link": intra}
    if ok:
        assert load_cluster(common_runs.cluster_mapping(row, 8)).scale_up.kind == "nvswitch"
    else:
        with pytest.raises(SpecError, match="intra_node_link"):
            common_runs.cluster_mapping(row, 8)


def test_gpu_names_as_tools_print_them():
    assert load_cluster(common_runs.cluster_mapping({"gpu_type": "A100-SXM4-40GB"}, 8)).gpu.memory_bytes == 40 * 2**30
    assert load_cluster(common_runs.cluster_mapping({"gpu_type": "A100 (400W)"}, 8)).gpu.memory_bytes == 80 * 2**30
    assert load_cluster(common_runs.cluster_mapping({"gpu_type": "NVIDIA H100 SXM5"}, 8)).gpu.name.startswith("H100")


@pytest.mark.parametrize("text, expected", [
    ("yes", "full"), ("AC", "full"), ("uniform", "full"), ("full activation recomputation", "full"),
    ("selective", "selective"), ("without activation checkpointing", "none"), ("activation checkpointing: none", "none"),
    ("not recomputed", "none"), ("none (8K sequences trained without checkpointing)", "none"), ("", "none"),
])
def test_recompute_text(text, expected):
    assert common_runs.recompute({"recompute": text}) == expected


@pytest.mark.parametrize("text, expected", [
    ("selective (torchtitan op-level SAC policy)", ["op_sac"]), ("selective (per-op SAC)", ["op_sac"]),
    ("selective", None), ("full", None), ("none (op-level SAC off)", None),
])
def test_torchtitan_per_op_sac_text_selects_op_sac(text, expected):
    """torchtitan's selective_ac_option="op" policy, as its tables name it, is recompute_modules op_sac."""
    assert common_runs.recompute_modules({"recompute": text}) == expected
    row = {**LLAMA_ROW, "tp": "1", "pp": "1", "num_gpus": "64", "global_batch_seqs": "64", "recompute": text,
           "zero_or_sharding": "FSDP2 (fully sharded, 1D)", "source_title": "torchtitan docs/performance.md (2024)",
           "source_url": ""}
    training = common_runs.scenario_mapping(row, 1, 1)["training"]
    assert training["framework"] == "torch" and training.get("recompute_modules") == expected


def test_unreadable_cells_name_their_column():
    with pytest.raises(SpecError, match="recompute"):
        common_runs.recompute({"recompute": "sometimes"})
    for key, text in (("micro_batch", "1-4"), ("tp", "eight")):
        with pytest.raises(SpecError, match=key):
            common_runs.whole({key: text}, key)
    assert common_runs.whole({"tp": "8 (within node)"}, "tp") == 8
    assert common_runs.whole({"pp": "not stated"}, "pp") is None
    with pytest.raises(SpecError, match="zero_or_sharding"):
        common_runs.zero_stage({"zero_or_sharding": "HSDP"})


@pytest.mark.parametrize("text, zero, fw2021, fw2024", [
    ("DeepSpeed ZeRO-3 (params, grads, optimizer states sharded)", 3, "deepspeed-2021", "deepspeed"),
    ("FSDP NO_SHARD", 0, "megatron-2021", "megatron"), ("reshard_after_forward=False", 2, "pytorch-fsdp", "torch"),
    ("ZeRO stage 2", 2, "deepspeed-2021", "deepspeed"),
])
def test_sharding_text_and_framework(text, zero, fw2021, fw2024):
    row = {"zero_or_sharding": text}
    assert common_runs.zero_stage(row)[0] == zero
    assert common_runs.framework_for(row, zero, 2021) == fw2021 and common_runs.framework_for(row, zero, 2024) == fw2024


def test_schedule_negations_and_chunks():
    depth = common_runs.interleave_depth
    assert depth({"pipeline_schedule": "non-interleaved 1F1B"}, 16, 8) == 1
    assert depth({"pipeline_schedule": "1F1B (no interleaving)"}, 16, 8) == 1
    assert depth({"pipeline_schedule": "DualPipe"}, 16, 8) == 2
    assert depth({"pipeline_schedule": "interleaved 1F1B"}, 16, 8) is None
    assert common_runs.source_year({"source_title": "a 2023 blog post", "read_from": "read 2026-03-01"}) == 2023


def test_blind_interleave_for_uneven_stages():
    """Unknown depth, layers not divisible by pp: the smallest v > 1 whose pp*v chunks split the layers evenly or
    with the two end chunks one layer short (the spec's rule); 1 when none does."""
    from trainsim.validation.common_run_cases import _blind_interleave
    assert _blind_interleave(126, 16) == 2      # 128 = 16 x 2 x 4
    assert _blind_interleave(50, 4) == 1        # neither 50 nor 52 splits into 4 v chunks for v in 2..12
    assert _blind_interleave(62, 8) == 2        # 64 = 8 x 2 x 4


@pytest.mark.parametrize("text, expected", [
    ("", None), ("ring", "p2p"), ("allgather (Sec. 3.3.2)", "allgather"), ("all-gather", "allgather"),
    ("torch context_parallel all-gather rotation", "torch_allgather"), ("Ulysses", "a2a"), ("all-to-all", "a2a"),
])
def test_cp_comm_column(text, expected):
    """An empty cell leaves cp_comm to the framework's default (specs.training.default_cp_comm)."""
    assert common_runs.cp_comm({"cp_comm": text}) == expected
    row = {**LLAMA_ROW, "cp": "2", "cp_comm": text, "num_gpus": "32768"}
    assert common_runs.scenario_mapping(row, 1, 2)["training"].get("cp_comm") == expected


def test_precision_names_float8_as_fp8():
    for text in ("float8 (torchao)", "FP8 E4M3 hybrid", "MXFP8", "bf16 + Float8 all-gather"):
        assert common_runs.precision({"precision": text}) == "fp8"


def test_nemotron4_is_not_llama_style_and_96gb_h100_has_no_preset():
    """Nemotron-4's MLP is an ungated squared ReLU (1.5x fewer MLP FLOPs than SwiGLU at the same width); the
    Grand Teton H100 has 96 GB HBM2e at 500 W, which the 80 GB H100 preset is not."""
    row = {"model_name": "Nemotron-4 340B", "layers": "96", "hidden": "18432", "heads": "96", "kv_heads": "8",
           "ffn_hidden": "73728", "vocab": "256000", "seq_len": "4096"}
    assert common_runs.model_mapping(row).get("activation", "gelu") == "gelu"
    assert common_runs.model_mapping({**row, "model_name": "Llama-3.1-Nemotron-70B"})["activation"] == "swiglu"
    with pytest.raises(SpecError, match="gpu_type"):
        common_runs.cluster_mapping({"gpu_type": "H100 SXM with 96GB HBM2e (Grand Teton), default 500W"}, 8)


def test_unstated_recompute_and_interleaving_follow_the_unknowns_rules(tmp_path):
    """No recompute stated: the lightest that fits; no interleaving stated: Megatron interleaves, DeepSpeed's
    pipeline engine does not (BLOOM-176B's Megatron-DeepSpeed run was skipped for an interleaving it never had)."""
    base = {"record_type": "measured_step_time", "model_name": "BLOOM-176B", "layers": "70", "hidden": "14336",
            "heads": "112", "vocab": "250880", "seq_len": "2048", "global_batch_seqs": "2048", "micro_batch": "2",
            "num_gpus": "384", "gpu_type": "A100-SXM4-80GB", "tp": "4", "pp": "12", "dp": "8",
            "zero_or_sharding": "ZeRO-1 (DeepSpeed)", "precision": "bf16", "step_time_s": "105",
            "source_title": "bigscience BLOOM training chronicles 2022"}
    rows = [dict(base, row_id="bloom"),
            dict(base, row_id="bloom_mlm", zero_or_sharding="distributed optimizer", layers="72",
                 global_batch_seqs="2304"),
            dict(base, row_id="bloom_mlm_odd_m", zero_or_sharding="distributed optimizer", layers="72"),
            dict(base, row_id="small", model_name="GPT 1.3B", layers="24", hidden="2048", heads="16", tp="1",
                 pp="1", dp="8", num_gpus="8", global_batch_seqs="64", zero_or_sharding="")]
    cases = load_runs(tmp_path, rows)
    assert cases["bloom"].scenario is not None and cases["bloom"].scenario.layout.vpp == 1
    assert cases["bloom"].scenario.training.framework.startswith("deepspeed")
    assert cases["bloom_mlm"].scenario.layout.vpp == 2                # Megatron: smallest v > 1 dividing 6 layers
    assert cases["bloom_mlm_odd_m"].scenario.layout.vpp == 1          # 128 micro-batches on 12 stages: no interleaving
    assert cases["small"].scenario.training.recompute == "none"       # a 1.3B model fits without recomputation
    assert cases["bloom"].scenario.training.recompute in ("selective", "full")  # 176B on 384 GPUs does not


def test_step_time_from_printed_tflops_on_a_known_basis(tmp_path):
    """A row printing only TFLOP/s per GPU: step = the step's FLOPs on that basis / (GPUs x TFLOP/s); an unknown
    basis is skipped with the reason."""
    base = {"record_type": "measured_throughput", "model_name": "GPT 13B", "params_b": "13", "layers": "40",
            "hidden": "5120", "heads": "40", "seq_len": "2048", "global_batch_seqs": "1024", "num_gpus": "64",
            "gpu_type": "A100-SXM4-80GB", "tp": "2", "precision": "bf16", "tflops_per_gpu": "150",
            "source_title": "some 2023 report"}
    rows = [dict(base, row_id="palm", tflops_basis="PaLM model FLOPs (6N + 12LHQT)"),
            dict(base, row_id="unknown", tflops_basis="vendor formula")]
    cases = load_runs(tmp_path, rows)
    flops = 1024 * 2048 * (6 * 13e9 + 12 * 40 * 5120 * 2048)
    assert cases["palm"].published == pytest.approx(flops / (150e12 * 64), rel=1e-12)
    assert cases["palm"].scenario is not None
    assert "tflops_basis" in cases["unknown"].skip_reason


def test_explicit_recipe_columns_replace_the_year_rules(tmp_path):
    """A 2024 row (year rules: megatron, FlashAttention, no dropout, dtype from 'BF16', the preset's
    rail-optimized fabric) that states the Korthikanti et al. 2022 recipe in the explicit columns is built with
    that recipe; an empty explicit cell keeps the rule; an unreadable yes/no cell skips the row naming it."""
    explicit = {"framework": "megatron-2022", "dtype": "fp16", "grad_dtype_bytes": "4", "flash_attention": "no",
                "dropout": "yes", "fabric": "fat-tree", "label": "my label", "category": "my group",
                "precision": "mixed precision (int4 text not read when dtype is stated)"}
    rows = [{**LLAMA_ROW, "row_id": "explicit", **explicit}, {**LLAMA_ROW, "row_id": "rules", "framework": ""},
            {**LLAMA_ROW, "row_id": "badflag", "flash_attention": "maybe"},
            {**LLAMA_ROW, "row_id": "fa1", "flash_attention_version": "1"}]
    cases = load_runs(tmp_path, rows)
    t, c = cases["explicit"].scenario.training, cases["explicit"].scenario.cluster
    assert (t.framework, t.dtype, t.grad_dtype_bytes, t.flash_attention, t.dropout) == \
        ("megatron-2022", "fp16", 4, False, True)
    assert cases["fa1"].scenario.training.flash_attention_version == 1
    assert c.scale_out.fabric == "fat-tree"
    assert (cases["explicit"].label, cases["explicit"].category) == ("my label", "my group")
    r = cases["rules"].scenario
    assert (r.training.framework, r.training.dtype, r.training.grad_dtype_bytes) == ("megatron", "bf16", 0)
    assert r.training.flash_attention is True and r.training.dropout is False
    assert r.training.flash_attention_version == 2
    assert r.cluster.scale_out.fabric == load_cluster("dgx-h100").scale_out.fabric
    assert "flash_attention" in cases["badflag"].skip_reason


def test_korthikanti_rows_state_their_recipe_in_the_csv():
    """korthikanti_2022.csv carries the recipe its notes state (bf16 with fp32 gradients, no FlashAttention,
    dropout, megatron-2022, fat tree) and the rule for each value the paper leaves open."""
    with open(validation_path("korthikanti_2022.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 9 and all(r["assumptions"] for r in rows)
    for c in load_dataset("korthikanti").cases:
        t = c.scenario.training
        assert (t.framework, t.dtype, t.grad_dtype_bytes, t.flash_attention, t.dropout) == \
            ("megatron-2022", "bf16", 4, False, True)
        assert c.scenario.cluster.scale_out.fabric == "fat-tree"


def test_skip_reason_group_and_overlap_p2p_columns(tmp_path):
    """The zero-bubble rows [zero_bubble_2024.csv zb_1.5B_m24_*, Qi et al. 2024 Tables 3-4]: blocking pipeline
    sends (overlap_p2p no), the rows of one model and m in one group, and ZB-2p skipped with its stated reason."""
    with open(validation_path("zero_bubble_2024.csv"), newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["row_id"].startswith("zb_1.5B_m24_")]
    cases = load_runs(tmp_path, rows)
    one_f = cases["zb_1.5B_m24_1F1B"]
    assert one_f.scenario.training.overlap_p2p is False and one_f.group == "GPT-3-like 1.5B|m=24"
    assert cases["zb_1.5B_m24_1F1B-I"].scenario.training.schedule == "interleaved"
    assert cases["zb_1.5B_m24_1F1B-I"].scenario.layout.vpp == 3  # (22 + 2) / 8: one layer per chunk
    assert cases["zb_1.5B_m24_ZB-2p"].skip_reason == "schedule ZB-2p is not modelled"
    user = {**rows[0], "overlap_p2p": "", "skip_reason": "", "group": ""}  # empty: the defaults, as before
    plain = load_runs(tmp_path, [user])["zb_1.5B_m24_1F1B"]
    assert plain.scenario.training.overlap_p2p is None and plain.group is None and plain.skip_reason is None


@pytest.mark.parametrize("text, want", [("4096", 4096), ("4,096", 4096), ("4096.0", 4096), (" 4096 ", 4096),
                                        ("4096 (packed)", 4096), ("8 (GQA)", 8), ("", None), ("not stated", None)])
def test_every_whole_number_column_reads_one_way(text, want):
    """One reader for every whole-number cell: separators, a '.0' and a remark in parentheses are the number
    (seq_len and kv_heads alike), an empty or 'not stated' cell is not given."""
    from trainsim.validation.common_runs import whole

    assert whole({"seq_len": text}, "seq_len") == want
    assert whole({"kv_heads": text}, "kv_heads") == want


@pytest.mark.parametrize("text", ["2048.5", "8K", "abc", "4096 tokens"])
def test_a_whole_number_column_refuses_what_is_no_whole_number(text):
    from trainsim.validation.common_runs import whole

    with pytest.raises(SpecError, match="seq_len"):
        whole({"seq_len": text}, "seq_len")


# The free-text readers of the common run schema, by column (a schedule read without interleaving).
CELL_READERS = {"recompute": common_runs.recompute, "precision": common_runs.precision,
                "zero_or_sharding": common_runs.zero_stage,
                "pipeline_schedule": lambda r: common_runs.schedule(r, 1)}


@pytest.mark.parametrize("column, text", [
    ("recompute", "full (not selective)"), ("recompute", "non-selective (full)"),
    ("recompute", "selective (full for the first stage)"), ("recompute", "full (without checkpointing)"),
    ("precision", "fp16 (bf16 unsupported on V100)"), ("precision", "fp16 or bf16"), ("precision", "not fp8"),
    ("zero_or_sharding", "none (ZeRO-3 not used)"), ("zero_or_sharding", "plain DDP (no FSDP)"),
    ("pipeline_schedule", "PipeDream-2BW"), ("pipeline_schedule", "PipeDream (asynchronous)"),
    ("zero_or_sharding", "ZeRO-1 then ZeRO-3"), ("pipeline_schedule", "GPipe (not 1F1B)"),
])
def test_a_negated_or_doubled_value_is_refused_naming_the_column(column, text):
    """A cell that negates a value or names two is never read as one of them: reading a keyword alone gives the
    opposite of what it says ('full (not selective)' as selective, 'fp16 (bf16 unsupported)' as bf16, 'no FSDP'
    as ZeRO-3)."""
    reader = CELL_READERS[column]
    with pytest.raises(SpecError, match=f"^{column}: ") as e:
        reader({column: text})
    assert repr(text) in str(e.value)  # the value as written


@pytest.mark.parametrize("column, text, expected", [
    ("recompute", "none (8K sequences trained without activation checkpointing)", "none"),
    ("recompute", "none (launcher yaml: activations_checkpoint_granularity null)", "none"),
    ("precision", "bf16 (mixed precision: bf16 parameters, fp32 reduce-scatter)", "bf16"),
    ("precision", "fp16 (fp16 parameters, fp32 master copy)", "fp16"),
    ("precision", "float8 linears (torchao) + bf16", "fp8"),
    ("precision", "bf16 (default mixed precision, not stated in table)", "bf16"),
    ("zero_or_sharding", "FSDP: gradients sharded, parameters not resharded after forward (ZeRO-2)", (2, False)),
    ("zero_or_sharding", "none (plain DP all-reduce, not overlapped with backward)", (0, False)),
    ("zero_or_sharding", "ZeRO-1 (BF16_Optimizer, ZERO_STAGE=0 in config)", (1, False)),
    ("pipeline_schedule", "DeepSpeed pipeline engine 1F1B (non-interleaved)", "1f1b"),
    ("pipeline_schedule", "none (no pipeline)", "1f1b"),
    ("pipeline_schedule", "PipeDream-Flush (1F1B)", "1f1b"),  # 1F1B itself (Narayanan et al., SC21 Sec. 2.2.1)
    ("pipeline_schedule", "PipeDream-Flush", "1f1b"),
    ("recompute", "activation checkpointing: off", "none"),
    ("recompute", "activation checkpointing: disabled", "none"),
    ("recompute", "recompute = False", "none"),
    ("recompute", "AC off", "none"),
    ("recompute", "activation recomputation disabled", "none"),
])
def test_remarks_that_agree_with_the_value_read_as_before(column, text, expected):
    """Negations that do not touch a value keyword, fp32 as mixed precision's master dtype and bf16 beside fp8
    (cells of this kind are in the bundled tables) keep their reading."""
    reader = CELL_READERS[column]
    assert reader({column: text}) == expected


def test_unknown_values_and_stated_zeros_skip_the_row_naming_the_column(tmp_path):
    """A schedule trainsim has no engine for, a link rate it cannot place, a stated 0 size and a gradient width
    that does not exist each skip their row with the column and the value named -- none is replaced by a
    default (1F1B, the preset's NICs, seq 2048 / vocab 51,200 / ffn 4h, the framework's gradient dtype)."""
    bad = {"bpipe": {"pipeline_schedule": "BPipe"}, "chimera": {"pipeline_schedule": "Chimera bidirectional"},
           "sched": {"pipeline_schedule": "round robin"}, "link": {"inter_node_link": "100 Gbps Ethernet"},
           "seq0": {"seq_len": "0"}, "vocab0": {"vocab": "0"}, "ffn0": {"ffn_hidden": "0"},
           "gdb3": {"grad_dtype_bytes": "3"}, "gdb0": {"grad_dtype_bytes": "0"},
           "fullnotsel": {"recompute": "full (not selective)"}}
    rows = [{**LLAMA_ROW, "row_id": k, **v} for k, v in bad.items()] + [LLAMA_ROW]
    cases = load_runs(tmp_path, rows)
    assert cases["l3_16k"].skip_reason is None
    why = {k: cases[k].skip_reason or "" for k in bad}
    for k, (column, value) in {"bpipe": ("pipeline_schedule", "BPipe"), "chimera": ("pipeline_schedule", "Chimera"),
                               "sched": ("pipeline_schedule", "round robin"),
                               "link": ("inter_node_link", "100 Gbps Ethernet"), "seq0": ("seq_len", "'0'"),
                               "vocab0": ("vocab", "'0'"), "ffn0": ("ffn_hidden", "'0'"),
                               "gdb3": ("grad_dtype_bytes", "3"), "gdb0": ("grad_dtype_bytes", "'0'"),
                               "fullnotsel": ("recompute", "full (not selective)")}.items():
        assert column in why[k] and value in why[k], (k, why[k])


def test_an_empty_size_cell_takes_the_default():
    row = {"row_id": "g", "model_name": "GPT", "layers": "24", "hidden": "2048", "heads": "16", "ffn_hidden": "",
           "vocab": "not stated", "seq_len": ""}
    m = common_runs.model_mapping(row)
    assert (m["ffn_hidden"], m["vocab_size"], m["max_seq_len"]) == (4 * 2048, 51200, 2048)


def test_a_link_rate_inside_a_remark_is_placed_by_the_words_after_it():
    """'400Gb/s (Mellanox CX-7) per GPU': the remark does not cut the rate off its 'per GPU'."""
    assert _link("400Gb/s (Mellanox CX-7) per GPU, RDMA fabric") == (8, pytest.approx(50e9))


@pytest.mark.parametrize("line, cells", [("r1,1,024,4096", 4), ("r1,8", 2)])
def test_a_row_with_more_or_fewer_cells_than_the_header_is_refused(tmp_path, line, cells):
    """An unquoted 1,024 shifts every later column into the wrong one (a row cut short drops its last columns):
    the file is refused naming the row, not read with its cells under other names."""
    from trainsim.specs import SpecError
    from trainsim.specs.safe_read import read_csv_rows
    f = tmp_path / "runs.csv"
    f.write_text(f"row_id,num_gpus,seq_len\n{line}\n")
    with pytest.raises(SpecError) as e:
        read_csv_rows(f, "dataset")
    assert f"row 2 has {cells} cells, the header 3" in e.value.reason


def test_a_zero_bubble_row_without_its_throughput_stays_listed_as_skipped(tmp_path):
    """A zero-bubble-shaped row whose samples_per_gpu_per_s cannot be read stays in the dataset with a skip reason
    naming the column (it vanished from both the rows and the skipped list)."""
    import csv

    from trainsim.data import validation_path
    from trainsim.validation.zero_bubble import load_zero_bubble
    src = validation_path("zero_bubble_2024.csv")
    with open(src, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    rows = [r for r in rows if not r.get("skip_reason")][:2]
    rows[1]["samples_per_gpu_per_s"] = "abc"
    out = tmp_path / "zb.csv"
    with open(out, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    cases = {c.row_id: c for c in load_zero_bubble(out, name="zb").cases}
    assert len(cases) == 2 and cases[rows[1]["row_id"]].skip_reason == "samples_per_gpu_per_s: not a positive number"
    assert cases[rows[0]["row_id"]].skip_reason is None


@pytest.mark.parametrize("cells, column", [
    ({"step_time_s": "", "tokens_per_s": "297214", "global_batch_tokens": "1048576"}, "global_batch_tokens"),
    ({"step_time_s": "3.528", "tokens_per_s": "1", "global_batch_tokens": ""}, "step_time_s"),
    ({"step_time_s": "", "tokens_per_s": "1007", "tokens_per_s_per_gpu": "1007"}, "tokens_per_s"),
])
def test_throughput_columns_that_contradict_each_other_skip_the_row(tmp_path, cells, column):
    """Redundant throughput columns that disagree beyond rounding (2 %) were read one way and the contradiction
    reported as model error: the row is skipped naming the column."""
    row = {**LLAMA_ROW, "row_id": "bad", **cells}
    ok = {**LLAMA_ROW, "row_id": "ok", "step_time_s": "", "global_batch_tokens": "",
          "tokens_per_s": f"{2048 * 8192 / 6.7:.0f}", "tokens_per_s_per_gpu": f"{2048 * 8192 / 6.7 / 16384:.2f}"}
    cases = load_runs(tmp_path, [row, ok])
    assert cases["ok"].skip_reason is None
    assert cases["bad"].skip_reason and cases["bad"].skip_reason.startswith(f"{column}: "), cases["bad"].skip_reason


def test_an_overlong_number_is_named_by_its_length():
    """A 5,000-digit cell overflows to inf: the skip reason names the column and the cell's length (the cell itself,
    printed whole, left the reason without its value on screen)."""
    from trainsim.validation.dataset_checks import row_range_errors
    why = row_range_errors([{"row_id": "r", "layers": "4" * 5000}])["r"]
    assert why == "layers: must be a finite number >= 0, got a number of 5000 characters (444444444444...)"
