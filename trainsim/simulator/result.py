"""Prediction: what `trainsim predict` reports, with the JSON shape docs/design.md promises (schema_version 1)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from trainsim import SCHEMA_VERSION
from trainsim.cost_models.runtime_memory import OUTSIDE_ALLOCATOR

COMM_DIMS = ("tp", "pp", "dp", "cp", "ep")


@dataclass
class StageMemory:
    """Peak bytes on one GPU of a pipeline stage, by component."""

    weights: float = 0.0
    grads: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0
    other: float = 0.0

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.other


@dataclass
class Prediction:
    """One predicted optimizer step. Seconds, bytes, FLOP/s; see docs/design.md for definitions."""

    step_time_s: float
    tokens_per_s: float
    mfu: float
    hfu: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    bubble_fraction: float
    exposed_comm_s: dict[str, float]
    per_stage_memory: list[StageMemory]
    peak_bytes: float
    gpu_memory_bytes: float
    layout: dict[str, int]
    engine: dict[str, Any] = field(default_factory=dict)
    calibration: str = "defaults"
    breakdown_s: dict[str, float] = field(default_factory=dict)
    host_bytes: float = 0.0
    # Host memory a node needs for offload (cost_models.offload.node_host_bytes) and what a node has
    # (ClusterSpec.host_memory_bytes): above it the run does not fit, however the GPUs fare.
    host_node_bytes: float = 0.0
    host_capacity_bytes: float = float("inf")
    scenario: str = ""
    warnings: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    # Monte Carlo summary when jitter/stragglers were requested (step_time_p50_s, step_time_p99_s, ...).
    variability: dict[str, Any] = field(default_factory=dict)
    # Model-state dtypes assumed (model_states.memory_assumptions), the peak stage's named ``other`` terms
    # (bytes), and the model's parameter counts.
    memory_assumptions: dict[str, Any] = field(default_factory=dict)
    other_terms: dict[str, float] = field(default_factory=dict)
    model_params: dict[str, int] = field(default_factory=dict)
    # Other jobs' share of the scale-out fabric the prediction assumed, per tier (cluster.scale_out.background_load).
    background_load: dict[str, float] = field(default_factory=lambda: {"nic": 0.0, "spine": 0.0})
    # Most loaded EP rank's tokens over the mean the prediction costed (cost_models/moe_balance.py; 1 = even).
    moe_imbalance: float = 1.0
    # HSDP shard group / replicas, gradient bucket and overlap the prediction costed (builder.data_parallel_settings).
    data_parallel: dict[str, Any] = field(default_factory=dict)
    # Mixed GPU pools (cluster.pools): per pool its GPU, nodes, stages or replicas, peak memory, capacity and
    # whether it fits (simulator/pools.py); empty for a cluster of one node type.
    pools: list[dict[str, Any]] = field(default_factory=list)
    # The caching allocator's reserved-but-free bytes at the reserved peak beyond the allocated peak
    # (cost_models/allocator_reserve.py); not in ``peak_bytes``, which the fit check uses.
    allocator_cached_bytes: float = 0.0

    @property
    def host_fits(self) -> bool:
        """Whether a node's host memory holds what its GPUs offload."""
        return self.host_node_bytes <= self.host_capacity_bytes

    @property
    def fits(self) -> bool:
        """Every GPU's peak within its memory, and the offloaded states within each node's host memory."""
        if not self.host_fits:
            return False
        if self.pools:
            return all(p["fits"] for p in self.pools)
        return self.peak_bytes <= self.gpu_memory_bytes

    @property
    def free_bytes(self) -> float:
        """Device memory left at the peak (negative: over capacity); with pools, the least left in any pool."""
        if self.pools:
            return min(p["capacity_bytes"] - p["peak_memory_bytes"] for p in self.pools)
        return self.gpu_memory_bytes - self.peak_bytes

    @property
    def peak_device_bytes(self) -> float:
        """What nvidia-smi shows at the peak: the reserved peak plus the CUDA context and NCCL buffers."""
        return self.peak_reserved_bytes + self._outside_allocator_bytes

    @property
    def peak_allocated_bytes(self) -> float:
        """torch.cuda.max_memory_allocated's view: the peak less what lies outside PyTorch's caching allocator
        (the CUDA context and NCCL's buffers, cost_models.runtime_memory.OUTSIDE_ALLOCATOR) on the peak stage."""
        return self.peak_bytes - self._outside_allocator_bytes

    @property
    def _outside_allocator_bytes(self) -> float:
        return sum(self.other_terms.get(k, 0.0) for k in OUTSIDE_ALLOCATOR)

    @property
    def peak_reserved_bytes(self) -> float:
        """torch.cuda.max_memory_reserved's view: the allocated peak plus the caching allocator's cached, unused
        blocks at the reserved peak (``allocator_cached_bytes``), at most what the device leaves the allocator:
        when cudaMalloc fails the allocator frees its cached blocks and retries (c10/cuda/CUDACachingAllocator.cpp
        ``malloc``: ``release_available_cached_blocks`` / ``release_cached_blocks``, counted in
        ``num_alloc_retries``), so reserved memory never exceeds the HBM less the CUDA context and NCCL's buffers.
        Fragmentation beyond that mechanism is not predicted; the planner's memory headroom covers it."""
        allocated = self.peak_allocated_bytes
        room = self.gpu_memory_bytes - self._outside_allocator_bytes
        return min(allocated + self.allocator_cached_bytes, max(allocated, room))

    def to_json(self) -> dict[str, Any]:
        """The stable JSON object; docs/design.md (JSON outputs) lists every key, tests/test_json_contract.py holds
        it."""
        return {
            "schema_version": SCHEMA_VERSION,
            "scenario": self.scenario,
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "hardware_tflops_per_gpu": self.hardware_tflops_per_gpu,
            "bubble_fraction": self.bubble_fraction,
            "exposed_comm_s": {k: float(self.exposed_comm_s.get(k, 0.0)) for k in COMM_DIMS},
            "memory": {
                "peak_bytes": self.peak_bytes,
                "gpu_bytes": self.gpu_memory_bytes,
                "host_bytes": self.host_bytes,
                "host_node_bytes": self.host_node_bytes,
                "host_capacity_bytes": self.host_capacity_bytes,
                "free_bytes": self.free_bytes,
                "peak_allocated_bytes": self.peak_allocated_bytes,
                "peak_reserved_bytes": self.peak_reserved_bytes,
                "per_stage": [{**asdict(s), "total": s.total} for s in self.per_stage_memory],
                **({"assumptions": dict(self.memory_assumptions)} if self.memory_assumptions else {}),
                **({"other_terms": dict(self.other_terms)} if self.other_terms else {}),
            },
            **({"model": dict(self.model_params)} if self.model_params else {}),
            "fits": self.fits,
            "layout": dict(self.layout),
            "engine": dict(self.engine),
            "calibration": self.calibration,
            "background_load": dict(self.background_load),
            "moe_imbalance": self.moe_imbalance,
            **({"data_parallel": dict(self.data_parallel)} if self.data_parallel else {}),
            "breakdown_s": dict(self.breakdown_s),
            **({"pools": [dict(p) for p in self.pools]} if self.pools else {}),
            "warnings": list(self.warnings),
            **({"extra": self.extra} if self.extra else {}),
            **({"step_time_p50_s": self.variability["step_time_p50_s"],
                "step_time_p99_s": self.variability["step_time_p99_s"],
                "variability": dict(self.variability)} if self.variability else {}),
        }
