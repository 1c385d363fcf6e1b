"""Model-state offload: where each framework keeps weights, gradients and optimizer states when it offloads them
to the host, what stays on the GPU, and the PCIe bytes each step moves (``offload``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trainsim.specs.framework_behaviour import behaviour

if TYPE_CHECKING:
    from trainsim.specs import Scenario

    from .memory import RankParams
    from .model_states import StateBytes


@dataclass(frozen=True)
class Offload:
    """Model states left on the device after offload, what the host holds, and the PCIe bytes per step."""

    weights: float
    grads: float
    optimizer: float
    host: float = 0.0
    h2d: float = 0.0
    d2h: float = 0.0
    device: dict = field(default_factory=dict)  # offload buffers kept on the device (named terms of ``other``)


def offload(scenario: Scenario, rp: RankParams, sb: StateBytes, states: dict[str, float]) -> Offload:
    """Where each framework keeps the model states under ``offload_optimizer`` / ``offload_params``.

    * megatron (``--optimizer-cpu-offload``, megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py
      HybridDeviceOptimizer): the fp32 main parameters and Adam states of ``optimizer_offload_fraction`` of the
      shard move to the host and are updated there; the 16-bit parameters and DDP's fp32 main-grad buffer
      stay on the GPU. Each step copies that fraction's fp32 gradients to the host (into pinned fp32
      copies) and the updated fp32 parameters back.
    * deepspeed (ZeRO-Offload / ZeRO-Infinity, deepspeed/runtime/zero/stage_1_and_2.py ``cpu_offload``,
      stage3.py ``offload_optimizer``): the fp32 partition, Adam states and the fp32 gradient partition live
      on the host; the GPU keeps its 16-bit parameters (the shard under ZeRO-3) and, instead of the
      gradient partition, the reduce buckets (``reduce_bucket_size`` elements, double-buffered with
      ``overlap_comm``) that stream gradients out. ``offload_params`` (ZeRO-3) keeps the 16-bit parameter shard
      on the host too and brings it in for every forward and backward of every micro-batch.
    * pytorch-fsdp / torch (FSDP ``CPUOffload(offload_params=True)``, FSDP2 ``CPUOffloadPolicy``): the
      sharded fp32 parameters, their gradients and the optimizer step are on the host together; the GPU holds
      only the gathered units (``zero3_gather_buffers``). The shard is copied in before each gather (forward
      and backward of every micro-batch) and each micro-batch's reduced gradient shard is copied out.
    """
    t = scenario.training
    w, g, o = states["weights"], states["grads"], states["optimizer"]
    if not (t.offload_optimizer or t.offload_params):
        return Offload(w, g, o)
    n_micro, shard = scenario.num_microbatches, rp.optimizer_params
    fw = behaviour(t.framework)
    if fw.torch_fsdp:
        host = w + g + o
        return Offload(0.0, 0.0, 0.0, host=host, h2d=2 * n_micro * w, d2h=n_micro * g)
    if fw.deepspeed_optimizer:  # ZeRO-Offload
        bucket = min(rp.held, fw.reduce_bucket_params or rp.held) * t.grad_bytes
        device = {"offload_reduce_buckets": 2.0 * bucket}
        host = o + shard * 4  # fp32 gradient partition beside the fp32 master and Adam states
        h2d, d2h = shard * t.param_bytes, shard * t.grad_bytes
        if t.offload_params:
            host += w
            h2d += 2 * n_micro * w
            w = 0.0
        return Offload(w, 0.0, 0.0, host=host, h2d=h2d, d2h=d2h, device=device)
    # Megatron: the offloaded fraction of the optimizer shard goes to the host, with pinned fp32 gradient copies.
    f = t.optimizer_offload_fraction
    host = f * (o + shard * 4)
    return Offload(w, g, (1 - f) * o, host=host, h2d=f * shard * 4, d2h=f * shard * 4)


def node_host_bytes(scenario: Scenario, host_bytes_per_gpu: float) -> float:
    """Host memory one node needs for what its GPUs offload: the largest per-GPU host bytes (of any stage) times the
    GPUs of a node (fewer on a cluster smaller than a node). Held against ``ClusterSpec.host_memory_bytes`` by
    predict's fit and the planner's memory filter alike."""
    return host_bytes_per_gpu * min(scenario.cluster.gpus_per_node, scenario.cluster.num_gpus)
