"""Published runs as validation cases: each bundled CSV becomes scenarios plus the value the source printed.

A dataset is a list of ``Case``s. A case is one published row: its ``row_id``, the published value of the
dataset's primary metric (step time, tokens/s, samples/s/GPU or bus bandwidth), and what trainsim needs to
predict it (a Scenario, or a collective to time). Rows trainsim cannot represent stay in the list with a
``skip_reason`` so the report shows them instead of dropping them silently.

Every modelling choice a source leaves open is made here, once per dataset (never per row), and written
into ``Dataset.notes`` so `trainsim validate` prints it next to the numbers.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainsim.data import VALIDATION_DIR_ENV, external_validation_path, validation_path
from trainsim.validation import common_runs, vtrain
from trainsim.validation.cells import cluster as _cluster
from trainsim.validation.cells import integer as _int
from trainsim.validation.cells import num as _num
from trainsim.specs import ClusterSpec, Scenario, SpecError, build_scenario, load_cluster, load_model, preset
from trainsim.specs.errors import did_you_mean
from trainsim.specs.safe_read import read_csv_rows

# --- the shapes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CollectiveCase:
    """One nccl-tests measurement: an op of ``nbytes`` over ``num_gpus`` GPUs of ``cluster``."""

    op: str
    nbytes: float
    num_gpus: int
    cluster: ClusterSpec
    algo: str | None = None
    # GPUs one host thread drives (nccl-tests -g): the thread enqueues the collective on each in turn, every
    # iteration (cost_models.collectives.single_thread_issue_s).
    gpus_per_thread: int = 1


@dataclass(frozen=True)
class Case:
    """One published row and what is needed to predict it."""

    row_id: str
    label: str
    published: float
    scenario: Scenario | None = None
    collective: CollectiveCase | None = None
    skip_reason: str | None = None
    group: str | None = None  # rows compared with each other (zero-bubble: same model and m)
    category: str = ""  # for the per-category MAPE lines of the report (table, GPU type, size class)
    # Secondary metrics on the source's own basis: name -> published value. ``secondary_fns`` turn the
    # predicted primary value into the same quantity (e.g. SC21 eq. 3 TFLOP/s from a step time).
    secondary: dict[str, float] = field(default_factory=dict)
    secondary_fns: dict[str, Callable[[float], float]] = field(default_factory=dict, compare=False)
    # The predicted value of a row whose quantity is not the dataset's step metric (e.g. peak memory on the
    # counter the row's source printed): prediction -> value in the dataset's unit.
    value_fn: Callable[[Any], float] | None = field(default=None, compare=False)
    # Further groupings the report prints beside the category (e.g. "micro-batch 1", "TP 8", "layers 24").
    regimes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Dataset:
    """A named set of cases with one primary metric, its citation and the documented assumptions."""

    name: str
    title: str
    metric: str  # step_time_s | tokens_per_s | samples_per_gpu_per_s | busbw_GBps | peak_memory_gib
    unit: str
    citation: str
    notes: tuple[str, ...]
    cases: tuple[Case, ...]
    higher_is_better: bool = False
    # The report also prints the step's per-block, per-micro-batch and per-step parts, published beside
    # predicted (validation.structure), for tables whose rows span a grid of layer counts and micro-batches.
    structure: bool = False

    @property
    def active(self) -> list[Case]:
        return [c for c in self.cases if c.skip_reason is None]

    @property
    def skipped(self) -> list[Case]:
        return [c for c in self.cases if c.skip_reason is not None]


# --- helpers ---------------------------------------------------------------------------------------

def _read_csv(path: Path) -> list[dict[str, str]]:
    return read_csv_rows(path, "dataset")


def _scenario(raw: dict, name: str) -> tuple[Scenario | None, str | None]:
    """build_scenario, turning a SpecError into a skip reason."""
    try:
        return build_scenario({**raw, "name": name}), None
    except SpecError as e:
        return None, f"not representable: {e}"


# --- SC21 (Narayanan et al., Megatron-LM on A100) -----------------------------------------------------

SC21_CITATION = ('Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using '
                 'Megatron-LM", SC21 (arXiv:2104.04473), Tables 1-2; run configurations from the authors\' '
                 'reproduction scripts NVIDIA/Megatron-LM examples/sc21/run_table_1.sh and run_figure_12.sh')

# Micro-batch size and layers per virtual pipeline stage of Table 1, exactly as the authors' reproduction
# script examples/sc21/run_table_1.sh (NVIDIA/Megatron-LM, commit 79a3bb6b) sets them:
# model size -> (MBS, --num-layers-per-virtual-pipeline-stage or None for the plain 1F1B schedule).
SC21_TABLE1_ARTIFACT = {
    "sc21_t1_1": (16, None), "sc21_t1_2": (16, None), "sc21_t1_3": (16, None), "sc21_t1_4": (8, None),
    "sc21_t1_5": (4, None), "sc21_t1_6": (2, 5), "sc21_t1_7": (2, 5), "sc21_t1_8": (1, 3),
    "sc21_t1_9": (1, 1), "sc21_t1_10": (1, None),
}
# Table 2's PTD-P rows (micro-batch 1 per the paper): layers per virtual stage of the same model on the
# same layout in the authors' scripts -- 175B TP8/PP12: run_figure_12.sh (2 layers per virtual stage);
# 530B TP8/PP35: run_table_1.sh (1 layer per virtual stage).
SC21_TABLE2_LAYERS_PER_VSTAGE = {96: 2, 105: 1}


def _smallest_interleave(layers_per_stage: int) -> int:
    """The 'blind' rule: smallest interleaving depth > 1 that divides the stage's layers (1 if none)."""
    for v in range(2, layers_per_stage + 1):
        if layers_per_stage % v == 0:
            return v
    return 1


def sc21_eq3_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """SC21 eq. 3: FLOPs of one iteration with full recompute, GEMMs only (the paper's TFLOP/s basis)."""
    return 96.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


SC21_UNKNOWNS = ("blind", "scripts")


_SC21_NOTES = (
    ("metric: seconds per iteration. The CSV's step_time_s is eq. 3 FLOPs / (GPUs x published TFLOP/s), "
     "so the published TFLOP/s column is the same comparison on the paper's own FLOP basis."),
    ("hardware: cluster preset dgx-a100 (A100-SXM4-80GB, NVLink3/NVSwitch 300 GB/s, 8x HDR 200 Gb/s) "
     "with Selene's full-bisection fat tree (the rows' gpu_type and inter_node_link); fp16; no FlashAttention "
     "(2021: materialised s x s scores, fused softmax) and dropout 0.1 as in Megatron's GPT defaults; full "
     "activation recomputation."),
    ("software: PTD-P rows framework megatron-2021 (Megatron-LM of the paper: gradients all-reduced "
     "after the backward pass, unfused fp32 vocab-parallel cross-entropy, fp16 loss-scaled optimizer, blocking "
     "pipeline sends); ZeRO-3 rows framework deepspeed-2021 (the ZeRO-3 of early 2021: per-tensor gathers and "
     "reduce buckets serialized with compute; see TrainingSpec.framework)."),
)
_COMMON_NOTES = (
    ("metric: seconds per step as printed (step_time_s), else global batch tokens / the printed tokens/s, else "
     "the step's FLOPs / (GPUs x the printed TFLOP/s per GPU) when tflops_basis names a basis trainsim knows "
     "(SC21 eq. 3, PaLM model FLOPs)."),
    ("hardware: the cluster preset of each row's gpu_type (A100 40/80GB, H100, H800, H200, B200, B300, "
     "GB200, GB300, MI300X), with gpus_per_node and the NICs of inter_node_link when stated; rows naming "
     "another accelerator are skipped."),
    ("model: the row's architecture columns (kv_heads for GQA); Llama-style blocks (SwiGLU, RMSNorm, RoPE, "
     "no biases) when model_name names such a family, else GPT-style; ffn 4h and vocab 51,200 when absent."),
    ("layout and recipe: tp, pp, cp, ep, vp_interleave, sequence_parallel, micro_batch, recompute, "
     "zero_or_sharding, pipeline_schedule and precision as the row states them. Framework, FlashAttention "
     "and dropout follow the source's year (arXiv id or a year in the source columns): <= 2021 "
     "megatron-2021 / deepspeed-2021, 2022 megatron-2022, later or unknown megatron (Megatron-Core); "
     "FSDP rows pytorch-fsdp up to 2023, torch after; FlashAttention from 2023, dropout up to 2022 "
     "(trainsim/validation/common_runs.py)."),
)
_BLIND_NOTE_SC21 = ("unknowns (set once, same rule for every row): micro-batch 1 (as the paper states for "
                    "its Table 2 PTD-P runs); interleaving depth = smallest v > 1 dividing the layers per "
                    "stage (1F1B when pp = 1). `--dataset sc21-scripts` uses the authors' script values.")
_BLIND_NOTE = ("unknowns (one rule for every row): micro-batch 1 when the row does not state it; for a "
               "pipelined Megatron row whose interleaving is not stated (and whose schedule is not stated as plain "
               "1F1B/GPipe), the smallest interleaving depth v > 1 dividing the layers per stage when the "
               "micro-batch count divides by pp (else, and for other stacks, no interleaving); when "
               "recomputation is not stated, the lightest of none, selective, full whose predicted memory fits.")
_SCRIPTS_NOTE = ("unknowns: micro-batch and interleaving depth of Table 1 are taken from the authors' "
                 "reproduction script examples/sc21/run_table_1.sh (e.g. 1.7B: MBS 16, no pipeline; 530B: "
                 "MBS 1, 1 layer per virtual stage; 1T: MBS 1, plain 1F1B). Table 2 PTD-P rows: MBS 1 "
                 "(paper), interleaving of the same model/layout in run_figure_12.sh / run_table_1.sh.")


def load_common_runs(path: Path, *, name: str = "sc21", unknowns: str = "blind") -> Dataset:
    """SC21 Tables 1-2, or any CSV in the common run schema of validation/README.md: step time per run.

    Each run row maps to a scenario through ``common_runs`` (its GPU, architecture, layout and recipe
    columns; the framework era from the source's year). The paper leaves two things open: the micro-batch size of Table 1 and the interleaving depth of every
    pipelined row. ``unknowns="blind"`` (the primary ``sc21`` dataset, issue 8's rule) sets them by one
    rule for all rows: micro-batch 1 (what the paper states for its Table 2 PTD-P runs) and the smallest
    interleaving depth v > 1 that divides the layers per pipeline stage (the paper ran the interleaved
    schedule for every pipelined row; the smallest depth is the least optimistic choice). ``"scripts"``
    (dataset ``sc21-scripts``) instead takes the values of the authors' reproduction scripts, to show how
    much the unknowns matter.
    """
    if unknowns not in SC21_UNKNOWNS:
        raise SpecError("dataset", f"unknowns must be one of {', '.join(SC21_UNKNOWNS)}, got {unknowns!r}")
    blind = unknowns == "blind"
    rows = _read_csv(path)
    cases: list[Case] = []
    for r in rows:
        rid = r.get("row_id", "?")
        if not common_runs.is_run_row(r):
            kind = r.get("record_type") or "unknown"
            cases.append(Case(rid, (r.get("description") or "")[:48], float("nan"),
                              skip_reason=f"{kind}: no step time with a full run configuration"))
            continue
        cases.append(_common_run_case(r, blind))
    is_sc21 = name.startswith("sc21")
    notes = list(_SC21_NOTES if is_sc21 else _COMMON_NOTES)
    if blind:
        notes.append(_BLIND_NOTE_SC21 if is_sc21 else _BLIND_NOTE)
    else:
        notes.append(_SCRIPTS_NOTE)
    if is_sc21:
        notes.append("Table 2 ZeRO-3 rows are DeepSpeed ZeRO-3 without model parallelism: zero=3, tp=pp=1, "
                     "the row's micro-batch (printed in Table 2, not an unknown), full recomputation.")
    title = "SC21 Megatron-LM on A100 (Tables 1-2)" if is_sc21 else f"common run schema: {path.name}"
    suffix = " -- unknowns from the authors' scripts" if not blind else ""
    return Dataset(name=name, title=title + suffix, metric="step_time_s",
                   unit="s", citation=SC21_CITATION if is_sc21 else str(path),
                   notes=tuple(notes), cases=tuple(cases))


