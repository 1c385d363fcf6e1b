"""Features a framework preset's code does not have: refused, not costed as if that code had them.

``megatron-2021``, ``megatron-2022``, ``deepspeed-2021`` and ``deepspeed-2023`` stand for a framework's code of one
time (the behaviours in specs/framework_behaviour.py are read from it); ``megatron-deepspeed`` stands for the fork
microsoft/Megatron-DeepSpeed (f4157bea, 2024-12-24). A setting that code cannot run is a contradiction in the
input, so it is refused with the setting named, what introduced it (or that the fork lacks it) and the preset
to use instead -- never priced with the old behaviours plus a feature they never ran with.

The historic presets' code and its date (what a feature must predate):

* ``megatron-2021`` -- Megatron-LM of SC21, the v2.x releases of 2021 (NVIDIA/Megatron-LM tags v2.0 2021-01-12
  .. v2.6 2021-08-27; dated by v2.6).
* ``megatron-2022`` -- Megatron-LM of mid-2022: Korthikanti et al.'s sequence parallelism and selective
  recompute (branch ``sequence_parallel``, NVIDIA/Megatron-LM@9aad9203aa, 2022-05-20) and the distributed
  optimizer merged three weeks later (d07d29df14, 2022-06-08), whose 2022 form the memory model prices for this
  preset (cost_models/memory: its parameter all-gather lands in views of the grad buffer); dated by the latter.
* ``deepspeed-2021`` -- DeepSpeed's ZeRO-3 of mid-2021 as specs/framework_behaviour.py reads it,
  microsoft/DeepSpeed@70adb32 (2021-07-12).
* ``deepspeed-2023`` -- DeepSpeed v0.10.0 .. v0.12.3 (tag v0.12.3, microsoft/DeepSpeed@6ea44d02c, 2023-11-11), the
  releases between ZeRO++ (#3784, first in v0.10.0) and the ZeRO-1/2 communication rewrite of v0.12.4 (PR #4695,
  2afa1c7f2, 2023-11-21; PR #4705, fd0a52c1a, 2023-11-29); dated by v0.12.3.

What introduced each feature (dates from the repositories' first-parent history, ``git log -S``):

* ``dtype: fp8`` -- FP8 training runs on Transformer Engine's FP8 GEMMs and Hopper's FP8 tensor cores (H100,
  2022); Transformer Engine's release notes begin with 0.3.0 (Dec 2022), and NeMo's GPT FP8 pre-training knobs
  came in 2023 (NVIDIA/NeMo-Framework-Launcher PR #80, 2023-06-09).
* ``schedule: zb`` -- Zero Bubble pipeline parallelism, Qi et al., arXiv:2401.10241 (2023; ICLR 2024).
* ``schedule: dualpipev`` -- DualPipe, DeepSeek-V3 technical report, arXiv:2412.19437 (Dec 2024).
* ``tp_comm_overlap`` -- Transformer Engine's userbuffers overlap of the TP collectives with their GEMMs
  (NVIDIA/NeMo PR #6362, merged 2023-04-18).
* ``ep_comm_overlap`` -- Megatron-Core's MoE all-to-all overlap with computation in 1F1B (Megatron-Bridge
  CHANGELOG 0.1.0rc3, 2025).
* ``sequence_parallel``, ``recompute: selective`` -- Korthikanti et al., arXiv:2205.05198; merged 2022-05-20.
* ``distributed_optimizer`` -- Megatron-LM's ``--use-distributed-optimizer``: branch
  ``lmcafee/distrib-opt-nodupe`` merged into main on 2022-06-08 (NVIDIA/Megatron-LM@d07d29df14; its work began
  2022-02-10, 329fe5820f "working on Float16DistributedOptimizer"), after every 2021 release. DeepSpeed has no
  such optimizer (it shards optimizer states with ZeRO-1).
* context parallelism (``layout.cp > 1``) -- Megatron: ``--context-parallel-size``, branch
  ``xren/pretrain_gpt_with_cp`` merged 2023-10-30 (NVIDIA/Megatron-LM@4a6255a763). DeepSpeed: Ulysses'
  all-to-all sequence parallelism, DeepSpeed 0.10.2 (Megatron-DeepSpeed's "DeepSpeed Ulysses Release (#230)",
  a2a476e1, 2023-08-23; arXiv:2309.14509).
* MoE models and expert parallelism (``layout.ep > 1``) -- Megatron: Megatron-Core's MoE layer with top-k
  routing, a token dispatcher and ``expert_model_parallel_size`` (branch ``moe_core``, merged 2023-10-10,
  NVIDIA/Megatron-LM@370f3c1f4b). Megatron-LM's earlier ``SwitchMLP`` (branch ``switch``, 2022-02-24,
  53f3efc45d) routes each token to one expert and runs every expert on every rank one after another, with a
  ``nonzero()`` per expert -- not the MoE layer trainsim costs, so MoE models are refused under megatron-2022
  too. DeepSpeed: ``deepspeed.moe`` ("DeepSpeed MoE (#1310)", microsoft/DeepSpeed@f28432441, 2021-08-16,
  v0.5.0), after the deepspeed-2021 code.

``megatron-deepspeed`` (microsoft/Megatron-DeepSpeed@f4157bea, megatron/arguments.py) runs ZeRO 1-3 through
DeepSpeed, Megatron's sequence parallelism (``--sequence-parallel``), Megatron's distributed optimizer
(megatron/optimizer/distrib_optimizer.py), interleaving (``--num-layers-per-virtual-pipeline-stage``), ZB-H1
(``--enable-zbh1-pipeline``, 527957e3, 2024-06-27), FP8 through Transformer Engine (``--fp8-hybrid``), selective
recompute, MoE with ``--moe-expert-parallel-size``, and context parallelism only as Ulysses
(``--ds-sequence-parallel-size``, DeepSpeed's ``DistributedAttention``). It has no Transformer Engine
userbuffers overlap (no ``--tp-comm-overlap``), no EP overlap, no DualPipe, no ring or all-gather context
parallelism (no ``--context-parallel-size``), and its arguments.py asserts that ZB-H1 runs without sequence
parallelism ("Sequence Parallel not tested").

``deepspeed`` (current DeepSpeed) splits the sequence only with Ulysses' all-to-all (``DistributedAttention``,
deepspeed/sequence/layer.py): ``cp > 1`` needs ``cp_comm: a2a`` there, and ring (``p2p``) or all-gather context
parallelism is refused. ``deepspeed-2021`` predates Ulysses, so any ``cp > 1`` is refused by its date.
"""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING

