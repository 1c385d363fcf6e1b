"""trainsim's engine against published runs: CI guards on accuracy (row ids cite the bundled CSVs).

Two kinds of assertions:
* guards at the accuracy reached today (a change that makes predictions worse fails here);
* the project's targets (SC21 MAPE <= 3 % and worst <= 8 %, MosaicML MAPE <= 8 %), which are not met
  yet: strict xfails, so they start failing -- and must be promoted to plain tests -- once they pass.
``sc21`` sets the source's unknowns by one blind rule (issue 8); ``sc21-scripts`` uses the authors' values.
The engine (not --fast) is used throughout; all datasets together take ~20 s.
"""

from __future__ import annotations

import pytest
from external_tables import MOSAIC, NEMO, table_path

from trainsim.cli.main import main
from trainsim.validation.datasets import load_dataset
from trainsim.validation.validate import default_collective_fn, default_predict_fn, validate


@pytest.fixture(scope="module")
def sc21():
    return validate(load_dataset("sc21"), predict_fn=default_predict_fn())


@pytest.fixture(scope="module")
def mosaic():
    table_path("mosaic_mpt_benchmarks.csv")  # skips where the unbundled table is absent
    return validate(load_dataset("mosaic"), predict_fn=default_predict_fn())


def _rows(rep, category=None):
    cats = {c.row_id: c.category for c in rep.dataset.cases}
    return {r.row_id: r for r in rep.compared if category is None or cats[r.row_id] == category}


def _mape(rows):
    return sum(abs(r.error_pct) for r in rows) / len(rows)


def test_sc21_megatron_ptdp_rows_guard(sc21):
    """Table 1 [sc21_t1_1..10] and Table 2 PTD-P [sc21_t2_7..12], unknowns by the blind rule (MBS 1, smallest
    interleaving > 1), framework megatron-2021: MAPE <= 5.5 % (4.8 % today); every pipelined row [sc21_t1_5..10,
    sc21_t2_7..12] within 6.5 % (worst 5.9 %, sc21_t2_12). The TP-only rows [sc21_t1_2..4] are the blind
    micro-batch 1's casualties, 8-15 % too slow (with the authors' 16/16/8, `sc21-scripts`, 3-6 % too fast); the
    per-row bound was 13 % before the slowest-GPU pace made these already-too-slow rows slower."""
    rows = {**_rows(sc21, "Table 1"), **_rows(sc21, "Table 2 PTD-P")}
    assert len(rows) == 16
    assert _mape(rows.values()) <= 5.5
    for rid, r in rows.items():
        assert abs(r.error_pct) <= 15.0, (rid, r.error_pct)
    piped = [r for rid, r in rows.items() if rid not in ("sc21_t1_1", "sc21_t1_2", "sc21_t1_3", "sc21_t1_4")]
    assert len(piped) == 12 and all(abs(r.error_pct) <= 6.5 for r in piped), {r.row_id: r.error_pct for r in piped}
    # weak scaling ends: the 1.7B row [sc21_t1_1] within 3 % (-2.7 %: Megatron's causal softmax kernel reads only
    # the unmasked triangle, cost_models/flops.py causal_fused_softmax), the 1T row [sc21_t1_10] within 6 %
    assert abs(rows["sc21_t1_1"].error_pct) <= 3.0 and abs(rows["sc21_t1_10"].error_pct) <= 6.0


def test_sc21_scripts_variant_guard():
    """Secondary dataset (the authors' script values for the unknowns): Megatron rows MAPE <= 5 % (4.7 % today),
    each within 11 % (worst -10.6 %, the 1.7B row at TP 1 and micro-batch 16). The rows were already predicted too
    fast; Megatron's causal softmax kernel, which reads only the unmasked triangle (cost_models/flops.py
    causal_fused_softmax), moves them further, most where 2,048-token score matrices are largest per GPU."""
    rep = validate(load_dataset("sc21-scripts"), predict_fn=default_predict_fn())
    rows = {**_rows(rep, "Table 1"), **_rows(rep, "Table 2 PTD-P")}
    assert len(rows) == 16 and _mape(rows.values()) <= 5.0
    assert all(abs(r.error_pct) <= 11.0 for r in rows.values())


