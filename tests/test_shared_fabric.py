"""Shared fabric (cluster.scale_out.background_load): other jobs' traffic takes a fraction f of each NIC and/or
spine link, and this job's scale-out collectives run at (1 - f) of those links, checked against closed forms."""

from __future__ import annotations

import json
import math

import pytest

from trainsim.cli.main import main
from trainsim.cost_models import nccl_model as nm
from trainsim.cost_models.collectives import clear_cache, collective_time
from trainsim.cost_models.contention import Flow, max_min_rates
from trainsim.simulator.builder import build_cost_table
from trainsim.simulator.predict import predict
from trainsim.specs import SpecError, build_scenario, load_cluster
from trainsim.specs.loaders import with_background_load
from trainsim.topologies import Fabric, GroupShape
from trainsim.topologies.fabric import NIC_EFFICIENCY, SCALE_UP_EFFICIENCY

GiB = 2**30


def _cluster(gpus: int, **load):
    base = load_cluster("dgx-h100", gpus)
    return with_background_load(base, load) if load else base


def _quiet_rates(cluster) -> tuple[float, float]:
    """(effective NVLink port, one node's 8 NICs) from the preset's line rates and the documented efficiencies."""
    su, so = cluster.scale_up, cluster.scale_out
    intra = su.bw_per_gpu_Bps * (su.efficiency or SCALE_UP_EFFICIENCY[su.kind])
    node = so.nics_per_node * so.nic_bw_Bps * (so.efficiency or NIC_EFFICIENCY)
    return intra, node


@pytest.mark.parametrize("f", [0.25, 0.5, 0.9])
def test_ring_all_reduce_across_nodes_matches_closed_form(f):
    """Ring all-reduce of 1 GiB on 2 DGX H100 nodes: 2(n-1)/n·S bytes (plus the pipeline fill) at the ring's
    bottleneck min(NVLink port, (1 - f) × the node's NICs); the latency term is untouched."""
    clear_cache()
    S, n = float(GiB), 16
    quiet = collective_time("all_reduce", S, 16, _cluster(16), algo="ring", protocol="Simple")
    shared = collective_time("all_reduce", S, 16, _cluster(16, nic=f), algo="ring", protocol="Simple")
    intra, node = _quiet_rates(_cluster(16))
    wire = 2 * (n - 1) / n * S
    fill = min(wire, nm.fill_bytes("Simple"))
    for res, bus in ((quiet, min(intra, node)), (shared, min(intra, (1 - f) * node))):
        assert res.time_s - res.latency_s == pytest.approx((wire + fill) / bus, rel=1e-12)
    assert shared.latency_s == quiet.latency_s


def test_intra_node_collectives_unaffected():
    """One node's all-reduce never leaves NVLink: identical at any background load."""
    clear_cache()
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        a = collective_time(op, 256.0 * 2**20, 8, _cluster(8))
        b = collective_time(op, 256.0 * 2**20, 8, _cluster(8, nic=0.7, spine=0.7))
        assert a == b


def test_zero_load_is_the_quiet_fabric_exactly():
    q, z = Fabric.of(_cluster(256)), Fabric.of(_cluster(256, nic=0.0, spine=0.0))
    for link in (("nic_out", 0, 0), ("up", ("leaf", 0, 0)), ("gpu_out", 0)):
        assert z.capacity(link) == q.capacity(link)


def test_tiers_scale_their_own_links():
    """nic scales NIC links only, spine the leaf up/down links only; NVLink never."""
    q = Fabric.of(_cluster(256))
    nic = Fabric.of(_cluster(256, nic=0.3))
    spine = Fabric.of(_cluster(256, spine=0.6))
    up = ("up", ("leaf", 0, 0))
    assert nic.capacity(("nic_out", 0, 0)) == pytest.approx(0.7 * q.capacity(("nic_out", 0, 0)), rel=1e-15)
    assert nic.capacity(up) == q.capacity(up)
    assert spine.capacity(up) == pytest.approx(0.4 * q.capacity(up), rel=1e-15)
    assert spine.capacity(("nic_in", 3, 2)) == q.capacity(("nic_in", 3, 2))
    for fab in (nic, spine):
        assert fab.capacity(("gpu_out", 5)) == q.capacity(("gpu_out", 5))


