"""Layout: how a job's ranks are split (tensor, pipeline, data, context and expert parallelism)."""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

from .spec_config import SPEC_CONFIG

DEFAULT_PLACEMENT = ("tp", "cp", "ep", "dp", "pp")


class Layout(BaseModel):
    """Parallel degrees. ``dp=None`` means derive it from the GPU count.

    gpus = tp · cp · pp · dp; expert parallelism is carved out of the other ranks (as in Megatron-Core's MoE
    parallel folding): the experts are split over ``etp`` ranks (default tp) and ``ep`` must divide
    ``dp·cp·tp/etp``; it does not multiply the GPU count.
    """

    model_config = SPEC_CONFIG

    tp: int = Field(default=1, gt=0, le=1_000_000)
    pp: int = Field(default=1, gt=0, le=1_000_000)
    dp: int | None = Field(default=None, gt=0, le=10_000_000)
    cp: int = Field(default=1, gt=0, le=1_000_000)
    ep: int = Field(default=1, gt=0, le=1_000_000)
    vpp: int = Field(default=1, gt=0, le=10_000, description="model chunks per pipeline rank (interleaving)")
    etp: int | None = Field(default=None, gt=0, le=1_000_000, description="expert tensor parallelism (Megatron-Core "
                            "--expert-tensor-parallel-size): the experts' MLPs split over etp ranks; None = tp. With "
                            "etp < tp the expert-parallel group also spans tp/etp of the TP ranks (MoE parallel folding)")
    dp_shard: int | None = Field(
        default=None, gt=0, le=10_000_000, description="ZeRO-3 shard-group size S (zero=3): model states are "
        "sharded over S data-parallel ranks (the innermost, fastest ones) and replicated over dp/S groups whose "
        "gradient shards are all-reduced -- HSDP under FSDP frameworks (torch fully_shard on a 2-D (replicate, "
        "shard) mesh, every micro-batch), DeepSpeed-MiCS under deepspeed / deepspeed-2023 (mics_shard_size, "
        "tp = pp = cp = 1, the replica all-reduce once per step; given, even as dp, it selects MiCS's in-place "
        "gathers). None = dp (full sharding); must divide dp")
    placement: tuple[str, ...] = Field(default=DEFAULT_PLACEMENT, description="innermost first")
    stage_layers: tuple[int, ...] | None = Field(
        default=None, description="transformer layers of each virtual pipeline stage, pp*vpp entries in model "
        "order (virtual stage = chunk*pp + stage), summing to num_layers; the embedding stays on the first, the "
        "loss on the last (Megatron-Core --pipeline-model-parallel-layout). None: even, or Megatron's split "
        "counting embedding and loss as layers")

    @model_validator(mode="after")
    def _check(self) -> Layout:
        if sorted(self.placement) != sorted(DEFAULT_PLACEMENT):
            raise ValueError(f"placement must order exactly {', '.join(DEFAULT_PLACEMENT)}")
        if self.stage_layers is not None:
            if len(self.stage_layers) != self.pp * self.vpp:
                raise ValueError(f"stage_layers has {len(self.stage_layers)} entries, pp*vpp = {self.pp * self.vpp}")
            if any(n < 0 for n in self.stage_layers):
                raise ValueError("stage_layers entries must be >= 0")
        return self

    @property
    def model_parallel(self) -> int:
        """GPUs of one data-parallel replica: tp · cp · pp."""
        return self.tp * self.cp * self.pp
