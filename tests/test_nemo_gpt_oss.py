"""GPT OSS 120B rows of the nemo dataset (Megatron-Bridge performance tables): each is predicted with the settings
its release's performance config sets, or skipped for a named reason.

The configs were read by hand (NVIDIA-NeMo/Megatron-Bridge, scripts/performance/configs/gpt_oss/
gpt_oss_workload_base_configs.py at v0.3.0 / r0.3.0, v0.4.0 / r0.4.0, v0.5.0 / r0.5.0, and
src/megatron/bridge/perf_recipes/gpt_oss/<system>/gpt_oss.py at v0.6.0): GB200, B200 and H100 BF16 recompute
["layernorm", "moe_act"]; GB300 and B300 none; GB200 MXFP8 recompute_modules=[]; moe_a2a_overlap on for GB200 BF16
V2 from v0.4.0 and for the GB300 / GB200 MXFP8 V2 configs. One row runs through the engine.
"""

from __future__ import annotations

import csv

import pytest
from external_tables import table_path

from trainsim.validation.datasets import load_dataset
from trainsim.validation.nemo import _nemo_case

GPT_OSS = "GPT OSS 120B"


def _rows() -> dict[str, dict[str, str]]:
    with open(table_path("nemo_megatron_bridge_perf.csv"), newline="") as f:
        return {r["row_id"]: r for r in csv.DictReader(f) if r["model"].startswith(GPT_OSS)}


@pytest.fixture(scope="module")
def cases():
    ids = set(_rows())  # skips where the unbundled table is absent
    return {c.row_id: c for c in load_dataset("nemo").cases if c.row_id in ids}


def test_every_row_is_predicted_or_skipped_for_a_named_reason(cases):
    assert len(cases) == 31
    skipped = {rid: c.skip_reason for rid, c in cases.items() if c.skip_reason}
    assert set(skipped) == {"mb_21", "mb_22", "mb_239", "mb_247", "mb_253", "mb_259"}
    for rid in ("mb_21", "mb_22"):  # 26.06.01 MXFP8: the footnoted grouped-MLP kernel regression
        assert "cudnn-frontend issue 256" in skipped[rid]
    for rid in ("mb_239", "mb_247", "mb_253", "mb_259"):  # 25.11: printed runs that match no config
        assert "matches no Megatron-Bridge GPT-OSS 120B config" in skipped[rid]
    for rid, c in cases.items():
        if rid not in skipped:
            m = c.scenario.model
            assert (m.name, m.attn_sinks, m.router_bias, m.sliding_window, m.global_every) == (
                "gpt-oss-120b", True, True, 128, 2), rid
            assert c.scenario.layout.etp == 1 and c.scenario.training.flash_attention, rid


@pytest.mark.parametrize("rid, modules, overlap, fuser", [
    ("mb_92", (), False, False),                        # GB300 BF16 26.04.01: GB300_BF16_V2, TE graphs, no recompute
    ("mb_93", ("layernorm", "moe_act"), True, False),   # GB200 BF16 26.04.01: GB200_BF16_V2 (v0.4.0: moe_a2a_overlap)
    ("mb_183", ("layernorm", "moe_act"), False, False),  # GB200 BF16 26.02.01: r0.3.0's V2 only raises GBS
    ("mb_94", (), False, False),                        # B300 BF16 26.04.01 ep8
    ("mb_95", ("layernorm", "moe_act"), False, False),  # B200 BF16 26.04.01 ep8
    ("mb_222", ("layernorm", "moe_act"), False, False),  # B200 BF16 26.02 ep64 (v0.3.0's V2)
    ("mb_96", ("layernorm", "moe_act"), False, False),  # H100 BF16 26.04.01 pp4 ep8 mbs1
    ("mb_5", (), True, True),     # GB300 MXFP8 26.08 ep16: full-iteration graph, EP overlap, TE op fuser (v0.6.0)
    ("mb_44", (), True, True),    # GB300 MXFP8 26.06: cutedsl_fused_grouped_mlp -> use_transformer_engine_op_fuser
    ("mb_6", (), True, True),     # GB200 MXFP8 26.08 ep64: recompute_modules = []
    ("mb_46", (), False, False),  # B300 MXFP8 26.06: B300_FP8_MX_V2 = B300_BF16_V2 (no op fuser)
])
def test_rows_take_their_configs_settings(cases, rid, modules, overlap, fuser):
    c = cases[rid]
    t = c.scenario.training
    assert (t.recompute_modules or ()) == modules and t.recompute == ("selective" if modules else "none"), rid
    assert t.ep_comm_overlap is overlap and ("a2a-ov" in c.label) is overlap, rid
    assert t.fused_grouped_mlp is fuser, rid
    assert t.dtype == ("fp8" if "MXFP8" in c.label else "bf16") and t.grad_dtype == "bf16", rid