from .framework_behaviour import BEHAVIOURS

if TYPE_CHECKING:
    from .training import TrainingSpec

# preset -> the code it stands for, and that code's date.
HISTORIC_FRAMEWORKS: dict[str, tuple[str, date]] = {
    "megatron-2021": ("Megatron-LM of SC21", date(2021, 8, 27)),
    "megatron-2022": ("Megatron-LM of Korthikanti et al.", date(2022, 6, 8)),
    "deepspeed-2021": ("DeepSpeed", date(2021, 7, 12)),
    "deepspeed-2023": ("DeepSpeed v0.12.3", date(2023, 11, 11)),
}

_SP = ("sequence parallelism is Korthikanti et al., arXiv:2205.05198 (2022)", date(2022, 5, 20))
_DISTOPT = (("Megatron-LM's distributed optimizer (--use-distributed-optimizer) was merged on 2022-06-08 "
             "(NVIDIA/Megatron-LM@d07d29df14)"), date(2022, 6, 8))
# (field, value that needs the feature) -> (what introduced it, its date); a dict where the Megatron and the
# DeepSpeed lines got it at different times.
FEATURE_ORIGINS: dict[tuple[str, object], tuple[str, date] | dict[str, tuple[str, date]]] = {
    ("dtype", "fp8"): ("FP8 training came with Transformer Engine (release notes from 0.3.0, Dec 2022) on Hopper",
                       date(2022, 12, 1)),
    ("schedule", "zb"): ("zero-bubble pipelining is Qi et al., arXiv:2401.10241 (2023)", date(2023, 1, 1)),
    ("schedule", "dualpipev"): ("DualPipe is the DeepSeek-V3 report's schedule, arXiv:2412.19437 (2024)",
                                date(2024, 12, 1)),
    ("tp_comm_overlap", True): ("Transformer Engine's userbuffers TP overlap came in 2023 (NVIDIA/NeMo PR #6362)",
                                date(2023, 4, 18)),
    ("ep_comm_overlap", True): ("Megatron-Core's MoE all-to-all overlap came with Megatron-Bridge 0.1.0 (2025)",
                                date(2025, 1, 1)),
    ("sequence_parallel", True): _SP,
    ("recompute", "selective"): (("selective activation recomputation is Korthikanti et al., "
                                  "arXiv:2205.05198 (2022)"), date(2022, 5, 20)),
    ("distributed_optimizer", True): {
        "megatron": _DISTOPT,
        "deepspeed": (_DISTOPT[0] + "; DeepSpeed shards optimizer states with ZeRO-1 instead", _DISTOPT[1])},
    ("cp", "> 1"): {
        "megatron": (("context parallelism (--context-parallel-size) was merged into Megatron-LM on "
                      "2023-10-30 (NVIDIA/Megatron-LM@4a6255a763)"), date(2023, 10, 30)),
        "deepspeed": (("DeepSpeed's sequence parallelism (Ulysses, arXiv:2309.14509) needs DeepSpeed 0.10.2 "
                       "(Aug 2023)"), date(2023, 8, 23))},
    ("ep", "> 1"): {
        "megatron": (("expert parallelism came with Megatron-Core's MoE (NVIDIA/Megatron-LM@370f3c1f4b, "
                      "2023-10-10)"), date(2023, 10, 10)),
        "deepspeed": (("DeepSpeed's MoE layer and expert parallelism came in v0.5.0 "
                       "(microsoft/DeepSpeed@f28432441, 2021-08-16)"), date(2021, 8, 16))},
    ("num_experts", "> 1"): {
        "megatron": (("the top-k MoE layer trainsim costs is Megatron-Core's (NVIDIA/Megatron-LM@370f3c1f4b, "
                      "2023-10-10); Megatron-LM's SwitchMLP of 2022 (top-1, every expert on every rank run "
                      "one after another) is not modelled"), date(2023, 10, 10)),
        "deepspeed": ("DeepSpeed's MoE layer came in v0.5.0 (microsoft/DeepSpeed@f28432441, 2021-08-16)",
                      date(2021, 8, 16))},
}