def test_sc21_strong_scaling_shape(sc21):
    """Table 2 PTD-P: doubling GPUs roughly halves the step [sc21_t2_7 -> t2_8 -> t2_9] as published."""
    r = _rows(sc21)
    for a, b in (("sc21_t2_7", "sc21_t2_8"), ("sc21_t2_8", "sc21_t2_9"), ("sc21_t2_10", "sc21_t2_11")):
        pub, pred = r[a].published / r[b].published, r[a].predicted / r[b].predicted
        assert pred == pytest.approx(pub, rel=0.06), (a, b)


def test_sc21_every_row_is_compared_and_fits(sc21):
    """All 22 runs ran, so all must fit -- incl. GPT 530B with DeepSpeed ZeRO-3 on 640 GPUs [sc21_t2_4]."""
    assert len(sc21.compared) == 22 and all(r.fits for r in sc21.compared)


def test_sc21_zero3_rows_guard(sc21):
    """DeepSpeed 2021 ZeRO-3 rows [sc21_t2_1..6], the known weakness (13-33 % too fast): MAPE <= 22 %, and the
    published step staying flat from 768 to 1536 GPUs [sc21_t2_2 -> sc21_t2_3] is reproduced within 10 %."""
    rows = _rows(sc21, "Table 2 ZeRO-3")
    assert len(rows) == 6 and _mape(rows.values()) <= 22.0
    pub = rows["sc21_t2_3"].published / rows["sc21_t2_2"].published
    pred = rows["sc21_t2_3"].predicted / rows["sc21_t2_2"].predicted
    assert pred == pytest.approx(pub, rel=0.10)


@pytest.mark.xfail(strict=True, reason="target not met: DeepSpeed ZeRO-3 (2021) rows [sc21_t2_1..6] are "
                                      "predicted 13-33 % too fast, the TP-only rows at the blind micro-batch 1 "
                                      "[sc21_t1_2..4] 8-15 % too slow")
def test_sc21_target(sc21):
    assert sc21.mape_pct <= 3.0 and sc21.worst_pct <= 8.0


def test_mosaic_guard(mosaic):
    """All 216 MosaicML rows; activation-checkpointed A100 80GB rows <= 9 % [mpt_78..mpt_97]."""
    assert len(mosaic.compared) == 216
    assert _mape(_rows(mosaic, "a100_80gb bf16 AC").values()) <= 9.0
    assert _mape(_rows(mosaic, "a100_80gb bf16").values()) <= 8.0
    # large-scale H100 FSDP, 70B on 512 GPUs [mpt_1]: within 15 %
    assert abs(_rows(mosaic)["mpt_1"].error_pct) <= 15.0


def test_mosaic_every_run_fits(mosaic):
    """Every published MosaicML run ran, so each must be predicted to fit [mpt_1..mpt_216]."""
    assert all(r.fits for r in mosaic.compared)


def test_mosaic_target(mosaic):
    """Issue 8's MosaicML target, met since the slowest-GPU pace of synchronous jobs (cost_models/variation.py):
    MAPE <= 8 % over all 216 rows (7.72 % today)."""
    assert mosaic.mape_pct <= 8.0


def test_zero_bubble_schedules():
    """Zero-bubble Table 4 with the paper's uneven stage split, the authors' launch settings and unfused
    attention (Table 4's memory, see the memory test below): each schedule's speed-up over 1F1B within 1.5 %
    MAPE; absolute samples/s MAPE <= 11.5 %, every row within 22 % (most predicted faster than measured:
    the forward pass, see docs/validation.md; Megatron's causal fused softmax, which reads half the scores, makes
    these already-fast rows 0.1-0.4 % faster: 10.9 % MAPE, worst 21.2 %)."""
    rep = validate(load_dataset("zero-bubble"), predict_fn=default_predict_fn())
    assert len(rep.compared) == 36 and rep.mape_pct <= 11.5 and rep.worst_pct <= 22.0
    assert sum(r.error_pct > 0 for r in rep.compared) >= 27
    assert rep.secondary_mape()["ratio_to_1f1b"] <= 1.5
    # ZB-1p beats 1F1B in every group, as measured [zb_28.3B_m96_ZB-1p vs zb_28.3B_m96_1F1B]
    r = _rows(rep)
    assert r["zb_28.3B_m96_ZB-1p"].predicted > r["zb_28.3B_m96_1F1B"].predicted


