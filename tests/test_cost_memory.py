"""Memory per rank: ZeRO model states (ZeRO paper Table 1), Korthikanti's activation formulas, the
flash/no-dropout block torch actually saves, in-flight micro-batches, sharding, offload and buffers."""

from __future__ import annotations

import pandas as pd
import pytest

from trainsim.cost_models import activations as act
from trainsim.cost_models.memory import (
    activation_bytes_per_microbatch,
    all_stage_memory,
    inflight_microbatches,
    model_state_bytes,
    peak_bytes,
    rank_param_shards,
    stage_memory,
)
from trainsim.data import validation_path
from trainsim.specs import SpecError, build_scenario, load_model

ZERO = pd.read_csv(validation_path("zero_memory.csv"), dtype={"memory_per_device_GB": str})
ZERO_CELLS = ZERO[ZERO.record_type == "model_state_memory_per_device"]
FORMULAS = pd.read_csv(validation_path("formulas.csv")).set_index("id")
STAGE = {"baseline": 0, "ZeRO-1": 1, "ZeRO-2": 2, "ZeRO-3": 3}

# Korthikanti et al. Table 3 model configurations (h, a, L) at s = 2048, t = 8.
KORTH = {"22B": (6144, 64, 48), "175B": (12288, 96, 96), "530B": (20480, 128, 105), "1T": (25600, 160, 128)}


def scen(model, gpus=8, layout=None, cluster="dgx-a100", **training):
    training.setdefault("micro_batch", 1)
    return build_scenario({"model": model, "cluster": cluster, "gpus": gpus, "layout": layout or {},
                           "training": training})


def gpt(h, a, L, V=51200, s=2048):
    return {"num_layers": L, "hidden": h, "num_heads": a, "vocab_size": V, "max_seq_len": s}


# ---- ZeRO model states ---------------------------------------------------------------------------

def test_zero_table1_has_54_cells():
    assert (ZERO_CELLS.source_table == "Table 1").sum() == 54


@pytest.mark.parametrize("row_id", list(ZERO_CELLS.row_id))
def test_zero_paper_model_state_memory(row_id):
    """ZeRO Table 1 (all 54 cells) and Fig. 1: 2+2+K bytes per parameter, sharded by stage over Nd.

    Within 1%, or within half a unit of the last printed digit (e.g. 0.12 GB printed for 0.1172)."""
    r = ZERO_CELLS[ZERO_CELLS.row_id == row_id].iloc[0]
    stage = next(v for k, v in STAGE.items() if r.zero_stage.startswith(k))
    psi, nd, K = float(r.model_params_b) * 1e9, int(r.dp_degree_Nd), int(r.optimizer_K)
    w, g, o = model_state_bytes(psi, stage, nd, param_bytes=2, grad_bytes=2, optimizer_bytes=K)
    got_gb = (w + g + o) / 1e9
    printed = r.memory_per_device_GB
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    tol = max(0.01 * float(printed), 0.5 * 10 ** -decimals)
    assert abs(got_gb - float(printed)) <= tol
    assert got_gb == pytest.approx(float(r.formula_check_GB), abs=1e-3 + 1e-6 * float(r.formula_check_GB))


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_stage_memory_model_states_follow_zero_formulas(zero):
    """[zero_baseline, zero_1, zero_2, zero_3] on a real scenario (GPT 7.5B, DP 64, no model parallelism)."""
    s = scen("gpt-7.5b", gpus=64, zero=zero, global_batch=64, framework="deepspeed")  # the ZeRO paper: 2 + 2 + 12
    psi, nd = s.model.total_params(), 64
    expected = {0: 16 * psi, 1: 4 * psi + 12 * psi / nd, 2: 2 * psi + 14 * psi / nd, 3: 16 * psi / nd}[zero]
    assert stage_memory(s, 0).model_states == pytest.approx(expected, rel=1e-12)


