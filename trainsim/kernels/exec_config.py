"""What one execution runs (a Scenario plus executor options) and the limits checked before any process starts.

Torch-free: the CLI validates a job here and only then launches torchrun.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace
from typing import Any

from trainsim.specs import Scenario, SpecError

OPTIMIZERS = ("adam", "sgd")
FAULTS = ("", "die", "hang")
WORKER_RSS_BYTES = 330 * 2**20  # measured RSS of one idle torch worker (notes/torch-distributed-on-cpu.md)
PROCS_PER_CORE_CPU = 4  # beyond this, time-slicing makes gloo collectives crawl (6 ms floor at 4 procs / 2 cores)


@dataclass(frozen=True)
class ExecJob:
    """One layout to run: the scenario and how to run it. JSON-serialisable (sent to every torchrun worker)."""

    scenario: dict[str, Any]
    device: str = "cpu"
    steps: int = 5
    warmup: int = 1
    seed: int = 1234
    optimizer: str = "adam"
    lr: float = 1e-3
    hsdp: int = 1  # replicate degree of HSDP (zero=3): dp = hsdp x shard
    measure_activations: bool = True
    profile_dir: str = ""
    inject_fault: str = ""  # test hook: "die" or "hang" on rank 1 at the first timed step
    label: str = ""

    @property
    def spec(self) -> Scenario:
        return Scenario.model_validate(self.scenario)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExecJob:
        return cls(**data)

    def with_(self, **changes: Any) -> ExecJob:
        return replace(self, **changes)


def make_job(scenario: Scenario, **options: Any) -> ExecJob:
    """An ExecJob from a resolved Scenario, checked against the executor's limits (SpecError if not runnable)."""
    job = ExecJob(scenario=json.loads(scenario.model_dump_json()), **options)
    check_job(job)
    return job


def world_size(scenario: Scenario) -> int:
    lay = scenario.layout
    return lay.tp * lay.pp * lay.cp * scenario.dp


def _check_block_features(m) -> None:
    """The executor's block (torch_model.Block) has two pre-norms, a SiLU-gated or GeLU MLP, full causal attention
    and an h-wide embedding: a model with any other of ModelSpec's block features is simulated only."""
    simulated_only = {
        "activation": (m.activation == "geglu", "a GeLU-gated MLP"),
        "block_norms": (m.block_norms != 2, f"{m.block_norms} norms per block"),
        "qk_norm": (m.qk_norm, "QK-norm"),
        "sliding_window": (m.sliding_window is not None, "sliding-window attention"),
        "attn_softcap": (m.attn_softcap is not None, "soft-capped attention logits"),
        "attn_sinks": (m.attn_sinks, "attention sinks"),
        "swiglu_limit": (m.swiglu_limit is not None, "a clamped SwiGLU"),
        "final_softcap": (m.final_softcap is not None, "soft-capped output logits"),
        "embed_proj_dim": (m.embed_proj_dim is not None, "a projected word embedding"),
        "position_embedding": (m.position_embedding == "none", "attention without position embedding"),
    }
    for key, (present, what) in simulated_only.items():
        if present:
            raise SpecError(f"model.{key}", f"{what} is simulated only, not executed (the executor's block has "
                                            "two pre-norms, a SiLU-gated or GeLU MLP and full causal attention)")


