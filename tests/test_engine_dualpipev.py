"""DualPipeV (schedule ``dualpipev``): op order, bubble and memory against DeepSeek-V3's Table 2.

pipeline_bubble.csv rows f_ds_1F1B and f_ds_DualPipe (DeepSeek-V3 Sec. 3.2.1, Table 2): with PP pipeline
stages, 1F1B's bubble is (PP-1)(F+B) and its activation memory PP; DualPipe's bubble is (PP/2-1)(F&B+B-3W)
and its activation memory PP+1, where F, B (full backward) and W are the times of one chunk and F&B of an
overlapped forward+backward pair. DualPipeV is the same schedule folded into a V on PP/2 ranks (each rank
holds two of the PP virtual stages), so with p ranks PP = 2p, and its parameters per rank are those of
1F1B on the same p ranks (1x) instead of DualPipe's 2x. The engine models F&B = F + B (no overlap gain).
"""

from __future__ import annotations

import csv

import pytest

from trainsim.cost_models import memory
from trainsim.data import validation_path
from trainsim.simulator.analytic import estimate
from trainsim.simulator.costtable import uniform_table
from trainsim.simulator.engine import simulate
from trainsim.simulator.predict import predict
from trainsim.simulator.schedules import BW, B, F, W, check_schedule, dualpipev, pair_heads
from trainsim.specs import SpecError, build_scenario


def _row(row_id: str) -> dict:
    with open(validation_path("pipeline_bubble.csv"), newline="") as fh:
        return next(r for r in csv.DictReader(fh) if r["row_id"] == row_id)


def _dualpipev_bubble(p: int, f: float, b_in: float, w: float) -> float:
    """f_ds_DualPipe: (PP/2-1)(F&B + B - 3W) with PP = 2p, B the full backward b_in + w, F&B = F + B."""
    assert _row("f_ds_DualPipe")["bubble_formula"].startswith("(PP/2-1)(F&B+B-3W)")
    pp = 2 * p
    b_full = b_in + w
    return (pp / 2 - 1) * ((f + b_full) + b_full - 3 * w)


def _one_f_one_b_bubble(p: int, f: float, b_full: float) -> float:
    """f_ds_1F1B: (PP-1)(F+B), here with one stage per rank."""
    assert _row("f_ds_1F1B")["bubble_formula"].startswith("(PP-1)(F+B)")
    return (p - 1) * (f + b_full)


def test_op_order_is_torch_schedule_dualpipev():
    # The op lists are torch's ScheduleDualPipeV._calculate_single_rank_operations, overlapped pairs expanded.
    torch = pytest.importorskip("torch")
    del torch
    from torch.distributed.pipelining.schedules import ScheduleDualPipeV
    from torch.distributed.pipelining.schedules import _ComputationType as CT

    kinds = {CT.FORWARD: F, CT.FULL_BACKWARD: BW, CT.BACKWARD_INPUT: B, CT.BACKWARD_WEIGHT: W}
    for p, m in [(2, 4), (3, 7), (4, 8), (4, 11), (8, 16), (8, 21)]:
        sched = object.__new__(ScheduleDualPipeV)
        sched.pp_group_size, sched._n_microbatches = p, m
        heads = pair_heads("dualpipev", p, m, 2)
        for r, ours in enumerate(dualpipev(p, m)):
            theirs, pairs = [], set()
            for a in sched._calculate_single_rank_operations(r):
                if a.computation_type == CT.OVERLAP_F_B:
                    pairs.add(len(theirs))
                subs = a.sub_actions if a.computation_type == CT.OVERLAP_F_B else (a,)
                theirs += [(kinds[x.computation_type], x.microbatch_index, 0 if x.stage_index == r else 1)
                           for x in subs]
            assert ours == theirs, (p, m, r)
            assert heads[r] == pairs


@pytest.mark.parametrize("p,m", [(2, 4), (3, 6), (4, 9), (8, 16), (8, 37)])
def test_schedule_is_complete(p, m):
    check_schedule(dualpipev(p, m), m, 2)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 10), (8, 16), (8, 20), (8, 64), (16, 40)])
