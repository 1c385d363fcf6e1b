"""Device bytes of Transformer Engine's quantized copies of the blocks' linear weights under fp8 training
(``dtype: fp8``), as TE and Megatron-Core keep them.

A TE linear (``Linear``, ``LayerNormLinear``, ``GroupedLinear``) runs fprop on the rowwise quantized weight and
dgrad on its columnwise copy (TransformerEngine transformer_engine/pytorch/module/linear.py: the weight quantizer's
``set_usage(rowwise=True, columnwise=columnwise_usage)``, columnwise whenever the input needs a gradient). Which
bytes exist depends on the recipe and the GPU:

* per-tensor scaling (``fp8_recipe: tensorwise``, delayed or current scaling): the rowwise copy is 1 byte per
  element; the columnwise copy is its transpose (``_transpose``, 1 byte) only where the GPU lacks non-TN fp8 GEMMs
  -- on Blackwell (compute capability 10.x and >= 13, ``utils.is_non_tn_fp8_gemm_supported``) one ``_data`` buffer
  serves both usages and no transpose is made (tensor/float8_tensor.py ``inner_tensor_specs``:
  "on non-TN-capable archs (Blackwell+) a single ``_data`` buffer backs both row- and column-wise usage");
* MXFP8 (``fp8_recipe: mxfp8``, Blackwell): rowwise and columnwise copies are separate, each 1 byte per element plus
  one e8m0 scale byte per 32 elements (``MXFP8_BYTES`` = 1 + 1/32).

Where they live:

* bf16 primary weights (``fp8_param_gather`` false): Megatron-Core passes ``is_first_microbatch`` to every TE linear,
  so TE quantizes the weight at a step's first micro-batch into a workspace it keeps in ``self._fp8_workspaces
  ["weight"]`` (linear.py: ``cache_name = ... "weight"``, ``self._fp8_workspaces[cache_name] =
  new_weight_workspace``) and reuses for the later micro-batches and steps: the quantized copies are resident
  beside the bf16 weights (``FrameworkBehaviour.fp8_weight_cache``).
* fp8 primary weights (``fp8_param_gather`` true, Megatron-Core ``--fp8-param-gather``; Megatron-Bridge's
  ``bf16_with_fp8_current_scaling_mixed`` and ``bf16_with_mxfp8_mixed`` set it, src/megatron/bridge/training/
  mixed_precision.py from v0.1.0rc2 on): the parameters are TE quantized tensors and no bf16 copy of them exists.
  Megatron-Core DDP stores a quantized parameter's bytes in a uint8 param buffer (megatron/core/distributed/
  param_and_grad_buffer.py: ``param_dtype = torch.uint8`` when ``_param_uses_quantized_storage``), or with MXFP8
  under ``reuse_grad_buf_for_mxfp8_param_ag`` in TE's own rowwise/columnwise storage while the all-gather borrows the
  gradient buffer (``shared_buffer``); the distributed optimizer keeps the fp32 main copy (in the 12 optimizer
  bytes). After each parameter all-gather TE's ``post_all_gather_processing`` (transformer_engine/pytorch/tensor/
  utils.py) pre-creates a per-tensor-scaled weight's transpose where the GPU lacks non-TN fp8 GEMMs, so on Hopper
  the transpose is resident too. The weights term then holds the rowwise bytes, the columnwise copy is a term of
  its own.

Scale and amax tensors (one fp32 scale per tensor, delayed scaling's amax history of 1,024 fp32 per quantized
tensor) are kilobytes per linear and left out; the embedding, the output layer, norms and a MoE router are not
TE fp8 linears and keep their 16-bit weights.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainsim.specs.framework_behaviour import behaviour

from .megatron_fsdp import gather_bytes
from .param_tensors import rank_linear_weight_elems, rank_tensors

if TYPE_CHECKING:
    from trainsim.specs import GPUSpec, Scenario

    from .memory import RankParams

FP8_BYTES = 1.0  # E4M3 / E5M2
MXFP8_BYTES = 1.0 + 1.0 / 32.0  # E4M3 plus one e8m0 scale per 32 elements


def copy_bytes(recipe: str, non_tn_gemm: bool) -> tuple[float, float]:
    """(rowwise, columnwise) bytes per linear-weight element of TE's quantized weight: the columnwise copy is
    absent (0) for per-tensor scaling on a GPU with non-TN fp8 GEMMs (Blackwell)."""
    if recipe == "mxfp8":
        return MXFP8_BYTES, MXFP8_BYTES
    return FP8_BYTES, (0.0 if non_tn_gemm else FP8_BYTES)


def weight_terms(linear_held: float, linear_stored: float, param_bytes: float, recipe: str, non_tn_gemm: bool,
                 param_gather: bool) -> tuple[float, float]:
    """(change of the weights term, resident quantized copies) in bytes on one rank.

    ``linear_held``: the rank's TE linear weight elements (TP/PP/EP-sharded); ``linear_stored``: of those, the
    elements stored as parameters after ZeRO-3 sharding (= ``linear_held`` below ZeRO-3). With fp8 primary weights
    the stored parameters drop from ``param_bytes`` to the rowwise bytes and the columnwise copy of the stored
    elements is the resident term; with bf16 primary weights the weights are unchanged and both copies of the held
    weights are TE's cached workspace."""
    row, col = copy_bytes(recipe, non_tn_gemm)
    if param_gather:
        return linear_stored * (row - param_bytes), linear_stored * col
    return 0.0, linear_held * (row + col)


