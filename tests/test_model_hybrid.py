"""Hybrid Mamba-2 / attention / MLP / MoE stacks (ModelSpec.hybrid_pattern): parameter counts of the Nemotron-H and
Nemotron 3 presets against their released sizes, the Mamba-2 mixer's parameters by hand, and the pattern's checks."""

import pytest
from pydantic import ValidationError

from trainsim.specs import load_model
from trainsim.specs.model import ModelSpec

# Released totals (presets/models.yaml cites each): the tolerance is 0.5 %, or half a unit of the published figure
# where the source rounds it coarser than that ("47B", "56B": 0.5e9; "3.6B" active: 0.05e9).
RELEASED = {
    "nemotron-h-8b": (8.100852736e9, 0.0),
    "nemotron-h-47b": (47e9, 0.5e9),
    "nemotron-h-56b": (56e9, 0.5e9),
    "nemotron-3-nano-30b-a3b": (31.6e9, 0.0),
}


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_hybrid_total_params_match_release(name):
    m = load_model(name)
    published, half_unit = RELEASED[name]
    assert m.published_params == published
    assert abs(m.total_params() - published) <= max(0.005 * published, half_unit)


def test_nemotron_h_8b_is_the_checkpoint_count_exactly():
    """The 8B checkpoint's tensors sum to 8,100,852,736 (presets/models.yaml): every term of the Mamba-2 mixer
    (conv bias, one D per head, the gated norm) is needed for the exact match."""
    assert load_model("nemotron-h-8b").total_params() == 8_100_852_736


def test_nemotron_3_nano_active_params():
    """3.6B active per token with embeddings (arXiv:2512.20848), published to 0.1B: within half a unit; 23 MoE
    layers of top-6 experts + the shared expert + router, 23 Mamba-2 and 6 attention layers."""
    m = load_model("nemotron-3-nano-30b-a3b")
    assert abs(m.active_params() - m.published_active_params) <= 0.05e9
    assert m.hybrid_counts() == {"M": 23, "E": 23, "*": 6}


def test_mamba_mixer_params_by_hand():
    """Nemotron-H 8B mixer: in_proj 4096 x (2*8192 + 2*8*128 + 128) = 4096 x 18560, conv1d (8192 + 2048) x (4 + 1),
    dt_bias / A_log / D 3 x 128, gated norm 8192, out_proj 8192 x 4096."""
    m = load_model("nemotron-h-8b")
    assert m.mamba_inner == 8192 and m.mamba_nheads == 128
    assert m.mamba_params() == 4096 * 18560 + 10240 * 5 + 3 * 128 + 8192 + 8192 * 4096
    assert m.hybrid_kind("M").layer_params() == m.mamba_params() + 4096


def test_mixed_layer_params_is_the_mean_layer():
    m = load_model("nemotron-h-56b")
    assert m.layer_params() * m.num_layers + m.embedding_params() == pytest.approx(m.total_params(), rel=1e-12)


@pytest.mark.parametrize("bad, field", [
    ({"num_layers": 3}, "num_layers"),
    ({"num_experts": 8, "top_k": 2}, "MoE"),
    ({"block_norms": 2}, "block_norms"),
    ({"mamba_groups": 3}, "mamba_groups"),
    ({"hybrid_pattern": "MXM-"}, "hybrid_pattern"),
])
def test_bad_hybrid_specs_are_refused(bad, field):
    base = dict(num_layers=4, hidden=256, num_heads=4, vocab_size=1000, block_norms=1, hybrid_pattern="M*M-",
                mamba_head_dim=32)
    with pytest.raises(ValidationError, match=field):
        ModelSpec(**{**base, **bad})


def _scenario(model, **layout):
    from trainsim.specs.loaders import build_scenario
    return build_scenario({"model": model, "cluster": "dgx-h100", "gpus": 8, "layout": layout or {"tp": 1},
                           "training": {"seq_len": 8192, "global_batch": 64, "micro_batch": 1, "dtype": "bf16",
                                        "recompute": "none"}})