def test_bubble_equals_deepseek_formula(p, m):
    # F = B = W per chunk (t = 1): the idle time of every rank is (PP/2-1)(F&B+B-3W) = 2(p-1), constant in m
    # (f_ds_DualPipe notes: "bubbles/activation do not grow with micro-batches"); 1F1B on the same ranks
    # (a stage = 2 chunks, F = 2, B = 4) idles (p-1)(F+B) = 6(p-1), three times more.
    t = 1.0
    dv = simulate(uniform_table(p, m, vpp=2, fwd_s=2 * t, bwd_input_s=2 * t, bwd_weight_s=2 * t, schedule="dualpipev"))
    one = simulate(uniform_table(p, m, fwd_s=2 * t, bwd_input_s=2 * t, bwd_weight_s=2 * t, schedule="1f1b"))
    ideal = m * 2 * 3 * t
    assert dv.step_time_s - ideal == pytest.approx(_dualpipev_bubble(p, t, t, t))
    assert one.step_time_s - ideal == pytest.approx(_one_f_one_b_bubble(p, 2 * t, 4 * t))
    for tl in dv.stages:
        assert tl.bubble_s == pytest.approx(_dualpipev_bubble(p, t, t, t))
    # The closed form (--fast) is the same formula.
    assert estimate(uniform_table(p, m, vpp=2, fwd_s=2, bwd_input_s=2, bwd_weight_s=2,
                                  schedule="dualpipev")).step_time_s == pytest.approx(dv.step_time_s)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (8, 20), (16, 32)])
def test_activation_memory_pp_plus_one(p, m):
    # f_ds_DualPipe: PP+1 chunk activations per rank (every rank, PP = 2p) vs f_ds_1F1B's PP on the first
    # stage of 1F1B (p micro-batches of a 2-chunk stage): (2p+1)/(2p) of 1F1B. The timeline gives it; the
    # memory cost model and the closed form agree.
    assert _row("f_ds_DualPipe")["activation_memory_rel"] == "PP+1"
    assert _row("f_ds_1F1B")["activation_memory_rel"] == "PP"
    stage_act = 2.0  # one micro-batch of one rank's layers; a chunk holds half
    tab = uniform_table(p, m, vpp=2, act_bytes=stage_act, w_retained_bytes=0.9 * stage_act, schedule="dualpipev")
    dv = simulate(tab)
    one = simulate(uniform_table(p, m, act_bytes=stage_act, schedule="1f1b"))
    chunk = stage_act / 2
    assert [tl.act_peak_bytes for tl in dv.stages] == pytest.approx([(2 * p + 1) * chunk] * p)
    assert dv.stages[0].act_peak_bytes / one.stages[0].act_peak_bytes == pytest.approx((2 * p + 1) / (2 * p))
    assert estimate(tab).stages[0].act_peak_bytes == pytest.approx(dv.stages[0].act_peak_bytes)
    assert memory.inflight_microbatches("dualpipev", p, m, 0, 2) == pytest.approx((2 * p + 1) / 2)


@pytest.mark.parametrize("f,b,w", [(1.0, 1.0, 1.0), (1.0, 1.2, 0.7), (1.0, 2.0, 1.0), (1.3, 1.0, 0.9),
                                   (1.0, 1.0, 1.5), (0.5, 1.0, 1.0), (2.0, 0.5, 0.2), (3.0, 1.0, 1.0),
                                   (1.0, 3.0, 0.5), (1.0, 1.0, 3.0)])
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (6, 13), (8, 20), (8, 64)])
def test_never_slower_than_1f1b(f, b, w, p, m):
    # Same ranks, same per-rank work, ideal network: DualPipeV's fill/drain is never longer than 1F1B's
    # (the f_ds_* formulas: (p-1)(F&B+B-3W) per chunk <= (p-1)(F+B) per stage). The closed form (the formula
    # with B generalised to max(F, B), at least 2F) stays within 3 % of the engine when F, B, W differ.
    dv_tab = uniform_table(p, m, vpp=2, fwd_s=f, bwd_input_s=b, bwd_weight_s=w, schedule="dualpipev")
    dv = simulate(dv_tab)
    one = simulate(uniform_table(p, m, fwd_s=f, bwd_input_s=b, bwd_weight_s=w, schedule="1f1b"))
    assert dv.step_time_s <= one.step_time_s + 1e-9
    assert dv.step_time_s >= m * (f + b + w) - 1e-9
    assert estimate(dv_tab).step_time_s == pytest.approx(dv.step_time_s, rel=0.03)


