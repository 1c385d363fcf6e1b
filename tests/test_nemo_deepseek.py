"""DeepSeek-V3 and Kimi K2 rows of the bundled nemo dataset (Megatron-Bridge performance tables).

What is checked: every DeepSeekV3 / Kimi_K2 row is predicted or skipped for a named reason; the pipeline layouts of
the Megatron-Bridge recipes parse to the transformer layers per virtual stage read off them by hand; the MTP choice
follows each row's label; the dataset-wide rules (recompute, optimizer, overlap) hold for every such row; the CLI
prints them. The MoE EP all-to-all overlap rule (nemo_ep_overlap_ranges(): moe_a2a_overlap of each row's
Megatron-Bridge config) is checked on rows read by hand from the configs, and every row it switches on resolves. The
recompute rule (nemo_recompute_ranges(): recompute_modules of each row's config) and the expert-tensor-parallel rule
(nemo_expert_tp_by_model(): the etp cell, else the config's expert_tensor_parallel_size, else tp) are checked the
same way, and the rows that
fold their expert groups over TP ranks resolve. Only two rows run through the engine (fast); the CLI check uses a
stand-in predictor.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass

import pytest
from external_tables import NEMO, table_path

from trainsim.cli.main import main
from trainsim.validation import validate as V
from trainsim.validation.datasets import load_dataset
from trainsim.validation.nemo_recipes import (
    nemo_ep_overlap,
    nemo_ep_overlap_ranges,
    nemo_ep_overlap_undated,
    nemo_expert_tp,
    nemo_expert_tp_by_model,
    nemo_mtp_default,
    nemo_mtp_layers,
    nemo_pipeline_layouts,
    nemo_precision_class,
    nemo_recompute_modules,
    nemo_recompute_ranges,
    nemo_release,
    nemo_stage_layers,
    parse_pipeline_layout,
)

MLA_MODELS = ("DeepSeekV3", "Kimi_K2")


def _csv_rows() -> dict[str, dict[str, str]]:
    with open(table_path("nemo_megatron_bridge_perf.csv"), newline="") as f:
        return {r["row_id"]: r for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def nemo():
    table_path("nemo_megatron_bridge_perf.csv")  # skips where the unbundled table is absent
    return load_dataset("nemo")


@pytest.fixture(scope="module")
def mla_cases(nemo):
    rows = _csv_rows()
    ids = {rid for rid, r in rows.items() if r["model"].split("(")[0].strip() in MLA_MODELS}
    return {c.row_id: c for c in nemo.cases if c.row_id in ids}


# --- layouts -------------------------------------------------------------------------------------------------

def test_layout_strings_parse_to_the_stages_read_by_hand():
    # GB300 pp2 vp8 (DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V1): E + 4 layers, 14 stages of 4, then 1 layer + MTP + loss
    layers, mtp = parse_pipeline_layout("Et*4|(t*4|)*14tmL")
    assert layers == (4,) * 15 + (1,) and mtp == 1 and sum(layers) == 61
    # H100 pp8 vp4: E + 1 layer, 30 stages of 2, a last stage with MTP + loss and no transformer layer
    layers, mtp = parse_pipeline_layout("Et|(tt|)*30mL")
    assert layers == (1,) + (2,) * 30 + (0,) and len(layers) == 32 and mtp == 1 and sum(layers) == 61
    # recipe (8,1): [E + 8t] + [8t]*6 + [5t + mtp + loss]
    layers, mtp = parse_pipeline_layout("Et*8|(t*8|)*6t*5mL")
    assert layers == (8, 8, 8, 8, 8, 8, 8, 5) and mtp == 1 and sum(layers) == 61
    # Kimi K2 (4,4), no MTP; commas and spaces are only separators
    assert parse_pipeline_layout("Et*4|(t*4|)*14tL") == ((4,) * 15 + (1,), 0)
    assert parse_pipeline_layout("E t*4|(t*4|)*14,t,L") == ((4,) * 15 + (1,), 0)


@pytest.mark.parametrize("bad", ["t*4|Et*4|L", "Et|(tt|*3L", "Et|tL|t", "Et|mt|L", "Et|tx|L"])
def test_malformed_layouts_are_rejected(bad):
    with pytest.raises(ValueError):
        parse_pipeline_layout(bad)


def test_every_recipe_layout_has_pp_times_vp_stages_and_61_layers():
    for model, table in nemo_pipeline_layouts().items():
        for (pp, vp), layout in table.items():
            layers, mtp = parse_pipeline_layout(layout)
            assert len(layers) == pp * vp and sum(layers) == 61, (model, pp, vp)
            assert mtp == nemo_mtp_default()[model], (model, pp, vp)
            # without MTP the transformer layers per stage are the recipe's own (its last stage loses the 'm')
            no_mtp, why = nemo_stage_layers(model, pp, vp, 0)
            assert no_mtp == layers and "m" not in why


def test_a_pp_vp_without_recipe_layout_has_no_split():
    layers, why = nemo_stage_layers("DeepSeekV3", 2, 4, 0)
    assert layers is None and "pp=2 vp=4" in why and "pipeline_model_parallel_layout" in why


# --- rows ------------------------------------------------------------------------------------------------------

def test_every_deepseek_and_kimi_row_is_predicted_or_skipped_for_a_named_reason(mla_cases):
    assert len(mla_cases) == 36
    skipped = {rid: c.skip_reason for rid, c in mla_cases.items() if c.skip_reason}
    # 25.11 GB300 pp2 vp4 (w/o MTP, BF16 and FP8-MX): no layout for (2, 4) in the recipes
    assert set(skipped) == {"mb_237", "mb_238"}
    for why in skipped.values():
        assert "pp=2 vp=4" in why and "61 layers over 8 virtual stages" in why
    for rid, c in mla_cases.items():
        if rid in skipped:
            continue
        sc = c.scenario
        assert sc is not None, rid
        assert len(sc.layout.stage_layers) == sc.layout.pp * sc.layout.vpp and sum(sc.layout.stage_layers) == 61
        assert sc.model.is_mla and sc.model.shared_expert_ffn == 2048
    assert sum(1 for c in mla_cases.values() if c.skip_reason is None) == 34


def test_rows_take_the_layout_of_their_pp_vp(mla_cases):
    four = (4,) * 15 + (1,)
    expect = {
        "mb_1": four,                                  # GB300 pp2 vp8
        "mb_2": four,                                  # GB200 pp4 vp4
        "mb_91": four,                                 # B200 pp8 vp2
        "mb_137": four,                                # B200 pp16
        "mb_43": (8,) * 7 + (5,),                      # B300 pp8 (vp n/a)
        "mb_276": (1,) + (2,) * 30 + (0,),             # H100 tp2 pp8 vp4, "Et|(tt|)*30mL"
        "mb_246": (1,) + (2,) * 30 + (0,),             # GB200 pp8 vp4 w/o MTP, "Et|(tt|)*30L"
        "mb_53": four,                                 # Kimi K2 GB300 pp4 vp4, "Et*4|(t*4|)*14tL"
    }
    for rid, layers in expect.items():
        assert mla_cases[rid].scenario.layout.stage_layers == layers, rid


def test_mtp_follows_the_row_label(mla_cases):
    assert nemo_mtp_layers("DeepSeekV3 (w/o MTP)") == 0
    assert nemo_mtp_layers("DeepSeekV3 (w/ MTP)") == 1
    assert nemo_mtp_layers("DeepSeekV3 (tokendrop)") == 1 and nemo_mtp_layers("DeepSeekV3 (dropless)") == 1
    assert nemo_mtp_layers("DeepSeekV3") == 1 and nemo_mtp_layers("Kimi_K2") == 0
    mtp = {rid: c.scenario.model.mtp_layers for rid, c in mla_cases.items() if c.scenario}
    assert mtp["mb_245"] == mtp["mb_246"] == 0            # (w/o MTP)
    assert mtp["mb_252"] == 1                             # (w/ MTP)
    assert mtp["mb_265"] == mtp["mb_270"] == mtp["mb_276"] == 1   # tokendrop / dropless: the recipe's MTP
    assert mtp["mb_1"] == mtp["mb_218"] == 1              # unlabelled: the recipe's MTP
    assert mtp["mb_53"] == mtp["mb_200"] == 0             # Kimi K2 has no MTP
    assert "(w/o MTP)" in mla_cases["mb_246"].label and "(tokendrop)" in mla_cases["mb_265"].label


def test_one_rule_for_every_mla_row(mla_cases):
    for rid, c in mla_cases.items():
        if c.scenario is None:
            continue
        t = c.scenario.training
        row = _csv_rows()[rid]
        modules = nemo_recompute_modules(row["model"].split("(")[0].strip(), row["system"], row["precision"],
                                         row["nemo_container"])
        assert modules is not None, rid
        if modules:
            assert t.recompute == "selective" and t.recompute_modules == modules, rid
        else:
            assert t.recompute == "none" and t.recompute_modules is None, rid
        assert not t.tp_comm_overlap and c.scenario.layout.etp == 1, rid
        assert t.distributed_optimizer and t.zero == 0, rid
        if c.label.startswith("Kimi_K2"):   # the recipe's dist_muon; its state bytes follow from the parameters
            assert t.optimizer == "muon" and t.optimizer_bytes_per_param == 12, rid
        else:                               # precision-aware Adam: fp32 main + bf16 m, v
            assert t.optimizer == "adam" and t.optimizer_bytes_per_param == 8, rid
        assert t.sequence_parallel == (c.scenario.layout.tp > 1), rid
        assert t.dtype == ("bf16" if "BF16" in c.label else "fp8"), rid
        # secondary metric: the row's own TFLOP/s / tokens/s ratio
        f = c.secondary_fns["model_tflops_per_gpu"]
        assert f(c.published) == pytest.approx(c.secondary["model_tflops_per_gpu"]), rid
    kimi = mla_cases["mb_53"].scenario.model
    assert (kimi.num_experts, kimi.top_k, kimi.first_dense_layers, kimi.num_heads) == (384, 8, 1, 64)
    assert kimi.total_params() / 1e12 == pytest.approx(1.03, abs=0.01)


def test_tokendrop_rows_are_predicted_as_the_dropless_run(mla_cases):
    """mb_270 (25.09, tokendrop) and mb_252 (25.11, w/ MTP): same B200 pp16 ep8 GBS 2048 run, same scenario but for
    the fp8 recipe each row's precision cell prints (25.09 states none: tensorwise; 25.11 FP8-MX: mxfp8)."""
    a, b = mla_cases["mb_270"].scenario, mla_cases["mb_252"].scenario
    assert (a.training.fp8_recipe, b.training.fp8_recipe) == ("tensorwise", "mxfp8")
    same = {"name": "x", "training": a.training.model_copy(update={"fp8_recipe": "mxfp8"})}
    assert a.model_copy(update=same) == b.model_copy(update={"name": "x"})


