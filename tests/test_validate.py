"""`trainsim validate` plumbing, checked with stand-in predictors whose errors are known in closed form.

The accuracy of trainsim's own engine against the same data is tested in test_validate_accuracy.py.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass

import pytest
from external_tables import MOSAIC, table_path

from trainsim.cli.main import main
from trainsim.data import validation_path
from trainsim.specs import load_model
from trainsim.validation import validate as V
from trainsim.validation.datasets import (
    busbw_factor,
    load_dataset,
    mosaic_flops_per_seq,
    mosaic_peak_flops,
    sc21_eq3_flops,
)


@dataclass
class FakePrediction:
    step_time_s: float
    tokens_per_s: float
    fits: bool = True


def eq3_roofline(tflops_per_gpu: float):
    """Stand-in engine: SC21 eq. 3 FLOPs at a fixed TFLOP/s per GPU."""
    def predict(sc):
        m, t = sc.model, sc.training
        f = sc21_eq3_flops(t.global_batch, t.seq_len, m.num_layers, m.hidden, m.vocab_size)
        step = f / (sc.num_gpus * tflops_per_gpu * 1e12)
        return FakePrediction(step, sc.tokens_per_step / step)
    return predict


def rows(name):
    with open(table_path(name), newline="") as f:
        return {r["row_id"]: r for r in csv.DictReader(f)}


def test_sc21_cases_cover_tables_1_and_2_and_list_the_rest_as_skipped():
    ds = load_dataset("sc21")
    active = {c.row_id for c in ds.active}
    assert active == {f"sc21_t1_{i}" for i in range(1, 11)} | {f"sc21_t2_{i}" for i in range(1, 13)}
    skipped = {c.row_id: c.skip_reason for c in ds.skipped}
    assert "sc21_s58_1" in skipped and "ablation" in skipped["sc21_s58_1"]
    assert len(active) + len(skipped) == len(rows("megatron_sc21_table1.csv"))


def test_sc21_scripts_configuration_follows_the_authors_scripts():
    """Secondary dataset sc21-scripts: the unknowns as the authors' reproduction scripts set them."""
    ds = {c.row_id: c.scenario for c in load_dataset("sc21-scripts").active}
    # run_table_1.sh: 1.7B MBS 16 on 32 GPUs, GBS 512 -> one micro-batch, no pipeline  [sc21_t1_1]
    s = ds["sc21_t1_1"]
    assert (s.layout.tp, s.layout.pp, s.dp, s.training.micro_batch, s.num_microbatches) == (1, 1, 32, 16, 1)
    # 530B: TP8 PP35, 1 layer per virtual stage -> vpp 3, MBS 1  [sc21_t1_9]
    s = ds["sc21_t1_9"]
    assert (s.layout.tp, s.layout.pp, s.layout.vpp, s.training.schedule) == (8, 35, 3, "interleaved")
    # 1T has no --num-layers-per-virtual-pipeline-stage: plain 1F1B  [sc21_t1_10]
    assert ds["sc21_t1_10"].training.schedule == "1f1b"
    # Table 2 ZeRO-3 rows: DeepSpeed ZeRO-3 without model parallelism, row's micro-batch  [sc21_t2_1]
    s = ds["sc21_t2_1"]
    assert (s.training.zero, s.layout.tp, s.layout.pp, s.training.micro_batch) == (3, 1, 1, 4)
    for sc in ds.values():  # 2021 Megatron: fp16, full recompute, no FlashAttention
        assert sc.training.dtype == "fp16" and sc.training.recompute == "full" and not sc.training.flash_attention


def test_sc21_sets_unknowns_once_by_one_rule():
    """Primary sc21 dataset (issue 8: unknowns set once, not per row): MBS 1, smallest interleaving > 1."""
    ds = load_dataset("sc21")
    table = rows("megatron_sc21_table1.csv")
    assert len(ds.active) == 22
    for c in ds.active:
        sc = c.scenario
        if sc.training.zero == 0:
            assert sc.training.micro_batch == 1
            if sc.layout.pp > 1:  # smallest depth > 1 dividing the stage's layers
                lps = sc.model.num_layers // sc.layout.pp
                assert sc.layout.vpp == min(v for v in range(2, lps + 1) if lps % v == 0)
                assert sc.training.schedule == "interleaved"
            else:
                assert sc.layout.vpp == 1
        else:  # ZeRO-3 rows: Table 2 prints the batch per GPU [sc21_t2_1..6]
            assert sc.training.micro_batch == int(float(table[c.row_id]["micro_batch"]))
    # the secondary dataset differs only in those two unknowns
    scripts = {c.row_id: c.scenario for c in load_dataset("sc21-scripts").active}
    for c in ds.active:
        a, b = c.scenario, scripts[c.row_id]
        assert (a.model, a.layout.tp, a.layout.pp, a.num_gpus, a.training.global_batch) == \
            (b.model, b.layout.tp, b.layout.pp, b.num_gpus, b.training.global_batch)