def test_nccl_large_messages():
    """nccl-tests all-reduce, 8 GPUs, messages >= 64 MB: MAPE <= 10 % per system [azure_ND_H100_v5_8G ...]."""
    rep = validate(load_dataset("nccl"), collective_fn=default_collective_fn())
    cats = rep.by_category()
    for system in ("A100 v4", "H100 v5", "H200 v5"):
        assert cats[f"{system} >= 64 MB"]["mape_pct"] <= 10.0, system
    assert abs(_rows(rep)["azure_ND_H100_v5_8G"].error_pct) <= 3.0


def test_nccl_small_messages_guard():
    """nccl-tests all-reduce below 1 MB (latency-bound): Azure's runner forces NCCL_ALGO=NVLS on its 8-GPU VMs
    (AI-benchmarking-guide Benchmarks/NVIDIA/NCCLBandwidth.py), so the H100 and H200 curves are NVLS at every size
    (NCCL v2.21.5 tuner latency 25 us plus one launch per call), and the runner drives the node's 8 GPUs from one
    thread (-g 8), so an iteration lasts at least 8 launches at the VM's host CPU's per-launch cost (AMD EPYC Rome
    5 us on ND A100 v4, Sapphire Rapids 3.8 us on ND H100 v5 / H200 v5). The H100 curve ran NCCL 2.18.5, whose NVLS
    all-reduce puts a message below 2 MiB on its first CTAs in whole 8 x 16 KiB loops (nccl_model
    .nvls_busiest_channel_share); H200's 2.20.5 splits it over all 16. Guarded at today's accuracy: A100 MAPE
    <= 11 %, H200 <= 3 %, H100 <= 12 % (target 20 %) [azure_ND_A100_v4_1K .. azure_ND_H200_v5_524K]; whole curve
    set MAPE <= 7.5 %."""
    rep = validate(load_dataset("nccl"), collective_fn=default_collective_fn())
    cats = rep.by_category()
    assert cats["A100 v4 < 1 MB"]["mape_pct"] <= 11.0
    assert cats["H100 v5 < 1 MB"]["mape_pct"] <= 12.0 and cats["H200 v5 < 1 MB"]["mape_pct"] <= 3.0
    assert rep.mape_pct <= 7.5


def test_cli_gate_uses_the_engine(capsys):
    """`trainsim validate --max-mape`: zero-bubble passes at 21 %, fails at 1 %."""
    assert main(["validate", "--dataset", "zero-bubble", "--max-mape", "21"]) == 0
    capsys.readouterr()
    assert main(["validate", "--dataset", "zero-bubble", "--max-mape", "1"]) == 1
    assert "exceeds --max-mape" in capsys.readouterr().err


@MOSAIC
def test_cli_gates_for_sc21_and_mosaic(capsys):
    """What CI runs: sc21 (closed-form --fast path, same per-row inputs) and mosaic (engine) under their guards."""
    assert main(["validate", "--dataset", "sc21", "--fast", "--max-mape", "13", "--max-worst", "40"]) == 0
    assert main(["validate", "--dataset", "mosaic", "--max-mape", "12"]) == 0
    out = capsys.readouterr().out
    assert "sc21_t1_10" in out and "mpt_216" in out


# --- NVIDIA Megatron-Bridge (NeMo) performance tables (nemo_megatron_bridge_perf.csv) ------------------

@pytest.fixture(scope="module")
def nemo():
    table_path("nemo_megatron_bridge_perf.csv")
    return validate(load_dataset("nemo"), predict_fn=default_predict_fn())