def test_notes_document_the_choices(nemo):
    text = " ".join(nemo.notes)
    for needle in ("Et*4|(t*4|)*14tmL", "Et|(tt|)*30mL", "w/o MTP", "mla_up_proj", "selective", "HybridEP",
                   "DeepEP", "CUDA graphs", "moe_permute_fusion", "tokendrop", "Muon"):
        assert needle in text, needle
    assert "closest mode" not in text


def test_one_deepseek_row_through_the_engine(mla_cases):
    """mb_2: GB200 pp4 vp4 ep64 MXFP8, 4912 tok/s/GPU published (26.08). Fits 192 GB; moe_a2a_overlap on (the
    GB200 MXFP8 config of 26.06 on), so less of the EP all-to-all is exposed than with the overlap off (warm-up and
    cool-down passes stay exposed)."""
    from trainsim.simulator.predict import predict
    c = mla_cases["mb_2"]
    assert c.scenario.training.ep_comm_overlap
    p = predict(c.scenario)
    off = predict(c.scenario.model_copy(update={"training": c.scenario.training.model_copy(
        update={"ep_comm_overlap": False})}))
    tok = p.tokens_per_s / c.scenario.num_gpus
    assert p.fits and 0 < p.exposed_comm_s["ep"] < off.exposed_comm_s["ep"]
    assert p.tokens_per_s > off.tokens_per_s
    assert 0.5 * c.published < tok < 1.5 * c.published