def test_errors_mape_and_worst_match_closed_form():
    """With a 140 TFLOP/s eq.3 roofline, each row's error is X_pub/140 - 1 exactly."""
    ds = load_dataset("sc21")
    rep = V.validate(ds, predict_fn=eq3_roofline(140.0))
    table = rows("megatron_sc21_table1.csv")
    expected = {rid: (float(table[rid]["tflops_per_gpu"]) / 140.0 - 1) * 100 for rid in (c.row_id for c in ds.active)}
    got = {r.row_id: r.error_pct for r in rep.compared}
    assert got.keys() == expected.keys()
    for rid, e in expected.items():
        # step_time_s in the CSV is rounded to 1 ms: allow that much
        assert got[rid] == pytest.approx(e, abs=0.05), rid
    assert rep.mape_pct == pytest.approx(sum(abs(e) for e in expected.values()) / len(expected), abs=0.05)
    worst = max(expected, key=lambda k: abs(expected[k]))
    assert rep.worst.row_id == worst  # sc21_t2_3: 44 TFLOP/s (ZeRO-3 on 1536 GPUs)
    assert rep.worst_pct == pytest.approx(abs(expected[worst]), abs=0.05)
    # secondary on the paper's own basis: predicted TFLOP/s is 140 for every row
    for r in rep.compared:
        assert r.secondary["tflops_per_gpu"]["predicted"] == pytest.approx(140.0, rel=1e-9)


def test_bias_is_the_geometric_mean_ratio_and_the_rest_is_scale_free():
    """eq.3 roofline at X: predicted/published = P_i / X per row, so the bias is geomean(P)/X - 1 and the MAPE
    left around it, mean |P_i / geomean(P) - 1|, does not depend on X at all."""
    ds = load_dataset("sc21")
    table = rows("megatron_sc21_table1.csv")
    pub = [float(table[c.row_id]["tflops_per_gpu"]) for c in ds.active]
    g = math.exp(sum(math.log(p) for p in pub) / len(pub))
    spread = sum(abs(p / g - 1) for p in pub) / len(pub) * 100
    for x in (120.0, 140.0, 200.0):
        b = V.validate(ds, predict_fn=eq3_roofline(x)).bias
        assert b.bias_pct == pytest.approx((g / x - 1) * 100, abs=0.05)  # CSV step times rounded to 1 ms
        assert b.mape_after_pct == pytest.approx(spread, abs=0.05)
    j = V.validate(ds, predict_fn=eq3_roofline(140.0)).to_json()
    assert j["bias_pct"] == pytest.approx((g / 140 - 1) * 100, abs=0.05)
    assert set(j["by_category"]["Table 1"]) >= {"bias_pct", "mape_after_bias_pct"}


def test_bias_of_rows_closed_form():
    mk = lambda pub, pred: V.RowResult("r", "r", pub, predicted=pred, error_pct=(pred - pub) / pub * 100)
    b = V.Bias.of([mk(1.0, 1.1), mk(2.0, 2.2), mk(4.0, 4.4)])  # every row +10 %: all bias, nothing left
    assert b.bias_pct == pytest.approx(10.0) and b.mape_after_pct == pytest.approx(0.0, abs=1e-12)
    b = V.Bias.of([mk(1.0, 2.0), mk(1.0, 0.5)])  # x2 and /2 cancel: no bias, 75 % spread around 1
    assert b.bias_pct == pytest.approx(0.0, abs=1e-12) and b.mape_after_pct == pytest.approx(75.0)
    assert V.Bias.of([]) is None


def test_sc21_eq3_reproduces_published_step_times():
    """step_time_s = eq.3 / (n X) is how the CSV derived it: check the formula on every run row."""
    for rid, r in rows("megatron_sc21_table1.csv").items():
        if not rid.startswith(("sc21_t1_", "sc21_t2_")):
            continue
        f = sc21_eq3_flops(int(float(r["global_batch_seqs"])), 2048, int(float(r["layers"])), int(float(r["hidden"])), 51200)
        assert f / (float(r["num_gpus"]) * float(r["tflops_per_gpu"]) * 1e12) == pytest.approx(float(r["step_time_s"]), rel=2e-3), rid


