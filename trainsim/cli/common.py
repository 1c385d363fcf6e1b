"""Flags shared by predict, plan, report and execute, and turning them into a Scenario."""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Mapping
from typing import get_args

from trainsim.specs import Scenario, SpecError, build_scenario, load_scenario_file, preset
from trainsim.specs.framework_behaviour import FRAMEWORKS
from trainsim.specs.published_scale import scale_warnings
from trainsim.specs.training import Schedule, zero_conflict


def ascii_int(text: str) -> int:
    """An integer written in ASCII digits (an optional sign, spaces around): Python's int() would also read ``1_6``
    as 16 and full-width digits, neither a count a user means. ValueError otherwise."""
    text = str(text).strip()
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(f"not an integer: {text!r}")
    return int(text)


class Bounded:
    """argparse type: a finite number in a documented range; the range is appended to the flag's help
    (cli.document_ranges) and enforced here, so every numeric flag says and checks what it accepts."""

    def __init__(self, kind: type, lo: float, hi: float, lo_open: bool = False):
        self.kind, self.lo, self.hi, self.lo_open = kind, lo, hi, lo_open
        self.__name__ = kind.__name__

    def describe(self) -> str:
        if self.kind is int:
            return f"{self.lo:,}..{self.hi:,}"
        lo = f"> {self.lo:g}" if self.lo_open else f">= {self.lo:g}"
        return f"{lo}, <= {self.hi:g}" if math.isfinite(self.hi) else f"{lo}, finite"

    def __call__(self, text: str):
        try:
            value = ascii_int(text) if self.kind is int else self.kind(text)
        except (ValueError, OverflowError):
            what = "an integer" if self.kind is int else "a number"
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if self.kind is float and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        too_low = value <= self.lo if self.lo_open else value < self.lo
        if too_low or value > self.hi:
            raise argparse.ArgumentTypeError(f"must be in the range {self.describe()}, got {text}")
        return value


def int_range(lo: int, hi: int) -> Bounded:
    return Bounded(int, lo, hi)


def float_range(lo: float, hi: float, lo_open: bool = False) -> Bounded:
    return Bounded(float, lo, hi, lo_open)


# A positive count: 10^10 is past any count of GPUs, tokens per batch or layers anyone can mean.
positive_int = int_range(1, 10_000_000_000)
# A finite non-negative quantity (seconds, rates, prices, tolerances) where no tighter physical bound applies.
nonneg_float = float_range(0.0, math.inf)
# A checkpoint write or a restart: at most 10^7 s (116 days), longer than any training run the goodput model spans.
MAX_EVENT_S = 1e7
event_seconds = float_range(0.0, MAX_EVENT_S)


def int_list(text: str) -> tuple[int, ...]:
    """argparse type: comma-separated integers >= 0 (e.g. ``1,2,2,1``), in ASCII digits (ascii_int)."""
    try:
        values = tuple(ascii_int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated integers, got {text!r}") from None
    if any(v < 0 or v > 100_000 for v in values):
        raise argparse.ArgumentTypeError(f"entries must be in 0..100,000, got {text!r}")
    return values


def name_list(text: str) -> tuple[str, ...]:
    """argparse type: comma-separated names (e.g. ``mla_up_proj,mlp``)."""
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"must be comma-separated names, got {text!r}")
    return names


DIM_HELP = {
    "tp": "tensor-parallel degree (within a node's NVLink domain)",
    "pp": "pipeline-parallel stages",
    "dp": "data-parallel replicas (derived from --gpus when left out)",
    "cp": "context-parallel degree (the sequence split over ranks)",
    "ep": "expert-parallel degree (MoE models)",
    "vpp": "model chunks per pipeline rank (interleaved schedule; implies --schedule interleaved)",
}


BACKGROUND_TIERS = ("nic", "spine")