def test_nemo_dense_guard(nemo):
    """Dense Llama 3 rows (FP8, Megatron-Core with TP comm overlap): H100 [mb_39, mb_80, mb_87, mb_214,
    mb_256..258, mb_273..275 ...] MAPE 4.0 %, B200 [mb_250, mb_251, mb_268, mb_269] 5.2 %, GB200 4.0 %,
    GB300 8.6 % (NVIDIA's dense peaks, equal to GB200's, at the measured GB300 cuBLASLt FP8 rate, hardware.csv
    gb300_azure; 15.9 % at the GB200 efficiency and a third-party 5000 TFLOP/s peak). Bounds loosened with the
    slowest-GPU pace (these rows were too slow already): B200 5 -> 6 %, mb_80/mb_274 3 -> 6 %, mb_256/mb_273
    4.5 -> 6.5 %; H100 6 -> 5 % and GB200 8 -> 5 % tightened."""
    for cat, limit in (("H100 fp8 dense", 5.0), ("B200 fp8 dense", 6.0), ("GB200 fp8 dense", 5.0),
                       ("GB300 fp8 dense", 9.5)):
        rows = _rows(nemo, cat)
        assert len(rows) >= 4, cat
        assert _mape(rows.values()) <= limit, (cat, _mape(rows.values()))
    h100 = _rows(nemo, "H100 fp8 dense")
    # Llama 3 70B on 64 H100, tp4 pp8 vp5 (26.04.01 / 25.09 tables): 4-5.5 % too slow.
    assert abs(h100["mb_80"].error_pct) <= 6.0 and abs(h100["mb_274"].error_pct) <= 6.0
    # Llama 3 8B on 8 H100 [mb_256, mb_273]: no TP at all, 3.6-6.0 % too slow.
    assert abs(h100["mb_256"].error_pct) <= 6.5 and abs(h100["mb_273"].error_pct) <= 6.5


def test_nemo_deepseek_guard(nemo):
    """DeepSeek-V3 (30 rows) and Kimi K2 (4 rows) with each run's Megatron-Bridge configuration (layout, MTP,
    recompute modules, etp, EP overlap): MAPE 8.9 % and 10.0 % today; DeepSeek-V3 on 1,024 H100 [mb_276] 2.0 %
    too slow (bound 3 -> 3.5 % with the slowest-GPU pace); every one of them predicted to fit, as they ran. Kimi K2
    runs only on GB300, with the recipe's Muon (dist_muon: Newton-Schulz GEMMs, per-parameter passes, gradient
    all-reduce; cost_models/muon.py): 4.7-10.9 % too fast, MAPE 6.7 %."""
    labels = {c.row_id: c.label for c in nemo.dataset.cases}
    ds = [r for r in nemo.compared if labels[r.row_id].startswith("DeepSeekV3")]
    kimi = [r for r in nemo.compared if labels[r.row_id].startswith("Kimi_K2")]
    assert len(ds) == 30 and len(kimi) == 4
    assert _mape(ds) <= 9.5 and _mape(kimi) <= 7.5, (_mape(ds), _mape(kimi))
    assert abs(next(r for r in ds if r.row_id == "mb_276").error_pct) <= 3.5
    assert all(r.fits for r in ds + kimi)


def test_nemo_gpt_oss_guard(nemo):
    """GPT OSS 120B (25 rows predicted; the 26.06.01 regression rows and the unmatched 25.11 rows skipped): every
    run predicted to fit, as it ran. Megatron-Core's eager gpt-oss passes (TEGroupedMLP's clamp and per-expert fc2
    bias, the unfused YaRN RoPE; flops.py) took the MAPE from 45.8 % to 32.6 % (BF16: GB300 +52 -> +32 %, B300
    +46 -> +31 %, B200 +42 -> +28 %, H100 +47 -> +31 %, GB200 +65..79 -> +42..52 %); every row is still predicted
    too fast (+19 % at least), the rows of one system within a few percent after their bias (H100 1.5 %, B200
    2.9 %), so a part per step is still not costed (not tuned to the rows). Megatron-Core's alltoall dispatcher's
    sort and unsort of the received tokens by local expert (the 16 rows whose config runs it, nemo_moe_dispatcher.csv)
    took it to 30.8 % (GB300 BF16 +31.4 -> +28.0 % mean, GB200 BF16 +45.6 -> +42.1 %, H100 +28.9 -> +26.4 %).
    Bounds hold today's figures."""
    labels = {c.row_id: c.label for c in nemo.dataset.cases}
    rows = [r for r in nemo.compared if labels[r.row_id].startswith("GPT OSS 120B")]
    assert len(rows) == 25 and all(r.fits for r in rows)
    assert all(r.error_pct > 10.0 for r in rows)
    assert _mape(rows) <= 31.5, _mape(rows)


