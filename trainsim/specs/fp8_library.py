"""Which library runs a ``dtype: fp8`` scenario's float8 linears, and the settings only torchao's float8 has.

* ``transformer_engine``: Transformer Engine's fp8 GEMMs (Megatron-Core, NeMo, llm-foundry): cost_models/flops.py
  and fp8_weights.py.
* ``torchao``: torchao's ``Float8Linear`` with dynamic scaling, the float8 training torchtitan runs
  (``--model.converters float8``; torchtitan has no Transformer Engine): cost_models/torchao_float8.py. Its recipes
  (TrainingSpec.fp8_recipe, torchtitan ``--float8.recipe_name``, torchao ``Float8LinearConfig.from_recipe_name``):
  tensorwise, rowwise, rowwise_with_gw_hp; Transformer Engine's are tensorwise and mxfp8 (torchao's MX formats are
  another converter, torchtitan's ``mxfloat8``, not costed). torchtitan refuses float8 all-gather with a recipe name
  (``assert not float8_config.enable_fsdp_float8_all_gather``, components/quantization/float8.py) and torchao with
  non-tensorwise weight scaling (config.py ``Float8LinearConfig.__post_init__``).
  ``float8_all_gather`` is its FSDP2 float8 all-gather (torchtitan ``float8.enable_fsdp_float8_all_gather``,
  applied only where the data-parallel shard dimension is on: torchtitan e7c0cae components/quantization/float8.py
  ``enable_fsdp_float8_all_gather = parallel_dims.dp_shard_enabled and ...``), ``float8_precompute_scale`` the
  per-step scale precompute that torchtitan runs only with it (``precompute_scale = enable_fsdp_float8_all_gather
  and float8_config.precompute_float8_dynamic_scale_for_fsdp``).

``auto`` resolves to torchao for framework ``torch`` (torchtitan) and to Transformer Engine elsewhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from .training import TrainingSpec

Fp8Library = Literal["auto", "transformer_engine", "torchao"]
TORCHAO_ONLY = ("rowwise", "rowwise_with_gw_hp")  # TrainingSpec.fp8_recipe values only torchao has


def resolved(training: TrainingSpec) -> str:
    """The library that runs the scenario's fp8 linears ("" unless dtype fp8)."""
    if training.dtype != "fp8":
        return ""
    if training.fp8_library != "auto":
        return training.fp8_library
    return "torchao" if training.framework == "torch" else "transformer_engine"


def refusal(training: TrainingSpec) -> tuple[str, str] | None:
    """(field, reason) where the torchao float8 settings cannot apply, else None."""
    t = training
    if t.fp8_library != "auto" and t.dtype != "fp8":
        return "fp8_library", f"applies to dtype fp8 only (got dtype {t.dtype})"
    if t.fp8_library == "torchao" and t.framework != "torch":
        return "fp8_library", (f"torchao float8 is costed as torchtitan runs it (framework torch); framework "
                               f"{t.framework} does not run it")
    lib = resolved(t)
    if lib == "torchao" and t.fp8_recipe == "mxfp8":
        return "fp8_recipe", ("mxfp8 is Transformer Engine's recipe here; torchao's Float8Linear recipes are "
                              "tensorwise, rowwise and rowwise_with_gw_hp")
    if lib == "transformer_engine" and t.fp8_recipe in TORCHAO_ONLY:
        return "fp8_recipe", (f"{t.fp8_recipe} is a torchao Float8Linear recipe (fp8_library torchao, framework "
                              f"torch); Transformer Engine's are tensorwise and mxfp8")
    if t.float8_all_gather:
        if t.fp8_recipe in TORCHAO_ONLY:
            return "float8_all_gather", (f"torchao's float8 all-gather needs tensorwise weight scaling; torchtitan "
                                         f"refuses it with recipe {t.fp8_recipe}")
        if lib != "torchao":
            return "float8_all_gather", (f"is torchao's FSDP2 float8 all-gather: needs dtype fp8 on framework torch "
                                         f"(got dtype {t.dtype}, framework {t.framework}, fp8_library {t.fp8_library})")
        if t.effective_zero < 3:
            return "float8_all_gather", (f"needs FSDP's sharded parameters (zero 3); got zero {t.effective_zero}: "
                                         f"torchtitan enables it only with data-parallel sharding")
    if t.float8_precompute_scale and not t.float8_all_gather:
        return "float8_precompute_scale", ("torchtitan precomputes the weights' float8 scales only with "
                                           "float8_all_gather true")
    return None
