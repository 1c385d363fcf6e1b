"""Device memory outside PyTorch's caching allocator, measured step by step on one GPU.

After each step it records the process's device memory as nvidia-smi reports it (``used_memory`` of this pid),
``torch.cuda.memory_reserved`` and their difference (``outside_mib``): the CUDA context plus the module images
and library state loaded so far (lazy module loading loads a kernel's module at its first launch). Steps: the
first CUDA call, a bf16 GEMM (cuBLAS / cuBLASLt), SDPA forward and backward, a fused AdamW step, cross-entropy
on fp32 logits, and a one-rank NCCL process group with an all-reduce. On the device machine:
``python3 benchmarks/device/context_memory.py > $OUT/context_memory_h200.json``; the record of the H200 run is
benchmarks/data/context_memory_h200.json (cost_models/runtime_memory.py uses it).
"""

from __future__ import annotations

import json
import os
import subprocess

import torch
import torch.nn.functional as F

MiB = 1 << 20


def smi_used_mib() -> float:
    """This process's device memory per nvidia-smi (MiB); -1 when nvidia-smi does not list it."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=False).stdout
    for line in out.splitlines():
        pid, used = (x.strip() for x in line.split(","))
        if int(pid) == os.getpid():
            return float(used)
    return -1.0


def record(steps: list, name: str) -> None:
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    smi, reserved = smi_used_mib(), torch.cuda.memory_reserved() / MiB
    steps.append({"step": name, "smi_mib": smi, "reserved_mib": reserved, "outside_mib": smi - reserved,
                  "dev_used_mib": (total - free) / MiB})


def library_steps(steps: list) -> None:
    """The kernels of a training step, each loading its modules."""
    torch.ones(1, device="cuda")
    record(steps, "first call")
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    record(steps, "bf16 gemm")
    q = torch.randn(2, 16, 2048, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    record(steps, "sdpa fwd+bwd")
    w = torch.nn.Parameter(torch.randn(4096, 4096, device="cuda"))
    opt = torch.optim.AdamW([w], fused=True)
    w.square().sum().backward()
    opt.step()
    record(steps, "fused adamw")
    logits = torch.randn(4096, 50304, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    F.cross_entropy(logits.float(), torch.randint(0, 50304, (4096,), device="cuda")).backward()
    record(steps, "cross entropy")


def nccl_step(steps: list) -> None:
    """A one-rank NCCL group and one all-reduce (what a world-size-1 torch.distributed job creates)."""
    try:
        import torch.distributed as dist
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", "29517"
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
        t = torch.ones(MiB, device="cuda")
        dist.all_reduce(t)
        record(steps, "nccl 1-rank allreduce")
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 -- the NCCL step is optional; its failure is recorded
        steps.append({"step": "nccl", "error": repr(e)})


def main() -> None:
    steps: list = []
    library_steps(steps)
    nccl_step(steps)
    print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "dev": torch.cuda.get_device_name(0),
                      "loading": os.environ.get("CUDA_MODULE_LOADING", "default"), "steps": steps}, indent=1))


if __name__ == "__main__":
    main()