def test_mamba_layer_flops_closed_form():
    """Nemotron-H 8B Mamba layer, tp 2, b·s = 8192 tokens: in_proj 2·T·h·(2·8192 + 2·1024 + 128)/2, out_proj
    2·T·(8192/2)·h; SSD forward (arXiv:2405.21060 Sec. 6) 2·T·Q·N·G/2 + H/2·(2·T·Q·P + 4·T·N·P)."""
    from trainsim.cost_models import flops
    from trainsim.cost_models.shapes import block_kinds
    scn = _scenario("nemotron-h-8b", tp=2)
    mamba = next(s for s, _ in block_kinds(scn) if s.model.hybrid_pattern == "M")
    ops = {op.name: op for op in flops.layer_ops(mamba)}
    T, h = 8192, 4096
    assert ops["mamba_in_proj"].fwd_flops == 2 * T * h * 18560 / 2
    assert ops["mamba_out_proj"].fwd_flops == 2 * T * 4096 * h
    assert ops["ssd_scan"].fwd_flops == 2 * T * 128 * 128 * 4 + 64 * (2 * T * 128 * 64 + 4 * T * 128 * 64)
    # Megatron-LM's own estimate (megatron/training/training.py mamba_layer_flops) puts the scan at 7·T·d_in·N with
    # d_in = 2h: within 15 % of the SSD count for this shape (its note says the estimate predates the SSD kernels).
    assert ops["ssd_scan"].fwd_flops * 2 == pytest.approx(7 * T * 2 * h * 128, rel=0.15)


def test_hybrid_model_flops_are_the_sum_of_its_layer_kinds():
    """Model FLOPs per token of Nemotron-H 8B: 24 Mamba, 24 MLP and 4 attention layers and the head, each from its
    kind's ops; the MLP layers are exactly 3 x 2 x 2·h·f per token."""
    from trainsim.cost_models import model_flops
    from trainsim.cost_models.shapes import block_kinds
    scn = _scenario("nemotron-h-8b")
    kinds = {s.model.hybrid_pattern: (s, n) for s, n in block_kinds(scn)}
    assert {k: n for k, (_, n) in kinds.items()} == {"M": 24, "-": 24, "*": 4}
    mlp = model_flops.layer_flops(kinds["-"][0])
    assert mlp.model == 3 * 2 * 2 * 4096 * 21504 * 8192
    total = sum(n * model_flops.layer_flops(s).model for s, n in kinds.values())
    head = 3 * 2 * 8192 * 131072 * 4096
    assert model_flops.model_flops_per_token(scn) * 8192 == pytest.approx(total + head, rel=1e-12)


def test_hybrid_mean_layer_memory_is_exact_for_the_stack():
    """Activations and parameters per rank of the stack's mean layer times its layers equal the kinds' sums."""
    from trainsim.cost_models import activations as act
    from trainsim.cost_models import memory
    from trainsim.cost_models.shapes import block_kinds
    scn = _scenario("nemotron-3-nano-30b-a3b", tp=1, ep=8)
    kinds = block_kinds(scn)
    mean = act.layer_activation_bytes(scn).total * 52
    assert mean == pytest.approx(sum(n * act.layer_activation_bytes(s).total for s, n in kinds), rel=1e-12)
    d, e = memory.layer_params_per_rank(scn.model, 1, 8)
    layers = scn.model.total_params() - scn.model.embedding_params()
    routed = 23 * 128 * 2 * 2688 * 1856
    assert 52 * (d + e) == pytest.approx(layers - routed + routed / 8, rel=1e-12)


def test_hybrid_moe_router_counts_its_bias():
    """The MoE layers' router is ModelSpec.router_params (hidden x experts, + one bias per expert with router_bias):
    Nemotron 3 Nano with router_bias adds 23 MoE layers x 128 experts = 2944 parameters, and the mean layer per
    rank (tp = ep = 1) times 52 still equals the layers' parameters."""
    from trainsim.cost_models import memory
    nano = load_model("nemotron-3-nano-30b-a3b")
    biased = ModelSpec(**{**nano.model_dump(), "router_bias": True})
    assert biased.total_params() - nano.total_params() == 23 * 128
    for m in (nano, biased):
        d, e = memory.layer_params_per_rank(m, 1, 1)
        assert 52 * (d + e) == pytest.approx(m.total_params() - m.embedding_params(), rel=1e-15)


def test_hybrid_scenarios_refuse_what_is_not_modelled():
    from trainsim.specs.errors import SpecError
    with pytest.raises(SpecError, match="layout.pp"):
        _scenario("nemotron-h-8b", pp=2)
    with pytest.raises(SpecError, match="layout.tp"):
        _scenario("nemotron-3-nano-30b-a3b", tp=4, ep=2)  # 2 query groups: tp 4 refused by the attention check


