"""Print the analytical memory model beside torch's own memory tracker, per category, for the layouts the
executor builds (the cases of tests/test_memory_oracle.py). CPU only, fake tensors and fake collectives.

    python benchmarks/memory_oracle.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import test_memory_oracle as oracle
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore

from trainsim.cost_models.memory import activation_bytes_per_microbatch, stage_memory

CASES = [
    ("FSDP2 fp32, recompute none", {"zero": 3, "dtype": "fp32"}, {"fsdp": True, "mixed": False}),
    ("FSDP2 fp32, selective", {"zero": 3, "dtype": "fp32", "recompute": "selective"}, {"fsdp": True, "mixed": False}),
    ("FSDP2 fp32, full", {"zero": 3, "dtype": "fp32", "recompute": "full"}, {"fsdp": True, "mixed": False}),
    ("FSDP2 bf16 MixedPrecisionPolicy", {"zero": 3, "dtype": "bf16"}, {"fsdp": True, "mixed": True}),
    ("TP2", {"gpus": 2, "layout": {"tp": 2}, "dtype": "fp32"}, {"fsdp": False, "mixed": False}),
    ("TP2 + SP", {"gpus": 2, "layout": {"tp": 2}, "dtype": "fp32", "sequence_parallel": True},
     {"fsdp": False, "mixed": False, "sp": True}),
]


def main() -> None:
    dist.init_process_group(backend="fake", rank=0, world_size=8, store=FakeStore())
    meshes = {"fsdp": init_device_mesh("cpu", (8,)),
              "tp": init_device_mesh("cpu", (4, 2), mesh_dim_names=("dp", "tp"))["tp"]}
    for name, training, kw in CASES:
        s = oracle.scenario(**training)
        snaps = oracle.run_step(s, meshes["fsdp" if kw["fsdp"] else "tp"], **kw)
        sm = stage_memory(s, 0, impl="eager")
        param, grad = ("SHARDED_PARAM", "SHARDED_GRAD") if kw["fsdp"] else ("PARAM", "GRAD")
        pairs = [("weights", sm.weights, snaps["step"][param]), ("grads", sm.grads, snaps["step"][grad]),
                 ("optimizer", sm.optimizer, snaps["step"]["OPT"]),
                 ("activations", activation_bytes_per_microbatch(s, 0, "eager"), snaps["fwd"]["ACT"])]
        print(f"{name}: " + "; ".join(f"{k} {a / 2**20:.1f} vs torch {b / 2**20:.1f} MiB ({100 * (a / b - 1):+.3f} %)"
                                      for k, a, b in pairs))


if __name__ == "__main__":
    main()