def test_nemo_nemotron_3_nano_guard(nemo):
    """Nemotron 3 Nano (23 Mamba-2, 23 MoE, 6 attention layers; 20 rows on H100, B200, B300, GB200, GB300) with each
    run's Megatron-Bridge configuration: every row predicted too fast today, +11.4 % (B300) to +28.8 % (GB200),
    MAPE 19.1 % (the GB300 rows at GB300's measured GEMM rate, hardware.csv gb300_azure); the bound holds that band,
    and every run is predicted to fit, as it ran."""
    labels = {c.row_id: c.label for c in nemo.dataset.cases}
    nano = [r for r in nemo.compared if labels[r.row_id].startswith("Nemotron_3_Nano")]
    assert len(nano) == 20
    assert _mape(nano) <= 20.0, _mape(nano)
    assert all(0.0 < r.error_pct <= 32.0 for r in nano), [(r.row_id, r.error_pct) for r in nano]
    assert all(r.fits for r in nano)
    # Nemotron 3.5 Lightning on 8 GB200 [mb_12]: Nano + two shared MTP depths of '*E', +12.7 % today.
    light = next(r for r in nemo.compared if r.row_id == "mb_12")
    assert 0.0 < light.error_pct <= 16.0 and light.fits


def test_nemo_moe_host_issue_guard(nemo):
    """Megatron-Core MoE rows carry their blocks' host issue (cost_models/moe_issue.py). Qwen3 235B-A22B on 64 GB200
    at tp2 ep64 mb1 [mb_267]: ~2.2 ms of Grace host work per block forward against ~1.5 ms of GPU, so each MoE
    layer's dispatcher sync exposes the difference: +32.6 % too fast without it, +3.6 % with it. The x86
    micro-batch-1 Qwen3 rows stay too fast (their counted host work is below their GPU time; docs/validation.md
    "Host-bound fine-grained MoE"): the bounds hold today's figures."""
    rows = {r.row_id: r for r in nemo.compared}
    assert abs(rows["mb_267"].error_pct) <= 6.0, rows["mb_267"].error_pct
    labels = {c.row_id: c.label for c in nemo.dataset.cases}
    qwen = [r for r in nemo.compared if labels[r.row_id].startswith("Qwen3")]
    assert len(qwen) == 66 and _mape(qwen) <= 27.0, _mape(qwen)


def test_nemo_tp_comm_overlap_is_what_fixes_h100_70b(nemo):
    """Without userbuffers TP overlap, Llama 3 70B tp4 on H100 [mb_80, 1664 tok/s/GPU] is predicted ~12 % slow."""
    case = next(c for c in nemo.dataset.cases if c.row_id == "mb_80")
    assert case.scenario.training.tp_comm_overlap and case.scenario.training.sequence_parallel
    off = case.scenario.model_copy(update={"training": case.scenario.training.model_copy(
        update={"tp_comm_overlap": False})})
    pred = default_predict_fn()
    on_tok = pred(case.scenario).tokens_per_s / 64
    off_tok = pred(off).tokens_per_s / 64
    assert off_tok < 0.92 * 1664 < on_tok