def test_sequence_parallel_shards_the_mamba_in_proj_input():
    """Nemotron-H 8B Mamba layer, tp 2, bf16, T = 8192 tokens, h 4096: SP shards the pre-norm's input (2·T·h), its
    fp32 rstd (4·T) and in_proj's saved input (2·T·h; TELayerNormColumnParallelLinear saves the sequence shard) --
    each cut by (tp-1)/tp; nothing else of the layer moves."""
    from trainsim.cost_models import activations as act
    from trainsim.cost_models.shapes import block_kinds
    from trainsim.specs.loaders import build_scenario

    def mamba_bytes(sp):
        scn = build_scenario({"model": "nemotron-h-8b", "cluster": "dgx-h100", "gpus": 8, "layout": {"tp": 2},
                              "training": {"seq_len": 8192, "global_batch": 64, "micro_batch": 1, "dtype": "bf16",
                                           "recompute": "none", "sequence_parallel": sp}})
        return act.layer_activation_bytes(next(s for s, _ in block_kinds(scn) if s.model.hybrid_pattern == "M")).total

    T, h, tp = 8192, 4096, 2
    assert mamba_bytes(False) - mamba_bytes(True) == pytest.approx((2 * T * h + 4 * T + 2 * T * h) * (tp - 1) / tp,
                                                                    rel=1e-12)


def test_hybrid_stack_refuses_nvfp4():
    """NVFP4 would run the Mamba linears in bf16 while counting their NVFP4 weight copies: refused, naming the dtype."""
    from trainsim.specs.errors import SpecError
    from trainsim.specs.loaders import build_scenario
    raw = {"model": "nemotron-h-8b", "cluster": "gb200-nvl72", "gpus": 8, "layout": {"tp": 1},
           "training": {"seq_len": 8192, "global_batch": 64, "micro_batch": 1, "dtype": "nvfp4"}}
    with pytest.raises(SpecError) as err:
        build_scenario(raw)
    assert err.value.field == "training.dtype" and "hybrid_pattern" in str(err.value)


def test_rank_tensors_are_the_hybrid_layers():
    """The per-tensor list (DDP buckets, ZeRO shards) holds each layer of the pattern: with tp 1 its elements sum
    to the model's parameters (Nemotron-H 8B); with ep 8 a Nano rank holds an eighth of the routed experts."""
    from trainsim.cost_models.param_tensors import rank_tensors
    m8 = load_model("nemotron-h-8b")
    tensors = rank_tensors(_scenario("nemotron-h-8b"), 0)
    assert sum(t.elems for t in tensors) == m8.total_params()
    assert sum(1 for t in tensors if t.name.endswith("A_log")) == 24
    nano = load_model("nemotron-3-nano-30b-a3b")
    on_rank = sum(t.elems for t in rank_tensors(_scenario("nemotron-3-nano-30b-a3b", tp=1, ep=8), 0))
    routed = 23 * 128 * 2 * 2688 * 1856
    assert on_rank == pytest.approx(nano.total_params() - routed + routed / 8, rel=1e-12)


def test_simulated_block_is_the_mean_layer():
    """The simulator's block of a hybrid stack is its layer-count-weighted mean: times, activations and parameters
    of the 52 layers are exactly the kinds' sums (Nano, tp 1, no communication exposed in the block)."""
    from trainsim.cost_models import activations as act
    from trainsim.cost_models import compute
    from trainsim.cost_models.shapes import block_kinds
    from trainsim.simulator.block import _block
    scn = _scenario("nemotron-3-nano-30b-a3b", tp=1)
    groups = {"tp": None, "cp": None, "ep": None, "dp": None}
    mean = _block(scn, groups, None)
    kinds = block_kinds(scn)
    pace = mean.times.fwd_s * 52 / sum(n * compute.layer_times(s).fwd_s for s, n in kinds)
    assert pace == pytest.approx(1.0, rel=0.05)  # the slowest-GPU pace only (cost_models/variation.py)
    assert mean.times.bwd_s * 52 == pytest.approx(pace * sum(n * compute.layer_times(s).bwd_s for s, n in kinds))
    assert mean.act_bytes * 52 == pytest.approx(sum(n * act.layer_activation_bytes(s).total for s, n in kinds))