# --- MoE EP all-to-all overlap (Megatron-Bridge moe_a2a_overlap -> training.ep_comm_overlap) -----------------------

MOE_MODELS = ("DeepSeekV3", "Kimi_K2", "Qwen3_30B_a3B", "Qwen3_235B_a22B", "GPT OSS 120B", "Nemotron_3_Nano",
              "Nemotron_3_5_Lightning", "Nemotron_3_Super")
# Models whose every row has its config's recompute_modules in nemo_recompute_modules.csv (() = none).
CONFIG_RECOMPUTE_MODELS = (*MLA_MODELS, "Nemotron_3_Nano", "Nemotron_3_5_Lightning")


@pytest.fixture(scope="module")
def moe_cases(nemo):
    rows = _csv_rows()
    return {c.row_id: (c, rows[c.row_id]) for c in nemo.cases
            if rows[c.row_id]["model"].split("(")[0].strip() in MOE_MODELS}


def test_releases_sort_as_containers():
    assert nemo_release("25.09") < nemo_release("25.11") < nemo_release("26.02") < nemo_release("26.02.01")
    assert nemo_release("26.04.01") < nemo_release("26.06") < nemo_release("26.06.01") < nemo_release("26.08")


@pytest.mark.parametrize("rid, on", [
    # DeepSeek-V3 H100 dropless 25.09 (tp2 pp8 vp4 ep64): scripts/performance/run_script.py @27dfb3df passes
    # a2a_1f1b = (gpu == "h100") -> utils/helpers.py moe_a2a_1f1b_overrides (overlap_moe_expert_parallel_comm).
    ("mb_276", True),
    # DeepSeek-V3 25.09 GB200 / B200 tokendrop: the same run_script gives a2a_1f1b False off H100.
    ("mb_265", False), ("mb_270", False),
    # DeepSeek-V3 GB300 MXFP8 GBS 15360 (26.06): DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_GBS15360 inherits
    # GB300_FP8_MX_V2 (moe_a2a_overlap=True; deepseek_workload_base_configs.py @04264182), PR #4330 measured it on
    # nemo:26.06.rc7. 26.04 GB300 (mbs 2): GB300_FP8_MX_V1 = GB300_V1, moe_a2a_overlap=False (@f0e2c37e).
    ("mb_41", True), ("mb_40", True), ("mb_1", True), ("mb_134", False), ("mb_88", False),
    # DeepSeek-V3 GB200 MXFP8: 26.06 on (PR #4226), 26.04.01 off (GB200_V1 alias, @f0e2c37e).
    ("mb_42", True), ("mb_89", False),
    # DeepSeek-V3 B200 MXFP8: 26.04.01 pp8 vp2 ep32 = B200_FP8_MX_V2 (moe_a2a_overlap=True); 26.04 pp16 ep8 off.
    ("mb_91", True), ("mb_137", False),
    # DeepSeek-V3 B300 MXFP8 26.06 pp8 mbs 2: B300_V2 before PR #4458 (2026-06-23) turned it on with vp 2: off.
    ("mb_43", False),
    # Kimi K2 GB300 MXFP8 mbs 2 (26.02.01 .. 26.06): KIMI_K2_PRETRAIN_CONFIG_GB300 moe_a2a_overlap=False
    # (kimi_workload_base_configs.py @7a6f3ba9); the overlap came with r0.6.0 / 26.08 (PR #5168).
    ("mb_53", False), ("mb_107", False), ("mb_164", False), ("mb_200", False),
    # Qwen3 235B B300 26.02 pp8 vp4 ep8: moe_a2a_overlap=True (qwen3_workload_base_configs.py @f29a269f); PR #2669
    # (2026-03-05) disabled VP and the overlap -> 26.04 B300 pp8 (no vp) off (@01b2977e).
    ("mb_231", True), ("mb_194", True), ("mb_150", False),
    # Qwen3 235B B200 25.11 pp8 vp2: on (configs/qwen3/workload_base_configs.py @767255d2; PR #1760 disabled it
    # after 25.11); 25.09 (configs/qwen3/qwen3_235b_a22b_llm_pretrain.py @27dfb3df: no overlap) and 26.02 off.
    ("mb_255", True), ("mb_272", False), ("mb_232", False),
    # Qwen3 30B GB300 MXFP8: 26.08 on (PR #4249 for 26.06, PR #4606), 26.04.01 off (@01b2977e: TE-scoped graphs).
    ("mb_7", True), ("mb_97", False),
    # Qwen3 30B H100 26.06 pp1 ep16: QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1 moe_a2a_overlap=False.
    ("mb_50", False),
])
def test_ep_overlap_rule_for_rows_read_by_hand(moe_cases, rid, on):
    c, row = moe_cases[rid]
    assert nemo_ep_overlap(row["model"].split("(")[0].strip(), row["system"], row["precision"],
                           row["nemo_container"]) is on, rid
    assert c.scenario is not None and c.scenario.training.ep_comm_overlap is on, rid
    assert ("a2a-ov" in c.label) is on, rid


