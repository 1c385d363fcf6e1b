"""CostTable: everything the engine needs to time one training step, and nothing else.

The engine never touches specs, cost models or topologies: it consumes this small table of per-stage,
per-chunk compute times, communication transfers and memory sizes. `builder.build_cost_table(scenario)`
is the only place that fills it from the cost models, so the engine can be tested with hand-written
tables (uniform stages, ideal network) against closed forms.

Units: seconds and bytes. "Per micro-batch" means one micro-batch of one model chunk on one GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

COMM_DIMS = ("tp", "pp", "dp", "cp", "ep")


@dataclass(frozen=True)
class Transfer:
    """One communication operation timed as a fluid flow over shared links.

    ``transfer_s`` is its bandwidth term when it has every link it uses to itself; concurrent flows on a
    link share that link max-min fairly, which stretches it. ``latency_s`` is a fixed start-up delay that
    uses no bandwidth. ``links`` are opaque link ids ("s3.nic_tx"); ``dim`` is the parallel dimension
    it is charged to (tp/pp/dp/cp/ep); ``bulk`` marks collectives that run NCCL kernels on SMs and so slow
    concurrent compute (see engine.COMM_COMPUTE_SLOWDOWN). ``then`` is a collective that starts when this one
    ends, on a stream of its own: HSDP's all-reduce of a reduce-scattered gradient shard across the replica
    groups (FSDP2's all_reduce_stream), concurrent with the next reduce-scatter. ``ready_at`` (gradient buckets)
    is the fraction of the backward op that releases it after which its gradients are all produced; None spaces
    a chunk's buckets evenly over that op.
    """

    name: str
    transfer_s: float
    latency_s: float = 0.0
    links: tuple[str, ...] = ()
    dim: str = "dp"
    nbytes: float = 0.0
    bulk: bool = True
    then: Transfer | None = None
    ready_at: float | None = None

    @property
    def time_s(self) -> float:
        """Time alone on its links."""
        return self.latency_s + self.transfer_s

    def free(self) -> Transfer:
        return replace(self, transfer_s=0.0, latency_s=0.0, then=self.then.free() if self.then else None)


@dataclass(frozen=True)
class ChunkCost:
    """One model chunk (the layers one stage runs for one virtual stage) for one micro-batch.

    Compute times include kernel overheads; ``*_comm_s`` are communication times that run on the compute
    stream (exposed): Megatron's TP all-reduce / reduce-scatter+all-gather, the part of CP ring exchanges
    that attention compute does not hide, and EP all-to-alls. Embedding and logits+loss are folded into
    the first chunk of stage 0 and the last chunk of the last stage by the builder.
    """

    fwd_s: float
    bwd_input_s: float
    bwd_weight_s: float
    recompute_s: float = 0.0
    tp_fwd_s: float = 0.0
    tp_bwd_s: float = 0.0
    cp_fwd_s: float = 0.0
    cp_bwd_s: float = 0.0
    ep_fwd_s: float = 0.0
    ep_bwd_s: float = 0.0
    # Data-parallel communication run on the compute stream, serialized with it (frameworks that do not
    # overlap ZeRO-3 gathers / gradient reduce-scatters: DeepSpeed 2021, cost_models/framework.py).
    dp_fwd_s: float = 0.0
    dp_bwd_s: float = 0.0
    act_bytes: float = 0.0           # stored by forward until its backward
    w_retained_bytes: float = 0.0    # of act_bytes, kept after B until W when backward is split (ZB)
    bwd_transient_bytes: float = 0.0  # held only during the backward (recomputed activations, grads in flight)
    layers: int = 1
    label: str = ""
    # DP gradient reduction of this chunk's gradients, in bucket order (first ready first).
    grad_buckets: tuple[Transfer, ...] = ()
    # ZeRO-3: all-gather of this chunk's parameters before each use (forward and backward), and its bytes.
    param_gather: Transfer | None = None
    param_gather_bytes: float = 0.0
    # Of fwd_s / bwd_input_s: seconds the GPU waits for its host to issue this chunk's kernels
    # (cost_models/host_issue.py), per micro-batch, forward and backward.
    host_idle_fwd_s: float = 0.0
    host_idle_bwd_s: float = 0.0
    # Host seconds to issue this chunk's forward / backward per micro-batch (host_issue.chunk_issue_s; 0 where the
    # host is not modelled apart): the quantity the idle above is the excess of.
    host_issue_fwd_s: float = 0.0
    host_issue_bwd_s: float = 0.0

    @property
    def bwd_s(self) -> float:
        """Full backward compute (input + weight gradients + recompute)."""
        return self.recompute_s + self.bwd_input_s + self.bwd_weight_s

    @property
    def fwd_comm_s(self) -> float:
        return self.tp_fwd_s + self.cp_fwd_s + self.ep_fwd_s + self.dp_fwd_s

    @property
    def bwd_comm_s(self) -> float:
        return self.tp_bwd_s + self.cp_bwd_s + self.ep_bwd_s + self.dp_bwd_s


@dataclass(frozen=True)
class StageCost:
    """One pipeline stage: its chunks (vpp of them), messages to neighbours, step-end work, static memory."""

    chunks: tuple[ChunkCost, ...]
    # Activation (forward) and activation-gradient (backward) message of one micro-batch to the next /
    # previous stage in the virtual pipeline; None when that neighbour is on the same GPU (or pp = 1).
    send_fwd: Transfer | None = None
    send_bwd: Transfer | None = None
    optimizer_s: float = 0.0
    # Of optimizer_s, the GPU's wait for its host to issue the step's kernels (cost_models/step_host.py).
    optimizer_host_idle_s: float = 0.0
    # Host seconds to issue the optimizer step's kernels (cost_models/step_host.py; 0 where not modelled apart).
    optimizer_host_issue_s: float = 0.0
    # ZeRO-1/2 / distributed optimizer: parameter all-gather after the optimizer step (exposed).
    post_step: tuple[Transfer, ...] = ()
    # Static bytes per GPU by component: weights, grads, optimizer, other (buffers, workspace).
    weights_bytes: float = 0.0
    grads_bytes: float = 0.0
    optimizer_bytes: float = 0.0
    other_bytes: float = 0.0

    @property
    def static_bytes(self) -> float:
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes + self.other_bytes


@dataclass(frozen=True)
class CostTable:
    """The engine's whole input: stages, micro-batch count, schedule and the gradient-reduction policy.

    ``schedule`` is one of gpipe, 1f1b, interleaved, zb (ZB-H1). ``reduce_grads_every_microbatch`` is
    True for ZeRO-2/3 (DeepSpeed/FSDP reduce-scatter every micro-batch); otherwise buckets are reduced once,
    overlapped with the last micro-batch's backward (Megatron DDP / distributed optimizer).
    """

    stages: tuple[StageCost, ...]
    num_microbatches: int
    schedule: str = "1f1b"
    reduce_grads_every_microbatch: bool = False
    # False: gradient buckets are reduced after the stage's whole backward pass, not during it (Megatron
    # 2021 local DDP); per-micro-batch reductions then start after each op instead of during it.
    overlap_grad_reduce: bool = True
    # True: a stage's compute waits for each pipeline send it issues to complete (Megatron 2021's
    # p2p_communication: batch_isend_irecv, wait, torch.cuda.synchronize()).
    blocking_p2p: bool = False
    # True: the interleaved schedule's steady state exchanges once per (forward, backward) iteration, after both
    # (Megatron's send_forward_backward_recv_forward_backward; schedules.batched_pairs).
    batched_p2p: bool = False
    comm_compute_slowdown: float = 0.0
    # Factor already applied to every compute time: the job's slowest GPU sets its pace (cost_models/variation).
    slowest_gpu_factor: float = 1.0
    gpu_memory_bytes: float = float("inf")
    host_bytes: float = 0.0  # largest offloaded host memory of a stage's GPU (cost_models.memory)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def pp(self) -> int:
        return len(self.stages)

    @property
    def vpp(self) -> int:
        return len(self.stages[0].chunks)

    def without_communication(self) -> CostTable:
        """The same step with every communication free (the --ideal-network what-if)."""
        stages = []
        for st in self.stages:
            chunks = tuple(
                replace(c, tp_fwd_s=0.0, tp_bwd_s=0.0, cp_fwd_s=0.0, cp_bwd_s=0.0, ep_fwd_s=0.0, ep_bwd_s=0.0,
                        dp_fwd_s=0.0, dp_bwd_s=0.0,
                        grad_buckets=tuple(b.free() for b in c.grad_buckets),
                        param_gather=c.param_gather.free() if c.param_gather else None)
                for c in st.chunks
            )
            stages.append(replace(
                st, chunks=chunks,
                send_fwd=st.send_fwd.free() if st.send_fwd else None,
                send_bwd=st.send_bwd.free() if st.send_bwd else None,
                post_step=tuple(t.free() for t in st.post_step),
            ))
        return replace(self, stages=tuple(stages), comm_compute_slowdown=0.0)


def uniform_table(pp: int, m: int, *, vpp: int = 1, fwd_s: float = 1.0, bwd_input_s: float = 1.0,
                  bwd_weight_s: float = 1.0, act_bytes: float = 1.0, schedule: str = "1f1b",
                  w_retained_bytes: float = 0.0) -> CostTable:
    """A table of identical stages and free communication: the setting of the textbook bubble formulas."""
    chunk = ChunkCost(fwd_s=fwd_s / vpp, bwd_input_s=bwd_input_s / vpp, bwd_weight_s=bwd_weight_s / vpp,
                      act_bytes=act_bytes / vpp, w_retained_bytes=w_retained_bytes / vpp)
    stage = StageCost(chunks=(chunk,) * vpp)
    return CostTable(stages=(stage,) * pp, num_microbatches=m, schedule=schedule)
