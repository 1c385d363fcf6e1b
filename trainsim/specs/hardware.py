"""GPUSpec and ClusterSpec: the hardware a run is predicted on. Units: bytes, bytes/s, FLOP/s, s."""

from __future__ import annotations

import functools
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from .errors import SpecError
from .presets import preset
from .spec_config import MAX_NAME_CHARS, SPEC_CONFIG

Dtype = Literal["bf16", "fp16", "fp8", "fp4", "tf32", "fp32"]

# Floors of what a device or link can be. Below them a figure is a slip (a unit, a missing exponent), and a step's
# time overflowed to inf and then NaN (1e-300 FLOP/s gave step_time_s NaN) instead of being refused.
# 1 GFLOP/s: one scalar core at 1 GHz, 1 FLOP per cycle (the cpu preset's core: 243 GFLOP/s fp32).
MIN_FLOPS = 1e9
# 100 MB/s: below gigabit Ethernet (125 MB/s) and one PCIe 1.0 lane (250 MB/s), the slowest links a node has.
MIN_BW_BPS = 1e8
# 1 GiB of device (or host) memory: the smallest in the presets is the cpu process's 8 GiB and the smallest GPU's
# 40 GiB (a100-40gb); a figure below it is a unit slip (80 for 80 GiB gave a GPU of 80 bytes).
MIN_MEMORY_BYTES = 2**30
# 1 % of a peak: the lowest efficiency in the presets is 0.30 (the cpu core's attention); a figure under 0.01 is a
# percentage written as a fraction of one.
MIN_EFFICIENCY = 0.01


@functools.cache
def _cpu_preset_name() -> str | None:
    """The cpu preset's device name, read once (every GPUSpec validation asks)."""
    return (preset("gpus", "cpu") or {}).get("name")