def test_undated_rows_keep_the_all_to_all_exposed(moe_cases):
    """Rows whose release's config could not be pinned down stay off (the behaviour before the rule)."""
    seen = set()
    for rid, (c, row) in moe_cases.items():
        key = (row["model"].split("(")[0].strip(), row["system"], row["precision"], row["nemo_container"])
        if key in nemo_ep_overlap_undated():
            seen.add(key)
            assert c.scenario is not None and not c.scenario.training.ep_comm_overlap, rid
            assert not nemo_ep_overlap(key[0], key[1], key[2], key[3]), rid
    assert seen == set(nemo_ep_overlap_undated())     # every listed case is a row of the table
    assert {rid for rid, (c, row) in moe_cases.items() if (row["model"].split("(")[0].strip(), row["system"],
            row["precision"], row["nemo_container"]) in nemo_ep_overlap_undated()} == {
        "mb_49", "mb_191", "mb_228", "mb_260", "mb_246"}


def test_every_overlapped_row_resolves(moe_cases):
    """The flag is set by the one table and only where trainsim accepts it: every row it switches on resolves to a
    Scenario (no SpecError) with ep > 1 and pp == 1 or vpp > 1 (the Qwen3 235B H100 rows, skipped while ep had to
    divide dp*cp, fold their expert groups over the TP ranks with etp 1)."""
    on_rows, skipped = set(), set()
    for rid, (c, row) in moe_cases.items():
        flagged = nemo_ep_overlap(row["model"].split("(")[0].strip(), row["system"], row["precision"],
                                  row["nemo_container"])
        if c.scenario is None:
            assert "ep_comm_overlap" not in (c.skip_reason or ""), rid
            if flagged:
                skipped.add(rid)
            continue
        sc = c.scenario
        assert sc.training.ep_comm_overlap == flagged, rid
        if flagged:
            on_rows.add(rid)
            assert sc.layout.ep > 1 and (sc.layout.pp == 1 or sc.layout.vpp > 1), rid
            assert sc.training.schedule in ("1f1b", "interleaved"), rid
    assert len(on_rows) == 35
    assert skipped == {"mb_21", "mb_22"}  # GPT OSS 120B 26.06.01: a footnoted kernel regression (test_nemo_gpt_oss)
    assert {"mb_106", "mb_151", "mb_195", "mb_233", "mb_261"} <= on_rows
    # every entry of the rule matches at least one row of the table
    for m, s, pc, lo, hi in nemo_ep_overlap_ranges():
        assert any(row["model"].split("(")[0].strip() == m and row["system"] == s
                   and nemo_release(lo) <= nemo_release(row["nemo_container"]) <= nemo_release(hi)
                   for _, row in moe_cases.values()), (m, s, lo, hi)


