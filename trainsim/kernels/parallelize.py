"""Apply a Scenario's layout with torch's own parallelism: DeviceMesh, TP/SP, pipelining, DDP/FSDP2/HSDP.

Mesh dims (outermost first): ``pp, dp_rep, dp_shard, tp`` — tp innermost as in the default placement.
DP mode: zero=0 → DDP when neither pipelining nor TP is used, otherwise FSDP2 on a (dp, 1) HSDP mesh —
replicated parameters, all-reduced gradients, the memory of DDP — because DDP crashes or gives wrong
losses under multi-stage schedules (notes trap 2) and composes with TP only through a private
parameter-swapping transform (trap 3; with our vocab-parallel embedding and gradient-placement hook its
losses were 0.015 off the reference); zero=3 → FSDP2 over dp_shard, HSDP over
(dp_rep, dp_shard) with ``--hsdp R``. Schedules: gpipe → ScheduleGPipe, 1f1b → Schedule1F1B,
interleaved → ScheduleInterleaved1F1B (vpp looped chunks per rank), zb → ScheduleInterleavedZeroBubble
with one chunk per rank (ZB-H1: same layers per rank as 1F1B, backward split into input and weight).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from trainsim.specs import Scenario

from .exec_config import dp_mode
from .torch_model import Chunk, ModelOptions, build_chunk, materialize

SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved": "ScheduleInterleaved1F1B",
             "zb": "ScheduleInterleavedZeroBubble"}


def stage_ids_of(pp_rank: int, pp: int, vpp: int) -> list[int]:
    """Pipeline stages held by one pp rank: looped assignment r, r+pp, r+2pp, ... (Megatron interleaving)."""
    return [pp_rank + k * pp for k in range(vpp)]


def layers_of(stage: int, stage_layers: tuple[int, ...]) -> list[int]:
    """Global layer indices of virtual stage ``stage`` (Scenario.stage_layers: even, or Megatron's uneven split)."""
    start = sum(stage_layers[:stage])
    return list(range(start, start + stage_layers[stage]))


@dataclass
class Parallel:
    """A model laid out on this rank, ready to train: chunks, schedule, optimizer and the groups it uses."""

    scenario: Scenario
    device: torch.device
    mesh: object
    chunks: list[Chunk]
    wrapped: list[nn.Module]
    stage_ids: list[int]
    num_stages: int
    optimizer: torch.optim.Optimizer
    schedule: object | None
    tp_mesh: object | None
    dp_rank: int
    tp_rank: int
    pp_rank: int
    mode: str
    autocast_dtype: torch.dtype | None = None
    mechanism: dict[str, str] = field(default_factory=dict)
    phases_s: dict[str, float] = field(default_factory=dict)  # the last step's phases on this rank (GPU time on cuda)
    host_phases_s: dict[str, float] = field(default_factory=dict)  # the host's time issuing each phase
    host_issue_s: float = 0.0  # the host's time from the step's start to its last issued op, before any wait
    _marks: list = field(default_factory=list)

    @property
    def has_first(self) -> bool:
        return 0 in self.stage_ids

    @property
    def has_last(self) -> bool:
        return self.num_stages - 1 in self.stage_ids

    def loss_context(self):
        """Vocab-parallel cross entropy needs loss_parallel around forward-loss and backward."""
        if self.tp_mesh is None:
            return contextlib.nullcontext()
        # torch loads on use only (tests/test_layering.py: predict and plan run without it)
        from torch.distributed.tensor.parallel import loss_parallel
        return loss_parallel()

    def loss_fn(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return cross_entropy(logits, target, self.tp_mesh)

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    def _mark(self) -> tuple[object | None, float]:
        """A point in this rank's execution: a CUDA event recorded on the current stream on GPUs (host
        timers would only see the asynchronous launches; None on CPU) and the host's ``perf_counter``."""
        host = time.perf_counter()
        if self.device.type == "cuda":
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev, host
        return None, host

    def _phase(self, name: str, start, end) -> None:
        self._marks.append((name, start, end))

    def _resolve_phases(self) -> tuple[dict[str, float], dict[str, float]]:
        """Seconds per phase of the last step, summed over micro-batches, on the device (waits for the GPU's
        last event) and on the host (the time its Python and launches took to issue the phase: on a GPU whose
        queue is not full this is the host's own cost, which the device phase hides when the GPU is slower)."""
        device: dict[str, float] = {}
        host: dict[str, float] = {}
        for name, (ev0, h0), (ev1, h1) in self._marks:
            if ev0 is None:
                dt = h1 - h0
            else:
                ev1.synchronize()
                dt = ev0.elapsed_time(ev1) / 1e3
            device[name] = device.get(name, 0.0) + dt
            host[name] = host.get(name, 0.0) + (h1 - h0)
        self._marks = []
        return device, host

    def train_step(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """One optimizer step on this dp rank's batch (n_micro·mb sequences); returns the global mean loss."""
        n_micro = self.scenario.num_microbatches
        self.optimizer.zero_grad(set_to_none=True)
        self._marks = []
        local = torch.zeros((), dtype=torch.float64, device=self.device)
        t0 = self._mark()
        with self.loss_context(), self._autocast():
            if self.schedule is None:
                local += self._accumulate(ids, targets, n_micro)
            else:
                losses: list[torch.Tensor] = []
                args = (ids,) if self.has_first else ()
                kwargs = {"target": targets, "losses": losses} if self.has_last else {}
                self.schedule.step(*args, return_outputs=False, **kwargs)
                if self.has_last:
                    local += torch.stack([x.detach().double() for x in losses]).mean()
                self._phase("pipeline_s", t0, self._mark())
        t1 = self._mark()
        self.optimizer.step()
        self._phase("optimizer_s", t1, self._mark())
        if not (self.has_last and self.tp_rank == 0):
            local.zero_()
        dist.all_reduce(local)
        self.host_issue_s = time.perf_counter() - t0[1]
        self.phases_s, self.host_phases_s = self._resolve_phases()
        return local / self.scenario.dp

    def _accumulate(self, ids: torch.Tensor, targets: torch.Tensor, n_micro: int) -> torch.Tensor:
        """Gradient accumulation without pipelining; gradient sync only on the last micro-batch."""
        model = self.wrapped[0]
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        for i, (x, y) in enumerate(zip(ids.chunk(n_micro), targets.chunk(n_micro))):
            last = i == n_micro - 1
            ctx = contextlib.nullcontext()
            if self.mode == "ddp" and not last:
                ctx = model.no_sync()
            elif self.mode.startswith("fsdp"):
                model.set_requires_gradient_sync(last)
            with ctx:
                t0 = self._mark()
                loss = self.loss_fn(model(x), y)
                t1 = self._mark()
                (loss / n_micro).backward()
                self._phase("forward_s", t0, t1)
                self._phase("backward_s", t1, self._mark())
            total += loss.detach().double()
        return total / n_micro


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, tp_mesh=None) -> torch.Tensor:
    """Mean token cross entropy; with TP the logits stay vocab-sharded (loss_parallel must be active)."""
    if tp_mesh is not None:
        from torch.distributed.tensor import DTensor, Shard
        logits = DTensor.from_local(logits, tp_mesh, [Shard(2)], run_check=False)
        return F.cross_entropy(logits.flatten(0, 1), target.flatten()).to_local()
    return F.cross_entropy(logits.flatten(0, 1).float(), target.flatten())


def tp_plan_block(sp: bool) -> dict:
    """Megatron TP of one block: q,k,v,fc1,gate column-parallel; o,fc2 row-parallel; SP around the norms."""
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )
    plan = {name: ColwiseParallel() for name in ("attn.q", "attn.k", "attn.v", "mlp.fc1", "mlp.gate")}
    out = Shard(1) if sp else Replicate()
    plan["attn.o"] = RowwiseParallel(output_layouts=out)
    plan["mlp.fc2"] = RowwiseParallel(output_layouts=out)
    if sp:
        plan["norm1"] = SequenceParallel()
        plan["norm2"] = SequenceParallel()
        plan["attn"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        plan["mlp"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    return plan


def apply_tp(chunk: Chunk, tp_mesh, sp: bool, gated: bool) -> None:
    """Vocab-parallel embedding and head (logits stay vocab-sharded for loss_parallel), blocks per tp_plan_block."""
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleOutput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )
    plan: dict = {}
    if chunk.embed is not None:
        plan["embed.tok"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())
        if sp:
            plan["embed"] = PrepareModuleOutput(output_layouts=Replicate(), desired_output_layouts=Shard(1))
    if chunk.head is not None:
        if sp:
            plan["norm"] = SequenceParallel()
        plan["head"] = ColwiseParallel(input_layouts=Shard(1) if sp else Replicate(), output_layouts=Shard(2))
    if plan:
        parallelize_module(chunk, tp_mesh, plan)
    block_plan = tp_plan_block(sp)
    if not gated:
        block_plan.pop("mlp.gate")
    for block in chunk.layers.values():
        parallelize_module(block, tp_mesh, block_plan)


def keep_grad_placements(chunk: Chunk) -> None:
    """Register _grad_like_param on every DTensor parameter (after materialisation, which may swap tensors)."""
    for p in chunk.parameters():
        if hasattr(p, "placements"):
            p.register_post_accumulate_grad_hook(_grad_like_param)


def _grad_like_param(p) -> None:
    """Keep a TP weight's gradient in the weight's placement (the vocab-parallel embedding's grad comes back
    Replicate, a full-size copy on every rank); Replicate -> Shard is a local slice, no communication."""
    g = p.grad
    if g is not None and hasattr(g, "placements") and tuple(g.placements) != tuple(p.placements):
        p.grad = g.redistribute(p.device_mesh, p.placements)


def build_parallel(s: Scenario, *, device: torch.device, seed: int, optimizer: str, lr: float,
                   hsdp: int = 1) -> Parallel:
    """Build this rank's part of the model with the scenario's layout; every rank must call it together."""
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from torch.distributed.device_mesh import init_device_mesh

    lay, t = s.layout, s.training
    mode = dp_mode(s)
    rep = hsdp if mode == "fsdp" else (s.dp if mode in ("ddp", "fsdp-replicate") else 1)
    shard = s.dp // rep
    mesh = init_device_mesh(device.type, (lay.pp, rep, shard, lay.tp), mesh_dim_names=("pp", "dp_rep", "dp_shard", "tp"))
    pp_rank = mesh["pp"].get_local_rank()
    tp_rank = mesh["tp"].get_local_rank()
    dp_rank = mesh["dp_rep"].get_local_rank() * shard + mesh["dp_shard"].get_local_rank()
    tp_mesh = mesh["tp"] if lay.tp > 1 else None
    vpp = lay.vpp  # resolve() ties vpp > 1 to the interleaved schedule
    num_stages = lay.pp * vpp
    stage_ids = stage_ids_of(pp_rank, lay.pp, vpp)
    mech = {"dp": mode, "tp": "none", "pp": "none", "recompute": t.recompute}
    options = ModelOptions(recompute=t.recompute)
    cuda = device.type == "cuda"
    dtype = torch.float32  # weights stay fp32; bf16/fp16 compute on cuda via autocast or FSDP2's policy
    # Built on the meta device, sharded, then materialised shard by shard; a tied embedding under FSDP2
    # (pp = 1 only) is materialised first, so FSDP2 shards the one shared weight.
    eager = s.model.tie_embeddings and mode.startswith("fsdp")
    chunks = [build_chunk(s.model, layers_of(sid, s.stage_layers), sid == 0, sid == num_stages - 1,
                          options, seed, device if eager else None, dtype) for sid in stage_ids]
    if tp_mesh is not None:
        for c in chunks:
            apply_tp(c, tp_mesh, t.sequence_parallel, s.model.gated_mlp)
            if c.tied:  # vocab-parallel embedding and head are both Shard(0) over the vocabulary: one weight
                c.head.weight = c.embed.tok.weight
        mech["tp"] = "parallelize_module colwise/rowwise" + (" + SequenceParallel" if t.sequence_parallel else "") + \
                     ", vocab-parallel embedding/head + loss_parallel"
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(t.dtype) if cuda else None
    autocast_dtype = None
    wrapped: list[nn.Module] = list(chunks)
    if mode in ("fsdp", "fsdp-replicate"):
        mech["dp"] = _fully_shard(chunks, mesh, mode, (rep, shard), reshard=lay.pp == 1, low=low)
    elif low is not None:
        autocast_dtype = low
    if not eager:
        for c in chunks:
            materialize(c, device, seed, dtype)
    if tp_mesh is not None and not mode.startswith("fsdp"):  # FSDP2 owns its gradients' placement
        for c in chunks:
            keep_grad_placements(c)
    opt = _make_optimizer([p for c in chunks for p in c.parameters()], optimizer, lr)
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        wrapped = [DDP(chunks[0], process_group=mesh["dp_rep"].get_group(), gradient_as_bucket_view=True,
                       device_ids=[device.index] if cuda else None)]
        mech["dp"] = "DDP (gradient_as_bucket_view)"
    schedule = None
    if lay.pp > 1:
        schedule = _make_schedule(s, chunks, stage_ids, num_stages, mesh["pp"].get_group(), device,
                                  tp_mesh, mode)
        mech["pp"] = f"torch.distributed.pipelining.{SCHEDULES[t.schedule]}" + (f" ({vpp} stages/rank)" if vpp > 1 else "")
    par = Parallel(scenario=s, device=device, mesh=mesh, chunks=chunks, wrapped=wrapped, stage_ids=stage_ids,
                   num_stages=num_stages, optimizer=opt, schedule=None, tp_mesh=tp_mesh, dp_rank=dp_rank,
                   tp_rank=tp_rank, pp_rank=pp_rank, mode=mode, autocast_dtype=autocast_dtype, mechanism=mech)
    par.schedule = schedule
    return par


def _fully_shard(chunks: list, mesh, mode: str, dp: tuple[int, int], *, reshard: bool, low) -> str:
    """Wrap every block, then each chunk, in FSDP2's ``fully_shard`` over the data-parallel mesh (HSDP's 2-D
    (replicate, shard) mesh where ``dp`` = (replicate, shard) replicates), with ``low`` as the compute dtype;
    the mechanism text. ``reshard``: reshard after forward -- only without a pipeline, since zero-bubble
    schedules need the unsharded parameters kept between forward and backward."""
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    rep, shard = dp
    dp_mesh = mesh["dp_shard"] if (mode == "fsdp" and rep == 1) else mesh["dp_rep", "dp_shard"]
    mp = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32) if low else MixedPrecisionPolicy()
    for c in chunks:
        for block in c.layers.values():
            fully_shard(block, mesh=dp_mesh, reshard_after_forward=reshard, mp_policy=mp)
        fully_shard(c, mesh=dp_mesh, reshard_after_forward=reshard, mp_policy=mp)
    return ("FSDP2 fully_shard" if mode == "fsdp" and rep == 1 else
            f"FSDP2 HSDP (replicate {rep} x shard {shard})") + f", reshard_after_forward={reshard}"


def _make_optimizer(params: list, name: str, lr: float) -> torch.optim.Optimizer:
    """Adam (m, v: 8 bytes/param in fp32) or SGD with momentum (4 bytes/param; exact for equivalence tests)."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    return torch.optim.Adam(params, lr=lr)


def _make_schedule(s: Scenario, chunks: list[Chunk], stage_ids: list[int], num_stages: int, pp_group,
                   device: torch.device, tp_mesh, mode: str):
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from torch.distributed import pipelining as pl

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return cross_entropy(logits, target, tp_mesh)

    stages = [pl.PipelineStage(c, sid, num_stages, device, group=pp_group) for c, sid in zip(chunks, stage_ids)]
    cls = getattr(pl, SCHEDULES[s.training.schedule])
    n = s.num_microbatches
    if s.training.schedule in ("gpipe", "1f1b"):
        return cls(stages[0], n, loss_fn=loss_fn)
    return cls(stages, n, loss_fn=loss_fn)
