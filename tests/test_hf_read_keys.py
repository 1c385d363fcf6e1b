"""A config.json key the model_type's transformers class does not read changes nothing; one that contradicts the
class is refused naming the key (transformers 5.24.0, models/<type>/modeling_<type>.py):

GPT-2 and OPT build every head's keys and values and head_dim = hidden // heads (GPT2Attention, OPTAttention), as
Falcon does (FalconConfig.head_dim, a read-only property: a head_dim key is refused, as transformers refuses
it); GPT-2's MLP is n_inner wide (else 4 x hidden), never intermediate_size.
Mixtral's and gpt-oss's experts are intermediate_size wide (MixtralExperts, GptOssExperts); moe_intermediate_size is
not read. A MoE architecture's expert count of null, 0 or false is refused (it would be costed dense). Gemma 2
alternates local and global blocks whatever sliding_window_pattern says; Gemma 3 reads it, and a pattern below 1 is
refused. FalconDecoderLayer builds ln_attn and ln_mlp only when num_ln_in_parallel_attn is 2, else one norm.

Each config is written to a file (tmp_path) and loaded as the CLI loads it."""

from __future__ import annotations

import json

import pytest

from tests.test_hf_architectures import FALCON_7B, GEMMA2_9B, GEMMA3_12B_TEXT, _file
from tests.test_model_deepseek import QWEN15_MOE
from tests.test_model_gpt_oss import GPT_OSS_20B
from trainsim.cli.main import main
from trainsim.specs import SpecError, load_model

GPT2_BASE = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024,
             "vocab_size": 50257}
# OPT-125m's shapes (facebook/opt-125m config.json)
OPT_125M = {"model_type": "opt", "num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
            "ffn_dim": 3072, "max_position_embeddings": 2048, "vocab_size": 50272, "word_embed_proj_dim": 768,
            "do_layer_norm_before": True}
MIXTRAL = _file("mixtral-8x7b")


def _load(tmp_path, cfg: dict, name: str = "config"):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    return load_model(str(path))


def _params(tmp_path, cfg: dict) -> int:
    return _load(tmp_path, cfg).total_params()


def _refused(tmp_path, cfg: dict) -> str:
    with pytest.raises(SpecError) as err:
        _load(tmp_path, cfg)
    return err.value.field


def test_gpt2_closed_form():
    """GPT-2 124M: V h + positions h + 12 (4h^2 + 4h [qkv, proj] + 8h^2 + 5h [fc, proj] + 4h [2 LayerNorms]) + 2h
    (final LayerNorm), tied head: 124,439,808."""
    h, layers = 768, 12
    closed = 50257 * h + 1024 * h + layers * (12 * h * h + 13 * h) + 2 * h
    assert closed == 124_439_808
    assert load_model(GPT2_BASE).total_params() == closed


@pytest.mark.parametrize("key,value", [("num_key_value_heads", 4), ("head_dim", 32), ("intermediate_size", 1000)])
def test_gpt2_ignores_keys_its_class_does_not_read(tmp_path, key, value):
    assert _params(tmp_path, {**GPT2_BASE, key: value}) == 124_439_808


def test_gpt2_mlp_width_is_n_inner(tmp_path):
    """n_inner 1000 instead of 4h = 3072: 12 x (2 h + 1) x (3072 - 1000) fewer weights and biases."""
    assert _params(tmp_path, {**GPT2_BASE, "n_inner": 1000}) == 124_439_808 - 12 * (2 * 768 + 1) * (3072 - 1000)


@pytest.mark.parametrize("key,value", [("num_key_value_heads", 4), ("head_dim", 32), ("intermediate_size", 1000)])
def test_opt_ignores_keys_its_class_does_not_read(tmp_path, key, value):
    assert _params(tmp_path, {**OPT_125M, key: value}) == load_model(OPT_125M).total_params()


def test_opt_mlp_width_is_ffn_dim(tmp_path):
    assert _refused(tmp_path, {k: v for k, v in OPT_125M.items() if k != "ffn_dim"}) == "model.ffn_dim"


def test_falcon_refuses_head_dim(tmp_path):
    """FalconConfig.head_dim is a property without a setter: transformers cannot load a config that sets it."""
    assert _refused(tmp_path, {**FALCON_7B, "head_dim": 32}) == "model.head_dim"
    assert load_model(FALCON_7B).dhead == 4544 // 71


@pytest.mark.parametrize("cfg", [MIXTRAL, GPT_OSS_20B], ids=["mixtral", "gpt-oss"])
def test_mixtral_and_gpt_oss_experts_are_intermediate_size_wide(tmp_path, cfg):
    assert _params(tmp_path, {**cfg, "moe_intermediate_size": 1024}) == load_model(cfg).total_params()


def test_qwen2_moe_experts_are_moe_intermediate_size_wide(tmp_path):
    """Qwen2MoeExperts read moe_intermediate_size: 1024 instead of 1408 removes 3 h (1408 - 1024) per expert."""
    narrower = _params(tmp_path, {**QWEN15_MOE, "moe_intermediate_size": 1024})
    assert narrower == load_model(QWEN15_MOE).total_params() - 24 * 60 * 3 * 2048 * (1408 - 1024)


