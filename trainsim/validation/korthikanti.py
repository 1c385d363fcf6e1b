"""Korthikanti et al. 2022 (Megatron-LM on A100, sequence parallelism / selective recompute) as validation cases:
Table 5's iteration times and the Sec. 6.3 data-parallel run; every layout choice is printed in the paper.

The runs are rows of the common run schema (korthikanti_2022.csv, with the explicit recipe columns and the
assumptions they rest on) read by the common loader; what is specific to the source is its MFU formula."""

from __future__ import annotations

from pathlib import Path

from trainsim.data import validation_path
from trainsim.validation.cases import Dataset
from trainsim.validation.cells import integer as _int
from trainsim.validation.cells import num as _num
from trainsim.validation.common_run_cases import load_common_runs
from trainsim.validation.common_runs import size_or

# --- Korthikanti et al. 2022 (Megatron-LM on A100, sequence parallelism / selective recompute) ------------

KORTHIKANTI_CITATION = ('Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", '
                        'MLSys 2023 (arXiv:2205.05198), Table 3 (configurations), Table 5 and Sec. 6.3 (iteration times)')


def korthikanti_model_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Korthikanti et al. Appendix A: model FLOPs of one iteration (their MFU basis)."""
    return 72.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (12 * hidden * layers))


def korthikanti_mfu(r: dict) -> tuple[dict, dict]:
    """The row's printed MFU % and its prediction from a step time: Appendix A FLOPs over 312 TFLOP/s per GPU."""
    mfu = _num(r.get("mfu_pct"))
    if mfu is None:
        return {}, {}
    gpus, gbs = _int(r["num_gpus"]), _int(r["global_batch_seqs"])
    flops = korthikanti_model_flops(gbs, size_or(r, "seq_len", 2048), _int(r["layers"]), _int(r["hidden"]),
                                    size_or(r, "vocab", 51200))
    return {"mfu_pct": mfu}, {"mfu_pct": lambda step_s, f=flops, n=gpus: 100 * f / (step_s * n * 312e12)}


def load_korthikanti(path: Path | None = None, *, name: str = "korthikanti") -> Dataset:
    """Table 5 and the Sec. 6.3 data-parallel run: every layout choice is printed in the paper (Table 3)."""
    cases = load_common_runs(path or validation_path("korthikanti_2022.csv"), name=name,
                             secondary=korthikanti_mfu).cases
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
