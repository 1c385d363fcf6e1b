"""DeepSeek-style blocks -- multi-head latent attention, shared experts, dense blocks among MoE blocks, MTP -- and
explicit pipeline layouts, against closed forms written here from the architecture (DeepSeek-V2 Sec. 2.1,
DeepSeek-V3 Sec. 2 and its config.json), independent of the cost models' code paths."""

from __future__ import annotations

import pytest

from trainsim.cost_models import activations as act
from trainsim.cost_models.memory import rank_param_shards
from trainsim.cost_models.model_flops import layer_flops, model_flops_per_step
from trainsim.simulator.builder import build_cost_table
from trainsim.simulator.predict import predict
from trainsim.specs import SpecError, build_scenario, load_model

# DeepSeek-V3 dimensions (config.json): hidden, heads, no-RoPE / RoPE q-k dims, value dims, latents, experts.
H, A, DN, DR, DV, QL, KVL = 7168, 128, 128, 64, 128, 1536, 512
F_DENSE, F_EXP, E, K, VOCAB, LAYERS, DENSE_LAYERS = 18432, 2048, 256, 8, 129280, 61, 3


def dsv3(**changes):
    return {"preset": "deepseek-v3", "mtp_layers": 0, **changes}


def scen(model, gpus=8, layout=None, cluster="dgx-h100", **training):
    training.setdefault("micro_batch", 1)
    training.setdefault("seq_len", 4096)
    training.setdefault("global_batch", gpus)
    return build_scenario({"model": model, "cluster": cluster, "gpus": gpus, "layout": layout or {},
                           "training": training})


def mla_gemm_params() -> int:
    """Weights of MLA's five projections (per layer, all heads)."""
    return H * QL + QL * A * (DN + DR) + H * (KVL + DR) + KVL * A * (DN + DV) + A * DV * H


def test_deepseek_v3_parameter_counts_match_the_paper():
    """671B total / 37B activated (DeepSeek-V3 Sec. 4.2); the exact total from the architecture by hand."""
    m = load_model("deepseek-v3")
    attn = mla_gemm_params() + QL + KVL                # + the two latent RMSNorm weights
    norms = 2 * H
    dense_block = attn + norms + 3 * H * F_DENSE
    moe_block = attn + norms + E * 3 * H * F_EXP + 3 * H * F_EXP + H * E   # routed + shared + router
    total = DENSE_LAYERS * dense_block + (LAYERS - DENSE_LAYERS) * moe_block + 2 * VOCAB * H + H
    assert total == 671_026_404_352
    assert m.total_params() == total
    active = (DENSE_LAYERS * dense_block
              + (LAYERS - DENSE_LAYERS) * (attn + norms + (K + 1) * 3 * H * F_EXP + H * E) + 2 * VOCAB * H + H)
    assert m.active_params() == active
    assert m.total_params() == pytest.approx(671e9, rel=0.01)
    assert m.active_params() == pytest.approx(37e9, rel=0.02)


def test_mla_block_forward_flops_closed_form():
    """Forward matmul FLOPs of a dense DeepSeek-V3 block on one GPU: 2·T·(projection and MLP weights) + the
    attention core 2·b·a·s²·(dqk + dv) (full s×s, the repository's convention)."""
    s, b = 4096, 1
    scn = scen(dsv3(), gpus=8, layout={"ep": 8}).dense_block()
    T = b * s
    gemm = 2 * T * (mla_gemm_params() + 3 * H * F_DENSE)
    core = 2 * b * A * s * s * ((DN + DR) + DV)
    assert layer_flops(scn).fwd == pytest.approx(gemm + core, rel=1e-12)
    assert layer_flops(scn).bwd_input + layer_flops(scn).bwd_weight == pytest.approx(2 * (gemm + core), rel=1e-12)