def test_ssd_scan_bytes_count_the_per_head_reads():
    """Nano's SSD forward on one rank, T = 8192 (mbs 1): 5 passes of d_inner, B and C once per head and once per
    group, the chunk states written and read in fp32 by _chunk_state_fwd / _state_passing_fwd and written and read in
    the 16-bit state_dtype by _state_passing_fwd / _chunk_scan_fwd, CB written per group and read per head, dt terms
    (mamba.py)."""
    from trainsim.cost_models import flops
    from trainsim.cost_models.shapes import block_kinds
    scn = _scenario("nemotron-3-nano-30b-a3b", tp=1)
    mamba = next(s for s, _ in block_kinds(scn) if s.model.hybrid_pattern == "M")
    op = next(o for o in flops.layer_ops(mamba) if o.name == "ssd_scan")
    T, e, H, P, N, G, Q = 8192, 2, 64, 64, 128, 8, 128
    states = (T / Q) * H * P * N
    expected = (e * T * (5 * H * P + 2 * H * N + 2 * G * N) + states * (2 * 4 + 2 * e) + T * Q * 4 * (G + H)
                + 3 * 4 * T * H)
    assert op.fwd_bytes == expected
    # Backward: 6 fp32 and 5 16-bit passes over the states (recompute, dstates, _state_passing_bwd, the dx / dB / dC
    # reads), 16 of d_inner, 7 per-head and 8 per-group passes of B / C, CB 3 per group and 4 per head.
    bwd = (e * T * (16 * H * P + 7 * H * N + 8 * G * N) + states * (6 * 4 + 5 * e) + T * Q * 4 * (3 * G + 4 * H)
           + 3 * 4 * T * H)
    assert op.bwd_input_bytes == bwd


def test_ssd_scan_backward_flops_are_the_kernels_products():
    """Nano's SSD backward, T = 8192: the recomputed C·Bᵀ and the two _bmm_chunk_bwd per group (2·T·Q·N each); per
    head the dx, dcb and ddAcs_stable Q x Q x P products (2·T·Q·P each) and the recomputed chunk states, dstates, dx's
    B·dstates, dB and dC P x N products (2·T·N·P each) -- 2x the forward's products plus the recomputed C·Bᵀ and
    states plus _chunk_scan_bwd_ddAcs_stable's second dout·xᵀ (mamba_ssm ssd_combined.py
    _mamba_chunk_scan_combined_bwd)."""
    from trainsim.cost_models import flops
    from trainsim.cost_models.shapes import block_kinds
    scn = _scenario("nemotron-3-nano-30b-a3b", tp=1)
    mamba = next(s for s, _ in block_kinds(scn) if s.model.hybrid_pattern == "M")
    op = next(o for o in flops.layer_ops(mamba) if o.name == "ssd_scan")
    T, H, P, N, G, Q = 8192, 64, 64, 128, 8, 128
    assert op.bwd_input_flops == 3 * 2 * T * Q * N * G + H * (3 * 2 * T * Q * P + 5 * 2 * T * N * P)
    recomputed = 2 * T * Q * N * G + H * 2 * T * N * P
    assert op.bwd_input_flops == 2 * op.fwd_flops + recomputed + H * 2 * T * Q * P


# Nemotron 3 Nano's config.json keys as Megatron-Bridge's NemotronHBridge tests spell them
# (tests/unit_tests/models/nemotronh/test_nemotron_h_bridge.py @067f987d), with the released MoE settings.
NANO_HF = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "attention_bias": False,
    "attention_head_dim": 128, "chunk_size": 128, "conv_kernel": 4, "expand": 2, "hidden_act": "relu2",
    "hidden_size": 2688, "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "intermediate_size": 1856, "mamba_head_dim": 64, "mamba_num_heads": 64, "mamba_proj_bias": False,
    "max_position_embeddings": 8192, "mlp_bias": False, "mlp_hidden_act": "relu2", "n_groups": 8,
    "num_attention_heads": 32, "num_hidden_layers": 52, "num_key_value_heads": 2, "ssm_state_size": 128,
    "tie_word_embeddings": False, "use_bias": False, "use_conv_bias": True, "vocab_size": 131072,
    "n_routed_experts": 128, "num_experts_per_tok": 6, "moe_intermediate_size": 1856,
    "moe_shared_expert_intermediate_size": 3712,
}