def test_background_matches_max_min_sharing_with_the_other_jobs_flow():
    """The physical model, on the quiet fabric through the contention module: another job's flow limited
    elsewhere to f·C (f below the fair half) shares a NIC with this job's flow; max-min fairness leaves this
    job (1 - f)·C, which is the loaded fabric's capacity for this job's flow alone. An elastic competitor
    (no limit of its own) takes the fair half instead: stated as f = 1 - 1/2."""
    quiet = Fabric.of(_cluster(16))
    link = ("nic_out", 0, 0)
    c = quiet.capacity(link)
    job = Flow((link,))
    for f, other in ((0.3, Flow((link,), max_rate_Bps=0.3 * c)), (0.5, Flow((link,)))):
        shared = Fabric.of(_cluster(16, nic=f))
        rates = max_min_rates([job, other], quiet.capacity)
        assert rates[0] == pytest.approx((1 - f) * c, rel=1e-12)
        assert max_min_rates([job], shared.capacity)[0] == pytest.approx(rates[0], rel=1e-12)


@pytest.mark.parametrize("nic,spine", [(0.5, 0.0), (0.0, 0.5), (0.2, 0.7)])
def test_p2p_across_leaves_runs_at_the_busier_tier(nic, spine):
    """A send between node 0 and the first node of the next leaf group (32 nodes per leaf in the preset) crosses
    its NIC and the spine: rate = one GPU's NIC × (1 - max(f_nic, f_spine)) at oversubscription 1."""
    clear_cache()
    cl = _cluster(512, nic=nic, spine=spine)
    fab = Fabric.of(cl)
    assert fab.nodes_per_leaf == 32 and fab.oversubscription == 1.0
    g = GroupShape.of_ranks((0, 32 * 8), fab)
    assert g.cross_leaf
    res = collective_time("send_recv", float(GiB), g, cl)
    nic_gpu = cl.scale_out.nic_bw_Bps * NIC_EFFICIENCY * cl.scale_out.nics_per_node / cl.gpus_per_node
    assert res.rate_Bps == pytest.approx(nic_gpu * (1 - max(nic, spine)), rel=1e-12)


@pytest.mark.parametrize("f", [0.3, 0.75])
def test_engine_dp_buckets_slow_by_one_over_one_minus_f(f):
    """Llama 3 8B, TP 8 on 4 nodes: each DP group has one rank per node, so its all-reduce crosses only NICs and
    every gradient bucket's bandwidth term is 1/(1 - f) longer; its latency is unchanged."""
    raw = {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 32, "layout": {"tp": 8},
           "training": {"seq_len": 4096, "global_batch": 32, "micro_batch": 1}}
    quiet = build_cost_table(build_scenario(raw))
    shared = build_cost_table(build_scenario(raw, {"background_load": {"nic": f}}))
    qb = [b for st in quiet.stages for c in st.chunks for b in c.grad_buckets]
    sb = [b for st in shared.stages for c in st.chunks for b in c.grad_buckets]
    assert len(qb) == len(sb) > 0
    for a, b in zip(qb, sb):
        assert b.transfer_s == pytest.approx(a.transfer_s / (1 - f), rel=1e-12)
        assert b.latency_s == a.latency_s


