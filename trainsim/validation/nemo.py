"""NVIDIA Megatron-Bridge (NeMo) performance summaries as validation cases: tokens/s per GPU of modern
Megatron-Core on H100 and Blackwell (DGX B200/B300, GB200/GB300 NVL72).

The table is parsed from the Megatron-Bridge repository and not bundled (trainsim.data). Each row maps to a
scenario from its printed layout and batch, joined with the recipe settings the table does not print
(trainsim/validation/nemo_recipes.py, read from trainsim/data/validation/settings/). The model-FLOP basis of the
secondary metric is NeMo's own (``nemo_llama_flops_per_token``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trainsim.specs import load_cluster, load_model
from trainsim.validation.cases import Case, Dataset, read_rows, scenario_or_skip
from trainsim.validation.cells import cluster as _cluster
from trainsim.validation.cells import integer as _int
from trainsim.validation.cells import num as _num
from trainsim.validation.external_tables import external_table
from trainsim.validation.nemo_recipes import (
    first_value,
    nemo_activation_offload,
    nemo_ep_overlap,
    nemo_expert_tp,
    nemo_fused_grouped_mlp,
    nemo_lora,
    nemo_mla_optimizer_bytes,
    nemo_models,
    nemo_moe_dispatcher,
    nemo_mtp_layers,
    nemo_optimizer,
    nemo_pipeline_layouts,
    nemo_recompute_known,
    nemo_recompute_modules,
    nemo_skipped_runs,
    nemo_stage_layers,
    nemo_systems,
    nemo_unmodelled,
)

if TYPE_CHECKING:
    from trainsim.specs import ModelSpec

NEMO_CITATION = ("NVIDIA NeMo Megatron-Bridge performance summaries (docs/performance-summary.md and "
                 "performance-summary-archive.md, containers 25.09-26.08; NVIDIA-NeMo/Megatron-Bridge) -- "
                 "nemo_megatron_bridge_perf.csv")
# Gradients are reduced in bf16 in the performance recipes: NeMo's performance scripts set
# ``grad_reduce_in_fp32 = False`` on every precision config they build (scripts/performance helpers,
# set_precision_configs; read as read_file id 39780612905), and Megatron-Bridge's MoE recipes do the same
# (recipes/qwen/qwen3_moe.py ``precision_config.grad_reduce_in_fp32 = False``; read_file id 2599762895).
NEMO_GRAD_DTYPE = "bf16"
NEMO_NOTES = (
    ("metric: tokens/s per GPU as printed; secondary model_tflops_per_gpu on NeMo's own model-FLOP basis "
     "(Llama: NeMo's llama3 formula, which reproduces the table's TFLOP/s / tokens/s ratio; MoE: the row's "
     "published ratio), so it moves with the primary value."),
    ("parenthesised values are an alternative run (another quantization recipe or layout, per each "
     "release's footnotes): every cell is read as its first value, for every row; footnote markers "
     "([^...]) are dropped."),
    ("hardware: DGX-H100 -> dgx-h100, DGX-B200 -> dgx-b200, DGX-B300 -> dgx-b300, DGX-GB200 -> gb200-nvl72, "
     "DGX-GB300 -> gb300-nvl72 (72-GPU NVLink5 domains modelled as 72-GPU nodes on NVSwitch). 128/256-GPU "
     "NVL72 jobs are placed 64 GPUs per rack (16 of 18 trays: 128 and 256 are not multiples of 72; "
     "assumed, the tables do not say), so TP/EP groups of up to 64 stay inside NVLink."),
    ("precision: FP8 (current scaling), FP8-CS, FP8-MX, MXFP8 -> dtype fp8 (Transformer Engine runs the "
     "block's linear layers in fp8; attention, the logits and elementwise ops stay 16-bit); BF16 -> bf16; "
     "the 25.09 tables ('not stated in table') are FP8 per that release's text; NVFP4 -> dtype nvfp4 "
     "(Megatron-Bridge bf16_with_nvfp4_mixed: Transformer Engine's NVFP4BlockScaling recipe on every block's "
     "linears, no bf16 layers; cost_models/nvfp4.py), without TP comm overlap (the Llama performance configs set "
     "tp_comm_overlap False for nvfp4: scripts/performance/configs/llama/llama3_llm_pretrain.py and "
     "llama31_llm_pretrain.py, r0.3.0-r0.5.0, 'False if precision == \"nvfp4\"'). Not modelled, recorded only: "
     "fp4_param_gather (NVFP4 parameters gathered in NVFP4 by the distributed optimizer, set from r0.4.0 = 26.04 on, "
     "Megatron-LM PR #4005), full-iteration CUDA graphs and NVTE_USE_FAST_MATH=1 of the NVFP4 configs. The "
     "Nemotron 3 Super NVFP4 rows are hybrid Mamba models (skipped as such). fp8 rows: FP8-MX / MXFP8 -> "
     "fp8_recipe mxfp8, else tensorwise (current scaling), and fp8 primary weights (fp8_param_gather: "
     "bf16_with_fp8_current_scaling_mixed and bf16_with_mxfp8_mixed set it; off for Kimi K2, whose Muon "
     "config turns it off; cost_models/fp8_weights.py)."),
    ("software (Megatron-Bridge recipes, scripts/performance: sequence_parallel = tp > 1, CommOverlapConfig("
     "tp_comm_overlap=True) with the userbuffers configs of megatron/bridge/training/comm_overlap.py): framework "
     "megatron, sequence parallelism and TP comm/GEMM overlap when tp > 1, "
     "distributed optimizer (fsdp column 0/empty) or Megatron FSDP = ZeRO-3 (fsdp column > 0), "
     "FlashAttention-class fused attention, no dropout, interleaved 1F1B when vp > 1. The tables do not "
     "state recomputation: none for the Llama and Qwen rows (the perf scripts read set none of it for these "
     "models; the Qwen3 configs set recompute_granularity=None), the config's recompute_modules for "
     "DeepSeek-V3 / Kimi K2 (below). "
     "Activation CPU offload as the recipes set it for the Megatron-FSDP fp8 runs: Llama 3 70B 20 layers "
     "on GB300, 40 on GB200; Llama 3.1 405B on GB200 95 (nemo_activation_offload())."),
    ("rows: pre-training and SFT (full-parameter training on seq_len tokens); LoRA rows (Llama 3 70B, 26.06) as "
     "LoRA fine-tuning (training.lora_rank; specs/lora.py) with the settings of the release's performance config "
     "(nemo_lora.csv: rank 16, alpha 32, adapters on linear_qkv only -- Megatron-Bridge v0.5.0 "
     "llama3_llm_finetune.py overrides the recipe's four default targets; grads reduced in bf16, distributed "
     "optimizer). Their data is SQuAD packed into 4096-token sequences (pad_to_max_length): the table's TFLOP/s per "
     "token (2.78-2.79e11, the secondary metric's basis) is Megatron-Bridge's LoRA formula (training/utils/"
     "flop_utils.py: 2/3 of the frozen model's FLOPs on the packed tokens plus attention within each packed "
     "sample), which it applies only to Llama 3 70B LoRA on packed SQuAD (scripts/performance --data squad_packed; "
     "the scripts' default mock data would give the full-training formula, about 4.3e11); tokens/s is read as printed "
     "and predicted as GBS x 4096 tokens per step (the packing fills each sequence, pad_to_max_length). trainsim costs the attention core over the whole 4096-token causal window "
     "(block-diagonal masks of packed samples are not modelled): 16-18 % of these rows' predicted block time, "
     "most of which short SQuAD samples do not spend, so the LoRA rows are predicted slower than the packed runs "
     "by up to that much on that account. The Transformer Engine CUDA graphs of the MLP (GB200/GB300 configs) are "
     "not modelled."),
    ("MoE expert tensor parallelism (all MoE rows): layout.etp = the table's etp cell when printed (no MoE "
     "row prints one), else the config's expert_tensor_parallel_size (nemo_expert_tp_by_model(), with sources), else "
     "Megatron-Core's default tp. Every config read sets 1: DeepSeek-V3 (BASE_DEEPSEEK_V3_CONFIG, every "
     "version 25.11-26.06; the 25.09 deepseek_v3_llm_pretrain.py; the GB200 guide), Kimi K2 "
     "(BASE_KIMI_K2_CONFIG), Qwen3 235B-A22B (BASE_QWEN3_235B_A22B_CONFIG 25.11 and 26.x, the 25.09 "
     "qwen3_235b_a22b_llm_pretrain.py, NeMo 2's model_configs_gb200.csv etp_size 1 for the 25.09 GB200 tp2 pp1 "
     "ep64 run), Qwen3 30B-A3B. So ep need only divide dp*cp*tp/etp (MoE parallel folding): the Qwen3 235B "
     "H100 rows (tp2 pp8 vp4 ep32 on 256 GPUs, dp 16) and the 25.09 GB200 Qwen3 235B row (tp2 pp1 ep64 on 64 "
     "GPUs, dp 32) fold their expert groups over the two TP ranks and are predicted; the H100 DeepSeek-V3 row "
     "(tp2) keeps its experts unsplit. Rows with etp != tp carry 'etpN' in their label."),
    ("DeepSeek-V3 and Kimi K2 (multi-head latent attention, shared expert, first dense layers): model presets "
     "deepseek-v3 and kimi-k2 (the architecture recipes/kimi/kimi_k2.py @0350b4ef builds: 61 layers, 1 "
     "dense, 384 experts top-8 + 1 shared, MLA with 64 heads). Pipeline split: the "
     "pipeline_model_parallel_layout the Megatron-Bridge recipe or performance config gives the row's (pp, vp), "
     "as Layout.stage_layers (transformer layers per virtual stage; embedding on the first, loss and MTP on "
     "the last): DeepSeek-V3 (2,8), (4,4), (8,2), (16,1) 'Et*4|(t*4|)*14tmL' = 4 x 15 + 1; (8,1) "
     "'Et*8|(t*8|)*6t*5mL' = 8 x 7 + 5; (8,4) 'Et|(tt|)*30mL' = 1 + 2 x 30 + 0 (the H100 config's; the "
     "GB200 pp8 vp4 w/o-MTP row has the parallel layout of NVIDIA/Megatron-LM's DeepSeek-V3 GB200 guide, "
     "docs/discussions/deepseek-v3-gb200-optimization: TP1 PP8 VPP4 EP32, MXFP8, no MTP, layout "
     "'Et|(tt|)*30L'); Kimi K2 (4,4) 'Et*4|(t*4|)*14tL' "
     "(nemo_pipeline_layouts(), with sources). A (pp, vp) with no layout in the recipes (GB300 pp2 vp4, "
     "25.11) is skipped: the recipes' fallback cannot split 61 layers over 8 stages, so the split is unknown."),
    ("DeepSeek-V3 multi-token prediction: rows labelled '(w/o MTP)' 0 modules, '(w/ MTP)' 1; every other "
     "row (unlabelled, '(tokendrop)', '(dropless)') 1, as its release's recipe set it (deepseek_v3.py: "
     "mtp_num_layers = 1; the 26.x performance layouts carry the 'm'); MTP is costed on the loss stage. "
     "Kimi K2: none. 'tokendrop' rows (25.09: capacity factor 1, apply_moe_token_drop) are predicted as "
     "the dropless ones: trainsim assumes balanced routing, which force-balanced routing with capacity "
     "factor 1 is (no token dropped, no expert padded)."),
    ("DeepSeek-V3 / Kimi K2 recompute: training.recompute_modules = the recompute_modules of the row's "
     "Megatron-Bridge performance config (Megatron-Core --recompute-granularity selective --recompute-modules; "
     "an empty list = recompute none), read per (model, system, precision) at the row's release, config "
     "versions dated as for the EP overlap (nemo_recompute_ranges(), with sources): mla_up_proj + mlp for "
     "H100 25.09 (deepseek_v3_llm_pretrain.py @27dfb3df) and B200 MXFP8 pp8 vp2 26.04.01 (B200_FP8_MX_V2); "
     "mla_up_proj for GB200 25.09 (tokendrop) and 25.11 BF16, B200 pp16 25.09-26.04, B300 26.02-26.06, "
     "GB300 MXFP8 with mbs 2 (26.02-26.04.01), GB200 MXFP8 26.02-26.04 and 26.06-26.08 (the full-iteration "
     "config, PR #4226), Kimi K2 GB300 (mbs 2); mlp for GB200 MXFP8 26.04.01 (PR #3031 moved GB200 from "
     "mla_up_proj to mlp; the stored config with the 26.04.01 layouts has it, those with the 26.04 layouts "
     "do not); none ([]) for GB300 MXFP8 26.06-26.08 (the full-iteration config with mbs 1, PR #3983) and "
     "GB300 25.11 (skipped: no layout); moe_act + mlp for the 25.11 GB200 FP8-MX pp8 vp4 row, which matches "
     "no Megatron-Bridge config and takes the modules of the Megatron-LM GB200 guide its layout comes from. "
     "Each module drops its saved tensors and re-runs its forward (mla_up_proj: MLA's up-projections and "
     "RoPE; mlp: the dense blocks' MLP; moe_act: the experts' activation). A MLA row with no entry would be "
     "skipped (none is). Rows with recompute carry 'rc:<modules>' in their label."),
    ("DeepSeek-V3 / Kimi K2 optimizer and overlap: DeepSeek-V3 distributed optimizer with precision-aware Adam, "
     "8 bytes/param of state (nemo_mla_optimizer_bytes(): fp32 main params + bf16 moments); Kimi K2 Muon "
     "(nemo_optimizer(): the recipe's dist_muon, cost_models/muon.py): fp32 main params + fp32 momentum on the 2D "
     "hidden matrices and Adam on the rest, whole parameters dealt over DP, gradients all-reduced, updated "
     "parameters all-gathered, 5 bf16 Newton-Schulz iterations per matrix on the busiest rank); no TP comm overlap (the DeepSeek-V3 recipe's CommOverlapConfig(tp_comm_overlap=False); "
     "only the H100 row has tp > 1), sequence parallelism when tp > 1. Not modelled, recorded only: MoE "
     "token dispatch by the flex dispatcher with HybridEP (26.x GB300/GB200/B300/B200) or DeepEP (H100 25.09 "
     "dropless configuration, B200 pp8 vp2 26.04.01), plain all-to-all for the 25.09 tokendrop rows; "
     "moe_permute_fusion and moe_router_fusion on; moe_router_force_load_balancing on; CUDA graphs "
     "(Transformer Engine graphs of attn/moe_router/"
     "moe_preprocess, or full-iteration graphs with paged stashing on GB300/GB200 MXFP8 26.06+); MXFP8 "
     "fp8_param_gather, fp8 dot-product attention (GB300/B300 MXFP8), cuteDSL fused grouped MLP. The EP "
     "all-to-all overlap (moe_a2a_overlap) follows the MoE rule below."),
    ("GPT OSS 120B: model preset gpt-oss-120b (Megatron-Bridge GPTOSSBridge: 36 MoE blocks of 128 experts of 2880, "
     "top-4, biases on q/k/v/o, the experts and the router, a learned sink logit per head, 128-key sliding-window "
     "blocks alternating with full-attention ones, clamped SwiGLU, V = 201088 untied); expert TP 1; recompute_modules "
     "of each row's config (nemo_recompute_ranges()): layernorm + moe_act on GB200, B200 and H100 BF16 (26.02-"
     "26.04.01), none on GB300, B300 and the GB200 MXFP8 runs (26.06-26.08), and a GPT OSS row with no entry is "
     "skipped (its recompute unknown); EP overlap on for GB200 BF16 26.04 / 26.04.01 and GB300 / GB200 MXFP8 26.06-"
     "26.08 (nemo_ep_overlap_ranges()); the experts through Transformer Engine's op fuser (training.fused_grouped_mlp: "
     "the cuteDSL fused grouped MLP, use_transformer_engine_op_fuser) for GB300 / GB200 MXFP8 26.06-26.08 "
     "(nemo_fused_grouped_mlp_ranges()), else Megatron-Core's eager TEGroupedMLP path with its clamp and per-expert "
     "fc2-bias passes (the latter in fp32 under the flex dispatcher, whose router probabilities are fp32); RoPE unfused (YaRN: Megatron-Bridge turns apply_rope_fusion off). Skipped (nemo_skipped_runs()): the 26.06.01 MXFP8 rows, which the table "
     "footnotes as a known regression (NVIDIA/cudnn-frontend issue 256: the cuteDSL fused grouped MLP's backward "
     "grouped-GEMM dGLU kernel 10x slower from cudnn-frontend 1.24.0), and the 25.11 rows, whose "
     "printed runs (seq 8192 on GB300 / GB200, ep 8 on B200, mbs 4 with GA 2 on H100) match no config of that "
     "release. The token dispatcher of each config (nemo_moe_dispatcher_ranges()): Megatron-Core's alltoall "
     "dispatcher on GB300 / GB200 / H100 BF16, B300 / B200 at ep64 (26.02) and B200 BF16 26.04-26.04.01, HybridEP "
     "(flex) on B300 ep8, B200 26.02.01 and the MXFP8 runs; the alltoall dispatcher's sort and unsort of the "
     "received tokens by local expert are costed (training.moe_token_dispatcher). Not modelled, recorded only: "
     "HybridEP's own kernels (its all-to-alls are costed as NCCL ones), Transformer Engine CUDA graphs, the MXFP8 "
     "runs' full-iteration graphs with experts padded to capacity factor 1.5 and paged stashing, fp8 dot-product "
     "attention."),
    ("Qwen3 / DeepSeek-V3 / Kimi K2 token dispatcher (nemo_moe_dispatcher_ranges()): Megatron-Core's alltoall "
     "dispatcher, with its sort and unsort of the received tokens by local expert, for Qwen3 235B-A22B on B200 "
     "26.02-26.04.01, B300 26.02-26.02.01 and H100 26.02-26.04.01; HybridEP / DeepEP (flex, no sort) for the other "
     "Qwen3 rows of 26.02-26.08, every DeepSeek-V3 MXFP8 row and Kimi K2; the Qwen3 30B H100 26.02 / 26.02.01 rows "
     "(ep8 pp2 vp12, no such variant in their release's configs) and the 25.x rows are unstated (no sort)."),
    ("regimes: every MoE row is also counted under its host CPU (x86 on DGX H100/B200/B300, Grace on "
     "GB200/GB300) and micro-batch (1 or >= 2). Every MoE row is predicted with its blocks' eager host issue in the "
     "step (the hybrid stacks' per span between MoE syncs, cost_models/hybrid_issue.py; cost_models/moe_issue.py: cost_models/host.py's counted ops at x86 or Grace "
     "per-op seconds, each MoE block forward's excess over its GPU time exposed at the dispatcher's host sync); the "
     "rows do not state CUDA graphs, so the Grace rows whose configs capture attention, router and preprocess are "
     "charged those ops eagerly. Megatron-Bridge's Qwen3 performance configs (scripts/performance, qwen3 workload_base_configs at "
     "v0.2.0 = 25.11, v0.3.0 = 26.02, v0.3.1 = 26.02.01) run HybridEP with Transformer Engine CUDA graphs of the "
     "router and dispatch preprocess on GB200/GB300, but on DGX B200/B300/H100 Megatron-Core's alltoall dispatcher "
     "(the model provider's default; 235B-A22B until r0.5.0, 30B-A3B B200 until 26.02) or DeepEP (30B-A3B H100, "
     "26.02), whose dropless dispatch blocks the host before every MoE layer's all-to-all (token_dispatcher.py "
     "cuda_sync_point 'before_ep_alltoall'; DeepEP's dispatch: 'the CPU will wait for GPU's signal to arrive', "
     "fused_a2a.py; HybridEP skips its D2H wait only when given the permuted-token count). The same printed layouts ran 1.8-2.9x faster in another release: Qwen3 30B-A3B H100 pp2 vp12 ep8 mb1 "
     "5,113 (26.02) vs 9,058 tok/s/GPU (26.02.01); B200 ep8 mb1 9,299 (25.11) and 9,691 (26.02) vs 18,066 with "
     "padded token drop (25.09: no host sync); Qwen3 235B-A22B B300 pp8 ep8 2,644-2,691 at vp4 with EP overlap "
     "(26.02, 26.02.01) vs 4,865-5,936 at mb2 without (26.04, 26.04.01). Every such row's EP group lies inside one "
     "8-GPU NVLink node, so the shortfall is the host side of the software release, not the EP fabric; the x86 "
     "micro-batch-1 regime holds the large positive errors. NVIDIA says as much of the three Qwen3 235B-A22B "
     "B200/B300 rows with EP overlap: Megatron-Bridge PR #1760 'Disable moe_a2a_overlap due to CPU overhead' "
     "(B200 MXFP8 step 20.1 -> 16.9 s), issue #3399 (B300: 'moe_a2a_overlap and VP degraded perf'). Where EP spans "
     "nodes the all-to-all is costed on the fabric: Megatron-Bridge PR #3868 timed Qwen3 30B-A3B BF16 on 16 H100 "
     "(EP 16 over two nodes, alltoall dispatcher, mbs 1, GBS 1024) at 41.36 s per step eager, and trainsim "
     "predicts 34.1 s for that run."),
    ("Nemotron 3 Nano (hybrid Mamba-2 / MoE / attention, preset nemotron-3-nano-30b-a3b: Megatron-Bridge's "
     "HybridModelProvider in recipes/nemotronh/h100/nemotron_3_nano.py @067f987d): every printed layout is tp1 pp1 "
     "ep8 with the config's etp 1, the perf defaults' fp32 Adam and no EP overlap; recompute none on Blackwell "
     "(MXFP8, mbs 4 on GB300/B300, 2 on GB200/B200), 'moe' + 'layernorm' (+ 'core_attn' + 'moe_act' from PR #2662, "
     "26.04 on) on H100 FP8 (nemo_recompute_ranges()). Mamba-2 layers are costed by cost_models/mamba.py (SSD scan "
     "as a roofline of its FLOPs and kernel-by-kernel HBM bytes, one overhead per kernel); the hybrid layers' eager host issue is in the step "
     "(cost_models/hybrid_issue.py: hidden behind the Mamba layers between two MoE syncs; an upper bound, as the runs "
     "capture attention, Mamba and router in CUDA graphs). Nemotron 3 Super (preset "
     "nemotron-3-super-120b-a12b: the Hugging Face config.json the recipe reads through AutoBridge, LatentMoE of "
     "width 1024 with 512 experts top-22, two MTP depths sharing one '*E' module): tp1 ep64 (GB300, B200), tp2 ep64 "
     "SP (GB200), tp1 ep8 (B300), etp 1, mbs 1, GBS 512; recompute none, B200 'moe_act' + 'layernorm'; the 26.08 "
     "GB300/GB200 MXFP8 configs run the experts through TE's op fuser. Nemotron 3 Ultra is skipped (its "
     "config.json values are not in the read sources). Nemotron 3.5 "
     "Lightning is Nano's architecture with two MTP depths sharing one '*E' module (preset "
     "nemotron-3.5-lightning-30b-a3b; its GB200 MXFP8 config is Nano's plus the MTP). NVFP4 rows skip for the "
     "dtype."),
    ("MoE EP all-to-all overlap (all MoE rows: DeepSeek-V3, Kimi K2, Qwen3 30B-A3B / 235B-A22B): "
     "training.ep_comm_overlap (Megatron-Core --overlap-moe-expert-parallel-comm --delay-wgrad-compute, the "
     "combined 1F1B schedule) exactly where the row's Megatron-Bridge performance config set moe_a2a_overlap "
     "(scripts/performance: WorkloadBaseConfig.moe_a2a_overlap, default False, applied by "
     "_set_moe_a2a_overlap_overrides; 25.09: a2a_1f1b / moe_a2a_1f1b_overrides), read per (model, system, "
     "precision) at the row's release (releases = Megatron-Bridge branches r0.1.0 25.09 ... r0.6.0 26.08; "
     "config versions dated by their parallel layout, which equals the row's, and by dated PRs; "
     "nemo_ep_overlap_ranges(), with sources): on for DeepSeek-V3 H100 25.09 (a2a_1f1b for H100, run_script.py "
     "@27dfb3df), B200 MXFP8 pp8 vp2 26.04.01 (B200_FP8_MX_V2), GB300 and GB200 MXFP8 from 26.06 (PRs #3983, "
     "#4226; #4330 measured the GBS 15360 row on 26.06.rc7); Qwen3 30B-A3B and 235B-A22B GB300 and GB200 "
     "MXFP8 from 26.06 (PR #4249 for 26.06; PR #4606); Qwen3 235B H100 25.11-26.04.01 (ep 32 folded over "
     "dp 16 x tp/etp 2, see the expert tensor parallelism note); Qwen3 235B B200 25.11 (pp8 vp2; PR #1760 turned it off after 25.11) and B300 26.02 / "
     "26.02.01 (pp8 vp4; PR #2669 turned it off after 26.02). Off elsewhere: every other config read has "
     "moe_a2a_overlap False (DeepSeek-V3 GB300/GB200 MXFP8 before 26.06, B300 incl. the 26.06 pp8 mbs-2 row, "
     "B200 pp16, BF16; Kimi K2 GB300 mbs 2 -- its moe_a2a_overlap came with r0.6.0, PR #5168; Qwen3 "
     "GB/B200 before 26.06, H100 30B pp1 ep16; all 25.09 rows but DeepSeek-V3 H100). No row combines the flag "
     "with pp > 1 and no model chunks (Megatron-Core and trainsim refuse that; such a row would stay exposed). "
     "Left off because the release's config could not be pinned down (nemo_ep_overlap_undated()): Qwen3 30B "
     "B300 MXFP8 26.06 (PR #4606 enabled it on r0.5.0 after 2026-07-06), Qwen3 30B H100 26.02 / 26.02.01 "
     "(pp2 vp12 GBS 1024) and 25.11 (pp2 vp24), DeepSeek-V3 GB200 FP8-MX 25.11 (pp8 vp4 ep32: no config "
     "with that layout; its source guide sets no EP overlap). Rows on carry 'a2a-ov' in their label."),
)


def nemo_llama_flops_per_token(model: ModelSpec, seq: int) -> float:
    """NeMo's model FLOPs per token of a Llama (GQA, SwiGLU) step: 3 x 2 x (QKV + causal attention + out
    projection + gated MLP) per layer + the logits (NeMo flops_formulas llama3: recompute not counted)."""
    h, L, f, V = model.hidden, model.num_layers, model.ffn, model.vocab_size
    attn = 6 * L * h * h * (1 + 2 * model.kv_heads / model.num_heads + seq / h + 1)
    mlp = 6 * L * h * f * 3
    return attn + mlp + 6 * h * V


def load_nemo(path: Path | None = None, *, name: str = "nemo") -> Dataset:
    """Megatron-Bridge performance tables: tokens/s per GPU of modern Megatron-Core (H100 FP8, Blackwell)."""
    rows = read_rows(path or external_table("nemo", "nemo_megatron_bridge_perf.csv"))
    cases = [_nemo_case(r) for r in rows]
    return Dataset(name=name, title="NVIDIA Megatron-Bridge (NeMo) performance tables", metric="tokens_per_s_per_gpu",
                   unit="tok/s/GPU", citation=NEMO_CITATION, notes=NEMO_NOTES, cases=tuple(cases),
                   higher_is_better=True)


@dataclass(frozen=True)
class _Row:
    """The cells of one table row the mapping reads, each as its first value (parenthesised alternatives and
    footnote markers dropped), and the row's label and report category."""

    rid: str
    model_cell: str | None
    model: str
    system: str
    gpus: int | None
    published: float | None
    tflops: float | None
    precision: str
    container: str | None
    section: str
    label: str
    category: str
    ints: dict[str, int | None]