def test_nemotron_h_config_json_maps_to_the_preset():
    m = load_model(NANO_HF)
    preset = load_model("nemotron-3-nano-30b-a3b")
    assert m.total_params() == preset.total_params() and m.active_params() == preset.active_params()
    assert (m.hybrid_pattern, m.position_embedding, m.block_norms) == (preset.hybrid_pattern, "none", 1)
    dense = {k: v for k, v in NANO_HF.items() if k not in ("n_routed_experts", "num_experts_per_tok",
                                                           "moe_intermediate_size", "moe_shared_expert_intermediate_size")}
    dense.update(hybrid_override_pattern="M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", hidden_size=4096,
                 intermediate_size=21504, mamba_num_heads=128, num_key_value_heads=8)
    assert load_model(dense).total_params() == 8_100_852_736  # Nemotron-H 8B's checkpoint count


@pytest.mark.parametrize("extra, field", [
    ({"num_nextn_predict_layers": 1}, "mtp_hybrid_override_pattern"),
    ({"use_conv_bias": False}, "use_conv_bias"),
    ({"n_routed_experts": None}, "n_routed_experts"),
])
def test_nemotron_h_config_json_refusals(extra, field):
    from trainsim.specs.errors import SpecError
    with pytest.raises(SpecError, match=f"model.{field}"):
        load_model({**NANO_HF, **extra})


@pytest.mark.parametrize("key", ["use_bias", "mamba_proj_bias", "attention_bias", "mlp_bias"])
def test_nemotron_h_biases_are_refused_by_name(key):
    """Every bias key of NemotronHConfig is refused with the hybrid stack's reason, the attention and MLP ones
    included (the shared mapper's Llama-family refusal does not answer for nemotron_h)."""
    from trainsim.specs.errors import SpecError
    with pytest.raises(SpecError) as ei:
        load_model({**NANO_HF, key: True})
    assert ei.value.field == f"model.{key}" and "hybrid Mamba stack" in str(ei.value)