def test_distributed_optimizer_is_zero1():
    a = stage_memory(scen("gpt-7.5b", gpus=64, zero=1, global_batch=64), 0)
    b = stage_memory(scen("gpt-7.5b", gpus=64, distributed_optimizer=True, global_batch=64), 0)
    assert (a.weights, a.grads, a.optimizer) == (b.weights, b.grads, b.optimizer)


def test_zero_shards_over_dp_times_cp():
    s = scen("llama3-8b", gpus=16, layout={"cp": 2}, cluster="dgx-h100", zero=3, seq_len=8192, global_batch=16)
    assert rank_param_shards(s, 0).weight_params == pytest.approx(s.model.total_params() / 16)


# ---- parameter sharding over TP / PP / EP ---------------------------------------------------------

@pytest.mark.parametrize("name", ["gpt3-175b", "llama3-70b", "mixtral-8x7b", "tiny-gpt"])
def test_pipeline_stages_hold_every_parameter_once(name):
    m = load_model(name)
    pp = 4
    s = scen(name, gpus=pp, layout={"pp": pp}, cluster="dgx-h100", global_batch=8, seq_len=256)
    held = sum(rank_param_shards(s, st).held for st in range(pp))
    dup = m.vocab_size * m.hidden if m.tie_embeddings else 0  # Megatron's word-embedding copy on the last stage
    assert held == m.total_params() + dup


def test_tensor_parallel_shards_matrices_and_replicates_norms():
    s1 = scen("llama3-70b", gpus=1, cluster="dgx-h100", global_batch=8, seq_len=256)
    s8 = scen("llama3-70b", gpus=8, layout={"tp": 8}, cluster="dgx-h100", global_batch=8, seq_len=256)
    m = s1.model
    replicated = m.num_layers * 2 * m.norm_params() + m.norm_params()  # RMSNorm weights (no biases)
    full, part = rank_param_shards(s1, 0).held, rank_param_shards(s8, 0).held
    assert part == pytest.approx((full - replicated) / 8 + replicated, rel=1e-12)