def _parse_row(r: dict) -> _Row:
    model_name = first_value(r.get("model"))
    system = (r.get("system") or "").strip()
    gpus = _int(first_value(r.get("num_gpus")))
    prec_text = first_value(r.get("precision")) or (r.get("precision") or "")
    section = (r.get("section") or "").replace(" Performance", "")
    tag = re.search(r"\(([^)]*)\)", r.get("model") or "") if model_name in nemo_pipeline_layouts() else None
    label = (f"{model_name}{f' ({tag.group(1).strip()})' if tag else ''} {system.replace('DGX-', '')} n={gpus} "
             f"{prec_text}")
    if section == "Pre-Training":
        section = ""
    else:
        label += f" {section}"
    category = f"{system.replace('DGX-', '')} {_dtype(prec_text)}"
    ints = {k: _int(first_value(r.get(k))) for k in ("gbs", "mbs", "seq_len", "fsdp", "tp", "pp", "cp", "vp", "ep",
                                                      "etp")}
    return _Row(r.get("row_id", "?"), r.get("model"), model_name, system, gpus,
                _num(first_value(r.get("tokens_per_s_per_gpu"))), _num(first_value(r.get("model_tflops_per_gpu"))),
                prec_text, r.get("nemo_container"), section, label, category, ints)


