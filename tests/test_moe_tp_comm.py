"""Communication of MoE blocks inside the tensor-parallel ranks, and of selectively recomputed TP modules,
against the collectives written out here from Megatron-Core's data flow (MoEAlltoAllTokenDispatcher with
sequence parallelism; tensor_parallel.checkpoint of a whole module), priced by the collective model itself."""

from __future__ import annotations

import pytest

from trainsim.cost_models.collectives import collective_time
from trainsim.simulator.builder import _block
from trainsim.specs import build_scenario, load_model
from trainsim.topologies.placement import place


def scen(model, gpus, layout, **training):
    training.setdefault("micro_batch", 1)
    training.setdefault("seq_len", 4096)
    training.setdefault("global_batch", gpus)
    return build_scenario({"model": model, "cluster": "dgx-h100", "gpus": gpus, "layout": layout,
                           "training": training})


def groups_of(s):
    pl = place(s)
    return {d: (pl.group(d) if getattr(s.layout, d) > 1 else None) for d in ("tp", "cp", "ep", "dp")}


def coll(op, nbytes, group, s):
    return collective_time(op, nbytes, group, s.cluster).time_s


@pytest.mark.parametrize("layout, members", [
    ({"tp": 2, "ep": 4}, [0, 1]),                  # etp = tp: the whole TP group
    ({"tp": 4, "ep": 4, "etp": 2}, [0, 2]),         # 2 of the 4 TP ranks folded into EP (innermost), 2 split experts
    ({"tp": 4, "ep": 8, "etp": 1}, [0]),            # all TP ranks folded: whole experts
    ({"tp": 4, "ep": 2, "etp": 1}, [0]),            # partial folding: the other TP half is expert-data parallel
])
def test_expert_tp_group_members(layout, members):
    s = scen({"preset": "mixtral-8x7b"}, 32, layout, sequence_parallel=True)
    pl = place(s)
    assert pl.expert_tp_ranks(0) == members
    assert len(pl.expert_tp_ranks(5)) == len(members)
    assert set(pl.expert_tp_ranks(0)) <= set(pl.group_ranks("tp", 0))


def attn_pair(s, g):
    """Forward collectives of one column/row-parallel pair with SP: all-gather + reduce-scatter of T·h."""
    act = 2 * 4096 * s.model.hidden
    return coll("all_gather", act, g["tp"], s) + coll("reduce_scatter", act, g["tp"], s)


def etp_pair(s, k):
    """The expert-TP all-gather + reduce-scatter of the rank's T·k·etp/tp routed tokens."""
    routed = 2 * 4096 * k * s.model.hidden * s.expert_tp // s.layout.tp
    etp = place(s).expert_tp_group()
    return coll("all_gather", routed, etp, s) + coll("reduce_scatter", routed, etp, s)


def test_moe_block_with_etp_moves_its_routed_tokens_in_the_expert_tp_group():
    """Mixtral (k = 2), tp 2 = etp, ep 4, SP: per pass the dispatcher all-to-alls the rank's T/tp tokens' k copies over
    EP, then all-gathers the T·k routed tokens over the 2 expert-TP ranks (and reduce-scatters them back after the
    experts); of the TP pairs only the attention's remains (no shared expert). The expert-TP pair runs on the compute
    stream with the experts: it is TP time, not dispatch."""
    s = scen({"preset": "mixtral-8x7b"}, 32, {"tp": 2, "ep": 4}, sequence_parallel=True)
    k = load_model("mixtral-8x7b").top_k
    g = groups_of(s)
    blk = _block(s, g, None)
    a2a = coll("all_to_all", 2 * 2048 * k * s.model.hidden, g["ep"], s)
    assert blk.ep_f == pytest.approx(2 * a2a, rel=1e-12)
    assert blk.ep_b == pytest.approx(2 * a2a, rel=1e-12)
    assert blk.tp_f == pytest.approx(attn_pair(s, g) + etp_pair(s, k), rel=1e-12)
    folded = scen({"preset": "mixtral-8x7b"}, 32, {"tp": 4, "ep": 4, "etp": 2}, sequence_parallel=True)
    gf = groups_of(folded)
    # T·k·etp/tp = half the T·k copies over the 2 expert-TP ranks
    assert _block(folded, gf, None).tp_f == pytest.approx(attn_pair(folded, gf) + etp_pair(folded, k), rel=1e-12)


def test_the_ep_overlap_hides_the_all_to_all_but_not_the_expert_tp_pair():
    from trainsim.simulator.builder import _ep_overlapped
    lay = {"tp": 2, "ep": 8, "pp": 2, "vpp": 2}
    s = scen({"preset": "mixtral-8x7b"}, 64, lay, sequence_parallel=True, schedule="interleaved",
             global_batch=64, ep_comm_overlap=True)
    k = load_model("mixtral-8x7b").top_k
    g = groups_of(s)
    blk = _block(s, g, None)
    a2a = coll("all_to_all", 2 * 2048 * k * s.model.hidden, g["ep"], s)
    assert (blk.ep_f_ov, blk.ep_b_ov) == pytest.approx(_ep_overlapped(a2a, s, None), rel=1e-12)
    assert blk.tp_f == pytest.approx(attn_pair(s, g) + etp_pair(s, k), rel=1e-12)


