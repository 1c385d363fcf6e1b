"""A Megatron-LM log (`calibrate --from-runs LOG`) read for the printed arguments that have a TrainingSpec field.

--overlap-grad-reduce False, --recompute-modules ['mlp'], --grad-reduce-in-bf16, --num-distributed-optimizer-instances,
--fp8-recipe and --fp8-param-gather were ignored: each run was costed with Megatron's defaults (overlapped
reduction, core-attention recompute, fp32 gradients, one optimizer instance) whatever the log said."""

from __future__ import annotations

import json
import re

import pytest
from conftest import REPO, run_cli

LOG = (REPO / "tests" / "data" / "runs" / "megatron_gpt1p3b_8xa100.log").read_text()


def _arg(text: str, key: str, value: str) -> str:
    line = f"  {key} {'.' * max(3, 48 - len(key))} {value}"
    if re.search(rf"^  {key} \.+ .*$", text, re.MULTILINE):
        return re.sub(rf"^  {key} \.+ .*$", line, text, flags=re.MULTILINE)
    return text.replace("  world_size", line + "\n  world_size", 1)


def _fit(tmp_path, text: str):
    log = tmp_path / "m.log"
    log.write_text(text)
    return run_cli(["calibrate", "--from-runs", log, "--cluster", "dgx-a100", "--no-loo", "--json",
                    "--out", tmp_path / "p.json"])


def _before(tmp_path, text: str) -> float:
    r = _fit(tmp_path, text)
    assert r.code == 0, r.err
    return json.loads(r.out)["run_calibration"]["runs"][0]["predicted_before_s"]


def _selective(modules: str | None) -> str:
    text = _arg(LOG, "recompute_granularity", "selective")
    return text if modules is None else _arg(text, "recompute_modules", modules)


def test_each_printed_setting_moves_the_prediction(tmp_path):
    base = _before(tmp_path, LOG)
    assert _before(tmp_path, _arg(LOG, "overlap_grad_reduce", "True")) == base  # as printed in the bundled log
    assert _before(tmp_path, _arg(LOG, "overlap_grad_reduce", "False")) > base
    assert _before(tmp_path, _arg(LOG, "grad_reduce_in_bf16", "True")) < base
    assert _before(tmp_path, _arg(LOG, "num_distributed_optimizer_instances", "2")) != base
    core = _before(tmp_path, _selective(None))
    assert _before(tmp_path, _selective("['core_attn']")) == core  # Megatron-LM's default module list
    assert _before(tmp_path, _selective("['mlp']")) > core
    assert _before(tmp_path, _arg(LOG, "tp_comm_overlap", "True")) == base  # Megatron turns it off at tp 1


@pytest.mark.parametrize("key, value, field", [
    ("recompute_modules", "['bogus']", "recompute_modules"),
    ("recompute_modules", "mlp", "recompute_modules"),
    ("num_distributed_optimizer_instances", "0", "num_distributed_optimizer_instances"),
    ("overlap_grad_reduce", "maybe", "overlap_grad_reduce"),
    ("grad_reduce_in_bf16", "1", "grad_reduce_in_bf16"),
])
def test_a_printed_setting_trainsim_cannot_read_is_refused(tmp_path, key, value, field):
    text = _selective(None) if key == "recompute_modules" else LOG
    r = _fit(tmp_path, _arg(text, key, value))
    assert r.code == 2 and len(r.err_lines) == 1 and field in r.err and "Traceback" not in r.err, r.err
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("recipe, want", [("delayed", "tensorwise"), ("tensorwise", "tensorwise"), ("mxfp8", "mxfp8")])
def test_a_printed_fp8_recipe_and_param_gather_are_the_runs(tmp_path, recipe, want):
    """With --fp8-format set, --fp8-recipe maps onto the recipe trainsim costs (Megatron's delayed scaling is
    tensorwise) and --fp8-param-gather onto fp8_param_gather; a B200 cluster, where MXFP8 runs."""
    from trainsim.validation.run_logs import megatron_run

    text = _arg(_arg(_arg(LOG, "fp8", "hybrid"), "fp8_recipe", recipe), "fp8_param_gather", "True")
    log = tmp_path / "m.log"
    log.write_text(text)
    t = megatron_run(log, "dgx-b200").scenario.training
    assert (t.dtype, t.fp8_recipe, t.fp8_param_gather) == ("fp8", want, True)
    log.write_text(_arg(LOG, "fp8", "hybrid"))
    assert megatron_run(log, "dgx-b200").scenario.training.fp8_param_gather is False


def test_an_fp8_recipe_trainsim_does_not_cost_is_refused(tmp_path):
    r = _fit(tmp_path, _arg(_arg(LOG, "fp8", "hybrid"), "fp8_recipe", "blockwise"))
    assert r.code == 2 and len(r.err_lines) == 1 and "fp8_recipe" in r.err, r.err