# What to use instead, per preset: the same framework's current code.
SUCCESSOR = {"megatron-2021": "megatron", "megatron-2022": "megatron", "deepspeed-2021": "deepspeed",
             "deepspeed-2023": "deepspeed", "megatron-deepspeed": "megatron", "deepspeed": "megatron"}

FORK_CODE = {"megatron-deepspeed": "microsoft/Megatron-DeepSpeed@f4157bea",
             "deepspeed": "microsoft/DeepSpeed, deepspeed/sequence/layer.py"}
# (field, value) a fork's code does not run -> what it lacks (its megatron/arguments.py has no such flag).
FORK_LACKS: dict[str, dict[tuple[str, object], str]] = {
    "megatron-deepspeed": {
        ("tp_comm_overlap", True): "no Transformer Engine userbuffers overlap (no --tp-comm-overlap)",
        ("ep_comm_overlap", True): "no expert-parallel all-to-all overlap",
        ("schedule", "dualpipev"): "no DualPipe schedule",
        ("cp_comm", "p2p"): "no ring-attention context parallelism (no --context-parallel-size; cp is Ulysses' "
                            "all-to-all, --ds-sequence-parallel-size)",
        ("cp_comm", "allgather"): "no all-gather context parallelism (no --context-parallel-size; cp is Ulysses' "
                                  "all-to-all, --ds-sequence-parallel-size)",
    },
    "deepspeed": {
        ("cp_comm", "p2p"): "no ring-attention context parallelism (its sequence parallelism is Ulysses' "
                            "all-to-all, DistributedAttention)",
        ("cp_comm", "allgather"): "no all-gather context parallelism (its sequence parallelism is Ulysses' "
                                  "all-to-all, DistributedAttention)",
    },
}
# pytorch-fsdp (Composer + llm-foundry on torch FSDP1) has no context parallelism: Composer's ParallelismConfig
# holds fsdp and tp only (mosaicml/composer composer/utils/parallelism.py, read_file id 305597169), and torch's
# context_parallel shards DTensor buffers on a device mesh, which torchtitan composes with FSDP2 (framework torch).
FORK_CODE["pytorch-fsdp"] = "Composer + llm-foundry on torch FSDP1, composer/utils/parallelism.py"
FORK_LACKS["pytorch-fsdp"] = {("cp", "> 1"): "no context parallelism (Composer's ParallelismConfig holds fsdp and tp "
                                             "only)"}
