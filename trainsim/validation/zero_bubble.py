"""The zero-bubble paper's measured pipeline schedules (Qi et al., ICLR 2024, Table 4) as validation cases:
samples/s per GPU of 1F1B, interleaved 1F1B and ZB-1p, and each schedule's ratio to 1F1B.

The runs are rows of the common run schema (zero_bubble_2024.csv, with the explicit recipe columns and the
assumptions they rest on) read by the common loader; what is specific to the source is its metric, samples/s
per GPU, and the comparison of each schedule with 1F1B."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from trainsim.data import validation_path
from trainsim.validation.cases import Case, Dataset, read_rows
from trainsim.validation.cells import num as _num
from trainsim.validation.common_run_cases import load_common_runs

# --- Zero-bubble pipeline schedules (Qi et al., ICLR 2024, Table 4) -----------------------------------

ZB_CITATION = ('Qi et al., "Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024 (arXiv:2401.10241), '
               'Tables 3-4 (setup, measured samples/s per GPU)')


def load_zero_bubble(path: Path | None = None, *, name: str = "zero-bubble") -> Dataset:
    """Zero-bubble paper Table 4: samples/s per GPU for 1F1B, interleaved 1F1B and ZB-1p (pure pipeline)."""
    path = path or validation_path("zero_bubble_2024.csv")
    samples = {r["row_id"]: _num(r.get("samples_per_gpu_per_s")) for r in read_rows(path)}
    runs = load_common_runs(path, name=name, secondary=lambda r: ({}, {})).cases
    cases = [dataclasses.replace(c, published=samples[c.row_id]) if (samples.get(c.row_id) or 0) > 0
             else dataclasses.replace(c, published=float("nan"), scenario=None,
                                      skip_reason=c.skip_reason or "samples_per_gpu_per_s: not a positive number")
             for c in runs]
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


def _with_ratio_to_1f1b(cases: list[Case]) -> list[Case]:
    """Attach the published throughput ratio to the group's 1F1B row (the predicted one is filled later)."""
    base = {c.group: c.published for c in cases if c.label.endswith(" 1F1B")}
    out = []
    for c in cases:
        b = base.get(c.group)
        sec = dict(c.secondary)
        if b:
            sec["ratio_to_1f1b"] = c.published / b
        out.append(dataclasses.replace(c, secondary=sec))
    return out