def non_tn_fp8_gemm(gpu: GPUSpec) -> bool:
    """Whether ``gpu`` runs non-TN fp8 GEMMs (TE ``is_non_tn_fp8_gemm_supported``: compute capability 10.x or
    >= 13, Blackwell), the GPUs with FP4 tensor cores among trainsim's presets (``GPUSpec.fp4``)."""
    return bool(gpu.fp4)


def rank_weight_terms(scenario: Scenario, stage: int, rp: RankParams) -> tuple[float, float]:
    """``weight_terms`` for one rank of pipeline ``stage`` (0, 0 unless fp8 training keeps TE quantized weights:
    bf16 primary weights with TE's per-step cache, or fp8 primary weights). ``rp``: the rank's RankParams. Under
    ZeRO-3 with bf16 primary weights TE quantizes the gathered unit per use (no resident copy: counted as 0); LoRA's
    frozen base weights are costed by cost_models/lora.py."""
    t = scenario.training
    cached = behaviour(t.framework).fp8_weight_cache and t.effective_zero < 3
    if t.dtype != "fp8" or t.lora_rank or not (t.fp8_param_gather or cached):
        return 0.0, 0.0
    held = rank_linear_weight_elems(scenario, stage)
    stored = held * (rp.weight_params / rp.held if t.effective_zero >= 3 and rp.held else 1.0)
    return weight_terms(held, stored, t.param_bytes, t.fp8_recipe, non_tn_fp8_gemm(scenario.cluster.gpu),
                        t.fp8_param_gather)


def megatron_fsdp_gathered(scenario: Scenario, stage: int, rp: RankParams) -> float:
    """Megatron-FSDP's gathered bytes on one rank of ``stage`` (megatron_fsdp.gather_bytes), its layers' linear
    weights gathered in their quantized bytes with fp8 primary weights."""
    t = scenario.training
    tensors = rank_tensors(scenario, stage)
    root_big = max((p.elems for p in tensors if p.kind in ("embedding", "head")), default=0.0)
    fp8, linear_frac = None, 1.0
    if t.dtype == "fp8" and t.fp8_param_gather:
        fp8 = sum(copy_bytes(t.fp8_recipe, non_tn_fp8_gemm(scenario.cluster.gpu)))
        blocks = rp.held - rp.root_params
        linear = rank_linear_weight_elems(scenario, stage)
        linear_frac = min(1.0, linear / blocks) if blocks > 0 else 1.0
    return gather_bytes(rp.root_params, rp.block_params, linear_frac, float(root_big), t.param_bytes, t.grad_bytes,
                        fp8)