def _check_dp_knobs(job: ExecJob) -> None:
    """The shard group, gradient buckets, overlap and loss the executor runs are torch's own: a scenario asking for
    others would be predicted with settings the run does not have, so it is refused."""
    s = job.spec
    lay, t = s.layout, s.training
    if lay.dp_shard is not None and lay.dp_shard != s.dp // job.hsdp:
        raise SpecError("layout.dp_shard", f"shard group {lay.dp_shard} but the executor shards over dp/R = "
                                           f"{s.dp}/{job.hsdp} = {s.dp // job.hsdp}; give --hsdp {s.dp // lay.dp_shard} "
                                           "or leave dp_shard out")
    if t.dp_bucket_mb is not None:
        raise SpecError("training.dp_bucket_mb", "the executor keeps torch's own gradient buckets (DDP's 25 MiB, "
                                                 "FSDP2's one per block); dp_bucket_mb is simulated only")
    if t.overlap_grad_reduce is False:
        raise SpecError("training.overlap_grad_reduce", "torch's DDP and FSDP2 reduce gradients during backward; "
                                                        "overlap_grad_reduce=false is simulated only")
    if t.cross_entropy not in (None, "eager_fp32"):
        raise SpecError("training.cross_entropy", f"the executor runs torch's eager F.cross_entropy on fp32 logits "
                                                  f"(eager_fp32); {t.cross_entropy} is simulated only")


def _check_model(m) -> None:
    """Model features the executor's transformer does not build: refused, naming the field."""
    if m.is_hybrid:
        raise SpecError("model.hybrid_pattern", "hybrid Mamba stacks are simulated only, not executed (the executor's "
                                                "model has transformer blocks)")
    if m.is_moe:
        raise SpecError("model.num_experts", "the executor runs dense models only (MoE/expert parallelism is not executed)")
    _check_block_features(m)
    if m.is_mla:
        raise SpecError("model.kv_lora_rank", "multi-head latent attention is simulated only, not executed (the "
                                              "executor's model has multi-head/grouped-query attention)")
    if m.mtp_layers:
        raise SpecError("model.mtp_layers", "multi-token prediction is simulated only, not executed")


def check_job(job: ExecJob) -> None:
    """Refuse what the executor cannot run, naming the field; called before any process starts."""
    s = job.spec
    _check_run_flags(job)
    _check_executed_features(s)
    if job.hsdp < 1 or s.dp % job.hsdp:
        raise SpecError("hsdp", f"replicate degree {job.hsdp} must divide dp={s.dp}")
    if job.hsdp > 1 and s.training.zero != 3:
        raise SpecError("hsdp", "HSDP (--hsdp R) needs zero=3")
    _check_dp_knobs(job)
    _check_schedule(s)
    _check_device(job)


def _check_run_flags(job: ExecJob) -> None:
    """The run's own settings: device, step counts, optimizer, learning rate and injected fault."""
    if job.device not in ("cpu", "cuda"):
        raise SpecError("device", f"must be cpu or cuda, got {job.device!r}")
    if job.steps < 1 or job.steps > 100_000:
        raise SpecError("steps", f"must be between 1 and 100000, got {job.steps}")
    if job.warmup < 0 or job.warmup > 10_000:
        raise SpecError("warmup", f"must be between 0 and 10000, got {job.warmup}")
    if job.optimizer not in OPTIMIZERS:
        raise SpecError("optimizer", f"must be one of {', '.join(OPTIMIZERS)}, got {job.optimizer!r}")
    if not (0 < job.lr < 10):
        raise SpecError("lr", f"must be in (0, 10), got {job.lr}")
    if job.inject_fault not in FAULTS:
        raise SpecError("inject_fault", f"must be die or hang, got {job.inject_fault!r}")