def test_nemo_rows_and_skips(nemo):
    """Every row is compared or skipped with a reason; LoRA and NVFP4 are compared, the unmodelled architectures skip."""
    cases = {c.row_id: c for c in nemo.dataset.cases}
    assert len(cases) == 278
    assert "nvfp4 with hybrid_pattern" in cases["mb_14"].skip_reason  # Nemotron 3 Super NVFP4: the dtype
    assert cases["mb_35"].skip_reason is None                   # Llama 3.1 405B GB300 NVFP4: dtype nvfp4
    assert cases["mb_69"].skip_reason is None                   # Llama 3 70B LoRA (rank 16 on linear_qkv)
    assert cases["mb_1"].skip_reason is None                    # DeepSeek-V3 (MLA, MTP, recipe layout)
    assert "pp=2 vp=4" in cases["mb_237"].skip_reason           # a DeepSeek-V3 layout no recipe defines
    assert cases["mb_11"].skip_reason is None                   # Nemotron 3 Nano (hybrid Mamba-2 / MoE)
    assert cases["mb_13"].skip_reason is None                   # Nemotron 3 Super MXFP8 (LatentMoE, hybrid MTP)
    assert cases["mb_12"].skip_reason is None                   # Nemotron 3.5 Lightning: Nano + hybrid MTP
    assert len(nemo.compared) >= 150
    # Parenthesised alternatives are not used: mb_263 is FSDP-64 tp1 pp1 (3986 tok/s), not tp2 pp4 vp5.
    s = cases["mb_263"].scenario
    assert (s.layout.tp, s.layout.pp, s.training.zero, cases["mb_263"].published) == (1, 1, 3, 3986.0)


def test_nemo_nvfp4_guard(nemo):
    """The 18 Llama 3 70B / 3.1 405B NVFP4 rows (GB200, GB300; 26.02-26.06 tables) as dtype nvfp4: MAPE 8.3 % today,
    GB300 5.9 % (at the measured GB300 FP4 GEMM rate, gb300_azure), GB200 10.7 % (the 70B tp2 pp4 vp5 rows [mb_79, mb_122, mb_166, mb_202] 12-23 % too fast, where the
    MXFP8 rows of the same layout [mb_78, mb_124, mb_168, mb_204] are within 4.3 %: the modelled NVFP4 speed-up over
    fp8 exceeds the published one). mb_165 (GB300 tp1 pp1 mb2 without FSDP, as printed) is predicted not to fit."""
    labels = {c.row_id: c.label for c in nemo.dataset.cases}
    rows = {r.row_id: r for r in nemo.compared if "NVFP4" in labels[r.row_id]}
    assert len(rows) == 18
    gb300 = [r for k, r in rows.items() if "GB300" in labels[k]]
    assert _mape(rows.values()) <= 9.0 and _mape(gb300) <= 6.5, (_mape(rows.values()), _mape(gb300))
    assert all(abs(r.error_pct) <= 25.0 for r in rows.values())
    assert [k for k, r in rows.items() if not r.fits] == ["mb_165"]


def test_nemo_runs_that_ran_fit(nemo):
    """Every NeMo run that ran is predicted to fit but the two 26.02.01 Llama 3 70B GB300 rows printed without FSDP
    (tp1 pp1 [mb_165], tp1 pp4 [mb_167]: 70B's bf16 weights and gradients alone exceed 279 GiB per stage rank as
    printed). The Megatron-FSDP 70B fp8 rows fit through fp8 primary weights and the non-unit parameters kept
    gathered once (cost_models/fp8_weights.py, megatron_fsdp.py), the Qwen3 30B H100 rows through the experts' saved
    bytes under the weighted SwiGLU."""
    assert sorted(r.row_id for r in nemo.compared if not r.fits) == ["mb_165", "mb_167"]


@NEMO
def test_nemo_flop_basis_reproduces_the_table():
    """NeMo's llama3 model-FLOP formula reproduces the table's TFLOP/s / tokens/s ratio: Llama 3 8B
    [mb_273: 725 TFLOP/s at 14079 tok/s], 70B [mb_274: 727 at 1619], 405B [mb_275: 763 at 302]."""
    from trainsim.specs import load_model
    from trainsim.validation.datasets import nemo_llama_flops_per_token
    for preset, tflops, tok in (("llama3-8b", 725, 14079), ("llama3-70b", 727, 1619), ("llama3-405b", 763, 302)):
        fpt = nemo_llama_flops_per_token(load_model(preset), 8192)
        assert fpt * tok / 1e12 == pytest.approx(tflops, rel=0.01)