def _dtype(precision: str) -> str:
    """The training dtype of a precision cell: NVFP4 -> nvfp4, BF16 -> bf16, else fp8 (FP8 / FP8-CS / FP8-MX /
    MXFP8 / 'not stated')."""
    text = precision.upper()
    return "nvfp4" if "FP4" in text else ("bf16" if text == "BF16" else "fp8")


# Table models whose performance config turns fp8 primary weights off: Kimi K2 trains with Muon, and
# scripts/performance/configs/kimi/kimi_llm_pretrain.py (r0.3.0 on) sets ``fp8_param_gather = False`` for Muon with
# MXFP8 ("MXFP8's fp8_param_gather and reuse_grad_buf_for_mxfp8_param_ag require DistributedOptimizer
# infrastructure, incompatible with Muon's LayerWiseDistributedOptimizer").
NEMO_NO_FP8_PARAMS = ("Kimi_K2",)


def _fp8_settings(precision: str, model: str) -> dict:
    """Transformer Engine recipe and fp8 primary weights of an fp8 row: the performance scripts build FP8-CS from
    ``bf16_with_fp8_current_scaling_mixed`` and FP8-MX from ``bf16_with_mxfp8_mixed`` (Megatron-Bridge
    scripts/performance/utils/precision.py ``get_precision_config``), and both set ``fp8_param_gather = True``
    (src/megatron/bridge/training/mixed_precision.py, from v0.1.0rc2, before the 25.09 release) -- MXFP8 with
    ``reuse_grad_buf_for_mxfp8_param_ag`` --, except for NEMO_NO_FP8_PARAMS."""
    if _dtype(precision) != "fp8":
        return {}
    return {"fp8_recipe": "mxfp8" if "MX" in precision.upper() else "tensorwise",
            "fp8_param_gather": model not in NEMO_NO_FP8_PARAMS}