def test_experts_split_by_ep_and_sharded_over_expert_dp():
    s = scen("mixtral-8x7b", gpus=16, layout={"ep": 8}, cluster="dgx-h100", zero=1, global_batch=16, seq_len=256)
    m, rp = s.model, rank_param_shards(s, 0)
    assert rp.expert == m.num_layers * (m.num_experts // 8) * m.mlp_params(m.expert_ffn)
    # optimizer shards: dense part over dp·cp = 16, experts over the expert-DP group 16/8 = 2
    assert rp.optimizer_params == pytest.approx(rp.dense / 16 + rp.expert / 2)


# ---- Korthikanti activation formulas -------------------------------------------------------------

CASES = [("act_none", 1, False, "none"), ("act_tp", 8, False, "none"), ("act_tp_sp", 8, True, "none"),
         ("act_tp_sel", 8, False, "selective"), ("act_tp_sp_sel", 8, True, "selective"),
         ("act_full", 8, False, "full"), ("act_tp", 4, False, "none"), ("act_tp_sp", 2, True, "none")]


@pytest.mark.parametrize("row_id,t,sp,recompute", CASES)
@pytest.mark.parametrize("size", sorted(KORTH))
@pytest.mark.parametrize("b", [1, 4])
def test_korthikanti_activation_formulas_exact(row_id, t, sp, recompute, size, b):
    """formulas.csv act_* rows: 16-bit, dropout with 1-byte masks, unfused attention, LayerNorm + GeLU 4h.

    Korthikanti count the main tensors and leave out LayerNorm statistics (their Sec. 4): ``main``."""
    h, a, L = KORTH[size]
    s = scen(gpt(h, a, L), gpus=t, layout={"tp": t}, seq_len=2048, global_batch=b, micro_batch=b,
             dropout=True, flash_attention=False, sequence_parallel=sp, recompute=recompute)
    S = 2048
    sbh = S * b * h
    formula = {
        "act_none": sbh * (34 + 5 * a * S / h),
        "act_tp": sbh * (10 + 24 / t + 5 * a * S / (h * t)),
        "act_tp_sp": sbh / t * (34 + 5 * a * S / h),
        "act_tp_sel": sbh * (10 + 24 / t),
        "act_tp_sp_sel": sbh * 34 / t,
        "act_full": 2 * sbh,
    }[row_id]
    assert row_id in FORMULAS.index
    assert act.layer_activation_bytes(s).main == pytest.approx(formula, rel=1e-12)
    assert act.korthikanti_bytes(S, b, h, a, t, sp=sp, recompute=recompute) == pytest.approx(formula, rel=1e-12)
    # The small terms Korthikanti drop really are small.
    assert act.layer_activation_bytes(s).small < 0.01 * formula


@pytest.mark.parametrize("size", sorted(KORTH))
def test_korthikanti_first_stage_total_1f1b_and_interleaved(size):
    """[act_total_1f1b] (sbhL/t)(34 + 5as/h) on the first stage with TP+SP; interleaved × (1 + (p-1)/(pv))."""
    h, a, L = KORTH[size]
    t, p = 8, {"22B": 1, "175B": 8, "530B": 35, "1T": 64}[size]
    S, b = 2048, 1
    kw = dict(seq_len=S, micro_batch=b, dropout=True, flash_attention=False, sequence_parallel=True)
    s = scen(gpt(h, a, L), gpus=t * p, layout={"tp": t, "pp": p}, global_batch=4 * p, **kw)
    per_layer = act.layer_activation_bytes(s).main
    first = inflight_microbatches("1f1b", p, s.num_microbatches, 0) * s.layers_on_stage(0) * per_layer
    assert first == pytest.approx(S * b * h * L / t * (34 + 5 * a * S / h), rel=1e-12)
    if p > 1 and L % (2 * p) == 0:
        v = 2
        si = scen(gpt(h, a, L), gpus=t * p, layout={"tp": t, "pp": p, "vpp": v}, global_batch=4 * p,
                  schedule="interleaved", **kw)
        inter = inflight_microbatches("interleaved", p, si.num_microbatches, 0, v) * si.layers_on_stage(0) * per_layer
        assert inter == pytest.approx(first * (1 + (p - 1) / (p * v)), rel=1e-12)


@pytest.mark.parametrize("dtype,e", [("bf16", 2), ("fp32", 4)])
@pytest.mark.parametrize("b,s,h,a", [(2, 64, 128, 4), (1, 2048, 4096, 32), (4, 1024, 2048, 16)])
def test_flash_no_dropout_gpt_block_matches_torch_saved_bytes_formula(dtype, e, b, s, h, a):
    """/shared/notes/torch-distributed-on-cpu.md: a dropout-free SDPA block saves 16·e·s·b·h + LayerNorm
    statistics (mean, rstd: 2 norms × 2 × 4 bytes × b·s) + fp32 logsumexp 4·b·a·s."""
    model = {"num_layers": 2, "hidden": h, "num_heads": a, "vocab_size": 1024, "max_seq_len": s}
    for impl in ("fused", "eager"):
        sc = scen(model, gpus=1, seq_len=s, global_batch=b, micro_batch=b, dtype=dtype)
        got = act.layer_activation_bytes(sc, impl).total
        assert got == 16 * e * s * b * h + 2 * 2 * 4 * b * s + 4 * b * a * s


def test_selective_and_full_recompute_flash_block():
    sc = dict(gpus=1, seq_len=512, global_batch=2, micro_batch=2)
    model = {"num_layers": 2, "hidden": 256, "num_heads": 8, "vocab_size": 1024, "max_seq_len": 512}
    e, T, h = 2, 1024, 256
    assert act.layer_activation_bytes(scen(model, recompute="selective", **sc)).total == 16 * e * T * h + 16 * T
    assert act.layer_activation_bytes(scen(model, recompute="full", **sc)).total == e * T * h


def test_gqa_swiglu_moe_cp_scaling():
    base = dict(cluster="dgx-h100", seq_len=8192, global_batch=8)
    s1 = scen("llama3-8b", gpus=1, **base)
    s_cp = scen("llama3-8b", gpus=4, layout={"cp": 4}, **base)
    assert act.layer_activation_bytes(s_cp).total == pytest.approx(act.layer_activation_bytes(s1).total / 4)
    m, e, T = s1.model, 2, 8192
    # fused: norms 4·h, q/k/v (a + 2kv)·d, output a·d, SwiGLU 3·f; eager SwiGLU 4·f
    expected = e * T * (4 * m.hidden + (m.num_heads + 2 * m.kv_heads) * m.dhead + m.num_heads * m.dhead + 3 * m.ffn)
    assert act.layer_activation_bytes(s1).main == expected
    mx = scen("mixtral-8x7b", gpus=8, layout={"ep": 8}, **base)
    dense_like = e * T * (4 * m.hidden + (m.num_heads + 2 * m.kv_heads) * m.dhead + m.num_heads * m.dhead)
    k = mx.model.top_k
    # Megatron-Core's weighted SwiGLU saves the fp32 probabilities, not the expert outputs (moe_probs_in_activation)
    assert act.layer_activation_bytes(mx).main == dense_like + e * T * k * (m.hidden + 3 * mx.model.expert_ffn) + 4 * T * k


def test_fp8_saves_te_linear_inputs_in_one_byte():
    """Transformer Engine saves each linear's input for the wgrad GEMM already in fp8 (linear.py
    ``saved_inputmat = inputmat``; layernorm_linear.py saves the fp8 ``ln_out``), everything else bf16."""
    base = dict(cluster="dgx-h100", seq_len=8192, global_batch=8)
    m, e, T = scen("llama3-8b", gpus=1, **base).model, 2, 8192
    qkv, ad = (m.num_heads + 2 * m.kv_heads) * m.dhead, m.num_heads * m.dhead
    # norm inputs 2·h (bf16) + norm outputs 2·h (fp8) + q/k/v + o (bf16) + o's fp8 copy + gate|up 2·f (bf16)
    # + product f (fp8)
    expected = T * (e * 2 * m.hidden + 2 * m.hidden + e * (qkv + ad) + ad + e * 2 * m.ffn + m.ffn)
    assert act.layer_activation_bytes(scen("llama3-8b", gpus=1, dtype="fp8", **base)).main == expected
    # selective recompute re-runs the attention core: flash's 16-bit output is not kept, the fp8 copy is
    sel = act.layer_activation_bytes(scen("llama3-8b", gpus=1, dtype="fp8", recompute="selective", **base))
    assert sel.main == expected - e * T * ad
    # the output layer is not an fp8 GEMM: the head saves its input in 16 bits either way
    assert (act.head_activation_bytes(scen("llama3-8b", gpus=1, dtype="fp8", **base))
            == act.head_activation_bytes(scen("llama3-8b", gpus=1, dtype="bf16", **base)))
    # the torch executor's eager model has no TE modules: fp8 there changes nothing
    assert (act.layer_activation_bytes(scen("llama3-8b", gpus=1, dtype="fp8", **base), "eager").main
            == act.layer_activation_bytes(scen("llama3-8b", gpus=1, dtype="bf16", **base), "eager").main)
    # MoE: the second norm's output feeds the 16-bit router (2 bytes); experts save dispatched tokens k·h in
    # fp8, gate|up bf16, product fp8, the fp32 probabilities the weighted SwiGLU saves
    mx8 = scen("mixtral-8x7b", gpus=8, layout={"ep": 8}, dtype="fp8", **base)
    k, fe = mx8.model.top_k, mx8.model.expert_ffn
    dense_like = T * (e * 2 * m.hidden + m.hidden + e * m.hidden + e * (qkv + ad) + ad)
    assert act.layer_activation_bytes(mx8).main == dense_like + T * k * (m.hidden + e * 2 * fe + fe + 4)


def test_eager_impl_counts_rmsnorm_fp32_and_swiglu_4f():
    s = scen("llama3-8b", gpus=1, cluster="dgx-h100", seq_len=1024, global_batch=1)
    m, T, e = s.model, 1024, 2
    fused, eager = act.layer_activation_bytes(s, "fused"), act.layer_activation_bytes(s, "eager")
    # RMSNorm: fp32 input + fp32 normalised (8 B/elem) instead of the 2-byte input; SwiGLU +f; RoPE output copy
    extra = 2 * (8 - e) * T * m.hidden + e * T * m.ffn + e * T * m.num_heads * m.dhead
    assert eager.main - fused.main == extra
    with pytest.raises(SpecError):
        act.layer_activation_bytes(s, "jit")


# ---- measured: torch saved_tensors_hooks (skipped without torch) ----------------------------------

def _torch_saved_bytes(kind: str, recompute: str, dtype_name: str, b=2, s=64, h=128, a=4, kv=4, f=512):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    llama = kind == "llama"
    d = h // a

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            norm = (lambda: nn.RMSNorm(h)) if llama else (lambda: nn.LayerNorm(h))
            self.n1, self.n2 = norm(), norm()
            self.q, self.k, self.v = nn.Linear(h, a * d, not llama), nn.Linear(h, kv * d, not llama), nn.Linear(h, kv * d, not llama)
            self.o = nn.Linear(a * d, h, not llama)
            self.fc1, self.fc2 = nn.Linear(h, f, not llama), nn.Linear(f, h, not llama)
            self.gate = nn.Linear(h, f, bias=False) if llama else None

        def core(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != a)

        def attn(self, x):
            B, S = x.shape[:2]
            q = self.q(x).view(B, S, -1, d).transpose(1, 2)
            k = self.k(x).view(B, S, -1, d).transpose(1, 2)
            v = self.v(x).view(B, S, -1, d).transpose(1, 2)
            if llama:  # RoPE as halves rotated with torch.cat (HF Llama style)
                inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
                ang = torch.outer(torch.arange(S, dtype=torch.float32), inv)
                cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)

                def rot(t):
                    t1, t2 = t[..., : d // 2], t[..., d // 2:]
                    return torch.cat((t1 * cos - t2 * sin, t2 * cos + t1 * sin), dim=-1)
                q, k = rot(q), rot(k)
            out = checkpoint(self.core, q, k, v, use_reentrant=False) if recompute == "selective" else self.core(q, k, v)
            return self.o(out.transpose(1, 2).reshape(B, S, -1))

        def mlp(self, x):
            if llama:
                return self.fc2(F.silu(self.gate(x)) * self.fc1(x))
            return self.fc2(F.gelu(self.fc1(x)))

        def forward(self, x):
            x = x + self.attn(self.n1(x))
            return x + self.mlp(self.n2(x))

    torch.manual_seed(0)
    block = Block().to(dt)
    params = {p.untyped_storage().data_ptr() for p in block.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t

    x = torch.randn(b, s, h, dtype=dt, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = checkpoint(block, x, use_reentrant=False) if recompute == "full" else block(x)
    y.float().sum().backward()
    return sum(seen.values())


@pytest.mark.torch
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("kind", ["gpt", "llama"])
def test_eager_impl_equals_torch_saved_tensor_bytes(kind, recompute):
    """Byte-exact against torch's saved tensors (deduplicated by storage, parameters excluded), fp32."""
    measured = _torch_saved_bytes(kind, recompute, "fp32")
    if kind == "gpt":
        model = {"num_layers": 2, "hidden": 128, "num_heads": 4, "ffn_hidden": 512, "vocab_size": 1024,
                 "max_seq_len": 256}
    else:
        model = {"num_layers": 2, "hidden": 128, "num_heads": 4, "num_kv_heads": 4, "ffn_hidden": 512,
                 "vocab_size": 1024, "max_seq_len": 256, "activation": "swiglu", "norm": "rmsnorm",
                 "position_embedding": "rope", "bias": False}
    s = scen(model, gpus=1, seq_len=64, global_batch=2, micro_batch=2, dtype="fp32", recompute=recompute)
    assert act.layer_activation_bytes(s, "eager").total == measured


@pytest.mark.torch
def test_eager_impl_gqa_bf16_within_one_percent_of_torch():
    """bf16 on CPU: LayerNorm/RMSNorm quirks are exact; GQA's k, v are saved unexpanded."""
    measured = _torch_saved_bytes("llama", "none", "bf16", a=8, kv=2, f=352)
    model = {"num_layers": 2, "hidden": 128, "num_heads": 8, "num_kv_heads": 2, "ffn_hidden": 352,
             "vocab_size": 1024, "max_seq_len": 256, "activation": "swiglu", "norm": "rmsnorm",
             "position_embedding": "rope", "bias": False}
    s = scen(model, gpus=1, seq_len=64, global_batch=2, micro_batch=2)
    assert act.layer_activation_bytes(s, "eager").total == pytest.approx(measured, rel=0.01)


# ---- in-flight micro-batches and the per-stage breakdown -----------------------------------------

def test_inflight_microbatches_per_schedule():
    assert inflight_microbatches("gpipe", 4, 16, 0) == 16
    assert [inflight_microbatches("1f1b", 4, 16, st) for st in range(4)] == [4, 3, 2, 1]
    assert [inflight_microbatches("zb", 4, 16, st) for st in range(4)] == [4, 3, 2, 1]
    assert inflight_microbatches("1f1b", 8, 3, 0) == 3  # fewer micro-batches than stages
    p, v = 4, 2  # Megatron: warm-up 2(p-s-1) + (v-1)p chunk forwards + 1, each 1/v of the stage
    assert inflight_microbatches("interleaved", p, 16, 0, v) == (2 * 3 + 4 + 1) / 2 == p * (1 + (p - 1) / (p * v))
    assert inflight_microbatches("interleaved", p, 16, 3, v) == (0 + 4 + 1) / 2
    with pytest.raises(SpecError):
        inflight_microbatches("1f1b", 4, 16, 4)


def test_stage_breakdown_components():
    s = scen("llama3-70b", gpus=64, layout={"tp": 8, "pp": 4}, cluster="dgx-h100", seq_len=8192,
             global_batch=64, zero=1, sequence_parallel=True, recompute="selective")
    stages = all_stage_memory(s)
    first, last = stages[0], stages[-1]
    assert first.inflight_microbatches == 4 and last.inflight_microbatches == 1
    assert first.activations > last.activations
    assert "logits_workspace" in last.details and "logits_workspace" not in first.details
    runtime = {"cuda_context", "cublas_workspace", "nccl_buffers"}
    assert runtime <= set(first.other_terms) and first.other == pytest.approx(sum(first.other_terms.values()))
    assert "sp_gather_buffer" in first.details
    assert first.activations == pytest.approx(4 * activation_bytes_per_microbatch(s, 0)
                                              + act.recompute_working_bytes(s))
    assert peak_bytes(s) == max(st.total for st in stages)
    assert stage_memory(s, 0, inflight_microbatches=1).activations < first.activations


def test_zero3_gather_buffers_and_offload_move_bytes_to_host():
    base = dict(gpus=8, cluster="dgx-h100", seq_len=2048, global_batch=16)
    z3 = stage_memory(scen("llama3-8b", zero=3, **base), 0)
    assert z3.details["zero3_gather_buffers"] > 0
    # DeepSpeed ZeRO-Infinity: fp32 partition + Adam states + fp32 gradient partition and the 16-bit weight shard
    # on the host; the reduce buckets stay on the GPU.
    ds = dict(zero=3, framework="deepspeed", **base)
    off = stage_memory(scen("llama3-8b", offload_optimizer=True, offload_params=True, **ds), 0)
    rp = rank_param_shards(scen("llama3-8b", **ds), 0)
    assert off.optimizer == 0 and off.weights == 0 and off.grads == 0
    assert off.details["offload_reduce_buckets"] == pytest.approx(2 * min(rp.held, 5e8) * 2)
    assert off.host == pytest.approx(rp.optimizer_params * (12 + 4) + rp.weight_params * 2)
    n_micro = 16 // 8
    assert off.pcie_d2h_bytes == pytest.approx(rp.optimizer_params * 2)
    assert off.pcie_h2d_bytes == pytest.approx(rp.optimizer_params * 2 + 2 * n_micro * rp.weight_params * 2)
    assert off.total < z3.total


def test_activation_offload_moves_offloaded_layers_to_host():
    """Megatron-Core/TE --cpu-offloading-num-layers N: N layers' saved activations per chunk live on the host."""
    base = dict(gpus=8, cluster="dgx-h100", seq_len=4096, global_batch=8, zero=3)
    layer = act.layer_activation_bytes(scen("llama3-8b", **base)).total
    on = stage_memory(scen("llama3-8b", offload_activation_layers=12, **base), 0)
    plain = stage_memory(scen("llama3-8b", **base), 0)
    assert plain.activations - on.activations == pytest.approx(12 * layer)
    assert on.host - plain.host == pytest.approx(12 * layer)
    # Megatron-Core's own limits: fewer than num_layers, pp = 1, no recompute
    for bad in (dict(base, offload_activation_layers=32),
                dict(base, offload_activation_layers=4, zero=0, layout={"pp": 4}),
                dict(base, offload_activation_layers=4, recompute="selective")):
        with pytest.raises(SpecError) as ei:
            scen("llama3-8b", **bad)
        assert ei.value.field == "training.offload_activation_layers"


def test_offload_windows_follow_transformer_engines_layer_window_map():
    """TE: w_k = (L//N)(k+1) - 1 (+ the remainder spread over the first L%N); windows w_0, w_k - w_(k-1)."""
    from trainsim.cost_models.memory import offload_windows
    assert offload_windows(80, 40) == [1] + [2] * 39
    assert offload_windows(80, 20) == [3] + [4] * 19
    assert offload_windows(10, 3) == [3, 3, 3]            # w = 3, 6, 9
    assert offload_windows(80, 60) == [1] + [2] * 19 + [1] * 40
    for n, k in ((80, 60), (126, 95), (7, 6), (32, 1)):
        assert sum(offload_windows(n, k)) == n - 1       # the last copy is due at the end of the last layer
    assert offload_windows(8, 0) == [] and offload_windows(8, 8) == []


def test_tied_embedding_duplicate_on_last_stage():
    s = scen("gpt3-175b", gpus=16, layout={"tp": 8, "pp": 2}, seq_len=2048, global_batch=16)
    rp0, rp1 = rank_param_shards(s, 0), rank_param_shards(s, 1)
    m = s.model
    block = (rp0.held - m.vocab_size * m.hidden / 8 - m.max_seq_len * m.hidden) / 48
    assert rp1.held == pytest.approx(48 * block + m.vocab_size * m.hidden / 8 + m.norm_params())


def test_cpu_runtime_reserve_and_bad_stage():
    s = scen("tiny-gpt", gpus=2, layout={"pp": 2}, cluster="cpu-host", seq_len=64, global_batch=4)
    assert stage_memory(s, 0).details["cuda_context"] < 1 << 30
    with pytest.raises(SpecError):
        stage_memory(s, 2)


def test_eager_sequence_parallel_block_matches_two_rank_torch_measurement():
    """Measured once with torchrun, 2 ranks, gloo, torch 2.13 (the executor's TP plan: colwise q,k,v,fc1;
    rowwise o,fc2 to Shard(1); SequenceParallel norms; PrepareModuleInput Shard(1) -> Replicate()):
    a tiny-GPT block (h 128, 4 heads, f 512, fp32, b 1, s 64) saved 295,936 bytes per rank — sharded norm
    inputs and stats, the all-gathered norm outputs whole, q/k/v/o, logsumexp and MLP shards."""
    model = {"num_layers": 2, "hidden": 128, "num_heads": 4, "ffn_hidden": 512, "vocab_size": 1024,
             "max_seq_len": 256}
    s = scen(model, gpus=2, layout={"tp": 2}, cluster="cpu-host", seq_len=64, global_batch=1, dtype="fp32",
             sequence_parallel=True)
    assert act.layer_activation_bytes(s, "eager").total == 295_936
    # Megatron's fused path keeps the norm outputs sequence-sharded: 2·e·T·h/t less.
    assert act.layer_activation_bytes(s, "fused").total == 295_936 - 2 * 4 * 64 * 128 / 2


def test_rank_parameters_follow_qkv_only_biases_of_qwen2():
    """Qwen2 has biases on q, k, v but not on the output projection or MLP: the per-rank parameter count
    must add up to the released 7,615,616,512 (Qwen/Qwen2-7B) at tp=1."""
    from pathlib import Path

    from trainsim.cost_models.memory import rank_param_shards
    from trainsim.specs import build_scenario

    cfg = Path(__file__).parent / "data" / "hf" / "qwen2-7b-config.json"
    s = build_scenario({"model": str(cfg), "cluster": "dgx-h100", "gpus": 8, "training": {"global_batch": 8}})
    assert s.model.total_params() == 7_615_616_512
    shards = rank_param_shards(s, 0)
    assert shards.dense + shards.expert == pytest.approx(7_615_616_512, rel=1e-9)


def test_interleaved_with_as_many_microbatches_as_stages_holds_them_all():
    """Megatron's interleaved schedule warms up with every forward when m == pp (schedules.interleaved):
    the memory model agrees with the engine's allocation timeline."""
    from trainsim.simulator.predict import predict
    sc = scen("llama3-8b", gpus=64, layout={"pp": 4, "vpp": 2}, cluster="dgx-h100", seq_len=8192,
              global_batch=128, micro_batch=2, zero=1, schedule="interleaved")
    assert sc.num_microbatches == 4
    assert inflight_microbatches("interleaved", 4, 4, 0, 2) == 4
    assert peak_bytes(sc) == pytest.approx(predict(sc).peak_bytes, rel=1e-9)


def test_fsdp_gradients_leave_the_peak_only_without_accumulation():
    """allocator_reserve.grads_off_peak: min(grads, activations) for torch FSDP (zero >= 2) with one micro-batch
    per step; nothing where gradients persist (Megatron's grad buffer, DeepSpeed, DDP buckets) or accumulate."""
    from trainsim.cost_models.allocator_reserve import grads_off_peak
    assert grads_off_peak(framework="torch", zero=3, microbatches=1, grads=3.0, activations=10.0) == 3.0
    assert grads_off_peak(framework="pytorch-fsdp", zero=2, microbatches=1, grads=3.0, activations=1.0) == 1.0
    for fw, zero, m in (("torch", 3, 2), ("torch", 1, 1), ("megatron", 3, 1), ("deepspeed", 3, 1)):
        assert grads_off_peak(framework=fw, zero=zero, microbatches=m, grads=3.0, activations=10.0) == 0.0
    m = gpt(4096, 32, 32, V=32000)
    for mb in (1, 8):  # gradients above (mb 1, full recompute) and below (mb 8) the activations
        one = stage_memory(scen(m, gpus=8, zero=3, framework="torch", micro_batch=mb, global_batch=8 * mb,
                                recompute="full"), 0)
        acc = stage_memory(scen(m, gpus=8, zero=3, framework="torch", micro_batch=mb, global_batch=16 * mb,
                                recompute="full"), 0)
        off = min(one.grads, one.activations)
        assert one.grads_off_peak == off and acc.grads_off_peak == 0.0
        assert acc.total - one.total == pytest.approx(off)  # the same step, gradients held across micro-batches
        # beside FSDP's side-stream pools (fsdp_stream_pools.py), where an accumulating step's later micro-batch
        # outputs take one more segment
        assert acc.stream_pools > one.stream_pools
        assert (one.allocator_cached - one.stream_pools) - (acc.allocator_cached - acc.stream_pools) == \
            pytest.approx(off)