def parse_background_load(text: str) -> dict[str, float]:
    """argparse type for ``--background-load``: ``FRACTION`` (every scale-out tier) or ``TIER:FRACTION,...``
    (tiers nic, spine), each fraction in [0, 1): the share of those links other jobs' traffic takes."""
    items = [x.strip() for x in str(text).split(",") if x.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"expected FRACTION or TIER:FRACTION,... (tiers nic, spine), got {text!r}")
    if len(items) == 1 and ":" not in items[0]:
        pairs = [(tier, items[0]) for tier in BACKGROUND_TIERS]
    else:
        pairs = []
        for item in items:
            tier, sep, value = item.partition(":")
            tier = tier.strip().lower()
            if not sep or tier not in BACKGROUND_TIERS:
                raise argparse.ArgumentTypeError(
                    f"cluster.scale_out.background_load: unknown tier {tier or item!r} (tiers: nic, spine; "
                    f"write TIER:FRACTION,... or one FRACTION for both)")
            if any(t == tier for t, _ in pairs):  # the last would silently win
                raise argparse.ArgumentTypeError(f"cluster.scale_out.background_load.{tier}: given twice in {text!r}")
            pairs.append((tier, value))
    out: dict[str, float] = {}
    for tier, value in pairs:
        field = f"cluster.scale_out.background_load.{tier}"
        try:
            f = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{field}: must be a number, got {value.strip()!r}") from None
        if not (math.isfinite(f) and 0.0 <= f < 1.0):
            raise argparse.ArgumentTypeError(f"{field}: must be a fraction >= 0 and < 1, got {value.strip()}")
        out[tier] = f
    return out


MAX_POOL_NODES = 1_000_000


def parse_pool(text: str) -> dict:
    """argparse type for ``--pool NAME:NODES``: NODES nodes of a cluster preset's node type (``dgx-h100:16``) or of
    a GPU preset on the cluster's node (``h200:16``); a cluster preset of that name wins."""
    name, sep, nodes = str(text).rpartition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"cluster.pools: expected NAME:NODES such as dgx-h100:16, got {text!r}")
    try:
        n = int(nodes)
    except ValueError:
        raise argparse.ArgumentTypeError(f"cluster.pools: NODES must be an integer, got {nodes!r}") from None
    if not 1 <= n <= MAX_POOL_NODES:
        raise argparse.ArgumentTypeError(f"cluster.pools: NODES must be in 1..{MAX_POOL_NODES:,}, got {n}")
    name = name.strip()
    return {"node" if preset("clusters", name) is not None else "gpu": name, "nodes": n}


def add_pool_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pool", type=parse_pool, action="append", metavar="NAME:NODES",
                   help="a pool of a mixed cluster, repeatable, in rank order: NODES (1..1,000,000) nodes of a "
                        "cluster preset's node type (dgx-a100:16) or a GPU preset on the cluster's node (h200:16)")
    p.add_argument("--placement", choices=("stages", "dp"),
                   help="with pools: pipeline stages on the pools in order (stages) or whole data-parallel "
                        "replicas per pool (dp)")


def add_background_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--background-load", type=parse_background_load, metavar="FRACTION|TIER:FRACTION,...",
                   help="other jobs' share of the shared scale-out fabric, per tier (nic, spine) or one fraction for "
                        "both, each >= 0 and < 1: this job gets 1 - fraction of those links (scale-up unaffected)")


def add_optimizer_arg(p: argparse.ArgumentParser) -> None:
    """``--optimizer``: the update rule (training.optimizer), for predict, report and plan."""
    p.add_argument("--optimizer", dest="train_optimizer", choices=("adam", "muon"),
                   help="update rule: adam (default) or muon (Megatron-Core's Muon: Newton-Schulz on the 2D hidden "
                        "matrices, Adam on the rest; with --distributed-optimizer its layer-wise dist_muon)")


