"""`trainsim calibrate`: the real CPU run (slow, 2 gloo ranks), sbatch emission, flag errors, CUDA paths."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainsim.cli.main import main
from trainsim.cost_models.profile import COLLECTIVE_OPS, load_profile

HAS_TORCH = importlib.util.find_spec("torch") is not None


def _cuda_available() -> bool:
    if not HAS_TORCH:
        return False
    import torch
    return torch.cuda.is_available()


def run_cli(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainsim.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.timeout(240)
@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
def test_cpu_quick_calibration_end_to_end(tmp_path):
    out = tmp_path / "cpu.json"
    res = run_cli(["calibrate", "--device", "cpu", "--quick", "--out", str(out), "--json"], timeout=200)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads(res.stdout)
    assert summary["elapsed_s"] < 120  # the budget for --quick on this machine
    p = load_profile(out)
    fp = p.fingerprint
    assert (fp.device, fp.world_size, fp.backend, fp.nodes) == ("cpu", 2, "gloo", 1)
    assert fp.torch_version and fp.env.get("OMP_NUM_THREADS") == "1"
    assert p.reference_preset == "cpu" and "fp32" in p.gemm_fits
    # both ranks ran the GEMM suite at once and reported their rate in rank order: rank 0's is the suite's
    # FLOPs over its median times (the points the profile keeps are rank 0's)
    from trainsim.cost_models.kernel_work import gemm_flops
    assert len(p.rank_gemm_flops) == 2 and all(r > 1e9 for r in p.rank_gemm_flops)
    rank0 = sum(gemm_flops(g.m, g.n, g.k) for g in p.gemm_points) / sum(g.stats.median_s for g in p.gemm_points)
    assert p.rank_gemm_flops[0] == pytest.approx(rank0, rel=1e-9)
    assert p.speed_spread_cv is not None and p.pace_spread_cv() is None  # a CPU profile: recorded, not used
    # Every collective measured on the 2-rank group, with nccl-tests' busbw factors applied.
    assert {f.op for f in p.collective_fits} == set(COLLECTIVE_OPS)
    for q in p.collective_points:
        assert q.group_size == 2 and q.stats.min_s <= q.stats.median_s <= q.stats.p99_s
        factor = 1.0 if q.op == "all_reduce" else (0.5 if q.op in ("all_gather", "reduce_scatter", "all_to_all") else 1.0)
        assert q.busbw_Bps == pytest.approx(q.algbw_Bps * factor)
    # The fits describe their own data: the typical GEMM point is predicted within a factor 2, and most points
    # are (a single point can be disturbed on a shared 2-core host; a broken fit misses them all).
    ratios = sorted(p.gemm_time_s(g.m, g.n, g.k, "fp32") / g.stats.median_s for g in p.gemm_points)
    assert 0.5 < ratios[len(ratios) // 2] < 2.0, ratios
    assert sum(0.5 < r < 2.0 for r in ratios) >= 0.8 * len(ratios), ratios
    # Plausible physics for one CPU core: GEMM rate between 1 GFLOP/s and 2x the AVX-512 peak.
    assert 1e9 < p.gemm_fits["fp32"].flops_per_s < 2 * p.reference_peak_flops["fp32"]
    assert p.kernel_overhead_s() is not None and 1e-7 < p.kernel_overhead_s() < 1e-3
    assert {"layernorm", "softmax", "gelu", "add", "copy", "gelu_bwd"} <= set(p.memory_ops_measured())
    assert p.attention_fits.keys() == {"fp32/fwd", "fp32/bwd"}
    # Eager framework overhead per modelled op: plain blocks of both styles and the wrapped ones (2 ranks);
    # DTensor dispatch makes a TP block dearer per op than a plain one, and backward dearer than forward.
    styles = {"layernorm-gelu-learned", "rmsnorm-swiglu-rope"}
    assert {f"{a}{b}" for a in styles for b in ("", "+tp", "+tp-sp", "+fsdp")} == set(p.eager_overhead)
    for st_ in styles:
        plain, tp = p.eager_overhead[st_], p.eager_overhead[f"{st_}+tp"]
        assert 1e-7 < plain.per_op_s("fwd") < 1e-2 and plain.per_op_s("fwd") < tp.per_op_s("fwd")
    # torch.optim measured per tensor and per element; DTensor parameters cost more per tensor.
    assert {"adam", "sgd", "adam-dtensor", "sgd-dtensor"} == set(p.optimizer_fits)
    assert p.optimizer_fits["adam"].per_tensor_s < p.optimizer_fits["adam-dtensor"].per_tensor_s
    assert 1e6 < p.optimizer_fits["adam"].elements_per_s < 1e11
    assert set(p.dtensor_collective_overhead_s) == {"all_reduce", "all_gather", "reduce_scatter"}
    assert all(0 <= v < 0.1 for v in p.dtensor_collective_overhead_s.values())
    # And predict uses it, naming the profile.
    pred = run_cli(["predict", "--model", "tiny-gpt", "--cluster", "cpu-host", "--seq-len", "256", "--global-batch",
                    "8", "--micro-batch", "4", "--dtype", "fp32", "--calibration", str(out), "--json"], timeout=60)
    assert pred.returncode == 0, pred.stderr
    assert str(out) in json.loads(pred.stdout)["calibration"]


@pytest.mark.skipif(not shutil.which("bash"), reason="bash not found")
def test_emit_slurm_writes_a_valid_sbatch_script(tmp_path, capsys):
    script = tmp_path / "cal.sbatch"
    code = main(["calibrate", "--device", "cuda", "--out", "prof.json", "--emit-slurm", str(script),
                 "--nodes", "4", "--gpus-per-node", "8", "--partition", "gpu", "--dtype", "bf16"])
    assert code == 0
    text = script.read_text()
    for piece in ("#SBATCH --nodes=4", "#SBATCH --gpus-per-node=8", "#SBATCH --partition=gpu", "srun",
                  "-m torch.distributed.run", "--nnodes=4 --nproc-per-node=8", "--rdzv-backend=c10d",
                  "-m trainsim.kernels.calibrate", "--device cuda", "--out=prof.json", "--dtype bf16"):
        assert piece in text, piece
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("argv, field", [
    (["calibrate", "--device", "tpu", "--out", "x.json"], "--device"),
    (["calibrate", "--device", "cpu", "--out", "/nonexistent/dir/x.json"], "out"),
    (["calibrate", "--device", "cpu", "--out", "x.json", "--skip", "gemm,bogus"], "skip"),
    (["calibrate", "--device", "cpu", "--out", "x.json", "--nproc", "0"], "--nproc"),
    (["calibrate", "--device", "cpu", "--out", "x.json", "--peak-preset", "nope"], "peak_preset"),
    (["calibrate", "--device", "cpu", "--out", "x.json", "--import-nccl-tests", "f.txt"], "import_nccl_tests"),
    # a flag of another mode would be silently ignored: refused
    (["calibrate", "--device", "cpu", "--out", "x.json", "--merge-into", "n.json"], "merge_into"),
    (["calibrate", "--device", "cpu", "--out", "x.json", "--nccl-group-size", "8"], "nccl_group_size"),
    (["calibrate", "--device", "cpu", "--out", "x.json", "--nodes", "2"], "nodes"),
    (["calibrate", "--out", "x.json", "--import-nccl-tests", "f.txt", "--partition", "p"], "partition"),
    (["calibrate", "--device", "cpu", "--out", "x.json", "--emit-slurm", "s.sh", "--nproc", "4"], "nproc"),
])
def test_bad_flags_exit_2_with_one_line(argv, field, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and field in err[0], err


@pytest.mark.skipif(not HAS_TORCH or _cuda_available(), reason="needs torch and no GPU")
def test_cuda_without_gpu_is_a_clear_error(tmp_path, capsys):
    assert main(["calibrate", "--device", "cuda", "--out", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: device: --device cuda but torch sees no CUDA device on this host"]


def test_command_module_does_not_import_torch():
    code = ("import sys; import trainsim.cli.calibrate, trainsim.cost_models.profile, "
            "trainsim.cost_models.nccl_tests_import, trainsim.kernels.launch; "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.timeout(600)
@pytest.mark.skipif(not _cuda_available(), reason="no CUDA device: the NCCL/CUDA-event paths need a GPU")
def test_cuda_quick_calibration(tmp_path):
    import torch

    out = tmp_path / "cuda.json"
    n = min(2, torch.cuda.device_count())
    res = run_cli(["calibrate", "--device", "cuda", "--quick", "--nproc", str(n), "--out", str(out)], timeout=580)
    assert res.returncode == 0, res.stderr[-3000:]
    p = load_profile(out)
    assert p.fingerprint.device == "cuda" and p.fingerprint.nccl_version
    assert "bf16" in p.gemm_fits and p.copy_fits.keys() == {"h2d", "d2h", "d2d"}
    if n > 1:
        assert p.fingerprint.backend == "nccl" and p.collective("all_reduce", n, 1) is not None
    if p.reference_preset:
        # A datacenter GPU reaches a real fraction of its dense bf16 peak on large GEMMs.
        assert 0.2 < p.gemm_efficiency(8192, 8192, 8192, "bf16") < 1.05


@pytest.mark.torch
@pytest.mark.skipif(not _cuda_available(), reason="no CUDA device")
def test_cuda_event_timing_of_a_gemm():
    import torch

    from trainsim.kernels.microbench import BenchConfig, bench_gemms

    cfg = BenchConfig(device=torch.device("cuda", 0), warmup=2, reps=5)
    (pt,) = bench_gemms([(4096, 4096, 4096, "sq")], "bf16", cfg)
    assert pt.stats.median_s > 0 and pt.achieved_flops > 1e12


def test_worker_groups_cover_node_shapes():
    """Group shapes for 2 nodes x 4 ranks: the world, one node, one rank per node, 2 ranks in a node."""
    pytest.importorskip("torch")
    from trainsim.kernels.calibrate import groups_to_measure

    hosts = ["a"] * 4 + ["b"] * 4
    groups = groups_to_measure(8, hosts)
    shapes = {(g.ranks, g.nodes) for g in groups}
    assert shapes == {(tuple(range(8)), 2), ((0, 1, 2, 3), 1), ((0, 4), 2), ((0, 1), 1)}
    assert all(g.ranks[0] == 0 for g in groups)
    assert [(g.ranks, g.nodes) for g in groups_to_measure(2, ["a", "a"])] == [((0, 1), 1)]


def test_reference_peaks_by_device_name():
    from trainsim.kernels.calibrate import reference_peaks

    assert reference_peaks("cuda", "NVIDIA H100 80GB HBM3", None)[0] == "h100-sxm"
    assert reference_peaks("cuda", "NVIDIA A100-SXM4-40GB", None)[0] == "a100-40gb"
    assert reference_peaks("cuda", "NVIDIA A100-SXM4-80GB", None)[0] == "a100-80gb"
    assert reference_peaks("cuda", "Some Future GPU", None) == (None, {})
    name, peaks = reference_peaks("cpu", "Intel Xeon", None)
    assert name == "cpu" and peaks["fp32"] > 0
    assert Path(__file__).exists()


def test_skip_accepts_every_worker_section():
    """The CLI's --skip list is the worker's own section list (the eager section used to be refused)."""
    from trainsim.cli.calibrate import _check_skip
    from trainsim.kernels.calibrate import SECTIONS
    from trainsim.specs import SpecError
    assert _check_skip(",".join(SECTIONS)) == list(SECTIONS)
    with pytest.raises(SpecError, match="skip"):
        _check_skip("gemm,warp")
