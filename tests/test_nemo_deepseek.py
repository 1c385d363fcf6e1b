"""DeepSeek-V3 and Kimi K2 rows of the bundled nemo dataset (Megatron-Bridge performance tables).

What is checked: every DeepSeekV3 / Kimi_K2 row is predicted or skipped for a named reason; the pipeline layouts of
the Megatron-Bridge recipes parse to the transformer layers per virtual stage read off them by hand; the MTP choice
follows each row's label; the dataset-wide rules (recompute, optimizer, overlap) hold for every such row; the CLI
prints them. Only one row runs through the engine (fast); the CLI check uses a stand-in predictor.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass

import pytest

from trainsim.data import validation_path
from trainsim.reports import validate as V
from trainsim.reports.cli import main
from trainsim.reports.datasets import (
    NEMO_MTP_DEFAULT,
    NEMO_PIPELINE_LAYOUTS,
    load_dataset,
    nemo_mtp_layers,
    nemo_stage_layers,
    parse_pipeline_layout,
)

MLA_MODELS = ("DeepSeekV3", "Kimi_K2")


def _csv_rows() -> dict[str, dict[str, str]]:
    with open(validation_path("nemo_megatron_bridge_perf.csv"), newline="") as f:
        return {r["row_id"]: r for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def nemo():
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
    for model, table in NEMO_PIPELINE_LAYOUTS.items():
        for (pp, vp), layout in table.items():
            layers, mtp = parse_pipeline_layout(layout)
            assert len(layers) == pp * vp and sum(layers) == 61, (model, pp, vp)
            assert mtp == NEMO_MTP_DEFAULT[model], (model, pp, vp)
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
        assert t.recompute == "selective" and not t.tp_comm_overlap, rid
        assert t.optimizer_bytes_per_param == 8 and t.distributed_optimizer and t.zero == 0, rid
        assert t.sequence_parallel == (c.scenario.layout.tp > 1), rid
        assert t.dtype == ("bf16" if "BF16" in c.label else "fp8"), rid
        # secondary metric: the row's own TFLOP/s / tokens/s ratio
        f = c.secondary_fns["model_tflops_per_gpu"]
        assert f(c.published) == pytest.approx(c.secondary["model_tflops_per_gpu"]), rid
    kimi = mla_cases["mb_53"].scenario.model
    assert (kimi.num_experts, kimi.top_k, kimi.first_dense_layers, kimi.num_heads) == (384, 8, 1, 64)
    assert kimi.total_params() / 1e12 == pytest.approx(1.03, abs=0.01)


def test_tokendrop_rows_are_predicted_as_the_dropless_run(mla_cases):
    """mb_270 (25.09, tokendrop) and mb_252 (25.11, w/ MTP): same B200 pp16 ep8 GBS 2048 run, same scenario."""
    a, b = mla_cases["mb_270"].scenario, mla_cases["mb_252"].scenario
    assert a.model_copy(update={"name": "x"}) == b.model_copy(update={"name": "x"})


def test_notes_document_the_choices(nemo):
    text = " ".join(nemo.notes)
    for needle in ("Et*4|(t*4|)*14tmL", "Et|(tt|)*30mL", "w/o MTP", "mla_up_proj", "selective", "HybridEP",
                   "DeepEP", "CUDA graphs", "moe_permute_fusion", "tokendrop", "Muon"):
        assert needle in text, needle


def test_one_deepseek_row_through_the_engine(mla_cases):
    """mb_2: GB200 pp4 vp4 ep64 MXFP8, 4912 tok/s/GPU published (26.08). Fits 192 GB; EP all-to-all exposed."""
    from trainsim.simulator.predict import predict
    c = mla_cases["mb_2"]
    p = predict(c.scenario)
    tok = p.tokens_per_s / c.scenario.num_gpus
    assert p.fits and p.exposed_comm_s["ep"] > 0
    assert 0.5 * c.published < tok < 1.5 * c.published


# --- CLI -------------------------------------------------------------------------------------------------------

@dataclass
class _Fake:
    step_time_s: float
    tokens_per_s: float
    fits: bool = True


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
