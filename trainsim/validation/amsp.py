"""ZeRO over many ranks: the AMSP paper's LLaMA runs from 8 to 1,024 A800 GPUs (Chen et al., arXiv:2311.00257)
as validation cases -- each sharding layout's step time at 8 and at 1,024 GPUs and the slowdown between them.

The runs are rows of the common run schema (amsp_2023.csv, hand-entered from the paper's text, with the explicit
recipe columns and the assumptions they rest on) read by the common loader. The paper prints MFU on the Megatron-LM
FLOP formula; the CSV's step time is derived from it (``derived_fields``). What is specific to the source is the
comparison it makes: at a fixed global batch of 4M tokens, the time each GPU spends per token grows from 8 to
1,024 GPUs, and how much depends on where the ZeRO shards live (over all ranks, or within each node).
``slowdown_vs_smallest`` is that growth, ``step_time x GPUs`` of a row over the same of its group's smallest run
(the same model, layout and global batch), i.e. the ratio of the smallest run's MFU to this one's -- independent of
the FLOP formula and of the absolute kernel speed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from trainsim.data import validation_path
from trainsim.validation.cases import Case, Dataset, read_rows
from trainsim.validation.cells import integer as _int
from trainsim.validation.common_run_cases import load_common_runs
from trainsim.validation.korthikanti import korthikanti_mfu

AMSP_CITATION = ('Chen et al., "AMSP: Reducing Communication Overhead of ZeRO for Efficient LLM Training", '
                 'arXiv:2311.00257v2 (2024), Secs. I, III-A, III-C, VI-A, VI-B (MFU from 8 to 1,024 A800 GPUs)')

# The secondary metric every row of a scaling group carries (module docstring).
SLOWDOWN = "slowdown_vs_smallest"


def with_group_slowdowns(cases: list[Case], gpus: dict[str, int]) -> list[Case]:
    """Attach each row's published slowdown to its group's smallest run (module docstring); ``gpus``: row_id -> GPUs."""
    base: dict[str, Case] = {}
    for c in cases:
        if c.group and (c.group not in base or gpus[c.row_id] < gpus[base[c.group].row_id]):
            base[c.group] = c
    out = []
    for c in cases:
        b = base.get(c.group or "")
        sec = dict(c.secondary)
        if b is not None and b is not c:
            sec[SLOWDOWN] = (c.published * gpus[c.row_id]) / (b.published * gpus[b.row_id])
        out.append(dataclasses.replace(c, secondary=sec))
    return out


def published_trends(cases: tuple[Case, ...]) -> dict[str, float]:
    """Group -> published slowdown of its largest run (skipped rows included: the layouts trainsim refuses)."""
    return {c.group: c.secondary[SLOWDOWN] for c in cases if c.group and SLOWDOWN in c.secondary}


def load_amsp(path: Path | None = None, *, name: str = "amsp") -> Dataset:
    """The AMSP paper's LLaMA-7B/13B runs from 8 to 1,024 A800 GPUs: ZeRO-1 and ZeRO-3 over all ranks and MiCS (ZeRO-3
    within each node, ``dp_shard`` 8) under DeepSpeed, predicted; AMSP's ZeRO-1 within each node (its own engine)
    listed, skipped with the reason."""
    path = path or validation_path("amsp_2023.csv")
    rows = read_rows(path)
    gpus = {r["row_id"]: _int(r["num_gpus"]) or 0 for r in rows}
    # The paper's MFU is on the Megatron-LM formula (Sec. VI-A, footnote 2: attention not halved for the causal
    # mask), the one Korthikanti et al.'s Appendix A prints: korthikanti_mfu over 312 TFLOP/s per GPU.
    runs = load_common_runs(path, name=name, secondary=korthikanti_mfu, rows=rows)
    cases = with_group_slowdowns(list(runs.cases), gpus)
    trends = published_trends(tuple(cases))
    notes = (
        ("metric: seconds per step, derived from the printed MFU (Megatron-LM formula over 312 TFLOP/s, as the "
         "paper computes it); the secondary mfu_pct is the printed value. slowdown_vs_smallest = (step x GPUs) / "
         "(the same at 8 GPUs): the growth of GPU time per token from 8 to 1,024 GPUs at the fixed 4M-token batch."),
        ("published slowdowns 8 -> 1,024 GPUs: " + "; ".join(f"{g} x{v:.2f}" for g, v in sorted(trends.items()))
         + ". DeepSpeed-MiCS is predicted as ZeRO-3 over each node's 8 GPUs with its once-per-step gradient "
         "all-reduce across the nodes (specs/mics.py); AMSP's ZeRO-1 within each node is its own engine, which "
         "trainsim does not cost (skipped rows): its published trend is the direction, not a checked number. "
         "Megatron-Core's partial distributed optimizer (training.distributed_optimizer_instances) shards the "
         "optimizer states the same way but is not AMSP's communication: it reduce-scatters within the node and "
         "all-reduces 1/8 of each bucket across the nodes, then all-gathers after the step, where AMSP all-reduces "
         "the whole gradient over all ranks and broadcasts whole updated tensors within the node, overlapped with "
         "the next forward (arXiv:2311.00257v2 Sec. IV-C 2, Fig. 6b) -- so those rows stay skipped."),
        ("hardware: A800 80GB (A100 compute, NVLink 400 GB/s bidirectional), 8 per node, 4 HDR 200 Gb/s NICs per node "
         "(Sec. VI-A 2) -- dgx-a100 with the A800's NVLink and 4 NICs; leaf-spine placement not stated (rail-optimized)."),
        ("software: DeepSpeed v0.10-v0.12.3 (framework deepspeed-2023: its ZeRO++ baseline needs v0.10.0, the runs precede "
         "v0.12.4) bf16, FlashAttention-2, no recomputation for 7B/13B, micro-batch "
         "1 x 4096 tokens, no TP/PP; overlap of communication with computation enabled in every baseline "
         "(Sec. VI-A 4): DeepSpeed overlap_comm, set with the overlap_grad_reduce column for the ZeRO-1 rows "
         "(ZeRO-3 overlaps by default)."),
    )
    return Dataset(name=name, title="AMSP: ZeRO from 8 to 1,024 A800 GPUs (LLaMA-7B/13B)", metric="step_time_s",
                   unit="s", citation=AMSP_CITATION, notes=notes, cases=tuple(cases))