def test_moe_block_with_shared_expert_forward_flops():
    """A MoE block: router 2·T·h·E, top-k routed experts and the shared expert (3 SwiGLU GEMMs of h x fe each),
    balanced over ep ranks so one rank computes T·k expert tokens."""
    s = 4096
    scn = scen(dsv3(), gpus=8, layout={"ep": 8})
    T = s
    gemm = 2 * T * (mla_gemm_params() + H * E + K * 3 * H * F_EXP + 3 * H * F_EXP)
    core = 2 * A * s * s * ((DN + DR) + DV)
    assert layer_flops(scn).fwd == pytest.approx(gemm + core, rel=1e-9)


def test_model_flops_count_dense_blocks_mtp_and_head():
    """Model FLOPs per step = 3 x forward of 3 dense + 58 MoE blocks + the output layer; each MTP module adds
    a MoE block, its 2h->h projection and another output-layer pass."""
    s, gb = 4096, 8
    base = scen(dsv3(), gpus=8, layout={"ep": 8}, global_batch=gb)
    with_mtp = scen(dsv3(mtp_layers=1), gpus=8, layout={"ep": 8}, global_batch=gb)
    core = 2 * A * s * s * ((DN + DR) + DV)
    dense_fwd = 2 * s * (mla_gemm_params() + 3 * H * F_DENSE) + core
    moe_fwd = 2 * s * (mla_gemm_params() + H * E + (K + 1) * 3 * H * F_EXP) + core
    head_fwd = 2 * s * H * VOCAB
    per_seq = 3 * (DENSE_LAYERS * dense_fwd + (LAYERS - DENSE_LAYERS) * moe_fwd + head_fwd)
    assert model_flops_per_step(base) == pytest.approx(gb * per_seq, rel=1e-9)
    mtp_fwd = moe_fwd + 2 * s * (2 * H) * H + head_fwd
    assert model_flops_per_step(with_mtp) - model_flops_per_step(base) == pytest.approx(gb * 3 * mtp_fwd, rel=1e-9)


def test_pipeline_stages_hold_every_parameter_once_with_a_custom_layout():
    """tp = ep = 1: the stages' parameters sum to total_params (untied head on the last stage); the dense
    blocks sit where the layout puts the first three layers."""
    layers = (2, 20, 20, 19)
    s = scen(dsv3(), gpus=4, layout={"pp": 4, "stage_layers": list(layers)})
    held = [rank_param_shards(s, st) for st in range(4)]
    assert sum(r.held for r in held) == load_model("deepseek-v3").total_params()
    m = load_model("deepseek-v3")
    moe_experts = E * 3 * H * F_EXP
    assert held[0].expert == 0                          # layers 0-1: dense
    assert held[1].expert == (20 - 1) * moe_experts     # layer 2 is the third dense one
    assert held[3].expert == 19 * moe_experts
    assert s.stage_layers == layers and s.dense_layers_on_stage(1) == 1
    assert m.first_dense_layers == 3


def test_mtp_params_and_activations_sit_on_the_loss_stage():
    """One MTP module on the last stage: a MoE block, the 2h->h projection, three norms and the embedding copy."""
    layout = {"pp": 2, "stage_layers": [30, 31]}
    base = scen(dsv3(), gpus=2, layout=layout)
    mtp = scen(dsv3(mtp_layers=1), gpus=2, layout=layout)
    m = load_model("deepseek-v3")
    added = rank_param_shards(mtp, 1).held - rank_param_shards(base, 1).held
    assert added == m.layer_params() + 2 * H * H + 3 * H + VOCAB * H
    assert rank_param_shards(mtp, 0).held == rank_param_shards(base, 0).held
    assert act.mtp_activation_bytes(mtp) > act.layer_activation_bytes(mtp).total


