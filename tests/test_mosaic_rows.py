"""MosaicML benchmark rows whose cells contradict themselves are skipped naming the column, never costed as
another run: a precision outside llm-foundry's names, a global batch that is not micro-batch x accumulation x
GPUs, parallel degrees that do not multiply out to the GPU count.

Truth: the rows are synthetic (written here); MPT-7B's architecture is llm-foundry's mpt-7b yaml as the preset
holds it (32 layers, d_model 4096, 32 heads, ffn 16,384, vocab 50,368, 6,658,859,008 parameters).
"""

from __future__ import annotations

import pytest
from table_rows import write_rows

from trainsim.validation.mosaic import load_mosaic

ROW = {"row_id": "m", "model": "MPT-7b", "num_params_reported": "6658859008", "d_model": "4096", "n_heads": "32",
       "n_layers": "32", "ffn_hidden": "16384", "vocab": "50368", "seq_len": "2048", "num_gpus": "8",
       "gpu": "a100_80gb", "micro_batch": "4", "grad_accum": "2", "global_batch_seqs": "64",
       "throughput_tok_per_s": "25000", "mfu_pct": "", "precision": "amp_bf16", "fsdp_sharding_strategy": "FULL_SHARD",
       "activation_checkpointing": "False", "activation_cpu_offload": "False", "tp": "1", "pp": "1", "dp": "8"}


def cases(tmp_path, changes: dict[str, dict]) -> dict:
    path = write_rows(tmp_path / "mosaic.csv", ROW, changes)
    return {c.row_id: c for c in load_mosaic(path, name="m").cases}


def test_the_consistent_row_is_costed_as_stated(tmp_path):
    c = cases(tmp_path, {"ok": {}, "fp8": {"precision": "amp_fp8", "gpu": "h100_80gb"}, "bf16": {"precision": "bf16"}})
    assert c["ok"].skip_reason is None and c["ok"].scenario.training.dtype == "bf16"
    assert c["ok"].scenario.training.global_batch == 64 and c["ok"].scenario.dp == 8
    assert c["bf16"].scenario.training.dtype == "bf16"
    assert c["fp8"].skip_reason is None and c["fp8"].scenario.training.dtype == "fp8"


@pytest.mark.parametrize("change, column, value", [
    ({"precision": "fp32"}, "precision", "fp32"), ({"precision": "amp_fp16"}, "precision", "amp_fp16"),
    ({"global_batch_seqs": "8"}, "global_batch_seqs", "8"),
    ({"micro_batch": "1000000"}, "global_batch_seqs", "1000000"),
    ({"num_gpus": "7"}, "dp", "7"), ({"tp": "2", "dp": "4"}, "tp", "2"), ({"dp": "abc"}, "dp", "abc"),
])
def test_a_contradicting_cell_skips_the_row_naming_it(tmp_path, change, column, value):
    why = cases(tmp_path, {"bad": change})["bad"].skip_reason
    assert why and why.startswith(column) and value in why, why


def test_a_per_gpu_throughput_in_the_total_column_skips_the_row(tmp_path):
    """The total and per-GPU throughput columns must agree (to a rounded digit per GPU): a per-GPU figure in the total
    column was validated as a -99.8 % row; the row is skipped naming both columns."""
    path = write_rows(tmp_path / "mosaic.csv", {**ROW, "throughput_tok_per_s_per_gpu": "3125"},
                      {"ok": {}, "bad": {"throughput_tok_per_s": "3125"}})
    c = {x.row_id: x for x in load_mosaic(path, name="m").cases}
    assert c["ok"].skip_reason is None
    assert c["bad"].skip_reason.startswith("throughput_tok_per_s: 3125 is not throughput_tok_per_s_per_gpu x num_gpus")
