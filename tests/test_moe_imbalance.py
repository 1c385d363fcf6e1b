"""MoE routing imbalance (training.moe_imbalance / moe_load_cv / moe_capacity_factor, cost_models/moe_balance.py)
against closed forms: the most loaded EP rank's expert GEMMs, all-to-all bytes and expert activations scale by the
factor, a capacity factor caps it, even routing changes nothing, bad values are refused with one line."""

from __future__ import annotations

import json

import pytest

from trainsim.cli.main import main
from trainsim.cost_models.activations import layer_activation_bytes
from trainsim.cost_models.collectives import collective_time
from trainsim.cost_models.compute import layer_op_times
from trainsim.cost_models.flops import layer_ops
from trainsim.cost_models.model_flops import hardware_flops_per_step, model_flops_per_step
from trainsim.cost_models.moe_balance import moe_load_factor
from trainsim.cost_models.shapes import layer_shape
from trainsim.simulator.block import _ep_exposed
from trainsim.specs import SpecError, build_scenario
from trainsim.topologies.placement import place

SEQ = 4096


def scen(**training):
    """Mixtral 8x7B (k = 2, 8 experts) on 8 H100s, ep 8: one expert per rank, T·k = 8192 routed tokens."""
    training = {"micro_batch": 1, "seq_len": SEQ, "global_batch": 8, **training}
    return build_scenario({"model": {"preset": "mixtral-8x7b"}, "cluster": "dgx-h100", "gpus": 8,
                           "layout": {"ep": 8}, "training": training})


def expert_ops(s):
    return {op.name: op for op in layer_ops(s) if op.name.startswith("expert_fc")}


def test_even_routing_is_the_balanced_model():
    s = scen()
    assert layer_shape(s).moe_load == 1.0
    assert layer_shape(s).routed_tokens == SEQ * 2
    assert layer_shape(scen(moe_imbalance=1.0)).routed_tokens == SEQ * 2


@pytest.mark.parametrize("f", [1.25, 2.0])
def test_expert_gemm_flops_and_time_scale_by_the_factor(f):
    even, skew = scen(), scen(moe_imbalance=f)
    for name, op in expert_ops(even).items():
        assert expert_ops(skew)[name].fwd_flops == pytest.approx(f * op.fwd_flops, rel=1e-12)
    t0 = {o.name: o for o in layer_op_times(even)}
    t1 = {o.name: o for o in layer_op_times(skew)}
    for name in ("expert_fc1", "expert_fc2"):  # large GEMMs: the roofline's efficiency barely moves with m
        assert t1[name].fwd_s == pytest.approx(f * t0[name].fwd_s, rel=0.01)
    assert t1["qkv"].fwd_s == t0["qkv"].fwd_s  # attention is not routed


def test_the_all_to_all_of_the_most_loaded_rank_carries_factor_times_the_bytes():
    s = scen(moe_imbalance=1.5)
    group = place(s).group("ep")
    a2a = collective_time("all_to_all", 2 * SEQ * 2 * s.model.hidden * 1.5, group, s.cluster).time_s
    ep_f, ep_b, _, _ = _ep_exposed(s, {"ep": group}, None)
    assert ep_f == pytest.approx(2 * a2a, rel=1e-12)  # dispatch + combine
    assert ep_b == pytest.approx(2 * a2a, rel=1e-12)


def test_expert_activation_memory_scales_affinely_with_the_factor():
    """Expert activations are linear in the routed tokens: bytes(f) - bytes(1) = (f - 1) (bytes(2) - bytes(1)),
    and the expert part at f = 2 holds at least the dispatched input and the output, 2·(T·k)·h·e bytes."""
    b1, b2, b15 = (layer_activation_bytes(scen(moe_imbalance=f)).total for f in (1.0, 2.0, 1.5))
    assert b15 - b1 == pytest.approx(0.5 * (b2 - b1), rel=1e-9)
    assert b2 - b1 >= 2 * (SEQ * 2) * scen().model.hidden * 2


def test_dropless_spread_uses_the_expected_maximum_of_ep_normals():
    # E[max of 8 standard normals] = 1.4236 (Harter 1961); cv 0.1 -> 1.14236
    assert moe_load_factor(8, cv=0.1) == pytest.approx(1.0 + 0.1 * 1.42360, abs=1e-5)
    assert layer_shape(scen(moe_load_cv=0.1)).moe_load == pytest.approx(1.14236, abs=1e-5)
    assert moe_load_factor(1, cv=0.5) == 1.0  # one EP rank: nothing to be uneven


@pytest.mark.parametrize("c, expected", [(1.05, 1.05), (1.25, 1.0 + 0.1 * 1.42360), (1.0, 1.0)])
def test_a_capacity_factor_caps_the_load(c, expected):
    assert layer_shape(scen(moe_load_cv=0.1, moe_capacity_factor=c)).moe_load == pytest.approx(expected, abs=1e-5)
    assert moe_load_factor(8, imbalance=3.0, capacity_factor=c) == c


def test_predict_json_states_the_factor(capsys):
    assert main(["predict", "examples/mixtral-8x7b-h100.yaml", "--moe-imbalance", "1.2", "--json", "--fast"]) == 0
    assert json.loads(capsys.readouterr().out)["moe_imbalance"] == 1.2


