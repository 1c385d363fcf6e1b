"""SC21 Tables 1-2, Llama 3 405B and any CSV in the common run schema as validation cases (step time per run).

Each run row maps to a scenario through ``common_runs`` (its GPU, architecture, layout and recipe columns; the
framework era from the source's year). What a row leaves open (micro-batch, interleaving depth, recomputation)
is set by one rule for every row (``unknowns="blind"``) or, for SC21, taken from the authors' reproduction
scripts (``unknowns="scripts"``, settings/sc21_scripts.csv).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trainsim.cost_models.memory import peak_bytes
from trainsim.data import validation_path
from trainsim.specs import SpecError
from trainsim.specs.memo import memoised
from trainsim.validation import common_runs
from trainsim.validation.cases import Case, Dataset, read_rows, scenario_or_skip
from trainsim.validation.cells import num as _num
from trainsim.validation.settings import read_settings, whole

# --- SC21 (Narayanan et al., Megatron-LM on A100) -----------------------------------------------------

SC21_CITATION = ('Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using '
                 'Megatron-LM", SC21 (arXiv:2104.04473), Tables 1-2; run configurations from the authors\' '
                 'reproduction scripts NVIDIA/Megatron-LM examples/sc21/run_table_1.sh and run_figure_12.sh')


@memoised(maxsize=64)
def sc21_script_values() -> tuple[dict[str, tuple[int, int | None]], dict[int, int]]:
    """The values of the authors' reproduction scripts (settings/sc21_scripts.csv, with sources): Table 1 row_id ->
    (micro-batch, layers per virtual pipeline stage or None for the plain 1F1B schedule), and, for Table 2's PTD-P
    rows, model layers -> layers per virtual stage of the same model on the same layout."""
    by_row: dict[str, tuple[int, int | None]] = {}
    by_layers: dict[int, int] = {}
    for s in read_settings("sc21_scripts.csv"):
        if s["row_id"]:
            by_row[s["row_id"]] = (whole(s, "micro_batch"), whole(s, "layers_per_vstage"))
        else:
            by_layers[whole(s, "layers")] = whole(s, "layers_per_vstage")
    return by_row, by_layers


def _script_unknowns(rid: str, mbs_col: int | None, layers: int, pp: int, layers_per_stage: int | None
                     ) -> tuple[int, int]:
    """Micro-batch and interleaving depth of a row under ``unknowns="scripts"``: the authors' script values."""
    by_row, by_layers = sc21_script_values()
    vstage_layers: int | None = None
    if rid in by_row:
        mbs, vstage_layers = by_row[rid]
    else:
        mbs = mbs_col or 1
        if pp > 1:
            vstage_layers = by_layers.get(layers)
    return mbs, (layers_per_stage // vstage_layers) if (vstage_layers and layers_per_stage) else 1


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


# A source's own secondary metric: row -> ({metric: published value}, {metric: step seconds -> predicted value}).
SecondaryMetric = Callable[[dict], tuple[dict, dict]]


def load_common_runs(path: Path, *, name: str = "sc21", unknowns: str = "blind",
                     secondary: SecondaryMetric | None = None, rows: list[dict] | None = None) -> Dataset:
    """SC21 Tables 1-2, or any CSV in the common run schema of validation/README.md: step time per run.

    Each run row maps to a scenario through ``common_runs`` (its GPU, architecture, layout and recipe
    columns; the framework era from the source's year). The paper leaves two things open: the micro-batch size of Table 1 and the interleaving depth of every
    pipelined row. ``unknowns="blind"`` (the primary ``sc21`` dataset, issue 8's rule) sets them by one
    rule for all rows: micro-batch 1 (what the paper states for its Table 2 PTD-P runs) and the smallest
    interleaving depth v > 1 that divides the layers per pipeline stage (the paper ran the interleaved
    schedule for every pipelined row; the smallest depth is the least optimistic choice). ``"scripts"``
    (dataset ``sc21-scripts``) instead takes the values of the authors' reproduction scripts, to show how
    much the unknowns matter. ``secondary`` is a source's own metric formula (e.g. Korthikanti et al.'s MFU),
    used in place of the TFLOP/s column's. ``rows``: the CSV's rows where the caller has read them already.
    """
    if unknowns not in SC21_UNKNOWNS:
        raise SpecError("dataset", f"unknowns must be one of {', '.join(SC21_UNKNOWNS)}, got {unknowns!r}")
    blind = unknowns == "blind"
    rows = read_rows(path) if rows is None else rows
    cases: list[Case] = []
    for r in rows:
        rid = r.get("row_id", "?")
        if not common_runs.is_run_row(r):
            kind = r.get("record_type") or "unknown"
            cases.append(Case(rid, (r.get("description") or "")[:48], float("nan"),
                              skip_reason=f"{kind}: no step time with a full run configuration"))
            continue
        if common_runs.stated(r, "skip_reason"):  # a run the source states trainsim does not model
            cases.append(Case(rid, r.get("label") or rid, common_runs.published_step_time(r) or float("nan"),
                              skip_reason=r["skip_reason"].strip(), group=r.get("group") or None,
                              category=r.get("category") or ""))
            continue
        cases.append(_common_run_case(r, blind, secondary))
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
    seq = common_runs.size_or(r, "seq_len", 2048)
    if "eq.(3)" in basis.replace(" ", ""):
        return sc21_eq3_flops(gbs, seq, layers, hidden, common_runs.size_or(r, "vocab", 51200))
    n_params = _num(r.get("params_b"))
    if "palm" in basis and n_params:
        return gbs * seq * (6 * n_params * 1e9 + 12 * layers * hidden * seq)
    return None


def _common_run_case(r: dict, blind: bool, secondary: SecondaryMetric | None = None) -> Case:
    """One run row: the mapping of common_runs, with the micro-batch and interleaving depth the row leaves
    open set by the unknowns rule (blind) or the SC21 authors' scripts. A cell that cannot be read skips the
    row with the column named."""
    rid = r["row_id"]
    label = f"{r.get('model_name') or '?'} n={r.get('num_gpus') or '?'}"
    try:
        return _common_run_case_checked(r, blind, rid, secondary)
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
    for rc in ("none", "selective", "full"):
        trial = {**raw, "training": {**raw["training"], "recompute": rc}}
        scenario, _ = scenario_or_skip(trial, rid)
        if scenario is not None and peak_bytes(scenario) <= scenario.cluster.gpu.memory_bytes:
            return rc
    return "none"


def _secondary_tflops(r: dict, gbs: int, layers: int, hidden: int, gpus: int) -> tuple[dict, dict]:
    """The printed TFLOP/s per GPU as a secondary metric, when the row's basis is one trainsim knows."""
    secondary, fns = {}, {}
    tflops = _num(r.get("tflops_per_gpu"))
    flops = _source_step_flops(r, gbs, layers, hidden)
    if tflops is not None and flops is not None:
        secondary["tflops_per_gpu"] = tflops
        fns["tflops_per_gpu"] = lambda step_s, f=flops, n=gpus: f / (step_s * n) / 1e12
    return secondary, fns


def _common_run_case_checked(r: dict, blind: bool, rid: str, secondary_fn: SecondaryMetric | None = None) -> Case:
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
    if why := common_runs.throughput_disagreement(r):
        return Case(rid, label, published, skip_reason=why)
    if not shape_ok:
        return Case(rid, label, published, skip_reason="layers, hidden, heads, num_gpus, global_batch_seqs: "
                                                       "each must be a positive whole number")
    if pp <= 0:
        raise SpecError("pp", f"must be a positive whole number, got {pp}")
    zero, _ = common_runs.zero_stage(r)
    layers_per_stage = layers // pp if layers % pp == 0 else None
    mbs_col = common_runs.whole(r, "micro_batch")
    stated_vpp = common_runs.interleave_depth(r, pp, layers_per_stage)
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
        mbs, vpp = _script_unknowns(rid, mbs_col, layers, pp, layers_per_stage)
    raw = common_runs.scenario_mapping(r, mbs, vpp)
    if blind and not common_runs.recompute_stated(r):
        raw["training"]["recompute"] = _lightest_fitting_recompute(raw, rid)
    cp, ep = common_runs.degree(r, "cp"), common_runs.degree(r, "ep")
    label += ((f" cp{cp}" if cp > 1 else "") + (f" ep{ep}" if ep > 1 else "") + f" mb{mbs}"
              + (f" v{vpp}" if vpp > 1 else "") + (" ZeRO-3" if zero == 3 else ""))
    scenario, why = scenario_or_skip(raw, rid)
    secondary, fns = secondary_fn(r) if secondary_fn else _secondary_tflops(r, gbs, layers, hidden, gpus)
    table = (r.get("source_table") or "").split("/")[0].strip() or "runs"
    category = f"{table} ZeRO-3" if zero == 3 else (f"{table} PTD-P" if table.startswith("Table 2") else table)
    label = r["label"].strip() if common_runs.stated(r, "label") else label
    category = r["category"].strip() if common_runs.stated(r, "category") else category
    group = r["group"].strip() if common_runs.stated(r, "group") else None
    return Case(rid, label, published, scenario=scenario, skip_reason=why, secondary=secondary,
                secondary_fns=fns, category=category, group=group)


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
         "(126 + 2) / 16. Sequence parallelism assumed (the paper's TP cites Korthikanti et al.). Block code fused "
         "(block_code column): Meta's stack is not torchtitan's eager block, whose saves would need about 176 GB "
         "per GPU at the 8K layout, while the runs trained on 80 GB H100s."),
        ("metric: step time derived from the printed TFLOPs/GPU on the paper's basis, PaLM MFU (6N + 12*L*H*Q*T "
         "per token, N = 405e9): the tflops_per_gpu column is the same comparison. The CP row's DP is 8 "
         "(Table 4 prints 4, which does not multiply out to 16,384 GPUs); its CP all-gathers K/V before "
         "attention (Sec. 3.3.2: cp_comm allgather). Not modelled: Meta's own pipeline schedule (tunable N, "
         "asynchronous p2p), document masks, the 1:7 oversubscribed aggregation layer above 3,072-GPU pods."),
    )
    return Dataset(name=ds.name, title="Llama 3 405B pre-training on H100 (Meta 2024, Table 4)",
                   metric=ds.metric, unit=ds.unit, citation=LLAMA3_CITATION, notes=notes, cases=ds.cases)
