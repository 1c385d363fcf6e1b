"""A config.json that leaves a key to its transformers config class, where the class's default is not what the
mapping would assume without it, is refused naming the key -- not costed with the wrong width, window or routing.

The defaults cited are the classes' own (HF_ARCHS / _HF_CLASS_DEFAULTED in trainsim/specs/hf_config.py):
MistralConfig num_key_value_heads 8 and sliding_window 4096, Gemma2Config soft-caps 50.0 / 30.0, Qwen3MoeConfig
num_experts 128, num_experts_per_tok 8, moe_intermediate_size 768. Without the refusal a Mistral-7B file missing
num_key_value_heads was costed with 32 key/value heads (8.05 B parameters, not 7.24 B), a Qwen3-30B-A3B file missing
moe_intermediate_size with experts eight times too wide (233 B) and one missing num_experts as a 3.3 B dense model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_hf_architectures import GEMMA2_9B, GEMMA3_12B_TEXT, LLAMA31_8B, PHI3_MINI, QWEN3_30B_A3B
from trainsim.cli.main import main
from trainsim.specs import SpecError, load_model

HF = Path(__file__).parent / "data" / "hf"
MISTRAL_7B = json.loads((HF / "mistral-7b-config.json").read_text())
MIXTRAL = json.loads((HF / "mixtral-8x7b-config.json").read_text())


def without(cfg: dict, key: str) -> dict:
    assert key in cfg, key
    return {k: v for k, v in cfg.items() if k != key}


@pytest.mark.parametrize("cfg,key", [
    (MISTRAL_7B, "num_key_value_heads"), (MISTRAL_7B, "sliding_window"), (MIXTRAL, "num_key_value_heads"),
    (GEMMA2_9B, "sliding_window"), (GEMMA2_9B, "attn_logit_softcapping"), (GEMMA2_9B, "final_logit_softcapping"),
    (GEMMA2_9B, "num_key_value_heads"), (GEMMA3_12B_TEXT, "sliding_window"),
    (QWEN3_30B_A3B, "moe_intermediate_size"), (QWEN3_30B_A3B, "num_experts_per_tok"),
])
def test_a_key_left_to_a_class_default_of_its_own_is_refused(cfg, key):
    with pytest.raises(SpecError) as ei:
        load_model(without(cfg, key))
    assert ei.value.field == f"model.{key}"


@pytest.mark.parametrize("cfg,key", [(QWEN3_30B_A3B, "num_experts"), (MIXTRAL, "num_local_experts")])
def test_a_moe_file_without_its_expert_count_is_refused_not_costed_dense(cfg, key):
    with pytest.raises(SpecError) as ei:
        load_model(without(cfg, key))
    assert ei.value.field == "model.num_experts"


def test_null_is_a_stated_value_and_heads_default_where_the_class_says_so():
    assert load_model({**MISTRAL_7B, "sliding_window": None}).sliding_window is None  # no window, as stated
    # LlamaConfig and Phi3Config default num_key_value_heads to num_attention_heads: absence is not refused
    assert load_model(without(LLAMA31_8B, "num_key_value_heads")).kv_heads == 32
    phi = {k: v for k, v in PHI3_MINI.items() if k != "num_key_value_heads"}
    assert load_model(phi).kv_heads == 32


def test_gpt2_cross_attention_is_refused():
    gpt2 = json.loads((HF / "gpt2-config.json").read_text())
    with pytest.raises(SpecError) as ei:
        load_model({**gpt2, "add_cross_attention": True})
    assert ei.value.field == "model.add_cross_attention"


def test_on_the_cli_it_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(without(MISTRAL_7B, "num_key_value_heads")))
    assert main(["predict", "--model", str(path), "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "8",
                 "--seq-len", "4096"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.num_key_value_heads" in err[0]


def test_mistral_layer_types_must_agree_with_its_one_window():
    """MistralForCausalLM windows every layer whatever layer_types says (a local/global list is Ministral's): a
    pattern with full-attention layers beside sliding_window is refused, not costed as local/global blocks."""
    n = MISTRAL_7B["num_hidden_layers"]
    with pytest.raises(SpecError) as ei:
        load_model({**MISTRAL_7B, "layer_types": ["sliding_attention", "full_attention"] * (n // 2)})
    assert ei.value.field == "model.layer_types"
    same = load_model({**MISTRAL_7B, "layer_types": ["sliding_attention"] * n})
    assert (same.sliding_window, same.global_every) == (MISTRAL_7B["sliding_window"], None)