def _check_executed_features(s: Scenario) -> None:
    """Model and training features the executor does not build (simulated only), and settings its torch code
    runs otherwise."""
    m, t, lay = s.model, s.training, s.layout
    _check_model(m)
    if t.recompute_modules and set(t.recompute_modules) != {"core_attn"}:
        raise SpecError("training.recompute_modules", "the executor recomputes the attention core only "
                                                      "(selective = core_attn); other modules are simulated only")
    if t.lora_rank:
        raise SpecError("training.lora_rank", "LoRA fine-tuning is simulated only, not executed (the executor trains "
                                              "every parameter)")
    if t.optimizer == "muon":
        raise SpecError("training.optimizer", "muon is simulated only, not executed")
    if lay.cp > 1:
        raise SpecError("layout.cp", "context parallelism is not executed (torch's context_parallel needs CUDA SDPA); use cp=1")
    if lay.ep > 1:
        raise SpecError("layout.ep", "expert parallelism is not executed")
    if t.zero in (1, 2) or t.distributed_optimizer:
        raise SpecError("training.zero", f"zero={t.effective_zero} is not executed: use zero=0 (DDP) or zero=3 (FSDP2/HSDP)")
    if t.offload_optimizer or t.offload_params:
        raise SpecError("training.offload_optimizer", "offload is not executed")
    if t.offload_activation_layers:
        raise SpecError("training.offload_activation_layers", "activation offload is not executed")
    if t.dropout:
        raise SpecError("training.dropout", "the executor's model has no dropout; set dropout=false")
    if not t.flash_attention or t.flash_attention_version != 2:
        raise SpecError("training.flash_attention", "the executor runs torch's fused scaled_dot_product_attention; "
                                                    "set flash_attention=true, flash_attention_version=2")
    if t.overlap_p2p:
        raise SpecError("training.overlap_p2p", "torch.distributed.pipelining waits on its sends and receives; "
                                                "overlap_p2p=true is not executed")
    if t.tp_comm_overlap:
        raise SpecError("training.tp_comm_overlap", "Transformer Engine's userbuffers overlap is not executed")
    if m.tie_embeddings and lay.pp > 1:
        raise SpecError("model.tie_embeddings", "tied embeddings are not executed with pp > 1 (the first and last "
                                                "stages would have to keep two copies in sync)")


def _check_schedule(s: Scenario) -> None:
    """Pipeline schedules the executor does not build, and micro-batch counts its torch schedules refuse."""
    t, lay = s.training, s.layout
    if t.schedule == "dualpipev":
        raise SpecError("training.schedule", "dualpipev is simulated only, not executed (the executor does not build "
                                             "torch's ScheduleDualPipeV V-shaped stage split); use zb or interleaved")
    if lay.pp > 1 and t.schedule == "1f1b" and s.num_microbatches < lay.pp:
        raise SpecError("training.global_batch", f"1f1b needs num_microbatches ({s.num_microbatches}) >= pp={lay.pp}")
    if lay.pp > 1 and t.schedule == "zb" and s.num_microbatches % lay.pp:
        raise SpecError("training.global_batch", f"zb needs num_microbatches ({s.num_microbatches}) divisible by pp={lay.pp}")


def _check_device(job: ExecJob) -> None:
    """Dtypes the device does not execute; on cpu, the processes and host memory the machine has."""
    s = job.spec
    m, t, lay = s.model, s.training, s.layout
    if job.device == "cpu":
        if t.dtype != "fp32":
            raise SpecError("training.dtype", f"{t.dtype} is not executed on cpu; use --dtype fp32")
        cores = os.cpu_count() or 1
        n = world_size(s)
        if n > PROCS_PER_CORE_CPU * cores:
            raise SpecError("layout", f"needs {n} processes but this machine has {cores} cores "
                                      f"(the cpu executor allows at most {PROCS_PER_CORE_CPU * cores})")
        need = n * (WORKER_RSS_BYTES + 8 * 4 * m.total_params() / max(1, lay.tp * lay.pp))
        avail = available_memory_bytes()
        if avail and need > avail:
            raise SpecError("layout", f"needs about {need / 2**30:.1f} GiB of host memory, {avail / 2**30:.1f} GiB available")
    elif t.dtype in ("fp8", "nvfp4"):
        raise SpecError("training.dtype", f"{t.dtype} is not executed; use bf16 or fp16")


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo (0 when unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def dp_mode(s: Scenario) -> str:
    """none | ddp | fsdp-replicate (zero 0 with pipelining or TP) | fsdp."""
    if s.dp == 1 and s.training.zero != 3:
        return "none"
    if s.training.zero == 3:
        return "fsdp"
    return "ddp" if s.layout.pp == 1 and s.layout.tp == 1 else "fsdp-replicate"
