"""Print the analytical model's stage peak beside the peak torch's FSDPMemTracker records over a second training
step, by category, for the FSDP2 layouts of tests/test_memory_oracle.py (h = 2048, 2 blocks, vocabulary 32k, 8 fake
ranks). CPU only: fake tensors and fake collectives. The model's peak leaves out what lies outside the caching
allocator (the CUDA context, NCCL's buffers), which the tracker does not see.

    python benchmarks/memory_oracle_peak.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import test_memory_oracle as oracle
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore

from trainsim.cost_models.memory import stage_memory
from trainsim.cost_models.runtime_memory import OUTSIDE_ALLOCATOR

MiB = float(1 << 20)


def tracked_peak(s, mesh, mixed: bool) -> dict[str, float]:
    """Per-category bytes at the peak of the second step (Adam's states exist), as FSDPMemTracker records it."""
    peak, _ = oracle.second_step(s, mesh, mixed)
    return {k: v for k, v in peak.items() if v}


def main() -> None:
    dist.init_process_group(backend="fake", rank=0, world_size=8, store=FakeStore())
    mesh = init_device_mesh("cpu", (8,))
    for dtype, mixed in (("fp32", False), ("bf16", True)):
        for recompute in ("none", "full"):
            s = oracle.scenario(zero=3, dtype=dtype, recompute=recompute)
            torch_peak = tracked_peak(s, mesh, mixed)
            sm = stage_memory(s, 0, impl="eager")
            ours = sm.total - sum(sm.details.get(k, 0.0) for k in OUTSIDE_ALLOCATOR)
            print(f"FSDP2 {dtype}{' MixedPrecisionPolicy' if mixed else ''}, recompute {recompute}: "
                  f"model {ours / MiB:.1f} MiB, torch {torch_peak['Total'] / MiB:.1f} MiB "
                  f"({100 * (ours / torch_peak['Total'] - 1):+.1f} %)")
            print("  torch: " + ", ".join(f"{k} {v / MiB:.1f}" for k, v in torch_peak.items() if k != "Total"))
            print("  model: " + ", ".join(f"{k} {getattr(sm, k) / MiB:.1f}"
                                          for k in ("weights", "grads", "optimizer", "activations"))
                  + ", " + ", ".join(f"{k} {v / MiB:.1f}" for k, v in sm.other_terms.items()
                                     if k not in OUTSIDE_ALLOCATOR and v))


if __name__ == "__main__":
    main()