class GPUSpec(BaseModel):
    """One accelerator: datasheet peaks plus a few measured efficiencies (each cited in the presets)."""

    model_config = SPEC_CONFIG

    name: str = Field(max_length=MAX_NAME_CHARS,
                      description=f"the GPU's name in outputs, at most {MAX_NAME_CHARS} characters")
    kind: Literal["gpu", "cpu"] = Field(default="gpu", description="gpu: an accelerator; cpu: ranks are processes on "
                                        "host CPU cores (the cpu preset; collectives on gloo). A cluster's "
                                        "devices (its pools') are of one kind; a calibration profile measured on "
                                        "the other kind is refused")
    memory_bytes: float = Field(ge=MIN_MEMORY_BYTES, le=1e14)
    hbm_bw_Bps: float = Field(ge=MIN_BW_BPS, le=1e15)
    peak_flops: dict[Dtype, float] = Field(description="dense peak FLOP/s per dtype (no 2:4 sparsity)")
    # Achieved fraction of dense peak for large, well-shaped GEMMs (cuBLASLt microbenchmarks).
    gemm_efficiency: float = Field(default=0.80, ge=MIN_EFFICIENCY, le=1)
    # The same for FP4 (block-scaled E2M1) GEMMs against the ``fp4`` peak, where measured; None = gemm_efficiency.
    gemm_efficiency_fp4: float | None = Field(default=None, ge=MIN_EFFICIENCY, le=1, description="achieved fraction of the fp4 "
                                              "peak for large FP4 GEMMs (cuBLASLt); none = gemm_efficiency")
    # Achieved fraction of HBM bandwidth for streaming kernels (STREAM-like triad).
    hbm_efficiency: float = Field(default=0.85, ge=MIN_EFFICIENCY, le=1)
    # Achieved fraction of dense peak for fused (flash) attention forward.
    attention_efficiency: float = Field(default=0.55, ge=MIN_EFFICIENCY, le=1)
    # Fixed cost per kernel launch / per op as seen on the timeline, seconds.
    kernel_overhead_s: float = Field(default=4e-6, ge=0, le=1)
    # Host <-> device bandwidth per GPU (PCIe), used for offload.
    pcie_bw_Bps: float = Field(default=25e9, ge=MIN_BW_BPS, le=1e13)
    fp8: bool = False
    num_sms: int | None = Field(default=None, gt=0, le=100_000, description="streaming multiprocessors: GEMM waves, "
                                "the CUDA context, NCCL's share of the SMs; none = not known: no wave penalty, and "
                                "the device's runtime memory and host issue time are costed as CPU ranks' are")
    # Fraction of compute speed lost while a bulk collective runs on this device. None = from num_sms
    # (NCCL's SMs / the GPU's SMs). CPU ranks set it: gloo runs collectives on the cores the ranks compute on.
    comm_compute_slowdown: float | None = Field(default=None, ge=0, le=1)
    # Coefficient of variation of sustained speed across parts of this SKU (manufacturing variability under
    # the power cap); a synchronous job runs at its slowest GPU's pace (cost_models/variation.py). The default
    # is the presets' GPU figure (Sinha et al. SC22), so a hand-written GPU gets the same physics; 0 = identical
    # devices (the cpu preset: one host's cores).
    speed_spread_cv: float = Field(default=0.015, ge=0, le=0.5)

    @model_validator(mode="before")
    @classmethod
    def _cpu_by_its_preset_name(cls, data: Any) -> Any:
        """A device that states no ``kind`` under the cpu preset's name is that preset's CPU (a scenario or plan
        written before the field, or a cluster file that copies the preset by name)."""
        if isinstance(data, dict) and "kind" not in data and data.get("name") == _cpu_preset_name():
            return {**data, "kind": "cpu"}
        return data

    @model_validator(mode="after")
    def _check(self) -> GPUSpec:
        if "bf16" not in self.peak_flops and "fp16" not in self.peak_flops:
            raise ValueError("peak_flops must give bf16 or fp16")
        for k, v in self.peak_flops.items():
            if not (MIN_FLOPS <= v < 1e18):
                raise ValueError(f"peak_flops.{k}={v} is not a plausible FLOP/s (between {MIN_FLOPS:g} and 1e18)")
        return self

    @property
    def fp4(self) -> bool:
        """FP4 tensor cores (Blackwell and later): the GPU states an ``fp4`` peak."""
        return "fp4" in self.peak_flops

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for a training dtype; fp8 falls back to bf16 on GPUs without fp8; nvfp4 is the fp4 peak
        (a GPU without one is refused before: dtype_refusal)."""
        if dtype == "nvfp4":
            dtype = "fp4"
        if dtype in self.peak_flops:
            return self.peak_flops[dtype]  # type: ignore[index]
        if dtype == "fp8":
            return self.peak("bf16")
        if dtype == "bf16":
            return self.peak_flops["fp16"]
        if dtype == "fp16":
            return self.peak_flops["bf16"]
        raise KeyError(dtype)


def dtype_refusal(gpu: GPUSpec, dtype: str) -> str | None:
    """Why ``gpu`` cannot run training dtype ``dtype`` (no tensor cores of that format), or None."""
    if dtype == "fp8" and not gpu.fp8:
        return f"fp8 needs FP8 tensor cores, which {gpu.name} lacks"
    if dtype == "nvfp4" and not gpu.fp4:
        return (f"nvfp4 needs FP4 tensor cores (Blackwell: b200, gb200, b300, gb300), which {gpu.name} lacks "
                f"(no fp4 in its peak_flops)")
    return None


class ScaleUpSpec(BaseModel):
    """The in-node fabric: NVLink through NVSwitch, direct NVLink/Infinity Fabric, or PCIe."""

    model_config = SPEC_CONFIG

    kind: Literal["nvswitch", "nvlink", "infinity-fabric", "pcie"] = "nvswitch"
    bw_per_gpu_Bps: float = Field(ge=MIN_BW_BPS, le=1e14, description="unidirectional, per GPU")
    latency_s: float = Field(default=3e-6, ge=0, le=1)
    nvls: bool = Field(default=False, description="NVLink SHARP (in-switch reduction), Hopper and later")
    # Achieved payload fraction of the line rate for SM-driven copies. None = per-kind default in
    # trainsim.cost_models.nccl_model (NVLink 0.80: 128 B payload, NCCL topo.h 20 of 25 GB/s per link).
    efficiency: float | None = Field(default=None, ge=MIN_EFFICIENCY, le=1)
    # NVLink SHARP reduction efficiency (NCCL nvlsEfficiency). None = 0.85 (Hopper) / 0.74 (Blackwell).
    nvls_efficiency: float | None = Field(default=None, ge=MIN_EFFICIENCY, le=1)

    @model_validator(mode="after")
    def _check(self) -> ScaleUpSpec:
        if self.nvls and self.kind != "nvswitch":  # the reduction runs in the NVSwitch (topologies/fabric.py)
            raise ValueError(f"nvls (NVLink SHARP, reductions in the NVSwitch) needs kind nvswitch, got {self.kind}")
        return self


class BackgroundLoadSpec(BaseModel):
    """Other jobs' traffic on the shared scale-out fabric, as the fraction of each tier's capacity it occupies
    while this job communicates; this job's flows get ``1 - fraction`` of each such link. The other traffic keeps
    its rate (it is limited elsewhere: its own bottleneck, storage and checkpoint streams), which max-min fair
    sharing grants a flow whose demand is below its fair share. An elastic competitor that takes a fair share
    instead, with k-1 such bulk flows on the link, is stated as ``1 - 1/k`` (0.5 for one other job all-reducing
    over the same links at the same time). The scale-up fabric (NVLink, PCIe inside a node) is not shared with
    other jobs and is unaffected."""

    model_config = SPEC_CONFIG

    nic: float = Field(default=0.0, ge=0.0, lt=1.0, description="fraction of each NIC (and its leaf port) taken "
                       "by other jobs' traffic, 0 <= f < 1")
    spine: float = Field(default=0.0, ge=0.0, lt=1.0, description="fraction of each leaf's spine uplinks and "
                         "downlinks taken by other jobs' traffic, 0 <= f < 1")

    @model_validator(mode="before")
    @classmethod
    def _one_fraction(cls, data):
        """One number stands for every tier (``background_load: 0.3``), as the flag's single FRACTION does."""
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return {"nic": data, "spine": data}
        return data

    @property
    def any(self) -> bool:
        return self.nic > 0 or self.spine > 0

    def sentence(self) -> str:
        """What a report says about the shared fabric (empty when no other job's traffic is assumed)."""
        if not self.any:
            return ""
        return (f"shared fabric: other jobs' traffic takes {self.nic:.0%} of each NIC and {self.spine:.0%} of the "
                f"spine links; this job's scale-out collectives get the rest (scale-up unaffected)")