def test_mla_saved_activations_closed_form():
    """Dense DeepSeek-V3 block, bf16, flash attention, no recompute, tp = 1: norm inputs and outputs (4·e·T·h),
    the two latents' norm inputs and outputs and the RoPE key, q/k (dqk) and v (dv) per head, the attention
    output, fp32 norm statistics and logsumexp, and the fused SwiGLU's 3·f."""
    b, s, e = 1, 4096, 2
    scn = scen(dsv3(), gpus=8, layout={"ep": 8}, micro_batch=b).dense_block()
    T = b * s
    main = (4 * e * T * H + T * (2 * e * (QL + KVL) + e * DR) + e * T * A * (2 * (DN + DR) + DV)
            + e * T * A * DV + 3 * e * T * F_DENSE)
    small = 2 * 4 * T + 4 * T * 2 + 4 * b * A * s
    got = act.layer_activation_bytes(scn)
    assert got.main == pytest.approx(main, rel=1e-12)
    assert got.small == pytest.approx(small, rel=1e-12)


def test_chunk_compute_sums_dense_and_moe_blocks():
    """The engine's chunk holding the first layers costs 3 dense + (n-3) MoE blocks (+ the embedding); the GPU's
    wait for its host (cost_models.moe_issue) is apart: here the host keeps ahead of every block, so only the
    lead-in after each MoE layer's dispatcher sync remains."""
    from trainsim.cost_models.compute import embedding_times, layer_times
    from trainsim.cost_models.moe_issue import moe_block_issue
    s = scen(dsv3(), gpus=16, layout={"pp": 2, "ep": 8, "stage_layers": [30, 31]}, global_batch=16)
    table = build_cost_table(s)
    first = table.stages[0].chunks[0]
    dense, moe = layer_times(s.dense_block()), layer_times(s)
    # x the job's slowest-GPU factor (cost_models/variation.py), applied to every chunk's compute
    expect = (3 * dense.fwd_s + 27 * moe.fwd_s + embedding_times(s).fwd_s) * table.slowest_gpu_factor
    assert first.fwd_s - first.host_idle_fwd_s == pytest.approx(expect, rel=1e-12)
    assert first.host_idle_fwd_s == pytest.approx(27 * moe_block_issue(s).lead_s, rel=1e-12)
    assert dense.fwd_s != pytest.approx(moe.fwd_s, rel=0.01)


@pytest.mark.parametrize("layout, field", [
    ({"pp": 2, "stage_layers": [30, 30]}, "layout.stage_layers"),       # sums to 60, not 61
    ({"pp": 2, "stage_layers": [61]}, "layout"),                        # one entry for two stages
    ({"pp": 2, "stage_layers": [62, -1]}, "layout"),                    # negative
])
def test_bad_stage_layers_are_refused_naming_the_field(layout, field):
    with pytest.raises(SpecError) as err:
        scen(dsv3(), gpus=2, layout=layout)
    assert err.value.field.startswith(field)


@pytest.mark.parametrize("change, field", [
    ({"kv_lora_rank": None, "q_lora_rank": 1536}, "model"),     # q latent without MLA
    ({"num_kv_heads": 8}, "model"),                             # MLA expands K/V to every head
    ({"first_dense_layers": 61}, "model"),                      # no MoE block left
])
def test_inconsistent_deepseek_fields_are_refused(change, field):
    with pytest.raises(SpecError) as err:
        load_model(dsv3(**change))
    assert err.value.field.startswith(field)


def test_shared_expert_on_dense_model_refused():
    with pytest.raises(SpecError):
        load_model({"preset": "llama3-8b", "shared_expert_ffn": 1024})


def test_deepseek_v3_predicts_end_to_end_and_mtp_costs_time():
    layout = {"pp": 2, "ep": 8, "stage_layers": [30, 31]}
    base = predict(scen(dsv3(), gpus=16, layout=layout, global_batch=32, dtype="fp8"), fast=True)
    mtp = predict(scen(dsv3(mtp_layers=1), gpus=16, layout=layout, global_batch=32, dtype="fp8"), fast=True)
    assert 0 < base.step_time_s < mtp.step_time_s
    assert 0 < base.mfu < 1