def _skip_reason(row: _Row) -> str | None:
    """Why a complete row is not predicted (LoRA without settings, a model or system trainsim has no preset for), or
    None."""
    if row.section == "LoRA" and nemo_lora(row.model, row.container or "") is None:
        return f"no LoRA settings for {row.model} {row.container} in nemo_lora.csv: the recipe's adapters are unknown"
    if row.model in nemo_unmodelled():
        return nemo_unmodelled()[row.model]
    if row.model not in nemo_models():
        return f"no model preset for {row.model!r}"
    run = nemo_skipped_runs().get((row.model, row.system, row.precision, row.container or ""))
    if run is not None:
        return run
    if row.system not in nemo_systems():
        return f"no cluster preset for {row.system!r}"
    if None in (row.ints["gbs"], row.ints["mbs"], row.ints["seq_len"]):
        return "incomplete batch"
    return None


# The table's count cells: 'n/a' or empty where a setting does not apply (no pipeline: vp n/a), else a whole
# number -- at least 0 for fsdp (0 = the distributed optimizer), at least 1 for the others.
COUNT_COLUMNS = ("num_gpus", "gbs", "mbs", "seq_len", "fsdp", "tp", "pp", "cp", "vp", "ep", "etp")


def _unreadable(r: dict) -> str | None:
    """Why a row's count cells or its ``other_columns_json`` (a JSON object of the source table's other columns)
    cannot be read, naming the column and the value; None when they can. A count read as absent would be
    replaced by its default (fsdp 0, tp 1), which the table does not say."""
    for key in COUNT_COLUMNS:
        text = first_value(r.get(key))
        if text.lower() in ("", "n/a"):
            continue
        v = _int(text)
        if v is None or v < (0 if key == "fsdp" else 1):
            return f"{key}: {r.get(key)!r} is not a {'whole number >= 0' if key == 'fsdp' else 'positive whole number'}"
    extra = (r.get("other_columns_json") or "").strip()
    try:
        ok = not extra or isinstance(json.loads(extra), dict)
    except ValueError:
        ok = False
    return None if ok else f"other_columns_json: {extra[:40]!r} is not a JSON object"