def test_notes_describe_the_ep_overlap_rule(nemo):
    text = " ".join(nemo.notes)
    assert "trainsim exposes the EP all-to-all" not in text
    for needle in ("moe_a2a_overlap", "ep_comm_overlap", "nemo_ep_overlap_ranges()", "nemo_ep_overlap_undated()",
                   "#4330",
                   "#5168", "#1760", "#2669", "pp > 1 and no model chunks"):
        assert needle in text, needle


# --- selective-recompute modules (nemo_recompute_ranges()) and expert tensor parallelism (nemo_expert_tp_by_model())

def _rule(row):
    return nemo_recompute_modules(row["model"].split("(")[0].strip(), row["system"], row["precision"],
                                  row["nemo_container"])


def test_precision_classes():
    assert nemo_precision_class("MXFP8") == nemo_precision_class("FP8-MX") == "mx"
    assert nemo_precision_class("BF16") == "bf16"
    for p in ("FP8", "FP8-CS", "not stated in table", ""):
        assert nemo_precision_class(p) == "other", p


@pytest.mark.parametrize("rid, modules", [
    # 25.09, scripts/performance/configs/deepseek/deepseek_v3_llm_pretrain.py (NVIDIA-NeMo/Megatron-Bridge
    # @27dfb3df3c2cba55e54ec67016061048d4ce03c1): deepseek_v3_h100_{bf16,fp8}_config recompute_modules =
    # ["mla_up_proj", "mlp"]; deepseek_v3_gb200_fp8_config with use_tokendrop ["mla_up_proj"]; deepseek_v3_b200_*
    # ["mla_up_proj"].
    ("mb_276", ("mla_up_proj", "mlp")), ("mb_265", ("mla_up_proj",)), ("mb_270", ("mla_up_proj",)),
    # 25.11, configs/deepseek/workload_base_configs.py @d19cb73c80ae84b17e296b66e85058b129319510:
    # DEEPSEEK_V3_GB200_BASE_CONFIG (pp4 vp4 ep64, GBS 4096) ["mla_up_proj"], DEEPSEEK_V3_B200_BASE_CONFIG (pp16 ep8,
    # GBS 2048) ["mla_up_proj"], DEEPSEEK_V3_GB300_BASE_CONFIG (pp2 vp4 ep32, every precision) [].
    ("mb_245", ("mla_up_proj",)), ("mb_252", ("mla_up_proj",)), ("mb_237", ()), ("mb_238", ()),
    # 25.11 GB200 FP8-MX pp8 vp4 ep32 (no Megatron-Bridge config): NVIDIA/Megatron-LM
    # docs/discussions/deepseek-v3-gb200-optimization/deepseek-v3-gb200-reproduce-guide.md @ab23fd2f437c5582cdeb3164a0834902daea1f4b:
    # "--recompute-modules moe_act mlp".
    ("mb_246", ("moe_act", "mlp")),
    # 26.02, configs/deepseek/deepseek_workload_base_configs.py @f0e2c37e3f82c57f9d0e95aa8ae98b3470a91107: FP8_MX
    # aliases GB300_V2 (mbs 2) ["mla_up_proj"], GB200_V2 ["mla_up_proj"], B300_V2 / B200_V2 (pp16) ["mla_up_proj"].
    ("mb_215", ("mla_up_proj",)), ("mb_216", ("mla_up_proj",)), ("mb_217", ("mla_up_proj",)),
    ("mb_218", ("mla_up_proj",)),
    # 26.04, nanz-nv/Megatron-Bridge @e6015aa87982289629d2c5431e62aaaf84ce6286 (B300/B200 MXFP8 pp16, the 26.04
    # layouts): GB200_V1 ["mla_up_proj"].
    ("mb_135", ("mla_up_proj",)), ("mb_137", ("mla_up_proj",)),
    # 26.04.01, radixark/Megatron-Bridge @d063066b4d66853c4c9308caf321a9c5b8836915 (B300_V2 pp8 mbs 2, B200_FP8_MX_V2
    # pp8 vp2 ep32: the 26.04.01 layouts): GB200_V1 ["mlp"] (PR #3031), GB300_V2 ["mla_up_proj"], B300_V2
    # ["mla_up_proj"], B200_FP8_MX_V2 ["mla_up_proj", "mlp"].
    ("mb_89", ("mlp",)), ("mb_88", ("mla_up_proj",)), ("mb_90", ("mla_up_proj",)), ("mb_91", ("mla_up_proj", "mlp")),
    # 26.06, nvegesna-netizen/Megatron-Bridge @8871aeaef3369fc26f6f626622fdf03542cc1057: GB300_FP8_MX_V1/V2 (mbs 1,
    # full-iteration CUDA graph) recompute_modules=[], GB200_FP8_MX_V1/V2 ["mla_up_proj"], B300_V2 (pp8 mbs 2)
    # ["mla_up_proj"].
    ("mb_40", ()), ("mb_41", ()), ("mb_42", ("mla_up_proj",)), ("mb_43", ("mla_up_proj",)),
    # 26.08, src/megatron/bridge/perf_recipes/deepseek/gb300/deepseek_v3.py @000853c89a2b110fb80dc9db5774a34bc69e2c84
    # deepseek_v3_pretrain_256gpu_gb300_fp8mx_config recompute_modules = []; gb200/deepseek_v3.py
    # @0ed32959f7a9154e0a587a9efe6e70827a422f25 ..._gb200_fp8mx_config ["mla_up_proj"].
    ("mb_1", ()), ("mb_2", ("mla_up_proj",)),
    # Kimi K2 GB300 (pp4 vp4 ep64, GBS 4096, mbs 2): configs/kimi/kimi_workload_base_configs.py
    # KIMI_K2_PRETRAIN_CONFIG_GB300 ["mla_up_proj"] (radixark @d063066b, nvegesna-netizen
    # @b8002e52ea1b5e0450ffb7328844acc356eb00b5).
    ("mb_53", ("mla_up_proj",)), ("mb_200", ("mla_up_proj",)),
    # Nemotron 3 Nano: H100 FP8 (ep 8, GBS 1024, mbs 1) ["moe", "layernorm"] before Megatron-Bridge PR #2662
    # (e3e340b3, 2026-03-06), ["moe", "layernorm", "core_attn", "moe_act"] after it
    # (scripts/performance/configs/nemotronh/nemotron_3_workload_base_configs.py @b7b4e11b); Blackwell MXFP8 none
    # (BASE_NEMOTRON_3_NANO_CONFIG sets no recompute_modules; perf_recipes/nemotronh/common.py @067f987d sets
    # recompute_granularity None).
    ("mb_199", ("moe", "layernorm")), ("mb_57", ("moe", "layernorm", "core_attn", "moe_act")), ("mb_11", ()),
    ("mb_111", ()),
])
def test_recompute_rule_for_rows_read_by_hand(moe_cases, rid, modules):
    c, row = moe_cases[rid]
    assert _rule(row) == modules, rid
    if c.scenario is None:                          # the 25.11 GB300 pp2 vp4 rows: no pipeline layout
        assert rid in ("mb_237", "mb_238") and "pp=2 vp=4" in c.skip_reason
        return
    t = c.scenario.training
    if modules:
        assert t.recompute == "selective" and t.recompute_modules == modules, rid
        assert t.selective_modules == frozenset(modules) and f"rc:{'+'.join(modules)}" in c.label, rid
    else:
        assert t.recompute == "none" and t.recompute_modules is None and "rc:" not in c.label, rid