def test_a_row_without_a_recompute_entry_is_skipped():
    """A GPT OSS run on a system and release no config covers (GB300 BF16 in 25.09) has an unknown recompute."""
    row = {**next(iter(_rows().values())), "row_id": "synthetic", "nemo_container": "25.09", "system": "DGX-GB300",
           "precision": "BF16", "gbs": "1280", "mbs": "4", "seq_len": "4096", "ep": "64", "pp": "1", "tp": "1",
           "tokens_per_s_per_gpu": "19000", "model_tflops_per_gpu": "520"}
    case = _nemo_case(row)
    assert case.scenario is None and "recompute is unknown" in case.skip_reason


def test_one_row_through_the_engine(cases):
    """mb_186: H100 BF16 pp4 ep8 mbs1 (26.02.01), 5984 tok/s/GPU published. Its four pipeline stages hold 9 blocks
    each, alternately 5 local + 4 global and 4 local + 5 global: the chunks are costed with their own blocks."""
    from trainsim.simulator.block import _global_layers_in
    from trainsim.simulator.predict import predict
    from trainsim.simulator.step_context import _step_context
    c = cases["mb_186"]
    sc = c.scenario
    assert sc.stage_layers == (9, 9, 9, 9)
    assert [_global_layers_in(sc, vs) for vs in range(4)] == [4, 5, 4, 5]
    local, full = _step_context(sc, None).local_global  # the MoE model's own local and global blocks
    assert local.times.fwd_s < full.times.fwd_s and local.params == full.params
    p = predict(sc)
    assert p.fits and p.tokens_per_s > 0


@pytest.mark.parametrize("rid, dispatcher", [
    ("mb_92", "alltoall"),   # GB300 BF16 26.04.01 ep64: the recipe's moe_token_dispatcher_type "alltoall"
    ("mb_93", "alltoall"),   # GB200 BF16 26.04.01: r0.4.0's GB200_BF16_V2 sets no flex backend
    ("mb_221", "alltoall"),  # B300 BF16 26.02 ep64: the V1 config (no flex backend)
    ("mb_94", "flex"),       # B300 BF16 26.04.01 ep8: B300_BF16_V2 moe_flex_dispatcher_backend="hybridep"
    ("mb_185", "flex"),      # B200 BF16 26.02.01 ep8: r0.3.0's B200_BF16_V2 hybridep
    ("mb_141", "alltoall"),  # B200 BF16 26.04 ep8: r0.4.0's B200_BF16_V2 without it
    ("mb_96", "alltoall"),   # H100 BF16 26.04.01
    ("mb_5", "flex"),        # GB300 MXFP8 26.08: moe_token_dispatcher_type = "flex" (v0.6.0 common.py)
    ("mb_46", "flex"),       # B300 MXFP8 26.06: B300_FP8_MX_V2 = B300_BF16_V2
])
def test_rows_take_their_configs_dispatcher(cases, rid, dispatcher):
    """nemo_moe_dispatcher.csv: the token dispatcher of each row's config (TrainingSpec.moe_token_dispatcher)."""
    assert cases[rid].scenario.training.moe_token_dispatcher == dispatcher, rid
