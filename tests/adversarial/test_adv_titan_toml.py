"""A torchtitan job TOML (`calibrate --from-runs LOG --config TOML`) read for everything that changes the run's cost.

The reader took ``activation_checkpoint.mode = "selective"`` as Megatron's selective recompute of the attention core
whatever ``selective_ac_option`` said -- per-op SAC ("op"), or full AC on every second block (torchtitan's default
"2"): all three predicted the same step -- and ignored ``[compile] enable``, ``[float8]`` recipe_name,
enable_fsdp_float8_all_gather and precompute_float8_dynamic_scale_for_fsdp, and converters other than float8. Each
is now costed as the spec fields that describe it (recompute_modules op_sac, compile, fp8_recipe,
float8_all_gather, float8_precompute_scale) or refused naming the TOML key."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, run_cli

RUNS = REPO / "tests" / "data" / "runs"
LOG = RUNS / "torchtitan_llama3_8b_8xh100.log"
TOML = (RUNS / "llama3_8b.toml").read_text()
F8 = TOML.replace("[model]\n", '[model]\nconverters = ["float8"]\n')


def _fit(tmp_path, toml: str):
    cfg = tmp_path / "job.toml"
    cfg.write_text(toml)
    return run_cli(["calibrate", "--from-runs", LOG, "--config", cfg, "--cluster", "dgx-h100", "--no-loo", "--json",
                    "--out", tmp_path / "p.json"])


def _before(tmp_path, toml: str) -> float:
    r = _fit(tmp_path, toml)
    assert r.code == 0, r.err
    return json.loads(r.out)["run_calibration"]["runs"][0]["predicted_before_s"]


@pytest.mark.parametrize("edit, key", [
    (lambda t: t.replace('selective_ac_option = "op"', 'selective_ac_option = "2"'), "selective_ac_option"),
    (lambda t: t.replace('selective_ac_option = "op"\n', ""), "selective_ac_option"),        # torchtitan's "2"
    (lambda t: t.replace('selective_ac_option = "op"', "selective_ac_option = 3"), "selective_ac_option"),
    (lambda t: t.replace("[model]\n", '[model]\nconverters = ["mx"]\n'), "model.converters"),
    (lambda t: t.replace("[model]\n", '[model]\nconverters = "float8"\n'), "model.converters"),
    (lambda t: F8 + '\n[float8]\nrecipe_name = "mxfp8"\n', "float8.recipe_name"),
    (lambda t: F8 + '\n[float8]\nrecipe_name = "rowwise"\nenable_fsdp_float8_all_gather = true\n',
     "float8_all_gather"),
    (lambda t: t.replace("[compile]\nenable = false", '[compile]\nenable = "yes"'), "compile.enable"),
])
def test_what_the_toml_states_and_trainsim_does_not_cost_is_refused(tmp_path, edit, key):
    r = _fit(tmp_path, edit(TOML))
    assert r.code == 2 and len(r.err_lines) == 1 and key in r.err and "Traceback" not in r.err, r.err
    assert not (tmp_path / "p.json").exists()


def test_per_op_sac_is_costed_as_op_sac_and_full_ac_as_full(tmp_path):
    op = _before(tmp_path, TOML)
    every_block = _before(tmp_path, TOML.replace('selective_ac_option = "op"', 'selective_ac_option = "1"'))
    full = _before(tmp_path, TOML.replace('mode = "selective"', 'mode = "full"'))
    none = _before(tmp_path, TOML.replace('mode = "selective"', 'mode = "none"'))
    assert every_block == full > op > none


def test_compile_and_the_float8_settings_each_move_the_prediction(tmp_path):
    base = _before(tmp_path, TOML)
    assert _before(tmp_path, TOML.replace("[compile]\nenable = false", "[compile]\nenable = true")) < base
    assert _before(tmp_path, TOML.replace("[compile]\nenable = false",
                                          '[compile]\nenable = true\ncomponents = ["loss"]')) == base
    f8 = _before(tmp_path, F8)
    gather = _before(tmp_path, F8 + "\n[float8]\nenable_fsdp_float8_all_gather = true\n")
    precompute = _before(tmp_path, F8 + "\n[float8]\nenable_fsdp_float8_all_gather = true\n"
                                        "precompute_float8_dynamic_scale_for_fsdp = true\n")
    rowwise = _before(tmp_path, F8 + '\n[float8]\nrecipe_name = "rowwise"\n')
    assert len({f8, gather, precompute, rowwise}) == 4


def test_the_later_quantize_converter_spelling_reads_as_the_float8_one(tmp_path):
    """Later torchtitan names the converter "quantize.linear.float8" with a [quantize.linear.float8] table
    (tests/integration_tests/h100.py: --model.converters quantize.linear.float8
    --quantize.linear.float8.enable_fsdp_float8_all_gather): read as the [float8] spelling is."""
    old = F8 + '\n[float8]\nrecipe_name = "tensorwise"\nenable_fsdp_float8_all_gather = true\n'
    new = TOML.replace("[model]\n", '[model]\nconverters = ["quantize.linear.float8"]\n') + \
        '\n[quantize.linear.float8]\nrecipe_name = "tensorwise"\nenable_fsdp_float8_all_gather = true\n'
    assert _before(tmp_path, new) == _before(tmp_path, old) != _before(tmp_path, F8)
    r = _fit(tmp_path, new.replace('recipe_name = "tensorwise"', 'recipe_name = "mxfp8"'))
    assert r.code == 2 and "quantize.linear.float8.recipe_name" in r.err, r.err