def _nemo_case(r: dict) -> Case:
    row = _parse_row(r)
    if why := _unreadable(r):
        return Case(row.rid, row.label, row.published or float("nan"), skip_reason=why, category=row.category)
    if row.published is None or row.gpus is None:
        return Case(row.rid, row.label, row.published or float("nan"), skip_reason="incomplete row",
                    category=row.category)
    skip = _skip_reason(row)
    if skip is not None:
        return Case(row.rid, row.label, row.published, skip_reason=skip, category=row.category)
    raw, label, rc_modules = _scenario_mapping(row)
    why_not = _mla_settings(row, raw, rc_modules) if row.model in nemo_pipeline_layouts() else None
    if why_not is None and rc_modules is None and nemo_recompute_known(row.model):
        # A refusal that holds whatever the recompute (the dtype of a hybrid stack, say) is the row's first reason.
        why_not = scenario_or_skip(raw, row.rid)[1] or (
            f"no recompute_modules for {row.model} {row.system} {row.precision} {row.container} in "
            "nemo_recompute_ranges(): the run's recompute is unknown")
    scenario, why = (None, why_not) if why_not else scenario_or_skip(raw, row.rid)
    m = load_model(raw["model"])
    secondary, fns = {}, {}
    if row.tflops is not None:
        fpt = (nemo_llama_flops_per_token(m, row.ints["seq_len"]) if not (m.is_moe or row.section == "LoRA")
               else row.tflops * 1e12 / row.published)
        secondary["model_tflops_per_gpu"] = row.tflops
        fns["model_tflops_per_gpu"] = lambda tok_s, f=fpt: tok_s * f / 1e12
    return Case(row.rid, label, row.published, scenario=scenario, skip_reason=why, secondary=secondary,
                secondary_fns=fns, category=row.category + (" MoE" if m.is_moe else " dense"),
                regimes=_moe_regimes(row) if m.is_moe else ())


