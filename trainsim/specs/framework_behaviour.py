"""Software-stack behaviours that change step time without changing the hardware: one row per framework.

``TrainingSpec.framework`` names the training framework; the specs' checks, the cost models
(cost_models/framework.py) and the engine builder read the behaviours below from it. Every value is the
framework's own default, cited to its code or docs; none is fitted to a measurement.

* ``overlap_grad_reduce`` -- data-parallel gradient reduction overlapped with the backward pass.
    - megatron: Megatron-Core ``DistributedDataParallel`` with ``--overlap-grad-reduce`` (buckets are
      reduced as backward produces them; the default of Megatron-Core/NeMo training recipes).
    - megatron-2021: Megatron-LM of SC21 (``--DDP-impl local``, the default): ``train_step`` calls
      ``model_module.allreduce_gradients()`` after ``forward_backward_func`` returns, i.e. one
      all-reduce of every gradient after the whole backward pass, not overlapped (megatron/training.py
      of that time, timer 'backward-params-all-reduce').
    - pytorch-fsdp (the llm-foundry / Composer FSDP stack of the MosaicML benchmarks): FSDP reduce-scatters each wrapped block's gradients in a post-backward hook, on a
      separate stream, overlapped with the backward of earlier blocks (torch.distributed.fsdp docs).
    - deepspeed: ZeRO ``overlap_comm`` -- gradients are reduced in ``reduce_bucket_size`` buckets during
      backward (DeepSpeed ZeRO config docs; on by default for stage 3 only: stages 0-2 reduce after the
      backward, or in its hooks on the compute stream, ``overlap_below_zero3``).
* ``cross_entropy_bytes`` -- HBM bytes per logit (forward, backward) of the loss, with ``e``-byte logits.
    - Megatron's vocab-parallel cross-entropy (megatron/mpu/cross_entropy.py in 2021,
      megatron/core/tensor_parallel/cross_entropy.py today; the un-fused path is Megatron-Core's default,
      ``--cross-entropy-loss-fusion`` off), separate fp32 kernels: ``logits.float()`` (read e, write 4),
      ``max`` (read 4), ``sub_`` (4 + 4), ``exp`` (4 + 4), ``sum`` (read 4), ``div_`` (4 + 4): e + 36
      forward; backward ``mul_`` by the loss gradient (4 + 4) and autograd's cast of the fp32 gradient
      back to the logits' dtype (4 + e): e + 12. Used by megatron, megatron-2021 and deepspeed
      (Megatron-DeepSpeed's GPT uses the same loss).
    - fused kernel (llm-foundry's default ``loss_fn: fused_crossentropy``, flash-attn's xentropy CUDA
      kernel; Megatron with ``--cross-entropy-loss-fusion``): forward reads the logits and writes the
      fp32 softmax (e + 4), backward reads it and writes the logit gradient (4 + e).
    - torch's eager ``F.cross_entropy`` on an fp32 copy of the logits (``eager_fp32_cross_entropy``, the
      ``eager_fp32`` settings): aten's ``cross_entropy_loss`` is ``log_softmax`` + ``nll_loss``
      (aten/src/ATen/native/LossNLL.cpp ``cross_entropy_loss_prob_target``/``_label_smoothing`` aside, the
      class-index path calls ``at::nll_loss_nd(at::log_softmax(self, class_dim, self.scalar_type()), ...)``).
      Forward: ``.float()`` (read e, write 4), ``log_softmax`` (``cunn_SoftMaxForward``: read 4, write 4),
      ``nll_loss`` gathers one value per token (negligible): e + 12. Backward: ``nll_loss_backward`` fills
      the fp32 gradient with zeros and scatters (write 4), ``log_softmax_backward`` (read the gradient and the
      saved output, write: 12), autograd's cast back to the logits' dtype (read 4, write e): e + 20. The
      kernels of one profiled H200 step are exactly these (cunn_SoftMaxForward/Backward,
      nll_loss_forward/backward_reduce, a fill, two copies: benchmarks/data/trace_summary_h200.json, "loss").
* ``pipeline_output_kept`` -- a pipeline stage keeps each in-flight micro-batch's output activation until that
  micro-batch's backward. deepspeed: the pipeline engine stores it in ``pipe_buffers['outputs']`` at the forward
  and runs ``torch.autograd.backward`` from it (deepspeed/runtime/pipe/engine.py ``_exec_forward_pass`` /
  ``_exec_backward_pass``). Megatron frees the output's data once it is sent (schedules.py
  ``deallocate_output_tensor``; megatron/training/arguments.py sets ``deallocate_pipeline_outputs``).
* ``zero3_gather`` -- what one ZeRO-3 parameter all-gather covers.
    - "block" (pytorch-fsdp, megatron's FSDP): one flat parameter per wrapped transformer block, so one
      all-gather per block and pass (FSDP wraps each block: llm-foundry ``fsdp_wrap`` of MPTBlock).
    - "tensor" (deepspeed): ZeRO-3 partitions every ``nn.Parameter`` separately (``ds_tensor`` per
      parameter, deepspeed/runtime/zero/partition_parameters.py) and gathers the parameters a submodule
      needs when it runs (``fetch_sub_module``): one coalesced collective per submodule and pass (one per
      tensor in deepspeed-2021), each paying the ring's (n-1)-step latency over all data-parallel ranks,
      counted from param_tensors by cost_models/zero3_gathers.py. Small tensors under
      ``stage3_param_persistence_threshold`` (biases, norms) stay resident and are not gathered.
* ``reduce_bucket_params`` -- ZeRO-2/3 gradient reduce-scatter granularity: FSDP one per block
  (None), DeepSpeed ``reduce_bucket_size`` default 5e8 elements (DeepSpeed ZeRO config docs).
* ``grad_accumulation_pass`` -- weight gradients reach the accumulation buffer through a separate
  elementwise add every micro-batch. megatron-2021: the wgrad GEMM writes ``param.grad`` and DDP's hook
  runs ``param.main_grad.add_(param.grad.data)`` (local DDP's ``_make_param_hook``; with torch DDP
  autograd's AccumulateGrad does the same ``grad +=``): read both, write one, ``3 x grad_bytes`` per
  parameter per micro-batch. megatron: ``--gradient-accumulation-fusion`` (on by default) makes the wgrad
  GEMM accumulate into ``main_grad`` itself. torch (plain autograd, DDP): AccumulateGrad's ``grad += new``
  for every micro-batch (the first one's gradient is stolen, not added: counted anyway; megatron-deepspeed counts
  m - 1 of m, ``grad_accumulation_steals_first``). FSDP / DeepSpeed ZeRO-2/3 reduce-scatter every micro-batch
  and accumulate only the 1/dp shard (folded into the optimizer's bytes).
* ``train_metric_loss_passes`` -- extra no-grad cross-entropy forwards per micro-batch over the logits.
  pytorch-fsdp (Composer + llm-foundry): Composer's ``Trainer._train_microbatch`` ends every micro-batch
  with ``_eval_train_metrics``, which updates each train metric on the micro-batch's logits; llm-foundry's
  MPT declares ``train_metrics = [LanguageCrossEntropy(), LanguagePerplexity()]``, and each ``update`` runs
  an eager ``torch.nn.CrossEntropyLoss`` under bf16 autocast: fp32 cast (read e, write 4), log-softmax
  (max, sum and write passes: read 12, write 4), NLL gather (negligible) = e + 20 bytes per logit each
  (``cost_models.framework.train_metric_bytes_per_logit``).
* ``p2p_overlap`` -- when pipeline sends overlap the sender's compute ("always", "interleaved", "never";
  ``TrainingSpec.overlap_p2p`` overrides it). Megatron's ``_communicate`` runs ``batch_isend_irecv``, waits
  on the requests and, with ``batch_p2p_sync`` (default on), calls ``torch.cuda.synchronize()``: the sender
  blocks. megatron-2021 always did so; Megatron-Core overlaps p2p with compute only in the interleaved
  schedule (``--overlap-p2p-communication``, on by default; the non-interleaved 1F1B always uses the
  blocking batched path) -> "interleaved". Other frameworks rarely pipeline: "always".
* ``pp_scatter_gather`` -- pipeline messages split over the TP ranks and all-gathered by the receiver.
  megatron-2021: ``--scatter-gather-tensors-in-pipeline`` (default on; SC21 Sec. 4.1): each TP rank sends
  1/t of the activation and the receiver runs ``gather_split_1d_tensor`` (an all-gather over the TP group)
  on the compute stream before using it. Modern Megatron shards the message by sequence parallelism
  instead, with nothing to gather.
* ``zero3_overlap`` -- ZeRO-3 parameter gathers and gradient reduce-scatters overlap compute.
  deepspeed-2021 (the ZeRO-3 of early 2021, deepspeed/runtime/zero/stage3.py): ``fetch_sub_module`` is
  blocking -- it waits on the gather handles and calls ``comm_stream.synchronize()`` and
  ``torch.cuda.synchronize()`` before the submodule runs; the prefetch window is a hard-coded
  ``prefetch_elements=25000000``, smaller than one weight tensor of a large model, so nothing is
  gathered ahead. Each submodule's gather therefore runs serialized with compute. The reduce buckets are
  serialized too: the stage-3 optimizer's signature default is ``overlap_comm=False``, though the engine
  passes the config value, whose stage-3 default was True in some 2021 versions (docs/validation.md, "Where
  the model is still weak"); which one the SC21 baseline ran is not known, and the serialized reading is kept. The
  recomputed forward of a checkpointed layer gathers again (parameters are released after each
  submodule's forward unless reused within ``max_reuse_distance``). FSDP and today's DeepSpeed overlap.
* ``zero3_gather_ops_per_rank`` -- host-side operations per data-parallel rank for every gathered tensor.
  deepspeed-2021: ``_allgather_param`` builds the output as a Python list of one ``narrow`` view per rank,
  and torch.distributed's list ``all_gather`` (ProcessGroupNCCL of PyTorch 1.8) gathers into a flat
  buffer and copies it back into each of the n outputs -- one view and one copy kernel per rank, each an
  eager op dispatch of about ``GPUSpec.kernel_overhead_s``, on the critical path because the fetch is
  blocking. Gradients go the same way: ``_reduce_scatter_gradient`` reduce-scatters each parameter's
  gradient from a list of n ``narrow`` views, which the list ``reduce_scatter`` copies into a flat buffer.
  Hence a cost linear in the number of ranks: 2 x n x kernel_overhead_s per gathered or reduced tensor,
  plus the copies around them (``torch.zeros`` output and the flat buffer copied back: 3 passes over the
  gathered bytes; the gradients copied into the flat input: 2 passes).
* ``zero3_reduce_serialized`` -- deepspeed, deepspeed-2023: ZeRO-3's gradient reduce-scatters lie on the backward's critical
  path although its parameter gathers are prefetched. Measured: the AMSP paper's trace of DeepSpeed ZeRO-3 on
  A800s (Chen et al., arXiv:2311.00257v2, Sec. VI-C, Fig. 14): "Even when the communication-computation overlap
  setting is enabled, DeepSpeed-ZeRO3/MiCS/ZeRO++ fails to effectively overlap ReduceScatter with computation."
  The code behind it (microsoft/DeepSpeed@38327e07, deepspeed/runtime/zero/stage3.py): the backward hook fills a
  ``reduce_bucket_size`` bucket (5e8 elements) and ``__reduce_and_partition_ipg_grads`` reduces it on the
  autograd thread through ``reduce_scatter_coalesced`` (runtime/comm/coalesced_collectives.py), which first
  builds ``world_sz`` slice views of every gradient in the bucket (a Python list comprehension), concatenates
  them with ``torch.cat`` into one interleaved buffer, ``div_``s it and calls a synchronous
  ``reduce_scatter_fn`` -- host work of ``tensors x ranks`` aten ops and two passes over the bucket before each
  call, while no backward kernel of the next layers is issued; ``max_param_reduce_events = 2`` makes the host
  ``synchronize()`` on the third reduction still in flight. simulator/zero3_reduce.py costs it.
* ``zero3_persistent_regather`` -- how ZeRO-3 gathers the persistent parameters (those under
  ``stage3_param_persistence_threshold``, default 1e5 elements: norm weights and biases) again after every
  optimizer step (``_post_step`` -> ``persistent_parameters[0].all_gather(...)``), on the critical path after the
  step:
    - "rank_copies" (deepspeed-2021): ``_allgather_params`` gathers them and copies each rank's piece of each
      back with a Python loop of ``narrow().copy_()`` -- one eager op per rank per persistent tensor
      (samyam/DeepSpeed stage3.py@14a775e8, partition_parameters.py@67f957a4, the same in
      microsoft/DeepSpeed@70adb32). Cost: ``tensors x dp x kernel_overhead_s`` plus one all-gather of their bytes.
    - "per_tensor" (deepspeed, deepspeed-2023): ``step`` first partitions every parameter
      (``_partition_all_parameters``), then ``_post_step`` hands the persistent ones to
      ``_allgather_params_coalesced``, which issues one ``all_gather_into_tensor`` per tensor over the
      data-parallel group, waits on the last and synchronizes the device (stage3.py ``_post_step`` and
      partition_parameters.py ``_allgather_params_coalesced`` at v0.10.0, v0.12.3 and 38327e07). Cost: one
      all-gather of each tensor's bytes, its latency over all ranks included, per tensor.
    - "none": not gathered again (FSDP keeps them sharded with the rest; Megatron does not shard them).
* ``tp_input_reduce`` -- how the backward reduces the input gradient of column-parallel layers.
    - "region" (Megatron): one all-reduce per column-parallel region (the ``f`` operator before the fused
      QKV and before the MLP's first layer), i.e. 2 per block in backward; with sequence parallelism one
      reduce-scatter per region instead.
    - "per_linear" (torch's own ``parallelize_module``, framework "torch": the plan of trainsim execute,
      kernels/parallelize.tp_plan_block): q, k, v, fc1 (and gate) are separate ``ColwiseParallel``
      linears, each turning its replicated local input into a DTensor, so each reduces its Partial input
      gradient with its own all-reduce: 4 per block in backward (5 gated), 2 in forward. With sequence
      parallelism ``PrepareModuleInput`` gathers once per region (one reduce-scatter back), but the
      ``SequenceParallel`` norms' replicated weights get Partial gradients: one all-reduce per norm
      parameter tensor per micro-batch. Counted from a torch.profiler trace of tiny-gpt tp2 (gloo): 29
      all-reduces per micro-batch = 4 blocks x (2 + 4) + embedding, output layer and loss_parallel; with
      SP 18 all-gathers, 17 reduce-scatters and 22 all-reduces (4 x 4 norm-weight gradients + head/loss).
* ``tp_dgrad_overlap`` -- the backward of a column-parallel linear (QKV, MLP in) reduces its input gradient
  asynchronously while the same layer's weight-gradient GEMM runs. Megatron: ``LinearWithGradAccumulation
  AndAsyncCommunication`` launches the all-reduce (with sequence parallelism: reduce-scatter) of
  ``grad_input`` with ``async_op=True`` before the wgrad GEMM and waits after it; with sequence
  parallelism it also re-all-gathers the layer's sharded input for that wgrad GEMM asynchronously while the
  dgrad GEMM runs. Exposed: ``max(0, comm - gemm)`` per overlapped pair. megatron (Megatron-Core) and
  megatron-2022 (the Megatron-LM of Korthikanti et al. 2022, arXiv:2205.05198 Sec. 6.2: "we overlap
  all-reduce communication with the linear weight's gradient computation"; ``--async-tensor-model-parallel-
  allreduce``, added to Megatron-LM after SC21) do it; megatron-2021 (SC21's code) waits for every TP
  collective on the compute stream.
* ``fused_bias_grad`` -- the weight-gradient GEMM also produces the bias gradient (cuBLASLt's BGRADB
  epilogue, which Transformer Engine's Linear uses: megatron, i.e. Megatron-Core with TE). Otherwise each
  biased linear reduces its output gradient over the tokens in a separate kernel, one read of dY:
  megatron-2021/2022 (``LinearWithGradAccumulationAndAsyncAllreduce``: ``grad_bias = grad_output.sum(dim=0)``;
  the skipped biases of out_proj, fc1 and fc2 through autograd's sum of ``bias.expand_as(residual)`` and of
  the bias-GeLU gradient), torch / pytorch-fsdp (``nn.Linear``'s autograd reduces ``grad`` to the bias shape)
  and DeepSpeed (Megatron-DeepSpeed uses Megatron's layers). Only models with biases pay it.
* ``fsdp_grad_prep`` -- what FSDP (PyTorch 2.0's FullyShardedDataParallel, the llm-foundry / Composer stack:
  pytorch-fsdp) does to every wrapped unit's gradient, per micro-batch, around its reduce-scatter
  (torch/distributed/fsdp/_runtime_utils.py ``_post_backward_hook`` and flat_param.py of 2023; the
  default hook torch/distributed/algorithms/_comm_hooks/default_hooks.py ``reduce_scatter_hook``):
    - the module's parameters are ``split``/``view`` s of the unit's flat parameter, so autograd's
      split backward concatenates every parameter gradient into the flat gradient (``at::cat``: read e,
      write e per parameter);
    - the flat gradient is cast to the reduce dtype when that differs (read e, write g);
    - it is divided in place by the pre-divide factor (read g, write g; the factor doubles while
      ``world % f == 0 and world / f > f``, so it is > 1 for any world >= 2), reduce-scattered, and the
      shard divided by the post-divide factor ``world / pre`` when that is > 1;
    - the shard is cast to the parameter's dtype (fp32 master weights: read g, write 4) and, from the
      second micro-batch on, added into the saved gradient shard (read 4 + 4, write 4; counted every
      micro-batch when accumulating). Composer runs no ``no_sync`` for FSDP, so this is every micro-batch.
  cost_models.framework.fsdp_grad_prep_bytes_per_param gives the bytes per parameter of the unit; the optimizer then sees
  fp32 gradient shards. Memory: while the split backward concatenates, the parameters' own 16-bit gradients
  and the unit's flat gradient coexist (memory.stage_memory).
* ``fsdp2_copies`` (``fsdp2``) -- the copies FSDP2 (framework torch) runs on the compute stream around each unit's
  collectives, every micro-batch (torch/distributed/_composable/fsdp/_fsdp_collectives.py, read_file id
  16595821436; _fsdp_param_group.py ``wait_for_unshard``): ``foreach_all_gather_copy_out`` waits for the all-gather
  on the current stream and ``torch.split_with_sizes_copy`` copies the flat all-gather output into each
  parameter's unsharded storage (read and write the gathered bytes), for the forward's all-gather and again for
  the backward's of a unit resharded after forward (torchtitan reshards every block but the last; the root is not
  resharded); ``foreach_reduce_scatter`` copies the unit's unsharded gradients into the flat reduce-dtype input
  (``torch.cat`` of their ``view(world, -1)`` slices, later ``torch._chunk_cat``: read the gradient, write the
  reduce dtype) on the reduce-scatter stream after ``reduce_scatter_stream.wait_stream(current_stream)``, and the
  compute stream then waits for that copy (``current_stream.wait_event(copy_in_event)``) -- since
  pytorch/pytorch#129721 (torch 2.5) the copy-in runs on the compute stream itself -- so both copies are serial
  with the blocks' kernels. No divide passes: fp32 and bf16 reduce-scatters average in NCCL (``ReduceOp.AVG``,
  pytorch/pytorch#120919 and #123362, March-April 2024; #120919 measured "~1.5% speedup on the Llama-7B
  workload" from dropping the pre/post-divide passes, the size of such passes on the critical path).
  cost_models.framework.fsdp2_copy_bytes_per_param gives the bytes; FSDP1 (pytorch-fsdp) gathers straight into
  the flat parameter and has no copy-out (its gradient passes are ``fsdp_grad_prep``).
* ``optimizer_update`` -- how the Adam step streams the optimizer shard. "fused" (Megatron/TE/apex
  multi-tensor Adam, torch's fused/foreach paths): one pass reading the fp32 master weight, m, v and the
  gradient and writing them back (``2 x optimizer_bytes + grad + param`` bytes per parameter).
  "per_param_loop" (Composer's ``DecoupledAdamW``, the optimizer of llm-foundry's MPT yamls): a Python loop
  over parameters of separate eager ops -- ``exp_avg.mul_(b1).add_(g)``, ``exp_avg_sq.mul_(b2).addcmul_(g,
  g)``, ``denom = (exp_avg_sq.sqrt() / c2).add_(eps)``, ``param.addcdiv_(exp_avg, denom)`` (the decay
  ``param.mul_`` is skipped at the yamls' ``weight_decay: 0.0``): ``PER_PARAM_LOOP_ADAM_BYTES`` on fp32 state
  and fp32 gradients (FSDP's gradient shards; used when the optimizer state is the 12-byte fp32 master + m + v).
  "foreach" (``torch.optim.Adam``'s default on CUDA, framework torch: torch/optim/adam.py ``_multi_tensor_adam``,
  find_string id 14460399403): one ``multi_tensor_apply`` pass per ``_foreach`` op over fp32 state --
  ``_foreach_lerp_(exp_avgs, grads)`` (read 8, write 4), ``_foreach_mul_(exp_avg_sqs)`` (4 + 4),
  ``_foreach_addcmul_(exp_avg_sqs, grads, grads)`` (12 + 4), ``_foreach_sqrt`` into a new list (4 + 4),
  ``_foreach_div_`` and ``_foreach_add_`` on it (8 each), ``_foreach_addcdiv_(params, exp_avgs, denom)``
  (12 + 4): ``FOREACH_ADAM_BYTES`` = 76 bytes per parameter (the profiled H200 step runs 77
  ``multi_tensor_apply_kernel`` launches for 204 M parameters in 4.0 ms: 3.9 TB/s at these bytes).
* ``clips_grads`` -- the step computes the gradient norm for clipping (one read of every gradient). trainsim
  execute's torch step (kernels/parallelize.py ``train_step``: ``optimizer.step()`` with no clipping) does not.
* ``clip_scales_grads`` -- gradient clipping multiplies every gradient by the clip coefficient
  unconditionally (FSDP's ``clip_grad_norm_``: ``grad.mul_(clamp(max_norm / norm, max=1))``; Composer's
  ``gradient_clipping`` algorithm calls it on the root FSDP module): the norm pass reads each gradient
  once, the scaling reads and writes it again. Megatron scales only when the norm exceeds the threshold
  (a host-side test), so its clipping is one read.
* ``fp8_weight_cache`` -- with fp8 training, Transformer Engine quantizes each weight once per optimizer step
  and reuses the fp8 copy (and its transpose) for the step's later micro-batches when the caller passes
  ``is_first_microbatch`` (TE Linear docs: "processing and caching of the weights in FP8"). Megatron-Core's
  TELinear / TEGroupedLinear do (megatron); a bare ``te.Linear`` call -- llm-foundry's MPT layers under
  Composer's ``amp_fp8`` (pytorch-fsdp) -- leaves it None, so every forward quantizes the weight again.
* ``moe_probs_in_activation`` -- a MoE layer's routing probabilities multiply the experts' activation (the fused
  weighted SwiGLU, megatron/core/fusions/fused_bias_swiglu.py ``WeightedSwiGLUFunction``: it saves its input and the
  fp32 probabilities) and the combine is an unweighted ``unpermute`` (megatron/core/transformer/moe/
  token_dispatcher.py ``token_unpermutation``: no probs), so the experts' outputs are not saved for the combine's
  backward. Megatron-Core since "Memory efficient token permutation" (Megatron-LM 2659630721, April 2025;
  core_r0.13 on, the Megatron-Bridge releases' cores) (megatron); older MoE code weighted the expert outputs in the
  unpermute and saved them.
* ``optimizer_extra_bytes_per_param`` -- bytes per parameter the optimizer step moves beyond a fused
  Adam (cost_models.compute.optimizer_step_time). megatron-2021 (Float16OptimizerWithFloat16Params):
  ``_copy_model_grads_to_main_grads`` (read 2, write 4) and ``_copy_main_params_to_model_params``
  (read 4, write 2) = 12. The fp16 loss-scale unscale/inf check is a dtype effect, not a framework one
  (compute.FP16_UNSCALE_BYTES_PER_PARAM).
* ``megatron_layer`` -- the blocks are Megatron's legacy ``ParallelTransformerLayer`` (megatron/model/
  transformer.py of Megatron-LM 2021-2022 and of Megatron-DeepSpeed): without FlashAttention its unfused core
  attention, separate bias adds and bias-dropout-adds dispatch more eager ops per block than the executor's
  block, which the host's issue time counts (cost_models.host_issue, "Megatron's layer"). megatron-2021 and
  megatron-2022 run it; Megatron-Core (megatron) runs Transformer Engine's fused layers instead.
* ``host_syncs`` (``block_forward_syncs``, ``microbatch_syncs``) -- blocking host-device synchronisations that
  stop the host from running ahead of the GPU. megatron-deepspeed (microsoft/Megatron-DeepSpeed@f4157bea; the
  lines date from "MoE support (#48)", 2022-06-07): ``ParallelTransformerLayer.forward`` creates
  ``moe_loss = torch.tensor(0.0, device=...)`` and ``mlp_bias = torch.tensor(0.0, device=...)`` between the
  attention half and the MLP of every block (megatron/model/transformer.py), and a Python scalar copied to the
  GPU is a pageable host-to-device copy, ``cudaMemcpyAsync`` followed by ``cudaStreamSynchronize``
  (pytorch/pytorch#120996 flags ``torch.tensor(3.14, device=dev)`` as a synchronizing operation; sgl-project/
  sglang#35106 traces it to ``memcpy_and_sync``): one sync per block forward, recomputed forwards included.
  Each micro-batch starts with ``get_batch`` -> ``tensor_parallel.broadcast_data``, which copies the sizes to the
  GPU (``get_accelerator().LongTensor(sizes)``) and back (``sizes_cuda.cpu()``; megatron/core/tensor_parallel/
  data.py; pretrain_gpt.py ``get_batch`` and ``get_batch_pipe``): one drain of the queue per micro-batch. cost_models.host_issue prices what a sync exposes.
  megatron-2021 and megatron-2022 (Megatron-LM's own schedules, NVIDIA/Megatron-LM v2.5 = e269e20064, the SC21
  merge, and 285068c8, January 2023): ``forward_step`` calls ``forward_step_func(data_iterator[model_chunk_id],
  model[model_chunk_id])`` for every model chunk's forward on every pipeline stage (megatron/schedules.py;
  training.py builds one data iterator per model chunk), and pretrain_gpt.py ``forward_step`` starts with
  ``get_batch`` -> ``tensor_parallel.broadcast_data``, whose ``_build_key_size_numel_dictionaries`` copies the
  sizes to the GPU (``torch.cuda.LongTensor(sizes)``), broadcasts them and reads them back (``sizes_cuda.cpu()``):
  one drain per chunk forward (``microbatch_syncs`` on the chunk that starts the micro-batch,
  ``chunk_forward_syncs`` on every other chunk). Each chunk forward also follows the pipeline exchange's
  ``torch.cuda.synchronize()`` (p2p_communication.py ``_communicate``), so the GPU is already drained when the
  host starts ``get_batch``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

Framework = Literal["megatron", "megatron-2021", "megatron-2022", "megatron-deepspeed", "pytorch-fsdp", "deepspeed",
                    "deepspeed-2023", "deepspeed-2021", "torch"]
FRAMEWORKS: tuple[str, ...] = get_args(Framework)

# DeepSpeed ZeRO config default reduce_bucket_size (elements).
DEEPSPEED_REDUCE_BUCKET_PARAMS = 5e8



@dataclass(frozen=True)
class FrameworkBehaviour:
    """The behaviours of one framework that the cost models read (see module docstring)."""

    name: str
    overlap_grad_reduce: bool
    fused_cross_entropy: bool
    zero3_gather: Literal["block", "tensor"]
    reduce_bucket_params: float | None  # ZeRO-2/3 reduce-scatter bucket (elements); None = one per block
    grad_accumulation_pass: bool = False
    optimizer_extra_bytes_per_param: float = 0.0
    train_metric_loss_passes: int = 0
    zero3_overlap: bool = True
    zero3_gather_ops_per_rank: int = 0
    zero3_reduce_serialized: bool = False
    p2p_overlap: Literal["always", "interleaved", "never"] = "always"
    pp_scatter_gather: bool = False
    tp_input_reduce: Literal["region", "per_linear"] = "region"
    tp_dgrad_overlap: bool = False
    fused_bias_grad: bool = False
    zero3_persistent_regather: Literal["none", "rank_copies", "per_tensor"] = "none"
    fsdp_grad_prep: bool = False
    optimizer_update: Literal["fused", "per_param_loop", "foreach"] = "fused"
    clips_grads: bool = True
    clip_scales_grads: bool = False
    fp8_weight_cache: bool = False
    moe_probs_in_activation: bool = False
    pipeline_output_kept: bool = False
    megatron_layer: bool = False
    # ZeRO-1/2's gather of the updated parameters after the optimizer step, in how many calls: "buffer" one per
    # parameter buffer (Megatron-LM 2021-22 DistributedOptimizer ``gather_model_params``: one all-gather per
    # model chunk and dtype buffer; Megatron-Core all-gathers per bucket, but with ``overlap_param_gather``,
    # NeMo's setting, those calls run under the next forward pass, which the engine does not model, so one
    # exposed call stands in rather than charging hidden latency), "allgather_bucket" one per
    # DEEPSPEED_ALLGATHER_BUCKET_PARAMS elements (DeepSpeed ``all_gather_dp_groups`` up to v0.12.3: a list
    # ``dist.all_gather`` of one ``narrow`` per rank per shard), "param_group" one ``all_gather_into_tensor`` per
    # optimizer parameter group (DeepSpeed from v0.12.4, PR #4705, fd0a52c1a: ``all_gather_dp_groups`` calls
    # ``all_gather_into_tensor_dp_groups`` whenever torch has ``all_gather_into_tensor``, find_string id
    # 48284869659; one group counted: a separate no-weight-decay group adds one call), "broadcast_per_param" one
    # broadcast per parameter tensor from the rank that owns it (torch ``ZeroRedundancyOptimizer._sync_params``
    # with its default ``parameters_as_bucket_view=False``: "sent parameter-by-parameter", torch/distributed/
    # optim/zero_redundancy_optimizer.py, find_string ids 42221174, 1023684051).
    param_gather: Literal["buffer", "allgather_bucket", "param_group", "broadcast_per_param"] = "buffer"
    block_forward_syncs: int = 0   # blocking host-device syncs per block forward (module docstring, host_syncs)
    microbatch_syncs: int = 0      # ... per micro-batch, before the first block
    chunk_forward_syncs: int = 0   # ... per forward of a model chunk that does not start the micro-batch
    # Communicators beyond one per parallel dimension (runtime_memory.communicators, which cites each call): the
    # start-time all-reduce over the world group (megatron/training/training.py ``pretrain``), the gradient norm
    # over the model-parallel group TP x PP (megatron/core/optimizer/optimizer.py
    # ``get_grad_stats_parallel_group``; DeepSpeed BF16_Optimizer ``get_global_norm_of_tensors(mpu=...)``) and,
    # with tied embeddings and pp > 1, the first and last stages' embedding group (finalize_model_grads.py
    # ``_allreduce_word_embedding_grads``; DeepSpeed pipe/module.py ``allreduce_tied_weight_gradients``). Megatron
    # of every vintage and Megatron-DeepSpeed under DeepSpeed's engine run them; FSDP and torch do not.
    model_parallel_groups: bool = False
    # DeepSpeed's pipeline engine broadcasts the loss over the pipe-parallel group (deepspeed/runtime/pipe/
    # engine.py ``PipelineEngine._aggregate_total_loss``, DeepSpeed 15293139f): one more communicator.
    pp_loss_broadcast: bool = False
    # Megatron's persistent "mpu" buffer (megatron/core/utils.py ``GlobalMemoryBuffer``, set up by
    # ``_set_global_memory_buffer``; megatron/global_vars.py of the 2022 sequence-parallel code, find_string id
    # 67184530167): memory.megatron_global_buffer. The SC21 code of megatron-2021 predates it (its
    # tensor-parallel layers allocate per call), and DeepSpeed's engine does not allocate it.
    global_memory_buffer: bool = False
    # ZeRO 0-2 gradient reduction calls (see zero12_reduce_calls): "ddp_bucket" per DDP bucket (Megatron, torch);
    # DeepSpeed's own buckets of reduce_bucket_size elements, DeepSpeedZeroOptimizer ``average_tensor`` with its
    # default reduce_scatter=True: "per_rank_reduce" one ``dist.reduce`` of each destination rank's slice of a
    # bucket (DeepSpeed up to v0.12.3), "bucket_all_reduce" one all-reduce per bucket, every rank keeping its
    # slice (``use_multi_rank_bucket_allreduce``, default True from v0.12.4: PR #4695, 2afa1c7f2, 2023-11-21).
    dp_grad_calls: Literal["ddp_bucket", "per_rank_reduce", "bucket_all_reduce"] = "ddp_bucket"
    # ZeRO 0-2 gradient reduction overlapped with the backward (else on the compute stream after it): DeepSpeed's
    # ``overlap_comm`` defaults to ``stage == 3`` (runtime/zero/config.py ``overlap_comm_valid``).
    overlap_below_zero3: bool = True
    # Dense Llama blocks run torchtitan's eager model code without torch.compile (activations.py impl "titan"):
    # its own RMSNorm ``self._norm(x.float()).type_as(x) * self.weight``, ``repeat_kv`` copies of k and v,
    # the attention output's ``transpose(1, 2).contiguous()`` copy, ``w2(F.silu(w1(x)) * w3(x))``
    # (pytorch/torchtitan torchtrain/models/llama/model.py @ 83c879f18, torchtitan/models/norms.py and
    # models/llama/model.py @ ba2469780).
    eager_llama_block: bool = False
    # Megatron's own data-parallel wrapper reduces the gradients at ZeRO 0-1 (cost_models/ddp_buckets.py): "core"
    # Megatron-Core ``DistributedDataParallel`` (bucketed, overlapped by default), "local" Megatron-LM's local DDP
    # of 2021-22 (``--DDP-impl local``: one flat buffer all-reduced after the backward, ``main_grad.add_`` hooks
    # per parameter, megatron/model/distributed.py); None where another engine reduces them (Megatron-DeepSpeed
    # reduces in DeepSpeed's engine).
    megatron_ddp: Literal["core", "local"] | None = None
    # The optimizer creates Adam's exp_avg / exp_avg_sq at its first step: Megatron-LM's optimizers
    # (megatron/core/optimizer/optimizer.py, NVIDIA/Megatron-LM @ d98e8a64) wrap Transformer Engine's or apex's
    # FusedAdam, which create them lazily; ``init_state_fn`` creates them earlier only for a checkpoint load
    # (``state_dict(is_loading=True)`` / ``sharded_state_dict``). first_step_fragmentation replays that step.
    lazy_optimizer_states: bool = False
    # Data-parallel sharding (zero >= 2) reduce-scatters each unit's gradient into a new sharded gradient on a side
    # stream, and the training loop frees the gradients with ``zero_grad(set_to_none=True)`` (torch's default
    # since 2.0) before the next forward (allocator_reserve.grads_off_peak).
    side_stream_grads: bool = False
    # The un-fused loss is torch's eager ``F.cross_entropy`` on an fp32 copy of the logits (torchtitan's
    # ``cross_entropy_loss``: ``F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))``, torchtitan
    # train.py of late 2024 with the loss left uncompiled, read_file id 60236233462; kernels/parallelize.py
    # ``cross_entropy`` for trainsim execute). Its memory differs from Megatron's in-place vocab-parallel loss
    # (activations.logits_workspace_bytes).
    eager_fp32_cross_entropy: bool = False
    # The sharded parameters are the fp32 master weights (torch.distributed FSDP1 FlatParameter / FSDP2 DTensor
    # shards under a mixed-precision policy; torch AMP keeps fp32 parameters and casts per op): model_states.state_bytes.
    fp32_params: bool = False
    # The model and its optimizer run under DeepSpeed's engine (``deepspeed.initialize``): the ZeRO optimizers
    # create their states at construction (first_step_fragmentation.lazy_state_bytes) and step the flat fp32
    # groups (step_host.step_counts).
    deepspeed_engine: bool = False
    # The accumulated gradient is autograd's ``param.grad``, freed (set to None) by the optimizer step, so the step's
    # first micro-batch's gradient is stolen, not added: torch's AccumulateGrad takes ``new_grad`` as the gradient
    # where ``variable_grad`` is undefined and adds only into a defined one (torch/csrc/autograd/functions/
    # accumulate_grad.h ``accumulateGrad``, find_string id 24866157830); DeepSpeed's FP16_Optimizer.step sets every
    # fp16 ``p.grad = None`` once it has flattened them (deepspeed/runtime/fp16/fused_optimizer.py, read_file id
    # 186267960), and the engine's ``zero_grad`` does the same. Of the step's m micro-batches m - 1 run the
    # accumulation pass (cost_models.framework.grad_accumulation_bytes_per_param). Local DDP's ``main_grad.add_``
    # (megatron-2021) adds every micro-batch into a zeroed buffer.
    grad_accumulation_steals_first: bool = False
    # How the model's modules hold their parameters (param_tensors.module_style): "fused" Megatron's layers (one QKV
    # tensor, gate and up in one fc1) -- the Megatron family, and deepspeed-2021, whose ZeRO-3 GPT runs train
    # Megatron's model (microsoft/DeepSpeedExamples Megatron-LM-v1.1.5-ZeRO3/megatron/model/transformer.py:
    # ``query_key_value`` one ColumnParallelLinear, read_file id 6017323966); "torch" separate nn.Linear q, k, v.
    module_style: Literal["fused", "torch"] = "torch"
    # The framework is built on Megatron-LM's arguments handling (megatron/training/arguments.py validate_args): with
    # bf16 it sets accumulate_allreduce_grads_in_fp32 unless --grad-reduce-in-bf16, and DDP then allocates the
    # main-grad buffer in fp32 (megatron/core/distributed/distributed_data_parallel.py: ``grad_dtype = torch.float
    # if ddp_config.grad_reduce_in_fp32 else param.dtype``; TrainingSpec.grad_bytes); it offloads the optimizer
    # (--optimizer-cpu-offload), never the parameters; its ZeRO-2/3 is Megatron-FSDP on the DistributedOptimizer.
    megatron_arguments: bool = False
    # The data-parallel sharding (ZeRO-3) is torch FSDP (FSDP1 FlatParameter / FSDP2 DTensor): HSDP is FSDP1's
    # HYBRID_SHARD / FSDP2's 2-D mesh, gradients are always reduced in backward hooks, overlapped, and CPU offload
    # (CPUOffload / CPUOffloadPolicy) moves parameters, gradients and the optimizer step together
    # (torch.distributed.fsdp docs; specs/data_parallel.py, cost_models/fsdp_stream_pools.py).
    torch_fsdp: bool = False
    # The model is a torch module driven by a torch training loop (torchtitan, Composer): torch.utils.checkpoint
    # policies (torchtitan's per-op ``op_sac``), torch.compile of the blocks, the caller's loss on the fp32 logits
    # the model returns (torchtitan PR #165), and no Megatron-Core DistributedOptimizer (Megatron-LM arguments.py:
    # "--use-torch-fsdp2 is not supported with MCore's distributed optimizer").
    torch_training_loop: bool = False
    # Full recompute wraps each block in torch's non-reentrant checkpoint, whose saved-tensor hooks and recomputation
    # frame cost the host time of their own in every backward (cost_models/host_issue.py CHECKPOINT_HOOKS_S):
    # trainsim execute's blocks (kernels/torch_model.py, ``checkpoint(..., use_reentrant=False)``) and torchtitan's
    # (``ptd_checkpoint_wrapper``, torch's ``CheckpointImpl.NO_REENTRANT`` by default; torchtitan
    # torchtitan/distributed/activation_checkpoint.py).
    checkpoint_hooks: bool = False
    # The stack has none of Megatron-Core's communication overlaps -- Transformer Engine's userbuffers TP overlap
    # (--tp-comm-overlap) and the combined-1F1B expert-parallel all-to-all overlap (--overlap-moe-expert-parallel-
    # comm): torch's parallelize_module TP and FSDP run their collectives unoverlapped with the GEMMs; DeepSpeed's
    # engine and its MoE layer (deepspeed/moe/sharded_moe.py, an all-to-all before and after the experts) have
    # neither. megatron-deepspeed and the dated presets are refused by specs.framework_era instead.
    no_mcore_overlap: bool = False
    # torch's data-parallel sharding is FSDP2's ``fully_shard``: every parameter a DTensor sharded on dim 0 (1/n of
    # each tensor, not a flat slice), the root module one unit gathered once per pass, the reduce-scatter input
    # placed by the caller (torch/distributed/fsdp/_fully_shard; torchtitan parallelize.py). pytorch-fsdp runs
    # FSDP1's FlatParameter (Composer), whose unit is one flat parameter per wrapped block.
    fsdp2: bool = False
    # The optimizer is DeepSpeed's own: BF16_Optimizer at bf16 ZeRO 0-1 (deepspeed/runtime/engine.py
    # ``_do_optimizer_sanity_check``), ZeRO stage 1 for optimizer-state sharding (no Megatron DistributedOptimizer,
    # deepspeed/runtime/zero/stage_1_and_2.py) and ZeRO-Offload of its fp32 partition. megatron-deepspeed's is
    # costed as Megatron's Float16OptimizerWithFloat16Params (optimizer_extra_bytes_per_param).
    deepspeed_optimizer: bool = False
    # DeepSpeed's ``bf16.bf16_master_weights_and_grads`` (with ``bf16_optimizer_states``): a bf16 master partition,
    # gradients and Adam states instead of fp32 ones (deepspeedai/DeepSpeed PR #7700; deepspeed/runtime/config.py
    # asserts ZeRO stage 1-3, read_file id 51845822457). Only today's DeepSpeed has it.
    bf16_master_weights: bool = False
    # One all-gather per gathered ZeRO-3 parameter tensor rather than one coalesced call per submodule: the
    # ZeRO-3 of early 2021 (deepspeed/runtime/zero/stage3.py ``fetch_sub_module`` -> ``_allgather_param`` per
    # parameter; cost_models/zero3_gathers.py).
    zero3_gather_per_tensor: bool = False
    # The context-parallel exchange when ``TrainingSpec.cp_comm`` is unset: torch's context_parallel rotates K/V by
    # all-gather unless set_rotate_method says otherwise (torch/distributed/tensor/experimental/_attention.py
    # ``_ContextParallelOptions.rotate_method = _RotateMethod.ALL_GATHER``, find_string id 106942014; torchtitan's
    # ``context_parallel_rotate_method`` defaults to "allgather", id 43447747977): "torch_allgather"; Megatron-Core's
    # --cp-comm-type defaults to p2p, the K/V ring.
    default_cp_comm: Literal["p2p", "torch_allgather"] = "p2p"
    # The code lineage whose dated features specs/framework_era.py checks a historic preset against (FEATURE_ORIGINS
    # keyed per lineage): DeepSpeed's own releases, or Megatron-LM (Megatron-DeepSpeed forks Megatron-LM).
    era_lineage: Literal["megatron", "deepspeed"] = "megatron"


BEHAVIOURS: dict[str, FrameworkBehaviour] = {
    "megatron": FrameworkBehaviour("megatron", overlap_grad_reduce=True, fused_cross_entropy=False,
                                   zero3_gather="block", reduce_bucket_params=None, p2p_overlap="interleaved",
                                   tp_dgrad_overlap=True, fused_bias_grad=True, fp8_weight_cache=True,
                                   moe_probs_in_activation=True,
                                   model_parallel_groups=True, global_memory_buffer=True, megatron_ddp="core",
                                   lazy_optimizer_states=True, module_style="fused",
                                   megatron_arguments=True),
    "megatron-2021": FrameworkBehaviour("megatron-2021", overlap_grad_reduce=False, fused_cross_entropy=False,
                                        zero3_gather="block", reduce_bucket_params=None,
                                        grad_accumulation_pass=True, optimizer_extra_bytes_per_param=12.0,
                                        p2p_overlap="never", pp_scatter_gather=True, megatron_layer=True,
                                        microbatch_syncs=1, chunk_forward_syncs=1,
                                        model_parallel_groups=True, megatron_ddp="local",
                                        lazy_optimizer_states=True, module_style="fused",
                                        megatron_arguments=True),
    # Megatron-LM of early 2022 (Korthikanti et al., arXiv:2205.05198): the 2021 behaviours (local DDP reduced
    # after the backward pass -- Sec. 6.3: "we do not use any overlapping of gradient all-reduces with
    # back-propagation" --, unfused cross-entropy, fp16/bf16 optimizer copies, blocking p2p, scatter/gather)
    # plus the asynchronous TP input-gradient reduction of Sec. 6.2 (tp_dgrad_overlap) and gradient-
    # accumulation fusion, both in that code's ``LinearWithGradAccumulationAndAsyncAllreduce`` (the wgrad GEMM
    # accumulates into ``main_grad``; on by default when gradients accumulate in fp32, which arguments.py forces
    # for bf16): no separate accumulation pass.
    "megatron-2022": FrameworkBehaviour("megatron-2022", overlap_grad_reduce=False, fused_cross_entropy=False,
                                        zero3_gather="block", reduce_bucket_params=None,
                                        grad_accumulation_pass=False, optimizer_extra_bytes_per_param=12.0,
                                        p2p_overlap="never", pp_scatter_gather=True, tp_dgrad_overlap=True,
                                        megatron_layer=True, microbatch_syncs=1, chunk_forward_syncs=1,
                                        model_parallel_groups=True, global_memory_buffer=True,
                                        megatron_ddp="local", lazy_optimizer_states=True, module_style="fused",
                                        megatron_arguments=True),
    # Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed): the layer code of megatron-2021 (synchronous TP
    # all-reduces, param.grad accumulation, DeepSpeed's arguments switch the asynchronous all-reduce off) and its
    # host syncs (module docstring, ``host_syncs``).
    "megatron-deepspeed": FrameworkBehaviour("megatron-deepspeed", overlap_grad_reduce=False,
                                             fused_cross_entropy=False, zero3_gather="block",
                                             reduce_bucket_params=None, grad_accumulation_pass=True,
                                             optimizer_extra_bytes_per_param=12.0, p2p_overlap="never",
                                             pp_scatter_gather=True, megatron_layer=True, block_forward_syncs=1,
                                             microbatch_syncs=1, model_parallel_groups=True, deepspeed_engine=True,
                                             grad_accumulation_steals_first=True,
                                             module_style="fused",
                                             megatron_arguments=True),
    "pytorch-fsdp": FrameworkBehaviour("pytorch-fsdp", overlap_grad_reduce=True, fused_cross_entropy=True,
                                       zero3_gather="block", reduce_bucket_params=None,
                                       train_metric_loss_passes=2, fsdp_grad_prep=True,
                                       optimizer_update="per_param_loop", clip_scales_grads=True,
                                       side_stream_grads=True, fp32_params=True,
                                       torch_fsdp=True, torch_training_loop=True,
                                       no_mcore_overlap=True),
    "deepspeed": FrameworkBehaviour("deepspeed", overlap_grad_reduce=True, fused_cross_entropy=False,
                                    zero3_gather="tensor", reduce_bucket_params=DEEPSPEED_REDUCE_BUCKET_PARAMS,
                                    pipeline_output_kept=True, param_gather="param_group",
                                    model_parallel_groups=True, pp_loss_broadcast=True,
                                    dp_grad_calls="bucket_all_reduce", overlap_below_zero3=False,
                                    zero3_reduce_serialized=True, deepspeed_engine=True,
                                    no_mcore_overlap=True, zero3_persistent_regather="per_tensor",
                                    deepspeed_optimizer=True, era_lineage="deepspeed", bf16_master_weights=True),
    # DeepSpeed v0.10.0 .. v0.12.3 (specs/framework_era.py): today's ZeRO-3 (gathers prefetched, reductions
    # serialized: the AMSP trace of this DeepSpeed, arXiv:2311.00257v2 Fig. 14) with the ZeRO-1/2 communication of
    # before v0.12.4 -- ``average_tensor`` reduces each owner rank's slice of a bucket with its own ``dist.reduce``
    # (v0.12.3 stage_1_and_2.py, 6ea44d02c) and ``all_gather_dp_groups`` gathers the updated parameters in
    # ``allgather_bucket_size`` shards. DeepSpeed's own account of the change (blogs/comm-opt/README.md, PR #4695):
    # a dense 7B on 1,024 A100s spent 1.2 s per step in that reduction, 0.36 s after it.
    "deepspeed-2023": FrameworkBehaviour("deepspeed-2023", overlap_grad_reduce=True, fused_cross_entropy=False,
                                         zero3_gather="tensor", reduce_bucket_params=DEEPSPEED_REDUCE_BUCKET_PARAMS,
                                         pipeline_output_kept=True, param_gather="allgather_bucket",
                                         model_parallel_groups=True, pp_loss_broadcast=True,
                                         dp_grad_calls="per_rank_reduce", overlap_below_zero3=False,
                                         zero3_reduce_serialized=True, deepspeed_engine=True,
                                         zero3_persistent_regather="per_tensor",
                                         deepspeed_optimizer=True, era_lineage="deepspeed"),
    "deepspeed-2021": FrameworkBehaviour("deepspeed-2021", overlap_grad_reduce=False, fused_cross_entropy=False,
                                         zero3_gather="tensor", reduce_bucket_params=DEEPSPEED_REDUCE_BUCKET_PARAMS,
                                         zero3_overlap=False, zero3_gather_ops_per_rank=2,
                                         zero3_persistent_regather="rank_copies", pipeline_output_kept=True,
                                         param_gather="allgather_bucket", model_parallel_groups=True,
                                         pp_loss_broadcast=True, dp_grad_calls="per_rank_reduce",
                                         overlap_below_zero3=False, deepspeed_engine=True, module_style="fused",
                                         deepspeed_optimizer=True, era_lineage="deepspeed",
                                         zero3_gather_per_tensor=True),
    # torch.distributed's own parallelism as trainsim execute runs it (kernels/parallelize.py): DDP buckets
    # reduced during backward, FSDP2 per-block gathers, eager F.cross_entropy (log_softmax + nll, not
    # fused), parallelize_module TP. Pipelining: Schedule1F1B's steady state fuses each send with the next
    # receive and waits on both (torch/distributed/pipelining/schedules.py, ``_wait_batch_p2p(_batch_p2p(
    # fwd_sends + bwd_recvs))``): the sender blocks.
    # Gradient accumulation: autograd's AccumulateGrad adds each micro-batch's weight gradient into
    # ``param.grad`` (``grad += new``, a separate elementwise pass: grad_accumulation_pass).
    "torch": FrameworkBehaviour("torch", overlap_grad_reduce=True, fused_cross_entropy=False,
                                zero3_gather="block", reduce_bucket_params=None, p2p_overlap="never",
                                tp_input_reduce="per_linear", grad_accumulation_pass=True,
                                param_gather="broadcast_per_param", optimizer_update="foreach",
                                clips_grads=False, eager_llama_block=True, side_stream_grads=True,
                                eager_fp32_cross_entropy=True, fp32_params=True,
                                torch_fsdp=True, torch_training_loop=True,
                                no_mcore_overlap=True, fsdp2=True, default_cp_comm="torch_allgather",
                                checkpoint_hooks=True),
}


def behaviour(framework: str) -> FrameworkBehaviour:
    """The behaviours of ``framework`` (one of FRAMEWORKS)."""
    return BEHAVIOURS[framework]
