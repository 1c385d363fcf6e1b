"""dtype nvfp4 (cost_models/nvfp4.py): Transformer Engine's NVFP4BlockScaling recipe under Megatron-Core.

Checked against closed forms from the presets' own numbers and the recipe's byte counts, against NVIDIA's stated
FP4/FP8 rate ratios (arXiv:2509.25149 Table 1: 2x on GB200, 3x on GB300), and for the refusals a GPU without FP4
tensor cores and a framework other than megatron get.
"""

from __future__ import annotations

import csv

import pytest

from trainsim.cli.main import main
from trainsim.cost_models import compute
from trainsim.cost_models.activations import layer_activation_bytes
from trainsim.cost_models.flops import _linear
from trainsim.cost_models.memory import rank_param_shards, transient_terms
from trainsim.cost_models.model_states import state_bytes
from trainsim.specs import SpecError, load_gpu
from trainsim.specs.loaders import build_scenario
from trainsim.validation.nemo import load_nemo

N = 16384  # the cuBLASLt reference shape of the presets' efficiencies: the tile model's factor is exactly 1 there


def _scenario(dtype: str, cluster: str = "gb300-nvl72", **training):
    return build_scenario({
        "model": "llama3-70b", "cluster": {"preset": cluster, "num_gpus": 64},
        "layout": {"tp": 1, "pp": 4, "vpp": 5},
        "training": {"seq_len": 8192, "global_batch": 256, "micro_batch": 1, "dtype": dtype,
                     "distributed_optimizer": True, "schedule": "interleaved", **training}})


@pytest.mark.parametrize("preset", ["b200", "gb200", "b300", "gb300"])
def test_fp4_gemm_time_over_fp8_is_the_ratio_of_peaks_times_efficiencies(preset):
    gpu = load_gpu(preset)
    hw = compute.hw_of(gpu, "nvfp4")
    t8 = compute.gemm_time_s(N, N, N, hw, fp8=True) - hw.overhead_s
    t4 = compute.gemm_time_s(N, N, N, hw, fp4=True) - hw.overhead_s
    expected = (gpu.peak_flops["fp4"] * gpu.gemm_efficiency_fp4) / (gpu.peak_flops["fp8"] * gpu.gemm_efficiency)
    assert t8 / t4 == pytest.approx(expected, rel=1e-9)
    assert t4 == pytest.approx(2.0 * N**3 / (gpu.peak_flops["fp4"] * gpu.gemm_efficiency_fp4), rel=1e-9)


def test_fp4_peaks_follow_nvidias_fp4_over_fp8_rates():
    """NVFP4 paper section 2: FP4 math at 2x FP8 on GB200 chips and 3x on GB300 (Blackwell Ultra). NVIDIA's recipe
    table of dense peaks (hardware.csv nv_recipe_peaks_gb300) gives exactly that: GB300 14700 / 4900 = 3, GB200
    9800 / 4900 = 2, B200 9000 / 4500 = 2, B300 13500 / 4500 = 3."""
    assert load_gpu("gb300").peak("nvfp4") == 14700e12 and load_gpu("gb200").peak("nvfp4") == 9800e12
    assert load_gpu("gb300").peak("nvfp4") / load_gpu("gb300").peak("fp8") == 3.0
    assert load_gpu("gb200").peak("nvfp4") / load_gpu("gb200").peak("fp8") == 2.0
    assert load_gpu("b200").peak("nvfp4") / load_gpu("b200").peak("fp8") == 2.0
    assert load_gpu("b300").peak("nvfp4") / load_gpu("b300").peak("fp8") == 3.0


def test_fp4_gemm_rate_is_the_measured_cublaslt_rate():
    """peak x efficiency is the measured cuBLASLt FP4 16384^3 rate: GB300 8640.3 TFLOP/s [gb300_azure], GB200
    7627.6 [gb200_azure]; B300 and B200 take their die's ratio over their own recipe-table peaks."""
    for preset, rate in (("gb300", 8640.3e12), ("gb200", 7627.6e12)):
        gpu = load_gpu(preset)
        assert gpu.peak_flops["fp4"] * gpu.gemm_efficiency_fp4 == pytest.approx(rate, rel=1e-9)
    assert load_gpu("b300").gemm_efficiency_fp4 == pytest.approx(8640.3 / 14700, rel=1e-9)
    assert load_gpu("b200").gemm_efficiency_fp4 == pytest.approx(7627.6 / 9800, rel=1e-9)