def _source_step_flops(r: dict, gbs: int, layers: int, hidden: int) -> float | None:
    """FLOPs of one step on the row's own TFLOP/s basis, when ``tflops_basis`` names one trainsim knows: SC21
    eq. 3, or PaLM's model FLOPs 6N + 12*L*H*Q*T per token (H*Q = hidden; N from ``params_b``)."""
    basis = (r.get("tflops_basis") or "").lower()
    seq = _int(r.get("seq_len")) or 2048
    if "eq.(3)" in basis.replace(" ", ""):
        return sc21_eq3_flops(gbs, seq, layers, hidden, _int(r.get("vocab")) or 51200)
    n_params = _num(r.get("params_b"))
    if "palm" in basis and n_params:
        return gbs * seq * (6 * n_params * 1e9 + 12 * layers * hidden * seq)
    return None


def _common_run_case(r: dict, blind: bool) -> Case:
    """One run row: the mapping of common_runs, with the micro-batch and interleaving depth the row leaves
    open set by the unknowns rule (blind) or the SC21 authors' scripts. A cell that cannot be read skips the
    row with the column named."""
    rid = r["row_id"]
    label = f"{r.get('model_name') or '?'} n={r.get('num_gpus') or '?'}"
    try:
        return _common_run_case_checked(r, blind, rid)
    except SpecError as e:
        return Case(rid, label, common_runs.published_step_time(r) or float("nan"),
                    skip_reason=f"not representable: {e}")