def add_scenario_args(p: argparse.ArgumentParser, scenario_positional: bool = True, optimizer: bool = True) -> None:
    """The scenario flags of docs/design.md (`trainsim predict` and friends); ``optimizer=False`` leaves out
    ``--optimizer`` for a command whose own flag of that name picks what it runs (execute)."""
    if scenario_positional:
        p.add_argument("scenario", nargs="?", help="scenario YAML/JSON (flags override it)")
    p.add_argument("--model", help="preset name, YAML/JSON file, or Hugging Face config.json")
    p.add_argument("--cluster", help="preset name or YAML file")
    p.add_argument("--gpus", type=positive_int, help="GPUs in the job (tp x pp x dp x cp; the cluster's num_gpus)")
    for dim, meaning in DIM_HELP.items():
        p.add_argument(f"--{dim}", type=positive_int, help=meaning)
    p.add_argument("--etp", type=positive_int, help="expert tensor parallelism (default tp; 1 lets ep span TP ranks)")
    p.add_argument("--stage-layers", type=int_list, metavar="N,N,...",
                   help="transformer layers per virtual pipeline stage, pp*vpp of them in model order "
                        "(Megatron's pipeline layout; the embedding stays first, the loss last; each 0..100,000)")
    p.add_argument("--seq-len", type=positive_int, help="sequence length in tokens")
    p.add_argument("--global-batch", type=positive_int, help="sequences per optimizer step (not tokens)")
    p.add_argument("--micro-batch", type=positive_int, help="sequences per micro-batch per pipeline replica")
    p.add_argument("--recompute", choices=("none", "selective", "full"),
                   help="activation recomputation: selective = attention core (Korthikanti), full = whole blocks")
    p.add_argument("--recompute-modules", type=name_list, metavar="M,M,...",
                   help="modules recomputed under selective recompute (Megatron --recompute-modules: core_attn, "
                        "mla_up_proj, layernorm, mlp, moe_act, moe, shared_experts); implies --recompute selective")
    p.add_argument("--sequence-parallel", action=argparse.BooleanOptionalAction, default=None,
                   help="Megatron sequence parallelism over the TP group (norms and dropout sharded); "
                        "--no-sequence-parallel turns off a scenario file's")
    p.add_argument("--zero", type=int, choices=(0, 1, 2, 3),
                   help="ZeRO stage: 1 shards optimizer states, 2 also gradients, 3 also weights (FSDP)")
    p.add_argument("--distributed-optimizer", action="store_true", default=None,
                   help="Megatron's distributed optimizer (optimizer states sharded over DP, = ZeRO-1)")
    if optimizer:
        add_optimizer_arg(p)
    p.add_argument("--schedule", choices=get_args(Schedule), help="pipeline schedule")
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp8", "nvfp4", "fp32"),
                   help="compute precision of the GEMMs (nvfp4: Transformer Engine's NVFP4 recipe, Blackwell only)")
    p.add_argument("--framework", choices=FRAMEWORKS,
                   help="software stack whose documented behaviours apply (default megatron)")
    add_precision_args(p)
    add_lora_args(p)
    add_background_arg(p)
    add_pool_args(p)
    p.add_argument("--offload-optimizer", action="store_true", default=None,
                   help="optimizer states in host memory (ZeRO-Offload); PCIe traffic is timed")
    p.add_argument("--offload-params", action="store_true", default=None,
                   help="parameters in host memory (needs --zero 3)")
    p.add_argument("--offload-activation-layers", type=int_range(0, 100_000), metavar="N",
                   help="activation CPU offload of N layers (Megatron --cpu-offloading-num-layers; pp 1, no recompute)")
    p.add_argument("--ep-comm-overlap", action="store_true", default=None,
                   help="MoE all-to-alls overlapped with another micro-batch's compute (Megatron-Core "
                        "--overlap-moe-expert-parallel-comm; pp 1 or vpp > 1)")
    p.add_argument("--tp-comm-overlap", action="store_true", default=None,
                   help="Transformer Engine userbuffers: sequence-parallel collectives overlap their GEMMs")
    add_data_parallel_args(p)
    p.add_argument("--moe-imbalance", type=float_range(1.0, 1_000_000.0), metavar="FACTOR",
                   help="MoE routing: most loaded EP rank's tokens over the mean (1 = even; at most ep)")
    p.add_argument("--moe-load-cv", type=float_range(0.0, 1.0), metavar="CV",
                   help="dropless MoE routing: coefficient of variation of tokens per EP rank (0..1; default 0)")
    p.add_argument("--moe-capacity-factor", type=float_range(0.0, 1_000.0, lo_open=True), metavar="C",
                   help="token-dropping MoE routing: expert capacity factor, caps the imbalance at C")
    p.add_argument("--calibration", help="calibration profile JSON (from `trainsim calibrate`)")


