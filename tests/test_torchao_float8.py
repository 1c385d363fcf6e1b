"""torchao float8 training as torchtitan runs it (cost_models/torchao_float8.py, specs/fp8_library.py), held against
closed forms: one Float8Linear's cast bytes for given m, n, k; the bytes of one FSDP2 all-gather pass of Llama 3 8B
with and without float8 all-gather (from its parameter counts); FSDP2's gathered buffers; and the refusals."""

from __future__ import annotations

import pytest

from trainsim.cost_models.flops import _linear
from trainsim.cost_models.fsdp2_peak import fsdp2_of
from trainsim.cost_models.memory import rank_param_shards
from trainsim.cost_models.shapes import layer_shape
from trainsim.simulator.builder import build_cost_table
from trainsim.specs import SpecError
from trainsim.specs.loaders import build_scenario


def _scenario(framework: str = "torch", dtype: str = "fp8", zero: int = 3, **training):
    return build_scenario({
        "model": "llama3-8b", "cluster": {"preset": "dgx-h100", "num_gpus": 16},
        "training": {"seq_len": 4096, "global_batch": 32, "micro_batch": 1, "dtype": dtype, "zero": zero,
                     "framework": framework, **training}})


def _linear_elems(s) -> float:
    """The blocks' linear weight elements of Llama 3 8B (qkv, out-projection, gate, up, down; no tp)."""
    m = s.model
    h, kv = m.hidden, m.kv_heads * m.dhead
    return m.num_layers * (h * (h + 2 * kv) + h * h + 3 * h * m.ffn)


def test_linear_cast_bytes_closed_form():
    """m×k input, k×n weight, e = 2: operands 1 byte; torchao's casts X (4e+2), dY (2e+3), W forward (2e+1)
    and backward (e+1); with the weight gathered in float8 only dX's layout copy of W (2)."""
    m, n, k, e = 64, 32, 16, 2
    op = _linear("x", m, n, k, e, fp8=True, ao=1)
    assert op.fwd_bytes == (m * k + k * n) + m * n * e + m * k * (4 * e + 2) + k * n * (2 * e + 1)
    assert op.bwd_input_bytes == (m * n + k * n) + m * k * e + m * n * (2 * e + 3) + k * n * (e + 1)
    assert op.bwd_weight_bytes == (m * k + m * n) + k * n * e
    gathered = _linear("x", m, n, k, e, fp8=True, ao=2)
    assert gathered.fwd_bytes == (m * k + k * n) + m * n * e + m * k * (4 * e + 2)
    assert gathered.bwd_input_bytes == (m * n + k * n) + m * k * e + m * n * (2 * e + 3) + k * n * 2
    te = _linear("x", m, n, k, e, fp8=True)  # Transformer Engine's: X, W, dY each read e, write 2
    assert te.fwd_bytes == (m * k + k * n) + m * n * e + (m * k + k * n) * (e + 2)


def test_torch_fp8_defaults_to_torchao_and_megatron_to_te():
    assert layer_shape(_scenario()).torchao_fp8 == 1
    assert layer_shape(_scenario(float8_all_gather=True)).torchao_fp8 == 2
    te = build_scenario({"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "num_gpus": 8},
                         "training": {"global_batch": 8, "dtype": "fp8", "framework": "megatron"}})
    assert layer_shape(te).torchao_fp8 == 0


@pytest.mark.parametrize("float8_ag", [False, True])
def test_all_gather_bytes_per_pass(float8_ag):
    """One FSDP2 all-gather pass over the whole model (pp 1): 2 bytes per parameter, the blocks' linear weights 1
    byte under float8 all-gather."""
    s = _scenario(float8_all_gather=float8_ag)
    params = rank_param_shards(s, 0).dense
    gather = build_cost_table(s).stages[0].chunks[0].param_gather
    lin = _linear_elems(s)
    expected = (params - lin) * 2 + lin * 1 if float8_ag else params * 2
    assert gather.nbytes == pytest.approx(expected, rel=1e-9)