@MOSAIC
def test_mosaic_mfu_formula_and_peaks_reproduce_published_mfu():
    """MosaicML's formula at their peak reproduces every published MFU from the published tokens/s."""
    ds = load_dataset("mosaic")
    assert len(ds.active) == 216
    for c in ds.active:
        fn = c.secondary_fns["mfu_pct"]
        assert fn(c.published) == pytest.approx(c.secondary["mfu_pct"], abs=0.06), c.row_id


@MOSAIC
def test_mosaic_scenarios_match_the_table():
    table = rows("mosaic_mpt_benchmarks.csv")
    for c in load_dataset("mosaic").active:
        r, sc = table[c.row_id], c.scenario
        assert sc.model.total_params() == int(r["num_params_reported"]), c.row_id
        assert sc.num_gpus == int(r["num_gpus"]) and sc.dp == int(r["num_gpus"])
        assert sc.training.micro_batch == int(r["micro_batch"]) and sc.num_microbatches == int(r["grad_accum"])
        assert sc.training.zero == (3 if r["fsdp_sharding_strategy"] == "FULL_SHARD" else 2)
        assert (sc.training.recompute == "full") == (r["activation_checkpointing"] == "True")
    # one cluster per GPU type: A100 40GB rows [mpt_206] run on 40 GiB parts, H100 rows on dgx-h100
    ds = {c.row_id: c.scenario for c in load_dataset("mosaic").active}
    assert ds["mpt_206"].cluster.gpu.memory_bytes == 40 * 2**30
    assert ds["mpt_1"].cluster.gpu.name.startswith("H100") and ds["mpt_1"].cluster.scale_out.nic_bw_Bps == 50e9


def test_mosaic_peak_constants():
    # Model TFLOP / MFU in the source = the peak it divided by  [mpt_1: 408 / 0.4125 = 989; FP8 rows 1979]
    table = rows("mosaic_mpt_benchmarks.csv")
    for rid, r in table.items():
        dtype = "fp8" if "fp8" in r["precision"] else "bf16"
        peak = float(r["model_tflop_col"]) / float(r["mfu_pct"]) * 100
        assert peak == pytest.approx(mosaic_peak_flops()[(r["gpu"], dtype)] / 1e12, rel=0.01), rid


def test_mosaic_flops_per_seq_closed_form():
    m = load_model("mpt-7b")
    f = mosaic_flops_per_seq(m.total_params(), 32, 4096, 2048)
    assert f == 3 * (2 * 6658859008 * 2048 + 4 * 32 * 4096 * 2048**2)


def test_zero_bubble_ratios_and_skips():
    ds = load_dataset("zero-bubble")
    sk = {c.row_id: c.skip_reason for c in ds.skipped}
    assert all("ZB-2p" in rid for rid in sk) and len(sk) == 12
    byid = {c.row_id: c for c in ds.active}
    c = byid["zb_1.5B_m24_1F1B-I"]
    assert c.secondary["ratio_to_1f1b"] == pytest.approx(13.1 / 11.8)
    assert c.scenario.layout.vpp == 3 and c.scenario.layout.pp == 8  # (22+2)/8 layers, one per chunk

    def fake(sc):  # throughput proportional to 1 - textbook bubble: ratio known in closed form
        p, m, v = sc.layout.pp, sc.num_microbatches, sc.layout.vpp
        bubble = (p - 1) / (v * m + p - 1)
        return FakePrediction(1.0, 1000.0 * (1 - bubble))
    rep = V.validate(ds, predict_fn=fake)
    r = {x.row_id: x for x in rep.compared}["zb_1.5B_m24_1F1B-I"]
    expect = (1 - 7 / (3 * 24 + 7)) / (1 - 7 / (24 + 7))
    assert r.secondary["ratio_to_1f1b"]["predicted"] == pytest.approx(expect)


