"""Model presets: parameter counts against the published ones (SC21 tables, released checkpoints)."""

from __future__ import annotations

import pandas as pd
import pytest

from trainsim.data import validation_path
from trainsim.specs import load_model

SC21 = pd.read_csv(validation_path("megatron_sc21_table1.csv"))

# SC21 Table 1 rows [sc21_t1_1 .. sc21_t1_10] and GPT-3 175B [sc21_t2_1] -> our preset names.
SC21_PRESETS = {
    "sc21_t1_1": "gpt-1.7b", "sc21_t1_2": "gpt-3.6b", "sc21_t1_3": "gpt-7.5b", "sc21_t1_4": "gpt-18.4b",
    "sc21_t1_5": "gpt-39.1b", "sc21_t1_6": "gpt-76.1b", "sc21_t1_7": "gpt-145.6b", "sc21_t1_8": "gpt-310.1b",
    "sc21_t1_9": "gpt-529.6b", "sc21_t1_10": "gpt-1t", "sc21_t2_1": "gpt3-175b",
}

# Released checkpoints (config.json + safetensors metadata of each Hugging Face repo).
RELEASED = {
    "llama3-8b": 8_030_261_248,       # meta-llama/Meta-Llama-3-8B
    "llama3-70b": 70_553_706_496,     # meta-llama/Meta-Llama-3-70B
    "llama3-405b": 405_853_388_800,   # meta-llama/Llama-3.1-405B
    "mixtral-8x7b": 46_702_792_704,   # mistralai/Mixtral-8x7B-v0.1
}


def _row(row_id: str) -> pd.Series:
    return SC21[SC21.row_id == row_id].iloc[0]


@pytest.mark.parametrize("row_id", sorted(SC21_PRESETS))
def test_sc21_preset_architecture_matches_row(row_id):
    r, m = _row(row_id), load_model(SC21_PRESETS[row_id])
    assert (m.num_layers, m.hidden, m.num_heads, m.ffn, m.vocab_size) == (
        int(r.layers), int(r.hidden), int(r.heads), int(r.ffn_hidden), int(r.vocab))
    assert m.max_seq_len == int(r.seq_len)


@pytest.mark.parametrize("row_id", sorted(SC21_PRESETS))
def test_sc21_parameter_count_rounds_to_the_printed_value(row_id):
    """SC21 prints billions to one decimal (Table 1, Table 2: GPT-3 174.6B)."""
    r, m = _row(row_id), load_model(SC21_PRESETS[row_id])
    assert round(m.total_params() / 1e9, 1) == pytest.approx(float(r.params_b), abs=1e-9)


@pytest.mark.parametrize("row_id", sorted(SC21_PRESETS))
def test_sc21_parameter_count_equals_eq2_plus_final_layernorm(row_id):
    """formulas.csv params_sc21: P = 12lh²(1 + 13/(12h) + (V+s)/(12lh)); eq. 2 omits the final LayerNorm (2h)."""
    m = load_model(SC21_PRESETS[row_id])
    l, h, V, s = m.num_layers, m.hidden, m.vocab_size, m.max_seq_len
    eq2 = 12 * l * h * h + 13 * l * h + (V + s) * h  # expanded form, exact in integers
    assert m.total_params() == eq2 + 2 * h


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_released_parameter_counts_exact(name):
    m = load_model(name)
    assert m.total_params() == RELEASED[name]
    assert m.published_params == RELEASED[name]


def test_gpt3_is_174_6b_as_sc21_table2():
    r = _row("sc21_t2_1")
    assert load_model("gpt3-175b").total_params() == pytest.approx(float(r.params_b) * 1e9, rel=5e-4)