def test_gathered_buffers_memory():
    """FSDP2's forward moment: the root's unsharded parameters and its all-gather output (2 bytes each) and the
    first block's two copies, its linear weights in 1 byte under float8 all-gather."""
    s = _scenario(float8_all_gather=True)
    rp = rank_param_shards(s, 0)
    lin_block = _linear_elems(s) / s.model.num_layers
    block_bytes = (rp.block_params - lin_block) * 2 + lin_block
    phases = fsdp2_of(s, rp, 0)
    assert phases.forward == pytest.approx(2 * (rp.root_params * 2 + block_bytes), rel=1e-9)
    assert phases.gather_outputs["backward"] == pytest.approx(block_bytes, rel=1e-9)
    plain = fsdp2_of(_scenario(), rp, 0)
    assert plain.forward == pytest.approx(2 * (rp.root_params + rp.block_params) * 2, rel=1e-9)


def test_precompute_adds_optimizer_time():
    on = build_cost_table(_scenario(float8_all_gather=True, float8_precompute_scale=True)).stages[0].optimizer_s
    off = build_cost_table(_scenario(float8_all_gather=True)).stages[0].optimizer_s
    assert on > off


@pytest.mark.parametrize("kwargs, field", [
    ({"float8_all_gather": True, "zero": 0}, "float8_all_gather"),
    ({"float8_all_gather": True, "dtype": "bf16"}, "float8_all_gather"),
    ({"float8_all_gather": True, "framework": "megatron", "zero": 0}, "float8_all_gather"),
    ({"fp8_library": "torchao", "framework": "megatron", "zero": 0}, "fp8_library"),
    ({"fp8_library": "torchao", "dtype": "bf16"}, "fp8_library"),
    ({"float8_precompute_scale": True}, "float8_precompute_scale"),
])
def test_refusals_name_the_field(kwargs, field):
    with pytest.raises(SpecError, match=field):
        _scenario(**kwargs)


@pytest.mark.parametrize("recipe, x, dy, w", [("rowwise", (4, 2), (4, 2), (4, 2)),
                                              ("rowwise_with_gw_hp", (2, 1), (2, 1), (4, 2))])
def test_recipe_cast_bytes_closed_form(recipe, x, dy, w):
    """Per element (a, b) = a·e + b: rowwise casts each of its six operand uses on its own (X, dY, W 4e+2);
    rowwise_with_gw_hp casts X and dY once (2e+1) and runs dW on their 16-bit tensors, W 4e+2 (forward 2e+1)."""
    m, n, k, e = 64, 32, 16, 2
    op = _linear("x", m, n, k, e, fp8=True, ao=1, ao_recipe=recipe)
    hp = recipe == "rowwise_with_gw_hp"
    assert op.fwd_bytes == (m * k + k * n) + m * n * e + m * k * (x[0] * e + x[1]) + k * n * (2 * e + 1)
    assert op.bwd_input_bytes == ((m * n + k * n) + m * k * e + m * n * (dy[0] * e + dy[1])
                                  + k * n * ((w[0] - 2) * e + w[1] - 1))
    assert op.bwd_weight_bytes == (m * k + m * n) * (e if hp else 1) + k * n * e
    assert op.hp_weight_grad is hp


def test_high_precision_weight_gradient_runs_at_the_16_bit_rate():
    """rowwise_with_gw_hp: fwd and dX GEMMs at the fp8 peak, dW at the bf16 one (H100 datasheet peaks)."""
    from trainsim.cost_models import compute as C
    gpu = _scenario().cluster.gpu
    hw = C.hw_of(gpu, "fp8")
    m, n, k, e = 8192, 4096, 4096, 2
    hp = C.op_times(_linear("x", m, n, k, e, fp8=True, ao=1, ao_recipe="rowwise_with_gw_hp"), hw, dtype="fp8")
    tw = C.op_times(_linear("x", m, n, k, e, fp8=True, ao=1, ao_recipe="rowwise"), hw, dtype="fp8")
    assert hp.bwd_weight_s == C.gemm_time_s(k, n, m, hw, fp8=False, dtype="bf16")
    assert tw.bwd_weight_s == C.gemm_time_s(k, n, m, hw, fp8=True, dtype="fp8")
    assert hp.bwd_weight_s > 1.5 * tw.bwd_weight_s  # H100: 989 vs 1979 dense TFLOP/s
    assert hp.fwd_s < tw.fwd_s  # the forward's X cast is one amax and cast lighter