def _moe_regimes(row: _Row) -> tuple[str, ...]:
    """A MoE row's host regime: the host CPU that issues its kernels (x86 DGX or Grace NVL72, ClusterSpec.host_cpu)
    and whether it runs micro-batch 1, where a MoE block's host work is largest against its GPU work (NEMO_NOTES,
    'regimes')."""
    host = "Grace" if load_cluster(nemo_systems()[row.system][0]).host_cpu == "grace" else "x86"
    return (f"MoE {host} host, micro-batch {'1' if row.ints['mbs'] == 1 else '>= 2'}",)


def _scenario_mapping(row: _Row) -> tuple[dict, str, tuple[str, ...] | None]:
    """The scenario mapping of a row (its printed layout and batch, the recipe settings joined to it), its label
    with the layout appended, and the recompute modules of its config (MoE rows; None when no entry)."""
    ints, model_name, system = row.ints, row.model, row.system
    tp, pp, cp = ints["tp"] or 1, ints["pp"] or 1, ints["cp"] or 1
    vp, ep, fsdp = ints["vp"] or 1, ints["ep"] or 1, ints["fsdp"] or 0
    dtype = _dtype(row.precision)
    cpreset, per_rack = nemo_systems()[system]
    # moe_a2a_overlap of the row's config (nemo_ep_overlap_ranges()); Megatron-Core (and trainsim) refuse it with
    # pp > 1 and no model chunks, so such a row would keep the all-to-all exposed (no table row is in that case).
    ep_overlap = (ep > 1 and nemo_ep_overlap(model_name, system, row.precision, row.container or "")
                  and (pp == 1 or vp > 1))
    overrides = {}
    if per_rack and row.gpus > load_cluster(cpreset).gpus_per_node:
        overrides = {"gpus_per_node": per_rack, "scale_out": {"nics_per_node": per_rack}}
    moe = load_model(nemo_models()[model_name]).is_moe
    # MoE rows: the config's expert tensor parallelism (nemo_expert_tp_by_model(); the etp cell when printed) and its
    # selective-recompute modules (nemo_recompute_ranges(); () = none; no entry: recompute none, see the notes).
    etp = nemo_expert_tp(model_name, ints["etp"], tp) if moe else None
    rc_modules = nemo_recompute_modules(model_name, system, row.precision, row.container or "") if moe else None
    raw = {
        "model": nemo_models()[model_name],
        "cluster": _cluster(cpreset, row.gpus, **overrides),
        "layout": {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "vpp": vp, **({"etp": etp} if etp else {})},
        "training": {"seq_len": ints["seq_len"], "global_batch": ints["gbs"], "micro_batch": ints["mbs"],
                     "dtype": dtype, **_fp8_settings(row.precision, model_name), "recompute": "none", "sequence_parallel": tp > 1,
                     "tp_comm_overlap": tp > 1 and dtype != "nvfp4",
                     "ep_comm_overlap": ep_overlap,
                     "fused_grouped_mlp": moe and nemo_fused_grouped_mlp(model_name, system, row.precision,
                                                                         row.container or ""),
                     "moe_token_dispatcher": (nemo_moe_dispatcher(model_name, system, row.precision,
                                                                  row.container or "") if moe else None),
                     **({"zero": 3} if fsdp > 0 else {}), "distributed_optimizer": fsdp == 0,
                     "schedule": "interleaved" if vp > 1 else "1f1b", "flash_attention": True,
                     "dropout": False, "framework": "megatron", "grad_dtype": NEMO_GRAD_DTYPE,
                     "offload_activation_layers": (nemo_activation_offload().get((model_name, system), 0)
                                                   if fsdp and dtype == "fp8" else 0)},
    }
    if rc_modules:
        raw["training"].update(recompute="selective", recompute_modules=list(rc_modules))
    lora = nemo_lora(model_name, row.container or "") if row.section == "LoRA" else None
    if lora:
        raw["training"].update(lora_rank=lora["lora_rank"], lora_alpha=lora["lora_alpha"],
                               lora_target_modules=list(lora["lora_target_modules"]))
    label = row.label + (f" tp{tp} pp{pp}" + (f" cp{cp}" if cp > 1 else "") + (f" v{vp}" if vp > 1 else "")
                         + (f" ep{ep}" if ep > 1 else "") + (f" etp{etp}" if etp and etp != tp else "")
                         + (" fsdp" if fsdp else "") + f" mb{ints['mbs']}" + (" a2a-ov" if ep_overlap else "")
                         + (f" rc:{'+'.join(rc_modules)}" if rc_modules else "")
                         + (f" lora r{lora['lora_rank']}:{'+'.join(lora['lora_target_modules'])}" if lora else ""))
    return raw, label, rc_modules


