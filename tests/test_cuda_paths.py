"""The CUDA/NCCL code paths of calibrate and execute, exercised on a CPU-only machine: torch.cuda functions
are monkeypatched with recorders, so what is asserted is the device, dtype and call each path would use
on a GPU node (real GPU runs are in test_calibration_cli.py and skip without one)."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

from trainsim.cli.main import main

torch = pytest.importorskip("torch")


class _Recorder:
    def __init__(self):
        self.calls: list[tuple] = []

    def fn(self, name, ret=None):
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return ret
        return call


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch.cuda as an 8-GPU node would answer; every call is recorded."""
    rec = _Recorder()
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for name in ("set_device", "synchronize", "empty_cache", "reset_peak_memory_stats"):
        monkeypatch.setattr(torch.cuda, name, rec.fn(name))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", rec.fn("max_memory_allocated", 123))
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", rec.fn("max_memory_reserved", 456))
    return rec


# ---- execute: device selection, process group, memory peaks ---------------------------------------------
@pytest.mark.parametrize("local_rank, visible, expect", [("3", 8, 3), ("0", 8, 0), ("5", 1, 0)])
def test_execute_device_is_local_rank_not_global_rank(fake_cuda, monkeypatch, local_rank, visible, expect):
    """Node 2 of an 8-GPU job: RANK=13, LOCAL_RANK=5. With one visible GPU per task (srun --gpus-per-task)
    the only device is index 0."""
    from trainsim.kernels import execute_worker as w

    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)
    monkeypatch.setenv("RANK", "13")
    monkeypatch.setenv("LOCAL_RANK", local_rank)
    dev = w._device("cuda")
    assert dev == torch.device("cuda", expect)
    assert ("set_device", (torch.device("cuda", expect),), {}) in fake_cuda.calls


