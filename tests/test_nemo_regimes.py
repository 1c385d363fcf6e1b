"""The host regime of the nemo dataset's MoE rows (trainsim.validation.nemo, NEMO_NOTES 'regimes').

Each MoE row is counted under its host CPU -- x86 on the DGX H100/B200/B300 systems, Grace on the GB200/GB300 NVL72
racks (the cluster presets' host_cpu, as NVIDIA builds the systems) -- and its printed micro-batch (1 or >= 2);
dense rows carry no regime. Checked on three hand-written rows in the table's own column layout, so the test needs
no unbundled data, and through the report's per-category lines.
"""

from __future__ import annotations

import csv

from trainsim.validation.nemo import load_nemo
from trainsim.validation.validate import default_predict_fn, validate

_COLUMNS = ["row_id", "nemo_container", "section", "model", "system", "num_gpus", "precision", "gbs", "mbs", "seq_len",
            "fsdp", "tp", "pp", "cp", "vp", "ep", "etp", "ga", "tokens_per_s_per_gpu", "model_tflops_per_gpu"]
_ROWS = (  # hand-written: (row, model, system, GPUs, gbs, mbs, tp, pp, vp, ep, tok/s/GPU)
    ("r_b200_mb1", "Qwen3_30B_a3B", "DGX-B200", 8, 512, 1, 1, 1, "n/a", 8, 20000),
    ("r_gb300_mb2", "Qwen3_30B_a3B", "DGX-GB300", 8, 512, 2, 1, 1, "n/a", 8, 30000),
    ("r_h100_dense", "LLAMA3_8B", "DGX-H100", 8, 128, 1, 1, 1, "n/a", "", 14000),
)


def _write(tmp_path):
    path = tmp_path / "nemo.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=_COLUMNS)
        w.writeheader()
        for rid, model, system, n, gbs, mbs, tp, pp, vp, ep, tok in _ROWS:
            w.writerow({"row_id": rid, "nemo_container": "26.04", "section": "Pre-Training Performance",
                        "model": model, "system": system, "num_gpus": n, "gbs": gbs,
                        # MXFP8 is a Blackwell recipe (refused on H100): the H100 row is FP8-CS
                        "precision": "FP8-CS" if system == "DGX-H100" else "MXFP8",
                        "mbs": mbs, "seq_len": 4096, "fsdp": 0, "tp": tp, "pp": pp, "cp": 1, "vp": vp, "ep": ep,
                        "tokens_per_s_per_gpu": tok})
    return path


def test_moe_rows_carry_their_host_and_micro_batch_regime(tmp_path):
    cases = {c.row_id: c for c in load_nemo(_write(tmp_path)).cases}
    assert cases["r_b200_mb1"].regimes == ("MoE x86 host, micro-batch 1",)
    assert cases["r_gb300_mb2"].regimes == ("MoE Grace host, micro-batch >= 2",)
    assert cases["r_h100_dense"].regimes == ()
    assert cases["r_b200_mb1"].category == "B200 fp8 MoE"


def test_the_report_prints_a_line_per_regime(tmp_path):
    ds = load_nemo(_write(tmp_path))
    cats = validate(ds, predict_fn=default_predict_fn(fast=True)).by_category()
    assert cats["MoE x86 host, micro-batch 1"]["rows"] == 1
    assert cats["MoE Grace host, micro-batch >= 2"]["rows"] == 1
    assert cats["H100 fp8 dense"]["rows"] == 1
    assert sorted(k for k in cats if k.startswith("MoE")) == ["MoE Grace host, micro-batch >= 2",
                                                               "MoE x86 host, micro-batch 1"]