def add_data_parallel_args(p: argparse.ArgumentParser, layout: bool = True) -> None:
    """HSDP / MiCS shard group, MiCS's gather, gradient bucket size and reduction overlap (predict, report and plan
    share them)."""
    if layout:
        p.add_argument("--dp-shard", type=int_range(1, 10_000_000), metavar="S",
                       help="ZeRO-3 shard-group size (1..dp, dividing dp; zero 3): HSDP with framework pytorch-fsdp/"
                            "torch, DeepSpeed-MiCS (mics_shard_size, tp = pp = cp = 1) with deepspeed/deepspeed-2023: "
                            "states sharded over S ranks, replicated over dp/S groups (default dp = full shard)")
    p.add_argument("--dp-bucket-mb", type=float_range(0.0, 1_000_000.0, lo_open=True), metavar="MIB",
                   help="DP gradient bucket in MiB per reduction call (> 0, <= 1e6; buckets hold whole tensors, so "
                        "at most one call per parameter tensor; default: the framework's, "
                        "Megatron max(40M, 1M x dp) params; torch DDP uses 25)")
    p.add_argument("--overlap-grad-reduce", action=argparse.BooleanOptionalAction, default=None,
                   help="DP gradient reduction overlapped with backward (default: the framework's)")
    p.add_argument("--distributed-optimizer-instances", type=int_range(1, 1_000_000), metavar="N",
                   help="Megatron-Core partial distributed optimizer (--num-distributed-optimizer-instances, 1..1e6, "
                        "dividing dp with dp/N >= 2): optimizer states sharded over dp/N ranks, replicated N times; "
                        "needs framework megatron and --distributed-optimizer (default 1)")
    p.add_argument("--mics-hierarchical-gather", action="store_true", default=None,
                   help="DeepSpeed-MiCS's hierarchical parameter all-gather (mics_hierarchical_params_gather): "
                        "inter-node, then intra-node; needs --dp-shard S of two or more whole nodes (default off)")


def add_lora_args(p: argparse.ArgumentParser) -> None:
    """LoRA fine-tuning on frozen base weights (specs/lora.py; predict, report, execute and plan share them)."""
    p.add_argument("--lora-rank", type=int_range(0, 65_536), metavar="R",
                   help="LoRA fine-tuning: adapter rank; base weights frozen, adapters trained (Megatron-Bridge "
                        "PEFT; framework megatron, zero 0/1, dense models; 0 = full training)")
    p.add_argument("--lora-alpha", type=float_range(0.0, 1_000_000.0, lo_open=True), metavar="ALPHA",
                   help="LoRA scale numerator (output x alpha/rank); recorded, costs nothing")
    p.add_argument("--lora-targets", dest="lora_target_modules", type=name_list, metavar="M,M,...",
                   help="linears with adapters: linear_qkv, linear_proj, linear_fc1, linear_fc2 (default all)")
    p.add_argument("--lora-fp8-base-weights", action="store_true", default=None,
                   help="frozen base weights held in fp8 only (Transformer Engine fp8 primary weights; dtype fp8)")


LORA_FLAGS = ("lora_rank", "lora_alpha", "lora_target_modules", "lora_fp8_base_weights")


