"""Host op counts of fine-grained MoE blocks (cost_models.host) written out by hand, and when predict warns of a
host-bound risk the step leaves out or reports the host idle the step includes."""

from __future__ import annotations

import pytest

from trainsim.cost_models.host import HOST_LOOP_OP_S, HOST_OP_S, moe_block_host_passes
from trainsim.cost_models.shapes import layer_shape
from trainsim.simulator.predict import predict
from trainsim.specs import build_scenario


def scen(model="qwen3-30b-a3b", cluster="dgx-b200", gpus=8, layout=None, **training):
    training.setdefault("seq_len", 4096)
    training.setdefault("global_batch", 512)
    training.setdefault("micro_batch", 1)
    return build_scenario({"model": {"preset": model} if isinstance(model, str) else model, "cluster": cluster,
                           "gpus": gpus, "layout": {"ep": 8} if layout is None else layout,
                           "training": training})


def test_counts_closed_form():
    """Qwen3-30B-A3B, ep 8: 128 / 8 = 16 local experts, no shared expert. Eager ops: attention 15 + 25, MoE 45 + 40;
    per expert 2 + 4 GEMM launches, under fp8 one quantize per GEMM input more (2 + 2)."""
    bf16 = moe_block_host_passes(layer_shape(scen()))
    assert (bf16.python_ops, bf16.loop_ops) == (15 + 45 + 25 + 40, 16 * (2 + 4))
    assert bf16.seconds == pytest.approx(125 * 13.5e-6 + 96 * 5e-6)
    fp8 = moe_block_host_passes(layer_shape(scen(dtype="fp8")))
    assert fp8.loop_ops == 16 * (4 + 6)
    grace = moe_block_host_passes(layer_shape(scen()), "grace")
    assert grace.seconds == pytest.approx(125 * HOST_OP_S["grace"] + 96 * HOST_LOOP_OP_S["grace"])


def test_recompute_issues_the_forward_again():
    base = moe_block_host_passes(layer_shape(scen()))
    full = moe_block_host_passes(layer_shape(scen(recompute="full")))
    assert full.python_ops - base.python_ops == 15 + 45
    assert full.loop_ops - base.loop_ops == 16 * 2
    moe = moe_block_host_passes(layer_shape(scen(recompute="selective", recompute_modules=["moe"])))
    assert moe.python_ops - base.python_ops == 45 and moe.loop_ops - base.loop_ops == 16 * 2


def test_shared_expert_adds_a_dense_mlp():
    s = scen("deepseek-v2-lite", layout={"ep": 8}, global_batch=64)
    shp = layer_shape(s)
    assert shp.fs and shp.experts == 64
    got = moe_block_host_passes(shp)
    assert got.python_ops == 15 + 45 + 6 + 25 + 40 + 10 and got.loop_ops == 8 * 6
    moe = moe_block_host_passes(layer_shape(scen("deepseek-v2-lite", layout={"ep": 8}, global_batch=64,
                                                recompute="selective", recompute_modules=["moe"])))
    assert moe.python_ops - got.python_ops == 45 + 6 and moe.loop_ops - got.loop_ops == 8 * 2
    shared = moe_block_host_passes(layer_shape(scen("deepseek-v2-lite", layout={"ep": 8}, global_batch=64,
                                                   recompute="selective", recompute_modules=["shared_experts"])))
    assert shared.python_ops - got.python_ops == 6 and shared.loop_ops == got.loop_ops


def _host_bound_warnings(scenario) -> list[str]:
    return [w for w in predict(scenario, fast=True).warnings if "host-bound risk" in w]


def test_warning_only_where_the_step_leaves_the_host_out():
    """A Megatron-Core MoE model's host issue is in the step (cost_models.moe_issue), and so is a hybrid Mamba
    stack's (cost_models.hybrid_issue): predict adds the estimate's warning for neither -- Nemotron 3 Nano at
    micro-batch 1 on 8 B200 carries its host issue in the step's breakdown instead."""
    assert _host_bound_warnings(scen(dtype="fp8")) == []
    nano = scen("nemotron-3-nano-30b-a3b", dtype="fp8")
    p = predict(nano, fast=True)
    assert "host-bound risk" not in " ".join(p.warnings) and p.breakdown_s["host_issue"] > 0


def test_no_warning_for_dense_models_other_frameworks_or_cpu_ranks():
    assert _host_bound_warnings(scen("llama3-8b", layout={}, global_batch=64)) == []
    assert _host_bound_warnings(scen(framework="torch")) == []
    tiny = {"name": "tiny-moe", "num_layers": 2, "hidden": 64, "num_heads": 4, "ffn_hidden": 128, "vocab_size": 256,
            "num_experts": 8, "top_k": 2, "max_seq_len": 128}
    assert _host_bound_warnings(scen(tiny, cluster="cpu-host", gpus=2, layout={"ep": 2}, seq_len=128,
                                     global_batch=4, dtype="fp32")) == []


def test_plan_rows_carry_the_host_idle_and_the_table_prints_it():
    """A plan of Qwen3-30B on 8 B200 ranks layouts whose experts all sit on one GPU (ep 1: 128 local experts, 1,280
    launches per block); their rows carry the GPU's idle wait for the host and `trainsim plan` prints it under the
    table."""
    import io

    from trainsim.cli.plan import print_table
    from trainsim.simulator.planner import PlanRequest, plan
    from trainsim.simulator.search_space import SearchLimits
    from trainsim.specs import load_cluster, load_model
    req = PlanRequest(model=load_model("qwen3-30b-a3b"), cluster=load_cluster("dgx-b200"), gpu_counts=(8,),
                      global_batch=512, seq_len=4096, top_k=2,
                      limits=SearchLimits(dtype="fp8", fixed={"tp": 1, "pp": 1, "cp": 1, "ep": 1, "micro_batch": 4}))
    res = plan(req)
    marker = "GPU idle waiting for the host"
    assert res.rows and all(any(marker in w for w in r.warnings) for r in res.rows if r.fits)
    assert res.rows[0].to_json()["warnings"]
    out = io.StringIO()
    print_table(res, out)
    assert "note (#1" in out.getvalue() and marker in out.getvalue()