@pytest.mark.parametrize("kwargs, field", [
    ({"framework": "megatron", "fp8_recipe": "rowwise"}, "fp8_recipe"),
    ({"framework": "megatron", "fp8_recipe": "rowwise_with_gw_hp"}, "fp8_recipe"),
    ({"fp8_recipe": "mxfp8"}, "fp8_recipe"),
    ({"fp8_recipe": "rowwise", "float8_all_gather": True}, "float8_all_gather"),
    ({"fp8_recipe": "rowwise", "dtype": "bf16"}, "fp8_recipe"),
])
def test_recipe_refusals_name_the_field(kwargs, field):
    kwargs = {"dtype": "fp8", **kwargs}
    with pytest.raises(SpecError, match=field):
        _scenario(**kwargs)


def test_recipe_reaches_the_layer_shape():
    assert layer_shape(_scenario(fp8_recipe="rowwise_with_gw_hp")).ao_recipe == "rowwise_with_gw_hp"
    assert layer_shape(_scenario()).ao_recipe == "tensorwise"


def test_routed_experts_stay_16_bit_under_torchao_and_go_fp8_under_te():
    """torchao's float8 converts nn.Linear modules only; torchtitan's routed experts are grouped GEMMs on bf16
    parameters: their ops carry no fp8 flag and the 16-bit closed form of their bytes. Transformer Engine's grouped
    experts run fp8."""
    from trainsim.cost_models.flops import layer_ops

    def experts(framework):
        s = build_scenario({"model": "mixtral-8x7b", "cluster": {"preset": "dgx-h100", "num_gpus": 16},
                            "training": {"seq_len": 4096, "global_batch": 32, "dtype": "fp8", "zero": 3,
                                         "framework": framework}})
        shp = layer_shape(s)
        return shp, [op for op in layer_ops(shp) if op.name.startswith("expert_fc")]

    shp, ao = experts("torch")
    assert ao and not any(op.fp8 for op in ao)
    fc1 = next(op for op in ao if op.name == "expert_fc1")
    (m, n, k), = fc1.fwd_gemms
    assert fc1.fwd_bytes == fc1.batch * ((m * k + k * n) * shp.e + m * n * shp.e)  # operands and output, 16-bit
    _, te = experts("megatron")
    assert te and all(op.fp8 for op in te)