@pytest.mark.parametrize("flags, field", [
    (["--moe-imbalance", "-1"], "training.moe_imbalance"),
    (["--moe-imbalance", "nan"], "training.moe_imbalance"),
    (["--moe-imbalance", "9"], "training.moe_imbalance"),       # > ep = 8
    (["--moe-load-cv", "1.5"], "training.moe_load_cv"),
    (["--moe-load-cv", "-0.1"], "training.moe_load_cv"),
    (["--moe-capacity-factor", "0"], "training.moe_capacity_factor"),
    (["--moe-imbalance", "1.2", "--moe-load-cv", "0.1"], "training"),
])
def test_bad_values_are_refused_with_one_line(flags, field, capsys):
    assert main(["predict", "examples/mixtral-8x7b-h100.yaml", *flags]) == 2
    err = capsys.readouterr().err.strip()
    # a flag's own range is checked by argparse (naming the flag), the rest by the spec (naming the field)
    assert len(err.splitlines()) == 1 and (field in err or f"argument {flags[0]}" in err), err


def test_a_load_spread_needs_more_than_one_ep_rank(capsys):
    """moe_load_cv spreads the tokens between EP ranks (1 + cv * E[max of ep standard normals]); at ep=1 the one
    rank's load is the mean whatever cv says, so it is refused as moe_imbalance above 1 is, not ignored."""
    assert moe_load_factor(1, cv=0.5) == 1.0
    base = ["predict", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "16", "--tp", "2",
            "--sequence-parallel"]
    assert main([*base, "--ep", "1", "--moe-load-cv", "0.5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: training.moe_load_cv: 0.5 is a spread of the tokens "
                                                    "between EP ranks")
    assert main([*base, "--ep", "1", "--moe-imbalance", "1.5"]) == 2
    assert capsys.readouterr().err.startswith("error: training.moe_imbalance: 1.5 exceeds ep=1")
    assert main([*base, "--ep", "2", "--moe-load-cv", "0.5", "--json", "--fast"]) == 0
    assert json.loads(capsys.readouterr().out)["moe_imbalance"] == pytest.approx(moe_load_factor(2, cv=0.5))


def test_a_dense_model_refuses_routing_settings():
    with pytest.raises(SpecError, match="training.moe_imbalance"):
        build_scenario({"model": {"preset": "llama3-8b"}, "cluster": "dgx-h100", "gpus": 8,
                        "training": {"moe_imbalance": 1.2}})
    assert moe_load_factor(2) == 1.0


@pytest.mark.parametrize("c", [0.1, 0.5, 0.99])
def test_a_capacity_factor_below_one_drops_its_share_of_the_expert_flops(c):
    """Below c = 1 every expert drops 1 - c of its routed tokens even under even routing: model and hardware
    FLOPs lose exactly that share of the experts' SwiGLU GEMMs, 2 x 3 matmuls of h x f per routed token, three
    passes (forward, input and weight gradient), k = 2 experts per token, 32 layers; so MFU stays below 100 %."""
    h, f, k, layers, tokens = 4096, 14336, 2, 32, 8 * SEQ
    expert = 3 * (2 * 3 * h * f) * k * layers * tokens
    dropless, capped = scen(), scen(moe_capacity_factor=c)
    assert model_flops_per_step(dropless) - model_flops_per_step(capped) == pytest.approx((1 - c) * expert)
    assert hardware_flops_per_step(dropless) - hardware_flops_per_step(capped) == pytest.approx((1 - c) * expert)
    assert model_flops_per_step(scen(moe_capacity_factor=1.5)) == model_flops_per_step(dropless)


def test_mfu_stays_below_one_with_a_small_capacity_factor(capsys):
    assert main(["predict", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "8", "--ep", "8",
                 "--moe-capacity-factor", "0.1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert 0 < out["mfu"] <= out["hfu"] < 1


def test_the_mtp_modules_experts_drop_the_same_share():
    """DeepSeek-V3's MTP module runs a MoE block of its own: at c = 0.5 it loses half of its experts' GEMMs too,
    so the step's loss with one MTP depth is (58 + 1) / 58 of the loss without (58 MoE blocks, 3 dense ones)."""
    def lost(mtp: int) -> float:
        def scn(**t):
            return build_scenario({"model": {"preset": "deepseek-v3", "mtp_layers": mtp}, "cluster": "dgx-h100",
                                   "gpus": 64, "layout": {"ep": 64},
                                   "training": {"micro_batch": 1, "seq_len": 4096, "global_batch": 64, **t}})
        return model_flops_per_step(scn()) - model_flops_per_step(scn(moe_capacity_factor=0.5))
    assert lost(1) == pytest.approx(lost(0) * 59 / 58, rel=1e-12)


def test_a_plan_with_a_load_spread_keeps_its_one_rank_expert_layouts():
    """The spread is the run's measured figure; a plan compares layouts without EP too, where it changes nothing
    (E[max of one normal] = 0), so its ep=1 candidates run without it instead of being refused one by one."""
    from trainsim.simulator.planner import PlanRequest, plan
    from trainsim.simulator.search_space import SearchLimits
    from trainsim.specs import load_cluster, load_model
    lim = SearchLimits(max_micro_batch=1, fixed={"tp": 2, "pp": 4, "sequence_parallel": True},
                       training_extra={"moe_load_cv": 0.3})
    res = plan(PlanRequest(model=load_model("mixtral-8x7b"), cluster=load_cluster("dgx-h100"), gpu_counts=(16,),
                           global_batch=64, seq_len=4096, limits=lim, top_k=20))
    assert res.counts["invalid"] == 0
    assert any(r.candidate.ep == 1 for r in res.screened_top) and any(r.candidate.ep > 1 for r in res.screened_top)