def test_recompute_table_covers_the_mla_rows_once_and_leaves_qwen_at_none(moe_cases):
    matched = {}
    for rid, (c, row) in moe_cases.items():
        name = row["model"].split("(")[0].strip()
        hits = [e for e in nemo_recompute_ranges()
                if e[0] == name and e[1] == row["system"] and e[2] in ("any", nemo_precision_class(row["precision"]))
                and nemo_release(e[3]) <= nemo_release(row["nemo_container"]) <= nemo_release(e[4])]
        assert len(hits) <= 1, (rid, hits)          # entries do not overlap
        super_fp8 = name == "Nemotron_3_Super" and nemo_precision_class(row["precision"]) == "mx"
        if name == "Nemotron_3_Super" and not super_fp8:  # NVFP4: refused for the dtype of a hybrid stack first
            assert not hits and "nvfp4 with hybrid_pattern" in c.skip_reason, rid
            continue
        if name in CONFIG_RECOMPUTE_MODELS or super_fp8 or (name == "GPT OSS 120B" and c.scenario is not None):
            assert len(hits) == 1, rid              # every MLA, Nemotron 3 and predicted GPT-OSS row: its config
            matched.setdefault(hits[0], []).append(rid)
            assert "recompute" not in (c.skip_reason or ""), rid
        elif name == "GPT OSS 120B":                # skipped: a footnoted regression or a layout matching no config
            assert c.skip_reason and ("footnote" in c.skip_reason or "matches no" in c.skip_reason), rid
        else:                                       # Qwen3: recompute_granularity=None in every config read
            assert not hits and c.scenario is not None, rid
            assert c.scenario.training.recompute == "none", rid
    assert set(matched) == set(nemo_recompute_ranges())      # every entry is some row's
    for e in nemo_recompute_ranges():
        assert nemo_release(e[3]) <= nemo_release(e[4]) and len(set(e[5])) == len(e[5]), e