# NIC payload fraction, the default of ``ScaleOutSpec.efficiency``: NCCL topo.h NET_BW = 12.0 GB/s for a 100 Gb/s
# (12.5 GB/s) NIC. Matches the maintainers' expectations 12.2 GB/s per 100 Gb/s, ~24 per 200 Gb/s HDR, 46-48 per
# 400 Gb/s NDR (nccl_busbw.csv edr_per_nic, hdr_per_nic, ndr_per_nic).
NIC_EFFICIENCY = 0.96


class ScaleOutSpec(BaseModel):
    """The inter-node fabric: NICs per node and the switch network behind them."""

    model_config = SPEC_CONFIG

    nics_per_node: int = Field(default=8, ge=0, le=1024)
    nic_bw_Bps: float = Field(default=50e9, ge=MIN_BW_BPS, le=1e14, description="unidirectional line rate per NIC")
    latency_s: float = Field(default=5e-6, ge=0, le=1)
    fabric: Literal["fat-tree", "rail-optimized", "switch"] = "rail-optimized"
    oversubscription: float = Field(default=1.0, ge=1.0, le=1024)
    nodes_per_leaf: int = Field(default=16, gt=0, le=100_000, description="nodes under one leaf (or rail group)")
    # Achieved payload fraction of the NIC line rate. None = 0.96 (NCCL topo.h NET_BW 12 GB/s per 100 Gb/s).
    efficiency: float | None = Field(default=None, ge=MIN_EFFICIENCY, le=1)
    background_load: BackgroundLoadSpec = Field(
        default=BackgroundLoadSpec(), description="other jobs' share of the fabric per tier (nic, spine; one "
        "number sets both): this job gets 1 - fraction of each such link (inelastic background)")