@pytest.mark.parametrize("cfg,key", [(MIXTRAL, "num_local_experts"), (QWEN15_MOE, "num_experts")],
                         ids=["mixtral", "qwen2_moe"])
@pytest.mark.parametrize("count", [None, 0, False, -1])
def test_a_moe_architecture_without_a_positive_expert_count_is_refused(tmp_path, cfg, key, count):
    assert _refused(tmp_path, {**cfg, key: count}) == f"model.{key}"


def test_an_expert_count_of_null_exits_2_with_one_line(tmp_path, capsys):
    path = tmp_path / "mixtral.json"
    path.write_text(json.dumps({**MIXTRAL, "num_local_experts": None}))
    code = main(["predict", "--model", str(path), "--cluster", "dgx-h100", "--gpus", "8", "--seq-len", "1024",
                 "--global-batch", "64", "--json"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "num_local_experts" in err


def test_gemma2_always_alternates(tmp_path):
    m = _load(tmp_path, {**GEMMA2_9B, "sliding_window_pattern": 3})
    assert (m.sliding_window, m.global_every) == (4096, 2)


@pytest.mark.parametrize("pattern", [0, -2])
def test_gemma3_pattern_below_one_is_refused(tmp_path, pattern):
    assert _refused(tmp_path, {**GEMMA3_12B_TEXT, "sliding_window_pattern": pattern}) == "model.sliding_window_pattern"


def test_gemma3_pattern_one_is_every_block_global(tmp_path):
    assert _load(tmp_path, {**GEMMA3_12B_TEXT, "sliding_window_pattern": 1}).global_every is None


FALCON_40B = {**FALCON_7B, "hidden_size": 8192, "num_attention_heads": 128, "num_hidden_layers": 60,
              "new_decoder_architecture": True, "num_kv_heads": 8}


@pytest.mark.parametrize("cfg,norms", [
    ({**FALCON_40B, "num_ln_in_parallel_attn": 3}, 1), ({**FALCON_40B, "num_ln_in_parallel_attn": 1}, 1),
    (FALCON_40B, 2), ({**FALCON_40B, "parallel_attn": False}, 2), ({**FALCON_7B, "num_ln_in_parallel_attn": 2}, 2),
], ids=["new-3", "new-1", "new-default", "new-sequential", "7b-2"])
def test_falcon_norms_as_the_decoder_layer_builds_them(tmp_path, cfg, norms):
    """2 LayerNorm vectors of h per norm: a block with one norm has 2 h fewer parameters than with two."""
    m = _load(tmp_path, cfg)
    assert m.block_norms == norms
    one = _params(tmp_path, {**cfg, "parallel_attn": True, "num_ln_in_parallel_attn": 1})
    assert m.total_params() == one + (norms - 1) * 2 * cfg["hidden_size"] * cfg["num_hidden_layers"]


def test_an_expert_count_key_the_class_does_not_read_is_ignored(tmp_path):
    """MixtralConfig reads num_local_experts (alias num_experts), not n_routed_experts; Qwen2MoeConfig num_experts."""
    assert _params(tmp_path, {**MIXTRAL, "n_routed_experts": 4}) == load_model(MIXTRAL).total_params()
    only_routed = {**{k: v for k, v in MIXTRAL.items() if k != "num_local_experts"}, "n_routed_experts": 8}
    assert _refused(tmp_path, only_routed) == "model.num_experts"
    assert _params(tmp_path, {**QWEN15_MOE, "num_local_experts": 8}) == load_model(QWEN15_MOE).total_params()


def test_top_k_is_read_from_num_experts_per_tok_only(tmp_path):
    """No config class reads a top_k key: Mixtral routes num_experts_per_tok (default 2) tokens per expert."""
    unstated = {k: v for k, v in MIXTRAL.items() if k != "num_experts_per_tok"}
    assert _load(tmp_path, {**unstated, "top_k": 4}).top_k == 2
    assert _load(tmp_path, {**MIXTRAL, "num_experts_per_tok": 4}).top_k == 4


def test_gpt2_names_are_read_for_gpt2_only(tmp_path):
    """LlamaConfig reads num_hidden_layers, not GPT-2's n_layer (absent, it defaults to 32): refused, not guessed."""
    six = load_model({**GPT2_BASE, "n_layer": 6}).total_params()
    assert _params(tmp_path, {**GPT2_BASE, "num_hidden_layers": 6}) == six
    llama = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 512,
             "vocab_size": 1000, "n_layer": 2}
    with pytest.raises(SpecError, match="num_hidden_layers"):
        _load(tmp_path, llama)


def test_falcon_reads_its_old_n_embed_over_hidden_size(tmp_path):
    """FalconConfig pops the old name n_embed and sets hidden_size from it: given both, n_embed is the width."""
    assert _load(tmp_path, {**FALCON_7B, "n_embed": 1024, "num_attention_heads": 16}).hidden == 1024
    assert _load(tmp_path, FALCON_7B).hidden == FALCON_7B["hidden_size"]