def _scenario(**training):
    return build_scenario({"model": "llama3-70b", "cluster": "dgx-h100", "gpus": 64,
                           "layout": {"tp": 8, "pp": 4, "vpp": 2},
                           "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1,
                                        "schedule": "dualpipev", **training}})


def test_real_scenario_v_placement_and_params():
    # The V: rank 0 holds virtual stages 0 and 2p-1 (embedding and loss); parameters per rank are 1F1B's
    # on the same ranks (1x), not DualPipe's 2x (f_ds_DualPipe is the bidirectional variant).
    s = _scenario()
    one = build_scenario({"model": "llama3-70b", "cluster": "dgx-h100", "gpus": 64, "layout": {"tp": 8, "pp": 4},
                          "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1}})
    assert [s.virtual_stage(r, 1) for r in range(4)] == [7, 6, 5, 4]
    assert s.loss_stage == 0
    assert s.layers_on_stage(1) == one.layers_on_stage(1)
    dv_w = [memory.stage_memory(s, r).weights for r in range(4)]
    one_w = [memory.stage_memory(one, r).weights for r in range(4)]
    assert sum(dv_w) == pytest.approx(sum(one_w))
    assert dv_w[1] == pytest.approx(one_w[1])
    assert dv_w[0] == pytest.approx(one_w[0] + one_w[3] - one_w[1])


def test_real_scenario_engine_and_fast():
    s = _scenario()
    one = build_scenario({"model": "llama3-70b", "cluster": "dgx-h100", "gpus": 64, "layout": {"tp": 8, "pp": 4},
                          "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1}})
    dv_ideal = predict(s, ideal_network=True)
    one_ideal = predict(one, ideal_network=True)
    assert dv_ideal.step_time_s < one_ideal.step_time_s
    eng, fast = predict(s), predict(s, fast=True)
    assert fast.step_time_s == pytest.approx(eng.step_time_s, rel=0.05)
    assert eng.bubble_fraction < predict(one).bubble_fraction


@pytest.mark.parametrize("layout,training,field", [
    ({"tp": 8, "pp": 4}, {}, "layout.vpp"),
    ({"tp": 8, "pp": 4, "vpp": 4}, {}, "layout.vpp"),
    ({"tp": 8, "pp": 4, "vpp": 2}, {"global_batch": 4}, "training.global_batch"),
    ({"tp": 8, "pp": 1, "vpp": 2}, {}, "training.schedule"),
])
def test_invalid_layouts_name_the_field(layout, training, field):
    with pytest.raises(SpecError) as ei:
        build_scenario({"model": "llama3-70b", "cluster": "dgx-h100", "gpus": 64, "layout": layout,
                        "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1,
                                     "schedule": "dualpipev", **training}})
    assert ei.value.field == field


def test_executor_refuses_dualpipev():
    # The executor does not build the V-shaped stage split, so it says so instead of running something else.
    from trainsim.kernels.exec_config import check_job, make_job

    s = build_scenario({"model": "llama3-70b", "cluster": "dgx-h100", "gpus": 64,
                        "layout": {"tp": 8, "pp": 4, "vpp": 2},
                        "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1,
                                     "schedule": "dualpipev", "dtype": "bf16"}})
    with pytest.raises(SpecError) as ei:
        check_job(make_job(s, device="cuda"))
    assert ei.value.field == "training.schedule"
    assert "dualpipev" in ei.value.reason