class PoolSpec(BaseModel):
    """One node type of a mixed cluster (``cluster.pools``): ``nodes`` nodes of ``gpu``, with their own in-node
    fabric and NICs. Given in a scenario as ``{node: CLUSTER_PRESET, nodes: N}`` (that preset's GPU, scale-up and
    scale-out) or ``{gpu: GPU_PRESET_OR_MAPPING, nodes: N}`` (the cluster's node with that GPU); ``scale_up`` and
    ``scale_out`` override either."""

    model_config = SPEC_CONFIG

    name: str | None = Field(default=None, max_length=MAX_NAME_CHARS,
                             description=f"the pool's name in outputs, unique among the pools, at most "
                                         f"{MAX_NAME_CHARS} characters; none: its node or GPU preset's")
    node: str | None = Field(default=None, description="a cluster preset whose node type (GPU, scale_up, scale_out; "
                             "same GPUs per node as the cluster) the pool has; give node or gpu")
    gpu: GPUSpec | None = Field(default=None, description="a GPU preset or mapping on the cluster's node; none: the "
                                "node preset's (always filled once loaded)")
    nodes: int = Field(gt=0, le=1_000_000, description="nodes of this type in the job")
    scale_up: ScaleUpSpec | None = Field(default=None, description="overrides of the node's scale-up; none: the node "
                                         "preset's or the cluster's (always filled once loaded)")
    scale_out: ScaleOutSpec | None = Field(default=None, description="overrides of the node's scale-out; none: the "
                                           "node preset's or the cluster's (always filled once loaded)")


class ClusterSpec(BaseModel):
    """A cluster of nodes; ``num_gpus`` is the size used for a run. With ``pools`` it holds several node types
    (the top-level ``gpu``, ``scale_up`` and ``scale_out`` are then the first pool's)."""

    model_config = SPEC_CONFIG

    name: str = Field(default="custom", max_length=MAX_NAME_CHARS,
                      description=f"the cluster's name in outputs, at most {MAX_NAME_CHARS} characters")
    gpu: GPUSpec
    gpus_per_node: int = Field(default=8, gt=0, le=1024)
    num_gpus: int = Field(default=8, gt=0, le=10_000_000)
    scale_up: ScaleUpSpec
    scale_out: ScaleOutSpec = ScaleOutSpec()
    host_memory_bytes: float = Field(default=2e12, ge=MIN_MEMORY_BYTES, le=1e16, description="per node, for offload")
    host_cpu: Literal["x86", "grace"] = Field(default="x86", description="the host CPU issuing the GPUs' kernels: "
                                              "x86 server cores, or NVIDIA Grace (GB200/GB300/GH200), ~2.6x slower "
                                              "per eager op (cost_models.host)")
    pools: tuple[PoolSpec, ...] | None = Field(
        default=None, description="node types of a mixed cluster, in rank order (list of `{node: CLUSTER_PRESET "
        "| gpu: GPU_PRESET, nodes: N}`; their GPUs add up to the job's); none: one node type")
    placement: Literal["stages", "dp"] = Field(
        default="stages", description="with pools: `stages` puts pipeline stages on the pools in order (each "
        "stage wholly in one pool), `dp` puts whole data-parallel replicas on each pool (the all-reduce waits "
        "for the slowest replica); links between pools are the slower pool's scale-out NICs")

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        if self.pools is not None:
            covered = sum(p.nodes for p in self.pools) * self.gpus_per_node
            if covered != self.num_gpus:
                raise ValueError(f"pools hold {covered} GPUs but the job has num_gpus={self.num_gpus}")
        if self.num_gpus > self.gpus_per_node and self.num_gpus % self.gpus_per_node != 0:
            raise ValueError(
                f"num_gpus={self.num_gpus} is not a whole number of {self.gpus_per_node}-GPU nodes"
            )
        if self.num_gpus > self.gpus_per_node and self.scale_out.nics_per_node == 0:
            raise ValueError("scale_out.nics_per_node is 0 but the cluster spans several nodes")
        return self

    @property
    def num_nodes(self) -> int:
        return max(1, self.num_gpus // self.gpus_per_node)

    def with_gpus(self, n: int) -> ClusterSpec:
        if self.pools is not None and n != self.num_gpus:
            raise SpecError("gpus", f"the cluster's pools hold exactly {self.num_gpus} GPUs, not {n}")
        return type(self).model_validate(
            {**self.model_dump(), "num_gpus": n}
        )
