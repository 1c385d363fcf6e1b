"""The AMSP paper's ZeRO runs from 8 to 1,024 A800 GPUs (trainsim/data/validation/amsp_2023.csv, Chen et al.,
arXiv:2311.00257v2): the rows hold the MFU the paper prints, the step times follow from its FLOP formula, and
`validate --dataset amsp` reports each sharding layout's slowdown from 8 to 1,024 GPUs."""

from __future__ import annotations

import pytest

from trainsim.cli.main import main
from trainsim.validation.amsp import SLOWDOWN
from trainsim.validation.datasets import load_dataset
from trainsim.validation.korthikanti import korthikanti_model_flops
from trainsim.validation.validate import validate

# The MFU % the paper prints in its text, by row (Sec. I, III-A, III-C, VI-B).
PRINTED_MFU = {"amsp_7b_zero1_8": 63, "amsp_7b_zero1_1024": 36, "amsp_7b_node_zero1_8": 64,
               "amsp_7b_node_zero1_1024": 51, "amsp_7b_mics_8": 50, "amsp_7b_mics_1024": 35,
               "amsp_13b_zero3_8": 47, "amsp_13b_zero3_1024": 4}


@pytest.fixture(scope="module")
def amsp():
    return load_dataset("amsp")


def test_rows_hold_the_printed_mfu_and_its_step_time(amsp):
    """Step time = Megatron-LM model FLOPs of the 4M-token batch / (GPUs x 312 TFLOP/s x MFU)."""
    by_id = {c.row_id: c for c in amsp.cases}
    assert set(by_id) == set(PRINTED_MFU)
    for rid, mfu in PRINTED_MFU.items():
        c = by_id[rid]
        n = int(rid.rsplit("_", 1)[1])
        layers, hidden = (32, 4096) if "_7b_" in rid else (40, 5120)
        flops = korthikanti_model_flops(1024, 4096, layers, hidden, 32000)
        assert c.published == pytest.approx(flops / (n * 312e12 * mfu / 100), rel=1e-4)
        if c.skip_reason is None:
            assert c.secondary["mfu_pct"] == mfu


def test_published_slowdowns_are_the_mfu_ratios(amsp):
    """GPU time per token at 1,024 over 8 GPUs = MFU(8) / MFU(1024): ZeRO-1 over all ranks 63/36 = 1.75, within each
    node 64/51, MiCS 50/35, ZeRO-3 47/4."""
    by_id = {c.row_id: c for c in amsp.cases}
    for big, small in (("amsp_7b_zero1_1024", "amsp_7b_zero1_8"), ("amsp_7b_node_zero1_1024", "amsp_7b_node_zero1_8"),
                       ("amsp_7b_mics_1024", "amsp_7b_mics_8"), ("amsp_13b_zero3_1024", "amsp_13b_zero3_8")):
        assert by_id[big].secondary[SLOWDOWN] == pytest.approx(PRINTED_MFU[small] / PRINTED_MFU[big], rel=1e-4)
        assert SLOWDOWN not in by_id[small].secondary


def test_amsp_engine_layouts_are_listed_and_refused(amsp):
    """AMSP's own ZeRO-1 within each node is skipped; DeepSpeed-MiCS (ZeRO-3 within each node) is predicted
    (tests/test_mics.py)."""
    skipped = {c.row_id: c.skip_reason for c in amsp.cases if c.skip_reason}
    assert set(skipped) == {"amsp_7b_node_zero1_8", "amsp_7b_node_zero1_1024"}
    assert all("not" in why or "no " in why for why in skipped.values())


def test_runs_are_deepspeed_on_a800_nodes_with_four_hdr_nics(amsp):
    """Sec. VI-A: A800 (NVLink 400 GB/s bidirectional), 8 per node, 4 HDR NICs per node; overlap enabled."""
    s = next(c for c in amsp.cases if c.row_id == "amsp_7b_zero1_1024").scenario
    assert s.cluster.scale_up.bw_per_gpu_Bps == 200e9
    assert (s.cluster.scale_out.nics_per_node, s.cluster.scale_out.nic_bw_Bps) == (4, 25e9)
    assert s.training.framework == "deepspeed-2023" and s.training.effective_zero == 1
    assert s.training.overlap_grad_reduce is True and s.num_microbatches == 1


def test_zero1_over_all_ranks_reduces_each_owner_slice_and_slows_past_the_within_node_layout(amsp):
    """DeepSpeed v0.10-v0.12.3 (the ZeRO++ baseline needs >= v0.10.0; arXiv v1 precedes v0.12.4): at 1,024 ranks
    one dist.reduce per (5e8-element bucket, owner rank), 14 + 1,023 calls, each a chain over all ranks, queued
    back to back per bucket so that consecutive owners' calls follow each other through the chain
    (collectives.chained_call_latency_s). The predicted slowdown exceeds the published within-node layout's 64/51
    and is within 10 % of the published all-ranks 63/36 = 1.75 (Sec. I)."""
    from trainsim.simulator.builder import build_cost_table
    from trainsim.simulator.predict import predict
    s = next(c for c in amsp.cases if c.row_id == "amsp_7b_zero1_1024").scenario
    buckets = [b for ch in build_cost_table(s).stages[0].chunks for b in ch.grad_buckets]
    assert all(b.name.startswith("reduce grads") for b in buckets)
    assert sum(b.nbytes for b in buckets) == pytest.approx(s.model.total_params() * 2)
    rows = {r.row_id: r for r in validate(amsp, predict_fn=lambda s: predict(s, fast=True)).rows}
    got = rows["amsp_7b_zero1_1024"].secondary[SLOWDOWN]
    assert got["published"] == pytest.approx(1.75, rel=1e-4)
    assert got["predicted"] == pytest.approx(1.75, rel=0.10)
    assert got["predicted"] > 64 / 51


def test_deepspeed_zero1_within_a_node_is_refused_in_one_line(capsys):
    rc = main(["predict", "--model", "llama3-8b", "--cluster", "dgx-a100", "--gpus", "64", "--global-batch", "256",
               "--micro-batch", "4", "--seq-len", "2048", "--framework", "deepspeed", "--zero", "1", "--dp-shard", "8"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "layout.dp_shard" in err and "partial sharding" in err


def test_megatron_deepspeed_zero1_within_a_subgroup_gets_the_partial_sharding_refusal(capsys):
    """Megatron-DeepSpeed runs ZeRO through DeepSpeed's engine, which shards ZeRO-1 over all dp ranks: a shard
    group is AMSP / MiCS-style partial sharding, refused as such rather than with the generic HSDP line."""
    rc = main(["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--global-batch", "32",
               "--seq-len", "4096", "--framework", "megatron-deepspeed", "--zero", "1", "--dp-shard", "2", "--fast"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "layout.dp_shard" in err and "partial sharding" in err
    assert "framework megatron-deepspeed" in err and "HSDP" not in err