def _mla_settings(row: _Row, raw: dict, rc_modules: tuple[str, ...] | None) -> str | None:
    """DeepSeek-V3 / Kimi K2: MTP from the row's label, the recipe's pipeline layout, the config's recompute modules
    and the recipe's optimizer precision, no TP comm overlap (NEMO_NOTES say why), set on ``raw``; why the row
    cannot be predicted (no layout or no recompute entry for it), or None."""
    mtp = nemo_mtp_layers(row.model_cell)
    stage_layers, layout_or_why = nemo_stage_layers(row.model, row.ints["pp"] or 1, row.ints["vp"] or 1, mtp)
    why_not = None
    if stage_layers is None:
        why_not = layout_or_why
    elif rc_modules is None:
        why_not = (f"no recompute_modules for {row.model} {row.system} {row.precision} {row.container} in "
                   "nemo_recompute_ranges(): the run's recompute is unknown")
    raw["model"] = {"preset": nemo_models()[row.model], "mtp_layers": mtp}
    raw["layout"]["stage_layers"] = list(stage_layers or ())
    raw["training"].update(tp_comm_overlap=False, optimizer=nemo_optimizer().get(row.model, "adam"))
    if row.model in nemo_mla_optimizer_bytes():
        raw["training"]["optimizer_bytes_per_param"] = nemo_mla_optimizer_bytes()[row.model]
    return why_not
