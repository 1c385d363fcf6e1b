"""Features the historic framework presets did not have: refused, not costed as if that code had them.

``megatron-2021``, ``megatron-2022`` and ``deepspeed-2021`` stand for a framework's code of one time (the
behaviours in cost_models/framework.py are read from it). A setting that the code of that time could not run is
a contradiction in the input, so it is refused with the setting named, the release that introduced it and the
preset to use instead -- never priced with the old behaviours plus a feature they never ran with.

What introduced each feature:

* ``dtype: fp8`` -- FP8 training runs on Transformer Engine's FP8 GEMMs and Hopper's FP8 tensor cores (H100,
  2022); Transformer Engine's release notes begin with 0.3.0 (Dec 2022), and NeMo's GPT FP8 pre-training knobs
  came in 2023 (NVIDIA/NeMo-Framework-Launcher PR #80, 2023-06-09: "TE ... enables using 8-bit floating point
  (FP8) precision ... on NVIDIA Hopper GPUs").
* ``schedule: zb`` -- Zero Bubble pipeline parallelism, Qi et al., arXiv:2401.10241 (2023; ICLR 2024).
* ``schedule: dualpipev`` -- DualPipe, DeepSeek-V3 technical report, arXiv:2412.19437 (Dec 2024).
* ``tp_comm_overlap`` -- Transformer Engine's userbuffers overlap of the TP collectives with their GEMMs
  (NVIDIA/NeMo PR #6362 "Tensor-parallel communication overlap with userbuffer backend", merged 2023-04-18).
* ``ep_comm_overlap`` -- Megatron-Core's MoE all-to-all overlap with computation in 1F1B
  (NVIDIA Megatron-Bridge CHANGELOG 0.1.0rc3: "EP A2A communication overlap with computation in both 1F1B
  pipelining and non-pipelined training", 2025).
* ``sequence_parallel`` under megatron-2021 / deepspeed-2021 -- sequence parallelism is Korthikanti et al.,
  arXiv:2205.05198 (May 2022), the code ``megatron-2022`` stands for; SC21's runs predate it (the SC21 dataset
  says so: "no (predates SP)").
* ``recompute: selective`` under megatron-2021 / deepspeed-2021 -- selective activation recomputation is the
  same paper's (arXiv:2205.05198, 2022).

Settings outside ``TrainingSpec`` (context and expert parallelism in the layout) and the distributed optimizer
are not checked against the era.
"""

from __future__ import annotations

# preset -> the code it stands for, and the year that code is of.
HISTORIC_FRAMEWORKS: dict[str, tuple[str, int]] = {
    "megatron-2021": ("Megatron-LM of SC21", 2021),
    "megatron-2022": ("Megatron-LM of Korthikanti et al.", 2022),
    "deepspeed-2021": ("DeepSpeed", 2021),
}

# (field, value that needs the feature) -> (what introduced it, the first year a framework preset may have it).
FEATURE_ORIGINS: dict[tuple[str, object], tuple[str, int]] = {
    ("dtype", "fp8"): ("FP8 training came with Transformer Engine (release notes from 0.3.0, Dec 2022) on Hopper",
                       2023),
    ("schedule", "zb"): ("zero-bubble pipelining is Qi et al., arXiv:2401.10241 (2023)", 2023),
    ("schedule", "dualpipev"): ("DualPipe is the DeepSeek-V3 report's schedule, arXiv:2412.19437 (2024)", 2024),
    ("tp_comm_overlap", True): ("Transformer Engine's userbuffers TP overlap came in 2023 (NVIDIA/NeMo PR #6362)",
                                2023),
    ("ep_comm_overlap", True): ("Megatron-Core's MoE all-to-all overlap came with Megatron-Bridge 0.1.0 (2025)",
                                2025),
    ("sequence_parallel", True): ("sequence parallelism is Korthikanti et al., arXiv:2205.05198 (2022)", 2022),
    ("recompute", "selective"): ("selective activation recomputation is Korthikanti et al., arXiv:2205.05198 "
                                 "(2022)", 2022),
}

# What to use instead, per preset: the same framework's current code.
SUCCESSOR = {"megatron-2021": "megatron", "megatron-2022": "megatron", "deepspeed-2021": "deepspeed"}


def feature_refusal(framework: str, field: str, value) -> str | None:
    """Why ``field=value`` needs a feature that ``framework``'s historic code did not have, or None."""
    era = HISTORIC_FRAMEWORKS.get(framework)
    origin = FEATURE_ORIGINS.get((field, value))
    if era is None or origin is None or era[1] >= origin[1]:
        return None
    instead = "turn it off" if isinstance(value, bool) else f"another {field}"
    shown = "true" if value is True else value
    return (f"{field}={shown}: {origin[0]}; framework {framework} ({era[0]}, {era[1]}) predates it: use framework "
            f"{SUCCESSOR[framework]} or {instead}")


def era_refusal(training) -> str | None:
    """The first setting of ``training`` its historic framework preset's code did not have (feature_refusal),
    or None."""
    if training.framework not in HISTORIC_FRAMEWORKS:
        return None
    for field, value in FEATURE_ORIGINS:
        if getattr(training, field) == value:
            why = feature_refusal(training.framework, field, value)
            if why:
                return why
    return None
