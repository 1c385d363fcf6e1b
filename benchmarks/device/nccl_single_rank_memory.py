"""Device memory outside PyTorch's caching allocator that one-rank NCCL communicators add, one to three of them.

Each variant runs in a child process: NCCL's defaults, NCCL_RUNTIME_CONNECT=0 (the eager-connect path) and
NCCL_CUMEM_ENABLE=0 (cudaMalloc instead of cuMem). After each step the child records nvidia-smi's memory of the
process less torch.cuda.memory_reserved (``outside_mib``): CUDA init, ``init_process_group`` with ``device_id``
(which creates the world communicator eagerly), an all-reduce on it, then two new one-rank groups with one
all-reduce each. On the device machine: ``python3 benchmarks/device/nccl_single_rank_memory.py >
$OUT/nccl_single_rank_memory_h200.json``; the H200 record is benchmarks/data/nccl_single_rank_memory_h200.json
(cost_models/runtime_memory.py derives NCCL_PROCESS_STATE_BYTES and NCCL_ONE_RANK_COMM_BYTES from it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

CHILD = r'''
import json, os, subprocess, torch, torch.distributed as d
def smi():
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        pid, used = line.split(",")
        if int(pid) == os.getpid():
            return float(used)
steps = []
def rec(name):
    torch.cuda.synchronize()
    steps.append({"step": name, "outside_mib": smi() - torch.cuda.memory_reserved() / 2**20})
torch.ones(1, device="cuda"); rec("init")
os.environ["MASTER_ADDR"] = "127.0.0.1"
d.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0)); rec("pg")
t = torch.ones(1 << 20, device="cuda"); d.all_reduce(t); rec("ar1")
for i in range(2):
    g = d.new_group([0]); d.all_reduce(t, group=g); rec(f"ar{i + 2}")
print("J " + json.dumps(steps))
'''
VARIANTS = ({}, {"NCCL_RUNTIME_CONNECT": "0"}, {"NCCL_CUMEM_ENABLE": "0"})


def run(env_extra: dict, port: int) -> dict:
    env = dict(os.environ, MASTER_PORT=str(port), **env_extra)
    p = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=120, check=False)
    line = next((x for x in p.stdout.splitlines() if x.startswith("J ")), None)
    return {"env": env_extra, "steps": json.loads(line[2:]) if line else [], "error": "" if line else p.stderr[-2000:]}


def main() -> None:
    import torch
    out = {"nccl": ".".join(map(str, torch.cuda.nccl.version())), "torch": torch.__version__,
           "dev": torch.cuda.get_device_name(0), "variants": [run(v, 29611 + i) for i, v in enumerate(VARIANTS)]}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