def test_qwen3_moe_presets_match_the_model_cards():
    """Qwen3-30B-A3B: 30.5B total / 3.3B active; Qwen3-235B-A22B: 235B / 22B (Qwen model cards)."""
    from trainsim.specs import load_model
    small, big = load_model("qwen3-30b-a3b"), load_model("qwen3-235b-a22b")
    assert small.total_params() / 1e9 == pytest.approx(30.5, abs=0.05)
    assert small.active_params() / 1e9 == pytest.approx(3.3, abs=0.06)
    assert big.total_params() / 1e9 == pytest.approx(235, abs=0.5)
    assert big.active_params() / 1e9 == pytest.approx(22, abs=0.25)


# --- Korthikanti et al. 2022 (arXiv:2205.05198), bundled as korthikanti_2022.csv (not in ../shared) ---------

KORTHIKANTI_TABLE5 = {  # row_id: (iteration time s, MFU % as printed), Table 5 and Sec. 6.3 of the paper
    "k22_22b_full": (1.42, None), "k22_22b_present": (1.10, 41.5),
    "k22_175b_full": (18.13, None), "k22_175b_present": (13.75, 51.4),
    "k22_530b_full": (49.05, None), "k22_530b_present": (37.83, 56.0),
    "k22_1t_full": (94.42, None), "k22_1t_present": (71.49, 56.3),
    "k22_530b_dp8": (39.15, 54.2),
}


def test_korthikanti_rows_and_their_own_mfu_formula():
    """The bundled rows carry Table 5's printed times, and the paper's Appendix A model-FLOPs formula turns
    each printed time back into its printed MFU (to the table's rounding): an independent check that
    the layouts (GPUs, batch, architecture) were entered as the paper ran them."""
    ds = load_dataset("korthikanti")
    assert {c.row_id: c.published for c in ds.cases} == {k: v[0] for k, v in KORTHIKANTI_TABLE5.items()}
    for c in ds.cases:
        mfu = KORTHIKANTI_TABLE5[c.row_id][1]
        if mfu is not None:
            # times are printed to 0.01 s and MFU to 0.1 %: allow both roundings
            tol = mfu * 0.005 / c.published + 0.05
            assert c.secondary_fns["mfu_pct"](c.published) == pytest.approx(mfu, abs=tol), c.row_id
        assert c.scenario is not None and c.skip_reason is None


def test_korthikanti_guard():
    """Megatron-LM 2022 on Selene A100, every layout printed by the paper (no unknowns), framework
    megatron-2022: MAPE <= 4.5 % and every row within 9.5 % (today 4.1 % / 9.2 %, predicted too fast: the 22B
    per-layer backward of Table 4 is 11.9 ms published vs ~10.9 ms modelled; Megatron's causal softmax kernel, which
    reads only the unmasked triangle (cost_models/flops.py causal_fused_softmax), took the 22B SP + selective row
    from -7.9 to -9.2 %)."""
    rep = validate(load_dataset("korthikanti"), predict_fn=default_predict_fn())
    rows = _rows(rep)
    assert len(rows) == 9
    assert _mape(rows.values()) <= 4.5
    assert all(abs(r.error_pct) <= 9.5 for r in rows.values()), {k: r.error_pct for k, r in rows.items()}
    # the paper's own comparison: SP + selective recompute is ~30 % faster than full recompute (Table 5)
    for size in ("22b", "175b", "530b", "1t"):
        gain = rows[f"k22_{size}_full"].predicted / rows[f"k22_{size}_present"].predicted - 1
        assert 0.24 <= gain <= 0.36, (size, gain)


