"""The prediction's host issue time of a step (``breakdown_s["host_issue"]``), which the interval's host term reads
(validation.host_band), against the closed form of its pieces: per micro-batch each block's forward and backward
issue (cost_models.host_issue, with DeepSpeed ZeRO-3's host loops over ranks, simulator.zero3_reduce) and the
micro-batch's own work, times the micro-batches, plus the optimizer step's issue (cost_models.step_host)."""

from __future__ import annotations

import math

import pytest

from trainsim.cost_models.host_issue import scenario_block_issue
from trainsim.cost_models.step_host import scenario_step_host
from trainsim.simulator import zero3_reduce
from trainsim.simulator.predict import predict
from trainsim.specs.loaders import build_scenario


def _scenario(training: dict, gpus: int = 8, model: str = "llama3-8b", layout: dict | None = None):
    base = {"seq_len": 2048, "global_batch": 64, "micro_batch": 1, "dtype": "bf16", "recompute": "none"}
    return build_scenario({"name": "host-issue", "model": model, "cluster": "dgx-h100", "gpus": gpus,
                           **({"layout": layout} if layout else {}), "training": {**base, **training}})


def _closed_form(sc, layers: int, stage: int) -> float:
    issue = zero3_reduce.with_rank_loops(sc, scenario_block_issue(sc))
    per_mb = layers * (issue.fwd_s + issue.bwd_s)
    if stage == 0:
        per_mb += issue.microbatch_fwd_s + issue.microbatch_bwd_s
    return sc.num_microbatches * per_mb + scenario_step_host(sc, stage).issue_s


@pytest.mark.parametrize("training", [
    {"framework": "megatron", "zero": 1},
    {"framework": "deepspeed", "zero": 3},          # the host's loops over ranks are part of each block's issue
])
def test_host_issue_is_every_pass_and_the_optimizer_step(training):
    sc = _scenario(training)
    pred = predict(sc, fast=True)
    assert pred.breakdown_s["host_issue"] == pytest.approx(_closed_form(sc, sc.model.num_layers, 0), rel=1e-12)


def test_deepspeed_zero3_host_issue_counts_its_rank_loops():
    sc = _scenario({"framework": "deepspeed", "zero": 3})
    plain = scenario_block_issue(sc)
    looped = zero3_reduce.with_rank_loops(sc, plain)
    assert looped.bwd_s > plain.bwd_s
    extra = sc.num_microbatches * sc.model.num_layers * (looped.fwd_s + looped.bwd_s - plain.fwd_s - plain.bwd_s)
    without = _closed_form(sc, sc.model.num_layers, 0) - extra
    assert predict(sc, fast=True).breakdown_s["host_issue"] - without == pytest.approx(extra, rel=1e-9)


def test_host_issue_is_the_critical_stage_with_its_own_block_count():
    """Llama 3 8B's 32 blocks on 3 stages of 12, 10 and 10: the critical stage's own blocks, not 32 / 3."""
    from trainsim.simulator.builder import build_cost_table

    sc = _scenario({"framework": "megatron", "zero": 1}, gpus=24, layout={"tp": 8, "pp": 3, "stage_layers": [12, 10, 10]})
    pred = predict(sc, fast=True)
    crit = int(pred.breakdown_s["critical_stage"])
    layers = [sum(c.layers for c in st.chunks) for st in build_cost_table(sc).stages]
    assert layers == [12, 10, 10]
    assert pred.breakdown_s["host_issue"] == pytest.approx(_closed_form(sc, layers[crit], crit), rel=1e-12)


def test_megatron_moe_host_issue_is_every_block_pass():
    """Megatron-Core MoE blocks (cost_models.moe_issue): micro-batches x blocks x (forward + backward) host seconds;
    the optimizer step's issue is not modelled for MoE models (cost_models.step_host)."""
    from trainsim.cost_models.moe_issue import moe_block_issue

    sc = _scenario({"framework": "megatron"}, model="mixtral-8x7b")
    issue = moe_block_issue(sc)
    assert scenario_step_host(sc, 0) is None
    want = sc.num_microbatches * sc.model.num_layers * (issue.fwd_s + issue.bwd_s)
    assert predict(sc, fast=True).breakdown_s["host_issue"] == pytest.approx(want, rel=1e-12)


def test_no_host_issue_where_the_host_is_not_modelled_apart():
    pred = predict(_scenario({"framework": "deepspeed", "zero": 1}, model="mixtral-8x7b"), fast=True)
    assert pred.breakdown_s["host_issue"] == 0.0 and math.isfinite(pred.step_time_s)