def test_what_if_variants_drop_a_layout_made_for_another_pipeline():
    """The report's sweeps change pp/vpp: a file's stage_layers (for its own pp x vpp) must not be kept, and an
    invalid variant is a SpecError, not a traceback."""
    from trainsim.reports.whatif import variant
    s = scen(dsv3(), gpus=16, layout={"pp": 2, "ep": 8, "stage_layers": [30, 31]}, global_batch=16)
    assert variant(s, layout={"tp": 1}).layout.stage_layers == (30, 31)      # same pipeline: kept
    with pytest.raises(SpecError):                                            # 61 layers on 4 stages
        variant(s, layout={"pp": 4})
    v = variant(s, layout={"pp": 1}, gpus=8)
    assert v.layout.stage_layers is None and v.stage_layers == (61,)


def test_stage_layers_flag(capsys):
    from trainsim.cli.main import main
    argv = ["predict", "--model", "deepseek-v3", "--cluster", "dgx-h100", "--gpus", "32", "--pp", "2", "--ep", "8",
            "--seq-len", "4096", "--global-batch", "64", "--fast", "--json"]
    assert main([*argv, "--stage-layers", "30,31"]) == 0
    capsys.readouterr()
    assert main([*argv, "--stage-layers", "30,30"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: layout.stage_layers")


# --- expert-parallel communication overlap (combined 1F1B) ------------------------------------------------

def _ep_scenario(**training):
    return scen({"preset": "qwen3-30b-a3b"}, gpus=16, layout={"ep": 16}, global_batch=64, **training)


def test_ep_overlap_phases_closed_form():
    """Three phases: combine-bwd | attention fwd; dispatch fwd + bwd | expert MLPs fwd + bwd; combine fwd |
    attention bwd. Each exposes max(0, comm - compute) + slowdown x min(comm, compute)."""
    from trainsim.simulator.builder import _ep_overlapped, _op_times, comm_compute_slowdown
    s = _ep_scenario(ep_comm_overlap=True)
    ops = _op_times(s, None)  # op times at the job's pace (its slowest GPU), as the builder hides a2a behind
    mlp = [o for o in ops if o.name.startswith(("expert_", "shared_"))]
    rest = [o for o in ops if o not in mlp]
    af, ab = sum(o.fwd_s for o in rest), sum(o.bwd_input_s + o.bwd_weight_s for o in rest)
    mm = sum(o.fwd_s + o.bwd_input_s + o.bwd_weight_s for o in mlp)
    k = comm_compute_slowdown(s)
    for a2a in (1e-6, 1e-3, 1.0):   # hidden, partly hidden, exposed
        ph = [max(0, a2a - af) + k * min(a2a, af), max(0, 2 * a2a - mm) + k * min(2 * a2a, mm),
              max(0, a2a - ab) + k * min(a2a, ab)]
        f, b = _ep_overlapped(a2a, s, None)
        assert f + b == pytest.approx(sum(ph), rel=1e-12)
        assert f + b <= 4 * a2a + k * (af + ab + mm) + 1e-15
    big = sum(_ep_overlapped(1.0, s, None))
    assert big == pytest.approx(4.0 - af - ab - mm + k * (af + ab + mm), rel=1e-9)


def test_ep_paired_fraction_follows_the_warmup():
    from trainsim.simulator.builder import ep_paired_fraction
    s = _ep_scenario(ep_comm_overlap=True)
    assert ep_paired_fraction(s, 0) == pytest.approx((4 - 1) / 4)            # pp 1: 4 micro-batches
    layout = {"pp": 2, "vpp": 2, "ep": 8, "stage_layers": [12, 12, 12, 12]}
    t = scen({"preset": "qwen3-30b-a3b"}, gpus=16, layout=layout, global_batch=32, schedule="interleaved",
             ep_comm_overlap=True)
    m, v, pp = t.num_microbatches, 2, 2
    assert ep_paired_fraction(t, 0) == pytest.approx((m * v - (2 * (pp - 1) + (v - 1) * pp)) / (m * v))
    assert ep_paired_fraction(t, 1) == pytest.approx((m * v - (v - 1) * pp) / (m * v))


def test_ep_overlap_hides_all_to_all_and_never_costs_more():
    off = predict(_ep_scenario())
    on = predict(_ep_scenario(ep_comm_overlap=True))
    assert on.exposed_comm_s["ep"] < off.exposed_comm_s["ep"]
    assert on.step_time_s < off.step_time_s


@pytest.mark.parametrize("layout, training", [
    ({"ep": 1}, {}),                                            # no expert parallelism
    ({"pp": 2, "ep": 8}, {"schedule": "1f1b"}),                 # pp > 1 without model chunks
    ({"pp": 2, "ep": 8}, {"schedule": "zb"}),                   # no forward/backward pairs
])
def test_ep_overlap_refused_where_megatron_refuses(layout, training):
    with pytest.raises(SpecError) as err:
        scen({"preset": "qwen3-30b-a3b"}, gpus=16, layout=layout, global_batch=64, ep_comm_overlap=True, **training)
    assert err.value.field == "training.ep_comm_overlap"


# --- selective recompute by module (Megatron-Core --recompute-modules) -------------------------------------

def _bf16_block(modules=None, **model):
    return scen(dsv3(**model), gpus=8, layout={"ep": 8}, recompute="selective" if modules else "none",
                recompute_modules=modules)


def test_recompute_modules_drop_the_terms_they_recompute():
    """Each module removes exactly its saved tensors (bf16, flash, tp = 1; closed forms as in
    test_mla_saved_activations_closed_form): mla_up_proj the per-head q, k, v; layernorm both norm outputs; moe_act
    the experts' activation outputs (fc2 inputs); shared_experts the shared expert's inner 3·f; moe all of the MoE
    layer after its input (routed inputs/outputs, experts, shared expert, router probabilities and indices)."""
    e, s = 2, 4096
    T = s
    none = act.layer_activation_bytes(_bf16_block())
    def drop(*mods):
        return none.total - act.layer_activation_bytes(_bf16_block(tuple(mods))).total
    lse = 4 * A * s
    assert drop("core_attn") == pytest.approx(lse, rel=1e-12)
    assert drop("mla_up_proj") == pytest.approx(e * T * A * (2 * (DN + DR) + DV), rel=1e-12)
    assert drop("layernorm") == pytest.approx(2 * e * T * H, rel=1e-12)
    assert drop("moe_act") == pytest.approx(e * T * K * F_EXP, rel=1e-12)
    assert drop("shared_experts") == pytest.approx(3 * e * T * F_EXP, rel=1e-12)
    routed = T * K
    # the weighted SwiGLU's fp32 probabilities in place of saved expert outputs (moe_probs_in_activation)
    moe = (e * routed * H + 3 * e * routed * F_EXP + 4 * routed + 3 * e * T * F_EXP
           + 4 * T * E + 8 * T * K)
    assert drop("moe") == pytest.approx(moe, rel=1e-12)
    dense_none = act.layer_activation_bytes(_bf16_block().dense_block()).total
    dense_mlp = act.layer_activation_bytes(_bf16_block(("mlp",)).dense_block()).total
    assert dense_none - dense_mlp == pytest.approx(3 * e * T * F_DENSE, rel=1e-12)


def test_recompute_modules_rerun_their_forward_ops():
    """The recompute time is the forward of exactly the recomputed modules' ops; 'moe' also re-dispatches."""
    from trainsim.cost_models.compute import layer_op_times, layer_times
    s = _bf16_block(("mla_up_proj", "moe_act"))
    ops = {o.name: o for o in layer_op_times(s)}
    expect = sum(ops[n].fwd_s for n in ("q_up", "kv_up", "rope", "expert_swiglu"))
    assert layer_times(s).recompute_s == pytest.approx(expect, rel=1e-12)
    sel = layer_times(_bf16_block(("core_attn",)))
    assert sel.recompute_s == pytest.approx(ops["attention"].fwd_s, rel=1e-12)   # the old 'selective'
    t_moe = build_cost_table(_bf16_block(("moe",))).stages[0].chunks[0]
    t_none = build_cost_table(_bf16_block()).stages[0].chunks[0]
    assert t_moe.ep_bwd_s == pytest.approx(2 * t_none.ep_bwd_s, rel=1e-12)


def test_recompute_modules_validation_and_flag(capsys):
    from trainsim.cli.main import main
    with pytest.raises(SpecError):
        scen(dsv3(), gpus=8, layout={"ep": 8}, recompute="full", recompute_modules=("mlp",))
    with pytest.raises(SpecError):
        scen(dsv3(), gpus=8, layout={"ep": 8}, recompute="selective", recompute_modules=("attention",))
    argv = ["predict", "--model", "deepseek-v3", "--cluster", "dgx-h100", "--gpus", "16", "--ep", "16", "--pp", "1",
            "--seq-len", "4096", "--global-batch", "16", "--fast", "--json"]
    assert main([*argv, "--recompute-modules", "mla_up_proj,moe_act"]) == 0   # implies --recompute selective
    capsys.readouterr()
    assert main([*argv, "--recompute-modules", "mla_up_proj", "--recompute", "full"]) == 2
    assert capsys.readouterr().err.startswith("error: training")


# --- expert tensor parallelism / MoE parallel folding (Megatron-Core --expert-tensor-parallel-size) -----------

def _folded(etp, tp=2, ep=8, gpus=16):
    return scen({"preset": "qwen3-30b-a3b"}, gpus=gpus, layout={"tp": tp, "ep": ep, "etp": etp},
                global_batch=gpus, sequence_parallel=tp > 1)


def test_etp1_lets_the_expert_group_span_tp_ranks():
    """tp 2 x dp 8 with ep 16 needs etp 1: the EP group is then 16 consecutive GPUs (TP peers included)."""
    from trainsim.topologies.placement import place
    with pytest.raises(SpecError) as err:
        _folded(None, ep=16)
    assert "etp" in str(err.value)
    s = _folded(1, ep=16)
    pl = place(s)
    assert pl.group_ranks("ep") == list(range(16))
    assert pl.group_ranks("tp") == [0, 1]
    assert place(_folded(None, ep=8)).group_ranks("ep") == list(range(0, 16, 2))   # etp = tp: DP ranks only


def test_etp_splits_expert_weights_and_work():
    """Experts' parameters per rank: E/ep x 3·h·fe / etp; expert-data-parallel group tp·dp/(ep·etp); the experts'
    GEMM FLOPs per rank are the same either way (T·k/tp tokens x fe, or T·k tokens x fe/tp)."""
    m = load_model("qwen3-30b-a3b")
    h, fe, E = m.hidden, m.expert_ffn, m.num_experts
    one, two = _folded(1), _folded(None)
    assert rank_param_shards(one, 0).expert == pytest.approx(48 * (E / 8) * 3 * h * fe, rel=1e-12)
    assert rank_param_shards(two, 0).expert == pytest.approx(48 * (E / 8) * 3 * h * fe / 2, rel=1e-12)
    from trainsim.cost_models.flops import layer_ops
    def expert_flops(s):
        return sum(o.fwd_flops for o in layer_ops(s) if o.name.startswith("expert_"))
    assert expert_flops(one) == pytest.approx(expert_flops(two), rel=1e-12)
    fc1 = {o.name: o for o in layer_ops(one)}["expert_fc1"]
    m_tok, n, k = fc1.fwd_gemms[0]
    assert (n, k) == (2 * fe, h)                     # whole experts with etp 1
    assert m_tok * fc1.batch == 4096 * m.top_k // 2   # this rank's half of the tokens, top-k copies


@pytest.mark.parametrize("layout, field", [
    ({"tp": 4, "etp": 3, "ep": 4}, "layout.etp"),       # etp must divide tp
    ({"tp": 2, "etp": 1, "ep": 64}, "layout.ep"),       # 64 does not divide dp·tp/etp = 16
])
def test_bad_etp_refused(layout, field):
    with pytest.raises(SpecError) as err:
        scen({"preset": "qwen3-30b-a3b"}, gpus=16, layout=layout, global_batch=16, sequence_parallel=True)
    assert err.value.field == field


def test_etp_on_a_dense_model_refused():
    with pytest.raises(SpecError) as err:
        scen({"preset": "llama3-8b"}, gpus=8, layout={"tp": 2, "etp": 1})
    assert err.value.field == "layout.etp"


def test_planner_carries_etp_and_drops_settings_a_candidate_cannot_use():
    """A scenario file's etp reaches every MoE candidate (so ep may span TP ranks); its EP overlap and module list
    are kept only for candidates that can run them (pp 1 or model chunks; selective recompute)."""
    from trainsim.simulator.search_space import Candidate, SearchLimits, structural, to_scenario
    m, cl = load_model("qwen3-30b-a3b"), scen({"preset": "qwen3-30b-a3b"}, gpus=16).cluster
    searched = {(tp, ep, etp) for tp, cp, pp, dp, ep, etp in structural(m, cl, 16, 64, 4096, SearchLimits())}
    folded = {(tp, ep, etp) for tp, cp, pp, dp, ep, etp in structural(m, cl, 16, 64, 4096, SearchLimits(etp=1))}
    # without a file's etp both Megatron's default (etp = tp) and folding (etp 1, ep over the TP ranks) are searched
    assert (2, 16, 1) in searched and (2, 16, 2) not in searched and (2, 8, 2) in searched
    assert {etp for tp, ep, etp in folded if tp > 1} == {1}
    lim = SearchLimits(etp=1, training_extra={"ep_comm_overlap": True, "recompute_modules": ("moe_act",)})
    c = Candidate(16, 2, 1, 8, 1, 16, 1, 1, "selective", 0, "1f1b", True, etp=1)
    s = to_scenario(m, cl, c, 64, 4096, lim)
    assert s.layout.etp == 1 and s.training.ep_comm_overlap and s.training.recompute_modules == ("moe_act",)
    c2 = Candidate(16, 1, 2, 8, 1, 8, 1, 1, "none", 0, "1f1b", False)
    s2 = to_scenario(m, cl, c2, 64, 4096, lim)
    assert not s2.training.ep_comm_overlap and s2.training.recompute_modules is None


# --- refusals and consistency found in review ------------------------------------------------------------------

@pytest.mark.parametrize("training", [
    {"recompute": "full"},                                               # Megatron-Core refuses both
    {"recompute": "selective", "recompute_modules": ("moe",)},
])
def test_ep_overlap_refused_with_full_or_moe_recompute(training):
    with pytest.raises(SpecError) as err:
        _ep_scenario(ep_comm_overlap=True, **training)
    assert err.value.field == "training.ep_comm_overlap"


def test_ep_overlap_refused_with_two_mtp_modules():
    with pytest.raises(SpecError) as err:
        scen(dsv3(mtp_layers=2), gpus=8, layout={"ep": 8}, ep_comm_overlap=True)
    assert err.value.field == "training.ep_comm_overlap"


@pytest.mark.parametrize("model, module", [
    ({"preset": "llama3-8b"}, "mla_up_proj"), ({"preset": "llama3-8b"}, "moe_act"),
    ({"preset": "qwen3-30b-a3b"}, "shared_experts"), ({"preset": "qwen3-30b-a3b"}, "mlp"),
])
def test_recompute_module_the_model_lacks_is_refused(model, module):
    with pytest.raises(SpecError) as err:
        scen(model, gpus=8, recompute="selective", recompute_modules=(module,))
    assert err.value.field == "training.recompute_modules"


def test_moe_with_tp_and_ep_needs_sequence_parallelism():
    with pytest.raises(SpecError) as err:
        scen({"preset": "qwen3-30b-a3b"}, gpus=16, layout={"tp": 2, "ep": 8})
    assert err.value.field == "training.sequence_parallel"


def test_dualpipev_mtp_loss_stage_params_agree_with_memory_model():
    """DualPipeV puts the loss (and MTP) on stage 0, which already holds the embedding: no extra copy."""
    s = scen({"preset": "llama3-8b", "mtp_layers": 1}, gpus=8, layout={"pp": 4, "vpp": 2}, schedule="dualpipev",
             global_batch=16, zero=3)
    table = build_cost_table(s)
    gathered = sum(c.param_gather.nbytes for c in table.stages[0].chunks if c.param_gather is not None)
    assert gathered / s.training.param_bytes == pytest.approx(rank_param_shards(s, 0).held, rel=1e-9)


def test_mla_down_projections_run_on_the_sequence_shard():
    """With SP every matmul is split over TP, so tp x per-rank FLOPs = the unsharded block's (MLA down-projections
    are duplicated across TP ranks but each runs on its own sequence shard)."""
    from trainsim.cost_models.flops import _layer_ops
    from trainsim.cost_models.model_flops import pass_flops
    from trainsim.cost_models.shapes import layer_shape
    s = scen(dsv3(), gpus=8, layout={"tp": 8, "ep": 1}, sequence_parallel=True).dense_block()
    per_rank = layer_flops(s).fwd
    whole = pass_flops(_layer_ops(layer_shape(s).unsharded())).fwd
    assert 8 * per_rank == pytest.approx(whole, rel=1e-12)


def test_executor_refuses_mtp_and_bools_in_stage_layers():
    from trainsim.kernels.exec_config import make_job
    s = scen({"preset": "tiny-gpt", "mtp_layers": 1}, gpus=2, layout={"pp": 2}, cluster="cpu-host", dtype="fp32",
             global_batch=4, seq_len=128)
    with pytest.raises(SpecError) as err:
        make_job(s)
    assert err.value.field == "model.mtp_layers"
    with pytest.raises(SpecError) as err:
        scen(dsv3(), gpus=2, layout={"pp": 2, "stage_layers": [True, 60]})
    assert err.value.field == "layout.stage_layers[0]"


def test_predict_header_and_report_settings_name_the_new_settings(capsys):
    from trainsim.cli.main import main
    assert main(["predict", "examples/deepseek-v3-h100.yaml", "--fast"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for text in ("1 MTP", "etp=1", "recompute selective (mla_up_proj, mlp)", "EP all-to-all overlap",
                 "stage layers [1, 2,"):
        assert text in out, text


def test_zero_bubble_retained_weight_gradient_inputs_with_mla_and_shared_expert():
    """The W pass keeps every linear's input and output gradient: for a DeepSeek-V3 MoE block (tp 1) the MLA
    projections (h, q/kv latents, heads' values in; latents, RoPE key, per-head q/k/v and h out), the routed experts
    (top-k copies) and the shared expert."""
    from trainsim.simulator.builder import w_retained_bytes_per_layer
    s = scen(dsv3(num_layers=62), gpus=16, layout={"pp": 2, "ep": 8}, schedule="zb", global_batch=16)  # zb: pp > 1
    e, T = 2, 4096
    attn_in = H + QL + KVL + A * DV
    attn_grad = QL + KVL + DR + A * (DN + DR) + A * (DN + DV) + H
    f = K * F_EXP
    inputs = attn_in + K * H + f + F_EXP
    grads = attn_grad + 2 * f + K * H + 2 * F_EXP + H
    assert w_retained_bytes_per_layer(s) == pytest.approx(e * T * (inputs + grads), rel=1e-12)
