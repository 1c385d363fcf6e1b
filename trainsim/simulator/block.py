"""What one transformer block of each kind costs per micro-batch on one rank: compute, exposed TP/CP/EP
communication, activations, retained weight-gradient inputs and parameters (builder.py's module docstring
documents the choices).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainsim.cost_models import activations as act
from trainsim.cost_models import compute, memory
from trainsim.cost_models.lora import adapter_params_rank
from trainsim.cost_models.shapes import block_kinds, layer_shape, mtp_kinds
from trainsim.specs import Scenario, framework_behaviour
from trainsim.topologies.placement import place

from .exposures import (
    _coll,
    _column_parallel_bwd_exposed_s,
    _cp_exchange_s,
    _ep_overlapped,
    _pace,
    _paced,
    _tp_overlapped,
    comm_compute_slowdown,
)


def w_retained_bytes_per_layer(scenario: Scenario) -> float:
    """Bytes a postponed weight-gradient pass keeps per block and micro-batch (zero-bubble schedules).

    dW = Xᵀ·dY for each linear layer needs its input X and its output gradient dY (the zero-bubble
    implementation's WeightGradStore keeps exactly these pairs): inputs of QKV (h), out-projection (q),
    MLP in (h) and MLP out (f) and gradients of their outputs (q+2kv, h, n_in·f, h) per token, sharded
    over TP. For 34·s·b·h-style blocks that is 32 of the 34 (Korthikanti's breakdown). MLA's five projections
    and a shared expert's two linears add their own pairs.
    """
    shp = layer_shape(scenario)
    e, T, t = shp.e, shp.tokens, shp.tp
    q, kv = shp.a * shp.d, shp.kv * shp.d
    if shp.is_moe:
        f, n = shp.top_k * shp.fe, shp.top_k
    else:
        f, n = shp.f, 1
    n_in = 2 if shp.gated else 1
    if shp.mla:
        # MLA's five linears: the down-projections share the norm output (h) and give the latents (q latent,
        # k/v latent + RoPE key), the up-projections take the latents and give per-head q (dqk) and k, v (d + dv),
        # the output projection takes the heads' values (dv) and gives h.
        qa = shp.a * shp.dqk
        attn_in = shp.h + shp.ql + shp.kvl + shp.a * shp.dvh
        attn_grad = (shp.ql + shp.kvl + shp.dr + (qa if shp.ql else 0) + shp.a * (shp.d + shp.dvh) + shp.h)
        if not shp.ql:
            attn_grad += qa  # the full-rank query projection's output
    else:
        attn_in, attn_grad = shp.h + q, (q + 2 * kv) + shp.h
    inputs = attn_in + n * shp.h + f
    grads = attn_grad + n_in * f + n * shp.h
    if shp.fs:  # the shared expert's fc1 (input: the router's, kept above) and fc2
        inputs += shp.fs
        grads += n_in * shp.fs + shp.h
    return e * T * (inputs + grads) / t


@dataclass(frozen=True)
class _Block:
    """What one transformer block of one kind costs per micro-batch on one rank (see block_kinds)."""

    times: compute.LayerTimes
    tp_f: float
    tp_b: float
    cp_f: float
    cp_b: float
    ep_f: float
    ep_b: float
    ep_f_ov: float         # exposed EP seconds of a block whose forward is paired with another micro-batch's
    ep_b_ov: float         # backward (TrainingSpec.ep_comm_overlap, _ep_overlapped)
    act_bytes: float
    w_keep_bytes: float
    params: float          # dense + expert parameters on one rank

    def gpu_passes(self) -> tuple[float, float]:
        """(forward, backward) seconds the GPU's stream is busy with one block per micro-batch: compute (the
        backward with its recomputed forward) and the exposed TP and CP communication on that stream."""
        t = self.times
        bwd = t.bwd_input_s + t.bwd_weight_s + t.recompute_s
        return t.fwd_s + self.tp_f + self.cp_f, bwd + self.tp_b + self.cp_b

    def ep_passes(self) -> tuple[float, float, float, float]:
        """(forward, backward, paired forward, paired backward) seconds the GPU's stream is busy with one block per
        micro-batch: ``gpu_passes`` with the block's exposed EP all-to-alls, unpaired and paired with another
        micro-batch's pass under EP overlap (the MoE and hybrid host-issue rules, cost_models.moe_issue)."""
        f, b = self.gpu_passes()
        return f + self.ep_f, b + self.ep_b, f + self.ep_f_ov, b + self.ep_b_ov


def _tp_dense_exposed(scenario: Scenario, groups: dict, profile, act_msg: float) -> tuple[float, float]:
    """Exposed TP seconds (forward, backward) of a block's two column/row-parallel pairs, by the framework's
    TP communication (module doc of builder.py: SP gathers/scatters or all-reduces, dgrad and userbuffers overlap,
    torch TP's per-linear reductions)."""
    m, lay, tr = scenario.model, scenario.layout, scenario.training
    shp = layer_shape(scenario)
    e = shp.e
    fw = framework_behaviour.behaviour(tr.framework)
    per_linear = fw.tp_input_reduce == "per_linear"  # framework.py: torch parallelize_module
    # torch TP communicates by DTensor redistribution: its host cost beyond the raw collective is
    # measured by CPU calibrations (profile.dtensor_collective_overhead_s), else 0.
    dt_ov = (getattr(profile, "dtensor_collective_overhead_s", None) or {}) if per_linear else {}
    if tr.sequence_parallel:
        ag = sum(_coll("all_gather", act_msg, groups["tp"], scenario, profile)) + dt_ov.get("all_gather", 0.0)
        rs = sum(_coll("reduce_scatter", act_msg, groups["tp"], scenario, profile)) + dt_ov.get("reduce_scatter", 0.0)
        tp_f = tp_b = 2 * (ag + rs)
        if tr.tp_comm_overlap and not per_linear:
            tp_f, tp_b = _tp_overlapped(ag, rs, lay.tp, scenario, profile)
        elif fw.tp_dgrad_overlap:  # gathers before out_proj/fc2 dgrad wait; QKV/fc1's hide (framework.py)
            tp_b = 2 * ag + _column_parallel_bwd_exposed_s(ag, rs, scenario, profile,
                                                           comm_compute_slowdown(scenario))
        if per_linear:  # replicated SequenceParallel norm weights: Partial gradients all-reduced
            norm_tensors = 2 if m.norm == "layernorm" else 1
            tp_b += m.block_norms * norm_tensors * (sum(_coll("all_reduce", e * m.hidden, groups["tp"], scenario, profile))
                                        + dt_ov.get("all_reduce", 0.0))
    else:
        ar = sum(_coll("all_reduce", act_msg, groups["tp"], scenario, profile)) + dt_ov.get("all_reduce", 0.0)
        tp_f = tp_b = 2 * ar
        if per_linear:  # q, k, v, fc1 (, gate) reduce their input gradients one by one
            tp_b = (4 + (1 if shp.gated else 0)) * ar
        elif fw.tp_dgrad_overlap:  # each all-reduce hides behind its layer's wgrad GEMM (framework.py)
            tp_b = _column_parallel_bwd_exposed_s(0.0, ar, scenario, profile, comm_compute_slowdown(scenario))
    return tp_f, tp_b


def _tp_moe_exposed(scenario: Scenario, profile, tp_f: float, tp_b: float) -> tuple[float, float, float]:
    """A MoE block's TP seconds (forward, backward, the expert-TP gather + scatter ``etp_s``) from the dense
    block's ``tp_f``, ``tp_b``.

    A MoE layer takes the sequence-sharded tokens as they are and returns them sharded, so of the block's
    two TP gather/scatter pairs only the attention's remains -- plus a shared expert's, a TP-sharded
    dense MLP on the same input (approximated as half of every path above per pair). Its routed tokens
    move by the dispatcher: the all-to-all over EP (_ep_exposed), then, with the experts split over etp > 1
    ranks, an all-gather of the routed [T·k·etp/tp, h] tokens over the expert-TP group before the
    experts and a reduce-scatter after them (Megatron-Core's MoEAlltoAllTokenDispatcher: its
    dispatch_postprocess / combine_preprocess, run with the experts on the compute stream, so the EP
    overlap does not hide them). Specs require sequence parallelism for MoE with tp > 1.
    """
    shp = layer_shape(scenario)
    e = shp.e
    etp_s = 0.0
    pairs = (0 if shp.kind == "E" else 1) + (1 if shp.fs else 0)  # a hybrid MoE layer has no attention pair
    tp_f, tp_b = tp_f * pairs / 2, tp_b * pairs / 2
    if shp.xtp > 1:
        etp_group = place(scenario).expert_tp_group()
        msg = e * shp.routed_tokens * shp.xw
        etp_s = (sum(_coll("all_gather", msg, etp_group, scenario, profile))
                 + sum(_coll("reduce_scatter", msg, etp_group, scenario, profile)))
        tp_f += etp_s
        tp_b += etp_s
    return tp_f, tp_b, etp_s


def _tp_exposed(scenario: Scenario, groups: dict, profile, act_msg: float) -> tuple[float, float]:
    """Exposed TP seconds (forward, backward) of one block: its pairs' collectives, a MoE block's share of them,
    and the collectives a recomputed forward re-runs before its backward."""
    tr = scenario.training
    shp = layer_shape(scenario)
    tp_f, tp_b = _tp_dense_exposed(scenario, groups, profile, act_msg)
    if shp.kind in ("M", "*", "-"):  # a hybrid layer holds one column/row-parallel pair of a block's two
        tp_f, tp_b = tp_f / 2, tp_b / 2
    pair_f = tp_f / 2 if shp.kind in ("", "E") else tp_f  # forward exposure of one of the block's two column/row-parallel pairs
    etp_s = 0.0
    if shp.is_moe:
        tp_f, tp_b, etp_s = _tp_moe_exposed(scenario, profile, tp_f, tp_b)
    if tr.recompute == "full":
        tp_b += tp_f
    elif tr.recompute == "selective":
        # A recomputed dense MLP or shared expert (alone, or inside a recomputed MoE layer) re-runs its
        # column/row-parallel pair's forward collectives before its backward (Megatron checkpoints the module
        # with its gather and scatter inside); a recomputed MoE layer also re-gathers its routed tokens.
        rerun = ((1 if not shp.is_moe and shp.recomputes("mlp") else 0)
                 + (1 if shp.fs and (shp.recomputes("shared_experts") or shp.recomputes("moe")) else 0))
        tp_b += rerun * pair_f + (etp_s if shp.recomputes("moe") else 0.0)
    return tp_f, tp_b


def _cp_exposed(scenario: Scenario, groups: dict, profile) -> tuple[float, float]:
    """Exposed CP seconds (forward, backward) of one block; full recompute exchanges the forward's blocks again."""
    shp = layer_shape(scenario)
    cp_f, cp_b = _cp_exchange_s(scenario, profile, groups["cp"], shp.e, shp.tokens, shp)
    if scenario.training.recompute == "full":
        cp_b += cp_f
    return cp_f, cp_b


def _ep_exposed(scenario: Scenario, groups: dict, profile) -> tuple[float, float, float, float]:
    """Exposed EP seconds of one MoE block: (forward, backward) of a pass with its dispatch and combine
    all-to-alls exposed, then (forward, backward) of a pass paired by the combined 1F1B schedule (0 without
    TrainingSpec.ep_comm_overlap)."""
    lay, tr = scenario.layout, scenario.training
    shp = layer_shape(scenario)
    ep_f_ov = ep_b_ov = 0.0
    # The most loaded rank receives (and returns) moe_load times the mean tokens (cost_models/moe_balance.py).
    # LatentMoE dispatches the latent-wide tokens (shp.xw; Megatron-Core token_dispatcher.py sizes its EP buffers
    # by moe_latent_size, fc1_latent_proj running before the dispatch).
    a2a_bytes = shp.e * shp.tokens * shp.top_k * shp.xw / (lay.tp if tr.sequence_parallel else 1) * shp.moe_load
    a2a = sum(_coll("all_to_all", a2a_bytes, groups["ep"], scenario, profile))
    ep_f = ep_b = 2 * a2a
    if tr.ep_comm_overlap:
        ep_f_ov, ep_b_ov = _ep_overlapped(a2a, scenario, profile)
    if tr.recompute == "full" or shp.recomputes("moe"):  # the recomputed forward dispatches again
        ep_b += ep_f  # (specs refuse ep_comm_overlap with either, so the overlapped figures need no such term)
    return ep_f, ep_b, ep_f_ov, ep_b_ov


def _mean_block(kinds: list[tuple[_Block, int]], per: int | None = None) -> _Block:
    """The layer-count-weighted mean of a hybrid stack's kinds of layer: its whole-stack totals are exact (the
    stack runs on one stage, specs/scenario.py _check_hybrid); with ``per`` = 1 their sum (one MTP depth)."""
    n = per or sum(c for _, c in kinds)

    def mean(get) -> float:
        return sum(get(b) * c for b, c in kinds) / n
    times = compute.LayerTimes(*(mean(lambda b, f=f: getattr(b.times, f))
                                 for f in ("fwd_s", "bwd_input_s", "bwd_weight_s", "recompute_s")))
    return _Block(times=times, **{f: mean(lambda b, f=f: getattr(b, f)) for f in (
        "tp_f", "tp_b", "cp_f", "cp_b", "ep_f", "ep_b", "ep_f_ov", "ep_b_ov", "act_bytes", "w_keep_bytes", "params")})


def _block(scenario: Scenario, groups: dict, profile) -> _Block:
    """The per-block costs of ``scenario``'s block (a MoE model's dense blocks: its ``dense_block()``; a hybrid
    stack: its mean layer)."""
    m, lay, tr = scenario.model, scenario.layout, scenario.training
    shp = layer_shape(scenario)
    if shp.kind == "mix":
        return _mean_block([(_block(scn, groups, profile), n) for scn, n in block_kinds(scenario)])
    act_msg = shp.e * shp.tokens * shp.h                  # one [b, s/cp, h] activation, bytes (b·s/cp tokens)
    tp_f, tp_b = _tp_exposed(scenario, groups, profile, act_msg) if lay.tp > 1 else (0.0, 0.0)
    cp_f, cp_b = _cp_exposed(scenario, groups, profile) if lay.cp > 1 else (0.0, 0.0)
    ep_f = ep_b = ep_f_ov = ep_b_ov = 0.0
    if shp.is_moe and lay.ep > 1:
        ep_f, ep_b, ep_f_ov, ep_b_ov = _ep_exposed(scenario, groups, profile)
    dense_l, expert_l = memory.layer_params_per_rank(m, lay.tp, lay.ep, lay.etp)  # per block, one rank
    return _Block(
        times=_paced(compute.layer_times(scenario, profile), _pace(scenario, profile)),
        tp_f=tp_f, tp_b=tp_b, cp_f=cp_f, cp_b=cp_b, ep_f=ep_f,
        ep_b=ep_b, ep_f_ov=ep_f_ov, ep_b_ov=ep_b_ov, act_bytes=act.layer_activation_bytes(scenario).total,
        w_keep_bytes=w_retained_bytes_per_layer(scenario) if tr.schedule in ("zb", "dualpipev") else 0.0,
        params=adapter_params_rank(shp) if tr.lora_rank else dense_l + expert_l)  # LoRA: adapters' grads only


def _mtp_block(scenario: Scenario, groups: dict, profile, main: _Block) -> _Block:
    """What one MTP depth's block costs: ``main`` (a block like the model's), or for a hybrid stack the sum of its
    mtp_pattern's layers (ModelSpec.mtp_block)."""
    if not (scenario.model.is_hybrid and scenario.model.mtp_layers):
        return main
    return _mean_block([(_block(scn, groups, profile), n) for scn, n in mtp_kinds(scenario)], per=1)


def _local_global_blocks(scenario: Scenario, groups: dict, profile) -> tuple[_Block, _Block] | None:
    """(local, global) blocks of a model with one global block every ``global_every`` among sliding-window ones
    (Gemma 2/3, gpt-oss), so that each pipeline chunk is costed with the blocks it holds; the main block carries
    their mean, exact for the whole model. None for other models (every block alike) and for a MoE model with
    leading dense blocks (its chunks split by dense_layers_in instead; no such windowed model is known)."""
    m = scenario.model
    if m.first_dense_layers or not m.sliding_window or not m.global_every:
        return None
    local = scenario.model_copy(update={"model": m.model_copy(update={"global_every": None})})
    full = scenario.model_copy(update={"model": m.model_copy(update={"sliding_window": None, "global_every": None})})
    return _block(local, groups, profile), _block(full, groups, profile)


def _global_layers_in(scenario: Scenario, vstage: int) -> int:
    """Global (full-attention) blocks among virtual stage ``vstage``'s layers: layer i is global when
    (i + 1) % global_every == 0 (ModelSpec.global_every)."""
    k, layers = scenario.model.global_every, scenario.stage_layers
    start = sum(layers[:vstage])
    return (start + layers[vstage]) // k - start // k