def test_expert_tp_rule():
    assert nemo_expert_tp_by_model() == {"DeepSeekV3": 1, "Kimi_K2": 1, "Qwen3_30B_a3B": 1, "Qwen3_235B_a22B": 1,
                                         "GPT OSS 120B": 1, "Nemotron_3_Nano": 1, "Nemotron_3_5_Lightning": 1,
                                         "Nemotron_3_Super": 1}
    assert nemo_expert_tp("Qwen3_235B_a22B", None, 2) == 1      # the config's expert_tensor_parallel_size
    assert nemo_expert_tp("Qwen3_235B_a22B", 2, 2) == 2         # a printed etp cell wins
    assert nemo_expert_tp("SomeOtherMoE", None, 4) == 4         # Megatron-Core's default: tp


def test_every_moe_row_takes_the_configs_expert_tp(nemo, moe_cases):
    for rid, (c, row) in moe_cases.items():
        assert not (row.get("etp") or "").strip(), rid          # no MoE row prints an etp cell
        if c.scenario is None:
            continue
        lay = c.scenario.layout
        assert lay.etp == 1 and c.scenario.expert_tp == 1, rid
        assert ("etp1" in c.label) == (lay.tp > 1), rid
    dense = [c for c in nemo.cases if c.scenario is not None and not c.scenario.model.is_moe]
    assert dense and all(c.scenario.layout.etp is None for c in dense)


# Rows skipped while ep had to divide dp*cp: their configs set expert_tensor_parallel_size=1, so the EP group folds
# over the two TP ranks. Qwen3 235B H100 tp2 pp8 vp4 ep32 on 256 GPUs (dp 16): 25.09 qwen3_235b_a22b_llm_pretrain.py
# @27dfb3df (mb_278), 25.11 configs/qwen3/workload_base_configs.py @767255d2f5c7c96b619a873a8ad17a3086f3e5c5
# (mb_261), 26.x configs/qwen/qwen3_workload_base_configs.py @f29a269f8728ff9075f88a226f92e554196a7e41 H100_V2
# (mb_233, mb_195, mb_151, mb_106); Qwen3 235B GB200 tp2 pp1 ep64 on 64 GPUs (dp 32), 25.09: NVIDIA/NeMo
# scripts/performance/recommended_model_configs/model_configs_gb200.csv @06c0e70057f272483a1a33c6bb5a9baf7be48cdc,
# etp_size 1 (mb_267).
FOLDED = {"mb_106", "mb_151", "mb_195", "mb_233", "mb_261", "mb_278", "mb_267"}