def test_execute_sets_the_device_before_the_nccl_group_and_binds_it(fake_cuda, monkeypatch):
    """set_device precedes init_process_group, which gets backend nccl and device_id (eager NCCL init)."""
    from trainsim.kernels import execute_worker as w

    order: list[str] = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: order.append(f"set_device {d}"))
    monkeypatch.setattr(w.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(w.dist, "init_process_group",
                        lambda backend, **kw: order.append(f"init {backend} {kw.get('device_id')}"))
    monkeypatch.setattr(w.dist, "get_rank", lambda: 0)
    monkeypatch.setattr(w, "run_job", lambda job, device: {"device": str(device)})
    monkeypatch.setenv("LOCAL_RANK", "2")
    job = SimpleNamespace(device="cuda")
    try:
        assert w.run_jobs([job], timeout_s=5.0) == [{"device": "cuda:2"}]
    finally:
        w.shutdown()
    assert order == ["set_device cuda:2", "init nccl cuda:2"]


def test_memory_peak_is_reset_per_job_and_reported_on_cuda_only(fake_cuda):
    from trainsim.kernels.execute_worker import _device_memory, _reset_device_memory

    dev = torch.device("cuda", 1)
    _reset_device_memory(dev)
    names = [c[0] for c in fake_cuda.calls]
    assert names == ["synchronize", "empty_cache", "reset_peak_memory_stats"]
    assert fake_cuda.calls[-1][1] == (dev,)
    assert _device_memory(dev) == {"max_memory_allocated_bytes": 123, "max_memory_reserved_bytes": 456}
    fake_cuda.calls.clear()
    _reset_device_memory(torch.device("cpu"))
    assert _device_memory(torch.device("cpu")) == {} and fake_cuda.calls == []


def test_run_job_resets_the_peak_before_building(monkeypatch):
    """The reset is the first thing a job does, so a later job of the same launch does not inherit a peak."""
    from trainsim.kernels import execute_worker as w

    seen: list[str] = []
    monkeypatch.setattr(w, "_reset_device_memory", lambda d: seen.append("reset"))

    def stop(*a, **k):
        seen.append("build")
        raise RuntimeError("stop here")
    monkeypatch.setattr(w, "build_parallel", stop)
    job = SimpleNamespace(spec=None, seed=0, label="x", optimizer="sgd", lr=0.1, hsdp=1)
    with pytest.raises(RuntimeError, match="stop here"):
        w.run_job(job, torch.device("cpu"))
    assert seen == ["reset", "build"]


# ---- execute --check tolerance ---------------------------------------------------------------------------
def test_check_tolerance_is_tight_for_fp32_and_nan_never_matches():
    from trainsim.cli.execute import loss_tolerance, losses_match

    ref = [4.0, 3.9, 3.8]
    assert loss_tolerance("fp32", ref) == 1e-4
    assert loss_tolerance("bf16", ref) == pytest.approx(0.04)  # 1 % of the largest reference loss
    assert losses_match([4.0, 3.90005, 3.8], ref, 1e-4)
    assert not losses_match([4.0, 3.9002, 3.8], ref, 1e-4)
    assert not losses_match([4.0, math.nan, 3.8], ref, 1.0)  # max() of diffs would have hidden this NaN
    assert not losses_match([4.0, 3.9, math.inf], ref, 1.0)
    assert not losses_match([4.0, 3.9], ref, 1.0)


# ---- calibrate: dtype availability, fp8 GEMMs ------------------------------------------------------------
@pytest.mark.parametrize("dtype, capability, ok", [
    ("fp8", (9, 0), True), ("fp8", (8, 9), True), ("fp8", (8, 0), False), ("bf16", (8, 0), True),
    ("bf16", (7, 0), False), ("tf32", (7, 5), False), ("fp16", (7, 0), True), ("fp32", (6, 0), True),
])
def test_gemm_dtype_availability_by_compute_capability(monkeypatch, dtype, capability, ok):
    from trainsim.kernels.microbench import gemm_dtype_unsupported

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    reason = gemm_dtype_unsupported(dtype, torch.device("cuda", 0))
    assert (reason is None) == ok, reason
    if not ok:
        assert f"{capability[0]}.{capability[1]}" in reason


def test_fp8_is_refused_on_cpu():
    from trainsim.kernels.microbench import BenchConfig, bench_gemms, gemm_dtype_unsupported

    assert "CUDA" in gemm_dtype_unsupported("fp8", torch.device("cpu"))
    assert gemm_dtype_unsupported("bf16", torch.device("cpu")) is None
    with pytest.raises(ValueError, match="CUDA"):
        bench_gemms([(32, 32, 32, "x")], "fp8", BenchConfig(device=torch.device("cpu")))


def test_fp8_operands_have_the_layout_scaled_mm_needs():
    """_scaled_mm on CUDA wants A row-major, B column-major, e4m3, fp32 scalar scales; the product (on the
    CPU kernel where this torch has one) equals the fp32 product of the same rounded operands."""
    from trainsim.kernels.microbench import fp8_gemm_operands, fp8_shape_ok

    a, b, sa, sb = fp8_gemm_operands(32, 48, 64, torch.device("cpu"))
    assert a.shape == (32, 64) and b.shape == (64, 48)
    assert a.stride() == (64, 1) and b.stride() == (1, 64)
    assert a.dtype == b.dtype == torch.float8_e4m3fn and sa.dtype == torch.float32 and sa.numel() == 1
    assert fp8_shape_ok(8, 48, 64) and not fp8_shape_ok(32, 40, 64) and not fp8_shape_ok(32, 48, 72)
    try:
        c = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError) as e:  # no CPU fp8 kernel in this build
        pytest.skip(f"no CPU _scaled_mm: {e}")
    ref = a.float() @ b.float()
    assert c.dtype == torch.bfloat16
    assert torch.allclose(c.float(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())


def test_attention_and_memory_dtypes_follow_the_measured_gemm_dtypes():
    from trainsim.kernels.calibrate import attention_dtypes, memory_dtype

    assert attention_dtypes(["fp8"]) == ["bf16"]  # fp8 training runs attention in bf16
    assert attention_dtypes(["bf16", "fp8"]) == ["bf16"]
    assert attention_dtypes(["tf32"]) == [] and memory_dtype(["tf32"]) == "fp32"
    assert memory_dtype(["fp8"]) == "bf16" and memory_dtype(["fp16", "bf16"]) == "fp16"
    assert memory_dtype([]) == "fp32"


def test_calibrate_worker_skips_an_unavailable_dtype_with_a_note(tmp_path, monkeypatch):
    """One process on CPU asked for fp8 and fp32: fp8 is skipped and said so, fp32 GEMMs are measured."""
    from trainsim.cost_models.profile import load_profile
    from trainsim.kernels import calibrate

    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    out = tmp_path / "p.json"
    monkeypatch.setattr(calibrate, "suite_plan", lambda device, quick: calibrate.SuitePlan(
        hiddens=[64], tokens=[32], tps=[1], attention=[], mem_numels=[], copy_bytes=[], coll_bytes=[],
        warmup=0, reps=3, coll_reps=3, max_point_s=0.05, coll_budget_s=0.1))
    code = calibrate.main(["--device", "cpu", "--dtype", "fp8", "--dtype", "fp32", "--out", str(out),
                           "--skip", "attention,memory,eager,copy,collectives"])
    assert code == 0
    p = load_profile(out)
    assert set(p.gemm_fits) == {"fp32"}
    assert any(n.startswith("fp8 GEMMs not measured") for n in p.notes), p.notes


def test_calibrate_cli_refuses_fp8_on_cpu(tmp_path, capsys):
    assert main(["calibrate", "--device", "cpu", "--dtype", "fp8", "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: dtype: fp8"), err


@pytest.mark.parametrize("name, preset", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H800", "h100-sxm"), ("NVIDIA H100 PCIe", None),
    ("NVIDIA H100 NVL", None), ("NVIDIA GB200", "gb200"), ("NVIDIA B200", "b200"), ("NVIDIA GH200 480GB", "h200"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("AMD Instinct MI300X", "mi300x"), ("NVIDIA GeForce RTX 4090", None),
])
def test_device_name_to_preset_most_specific_first(name, preset):
    """GB200 contains "b200"; an H100 PCIe has ~76 % of the SXM part's dense peak: no preset, no wrong peak."""
    from trainsim.kernels.calibrate import preset_for_device

    assert preset_for_device(name) == preset


# ---- sbatch script -----------------------------------------------------------------------------------
@pytest.mark.skipif(not shutil.which("bash"), reason="bash not found")
def test_sbatch_gives_each_node_task_the_nodes_cpus(tmp_path):
    from trainsim.kernels.launch import slurm_script

    text = slurm_script("trainsim.kernels.calibrate", ["--device", "cuda", "--out", "p.json"], nodes=2,
                        gpus_per_node=8)
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in text
    assert "--ntasks-per-node=1" in text and '--cpus-per-task="$SLURM_CPUS_ON_NODE"' in text
    assert "--nnodes=2 --nproc-per-node=8" in text and '--rdzv-endpoint="$head_node:$MASTER_PORT"' in text
    path = tmp_path / "s.sbatch"
    path.write_text(text)
    assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0


def test_this_module_keeps_the_cli_torch_free():
    code = "import sys, trainsim.cli.execute, trainsim.cli.calibrate; " \
           "sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# ---- execute: phase timing on the GPU's clock -----------------------------------------------------------
def test_phase_times_on_cuda_come_from_cuda_events(monkeypatch):
    """Host timers around asynchronous kernels see only launches: on cuda each phase is bracketed by CUDA
    events (elapsed_time in ms -> s), summed over micro-batches once the last event is waited for."""
    from trainsim.kernels.parallelize import Parallel

    clock = iter(range(0, 1000, 10))  # each recorded event is 10 ms after the previous one
    waited: list[int] = []

    class FakeEvent:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.t_ms = None

        def record(self, stream=None):
            self.t_ms = next(clock)

        def synchronize(self):
            waited.append(self.t_ms)

        def elapsed_time(self, end):
            return end.t_ms - self.t_ms

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    par = SimpleNamespace(device=torch.device("cuda", 0), _marks=[])
    for _ in range(2):  # two micro-batches: forward 10 ms, backward 10 ms each
        t0 = Parallel._mark(par)
        t1 = Parallel._mark(par)
        Parallel._phase(par, "forward_s", t0, t1)
        Parallel._phase(par, "backward_s", t1, Parallel._mark(par))
    phases, host = Parallel._resolve_phases(par)
    assert phases == pytest.approx({"forward_s": 0.02, "backward_s": 0.02})
    assert set(host) == {"forward_s", "backward_s"}  # the host's perf_counter beside each event
    assert all(0.0 <= v < 1.0 for v in host.values())
    assert waited and par._marks == []
    cpu = SimpleNamespace(device=torch.device("cpu"), _marks=[])
    Parallel._phase(cpu, "optimizer_s", (None, 1.0), (None, 1.25))
    assert Parallel._resolve_phases(cpu) == ({"optimizer_s": 0.25}, {"optimizer_s": 0.25})