def test_predict_zero_load_identical_and_load_slows_dp():
    raw = {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 64, "layout": {"tp": 2},
           "training": {"seq_len": 8192, "global_batch": 512, "micro_batch": 1, "distributed_optimizer": True}}
    base = predict(build_scenario(raw)).to_json()
    zero = predict(build_scenario(raw, {"background_load": {"nic": 0.0, "spine": 0.0}})).to_json()
    loaded = predict(build_scenario(raw, {"background_load": {"nic": 0.5, "spine": 0.5}})).to_json()
    strip = ("engine",)
    assert {k: v for k, v in zero.items() if k not in strip} == {k: v for k, v in base.items() if k not in strip}
    assert base["background_load"] == {"nic": 0.0, "spine": 0.0}
    assert loaded["background_load"] == {"nic": 0.5, "spine": 0.5}
    assert loaded["exposed_comm_s"]["dp"] > base["exposed_comm_s"]["dp"]
    assert loaded["step_time_s"] > base["step_time_s"]
    assert loaded["exposed_comm_s"]["tp"] == base["exposed_comm_s"]["tp"]  # TP 2 stays on NVLink


def test_scenario_key_single_number_sets_both_tiers():
    cl = load_cluster({"preset": "dgx-h100", "scale_out": {"background_load": 0.25}}, 16)
    assert (cl.scale_out.background_load.nic, cl.scale_out.background_load.spine) == (0.25, 0.25)


@pytest.mark.parametrize("bad,field", [({"nic": 1.0}, "background_load.nic"), ({"spine": -0.1}, "background_load.spine"),
                                       ({"nic": math.nan}, "background_load.nic"), ({"leaf": 0.2}, "background_load.leaf"),
                                       ({"nic": True}, "background_load.nic")])
def test_bad_scenario_values_refused(bad, field):
    with pytest.raises(SpecError) as e:
        load_cluster({"preset": "dgx-h100", "scale_out": {"background_load": bad}}, 16)
    assert field in str(e.value)


@pytest.mark.parametrize("value,field", [("1", "background_load.nic"), ("-0.2", "background_load.nic"),
                                         ("nan", "background_load.nic"), ("spine:1.5", "background_load.spine"),
                                         ("leaf:0.2", "unknown tier 'leaf'"), ("nic:x", "background_load.nic")])
def test_bad_flag_values_exit_2_one_line(value, field, capsys):
    code = main(["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16",
                 f"--background-load={value}"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and field in err and "--background-load" in err


def test_predict_cli_json_and_text_state_the_load(capsys):
    args = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--seq-len", "4096",
            "--global-batch", "32", "--micro-batch", "1", "--background-load", "nic:0.3,spine:0.6"]
    assert main(args + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["background_load"] == {"nic": 0.3, "spine": 0.6}
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "30% of each NIC" in out and "60% of the spine" in out


def test_collective_cli_shows_the_slowdown(capsys):
    args = ["collective", "--cluster", "dgx-h100", "--gpus", "16", "--sizes", "1G", "--algo", "ring",
            "--protocol", "Simple", "--json"]
    assert main(args) == 0
    quiet = json.loads(capsys.readouterr().out)[0]
    assert main(args + ["--background-load", "nic:0.5"]) == 0
    shared = json.loads(capsys.readouterr().out)[0]
    intra, node = _quiet_rates(_cluster(16))
    assert shared["background_load"] == {"nic": 0.5, "spine": 0.0}
    assert shared["bandwidth_s"] / quiet["bandwidth_s"] == pytest.approx(min(intra, node) / min(intra, node / 2),
                                                                         rel=1e-9)
    assert shared["latency_s"] == quiet["latency_s"]


def test_measured_fit_on_shared_fabric_refused():
    """A calibration profile's measured collective fit cannot be split into the part other jobs slow."""

    class _Fit:
        alpha_s, beta_s_per_byte = 1e-5, 1e-11

        def time_s(self, nbytes):
            return self.alpha_s + self.beta_s_per_byte * nbytes

    class _Profile:
        def collective_fit(self, op, size, nodes):
            return _Fit()

    clear_cache()
    assert collective_time("all_reduce", 1e9, 16, _cluster(16), profile=_Profile()).algo == "measured"
    with pytest.raises(SpecError, match="background_load"):
        collective_time("all_reduce", 1e9, 16, _cluster(16, nic=0.2), profile=_Profile())
    # Inside one node the fit stays valid: nothing there is shared.
    assert collective_time("all_reduce", 1e9, 8, _cluster(8, nic=0.2), profile=_Profile()).algo == "measured"