def test_rows_folded_over_tp_resolve(nemo, moe_cases):
    for rid in FOLDED:
        c, row = moe_cases[rid]
        assert c.skip_reason is None and c.scenario is not None, (rid, c.skip_reason)
        sc = c.scenario
        lay = sc.layout
        assert (lay.tp, lay.etp) == (2, 1) and row["model"].startswith("Qwen3_235B_a22B"), rid
        assert (sc.dp * lay.cp) % lay.ep != 0, rid                       # not representable without folding
        assert (sc.dp * lay.cp * lay.tp // lay.etp) % lay.ep == 0, rid
        assert sc.training.recompute == "none", rid
    # no MoE row is skipped for its expert-parallel size any more
    assert not [c.row_id for c in nemo.cases if "layout.ep" in (c.skip_reason or "")]


def test_a_folded_row_through_the_engine(moe_cases):
    """mb_278: Qwen3 235B on 256 H100, tp2 pp8 vp4 ep32, etp 1 (25.09), 1204 tok/s/GPU published."""
    from trainsim.simulator.predict import predict
    c, _ = moe_cases["mb_278"]
    p = predict(c.scenario)
    tok = p.tokens_per_s / c.scenario.num_gpus
    assert p.fits and 0.5 * c.published < tok < 1.5 * c.published


def test_notes_describe_the_recompute_and_expert_tp_rules(nemo):
    text = " ".join(nemo.notes)
    for needle in ("nemo_recompute_ranges()", "nemo_expert_tp_by_model()", "recompute_modules",
                   "expert_tensor_parallel_size",
                   "#3031", "#3983", "#4226", "moe_act + mlp", "dp*cp*tp/etp", "recompute_granularity=None"):
        assert needle in text, needle
    assert "ep | dp*cp" not in text and "those rows are skipped" not in text


# --- CLI -------------------------------------------------------------------------------------------------------

@dataclass
class _Fake:
    step_time_s: float
    tokens_per_s: float
    fits: bool = True


@NEMO
def test_validate_nemo_json_lists_the_rows(monkeypatch, capsys):
    def standin(sc):  # 1000 tokens/s per GPU for every row: plumbing only
        tok = 1000.0 * sc.num_gpus
        return _Fake(sc.tokens_per_step / tok, tok)
    monkeypatch.setattr(V, "default_predict_fn", lambda **kw: standin)
    assert main(["validate", "--dataset", "nemo", "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    rows = {r["row_id"]: r for r in j["rows"]}
    skipped = {r["row_id"]: r for r in j["skipped"]}
    assert {"mb_1", "mb_53", "mb_276", "mb_246"} <= set(rows)
    assert {"mb_237", "mb_238"} <= set(skipped)
    assert rows["mb_1"]["predicted"] == pytest.approx(1000.0)


def test_kimi_k2_muon_over_adamw_step_time_matches_nvidias_measurement(mla_cases):
    """NVIDIA's Megatron-Bridge 26.02 measurement of Kimi K2 on 256 GB300 (MXFP8, PP4 DP64 EP64; "Advancing
    Emerging Optimizers for Accelerated LLM Training with NVIDIA Megatron", developer.nvidia.com, Table 1): AdamW
    1,051 model TFLOP/s per GPU, Muon 1,029 model (+ 51 Newton-Schulz), so Muon's step is 1051 / 1029 = 2.1 %
    longer. The recipe's AdamW (``_apply_kimi_k2_optimizer("adam")``): distributed fused Adam with fp32 main, m, v
    (12 B). The nemo row of that layout (26.02.01, [mb_200]) against its AdamW twin: within 1.5 points."""
    scn = mla_cases["mb_200"].scenario
    assert scn.training.optimizer == "muon" and scn.layout.pp == 4 and scn.dp == 64 and scn.layout.ep == 64
    adamw = type(scn).model_validate(scn.model_copy(update={"training": scn.training.model_copy(
        update={"optimizer": "adam"})}).model_dump())
    pred = V.default_predict_fn(fast=True)
    ratio = pred(scn).step_time_s / pred(adamw).step_time_s
    assert abs(ratio - 1051 / 1029) <= 0.015, ratio
