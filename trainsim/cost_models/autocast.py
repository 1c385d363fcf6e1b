"""What ``torch.autocast`` on fp32 weights adds to a training step's device memory (TrainingSpec.autocast).

torch mixed precision without a framework cast (framework torch below ZeRO-3, the executor's one-GPU and DDP
layouts: fp32 weights, a bf16/fp16 ``torch.autocast`` around all micro-batches of the step) keeps tensors that
a 16-bit model does not. Each mechanism is in PyTorch's code (aten/src/ATen/autocast_mode.cpp, read_file id
11938380001; the op lists in aten/src/ATen/autocast_mode.h, read_file id 17903540753, the same in torch 2.13's
installed header):

1. **The weight-cast cache.** ``cached_cast`` keeps the lower-precision copy of every fp32 tensor that is a leaf,
   requires grad and is not a view -- every weight and bias a ``lower_precision_fp`` op (``linear``, ``addmm``,
   ``matmul``, ``mm``, ``bmm``, SDPA: ``AT_FORALL_LOWER_PRECISION_FP``) reads -- in a process-wide map until
   ``clear_cache()``, which ``torch.autocast.__exit__`` calls when the outermost autocast region of the thread
   exits (torch/amp/autocast_mode.py: ``if torch.autocast_decrement_nesting() == 0: torch.clear_autocast_cache()``).
   With the whole step in one region that is one 16-bit copy of every Linear weight and bias of the rank for the
   step, held once (not per micro-batch): ``weight_cast_cache_bytes``. Each Linear's autograd node saves its
   weight's copy (the input gradient needs it), so a saved-tensor meter that leaves the fp32 parameters out
   counts the copies with every micro-batch (``saved_weight_cast_params``); the bias copy is not saved (its
   gradient is a sum of the output gradient). Embedding and norm weights are never cast (``embedding`` is on no
   list; ``layer_norm``/``rms_norm`` run in fp32). A tied output layer casts the embedding weight.
   Recompute (torch.utils.checkpoint) re-enters autocast in the autograd engine's device thread in backward and
   clears the cache when it leaves; the next micro-batch's forward rebuilds it, so the forward's peak still
   holds it, while the checkpointed blocks' linears save nothing.
2. **An fp32 residual stream.** The embedding returns fp32 (fp32 weight, no cast), and the residual adds
   type-promote the blocks' 16-bit outputs (bf16 + fp32 -> fp32; ``add`` is on no list): block inputs and outputs,
   a full-recompute checkpoint's saved input and a pipeline stage's output are fp32 (``RESIDUAL_BYTES``).
   ``layer_norm``, ``native_layer_norm`` and ``rms_norm`` are on CUDA's fp32 list (``AT_FORALL_FP32``): every norm
   saves its fp32 input and fp32 statistics, and returns fp32. ``rms_norm`` with a weight of the input's dtype
   dispatches to ``at::_fused_rms_norm`` (aten/src/ATen/native/layer_norm.cpp ``rms_norm_symint``, read_file id
   6079783), whose CUDA backward needs the input and rstd only -- not the normalised tensor the composite saves
   (measured: the H200 Llama lines' fp32 bytes are 4 per element per norm plus 4 per token, to the byte).
3. **One cast per consuming linear.** The norm output is no leaf, so ``cached_cast`` casts it anew for every
   Linear that reads it, and each saves its own 16-bit copy: q, k and v (separate Linears, torchtitan's wq, wk, wv
   and the executor's model) save three, SwiGLU's gate and up two, a GeLU MLP's fc1 one (``norm_output_casts``).

4. **Deferred gradient casts.** A cached copy carries the autograd node of the cast that made it
   (``ToCopyBackward``), created in the step's first forward. The engine runs ready nodes by descending sequence
   number (torch/csrc/autograd/engine.h ``ReadyQueue::CompareNodeTaskTime``, find_string id 39604046), so in the
   backward of every later micro-batch those old nodes run last: the 16-bit gradient of every cast weight and bias
   waits in its input buffer until the micro-batch's whole backward is done, then each is cast to fp32 and added to
   ``.grad``. At that end the activations are freed and the waiting gradients, as many bytes as the cache, are
   alive (``deferred_grad_cast_bytes``); a tied embedding's own gradient waits there too for the output layer's
   (one AccumulateGrad for both uses; torch/csrc/autograd/input_buffer.cpp ``accumulate`` adds in place, find_string
   id 38773552855). Recompute clears the cache in backward (above), so the next forward makes new, later nodes
   and nothing is deferred; one micro-batch has no later one.

CPU autocast's lists differ (no ``layer_norm``, ``rms_norm``, ``softmax`` on its fp32 list; autocast_mode.cpp
``TORCH_LIBRARY_IMPL(aten, AutocastCPU, m)``): this is CUDA's policy. Measured on an H200 (torch 2.11+cu130,
benchmarks/data/executed_h200.jsonl): the saved bytes per dtype of GPT and Llama-style blocks agree to the byte
(tests/test_autocast_memory.py, docs/execute.md), the peak allocated within 0.1 %.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .param_tensors import ParamTensor

LOW_PRECISION_BYTES = 2  # the bf16/fp16 copy autocast makes of an fp32 tensor
RESIDUAL_BYTES = 4  # the residual stream stays fp32 under autocast (mechanism 2)


def norm_output_casts(gated: bool, mla: bool, moe: bool) -> tuple[int, int]:
    """16-bit copies of each norm's output the linears after it save: (attention norm, MLP norm).

    Separate q, k, v Linears cast the fp32 norm output three times (MLA's two down-projections twice); the MLP
    norm feeds gate and up (SwiGLU), fc1 (GeLU), or a MoE router (one cast; the experts' dispatched tokens are
    counted by the MoE terms)."""
    attn = 2 if mla else 3
    mlp = 1 if moe else (2 if gated else 1)
    return attn, mlp


# Parameter kinds (param_tensors.ParamTensor.kind) autocast never casts: norm weights (and QK-norm, MLA's latent
# norms) run in fp32, and ``embedding`` is on no autocast list (word and learned position embeddings).
NEVER_CAST_KINDS = ("norm", "embedding", "position")
TIED_EMBEDDING = "embedding.word.weight"  # param_tensors' name of the word embedding a tied output layer reuses


def cast_params(tensors: Sequence[ParamTensor], held: float, *, loss: bool,
                tied: bool) -> tuple[float, float, float]:
    """(cast, bias, output-layer) elements of a rank that autocast casts to 16 bits and caches for the step, in one
    walk over its tensors.

    ``tensors``: the rank's parameter tensors (param_tensors.rank_tensors); ``held``: the parameter elements it
    holds; ``loss``: it runs the loss; ``tied``: the model ties its embeddings. Every tensor outside
    NEVER_CAST_KINDS is cast (linear weights and biases, routers, the output layer). A tied output layer on the
    embedding's own rank (the loss's rank holding no separate output layer: one module holds both) casts the
    embedding weight. The biases are cast and cached, never saved for backward."""
    embedding = never = biases = head = 0.0
    has_head = False
    for t in tensors:
        if t.name == TIED_EMBEDDING:
            embedding += t.elems
        if t.kind in NEVER_CAST_KINDS:
            never += t.elems
        elif t.kind == "bias":
            biases += t.elems
        elif t.kind == "head":
            head += t.elems
            has_head = True
    if loss and tied and not has_head:  # the output layer is the tied word embedding, which the output linear casts
        never, head = never - embedding, embedding
    return float(held - never), float(biases), float(head)


def weight_cast_cache_bytes(cast_params: float) -> float:
    """Bytes of the weight-cast cache: one 16-bit copy of every cast weight and bias, held for the step."""
    return float(LOW_PRECISION_BYTES * cast_params)


def saved_weight_cast_params(cast_params: float, biases: float, head_params: float, recompute: str) -> float:
    """Cast elements the micro-batch's autograd graph saves: every linear weight (not the biases), or under
    full recompute only the output layer's (the checkpointed blocks save their input alone)."""
    if recompute == "full":
        return float(head_params)
    return float(cast_params - biases)


def defers_grad_casts(recompute: str, microbatches: int) -> bool:
    """Whether later micro-batches' backward passes defer the cast weights' gradients to their end (mechanism 4)."""
    return recompute == "none" and microbatches > 1


def deferred_grad_cast_bytes(cast_params: float, largest_cast: float, tied_vocab_params: float) -> float:
    """Bytes beyond the model states and the cache at the end of a later micro-batch's backward (mechanism 4): the
    16-bit gradient of every cast tensor, the fp32 gradient the first conversion makes of the largest one (the
    output layer's, whose cast was made last and so converts first), and with a tied embedding on the stage its
    fp32 gradient waiting for the output layer's."""
    return float(LOW_PRECISION_BYTES * cast_params + RESIDUAL_BYTES * (largest_cast + tied_vocab_params))
