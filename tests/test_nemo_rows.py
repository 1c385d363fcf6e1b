"""NeMo performance-table rows whose count cells or other_columns_json cannot be read are skipped naming the
column and the value: 'maybe' in fsdp is not the distributed optimizer (fsdp 0), a 0 tp not tp 1. The row is
hand-written in the table's column layout (a Llama 3 8B run on 8 H100s), so no unbundled data is needed."""

from __future__ import annotations

import pytest
from table_rows import write_rows

from trainsim.validation.nemo import load_nemo

ROW = {"row_id": "r", "nemo_container": "26.04", "section": "Pre-Training Performance", "model": "LLAMA3_8B",
       "system": "DGX-H100", "num_gpus": "8", "precision": "FP8-CS", "gbs": "128", "mbs": "1", "seq_len": "4096",
       "fsdp": "0", "tp": "1", "pp": "1", "cp": "1", "vp": "n/a", "ep": "", "etp": "", "ga": "",
       "tokens_per_s_per_gpu": "14000", "model_tflops_per_gpu": "", "other_columns_json": "{}"}


def cases(tmp_path, changes: dict[str, dict]) -> dict:
    path = write_rows(tmp_path / "nemo.csv", ROW, changes)
    return {c.row_id: c for c in load_nemo(path, name="n").cases}


def test_readable_cells_are_costed(tmp_path):
    c = cases(tmp_path, {"ok": {}, "extra": {"other_columns_json": '{"note": "x"}'}, "empty": {"other_columns_json": ""}})
    assert all(x.skip_reason is None and x.scenario is not None for x in c.values()), c
    assert c["ok"].scenario.training.distributed_optimizer and c["ok"].scenario.training.zero != 3


@pytest.mark.parametrize("change, column, value", [
    ({"fsdp": "maybe"}, "fsdp", "maybe"), ({"tp": "0"}, "tp", "0"), ({"pp": "two"}, "pp", "two"),
    ({"other_columns_json": "{not json"}, "other_columns_json", "{not json"),
    ({"other_columns_json": "[1, 2]"}, "other_columns_json", "[1, 2]"),
])
def test_an_unreadable_cell_skips_the_row_naming_it(tmp_path, change, column, value):
    why = cases(tmp_path, {"bad": change})["bad"].skip_reason
    assert why and f"{column}: {value!r}" in why, why