SUCCESSOR["pytorch-fsdp"] = "torch"
# DeepSpeed v0.12.3 splits the sequence the same one way (deepspeed/sequence/layer.py, since v0.10.2).
FORK_CODE["deepspeed-2023"] = "DeepSpeed v0.12.3, deepspeed/sequence/layer.py"
FORK_LACKS["deepspeed-2023"] = FORK_LACKS["deepspeed"]


def _lineage(framework: str) -> str:
    return BEHAVIOURS[framework].era_lineage


def _shown(field: str, value) -> str:
    return f"{field}=true" if value is True else f"{field}={value}" if value != "> 1" else f"{field} > 1"


def _instead(field: str, value) -> str:
    if field in ("cp", "ep"):
        return f"{field} = 1"
    if field == "num_experts":
        return "a dense model"
    return "turn it off" if isinstance(value, bool) else f"another {field}"


def _has_it(framework: str, field: str, value) -> str:
    """The first successor of ``framework`` (SUCCESSOR, followed on) whose code runs ``field=value``."""
    fw = SUCCESSOR[framework]
    while (field, value) in FORK_LACKS.get(fw, {}):
        fw = SUCCESSOR[fw]
    return fw


def feature_refusal(framework: str, field: str, value) -> str | None:
    """Why ``field=value`` needs a feature that ``framework``'s code does not have, or None. ``value`` "> 1"
    stands for any degree above one of ``cp``, ``ep`` or ``num_experts``."""
    lacks = FORK_LACKS.get(framework, {}).get((field, value))
    if lacks:
        return (f"{_shown(field, value)}: framework {framework} ({FORK_CODE[framework]}) has {lacks}: use "
                f"framework {_has_it(framework, field, value)} or {_instead(field, value)}")
    era = HISTORIC_FRAMEWORKS.get(framework)
    origin = FEATURE_ORIGINS.get((field, value))
    if isinstance(origin, dict):
        origin = origin[_lineage(framework)]
    if era is None or origin is None or era[1] >= origin[1]:
        return None
    return (f"{_shown(field, value)}: {origin[0]}; framework {framework} ({era[0]}, {era[1].year}) predates "
            f"it: use framework {SUCCESSOR[framework]} or {_instead(field, value)}")


def era_refusal(training: TrainingSpec) -> str | None:
    """The first setting of ``training`` its framework preset's code does not have (feature_refusal), or None."""
    if training.framework not in HISTORIC_FRAMEWORKS and training.framework not in FORK_LACKS:
        return None
    for field, value in (*FEATURE_ORIGINS, *FORK_LACKS.get(training.framework, {})):
        if field in ("cp", "ep", "num_experts", "cp_comm"):
            continue  # the layout's and the model's: layout_refusal
        if getattr(training, field) == value:
            why = feature_refusal(training.framework, field, value)
            if why:
                return why
    return schedule_refusal(training.framework, training.schedule, training.sequence_parallel)


def schedule_refusal(framework: str, schedule: str, sequence_parallel: bool) -> str | None:
    """Why the framework's code cannot run ``schedule`` with this sequence parallelism, or None: Megatron-DeepSpeed's
    megatron/arguments.py asserts ``args.sequence_parallel == False`` for ZB-H1 ("Sequence Parallel not tested")."""
    if framework == "megatron-deepspeed" and schedule == "zb" and sequence_parallel:
        return ("schedule=zb: Megatron-DeepSpeed's ZB-H1 (--enable-zbh1-pipeline) asserts sequence "
                "parallelism off (megatron/arguments.py: \"Sequence Parallel not tested\"): turn "
                "sequence_parallel off or use framework megatron")
    return None


def layout_refusal(framework: str, *, cp: int, ep: int, moe: bool, cp_comm: str) -> tuple[str, str] | None:
    """(field, why) for the first degree of parallelism or model kind the framework's code cannot run, or None:
    context and expert parallelism and MoE models (checked with the layout, which TrainingSpec does not see)."""
    checks = (("layout.cp", "cp", cp > 1), ("layout.cp_comm", "cp_comm", cp > 1),
              ("layout.ep", "ep", ep > 1), ("model.num_experts", "num_experts", moe))
    for where, field, applies in checks:
        if not applies:
            continue
        value = cp_comm if field == "cp_comm" else "> 1"
        why = feature_refusal(framework, field, value)
        if why:
            return ("training.cp_comm" if field == "cp_comm" else where), why
    return None