def test_zero_bubble_peak_memory_matches_table4_with_unfused_attention():
    """Zero-bubble paper Table 4 measured peak memory [zb_*_1F1B, zb_*_1F1B-I, zb_*_ZB-1p rows of
    pipeline_bubble.csv]: the dataset's choice of Megatron's unfused attention (materialised scores) puts
    every predicted peak within 8 % of the published GB; FlashAttention would halve them (the evidence for
    that choice, see the dataset's notes)."""
    import csv

    from trainsim.data import validation_path
    from trainsim.simulator.predict import predict
    published = {r["row_id"]: float(r["peak_memory_gb"]) for r in csv.DictReader(open(validation_path("pipeline_bubble.csv")))
                 if r.get("peak_memory_gb")}
    smallest_m = ("_m24_", "_m48_", "_m96_")  # memory does not depend on m: one group per model
    cases = [c for c in load_dataset("zero-bubble").active
             if c.row_id in published and any(tag in c.row_id for tag in smallest_m)]
    assert len(cases) == 12
    for c in cases:
        assert not c.scenario.training.flash_attention
        pred_gb = predict(c.scenario).peak_bytes / 1e9
        assert pred_gb == pytest.approx(published[c.row_id], rel=0.08), (c.row_id, pred_gb)
        flash = c.scenario.model_copy(update={"training": c.scenario.training.model_copy(
            update={"flash_attention": True})})
        assert predict(flash).peak_bytes / 1e9 < 0.85 * published[c.row_id]


def test_zero_bubble_weight_gradient_pass_matches_profiled_table6():
    """Qi et al. (arXiv:2401.10241) Appendix D, Table 6: profiled per-stage T_W (weight-gradient GEMMs only,
    ms, first m of each model; read from the paper's full text, not a shared CSV). A middle stage holds
    (layers + 2) / p blocks; trainsim's W pass of those blocks is pure GEMM time from the tile model and
    lands within 7 % of every profiled value -- an independent check of the A100 GEMM model on real shapes."""
    from trainsim.cost_models.compute import layer_times
    t_w = {"1.5B": 9.337, "6.2B": 19.927, "14.6B": 8.132, "28.3B": 7.715}
    seen = {}
    for c in load_dataset("zero-bubble").active:
        size = c.label.split()[0]
        if size in t_w and size not in seen:
            sc = c.scenario
            per_stage = (sc.model.num_layers + 2) // sc.layout.pp
            seen[size] = layer_times(sc).bwd_weight_s * per_stage * 1e3
    assert set(seen) == set(t_w)
    for size, ms in seen.items():
        assert ms == pytest.approx(t_w[size], rel=0.07), (size, ms)


def test_llama3_405b_on_h100():
    """Llama 3 405B pre-training (arXiv:2407.21783 Table 4; bundled llama3_2024.csv) [l3_405b_8k, l3_405b_16k,
    l3_405b_16k_cp16]: every run fits; step time within 5.5 % MAPE (4.5 % today), worst row (all-gather CP at
    128K) <= 11 % (9.6 %)."""
    ds = load_dataset("llama3")
    res = validate(ds, predict_fn=default_predict_fn())
    assert len(res.compared) == 3 and all(r.fits for r in res.compared)
    for c in ds.cases:  # one layer per chunk, plus the embedding-only and loss-only chunks (the paper's text)
        assert c.scenario.layout.vpp == (c.scenario.model.num_layers + 2) // c.scenario.layout.pp
    assert ds.cases[2].scenario.training.cp_comm == "allgather"  # the paper's all-gather based CP
    assert res.mape_pct <= 5.5 and res.worst_pct <= 11.0


def test_out_of_sample_probe_runs():
    """20 published runs outside the bundled data (docs/probe_runs.csv, common run schema, each row citing its
    source: torchtitan A100/H200, BLOOM-176B, MegaScale's Megatron-LM baseline at 256-12,288 GPUs, NVIDIA's
    Nemotron-4 340B recipes and production run): every row predicted; MAPE <= 10 % (9.13 % with MegaScale's
    baseline on the code its commit has), most of it one bias (predicted too fast, -6.4 %)."""
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "docs" / "probe_runs.csv"
    rep = validate(load_dataset(str(path)), predict_fn=default_predict_fn())
    assert len(rep.compared) == 20 and not rep.skipped
    assert rep.mape_pct <= 10.0 and rep.bias.mape_after_pct <= 8.0