def test_nvfp4_linear_bytes_are_the_recipes_operands_and_casts():
    m, n, k, e, casts = 4096, 1024, 2048, 2, 0.25
    op = _linear("x", m, n, k, e, fp4=True, weight_casts=casts)
    q = 9 / 16  # 4 bits + one E4M3 scale byte per 16 elements
    assert op.fwd_bytes == pytest.approx((m * k + k * n) * q + m * n * e            # NVFP4 operands, bf16 output
                                         + m * k * (3 * e + 2 * q)                   # X: amax, rowwise, RHT colwise
                                         + casts * k * n * (2 * e + 2 * q))          # W: amax, 2-D both layouts
    assert op.bwd_input_bytes == pytest.approx((m * n + k * n) * q + m * k * e + m * n * (3 * e + 2 * q))
    assert op.bwd_weight_bytes == pytest.approx((m * k + m * n) * q + k * n * e)
    assert op.fp4 and not op.fp8


def test_model_state_bytes_are_fp8s():
    s4, s8 = _scenario("nvfp4"), _scenario("fp8")
    assert state_bytes(s4.training) == state_bytes(s8.training)
    assert (s4.training.param_bytes, s4.training.grad_bytes, s4.training.optimizer_bytes_per_param) == (2, 4, 12)


def test_saved_linear_inputs_take_nvfp4_bytes():
    """A dense Llama block (tp 1): the QKV, fc1, out-projection and fc2 inputs are saved quantized, 1 byte under
    fp8 and 9/16 under nvfp4; nothing else changes."""
    s4, s8 = _scenario("nvfp4"), _scenario("fp8")
    m = s4.model
    quantized = 8192 * (2 * m.hidden + m.num_heads * m.dhead + m.ffn)
    diff = layer_activation_bytes(s8).total - layer_activation_bytes(s4).total
    assert diff == pytest.approx((1 - 9 / 16) * quantized)


def test_te_weight_copies_are_both_nvfp4_layouts_of_the_stages_linears():
    s = _scenario("nvfp4")
    m = s.model
    h, kv = m.hidden, m.kv_heads * m.dhead
    per_block = h * (h + 2 * kv) + h * h + 3 * h * m.ffn  # qkv, out-projection, gate|up, down
    layers = m.num_layers // 4  # stage 1 holds no embedding and no output layer
    terms = transient_terms(s, 1, rank_param_shards(s, 1))
    assert terms["nvfp4_weight_copies"] == pytest.approx(layers * per_block * 2 * 9 / 16)
    s8 = _scenario("fp8")
    assert "nvfp4_weight_copies" not in transient_terms(s8, 1, rank_param_shards(s8, 1))


@pytest.mark.parametrize("cluster", ["dgx-h100", "dgx-a100"])
def test_nvfp4_is_refused_without_fp4_tensor_cores(cluster):
    with pytest.raises(SpecError) as err:
        _scenario("nvfp4", cluster)
    assert err.value.field == "training.dtype" and "FP4 tensor cores" in str(err.value)


def test_cli_refuses_nvfp4_on_h100_with_one_line(capsys):
    code = main(["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--dtype", "nvfp4"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "training.dtype" in err and "FP4" in err


def test_nvfp4_needs_framework_megatron():
    with pytest.raises(SpecError, match="framework torch"):
        _scenario("nvfp4", framework="torch")


_COLUMNS = ["row_id", "nemo_container", "section", "model", "system", "num_gpus", "precision", "gbs", "mbs", "seq_len",
            "fsdp", "tp", "pp", "cp", "vp", "ep", "etp", "ga", "tokens_per_s_per_gpu", "model_tflops_per_gpu"]


def test_nemo_nvfp4_rows_map_to_dtype_nvfp4_without_tp_overlap(tmp_path):
    """Hand-written rows in the table's layout: a Llama NVFP4 row is predicted as nvfp4 with TP overlap off (the
    recipes' tp_comm_overlap False for nvfp4); a Nemotron 3 Super NVFP4 row keeps its skip (nvfp4 with a hybrid stack is not modelled)."""
    path = tmp_path / "nemo.csv"
    rows = [("r_llama", "LLAMA3_70B", "DGX-GB200", 2, 4, 5, "", 4864), ("r_super", "Nemotron_3_Super", "DGX-GB300",
                                                                          1, 1, "n/a", 64, 9600)]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=_COLUMNS)
        w.writeheader()
        for rid, model, system, tp, pp, vp, ep, tok in rows:
            w.writerow({"row_id": rid, "nemo_container": "26.04", "section": "Pre-Training Performance",
                        "model": model, "system": system, "num_gpus": 64, "precision": "NVFP4", "gbs": 256,
                        "mbs": 1, "seq_len": 8192, "fsdp": 0, "tp": tp, "pp": pp, "cp": 1, "vp": vp, "ep": ep,
                        "tokens_per_s_per_gpu": tok})
    cases = {c.row_id: c for c in load_nemo(path).cases}
    llama = cases["r_llama"].scenario
    assert llama is not None and llama.training.dtype == "nvfp4"
    assert llama.training.sequence_parallel and not llama.training.tp_comm_overlap
    assert cases["r_llama"].category == "GB200 nvfp4 dense"
    assert cases["r_super"].scenario is None and "hybrid" in cases["r_super"].skip_reason
