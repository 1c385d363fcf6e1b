"""NVFP4 training (``dtype: nvfp4``) as Transformer Engine's NVFP4BlockScaling recipe runs it under Megatron-Core.

What runs in FP4 (NVIDIA, "Pretraining Large Language Models with NVFP4", arXiv:2509.25149, section 4.1 and
Figure 5; TE docs/features/low_precision_training/nvfp4/nvfp4.rst, read_file id 17083170992):

* all three GEMMs of every Transformer Engine linear layer -- fprop ``Y = X·W``, dgrad ``dX = dY·Wᵀ`` and wgrad
  ``dW = Xᵀ·dY`` -- take NVFP4 operands on the FP4 tensor cores and write bf16/fp32 outputs (``GPUSpec.peak("fp4")``,
  ``GPUSpec.gemm_efficiency_fp4``). Attention (the QK and score·V products, softmax), the embedding, the output
  layer, norms, activations and the MoE router stay bf16 as under fp8 (the paper keeps "embeddings, the output
  projection head, normalization layers, non-linearities, and attention components" in high precision; Megatron's
  output layer is not a TE linear).
* every block's linears are in NVFP4: Megatron-Bridge's performance recipe ``bf16_with_nvfp4_mixed``
  (src/megatron/bridge/training/mixed_precision.py, r0.3.0-r0.6.0) leaves ``first_last_layers_bf16`` False, so no
  block stays bf16. The paper's recommendation of ~15 % bf16 layers at the end (Megatron-Core
  ``--first-last-layers-bf16 --num-layers-at-end-in-bf16``) is not a scenario setting: a block's cost is one per model.
* weights are quantized with 2-D 16x16 block scales, activations and gradients with 1x16 blocks (paper section 4.3);
  the wgrad operands (the columnwise copies of X and dY) pass through a 16x16 random Hadamard transform (section
  4.2), fused into their cast kernel on Blackwell (``nvte_hadamard_transform_cast_fusion_columnwise``, a bf16
  16x16 product per block: memory-bound); gradients are rounded stochastically (section 4.4), which the cast kernel
  does in the same pass (Blackwell's FP4 conversion instructions have the rounding mode: paper section 2).
* master weights, gradients and Adam states stay fp32 and the parameters bf16 (paper section 4.1: "The main
  weights ..., weight gradients ... and optimizer states are also kept in FP32"; ``bf16_with_nvfp4_mixed`` starts
  from ``bf16_mixed``): model-state bytes are fp8's.

Bytes. An NVFP4 element is 4 bits plus one E4M3 scale byte per 16 elements, ``NVFP4_BYTES`` = 0.5 + 1/16 = 0.5625
(the per-tensor fp32 scale is negligible). The cast kernels (TE pytorch/csrc/quantizer.cpp
``NVFP4Quantizer::quantize_impl``, find_string ids 5823398769, 60275727375) make, per bf16 tensor:

* an activation X or output gradient dY (1-D scales, columnwise copy with RHT): one amax pass over the input and
  the RHT'd transpose (``nvte_hadamard_transform_amax``), the rowwise quantize (``nvte_quantize_v2``), and the fused
  RHT + columnwise quantize -- three reads of ``e`` bytes, two NVFP4 writes: ``RHT_CAST_READS`` = 3;
* a weight (2-D scales, no RHT): the amax pass and one quantize writing both layouts -- two reads, two NVFP4
  writes (``WEIGHT_CAST_READS`` = 2), once per optimizer step where Megatron-Core passes ``is_first_microbatch``
  (``LayerShape.fp8_weight_casts``, as for fp8).

Saved activations. A TE linear saves its input for wgrad in the quantized form the wgrad GEMM reads (the
columnwise NVFP4 copy), ``NVFP4_BYTES`` per element (activations.py). TE's quantized weight copies (rowwise and
columnwise NVFP4 of every linear weight, ``2·NVFP4_BYTES`` per weight element) are kept from the step's first
forward to its last backward: ``weight_copy_bytes`` (memory.transient_terms).
"""

from __future__ import annotations

NVFP4_BYTES = 0.5 + 1.0 / 16.0  # E2M1 (4 bits) + one E4M3 scale per 16 elements
RHT_CAST_READS = 3  # amax (with the RHT'd transpose), rowwise quantize, fused RHT + columnwise quantize
WEIGHT_CAST_READS = 2  # amax, 2-D quantize writing both layouts
LAYOUTS = 2  # rowwise (fprop / dgrad operand) and columnwise (wgrad operand) copies


def rht_cast_bytes(elems: float, e: int) -> float:
    """HBM bytes of quantizing an activation or output gradient of ``elems`` elements (``e``-byte input)."""
    return float(elems) * (RHT_CAST_READS * e + LAYOUTS * NVFP4_BYTES)


def weight_cast_bytes(elems: float, e: int) -> float:
    """HBM bytes of quantizing a weight of ``elems`` elements with 2-D block scales."""
    return float(elems) * (WEIGHT_CAST_READS * e + LAYOUTS * NVFP4_BYTES)


def weight_copy_bytes(weight_elems: float) -> float:
    """Bytes of TE's NVFP4 copies (rowwise and columnwise) of ``weight_elems`` linear-weight elements."""
    return float(weight_elems) * LAYOUTS * NVFP4_BYTES