def _blind_interleave(layers: int, pp: int) -> int:
    """The unknowns rule for a pipelined row: the smallest depth v > 1 whose pp*v chunks split the layers
    evenly (or with the first and last chunk one layer short, Megatron's uneven split); 1 when none does."""
    for v in range(2, layers // pp + 1):
        if layers % (pp * v) == 0 or (layers + 2) % (pp * v) == 0:
            return v
    return 1


def _lightest_fitting_recompute(raw: dict, rid: str) -> str:
    """The unknowns rule for a row that does not state recomputation: the lightest of none, selective and full
    whose predicted memory fits the GPU, as whoever ran it would choose; none when not even full fits (then the
    row's unstated sharding or offload, not recomputation, is what the model misses)."""
    from trainsim.cost_models.memory import peak_bytes

    for rc in ("none", "selective", "full"):
        trial = {**raw, "training": {**raw["training"], "recompute": rc}}
        scenario, _ = _scenario(trial, rid)
        if scenario is not None and peak_bytes(scenario) <= scenario.cluster.gpu.memory_bytes:
            return rc
    return "none"


def _common_run_case_checked(r: dict, blind: bool, rid: str) -> Case:
    layers, hidden, heads = (common_runs.whole(r, k) for k in ("layers", "hidden", "heads"))
    gpus, gbs = common_runs.whole(r, "num_gpus"), common_runs.whole(r, "global_batch_seqs")
    tp, pp = common_runs.degree(r, "tp"), common_runs.degree(r, "pp")
    published = common_runs.published_step_time(r)
    label = f"{r.get('model_name') or '?'} n={gpus} tp{tp} pp{pp}"
    shape_ok = None not in (layers, hidden, heads, gpus, gbs) and min(layers, hidden, heads, gpus, gbs) > 0
    if published is None and shape_ok:
        # Only TFLOP/s printed: the step time on the source's own FLOP basis, when trainsim knows that basis.
        tflops, flops = _num(r.get("tflops_per_gpu")), _source_step_flops(r, gbs, layers, hidden)
        if tflops and tflops > 0 and flops:
            published = flops / (tflops * 1e12 * gpus)
    if published is None:
        return Case(rid, label, float("nan"), skip_reason="step_time_s: no positive step time (nor tokens/s, nor "
                                                          "TFLOP/s on a known tflops_basis)")
    if not shape_ok:
        return Case(rid, label, published, skip_reason="layers, hidden, heads, num_gpus, global_batch_seqs: "
                                                       "each must be a positive whole number")
    if pp <= 0:
        raise SpecError("pp", f"must be a positive whole number, got {pp}")
    zero, _ = common_runs.zero_stage(r)
    layers_per_stage = layers // pp if layers % pp == 0 else None
    mbs_col = common_runs.whole(r, "micro_batch")
    stated_vpp = common_runs.interleave_depth(r, pp, layers_per_stage)
    vstage_layers: int | None = None
    if blind:
        mbs = 1 if mbs_col is None else mbs_col
        framework = common_runs.framework_for(r, zero, common_runs.source_year(r))
        if stated_vpp is not None:
            vpp = stated_vpp
        elif not framework.startswith("megatron"):
            vpp = 1  # only Megatron interleaves by default (DeepSpeed's pipeline engine cannot; torch's 1F1B)
        elif layers_per_stage:
            vpp = _smallest_interleave(layers_per_stage)
        else:  # uneven stages (e.g. 126 layers on 16)
            vpp = _blind_interleave(layers, pp)
        mp = tp * pp * common_runs.degree(r, "cp")
        replicas = gpus // mp if mp > 0 and gpus % mp == 0 else 0
        if stated_vpp is None and vpp > 1 and replicas and mbs > 0 and (gbs // (mbs * replicas)) % pp:
            vpp = 1  # Megatron interleaves only when the micro-batch count divides by pp: the run used 1F1B
    else:
        if rid in SC21_TABLE1_ARTIFACT:
            mbs, vstage_layers = SC21_TABLE1_ARTIFACT[rid]
        else:
            mbs = mbs_col or 1
            if pp > 1:
                vstage_layers = SC21_TABLE2_LAYERS_PER_VSTAGE.get(layers)
        vpp = (layers_per_stage // vstage_layers) if (vstage_layers and layers_per_stage) else 1
    raw = common_runs.scenario_mapping(r, mbs, vpp)
    if blind and not common_runs.recompute_stated(r):
        raw["training"]["recompute"] = _lightest_fitting_recompute(raw, rid)
    cp, ep = common_runs.degree(r, "cp"), common_runs.degree(r, "ep")
    label += ((f" cp{cp}" if cp > 1 else "") + (f" ep{ep}" if ep > 1 else "") + f" mb{mbs}"
              + (f" v{vpp}" if vpp > 1 else "") + (" ZeRO-3" if zero == 3 else ""))
    scenario, why = _scenario(raw, rid)
    secondary, fns = {}, {}
    tflops = _num(r.get("tflops_per_gpu"))
    flops = _source_step_flops(r, gbs, layers, hidden)
    if tflops is not None and flops is not None:
        secondary["tflops_per_gpu"] = tflops
        fns["tflops_per_gpu"] = lambda step_s, f=flops, n=gpus: f / (step_s * n) / 1e12
    table = (r.get("source_table") or "").split("/")[0].strip() or "runs"
    category = f"{table} ZeRO-3" if zero == 3 else (f"{table} PTD-P" if table.startswith("Table 2") else table)
    return Case(rid, label, published, scenario=scenario, skip_reason=why, secondary=secondary,
                secondary_fns=fns, category=category)


# --- Llama 3 405B pre-training (Meta, 2024) -------------------------------------------------------------

LLAMA3_CITATION = ('Llama Team, AI @ Meta, "The Llama 3 Herd of Models" (arXiv:2407.21783), Sec. 3.3 and Table 4 '
                   '(scaling configurations, TFLOPs/GPU and BF16 MFU of Llama 3 405B pre-training on H100)')


def load_llama3(path: Path | None = None, *, name: str = "llama3") -> Dataset:
    """Llama 3 405B pre-training on 8K-16K H100s (bundled, not in the shared set): the common run schema mapping
    with the facts the paper states written into the rows (trainsim/data/validation/llama3_2024.csv)."""
    ds = load_common_runs(path or validation_path("llama3_2024.csv"), name=name)
    notes = ds.notes + (
        ("source facts: H100 80GB at 700 W, 8 per server, RoCE 400 Gb/s per GPU (dgx-h100 preset); TP 8, PP 16, "
         "CP 1/16, micro-batch 1, 16M tokens per batch; no activation checkpointing; FSDP sharding optimizer "
         "states and gradients with parameters kept after forward (zero 2, framework torch by the year rule); "
         "interleaving depth V = 8, derived from the text: the first chunk of the first stage holds only the "
         "embedding and the last chunk of the last stage only the output/loss, i.e. one layer per chunk, "
         "(126 + 2) / 16. Sequence parallelism assumed (the paper's TP cites Korthikanti et al.)."),
        ("metric: step time derived from the printed TFLOPs/GPU on the paper's basis, PaLM MFU (6N + 12*L*H*Q*T "
         "per token, N = 405e9): the tflops_per_gpu column is the same comparison. The CP row's DP is 8 "
         "(Table 4 prints 4, which does not multiply out to 16,384 GPUs); its CP all-gathers K/V before "
         "attention (Sec. 3.3.2: cp_comm allgather). Not modelled: Meta's own pipeline schedule (tunable N, "
         "asynchronous p2p), document masks, the 1:7 oversubscribed aggregation layer above 3,072-GPU pods."),
    )
    return Dataset(name=ds.name, title="Llama 3 405B pre-training on H100 (Meta 2024, Table 4)",
                   metric=ds.metric, unit=ds.unit, citation=LLAMA3_CITATION, notes=notes, cases=ds.cases)


# --- Korthikanti et al. 2022 (Megatron-LM on A100, sequence parallelism / selective recompute) ------------

KORTHIKANTI_CITATION = ('Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", '
                        'MLSys 2023 (arXiv:2205.05198), Table 3 (configurations), Table 5 and Sec. 6.3 (iteration times)')


def korthikanti_model_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Korthikanti et al. Appendix A: model FLOPs of one iteration (their MFU basis)."""
    return 72.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (12 * hidden * layers))


def load_korthikanti(path: Path | None = None, *, name: str = "korthikanti") -> Dataset:
    """Table 5 and the Sec. 6.3 data-parallel run: every layout choice is printed in the paper (Table 3)."""
    rows = _read_csv(path or validation_path("korthikanti_2022.csv"))
    cases = tuple(_korthikanti_case(r) for r in rows)
    notes = (
        ("metric: seconds per iteration as printed (Table 5 'Iteration Time'); MFU on the paper's Appendix A "
         "formula 72BsLh^2(1+s/6h+V/12hL) over 312 TFLOP/s."),
        ("hardware: cluster preset dgx-a100 (Selene: A100-SXM4-80GB, NVSwitch, 8x HDR 200 Gb/s per node), "
         "full-bisection fat tree; 16-bit (bf16 assumed: the paper says 'mixed precision'), with Megatron-LM's fp32 "
         "gradient accumulation and all-reduce, which its arguments.py forces for bf16 "
         "(accumulate_allreduce_grads_in_fp32); no FlashAttention (2022: fused softmax kernels), dropout 0.1 "
         "(Megatron GPT defaults)."),
        ("layout (all printed in Table 3 / Sec. 6): TP 8; PP 1/8/35/64; micro-batch 4 (22B) or 1; interleaved "
         "schedule with 3 model chunks for 175B and 530B, plain 1F1B otherwise; 'Full Recompute' = full "
         "activation recomputation without SP; 'Present Work' = SP + selective recomputation."),
        ("software: framework megatron-2022 (Megatron-LM of the paper: gradient all-reduce after the backward "
         "pass (Sec. 6.3), TP input-gradient reductions overlapped with the weight-gradient GEMM (Sec. 6.2), "
         "gradient-accumulation fusion, blocking pipeline sends, unfused cross-entropy); see "
         "cost_models/framework.py."),
    )
    return Dataset(name=name, title="Korthikanti et al. 2022: Megatron-LM on A100 (Table 5)", metric="step_time_s",
                   unit="s", citation=KORTHIKANTI_CITATION, notes=notes, cases=cases)


def _korthikanti_case(r: dict) -> Case:
    rid = r["row_id"]
    layers, hidden, heads = _int(r["layers"]), _int(r["hidden"]), _int(r["heads"])
    vocab, seq = _int(r["vocab"]) or 51200, _int(r["seq_len"]) or 2048
    gpus, gbs, mbs = _int(r["num_gpus"]), _int(r["global_batch_seqs"]), _int(r["micro_batch"]) or 1
    tp, pp, vpp = _int(r["tp"]) or 1, _int(r["pp"]) or 1, _int(r["vp_interleave"]) or 1
    published = _num(r["step_time_s"])
    sp = (r.get("sequence_parallel") or "").strip().lower() == "yes"
    recompute = (r.get("recompute") or "full").strip().lower()
    label = f"{r['model_name']} n={gpus} tp{tp} pp{pp}" + (f" v{vpp}" if vpp > 1 else "") + \
        (" SP+selective" if sp else f" {recompute}")
    if None in (layers, hidden, heads, gpus, gbs) or published is None:
        return Case(rid, label, published or float("nan"), skip_reason="incomplete architecture or batch")
    raw = {
        "model": common_runs.model_mapping(r),
        "cluster": _cluster("dgx-a100", gpus, scale_out={"fabric": "fat-tree"}),
        "layout": {"tp": tp, "pp": pp, "vpp": vpp},
        "training": {"seq_len": seq, "global_batch": gbs, "micro_batch": mbs, "dtype": "bf16", "grad_dtype_bytes": 4,
                     "recompute": recompute, "sequence_parallel": sp, "zero": 0,
                     "schedule": "interleaved" if vpp > 1 else "1f1b", "flash_attention": False, "dropout": True,
                     "framework": "megatron-2022"},
    }
    scenario, why = _scenario(raw, rid)
    secondary, fns = {}, {}
    mfu = _num(r.get("mfu_pct"))
    if mfu is not None:
        flops = korthikanti_model_flops(gbs, seq, layers, hidden, vocab)
        secondary["mfu_pct"] = mfu
        fns["mfu_pct"] = lambda step_s, f=flops, n=gpus: 100 * f / (step_s * n * 312e12)
    category = "SP + selective" if sp else "full recompute"
    return Case(rid, label, published, scenario=scenario, skip_reason=why, secondary=secondary,
                secondary_fns=fns, category=category)


# --- MosaicML llm-foundry MPT benchmarks -----------------------------------------------------------

MOSAIC_CITATION = ("MosaicML llm-foundry, scripts/train/benchmarking/README.md (MPT training benchmarks, "
                   "throughput/MFU/HFU tables); architecture from scripts/train/yamls/pretrain/mpt-*.yaml")

# One cluster per GPU type (never per row). A100 sections: "1600 Gbps node-node interconnect (RoCE)" =
# 8 x 200 Gb/s per 8-GPU node, i.e. the DGX A100 layout. H100: the tables do not state the network; the
# runs were on MosaicML's CoreWeave HGX H100 nodes (mosaicml.com/blog/coreweave-nvidia-h100-part-1), whose
# nodes have 8 x 400 Gb/s InfiniBand -- the dgx-h100 preset.
MOSAIC_CLUSTERS = {
    "a100_40gb": ("dgx-a100", {"gpu": "a100-40gb"}),
    "a100_80gb": ("dgx-a100", {}),
    "h100_80gb": ("dgx-h100", {}),
}
# The peak each MFU was divided by (GPU_AVAILABLE_FLOPS in llm-foundry); Model TFLOP / MFU reproduces
# these for every row (tests check it): A100 312 TFLOP/s, H100 989 (bf16) and 1979 (fp8).
MOSAIC_PEAK_FLOPS = {("a100_40gb", "bf16"): 312e12, ("a100_80gb", "bf16"): 312e12,
                     ("h100_80gb", "bf16"): 989e12, ("h100_80gb", "fp8"): 1979e12}


def mosaic_flops_per_seq(n_params: float, layers: int, d_model: int, seq: int, factor: int = 3) -> float:
    """MosaicML's FLOPs per sequence: factor * (2 N T + 4 L d T^2); factor 3 for MFU, 4 for HFU with AC."""
    return factor * (2.0 * n_params * seq + 4.0 * layers * d_model * seq**2)


# Datasets whose tables are parsed from fetched repositories and so not bundled (trainsim.data).
EXTERNAL_DATASETS = {"mosaic": "mosaic_mpt_benchmarks.csv", "nemo": "nemo_megatron_bridge_perf.csv",
                     "vtrain": "vtrain_a100_single_node.csv"}


def external_table(dataset: str, file: str) -> Path:
    """Where the unbundled table of ``dataset`` lies; SpecError naming the ways to supply it when absent."""
    found = external_validation_path(file)
    if found is None:
        raise SpecError("dataset", f"{dataset} reads {file}, which trainsim does not bundle (parsed from a "
                                   f"fetched repository): set {VALIDATION_DIR_ENV} to the "
                                   f"directory that holds it, or pass --dataset PATH")
    return found


def missing_external(name: str) -> str | None:
    """Why bundled dataset ``name`` cannot be loaded here (its table is absent), or None."""
    file = EXTERNAL_DATASETS.get(name)
    if file is None or external_validation_path(file) is not None:
        return None
    return f"{name}: {file} not found (not bundled; set TRAINSIM_VALIDATION_DIR)"


def load_mosaic(path: Path | None = None, *, name: str = "mosaic") -> Dataset:
    """MosaicML MPT FSDP runs: tokens/s per run on A100 40/80GB and H100 (BF16, FP8)."""
    rows = _read_csv(path or external_table("mosaic", "mosaic_mpt_benchmarks.csv"))
    cases = [_mosaic_case(r) for r in rows]
    notes = (
        ("metric: tokens/s over all GPUs as published (Throughput T/s); MFU on MosaicML's own formula "
        "3(2NT + 4LdT^2) x seq/s / (GPUs x 312|989|1979 TFLOP/s)."),
        ("layout: pure FSDP (tp = pp = 1, dp = GPUs); FULL_SHARD -> zero 3, SHARD_GRAD_OP -> zero 2; "
        "activation checkpointing -> recompute full; the row's micro-batch and grad accumulation; "
        "first-generation fused attention: the benchmarks ran MPT's Triton FlashAttention kernel "
        "(submit_benchmarks.py --attn_impl default 'triton'; ALiBi needs it), flash_attention_version 1; "
        "no dropout; framework pytorch-fsdp (llm-foundry/Composer: per-block FSDP gathers and "
        "reduce-scatters overlapped with compute, fused cross-entropy loss_fn)."),
        ("precision: amp_bf16/bf16 -> bf16; amp_fp8 -> fp8 (Transformer Engine). Gradients are reduced in "
        "bf16 under both MP modes: PURE sets reduce_dtype bf16, and DEFAULT in the Composer of the "
        "torch 2.0.1 benchmark image (0.14-0.16) set only param/buffer dtypes, so FSDP reduced in the param "
        "dtype (fp32 reduction came with Composer PR #2628, October 2023); fp32 gradient shards and "
        "master weights for the optimizer."),
        ("hardware, one cluster per GPU type: A100 40/80GB -> dgx-a100 network (1600 Gbps RoCE per node "
        "= 8 x 200 Gb/s, per the section titles); H100 -> dgx-h100 (8 x 400 Gb/s; CoreWeave HGX H100, "
        "network not stated in the table)."),
        ("model: MPT presets (learned positions sized to the run's seq_len, biases on, tied embeddings); "
        "total_params() equals the published NumParams for every row."),
    )
    return Dataset(name=name, title="MosaicML MPT FSDP throughput (llm-foundry)", metric="tokens_per_s",
                   unit="tok/s", citation=MOSAIC_CITATION, notes=notes, cases=tuple(cases),
                   higher_is_better=True)


def _mosaic_case(r: dict) -> Case:
    rid = r["row_id"]
    gpu = (r.get("gpu") or "").strip()
    size = (r.get("model") or "").strip().lower()
    seq, gpus = _int(r["seq_len"]), _int(r["num_gpus"])
    mbs, accum = _int(r["micro_batch"]), _int(r["grad_accum"])
    published = _num(r["throughput_tok_per_s"])
    label = f"{size} s={seq} n={gpus} mb{mbs}x{accum}"
    if None in (seq, gpus, mbs, accum) or published is None:
        return Case(rid, label, published or float("nan"), skip_reason="incomplete row")
    precision = (r.get("precision") or "").lower()
    dtype = "fp8" if "fp8" in precision else "bf16"
    if gpu not in MOSAIC_CLUSTERS:
        return Case(rid, label, published, skip_reason=f"no cluster for GPU {gpu!r}")
    if preset("models", size) is None:
        return Case(rid, label, published, skip_reason=f"no model preset {size!r}")
    arch = preset("models", size)
    for col, key in (("n_layers", "num_layers"), ("d_model", "hidden"), ("n_heads", "num_heads"),
                     ("ffn_hidden", "ffn_hidden"), ("vocab", "vocab_size")):
        if _int(r.get(col)) != arch[key]:
            return Case(rid, label, published, skip_reason=f"architecture {col}={r.get(col)} differs from preset {size}")
    strategy = (r.get("fsdp_sharding_strategy") or "").upper()
    zero = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0}.get(strategy)
    if zero is None:
        return Case(rid, label, published, skip_reason=f"sharding strategy {strategy!r} not modelled")
    ac = (r.get("activation_checkpointing") or "").strip().lower() == "true"
    offload = (r.get("activation_cpu_offload") or "").strip().lower() == "true"
    if offload:
        return Case(rid, label, published, skip_reason="activation CPU offload is not modelled")
    cpreset, cover = MOSAIC_CLUSTERS[gpu]
    n_params = _num(r.get("num_params_reported"))
    raw = {
        "model": {"preset": size, "max_seq_len": seq,
                  **({"published_params": n_params} if n_params else {})},
        "cluster": _cluster(cpreset, gpus, **cover),
        "layout": {"tp": 1, "pp": 1},
        "training": {"seq_len": seq, "global_batch": mbs * accum * gpus, "micro_batch": mbs, "dtype": dtype,
                     "recompute": "full" if ac else "none", "zero": zero, "flash_attention": True,
                     "flash_attention_version": 1,
                     "dropout": False, "grad_dtype_bytes": 0,
                     "framework": "pytorch-fsdp"},
    }
    label += f" z{zero}" + (" AC" if ac else "") + (" fp8" if dtype == "fp8" else "")
    scenario, why = _scenario(raw, rid)
    n_params = n_params or float(arch.get("published_params") or 0)
    flops_seq = mosaic_flops_per_seq(n_params, arch["num_layers"], arch["hidden"], seq)
    peak = MOSAIC_PEAK_FLOPS.get((gpu, dtype))
    secondary, fns = {}, {}
    mfu = _num(r.get("mfu_pct"))
    if mfu is not None and peak:
        secondary["mfu_pct"] = mfu
        fns["mfu_pct"] = lambda tok_s, f=flops_seq, T=seq, n=gpus, p=peak: 100.0 * f * (tok_s / T) / (n * p)
    category = f"{gpu} {'fp8' if dtype == 'fp8' else 'bf16'}" + (" AC" if ac else "")
    return Case(rid, label, published, scenario=scenario, skip_reason=why, secondary=secondary,
                secondary_fns=fns, category=category)


# --- Zero-bubble pipeline schedules (Qi et al., ICLR 2024, Table 4) -----------------------------------

ZB_CITATION = ('Qi et al., "Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024 (arXiv:2401.10241), '
               'Tables 3-4 (setup, measured samples/s per GPU)')
ZB_SCHEDULES = {"1F1B": "1f1b", "1F1B-I": "interleaved", "ZB-1p": "zb"}


def load_zero_bubble(path: Path | None = None, *, name: str = "zero-bubble") -> Dataset:
    """Zero-bubble paper Table 4: samples/s per GPU for 1F1B, interleaved 1F1B and ZB-1p (pure pipeline)."""
    rows = _read_csv(path or validation_path("pipeline_bubble.csv"))
    cases: list[Case] = []
    for r in rows:
        if _num(r.get("samples_per_gpu_per_s")) is None:
            continue  # formula rows and Table 5 bubble rates: not measured throughput
        cases.append(_zb_case(r))
    notes = (
        ("metric: samples/s per GPU (Table 4, measured). The hardware is stated (A100 SXM 80GB, 8 per node, "
        "RoCE RDMA, up to 4 nodes) but the software stack is the authors' Megatron fork, so the secondary "
        "column ratio_to_1f1b (each schedule's throughput / 1F1B's with the same model and m) is the "
        "schedule comparison that does not depend on absolute kernel speed."),
        ("layout: pure pipeline (GPUs = stages, no TP/DP); the paper gives the first and last stage one layer "
        "less (room for embedding and loss): Megatron's uneven split of the model's layers (first and last "
        "virtual stage one layer fewer, embedding and loss on them); 1F1B-I uses one layer per chunk (the "
        "first and last chunk hold only the embedding / the loss)."),
        ("software, from the authors' launch script (sail-sg/zero-bubble-pipeline-parallelism "
        "examples/pretrain_zero_bubble.sh): fp16, Megatron's default dropout 0.1, no recomputation, blocking "
        "pipeline sends (--no-overlap-p2p-communication); framework megatron. Attention is Megatron's unfused "
        "core attention (materialised s x s scores, fused softmax), not FlashAttention: today's script passes "
        "--use-flash-attn, but the paper's own measured peak memory (Table 4, 30-58 GB) is what unfused attention "
        "needs (trainsim: within 0-7 % of all 12 1F1B / 1F1B-I / ZB-1p rows) and about twice what FlashAttention "
        "would (trainsim: 15-36 GB), and its activation formula (Table 1, sb(34h + 5as)) counts the scores. "
        "Assumed (not in the table): GPT-2 vocabulary padded to 50304, A100 80GB nodes with the dgx-a100 preset "
        "network."),
        "ZB-2p (twice the activation memory, near-zero bubble) is not a trainsim schedule: skipped.",
    )
    cases = _with_ratio_to_1f1b(cases)
    return Dataset(name=name, title="Zero-bubble pipeline schedules (Table 4)", metric="samples_per_gpu_per_s",
                   unit="samples/s/GPU", citation=ZB_CITATION, notes=notes, cases=tuple(cases),
                   higher_is_better=True)


def _zb_case(r: dict) -> Case:
    rid = r["row_id"]
    sched = (r.get("schedule") or "").strip()
    layers, heads, hidden = _int(r["layers"]), _int(r["heads"]), _int(r["hidden"])
    seq, p = _int(r["seq_len"]), _int(r["num_stages_p"])
    mbs, m = _int(r["microbatch_size"]), _int(r["num_microbatches_m"])
    published = _num(r["samples_per_gpu_per_s"])
    label = f"{r.get('model', '?').replace('GPT-3-like ', '')} p={p} m={m} {sched}"
    group = f"{r.get('model')}|m={m}"
    if sched not in ZB_SCHEDULES:
        return Case(rid, label, published, group=group, skip_reason=f"schedule {sched} is not modelled")
    if None in (layers, heads, hidden, seq, p, mbs, m):
        return Case(rid, label, published, group=group, skip_reason="incomplete row")
    # The paper gives the first and the last stage one layer fewer (room for embedding and loss): Megatron's
    # uneven split (Scenario.stage_layers) of the real layer count, so layers + 2 must split over the stages.
    if (layers + 2) % p:
        return Case(rid, label, published, group=group, skip_reason=f"{layers} + 2 layers do not split over {p} stages")
    model_layers = layers
    vpp = (layers + 2) // p if sched == "1F1B-I" else 1
    raw = {
        "model": {"name": r.get("model") or rid, "num_layers": model_layers, "hidden": hidden, "num_heads": heads,
                  "vocab_size": 50304, "max_seq_len": seq},
        "cluster": _cluster("dgx-a100", p),
        "layout": {"tp": 1, "pp": p, "vpp": vpp},
        "training": {"seq_len": seq, "global_batch": mbs * m, "micro_batch": mbs, "dtype": "fp16",
                     "recompute": "none", "schedule": ZB_SCHEDULES[sched], "flash_attention": False,
                     "dropout": True, "overlap_p2p": False},
    }
    scenario, why = _scenario(raw, rid)
    return Case(rid, label, published, scenario=scenario, skip_reason=why, group=group, category=sched)


def _with_ratio_to_1f1b(cases: list[Case]) -> list[Case]:
    """Attach the published throughput ratio to the group's 1F1B row (the predicted one is filled later)."""
    base = {c.group: c.published for c in cases if c.label.endswith(" 1F1B")}
    out = []
    for c in cases:
        b = base.get(c.group)
        sec = dict(c.secondary)
        if b:
            sec["ratio_to_1f1b"] = c.published / b
        out.append(Case(c.row_id, c.label, c.published, c.scenario, c.collective, c.skip_reason, c.group,
                        c.category, sec, dict(c.secondary_fns)))
    return out


# --- NVIDIA Megatron-Bridge (NeMo) performance summaries ------------------------------------------------

NEMO_CITATION = ("NVIDIA NeMo Megatron-Bridge performance summaries (docs/performance-summary.md and "
                 "performance-summary-archive.md, containers 25.09-26.08; NVIDIA-NeMo/Megatron-Bridge) -- "
                 "nemo_megatron_bridge_perf.csv")
# Gradients are reduced in bf16 in the performance recipes: NeMo's performance scripts set
# ``grad_reduce_in_fp32 = False`` on every precision config they build (scripts/performance helpers,
# set_precision_configs; read as read_file id 39780612905), and Megatron-Bridge's MoE recipes do the same
# (recipes/qwen/qwen3_moe.py ``precision_config.grad_reduce_in_fp32 = False``; read_file id 2599762895).
NEMO_GRAD_DTYPE = "bf16"
# system -> (cluster preset, GPUs per NVLink domain used by jobs larger than one domain or None)
NEMO_SYSTEMS = {
    "DGX-H100": ("dgx-h100", None),
    "DGX-B200": ("dgx-b200", None),
    "DGX-B300": ("dgx-b300", None),
    "DGX-GB200": ("gb200-nvl72", 64),
    "DGX-GB300": ("gb300-nvl72", 64),
}
# Table model name (before any parenthesis) -> model preset. Kimi K2 as Megatron-Bridge trains it
# (src/megatron/bridge/recipes/kimi/kimi_k2.py @0350b4ef, the MLAModelProvider of kimi_k2_pretrain_config: 61 layers,
# moe_layer_freq [0] + [1]*60 with ffn 18432, 384 experts of 2048 top-8 + a 2048 shared expert, MLA with 64 heads,
# q/kv latents 1536/512, qk 128 + 64 RoPE, v 128, V = 163840, untied, no MTP) is exactly the kimi-k2 preset.
NEMO_MODELS: dict[str, str] = {
    "LLAMA3_8B": "llama3-8b", "LLAMA3_70B": "llama3-70b", "LLAMA3.1_405B": "llama3-405b",
    "Qwen3_30B_a3B": "qwen3-30b-a3b", "Qwen3_235B_a22B": "qwen3-235b-a22b",
    "DeepSeekV3": "deepseek-v3", "Kimi_K2": "kimi-k2",
}
NEMO_UNMODELLED = {
    "DeepSeekV4 Flash": "architecture not given in the table and not in ModelSpec",
    "GPT OSS 120B": "attention sinks, alternating sliding-window attention and biased experts are not in ModelSpec",
    "Nemotron_3_Nano": "hybrid Mamba-2/attention MoE: Mamba layers are not modelled",
    "Nemotron_3_Super": "hybrid Mamba-2/attention MoE: Mamba layers are not modelled",
    "Nemotron_3_Ultra": "hybrid Mamba-2/attention MoE: Mamba layers are not modelled",
    "Nemotron_3_5_Lightning": "hybrid Mamba-2/attention MoE: Mamba layers are not modelled",
}


# Activation CPU offload of the Megatron-Bridge performance recipes (``cpu_offloading_num_layers``), which the
# tables do not print, for the Megatron-FSDP fp8 runs that use it: (table model, system) -> layers.
# scripts/performance/configs/llama/llama3_workload_base_configs.py @00919dcf (the same values in
# llama3/workload_base_configs.py @0fa501ac; GB200 also in llama3_70b_llm_pretrain.py @c86cd1e9):
# LLAMA3_70B FP8 FSDP GB300 20, GB200 40. LLAMA3.1_405B on 128 GB200 with FSDP (TP2): 95 in the 25.09-era
# llama31_405b_llm_pretrain.py @27dfb3df, the release of the only such row (later configs: 92).
NEMO_ACTIVATION_OFFLOAD = {("LLAMA3_70B", "DGX-GB300"): 20, ("LLAMA3_70B", "DGX-GB200"): 40,
                           ("LLAMA3.1_405B", "DGX-GB200"): 95}


# --- MoE EP all-to-all overlap: Megatron-Bridge moe_a2a_overlap -> TrainingSpec.ep_comm_overlap

# The performance scripts' ``moe_a2a_overlap`` (WorkloadBaseConfig field, default False; set_workload_base_configs ->
# _set_moe_a2a_overlap_overrides in scripts/performance/utils/overrides.py sets comm_overlap.
# overlap_moe_expert_parallel_comm = delay_wgrad_compute = True, moe_shared_expert_overlap = False; the 25.09 scripts
# did the same in utils/helpers.py moe_a2a_1f1b_overrides) is Megatron-Core's --overlap-moe-expert-parallel-comm
# --delay-wgrad-compute, i.e. training.ep_comm_overlap. The tables do not print it: it is read from the config of the
# row's (model, system, precision) at the row's release. Releases map to Megatron-Bridge branches: 25.09 = r0.1.0,
# 25.11 = r0.2.0, 26.02(.01) = r0.3.0, 26.04(.01) = r0.4.0, 26.06(.01) = r0.5.0, 26.08 = r0.6.0 (cherry-pick PRs
# #594 -> r0.1.0 2025-09, #1526 -> r0.2.0 2025-11, #2198/#2378 -> r0.3.0 2026-02; PR #5168: "cannot merge into r0.5.0
# ... 26.06.01 container is already out ... 26.08 rel branch r0.6.0"). The index stores config versions by commit
# without dates, so each version is dated by its parallel layout (which must equal the row's) and by dated PRs.
# Every (model, system) absent here had moe_a2a_overlap False in every version read. Precision classes: "mx"
# (MXFP8 / FP8-MX), "any". Entries: (table model, system, precision class, first release, last release).
NEMO_EP_OVERLAP: tuple[tuple[str, str, str, str, str], ...] = (
    # DeepSeek-V3 H100 dropless (tp2 pp8 vp4 ep64): scripts/performance/run_script.py @27dfb3df (25.09) passes
    # a2a_1f1b = (gpu == "h100") to deepseek_v3_h100_*_config (configs/deepseek/deepseek_v3_llm_pretrain.py
    # @27dfb3df), which applies moe_a2a_1f1b_overrides (utils/helpers.py @27dfb3df). Later H100 configs keep it
    # (deepseek_llm_pretrain.py @01328424 set_moe_a2a_overlap_overrides; DEEPSEEK_V3_H100_BASE_CONFIG
    # moe_a2a_overlap=True), but the table has H100 DeepSeek-V3 only in 25.09.
    ("DeepSeekV3", "DGX-H100", "any", "25.09", "25.09"),
    # DeepSeek-V3 B200 MXFP8 pp8 vp2 ep32 (DeepEP): DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 (moe_a2a_overlap=True,
    # pp_layout "Et*4|(t*4|)*14tmL"; configs/deepseek/deepseek_workload_base_configs.py @04264182 and an earlier
    # stored version). The 26.02/26.04 B200 rows are pp16 ep8 = the V1/V2 alias with moe_a2a_overlap=False (@f0e2c37e).
    ("DeepSeekV3", "DGX-B200", "mx", "26.04.01", "26.06.01"),
    # DeepSeek-V3 GB300 / GB200 MXFP8: DEEPSEEK_V3_PRETRAIN_CONFIG_{GB300,GB200}_FP8_MX_V1/V2 full-iteration CUDA
    # graph + moe_a2a_overlap=True (@04264182), added by PR #3983 (GB300, 2026-05-27: mbs 2 -> 1, the 26.06 rows'
    # mbs) and PR #4226 (GB200, 2026-06-09); PR #4330 measured the GB300 GBS=15360 variant (row mb_41) "with
    # moe_a2a_overlap" on nemo:26.06.rc7; PR #4666 (2026-07-06): the r0.5.0 GB300/GB200 MXFP8 recipes carry the
    # full-iteration plumbing. Before: FP8_MX aliased the V1/V2 config with moe_a2a_overlap=False (@f0e2c37e).
    ("DeepSeekV3", "DGX-GB300", "mx", "26.06", "26.08"),
    ("DeepSeekV3", "DGX-GB200", "mx", "26.06", "26.08"),
    # Qwen3 GB300 / GB200 MXFP8 (30B-A3B and 235B-A22B): PR #4249 "Enable Qwen3 GB200/GB300 MXFP8 CuTeDSL Fusion
    # and Full-Iter CUDA Graphs for 26.06" (r26.06 pipeline, 2026-06-09; #4211 on main); PR #4606 (r0.5.0,
    # 2026-06-30) gives B200/B300 "the same optimization path already used by GB200/GB300 ... enables moe_a2a_overlap";
    # the ported recipes' _enable_hybridep_full_iteration_mxfp8 (src/megatron/bridge/perf_recipes/qwen/common.py)
    # sets overlap_moe_expert_parallel_comm=True. Before 26.06 no Qwen3 GB300/GB200 config set it
    # (configs/qwen3/workload_base_configs.py @767255d2, configs/qwen/qwen3_workload_base_configs.py @f29a269f,
    # @01b2977e).
    ("Qwen3_30B_a3B", "DGX-GB300", "mx", "26.06", "26.08"),
    ("Qwen3_30B_a3B", "DGX-GB200", "mx", "26.06", "26.08"),
    ("Qwen3_235B_a22B", "DGX-GB300", "mx", "26.06", "26.08"),
    ("Qwen3_235B_a22B", "DGX-GB200", "mx", "26.06", "26.08"),
    # Qwen3 235B H100 (tp2 pp8 vp4 ep32, GBS 2048 / 8192): QWEN3_235B_A22B_H100_* moe_a2a_overlap=True in
    # @767255d2 (the 25.11 layout; dated by PR #1760, below), @f29a269f (26.02 layouts) and @01b2977e (26.04
    # layouts). 25.09 (configs/qwen3/qwen3_235b_a22b_llm_pretrain.py @27dfb3df; NeMo 2 scripts/performance/llm/
    # pretrain_qwen3_235b_a22b.py: token drop + MegatronCommOverlapCallback(tp_comm_overlap=True) only): off.
    ("Qwen3_235B_a22B", "DGX-H100", "any", "25.11", "26.04.01"),
    # Qwen3 235B B200 pp8 vp2 ep8 (64 GPUs): QWEN3_235B_A22B_B200_* moe_a2a_overlap=True in @767255d2; PR #1760
    # (2025-12-17) "address performance regression from 25.09 ... Disable moe_a2a_overlap ... Disable VP for mxfp8",
    # so the 25.11 run (vp 2) had it; from 26.02 the B200 rows are pp8 without vp and moe_a2a_overlap=False.
    ("Qwen3_235B_a22B", "DGX-B200", "any", "25.11", "25.11"),
    # Qwen3 235B B300 pp8 vp4 ep8: QWEN3_235B_A22B_B300_* moe_a2a_overlap=True in @f29a269f (the 26.02 layout);
    # PR #2669 (2026-03-05) "disabling VP and moe_a2a_overlap" -> the 26.04(.01) B300 rows are pp8 without vp,
    # off (@01b2977e; issue #3399, 26.04.01: "moe_a2a_overlap and VP degraded perf, so we didn't enable it").
    ("Qwen3_235B_a22B", "DGX-B300", "any", "26.02", "26.02.01"),
)
# Rows whose release's config could not be pinned down: kept off (the behaviour before the rule), listed in the notes.
# (table model, system, precision as printed, release) -> why.
NEMO_EP_OVERLAP_UNDATED: dict[tuple[str, str, str, str], str] = {
    ("Qwen3_30B_a3B", "DGX-B300", "MXFP8", "26.06"):
        "PR #4606 turned it on for B300 MXFP8 on r0.5.0 after 2026-07-06; whether the 26.06 measurement had it "
        "(26.06.01 is built from the same branch) is not known",
    ("Qwen3_30B_a3B", "DGX-H100", "FP8", "26.02"):
        "the row's pp2 vp12 ep8 GBS 1024 matches neither dated config (@767255d2: pp2 vp12 GBS 512, on; "
        "@f29a269f: pp1 ep16 GBS 1024, off)",
    ("Qwen3_30B_a3B", "DGX-H100", "FP8", "26.02.01"): "as 26.02",
    ("Qwen3_30B_a3B", "DGX-H100", "FP8-CS", "25.11"):
        "the row's pp2 vp24 ep8 is not the 25.11-era config's pp2 vp12 (@767255d2, on): the run's config is unknown",
    ("DeepSeekV3", "DGX-GB200", "FP8-MX", "25.11"):
        "no Megatron-Bridge config with the row's pp8 vp4 ep32 was found (every GB200 config of the era is off; the "
        "layout's source, Megatron-LM docs/discussions/deepseek-v3-gb200-optimization, sets no EP overlap)",
}


def nemo_release(text: str) -> tuple[int, ...]:
    """A NeMo container release ('26.04.01') as a sortable tuple."""
    return tuple(int(x) for x in re.findall(r"\d+", text or ""))


def _nemo_config_entry(table, model_name: str, system: str, precision: str, release: str) -> tuple | None:
    """The first entry (model, system, precision class 'any'|'mx'|'bf16', first release, last release, ...) of a
    per-release config table that covers the row, or None."""
    cls, rel = nemo_precision_class(precision), nemo_release(release)
    return next((entry for entry in table
                 if entry[0] == model_name and entry[1] == system and entry[2] in ("any", cls)
                 and nemo_release(entry[3]) <= rel <= nemo_release(entry[4])), None)


def nemo_ep_overlap(model_name: str, system: str, precision: str, release: str) -> bool:
    """Whether the row's Megatron-Bridge performance config set moe_a2a_overlap (NEMO_EP_OVERLAP)."""
    return _nemo_config_entry(NEMO_EP_OVERLAP, model_name, system, precision, release) is not None


# --- the multi-head-latent-attention models (DeepSeek-V3, Kimi K2): pipeline layouts and MTP, as the recipes set them

# Megatron-Core --pipeline-model-parallel-layout of each (pp, vp) the Megatron-Bridge recipes and performance configs
# define (E = embedding, t = transformer layer, m = MTP module, L = loss, | = virtual-stage boundary, x*n / (..)*n =
# repetition). DeepSeek-V3: the recipe's layout_map of src/megatron/bridge/recipes/deepseek/deepseek_v3.py
# (_deepseek_v3_common @05d003fb, the 25.09 release; the same map in the 25.11-era recipe with mtp_num_layers and in
# set_deepseek_v3_pipeline_model_parallel_layout of later ones), written as strings -- (4,4)/(8,2)/(16,1):
# [E + 4t] + [4t]*14 + [t + mtp + loss]; (8,1)/(4,2): [E + 8t] + [8t]*6 + [5t + mtp + loss]; (4,1): [E + 16t], 16t,
# 16t, [13t + mtp + loss] -- plus the explicit pp_layout of the performance configs: (2,8) "Et*4|(t*4|)*14tmL"
# (scripts/performance/configs/deepseek/deepseek_workload_base_configs.py DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V1
# @04264182; the same string for B200_FP8_MX_V2 at (8,2)) and (8,4) "Et|(tt|)*30mL" (H100, DEEPSEEK_V3_PRETRAIN_
# CONFIG_H100_V1 there and deepseek_v3_llm_pretrain.py @27dfb3df, the 25.09 release). The recipe's "mtp" entries exist
# only when mtp_num_layers > 0 (last_layer = ["mtp"] * mtp_layers + ["loss"]), so a run without MTP has the same
# transformer layers per stage and no 'm'. Kimi K2: _get_kimi_k2_pipeline_layout of recipes/kimi/kimi_k2.py
# @0350b4ef (no MTP) and the H100 pp_layout "Et|(tt|)*30L" (scripts/performance/configs/kimi/
# kimi_workload_base_configs.py KIMI_K2_PRETRAIN_CONFIG_H100). (8,4) without MTP, "Et|(tt|)*30L", is also the layout
# of NVIDIA/Megatron-LM docs/discussions/deepseek-v3-gb200-optimization (DeepSeek-V3 on GB200, TP1 PP8 VPP4 EP32,
# MXFP8, no MTP: the 25.11 GB200 FP8-MX row's parallel layout).
NEMO_PIPELINE_LAYOUTS: dict[str, dict[tuple[int, int], str]] = {
    "DeepSeekV3": {
        (4, 1): "Et*16|t*16|t*16|t*13mL",
        (8, 1): "Et*8|(t*8|)*6t*5mL", (4, 2): "Et*8|(t*8|)*6t*5mL",
        (16, 1): "Et*4|(t*4|)*14tmL", (8, 2): "Et*4|(t*4|)*14tmL", (4, 4): "Et*4|(t*4|)*14tmL",
        (2, 8): "Et*4|(t*4|)*14tmL",
        (8, 4): "Et|(tt|)*30mL",
    },
    "Kimi_K2": {
        (4, 1): "Et*16|t*16|t*16|t*13L",
        (8, 1): "Et*8|(t*8|)*6t*5L", (4, 2): "Et*8|(t*8|)*6t*5L",
        (16, 1): "Et*4|(t*4|)*14tL", (8, 2): "Et*4|(t*4|)*14tL", (4, 4): "Et*4|(t*4|)*14tL",
        (16, 2): "Et|(tt|)*30L",
    },
}
# Multi-token-prediction modules of the runs: "(w/o MTP)" rows 0, "(w/ MTP)" rows 1; every other row (unlabelled,
# "(tokendrop)", "(dropless)") what its release's recipe did -- DeepSeek-V3: mtp_num_layers = 1 (deepseek_v3.py
# @05d003fb sets model_cfg.mtp_num_layers = 1; the 25.11-era recipe defaults mtp_num_layers=1; the 26.x performance
# layouts carry the 'm', "Et*4|(t*4|)*14tmL", and no performance script turns it off); Kimi K2 has none.
NEMO_MTP_DEFAULT = {"DeepSeekV3": 1, "Kimi_K2": 0}
NEMO_MTP_LABELS = {"w/o mtp": 0, "w/ mtp": 1}
# Optimizer state bytes per parameter of the recipes: DeepSeek-V3 distributed Adam with the precision-aware optimizer,
# fp32 main params and bf16 exp_avg / exp_avg_sq (deepseek_v3.py: use_precision_aware_optimizer, main_params_dtype
# fp32, exp_avg(_sq)_dtype bf16) = 4 + 2 + 2; Kimi K2 Muon (distributed_muon_with_cosine_annealing, fp32 main params
# and one fp32 momentum buffer, sharded layer-wise over data parallelism) = 4 + 4.
NEMO_MLA_OPTIMIZER_BYTES = {"DeepSeekV3": 8, "Kimi_K2": 8}


# --- MoE rows: selective-recompute modules and expert tensor parallelism, as each row's config set them

# Megatron-Core --recompute-modules of each row's Megatron-Bridge performance config (WorkloadBaseConfig
# .recompute_modules, applied by _set_recompute_overrides in scripts/performance/utils/overrides.py: a list sets
# recompute_granularity="selective" with those modules, an empty list recomputes nothing; the 25.09 scripts set
# recompute_granularity="selective" and the list directly) -> TrainingSpec.recompute_modules, () = no recompute
# (recompute="none"). Read per (model, system, precision class) at the row's release, config versions dated as in
# NEMO_EP_OVERLAP: by their parallel layout, which must equal the row's, and by dated PRs (25.09 = r0.1.0, 25.11 =
# r0.2.0, 26.02(.01) = r0.3.0, 26.04(.01) = r0.4.0, 26.06(.01) = r0.5.0, 26.08 = r0.6.0). Precision classes: "mx"
# (MXFP8 / FP8-MX), "bf16", "any". Qwen3 rows have no entry: every Qwen3 config read sets recompute_granularity=None
# and no recompute_modules (scripts/performance/configs/qwen/qwen3_llm_pretrain.py set_qwen3_common_configs
# @05c0c90f; 25.09 configs/qwen3/qwen3_235b_a22b_llm_pretrain.py @27dfb3df and qwen3_30b_a3b_llm_pretrain.py
# @4054233a; 26.08 src/megatron/bridge/perf_recipes/qwen/gb300/qwen3_moe.py @007282ea), so they stay at recompute
# none. Entries: (table model, system, precision class, first release, last release, modules).
NEMO_RECOMPUTE_MODULES: tuple[tuple[str, str, str, str, str, tuple[str, ...]], ...] = (
    # 25.09: scripts/performance/configs/deepseek/deepseek_v3_llm_pretrain.py @27dfb3df (NVIDIA-NeMo/Megatron-Bridge
    # 27dfb3df3c2cba55e54ec67016061048d4ce03c1): recompute_granularity="selective" everywhere; H100 (tp2 pp8 vp4
    # ep64, the dropless row) ["mla_up_proj", "mlp"]; GB200 (pp4 vp4 ep64) ["mla_up_proj"] with token drop (the
    # tokendrop row; dropless would add "mlp"); B200 (pp16 ep8) ["mla_up_proj"].
    ("DeepSeekV3", "DGX-H100", "any", "25.09", "25.09", ("mla_up_proj", "mlp")),
    ("DeepSeekV3", "DGX-GB200", "any", "25.09", "25.09", ("mla_up_proj",)),
    ("DeepSeekV3", "DGX-B200", "any", "25.09", "25.09", ("mla_up_proj",)),
    # 25.11: scripts/performance/configs/deepseek/workload_base_configs.py @d19cb73c
    # (d19cb73c80ae84b17e296b66e85058b129319510), the version with the 25.11 rows' layouts (GB300 pp2 vp4 ep32 GBS
    # 4096, GB200 pp4 vp4 ep64 GBS 4096, B200 pp16 ep8 GBS 2048; the earlier @0fa501ac has GB300 pp4 vp4 and GB200
    # GBS 2048): GB300 (every precision) [], GB200 BF16 ["mla_up_proj"], B200 ["mla_up_proj"] (B200 kept it through
    # 26.04, below). The GB200 FP8-MX row (pp8 vp4 ep32, w/o MTP) matches no Megatron-Bridge config (NEMO_EP_OVERLAP_
    # UNDATED); its parallel layout and pipeline split are those of the Megatron-LM guide NEMO_PIPELINE_LAYOUTS cites
    # (docs/discussions/deepseek-v3-gb200-optimization/deepseek-v3-gb200-reproduce-guide.md @ab23fd2f, NVIDIA/
    # Megatron-LM ab23fd2f437c5582cdeb3164a0834902daea1f4b: TP1 PP8 VPP4 EP32 MXFP8, --recompute-granularity
    # selective --recompute-modules moe_act mlp), whose modules it takes.
    ("DeepSeekV3", "DGX-GB300", "any", "25.11", "25.11", ()),
    ("DeepSeekV3", "DGX-GB200", "bf16", "25.11", "25.11", ("mla_up_proj",)),
    ("DeepSeekV3", "DGX-GB200", "mx", "25.11", "25.11", ("moe_act", "mlp")),
    # 26.02 - 26.04: scripts/performance/configs/deepseek/deepseek_workload_base_configs.py @f0e2c37e
    # (f0e2c37e3f82c57f9d0e95aa8ae98b3470a91107; B300 BF16 pp8 vp2 of PR #2175, cherry-picked into r0.3.0 by #2198,
    # 2026-02-03) and the versions with the 26.04 layouts (B300/B200 MXFP8 pp16 ep8, B300 BF16 pp8 without vp after
    # PR #2627, 2026-03-03): zidanehuang001/Megatron-Bridge @8e0fe90d (8e0fe90db6d83e179c775922836921443fda0435),
    # nanz-nv/Megatron-Bridge @e6015aa8 (e6015aa87982289629d2c5431e62aaaf84ce6286). MXFP8 aliases the V1/V2 configs:
    # GB300 (mbs 2, pp2 vp8 ep32) ["mla_up_proj"], GB200 (pp4 vp4 ep64) ["mla_up_proj"], B300 and B200 (pp16 ep8)
    # ["mla_up_proj"].
    ("DeepSeekV3", "DGX-B200", "any", "25.11", "26.04", ("mla_up_proj",)),
    ("DeepSeekV3", "DGX-GB300", "mx", "26.02", "26.04.01", ("mla_up_proj",)),
    ("DeepSeekV3", "DGX-GB200", "mx", "26.02", "26.04", ("mla_up_proj",)),
    # 26.04.01: the version with the 26.04.01 layouts (B300_V2 pp8 mbs 2, B200_FP8_MX_V2 pp8 vp2 ep32 DeepEP),
    # radixark/Megatron-Bridge @d063066b (d063066b4d66853c4c9308caf321a9c5b8836915): GB200_V1 (which FP8_MX aliases)
    # ["mlp"] -- PR #3031 (2026-03-30) "Update DeepSeek V3 GB200 recompute strategy from mla_up_proj to mlp", and PR
    # #4226's baseline for the GB200 MXFP8 config before 26.06 is "[mlp] recompute"; GB300 mbs 2 ["mla_up_proj"];
    # B300_V2 (pp8 mbs 2) ["mla_up_proj"], kept by the 26.06 row (PR #4458, 2026-06-23, moved B300 to vp2 mbs 1
    # later); B200_FP8_MX_V2 ["mla_up_proj", "mlp"].
    ("DeepSeekV3", "DGX-GB200", "mx", "26.04.01", "26.04.01", ("mlp",)),
    ("DeepSeekV3", "DGX-B300", "any", "26.02", "26.06", ("mla_up_proj",)),
    ("DeepSeekV3", "DGX-B200", "mx", "26.04.01", "26.04.01", ("mla_up_proj", "mlp")),
    # 26.06 - 26.08: GB300 MXFP8 full-iteration CUDA graph config, mbs 1, recompute_modules=[] (PR #3983; PR #4226
    # 2026-06-09: "GB300 can run with recompute_modules=[]"), GB200 MXFP8 full-iteration config ["mla_up_proj"]
    # ("to fit GB200's smaller HBM budget", PR #4226): nvegesna-netizen/Megatron-Bridge @8871aeae
    # (8871aeaef3369fc26f6f626622fdf03542cc1057; the same in kocchop/Megatron-Bridge @6219b1a8 and slikhite-1/
    # Megatron-Bridge @7e5c47ff); 26.08 (r0.6.0) recipes src/megatron/bridge/perf_recipes/deepseek/gb300/
    # deepseek_v3.py @000853c8 (000853c89a2b110fb80dc9db5774a34bc69e2c84) fp8mx [] and gb200/deepseek_v3.py @0ed32959
    # (0ed32959f7a9154e0a587a9efe6e70827a422f25) fp8mx ["mla_up_proj"].
    ("DeepSeekV3", "DGX-GB300", "mx", "26.06", "26.08", ()),
    ("DeepSeekV3", "DGX-GB200", "mx", "26.06", "26.08", ("mla_up_proj",)),
    # Kimi K2 GB300 (pp4 vp4 ep64, GBS 4096, mbs 2 -- the rows' layout): KIMI_K2_PRETRAIN_CONFIG_GB300
    # recompute_modules=["mla_up_proj"] in scripts/performance/configs/kimi/kimi_workload_base_configs.py of
    # radixark/Megatron-Bridge @d063066b and nvegesna-netizen/Megatron-Bridge @b8002e52
    # (b8002e52ea1b5e0450ffb7328844acc356eb00b5); the NVIDIA-NeMo version @7a6f3ba9 (GBS 2048, mbs 1, ["moe_act"]) has
    # a layout no row has.
    ("Kimi_K2", "DGX-GB300", "any", "26.02.01", "26.06", ("mla_up_proj",)),
)

# Megatron-Core --expert-tensor-parallel-size (Layout.etp) of the MoE models' configs, used where the table's etp
# cell is empty (every MoE row's is); a model absent here takes Megatron-Core's default, etp = tp. Every config read
# sets 1: DeepSeek-V3 BASE_DEEPSEEK_V3_CONFIG = WorkloadBaseConfig(expert_tensor_parallel_size=1) (workload_base_
# configs.py @d19cb73c and @0fa501ac, deepseek_workload_base_configs.py @f0e2c37e, @8e0fe90d, @d063066b, @8871aeae),
# every system of the 25.09 deepseek_v3_llm_pretrain.py @27dfb3df, and the GB200 guide above
# (--expert-tensor-parallel-size 1); Kimi K2 BASE_KIMI_K2_CONFIG expert_tensor_parallel_size=1 (@d063066b,
# @b8002e52, @7a6f3ba9); Qwen3 235B-A22B BASE_QWEN3_235B_A22B_CONFIG expert_tensor_parallel_size=1
# (configs/qwen3/workload_base_configs.py @767255d2, 767255d2f5c7c96b619a873a8ad17a3086f3e5c5, the 25.11 H100 tp2
# pp8 vp4 ep32 GBS 2048 row; configs/qwen/qwen3_workload_base_configs.py @f29a269f,
# f29a269f8728ff9075f88a226f92e554196a7e41, H100_V2 tp2 pp8 vp4 ep32 GBS 8192, the 26.x H100 rows), every system
# of the 25.09 qwen3_235b_a22b_llm_pretrain.py @27dfb3df (H100 tp2 pp8 vp4 ep32 GBS 2048), and the NeMo 2 25.09
# config of the GB200 tp2 pp1 ep64 row (NVIDIA/NeMo scripts/performance/recommended_model_configs/
# model_configs_gb200.csv @06c0e700, 06c0e70057f272483a1a33c6bb5a9baf7be48cdc: qwen3 235b_a22b, 64 GPUs, tp 2, pp 1,
# ep 64, mbs 1, gbs 1024, etp_size 1); Qwen3 30B-A3B BASE_QWEN3_30B_A3B_CONFIG expert_tensor_parallel_size=1
# (@767255d2, @f29a269f) and the 25.09-era qwen3_30b_a3b_llm_pretrain.py @4054233a (etp 1 on every system). With
# tp = 1 (every row but the H100 DeepSeek-V3 and Qwen3 235B rows and the 25.09 GB200 Qwen3 235B row) etp 1 is tp.
NEMO_EXPERT_TP: dict[str, int] = {"DeepSeekV3": 1, "Kimi_K2": 1, "Qwen3_30B_a3B": 1, "Qwen3_235B_a22B": 1}


def nemo_precision_class(precision: str) -> str:
    """'mx' (MXFP8 / FP8-MX), 'bf16' or 'other' (the classes of NEMO_RECOMPUTE_MODULES)."""
    p = (precision or "").upper()
    return "mx" if ("MX" in p and "FP8" in p) else ("bf16" if p.strip() == "BF16" else "other")


def nemo_recompute_modules(model_name: str, system: str, precision: str, release: str) -> tuple[str, ...] | None:
    """The recompute_modules of the row's config (NEMO_RECOMPUTE_MODULES; () = none), or None when no entry."""
    entry = _nemo_config_entry(NEMO_RECOMPUTE_MODULES, model_name, system, precision, release)
    return None if entry is None else entry[5]


def nemo_expert_tp(model_name: str, etp_cell: int | None, tp: int) -> int:
    """Expert tensor parallelism of a MoE row: the table's etp cell, else the config's (NEMO_EXPERT_TP), else tp."""
    return etp_cell or NEMO_EXPERT_TP.get(model_name) or tp


def parse_pipeline_layout(layout: str) -> tuple[tuple[int, ...], int]:
    """Transformer layers per virtual pipeline stage of a Megatron-Core pipeline_model_parallel_layout string, and
    the MTP modules ('m') of its last stage. ``(x)*n`` and ``c*n`` repeat, '|' ends a virtual stage, ',' is only a
    separator. The embedding ('E') must open the first stage and the loss ('L') close the last, as trainsim places
    them (Layout.stage_layers)."""
    s = re.sub(r"[\s,]", "", layout)
    group = re.compile(r"\(([^()]*)\)\*(\d+)")
    while (g := group.search(s)) is not None:
        s = s[:g.start()] + g.group(1) * int(g.group(2)) + s[g.end():]
    if "(" in s or ")" in s:
        raise ValueError(f"unbalanced parentheses in pipeline layout {layout!r}")
    s = re.sub(r"([EtmL])\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
    if set(s) - set("EtmL|"):
        raise ValueError(f"pipeline layout {layout!r}: unknown symbols {sorted(set(s) - set('EtmL|'))}")
    stages = s.split("|")
    if s.count("E") != 1 or not stages[0].startswith("E"):
        raise ValueError(f"pipeline layout {layout!r}: the embedding must open the first virtual stage")
    if s.count("L") != 1 or not stages[-1].endswith("L"):
        raise ValueError(f"pipeline layout {layout!r}: the loss must close the last virtual stage")
    if s.count("m") != stages[-1].count("m"):
        raise ValueError(f"pipeline layout {layout!r}: MTP modules only on the last virtual stage")
    return tuple(st.count("t") for st in stages), stages[-1].count("m")


def nemo_mtp_layers(model_cell: str | None) -> int:
    """MTP modules of a DeepSeek-V3 / Kimi K2 row from its model cell's label (NEMO_MTP_LABELS, NEMO_MTP_DEFAULT)."""
    name = _first(model_cell)
    tag = re.search(r"\(([^)]*)\)", model_cell or "")
    return NEMO_MTP_LABELS.get(tag.group(1).strip().lower() if tag else "", NEMO_MTP_DEFAULT[name])


def nemo_stage_layers(model_name: str, pp: int, vp: int, mtp_layers: int) -> tuple[tuple[int, ...] | None, str]:
    """Layout.stage_layers of a (pp, vp) from NEMO_PIPELINE_LAYOUTS, or (None, why not)."""
    layout = NEMO_PIPELINE_LAYOUTS[model_name].get((pp, vp))
    if layout is None:
        return None, (f"pp={pp} vp={vp}: no pipeline_model_parallel_layout for this (pp, vp) in the Megatron-Bridge "
                      f"{model_name} recipes or performance configs, and their fallback (no layout, embedding and "
                      f"loss not counted as layers) cannot split 61 layers over {pp * vp} virtual stages: the run's "
                      "split is unknown")
    if mtp_layers == 0:
        layout = layout.replace("m", "")
    layers, _ = parse_pipeline_layout(layout)
    return layers, layout


def _first(text: str | None) -> str:
    """A cell's primary value: the text before any parenthesised alternative or footnote marker."""
    return re.split(r"[(\[]", text or "")[0].strip()


def nemo_llama_flops_per_token(model, seq: int) -> float:
    """NeMo's model FLOPs per token of a Llama (GQA, SwiGLU) step: 3 x 2 x (QKV + causal attention + out
    projection + gated MLP) per layer + the logits (NeMo flops_formulas llama3: recompute not counted)."""
    h, L, f, V = model.hidden, model.num_layers, model.ffn, model.vocab_size
    attn = 6 * L * h * h * (1 + 2 * model.kv_heads / model.num_heads + seq / h + 1)
    mlp = 6 * L * h * f * 3
    return attn + mlp + 6 * h * V


def load_nemo(path: Path | None = None, *, name: str = "nemo") -> Dataset:
    """Megatron-Bridge performance tables: tokens/s per GPU of modern Megatron-Core (H100 FP8, Blackwell)."""
    rows = _read_csv(path or external_table("nemo", "nemo_megatron_bridge_perf.csv"))
    cases = [_nemo_case(r) for r in rows]
    notes = (
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
         "the 25.09 tables ('not stated in table') are FP8 per that release's text; NVFP4 rows are skipped "
         "(no fp4 training dtype in trainsim)."),
        ("software (Megatron-Bridge recipes, scripts/performance: sequence_parallel = tp > 1, CommOverlapConfig("
         "tp_comm_overlap=True) with the userbuffers configs of megatron/bridge/training/comm_overlap.py): framework "
         "megatron, sequence parallelism and TP comm/GEMM overlap when tp > 1, "
         "distributed optimizer (fsdp column 0/empty) or Megatron FSDP = ZeRO-3 (fsdp column > 0), "
         "FlashAttention-class fused attention, no dropout, interleaved 1F1B when vp > 1. The tables do not "
         "state recomputation: none for the Llama and Qwen rows (the perf scripts read set none of it for these "
         "models; the Qwen3 configs set recompute_granularity=None), the config's recompute_modules for "
         "DeepSeek-V3 / Kimi K2 (below). "
         "Activation CPU offload as the recipes set it for the Megatron-FSDP fp8 runs: Llama 3 70B 20 layers "
         "on GB300, 40 on GB200; Llama 3.1 405B on GB200 95 (NEMO_ACTIVATION_OFFLOAD)."),
        ("rows: pre-training and SFT (full-parameter training on seq_len tokens); LoRA rows skipped (frozen "
         "base weights: no weight gradients or optimizer, not a trainsim mode)."),
        ("MoE expert tensor parallelism (all MoE rows): layout.etp = the table's etp cell when printed (no MoE "
         "row prints one), else the config's expert_tensor_parallel_size (NEMO_EXPERT_TP, with sources), else "
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
         "(NEMO_PIPELINE_LAYOUTS, with sources). A (pp, vp) with no layout in the recipes (GB300 pp2 vp4, "
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
         "versions dated as for the EP overlap (NEMO_RECOMPUTE_MODULES, with sources): mla_up_proj + mlp for "
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
        ("DeepSeek-V3 / Kimi K2 optimizer and overlap: distributed optimizer; optimizer state 8 bytes/param "
         "(NEMO_MLA_OPTIMIZER_BYTES: DeepSeek-V3 precision-aware Adam, fp32 main params + bf16 moments; Kimi K2 "
         "Muon, fp32 main params + fp32 momentum, sharded layer-wise over DP -- Muon's Newton-Schulz iterations "
         "are not costed); no TP comm overlap (the DeepSeek-V3 recipe's CommOverlapConfig(tp_comm_overlap=False); "
         "only the H100 row has tp > 1), sequence parallelism when tp > 1. Not modelled, recorded only: MoE "
         "token dispatch by the flex dispatcher with HybridEP (26.x GB300/GB200/B300/B200) or DeepEP (H100 25.09 "
         "dropless configuration, B200 pp8 vp2 26.04.01), plain all-to-all for the 25.09 tokendrop rows; "
         "moe_permute_fusion and moe_router_fusion on; moe_router_force_load_balancing on; CUDA graphs "
         "(Transformer Engine graphs of attn/moe_router/"
         "moe_preprocess, or full-iteration graphs with paged stashing on GB300/GB200 MXFP8 26.06+); MXFP8 "
         "fp8_param_gather, fp8 dot-product attention (GB300/B300 MXFP8), cuteDSL fused grouped MLP. The EP "
         "all-to-all overlap (moe_a2a_overlap) follows the MoE rule below."),
        ("MoE EP all-to-all overlap (all MoE rows: DeepSeek-V3, Kimi K2, Qwen3 30B-A3B / 235B-A22B): "
         "training.ep_comm_overlap (Megatron-Core --overlap-moe-expert-parallel-comm --delay-wgrad-compute, the "
         "combined 1F1B schedule) exactly where the row's Megatron-Bridge performance config set moe_a2a_overlap "
         "(scripts/performance: WorkloadBaseConfig.moe_a2a_overlap, default False, applied by "
         "_set_moe_a2a_overlap_overrides; 25.09: a2a_1f1b / moe_a2a_1f1b_overrides), read per (model, system, "
         "precision) at the row's release (releases = Megatron-Bridge branches r0.1.0 25.09 ... r0.6.0 26.08; "
         "config versions dated by their parallel layout, which equals the row's, and by dated PRs; "
         "NEMO_EP_OVERLAP, with sources): on for DeepSeek-V3 H100 25.09 (a2a_1f1b for H100, run_script.py "
         "@27dfb3df), B200 MXFP8 pp8 vp2 26.04.01 (B200_FP8_MX_V2), GB300 and GB200 MXFP8 from 26.06 (PRs #3983, "
         "#4226; #4330 measured the GBS 15360 row on 26.06.rc7); Qwen3 30B-A3B and 235B-A22B GB300 and GB200 "
         "MXFP8 from 26.06 (PR #4249 for 26.06; PR #4606); Qwen3 235B H100 25.11-26.04.01 (ep 32 folded over "
         "dp 16 x tp/etp 2, see the expert tensor parallelism note); Qwen3 235B B200 25.11 (pp8 vp2; PR #1760 turned it off after 25.11) and B300 26.02 / "
         "26.02.01 (pp8 vp4; PR #2669 turned it off after 26.02). Off elsewhere: every other config read has "
         "moe_a2a_overlap False (DeepSeek-V3 GB300/GB200 MXFP8 before 26.06, B300 incl. the 26.06 pp8 mbs-2 row, "
         "B200 pp16, BF16; Kimi K2 GB300 mbs 2 -- its moe_a2a_overlap came with r0.6.0, PR #5168; Qwen3 "
         "GB/B200 before 26.06, H100 30B pp1 ep16; all 25.09 rows but DeepSeek-V3 H100). No row combines the flag "
         "with pp > 1 and no model chunks (Megatron-Core and trainsim refuse that; such a row would stay exposed). "
         "Left off because the release's config could not be pinned down (NEMO_EP_OVERLAP_UNDATED): Qwen3 30B "
         "B300 MXFP8 26.06 (PR #4606 enabled it on r0.5.0 after 2026-07-06), Qwen3 30B H100 26.02 / 26.02.01 "
         "(pp2 vp12 GBS 1024) and 25.11 (pp2 vp24), DeepSeek-V3 GB200 FP8-MX 25.11 (pp8 vp4 ep32: no config "
         "with that layout; its source guide sets no EP overlap). Rows on carry 'a2a-ov' in their label."),
    )
    return Dataset(name=name, title="NVIDIA Megatron-Bridge (NeMo) performance tables", metric="tokens_per_s_per_gpu",
                   unit="tok/s/GPU", citation=NEMO_CITATION, notes=notes, cases=tuple(cases),
                   higher_is_better=True)


def _nemo_case(r: dict) -> Case:
    rid = r.get("row_id", "?")
    model_name = _first(r.get("model"))
    system = (r.get("system") or "").strip()
    gpus = _int(_first(r.get("num_gpus")))
    published = _num(_first(r.get("tokens_per_s_per_gpu")))
    tflops = _num(_first(r.get("model_tflops_per_gpu")))
    prec_text = _first(r.get("precision")) or (r.get("precision") or "")
    section = (r.get("section") or "").replace(" Performance", "")
    mla = model_name in NEMO_PIPELINE_LAYOUTS
    tag = re.search(r"\(([^)]*)\)", r.get("model") or "") if mla else None
    label = (f"{model_name}{f' ({tag.group(1).strip()})' if tag else ''} {system.replace('DGX-', '')} n={gpus} "
             f"{prec_text}")
    if section == "Pre-Training":
        section = ""
    else:
        label += f" {section}"
    category = f"{system.replace('DGX-', '')} {'bf16' if prec_text.upper() == 'BF16' else 'fp8'}"
    if published is None or gpus is None:
        return Case(rid, label, published or float("nan"), skip_reason="incomplete row", category=category)
    if section == "LoRA":
        return Case(rid, label, published, skip_reason="LoRA fine-tuning (frozen base weights) is not modelled",
                    category=category)
    p = prec_text.upper()
    if "FP4" in p:
        return Case(rid, label, published, skip_reason="NVFP4: trainsim has no fp4 training dtype",
                    category=category)
    dtype = "bf16" if p == "BF16" else "fp8"  # FP8 / FP8-CS / FP8-MX / MXFP8 / 'not stated' (25.09: FP8)
    if model_name in NEMO_UNMODELLED:
        return Case(rid, label, published, skip_reason=NEMO_UNMODELLED[model_name], category=category)
    if model_name not in NEMO_MODELS:
        return Case(rid, label, published, skip_reason=f"no model preset for {model_name!r}", category=category)
    if system not in NEMO_SYSTEMS:
        return Case(rid, label, published, skip_reason=f"no cluster preset for {system!r}", category=category)
    ints = {k: _int(_first(r.get(k))) for k in ("gbs", "mbs", "seq_len", "fsdp", "tp", "pp", "cp", "vp", "ep",
                                                 "etp")}
    if None in (ints["gbs"], ints["mbs"], ints["seq_len"]):
        return Case(rid, label, published, skip_reason="incomplete batch", category=category)
    tp, pp, cp = ints["tp"] or 1, ints["pp"] or 1, ints["cp"] or 1
    vp, ep, fsdp = ints["vp"] or 1, ints["ep"] or 1, ints["fsdp"] or 0
    cpreset, per_rack = NEMO_SYSTEMS[system]
    # moe_a2a_overlap of the row's config (NEMO_EP_OVERLAP); Megatron-Core (and trainsim) refuse it with pp > 1 and
    # no model chunks, so such a row would keep the all-to-all exposed (no table row is in that case).
    ep_overlap = (ep > 1 and nemo_ep_overlap(model_name, system, prec_text, r.get("nemo_container") or "")
                  and (pp == 1 or vp > 1))
    overrides = {}
    if per_rack and gpus > load_cluster(cpreset).gpus_per_node:
        overrides = {"gpus_per_node": per_rack, "scale_out": {"nics_per_node": per_rack}}
    preset_name = NEMO_MODELS[model_name]
    model_raw: str | dict = preset_name
    moe = load_model(preset_name).is_moe
    # MoE rows: the config's expert tensor parallelism (NEMO_EXPERT_TP; the etp cell when printed) and its
    # selective-recompute modules (NEMO_RECOMPUTE_MODULES; () = none; no entry: recompute none, see the notes).
    etp = nemo_expert_tp(model_name, ints["etp"], tp) if moe else None
    rc_modules = (nemo_recompute_modules(model_name, system, prec_text, r.get("nemo_container") or "")
                  if moe else None)
    raw = {
        "model": model_raw,
        "cluster": _cluster(cpreset, gpus, **overrides),
        "layout": {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "vpp": vp, **({"etp": etp} if etp else {})},
        "training": {"seq_len": ints["seq_len"], "global_batch": ints["gbs"], "micro_batch": ints["mbs"],
                     "dtype": dtype, "recompute": "none", "sequence_parallel": tp > 1, "tp_comm_overlap": tp > 1,
                     "ep_comm_overlap": ep_overlap,
                     **({"zero": 3} if fsdp > 0 else {}), "distributed_optimizer": fsdp == 0,
                     "schedule": "interleaved" if vp > 1 else "1f1b", "flash_attention": True,
                     "dropout": False, "framework": "megatron", "grad_dtype": NEMO_GRAD_DTYPE,
                     "offload_activation_layers": (NEMO_ACTIVATION_OFFLOAD.get((model_name, system), 0)
                                                   if fsdp and dtype == "fp8" else 0)},
    }
    if rc_modules:
        raw["training"].update(recompute="selective", recompute_modules=list(rc_modules))
    label += (f" tp{tp} pp{pp}" + (f" cp{cp}" if cp > 1 else "") + (f" v{vp}" if vp > 1 else "")
              + (f" ep{ep}" if ep > 1 else "") + (f" etp{etp}" if etp and etp != tp else "")
              + (" fsdp" if fsdp else "") + f" mb{ints['mbs']}" + (" a2a-ov" if ep_overlap else "")
              + (f" rc:{'+'.join(rc_modules)}" if rc_modules else ""))
    why_not = None
    if mla:
        # DeepSeek-V3 / Kimi K2: MTP from the row's label, the recipe's pipeline layout, the config's recompute
        # modules (above) and the recipe's optimizer precision, no TP comm overlap (the notes of load_nemo say why).
        mtp = nemo_mtp_layers(r.get("model"))
        model_raw = {"preset": preset_name, "mtp_layers": mtp}
        stage_layers, layout_or_why = nemo_stage_layers(model_name, pp, vp, mtp)
        if stage_layers is None:
            why_not = layout_or_why
        elif rc_modules is None:
            why_not = (f"no recompute_modules for {model_name} {system} {prec_text} {r.get('nemo_container')} in "
                       "NEMO_RECOMPUTE_MODULES: the run's recompute is unknown")
        raw["model"] = model_raw
        raw["layout"]["stage_layers"] = list(stage_layers or ())
        raw["training"].update(tp_comm_overlap=False, optimizer_bytes_per_param=NEMO_MLA_OPTIMIZER_BYTES[model_name])
    scenario, why = (None, why_not) if why_not else _scenario(raw, rid)
    m = load_model(model_raw)
    category += " MoE" if m.is_moe else " dense"
    secondary, fns = {}, {}
    if tflops is not None:
        fpt = (nemo_llama_flops_per_token(m, ints["seq_len"]) if not m.is_moe
               else tflops * 1e12 / published)
        secondary["model_tflops_per_gpu"] = tflops
        fns["model_tflops_per_gpu"] = lambda tok_s, f=fpt: tok_s * f / 1e12
    return Case(rid, label, published, scenario=scenario, skip_reason=why, secondary=secondary,
                secondary_fns=fns, category=category)


# --- nccl-tests bus bandwidth ------------------------------------------------------------------------

NCCL_CITATION = ("nccl-tests all_reduce_perf curves published by Azure (ND A100 v4, ND H100 v5, ND H200 v5, "
                 "ND GB200 v6; Azure/AI-benchmarking-guide) -- nccl_busbw.csv")
NCCL_SYSTEMS = {  # system (as in the CSV) -> cluster preset; one per GPU type
    "Azure ND A100 v4": "dgx-a100",
    "Azure ND H100 v5": "dgx-h100",
    "Azure ND H200 v5": "hgx-h200",
}
_OPS = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
        "alltoall": "all_to_all", "broadcast": "broadcast", "reduce": "reduce"}


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests busbw / algbw: 2(n-1)/n for all-reduce, (n-1)/n for all-gather/reduce-scatter, 1 otherwise."""
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def load_nccl(path: Path | None = None, *, name: str = "nccl") -> Dataset:
    """nccl-tests all-reduce busbw-vs-size curves (single nodes), predicted with the collective cost model."""
    rows = _read_csv(path or validation_path("nccl_busbw.csv"))
    cases: list[Case] = []
    for r in rows:
        rid = r.get("row_id", "?")
        kind = r.get("record_type")
        if kind == "definition":
            continue  # busbw definitions, not measurements
        busbw = _num(r.get("busbw_GBps"))
        size = _num(r.get("msg_size_bytes"))
        n = _int(r.get("num_gpus"))
        system = (r.get("system") or "").strip()
        label = f"{system.replace('Azure ND ', '')} {r.get('msg_size_label') or ''}".strip()
        if kind != "measured_curve" or busbw is None or size is None or n is None:
            cases.append(Case(rid, label[:48], busbw or float("nan"),
                              skip_reason=f"{kind}: a single statement without a full configuration (approximate or user-reported)"))
            continue
        if system not in NCCL_SYSTEMS:
            cases.append(Case(rid, label, busbw, skip_reason=f"no cluster preset for {system}"))
            continue
        op = _OPS.get(re.sub(r"[^a-z]", "", (r.get("collective") or "").split("(")[0].lower()), None)
        if op is None:
            cases.append(Case(rid, label, busbw, skip_reason=f"collective {r.get('collective')!r} not modelled"))
            continue
        nodes = _int(r.get("num_nodes")) or 1
        gpn = _int(r.get("gpus_per_node")) or n
        try:
            cluster = load_cluster(_cluster(NCCL_SYSTEMS[system], n, gpus_per_node=gpn))
        except SpecError as e:
            cases.append(Case(rid, label, busbw, skip_reason=f"not representable: {e}"))
            continue
        if nodes * gpn != n:
            cases.append(Case(rid, label, busbw, skip_reason="inconsistent node count"))
            continue
        size_class = "< 1 MB" if size < 2**20 else ("1-64 MB" if size < 64 * 2**20 else ">= 64 MB")
        # Azure's runner drives every GPU of the node from one thread: ``all_reduce_perf ... -g <num_gpus>``
        # (Azure/AI-benchmarking-guide Benchmarks/NVIDIA/NCCLBandwidth.py).
        coll = CollectiveCase(op, size, n, cluster, gpus_per_thread=gpn if nodes == 1 else 1)
        cases.append(Case(rid, label, busbw, collective=coll, group=system,
                          category=f"{system.replace('Azure ND ', '')} {size_class}"))
    notes = (
        ("metric: nccl-tests bus bandwidth (GB/s = 1e9 B/s), busbw = algbw x 2(n-1)/n for all-reduce; "
        "predicted busbw = nbytes / collective_time x the same factor."),
        ("hardware: one cluster preset per system (ND A100 v4 -> dgx-a100, ND H100 v5 -> dgx-h100 with NVLS, "
        "ND H200 v5 -> hgx-h200); the algorithm is the cost model's choice (Azure's A100 'NVLS' label is "
        "a copy error: A100 has no NVLink SHARP)."),
        ("measurement: Azure's runner (AI-benchmarking-guide Benchmarks/NVIDIA/NCCLBandwidth.py) runs "
         "'all_reduce_perf -b 8 -e 8G -f 2 -g <num_gpus> -n 40': one thread enqueues the all-reduce on all of the "
         "node's GPUs in turn each iteration, so an iteration lasts at least that many per-call launches "
         "(nccl_model.LAUNCH_OVERHEAD_S each), which bounds the small-message curve."),
        ("GB200 NVL (4 GPUs per host) has no cluster preset and is skipped; single statements from issue "
        "threads (approximate, possibly mis-tuned systems) are listed as skipped."),
    )
    return Dataset(name=name, title="nccl-tests all-reduce bus bandwidth", metric="busbw_GBps", unit="GB/s",
                   citation=NCCL_CITATION, notes=notes, cases=tuple(cases), higher_is_better=True)


# --- registry ------------------------------------------------------------------------------------------

def _sc21(unknowns: str) -> Callable[[], Dataset]:
    def load() -> Dataset:
        return load_common_runs(validation_path("megatron_sc21_table1.csv"),
                                name="sc21" if unknowns == "blind" else "sc21-scripts", unknowns=unknowns)
    return load


def _load_memory(path: Path | None = None, name: str = "memory") -> Dataset:
    """The measured-memory runs (trainsim/validation/memory_runs.py, which imports this module)."""
    from trainsim.validation.memory_runs import load_memory
    return load_memory(path, name=name)


# Secondary datasets (not in `validate --dataset all`): the same rows under other documented choices.
SECONDARY_DATASETS = ("sc21-scripts",)

DATASETS: dict[str, Callable[[], Dataset]] = {
    "sc21": _sc21("blind"),
    "sc21-scripts": _sc21("scripts"),
    "mosaic": load_mosaic,
    "zero-bubble": load_zero_bubble,
    "nccl": load_nccl,
    "nemo": load_nemo,
    "korthikanti": load_korthikanti,
    "llama3": load_llama3,
    "memory": _load_memory,
    "vtrain": lambda: vtrain.load_vtrain(external_table("vtrain", vtrain.VTRAIN_FILE), name="vtrain"),
}


def dataset_names() -> list[str]:
    return list(DATASETS)


# The CSV each bundled dataset reads (its numeric cells are range-checked by dataset_checks).
DATASET_CSV = {"sc21": "megatron_sc21_table1.csv", "sc21-scripts": "megatron_sc21_table1.csv",
               "mosaic": "mosaic_mpt_benchmarks.csv", "zero-bubble": "pipeline_bubble.csv", "nccl": "nccl_busbw.csv",
               "nemo": "nemo_megatron_bridge_perf.csv", "korthikanti": "korthikanti_2022.csv",
               "llama3": "llama3_2024.csv", "memory": "memory_runs.csv"}


def dataset_csv(name: str) -> Path:
    """The CSV a named dataset reads: bundled, or an unbundled table from TRAINSIM_VALIDATION_DIR."""
    if name in EXTERNAL_DATASETS:
        return external_table(name, EXTERNAL_DATASETS[name])
    return validation_path(DATASET_CSV[name])


def load_dataset(name_or_path: str) -> Dataset:
    """A bundled dataset by name, or a CSV file in one of the bundled schemas (detected by its columns); every
    row with a negative or non-finite number, or a non-positive published value, is skipped with that reason."""
    from trainsim.validation.dataset_checks import range_checked

    if name_or_path in DATASETS:
        ds = DATASETS[name_or_path]()
        return range_checked(ds, _read_csv(dataset_csv(name_or_path)))
    p = Path(name_or_path)
    if not p.is_file():
        raise SpecError("dataset", f"unknown dataset {name_or_path!r}{did_you_mean(name_or_path, DATASETS)} "
                                   f"(known: {', '.join(DATASETS)}; or a CSV path)")
    return range_checked(_load_csv_dataset(p), _read_csv(p))


def _load_csv_dataset(p: Path) -> Dataset:
    rows = _read_csv(p)
    cols = set(rows[0]) if rows else set()
    if not rows:
        raise SpecError("dataset", f"{p} has no rows")
    if "row_id" not in cols:
        raise SpecError("dataset", f"{p} has no row_id column")
    if {"throughput_tok_per_s", "fsdp_sharding_strategy"} <= cols:
        return load_mosaic(p, name=p.stem)
    if {"peak_memory_gib", "memory_metric"} <= cols:
        return _load_memory(p, name=p.stem)
    if "samples_per_gpu_per_s" in cols:
        return load_zero_bubble(p, name=p.stem)
    if {"tokens_per_s_per_gpu", "model_tflops_per_gpu", "nemo_container"} <= cols:
        return load_nemo(p, name=p.stem)
    if "busbw_GBps" in cols:
        return load_nccl(p, name=p.stem)
    if vtrain.is_vtrain(cols):
        return vtrain.load_vtrain(p, name=p.stem)
    if {"step_time_s", "num_gpus", "layers", "hidden", "heads", "global_batch_seqs"} <= cols:
        return load_common_runs(p, name=p.stem, unknowns="blind")
    raise SpecError("dataset", f"{p}: columns match none of the known schemas (common run schema, MosaicML, "
                               "zero-bubble, nccl-tests)")