def test_plan_keeps_float8_all_gather_on_fsdp_candidates(tmp_path, capsys):
    """A scenario file's float8_all_gather pins plan's ZeRO stage to 3 (FSDP gathers the float8 weights), as
    offloaded parameters do; an explicit --zero below 3 is refused naming the field."""
    import json

    from trainsim.cli.main import main

    path = tmp_path / "s.yaml"
    path.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 16\ntraining: {global_batch: 64, seq_len: 4096, "
                    "framework: torch, dtype: fp8, float8_all_gather: true}\n")
    assert main(["plan", str(path), "--top", "3", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows and {r["zero"] for r in rows} == {3}
    assert main(["plan", str(path), "--zero", "1"]) == 2
    assert "training.float8_all_gather" in capsys.readouterr().err


def test_eager_torchao_blocks_run_torchtitans_eager_code():
    """Float8Linear replaces only the linears: an eager torch fp8 block is torchtitan's eager block (as bf16 is);
    compiled it is Inductor's fused code, and Transformer Engine fp8 never runs torchtitan's block."""
    assert layer_shape(_scenario()).titan and layer_shape(_scenario(dtype="bf16")).titan
    assert not layer_shape(_scenario(compile=True)).titan
    assert not layer_shape(_scenario(framework="megatron", zero=1, distributed_optimizer=True)).titan


def test_memory_assumptions_name_the_library_that_holds_the_fp8_weights():
    """The fp8_weights line names what the memory model holds: torchao casts per use (no fp8 copy held; FSDP2's fp8
    gather where on), Transformer Engine's cached copy only where the framework keeps one (Megatron below ZeRO-3)."""
    from trainsim.cost_models.model_states import memory_assumptions

    def note(s):
        return memory_assumptions(s.training)["fp8_weights"]

    assert "torchao" in note(_scenario()) and note(_scenario()).startswith("no fp8 weight copy held")
    assert "FSDP2 gathers" in note(_scenario(float8_all_gather=True))
    assert note(_scenario(framework="megatron", zero=1)).startswith("16-bit weights plus Transformer Engine's cached")
    assert "per use" in note(_scenario(framework="megatron", zero=3))


def _mixtral_ep8(**training):
    return build_scenario({"model": "mixtral-8x7b", "cluster": {"preset": "dgx-h100", "num_gpus": 16},
                           "layout": {"ep": 8},
                           "training": {"seq_len": 4096, "global_batch": 32, "micro_batch": 1, "dtype": "fp8",
                                        "zero": 3, "framework": "torch", **training}})


def test_expert_and_dense_gathers_carry_their_own_bytes(monkeypatch):
    """Mixtral 8x7B, EP 8 on 16 GPUs, float8 all-gather: the dense part gathers over the 16-rank shard group with its
    blocks' linear weights in 1 byte and the rest in 2; the routed experts (no nn.Linear) gather over the 2-rank
    expert-data-parallel group in 2 bytes each. _coll is replaced by one that reports each all-gather's bytes as
    latency (dense group) or bandwidth seconds (expert group), so the Transfer sums each part's bytes."""
    from trainsim.cost_models.param_tensors import chunk_tensors
    from trainsim.simulator import grad_sync

    def fake(op, nbytes, group, scenario, profile):
        if op != "all_gather" or group is None:
            return 0.0, 0.0
        return (0.0, nbytes) if group.size == 2 else (nbytes, 0.0)

    monkeypatch.setattr(grad_sync, "_coll", fake)
    s = _mixtral_ep8(float8_all_gather=True)
    tensors = chunk_tensors(s, 0)
    expert = sum(t.elems for t in tensors if t.expert)
    dense = sum(t.elems for t in tensors if not t.expert)
    lin = sum(t.elems for t in tensors if t.kind == "weight" and not t.expert)
    gather = build_cost_table(s).stages[0].chunks[0].param_gather
    assert gather.transfer_s == pytest.approx(expert * 2, rel=1e-9)          # 11.27 GB
    assert gather.latency_s == pytest.approx((dense - lin) * 2 + lin, rel=1e-9)  # 1.87 GB
    assert gather.nbytes == pytest.approx(expert * 2 + (dense - lin) * 2 + lin, rel=1e-9)


def test_gather_pool_replays_float8_blocks_at_their_gathered_bytes():
    """FSDP2's all-gather pool (fsdp_stream_pools.py) with a root of 2 blocks' parameters at 2 bytes and blocks
    gathered in 1 byte: the forward holds the root's 4-block-byte output and the first block's 1-byte one, the later
    blocks carved from the freed segments; beyond the largest output, one block's 1-byte output (2 bytes when every
    unit gathers in 2)."""
    from trainsim.cost_models.fsdp_stream_pools import gather_pool_extra
    block, shard = 64 * (1 << 20), 8
    units = (2.0 * block,) + (float(block),) * 4
    assert gather_pool_extra(units, shard, 2, None, (2.0,) + (1.0,) * 4) == block * 1
    assert gather_pool_extra(units, shard, 2) == block * 2


def test_stream_pools_use_the_float8_block_bytes():
    """Llama 3 8B, 16 ranks, float8 all-gather: with nothing counted as allocated the all-gather pool reserves the
    root's 2-byte output and one block's, each a segment rounded to 2 MiB; the block's output holds its linear
    weights in 1 byte, the rest in 2, so the pools differ from the 2-byte replay by the two block segments."""
    from trainsim.cost_models.memory import _stream_pools
    s = _scenario(float8_all_gather=True)
    rp = rank_param_shards(s, 0)
    shard = 16
    b = -(-int(rp.block_params) // shard) * shard  # padded to the shard group
    lin = _linear_elems(s) / s.model.num_layers
    seg = 2 * (1 << 20)

    def r2(x):
        return -(-x // seg) * seg

    f8 = r2(-(-b * ((rp.block_params - lin) * 2 + lin) / rp.block_params // 1))
    assert _stream_pools(s, 0, 4, 0.0) - _stream_pools(_scenario(), 0, 4, 0.0) == pytest.approx(f8 - r2(2 * b), abs=1)


def test_backward_shard_cast_only_for_regathered_blocks():
    """FSDP2 keeping the root and the last block unsharded after forward (fsdp_unsharded_after_forward
    root_and_last_block) gathers every block but the last again in the backward: the backward casts the fp32 shards
    (amax read 4, cast read 4, write 1 byte per element on a 16-rank shard group) of all blocks' linear weights but
    the last block's, and copies out all blocks' parameters but the last's; the forward casts all of them. The root
    (embedding, norms, output layer) holds no float8 weight, so without a kept block the backward casts them all."""
    from trainsim.simulator.builder import _fsdp2_copies_s, _regathered
    from trainsim.simulator.step_context import _step_context
    s = _scenario(float8_all_gather=True, fsdp_unsharded_after_forward="root_and_last_block")
    st = _step_context(s, None)
    rp = rank_param_shards(s, 0)
    blocks = rp.block_params * s.model.num_layers
    lin_block = _linear_elems(s) / s.model.num_layers
    params, lin = blocks + rp.root_params, _linear_elems(s)
    regathered, regathered_f8 = _regathered(st, 0, blocks)
    assert regathered == pytest.approx(blocks - rp.block_params, rel=1e-12)
    assert regathered_f8 == pytest.approx(lin - lin_block, rel=1e-12)
    every = _regathered(_step_context(_scenario(float8_all_gather=True), None), 0, blocks)
    assert every[0] == blocks and every[1] == pytest.approx(lin, rel=1e-12)
    f, b = _fsdp2_copies_s(st, params, (regathered, regathered_f8), 0)
    assert f == _fsdp2_copies_s(st, params, every, 0)[0]
    lin_b = lin - lin_block  # the re-gathered blocks' linear weights
    nbytes = 2 * ((regathered - lin_b) * 2 + lin_b) + params * (2 + s.training.grad_bytes) + lin_b / 16 * (4 + 4 + 1)
    assert b == pytest.approx((nbytes / st.hw.mem_Bps + st.hw.overhead_s) * st.slowest, rel=1e-9)


def test_backward_copy_out_moves_the_regathered_blocks_bytes():
    """Llama 3 8B, float8 all-gather, 16 ranks: the backward copies out the re-gathered blocks (read and write their
    gathered bytes: linear weights L in 1 byte, the rest in 2; the root's 16-bit parameters are not re-gathered),
    copies in every gradient (read 2, write the reduce dtype) and casts every float8 weight's fp32 shard (9 bytes
    per element)."""
    from trainsim.simulator.builder import _fsdp2_copies_s
    from trainsim.simulator.step_context import _step_context
    s = _scenario(float8_all_gather=True)
    st = _step_context(s, None)
    rp = rank_param_shards(s, 0)
    blocks, lin = rp.block_params * s.model.num_layers, _linear_elems(s)
    params = blocks + rp.root_params
    nbytes = 2 * ((blocks - lin) * 2 + lin) + params * (2 + s.training.grad_bytes) + lin / 16 * 9
    _, b = _fsdp2_copies_s(st, params, (blocks, lin), 0)
    assert b == pytest.approx((nbytes / st.hw.mem_Bps + st.hw.overhead_s) * st.slowest, rel=1e-9)


def test_amax_all_reduces_per_gather_or_once_per_step():
    """Without the precompute each float8 weight's shard cast all-reduces its 4-byte amax over the shard group before
    every all-gather: Llama 3 8B's 32 x 7 linear weights add 224 such all-reduces to the gather Transfer. With it the
    gather holds none and the optimizer step reads every fp32 float8 shard once (4 bytes per element) and
    all-reduces the 224 stacked amaxes in one collective."""
    from trainsim.simulator.builder import _float8_precompute_s
    from trainsim.simulator.exposures import _coll
    from trainsim.simulator.step_context import _step_context
    off = _scenario(float8_all_gather=True)
    on = _scenario(float8_all_gather=True, float8_precompute_scale=True)
    n = 7 * off.model.num_layers
    st = _step_context(off, None)
    lat, bw = _coll("all_reduce", 4, st.shard_group, off, None)
    assert lat > 0
    g_off = build_cost_table(off).stages[0].chunks[0].param_gather
    g_on = build_cost_table(on).stages[0].chunks[0].param_gather
    assert g_off.latency_s - g_on.latency_s == pytest.approx(n * lat, rel=1e-9)
    assert g_off.transfer_s - g_on.transfer_s == pytest.approx(n * bw, rel=1e-9)
    assert _float8_precompute_s(st, 0) == 0.0
    st_on = _step_context(on, None)
    lat1, bw1 = _coll("all_reduce", 4 * n, st_on.shard_group, on, None)
    read = (_linear_elems(on) / 16 * 4 / st_on.hw.mem_Bps + st_on.hw.overhead_s) * st_on.slowest
    assert _float8_precompute_s(st_on, 0) == pytest.approx(read + lat1 + bw1, rel=1e-9)


@pytest.mark.parametrize("layout, schedule", [({"pp": 2, "stage_layers": [32, 0]}, "1f1b"),
                                              ({"pp": 2, "vpp": 2}, "interleaved")])
def test_the_kept_last_block_is_found_by_the_layer_range(layout, schedule):
    """The model's last block is kept unsharded (root_and_last_block) in whichever chunk holds layer L-1, also
    when the last virtual stage holds no layer."""
    from trainsim.simulator.builder import _regathered
    from trainsim.simulator.step_context import _step_context
    s = build_scenario({"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "num_gpus": 16}, "layout": layout,
                        "training": {"seq_len": 4096, "global_batch": 32, "micro_batch": 1, "dtype": "fp8", "zero": 3,
                                     "framework": "torch", "float8_all_gather": True, "schedule": schedule,
                                     "fsdp_unsharded_after_forward": "root_and_last_block"}})
    st = _step_context(s, None)
    lin_block = _linear_elems(s) / s.model.num_layers
    holder = max(v for v in range(len(s.stage_layers)) if s.stage_layers[v])
    for v, n in enumerate(s.stage_layers):
        got = _regathered(st, v, 1e12)  # any block-parameter count: the kept block's elements come off it
        kept = v == holder
        assert got[1] == pytest.approx(n * lin_block - (lin_block if kept else 0.0), rel=1e-12), v
        assert (got[0] < 1e12) == kept


def test_float8_all_gather_without_a_sharded_dimension_is_refused():
    """HSDP with layout.dp_shard 1 shards no parameter, so FSDP's float8 all-gather has nothing to gather (torchtitan
    enables it only with dp_shard_enabled): refused naming the field, not a traceback in the builder."""
    from trainsim.specs import SpecError
    from trainsim.specs.loaders import build_scenario

    with pytest.raises(SpecError, match="training.float8_all_gather"):
        build_scenario({"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 16, "layout": {"dp_shard": 1},
                        "training": {"framework": "torch", "dtype": "fp8", "zero": 3, "seq_len": 4096,
                                     "global_batch": 16, "float8_all_gather": True}})
