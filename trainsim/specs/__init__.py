"""The user's vocabulary: models, clusters, layouts, training settings and whole scenarios."""

from .errors import SpecError
from .hardware import BackgroundLoadSpec, ClusterSpec, GPUSpec, ScaleOutSpec, ScaleUpSpec
from .layout import Layout
from .loaders import (
    build_scenario,
    load_cluster,
    load_gpu,
    load_layout,
    load_model,
    load_scenario_file,
    load_training,
    model_from_hf,
)
from .model import ModelSpec
from .presets import preset, preset_names
from .scenario import Scenario, resolve
from .training import TrainingSpec

__all__ = [
    "BackgroundLoadSpec",
    "ClusterSpec",
    "GPUSpec",
    "Layout",
    "ModelSpec",
    "ScaleOutSpec",
    "ScaleUpSpec",
    "Scenario",
    "SpecError",
    "TrainingSpec",
    "build_scenario",
    "load_cluster",
    "load_gpu",
    "load_layout",
    "load_model",
    "load_scenario_file",
    "load_training",
    "model_from_hf",
    "preset",
    "preset_names",
    "resolve",
]
