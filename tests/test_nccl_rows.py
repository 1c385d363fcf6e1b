"""nccl-tests rows whose node cells cannot be read, or whose node is not the preset's, are skipped naming the
column -- a PCIe node is not costed on the preset's NVSwitch, a zero or spelled-out count not replaced by 1 or by
the GPU count. Rows are synthetic (written here) on the Azure ND A100 v4 system of settings/nccl_systems.csv."""

from __future__ import annotations

import pytest
from table_rows import write_rows

from trainsim.validation.nccl_runs import load_nccl

ROW = {"row_id": "r", "record_type": "measured_curve", "collective": "allreduce", "system": "Azure ND A100 v4",
       "num_gpus": "8", "num_nodes": "1", "gpus_per_node": "8", "intra_node": "NVLink3 + NVSwitch",
       "msg_size_label": "1M", "msg_size_bytes": "1048576", "busbw_GBps": "100", "nccl_version": ""}


def cases(tmp_path, changes: dict[str, dict]) -> dict:
    path = write_rows(tmp_path / "nccl.csv", ROW, changes)
    return {c.row_id: c for c in load_nccl(path, name="n").cases}


def test_nvlink_rows_and_empty_cells_are_costed(tmp_path):
    c = cases(tmp_path, {"ok": {}, "nvlink": {"intra_node": "NVLink3"},
                         "empty": {"intra_node": "", "num_nodes": "", "gpus_per_node": ""}})
    assert all(x.skip_reason is None and x.collective is not None for x in c.values())


@pytest.mark.parametrize("change, column, value", [
    ({"intra_node": "PCIe Gen4"}, "intra_node", "PCIe Gen4"), ({"intra_node": "Ethernet"}, "intra_node", "Ethernet"),
    ({"num_nodes": "0"}, "num_nodes", "0"), ({"gpus_per_node": "eight"}, "gpus_per_node", "eight"),
    ({"gpus_per_node": "2.5"}, "gpus_per_node", "2.5"),
])
def test_a_node_cell_that_is_not_the_presets_skips_the_row(tmp_path, change, column, value):
    why = cases(tmp_path, {"bad": change})["bad"].skip_reason
    assert why and f"{column}: {value!r}" in why, why


@pytest.mark.parametrize("change, column", [
    ({"msg_size_label": "1G"}, "msg_size_label"),                      # 1 GiB printed over a 1 MiB row
    ({"algbw_GBps": "10"}, "algbw_GBps"),                              # busbw 100 is 57.1 x 2(n-1)/n, not 10
    ({"busbw_GBps": "1824.8"}, "exceeds twice the GPU's NVLink rate"),  # x8 on A100 NVLink (300 GB/s per GPU)
])
def test_columns_that_contradict_each_other_skip_the_row(tmp_path, change, column):
    """Redundant columns that disagree were read one way and the contradiction reported as model error: the row is
    skipped naming the column. nccl-tests' own rounded labels ('65K' for 65,536 bytes) and consistent rates pass."""
    path = write_rows(tmp_path / "nccl.csv", {**ROW, "algbw_GBps": ""},
                      {"bad": change, "ok": {"msg_size_label": "65K", "msg_size_bytes": "65536",
                                             "algbw_GBps": "57.14", "busbw_GBps": "100"}})
    c = {x.row_id: x for x in load_nccl(path, name="n").cases}
    assert c["ok"].skip_reason is None
    assert c["bad"].skip_reason and column in c["bad"].skip_reason, c["bad"].skip_reason