def test_nccl_busbw_from_collective_time():
    ds = load_dataset("nccl")
    assert {c.collective.num_gpus for c in ds.active} == {8}
    bw = 200e9

    def ring(case):  # ideal ring all-reduce at 200 GB/s per GPU: busbw = 200 GB/s at every size
        n = case.num_gpus
        return case.nbytes * 2 * (n - 1) / n / bw
    rep = V.validate(ds, predict_fn=None, collective_fn=ring)
    for r in rep.compared:
        assert r.predicted == pytest.approx(200.0)
        assert r.error_pct == pytest.approx((200.0 - r.published) / r.published * 100)
    assert busbw_factor("all_reduce", 8) == 1.75 and busbw_factor("all_gather", 4) == 0.75
    # nothing dropped silently: definitions excluded, everything else either compared or skipped
    assert len(rep.compared) + len(rep.skipped) == len(ds.cases)


def test_predictor_errors_become_skipped_rows():
    from trainsim.specs import SpecError

    def picky(sc):
        if sc.training.zero == 3:
            raise SpecError("training.zero", "not supported by this stand-in")
        return eq3_roofline(150.0)(sc)
    rep = V.validate(load_dataset("sc21"), predict_fn=picky)
    skipped = {r.row_id: r.skipped for r in rep.skipped}
    assert "sc21_t2_1" in skipped and "training.zero" in skipped["sc21_t2_1"]
    assert len(rep.compared) == 16


def test_json_shape():
    rep = V.validate(load_dataset("sc21"), predict_fn=eq3_roofline(140.0))
    j = json.loads(json.dumps(rep.to_json()))
    assert j["dataset"] == "sc21" and set(j) >= {"dataset", "rows", "mape_pct", "worst_pct", "skipped"}
    row = j["rows"][0]
    assert set(row) >= {"row_id", "published", "predicted", "error_pct"}
    assert all(math.isfinite(r["error_pct"]) for r in j["rows"])
    assert j["by_counter"] == {}  # SC21's rows name no measured counter: no per-counter summary


@pytest.fixture
def standin(monkeypatch):
    monkeypatch.setattr(V, "default_predict_fn", lambda **kw: eq3_roofline(140.0))


def test_cli_exit_codes_follow_max_mape(standin, capsys):
    # the 140 TFLOP/s roofline has a MAPE of ~24% on sc21 (ZeRO-3 rows at 44-98 TFLOP/s dominate)
    assert main(["validate", "--dataset", "sc21", "--max-mape", "50"]) == 0
    out = capsys.readouterr().out
    assert "sc21_t1_1" in out and "MAPE" in out and "skipped" in out
    assert main(["validate", "--dataset", "sc21", "--max-mape", "3"]) == 1
    assert "exceeds --max-mape" in capsys.readouterr().err
    assert main(["validate", "--dataset", "sc21", "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["dataset"] == "sc21" and len(j["rows"]) == 22


def test_cli_bad_dataset_is_exit_2(capsys):
    assert main(["validate", "--dataset", "no-such-set"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: dataset:") and err.count("\n") == 1


def test_dataset_from_csv_path(tmp_path, standin, capsys):
    """A user CSV in the common run schema (here two SC21 rows) validates like the bundled one."""
    src = validation_path("megatron_sc21_table1.csv")
    with open(src, newline="") as f:
        reader = csv.DictReader(f)
        keep = [r for r in reader if r["row_id"] in ("sc21_t1_1", "sc21_t2_7")]
        fields = reader.fieldnames
    p = tmp_path / "mine.csv"
    with open(p, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(keep)
    assert main(["validate", "--dataset", str(p), "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert [r["row_id"] for r in j["rows"]] == ["sc21_t1_1", "sc21_t2_7"]
    bad = tmp_path / "bad.csv"
    bad.write_text("row_id,foo\nx,1\n")
    assert main(["validate", "--dataset", str(bad)]) == 2


def test_unbundled_tables_are_found_beside_the_checkout_or_refused_with_the_ways_to_supply_them(monkeypatch, tmp_path):
    import trainsim.data as data
    from trainsim.specs.errors import SpecError
    from trainsim.validation.datasets import missing_external

    monkeypatch.setattr(data, "external_dirs", lambda: [tmp_path])
    assert missing_external("mosaic") and missing_external("sc21") is None
    with pytest.raises(SpecError, match="TRAINSIM_VALIDATION_DIR"):
        load_dataset("nemo")


def test_the_environment_variable_is_searched_first(monkeypatch, tmp_path):
    import trainsim.data as data

    monkeypatch.setenv(data.VALIDATION_DIR_ENV, str(tmp_path))
    assert data.external_dirs()[0] == tmp_path