def add_precision_args(p: argparse.ArgumentParser) -> None:
    """Model-state dtypes where a framework allows both (predict, report and plan share them)."""
    p.add_argument("--grad-dtype", choices=("fp32", "bf16", "fp16"),
                   help="gradient accumulation/reduction dtype (Megatron: fp32 by default with bf16; bf16 = "
                        "--grad-reduce-in-bf16)")
    p.add_argument("--pure-bf16", dest="master_weights", action="store_false", default=None,
                   help="no fp32 master weights: weights, grads and Adam states in the training dtype (torchtune)")


OVERRIDE_FLAGS = {
    "model": "model", "cluster": "cluster", "gpus": "gpus", "tp": "tp", "pp": "pp", "dp": "dp", "cp": "cp",
    "ep": "ep", "etp": "etp", "vpp": "vpp", "stage_layers": "stage_layers", "seq_len": "seq_len", "global_batch": "global_batch", "micro_batch": "micro_batch",
    "recompute": "recompute", "recompute_modules": "recompute_modules", "sequence_parallel": "sequence_parallel", "zero": "zero",
    "distributed_optimizer": "distributed_optimizer", "train_optimizer": "optimizer", "schedule": "schedule", "dtype": "dtype",
    "framework": "framework", "offload_optimizer": "offload_optimizer", "offload_params": "offload_params",
    "tp_comm_overlap": "tp_comm_overlap", "ep_comm_overlap": "ep_comm_overlap", "offload_activation_layers": "offload_activation_layers",
    "moe_imbalance": "moe_imbalance", "moe_load_cv": "moe_load_cv", "moe_capacity_factor": "moe_capacity_factor",
    "grad_dtype": "grad_dtype", "master_weights": "master_weights", "background_load": "background_load",
    "dp_shard": "dp_shard", "dp_bucket_mb": "dp_bucket_mb", "overlap_grad_reduce": "overlap_grad_reduce",
    "mics_hierarchical_gather": "mics_hierarchical_gather",
    "distributed_optimizer_instances": "distributed_optimizer_instances",
    "pool": "pools", "placement": "pool_placement", **{k: k for k in LORA_FLAGS},
}


def imply_schedule(overrides: dict, raw: Mapping) -> None:
    """`--vpp N` alone implies the interleaved schedule, as in Megatron -- unless the scenario file already
    names a schedule with model chunks (interleaved, dualpipev), which the flag then only resizes -- and
    `--recompute-modules` alone implies `--recompute selective`."""
    if overrides.get("recompute_modules") and overrides.get("recompute") is None:
        overrides["recompute"] = "selective"  # the module list is selective recompute's
    if overrides.get("vpp") and overrides["vpp"] > 1 and overrides.get("schedule") is None:
        training = raw.get("training")
        if not (isinstance(training, Mapping) and training.get("schedule") in ("interleaved", "dualpipev")):
            overrides["schedule"] = "interleaved"


def warn_beyond_published(num_gpus: int | None, global_batch: int | None, seq_len: int | None) -> None:
    """A ``warning:`` line on stderr for each size beyond any built system (specs.published_scale)."""
    for w in scale_warnings(num_gpus, global_batch, seq_len):
        print(f"warning: {w}", file=sys.stderr)


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    """Scenario file (if any) with every given flag laid over it; SpecError on anything invalid."""
    raw = load_scenario_file(args.scenario) if getattr(args, "scenario", None) else {}
    overrides = {key: getattr(args, attr, None) for attr, key in OVERRIDE_FLAGS.items()}
    imply_schedule(overrides, raw)
    check_zero(overrides.get("zero"), raw, overrides)
    return build_scenario(raw, overrides)


def check_zero(zero: int | None, raw: Mapping, overrides: Mapping) -> None:
    """Refuse a requested ZeRO stage that contradicts the distributed optimizer (training.zero_conflict)."""
    training = raw.get("training") if isinstance(raw.get("training"), Mapping) else {}
    if zero is None:
        zero = training.get("zero")
    merged = {**training, **{k: v for k, v in overrides.items() if v is not None}}
    why = zero_conflict(zero, merged)
    if why:
        raise SpecError("training.zero", why)
