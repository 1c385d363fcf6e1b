"""Megatron-FSDP's gathered parameters at a step's peak (framework megatron with ZeRO-3: Megatron-Core's
``--use-megatron-fsdp``, megatron/core/distributed/fsdp/src/megatron_fsdp).

* FSDP units are the transformer layers (mcore_fsdp_adapter.py: ``fsdp_unit_modules = [TransformerLayer,
  MoETransformerLayer, ...]``), each gathered whole (megatron_fsdp.py: "FSDP unit modules should be unsharded and
  communicated together"): the layer in use and the prefetched next one, and one layer's full gradient before its
  reduce-scatter.
* Every other parameter -- the embedding, the output layer, the final norm -- is a non-unit module that gathers only
  its direct parameters ("Non-unit modules should only unshard the direct parameters they need"), and their buckets
  stay gathered: the all-gather pipeline's ``reset(preserve_non_fsdp_units=True)`` keeps them ("Non-FSDP-unit
  buckets are preserved by default because their params may be read across module boundaries",
  param_and_grad_buffer.py). So the stage's non-unit parameters are resident unsharded once, and the largest of them
  has its full gradient at its backward (the output layer's, at the loss).
* With fp8 primary weights (``fp8_param_gather``) a unit's TE linear weights are gathered in their quantized bytes
  (Megatron-FSDP allocates the fp8 all-gather buffer as ``torch.uint8``), the transposes included where the GPU needs
  them (cost_models/fp8_weights.py); norms and the non-unit parameters stay 16-bit.
"""

from __future__ import annotations


def gather_bytes(root_params: float, block_params: float, block_linear_frac: float, largest_tensor: float,
                 pb: float, gb: float, fp8_bytes: float | None) -> float:
    """Bytes of Megatron-FSDP's unsharded parameters and gradients beyond the shards at the activation peak.

    ``root_params``: the stage's non-unit parameters (embedding, output layer, final norm); ``block_params``: the
    largest layer; ``block_linear_frac``: its share of TE linear weights; ``largest_tensor``: the largest non-unit
    parameter, the output layer or embedding (its gradient); ``pb`` / ``gb``: 16-bit parameter and gradient bytes; ``fp8_bytes``: bytes per gathered
    linear-weight element with fp8 primary weights (rowwise + columnwise), None without."""
    per_block = pb if fp8_bytes is None else block_linear_frac * fp8_bytes + (1.0 - block_linear_frac) * pb
    return root_params * pb + 2.0 * block_params * per_block + max(block_params, largest_tensor) * gb