def test_etp_one_has_no_expert_tp_collectives():
    s = scen({"preset": "mixtral-8x7b"}, 32, {"tp": 2, "ep": 8, "etp": 1}, sequence_parallel=True)
    m = load_model("mixtral-8x7b")
    g = groups_of(s)
    a2a = coll("all_to_all", 2 * 2048 * m.top_k * m.hidden, g["ep"], s)
    blk = _block(s, g, None)
    assert blk.ep_f == pytest.approx(2 * a2a, rel=1e-12)
    assert blk.tp_f == pytest.approx(attn_pair(s, g), rel=1e-12)


def test_experts_split_without_expert_parallelism_still_gather_their_tokens():
    """ep 1, tp = etp 2: no all-to-all, but the routed tokens are gathered over the TP ranks and scattered back."""
    s = scen({"preset": "mixtral-8x7b"}, 32, {"tp": 2}, sequence_parallel=True)
    g = groups_of(s)
    blk = _block(s, g, None)
    assert blk.ep_f == 0.0
    assert blk.tp_f == pytest.approx(attn_pair(s, g) + etp_pair(s, s.model.top_k), rel=1e-12)


def test_moe_with_tp_needs_sequence_parallelism():
    from trainsim.specs import SpecError
    with pytest.raises(SpecError) as err:
        scen({"preset": "mixtral-8x7b"}, 32, {"tp": 2}, sequence_parallel=False)
    assert err.value.field == "training.sequence_parallel"


@pytest.mark.parametrize("sp", [True, False])
def test_recomputing_the_mlp_reruns_its_tp_collectives(sp):
    """Selective recompute of the 'mlp' module re-runs the MLP's forward collectives before its backward: one
    all-gather + reduce-scatter (SP) or one all-reduce (plain TP) more in the backward than core_attn alone."""
    layout = {"tp": 4}
    base = scen({"preset": "llama3-8b"}, 8, layout, sequence_parallel=sp, recompute="selective")
    mlp = scen({"preset": "llama3-8b"}, 8, layout, sequence_parallel=sp, recompute="selective",
               recompute_modules=["core_attn", "mlp"])
    g = groups_of(base)
    act = 2 * 4096 * load_model("llama3-8b").hidden
    pair = (coll("all_gather", act, g["tp"], base) + coll("reduce_scatter", act, g["tp"], base)) if sp \
        else coll("all_reduce", act, g["tp"], base)
    b0, b1 = _block(base, g, None), _block(mlp, g, None)
    assert b1.tp_f == pytest.approx(b0.tp_f, rel=1e-12)
    assert b1.tp_b - b0.tp_b == pytest.approx(pair, rel=1e-9)


def test_recompute_reruns_what_the_tp_overlap_leaves_exposed():
    """With Transformer Engine's TP overlap a recomputed MLP costs its share of the overlapped forward (half the
    block's two pairs), not the raw collectives."""
    kw = {"sequence_parallel": True, "tp_comm_overlap": True, "recompute": "selective"}
    base = scen({"preset": "llama3-70b"}, 8, {"tp": 8}, **kw)
    mlp = scen({"preset": "llama3-70b"}, 8, {"tp": 8}, recompute_modules=["core_attn", "mlp"], **kw)
    g = groups_of(base)
    b0, b1 = _block(base, g, None), _block(mlp, g, None)
    assert b1.tp_b - b0.tp_b == pytest.approx(b0.tp_f / 2, rel=1e-9)


def test_a_recomputed_moe_layer_reruns_its_shared_expert_and_expert_tp_collectives():
    """DeepSeek-V2-Lite (a shared expert), tp 2 = etp, ep 8, SP: recomputing 'moe' re-runs the shared expert's pair
    and the routed tokens' expert-TP pair; recomputing 'shared_experts' only the former."""
    def block(mods):
        s = scen({"preset": "deepseek-v2-lite"}, 16, {"tp": 2, "ep": 8}, sequence_parallel=True,
                 recompute="selective", recompute_modules=mods)
        g = groups_of(s)
        return s, g, _block(s, g, None)
    s, g, b0 = block(["core_attn"])
    _, _, moe = block(["core_attn", "moe"])
    _, _, shared = block(["core_attn", "shared_experts"])
    pair = attn_pair(s, g)
    expert_tp = etp_pair(s, s.model.top_k)
    assert b0.tp_f == pytest.approx(2 * pair + expert_tp, rel=1e-12)
    assert moe.tp_b - b0.tp_b == pytest.approx(pair + expert_tp, rel=1e-9)
    assert shared.tp_b - b0.tp_b == pytest.approx(pair, rel=1e-9)