def test_nemotron_h_attention_bias_on_the_cli_is_one_line_exit_2(tmp_path, capsys):
    import json

    from trainsim.cli.main import main
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**NANO_HF, "attention_bias": True}))
    assert main(["predict", "--model", str(path), "--cluster", "gb200-nvl72", "--gpus", "8", "--ep", "8",
                 "--global-batch", "8", "--seq-len", "4096", "--fast"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.attention_bias" in err[0] and "hybrid Mamba stack" in err[0]


def test_nemotron_h_config_json_with_mtp_is_the_lightning_preset():
    light = load_model({**NANO_HF, "num_nextn_predict_layers": 2, "mtp_hybrid_override_pattern": "*E"})
    preset = load_model("nemotron-3.5-lightning-30b-a3b")
    assert (light.mtp_layers, light.mtp_pattern, light.mtp_shared) == (2, "*E", True)
    assert light.total_params() == preset.total_params()


def test_hybrid_pattern_key_refused_outside_nemotron_h():
    from trainsim.specs.errors import SpecError
    llama = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
             "intermediate_size": 128, "vocab_size": 100, "hybrid_override_pattern": "M*"}
    with pytest.raises(SpecError, match="model.hybrid_override_pattern"):
        load_model(llama)


def test_hybrid_mtp_costs_its_pattern_layers():
    """Nemotron 3.5 Lightning = Nano + two MTP depths sharing one '*E' module (attention + MoE layer): parameters
    once (enorm, hnorm, eh_proj 2h x h, the two layers, final norm), model FLOPs twice -- each depth its two layers,
    its projection and another output-head pass."""
    from trainsim.cost_models import memory, model_flops
    from trainsim.cost_models.param_tensors import mtp_tensors
    from trainsim.cost_models.shapes import block_kinds
    light, nano = _scenario("nemotron-3.5-lightning-30b-a3b"), _scenario("nemotron-3-nano-30b-a3b")
    m = light.model
    assert m.total_params() == nano.model.total_params()          # MTP not in total_params, as for DeepSeek-V3
    h = m.hidden
    module = (m._hybrid_layer_params("*") + m._hybrid_layer_params("E") + 2 * h * h + 3 * h)
    assert sum(memory.mtp_params_per_rank(m, 1, 1)) == module
    assert sum(t.elems for t in mtp_tensors(m, 1, 1, 1, "fused", False)) == module
    kinds = {s.model.hybrid_pattern: s for s, _ in block_kinds(nano)}
    layers = model_flops.layer_flops(kinds["*"]).model + model_flops.layer_flops(kinds["E"]).model
    T, V = 8192, 131072
    per_depth = layers + 3 * 2 * T * (2 * h) * h + 3 * 2 * T * h * V  # two layers, eh_proj, the logits
    extra = (model_flops.model_flops_per_token(light) - model_flops.model_flops_per_token(nano)) * T
    assert extra == pytest.approx(2 * per_depth, rel=1e-9)


def test_hybrid_mtp_needs_its_pattern():
    with pytest.raises(ValidationError, match="mtp_pattern"):
        ModelSpec(num_layers=2, hidden=256, num_heads=4, vocab_size=1000, block_norms=1, hybrid_pattern="M*",
                  mamba_head_dim=32, mtp_layers=1)


def test_ssd_scan_time_is_its_byte_roofline_plus_one_overhead_per_kernel():
    """Nano's SSD on one H100, T = 8192: each pass is the larger of its FLOPs at the 16-bit peak x the fused-attention
    efficiency and its bytes at the STREAM bandwidth (bytes bind at this shape), plus GPUSpec.kernel_overhead_s per
    kernel launched -- 9 forward (five Triton kernels, four parameter casts: A_log's cast, exp, neg and dt_bias's; D
    goes uncast without D_has_hdim), 31 backward (fifteen Triton kernels, twelve torch ops, four cast gradients;
    mamba.SSD_KERNELS_FWD / _BWD)."""
    from trainsim.cost_models import compute, flops
    from trainsim.cost_models.shapes import block_kinds
    scn = _scenario("nemotron-3-nano-30b-a3b", tp=1)
    mamba = next(s for s, _ in block_kinds(scn) if s.model.hybrid_pattern == "M")
    op = next(o for o in flops.layer_ops(mamba) if o.name == "ssd_scan")
    gpu = scn.cluster.gpu
    bw, peak, ov = gpu.hbm_bw_Bps * gpu.hbm_efficiency, gpu.peak_flops["bf16"], gpu.kernel_overhead_s
    assert op.fwd_flops / (peak * gpu.attention_efficiency) < op.fwd_bytes / bw
    t = next(x for x in compute.layer_op_times(mamba) if x.name == "ssd_scan")
    assert t.fwd_s == pytest.approx(op.fwd_bytes / bw + 9 * ov, rel=1e-12)
    assert t.bwd_input_s == pytest.approx(op.bwd_input_bytes / bw + 31 * ov, rel=1e-12)


def test_mamba_conv_and_norm_pay_each_kernel_they_launch():
    """Nano on one H100, T = 8192: the conv1d's forward is one causal_conv1d kernel, its backward six (the recomputed
    forward, dweight/dbias zeros, the backward kernel, two casts: causal-conv1d cpp_functions.py); the group RMSNorm's
    forward one Triton kernel, its backward three (the kernel, _dw.sum(0), the cast: mamba_ssm layernorm_gated.py).
    Each pass is its bytes at the STREAM bandwidth plus one kernel_overhead_s per launch; with two sequences per
    micro-batch the layout copies are two kernels each way."""
    from trainsim.cost_models import compute, flops
    from trainsim.cost_models.shapes import block_kinds
    scn = _scenario("nemotron-3-nano-30b-a3b", tp=1)
    mamba = next(s for s, _ in block_kinds(scn) if s.model.hybrid_pattern == "M")
    gpu = scn.cluster.gpu
    bw, ov = gpu.hbm_bw_Bps * gpu.hbm_efficiency, gpu.kernel_overhead_s
    ops = {o.name: o for o in flops.layer_ops(mamba)}
    times = {t.name: t for t in compute.layer_op_times(mamba)}
    for name, (n_f, n_b) in {"mamba_conv1d": (1, 6), "mamba_norm": (1, 3)}.items():
        assert times[name].fwd_s == pytest.approx(ops[name].fwd_bytes / bw + n_f * ov, rel=1e-12)
        assert times[name].bwd_input_s == pytest.approx(ops[name].bwd_input_bytes / bw + n_b * ov, rel=1e-12)
    assert "mamba_layout_copies" not in ops  # one sequence: the rearranges are views
    two = next(s for s, _ in block_kinds(scn.model_copy(update={"training": scn.training.model_copy(
        update={"micro_batch": 2})})) if s.model.hybrid_pattern == "M")
    copies = next(o for o in flops.layer_ops(two) if o.name == "mamba_layout_copies")
    t = next(x for x in compute.layer_op_times(two) if x.name == "mamba_layout_copies")
    assert t.fwd_s == pytest.approx(copies.fwd_bytes / bw + 2 * ov, rel=1e-12)
