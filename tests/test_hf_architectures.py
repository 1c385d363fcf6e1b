"""Every Hugging Face architecture the config.json loader accepts is costed as that architecture.

Fixtures are the released config.json files (the keys the mapping reads, as published; JSON true/false/null as
True/False/None), each read through the search tools -- the read_file id or address is cited beside it. The
expected sizes come from independent published counts (model cards, technical reports, safetensors totals), never
from ModelSpec's own formula; a count within 0.5 % is required where the source prints three or more digits.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainsim.cli.main import main
from trainsim.cost_models.flops import embedding_ops, head_ops, layer_ops
from trainsim.cost_models.model_flops import layer_flops
from trainsim.specs import SpecError, build_scenario, load_model

HF = Path(__file__).parent / "data" / "hf"

# --- released configs ---------------------------------------------------------------------------------------------

# meta-llama/Llama-3.1-8B config.json (read_file id 30247352769, a public dump of released configs).
LLAMA31_8B = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "tie_word_embeddings": False,
    "vocab_size": 128256,
}
# meta-llama/Llama-3.1-70B: the 8B file with the 70B shapes (read_file id 9355144404, "llama-3.1-70b" entry).
LLAMA31_70B = {**LLAMA31_8B, "hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
               "num_hidden_layers": 80}
# meta-llama/Llama-3.1-405B (read_file id 66032461660, LLAMA_405B; id 9355144404, "llama-3.1-405b").
LLAMA31_405B = {**LLAMA31_8B, "hidden_size": 16384, "intermediate_size": 53248, "num_attention_heads": 128,
                "num_hidden_layers": 126, "head_dim": 128}
# Qwen/Qwen2.5-7B config.json (read_file id 30247352769).
QWEN25_7B = {
    "architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu", "hidden_size": 3584, "intermediate_size": 18944,
    "max_position_embeddings": 131072, "max_window_layers": 28, "model_type": "qwen2", "num_attention_heads": 28,
    "num_hidden_layers": 28, "num_key_value_heads": 4, "sliding_window": 131072, "tie_word_embeddings": False,
    "use_sliding_window": False, "vocab_size": 152064,
}
# Qwen/Qwen3-8B and Qwen/Qwen3-30B-A3B config.json (read_file id 30247352769).
QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 12288, "max_position_embeddings": 40960, "max_window_layers": 36,
    "model_type": "qwen3", "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
    "sliding_window": None, "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936,
}
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "decoder_sparse_step": 1, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 40960,
    "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
    "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 48, "num_key_value_heads": 4, "sliding_window": None, "tie_word_embeddings": False,
    "use_sliding_window": False, "vocab_size": 151936,
}
# Qwen/Qwen3-235B-A22B config.json (read_file id 22176531064): the 30B-A3B keys with the 235B shapes.
QWEN3_235B_A22B = {**QWEN3_30B_A3B, "hidden_size": 4096, "intermediate_size": 12288, "max_window_layers": 94,
                   "moe_intermediate_size": 1536, "num_attention_heads": 64, "num_hidden_layers": 94}
# google/gemma-2-9b config.json (a public copy found with the search tool, corpus code, query "gemma-2-9b config.json
# Gemma2ForCausalLM 3584 14336"; the same shapes in transformers' PaliGemma 2 converter, read_file id 336906707).
GEMMA2_9B = {
    "architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584, "intermediate_size": 14336,
    "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 16, "num_hidden_layers": 42,
    "num_key_value_heads": 8, "query_pre_attn_scalar": 256, "sliding_window": 4096, "vocab_size": 256000,
}
# google/gemma-3-12b-it text_config (read_file id 57742741743, a re-upload's config.json).
GEMMA3_12B_TEXT = {
    "attention_bias": False, "attn_logit_softcapping": None, "final_logit_softcapping": None, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3840, "intermediate_size": 15360,
    "max_position_embeddings": 131072, "model_type": "gemma3_text", "num_attention_heads": 16,
    "num_hidden_layers": 48, "num_key_value_heads": 8, "query_pre_attn_scalar": 256, "rope_local_base_freq": 10000,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "rope_theta": 1000000, "sliding_window": 1024,
    "sliding_window_pattern": 6, "vocab_size": 262208,
}
# microsoft/Phi-3-mini-4k-instruct config.json (read_file id 4881146369).
PHI3_MINI = {
    "architectures": ["Phi3ForCausalLM"], "attention_bias": False, "hidden_act": "silu", "hidden_size": 3072,
    "intermediate_size": 8192, "max_position_embeddings": 4096, "model_type": "phi3", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096,
    "rope_scaling": None, "sliding_window": 2047, "tie_word_embeddings": False, "vocab_size": 32064,
}
# tiiuae/falcon-7b config.json (read_file id 30274148586).
FALCON_7B = {
    "architectures": ["FalconForCausalLM"], "bias": False, "hidden_size": 4544, "model_type": "falcon",
    "multi_query": True, "new_decoder_architecture": False, "num_attention_heads": 71, "num_hidden_layers": 32,
    "num_kv_heads": 71, "parallel_attn": True, "vocab_size": 65024,
}
# facebook/opt-350m config.json (read_file id 10041950342).
OPT_350M = {
    "activation_function": "relu", "architectures": ["OPTForCausalLM"], "do_layer_norm_before": False,
    "ffn_dim": 4096, "hidden_size": 1024, "max_position_embeddings": 2048, "model_type": "opt",
    "num_attention_heads": 16, "num_hidden_layers": 24, "vocab_size": 50272, "word_embed_proj_dim": 512,
}


def _file(name: str) -> dict:
    """The released config.json files of tests/data/hf (Meta-Llama-3-8B, Mistral-7B-v0.1, Mixtral-8x7B, GPT-2)."""
    return json.loads((HF / f"{name}-config.json").read_text())


# --- total parameters against the published counts -------------------------------------------------------------

# (config, published total, source). Where the source prints fewer digits its rounding is the tolerance's floor.
PUBLISHED_TOTAL = {
    # safetensors totals of the Hugging Face repos (tests/test_presets.py RELEASED)
    "llama3.1-8b": (LLAMA31_8B, 8_030_261_248, "meta-llama/Meta-Llama-3-8B safetensors (same shapes)"),
    "llama3.1-70b": (LLAMA31_70B, 70_553_706_496, "meta-llama/Meta-Llama-3-70B safetensors"),
    "llama3.1-405b": (LLAMA31_405B, 405_853_388_800, "meta-llama/Llama-3.1-405B safetensors"),
    "mistral-7b": (_file("mistral-7b"), 7_241_732_096, "mistralai/Mistral-7B-v0.1 safetensors"),
    "mixtral-8x7b": (_file("mixtral-8x7b"), 46_702_792_704, "mistralai/Mixtral-8x7B-v0.1 safetensors"),
    "gpt2": (_file("gpt2"), 124_439_808, "openai-community/gpt2 safetensors"),
    # model cards
    "qwen2.5-7b": (QWEN25_7B, 7.61e9, "Qwen2.5-7B card: 'Number of Parameters: 7.61B' (read_file id 59422089594)"),
    "qwen3-8b": (QWEN3_8B, 8.2e9, "Qwen3-8B card: 'Number of Parameters: 8.2B' (read_file id 70580695973)"),
    "qwen3-30b-a3b": (QWEN3_30B_A3B, 30.5e9, "Qwen3-30B-A3B card: '30.5B in total' (read_file id 2883265704)"),
    "qwen3-235b-a22b": (QWEN3_235B_A22B, 235e9, "Qwen3-235B-A22B card: '235B in total' (read_file id 64991962)"),
    # technical reports: embedding + non-embedding parameters
    "gemma2-9b": (GEMMA2_9B, 917_962_752 + 8_324_201_984,
                  ("Gemma 2 report (arXiv:2408.00118) Table 2 (read_file id 54650675977); its vocabulary is 256,128 "
                  "rows, the config's 256,000")),
    "gemma3-12b": (GEMMA3_12B_TEXT, 1_012e6 + 10_759e6,
                   ("Gemma 3 report (arXiv:2503.19786) Table 1, language model without the 417M vision encoder "
                   "(read_file id 54360040290)")),
    # safetensors totals read from the Hub API
    "phi3-mini": (PHI3_MINI, 3_821_079_552, "microsoft/Phi-3-mini-4k-instruct NumWeights (read_file id 2720486030)"),
    "opt-350m": (OPT_350M, 331_196_416, "OPT-350M n_elements (read_file id 65900525034)"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_TOTAL))
def test_total_parameters_match_the_published_count(name):
    cfg, published, _source = PUBLISHED_TOTAL[name]
    assert load_model(cfg).total_params() == pytest.approx(published, rel=5e-3)


def test_falcon_7b_checkpoint_count_holds_its_tied_head_twice():
    """tiiuae/falcon-7b's checkpoint holds 7,217,189,760 elements (read_file id 14269230532, 'model_size'): its
    lm_head is tied to the word embeddings (FalconForCausalLM) but saved as a tensor of its own, so the model's
    parameters are that minus one V x h table -- 6.92B (multi-query attention: 1 key/value head, not 71; a
    two-matrix GeLU MLP; one input LayerNorm per parallel block)."""
    m = load_model(FALCON_7B)
    assert (m.kv_heads, m.activation, m.block_norms, m.tie_embeddings, m.bias) == (1, "gelu", 1, True, False)
    assert m.total_params() + m.vocab_size * m.hidden == pytest.approx(7_217_189_760, rel=5e-3)


def test_falcon_new_decoder_architecture_reads_num_kv_heads_and_two_parallel_norms():
    """Falcon-40B's shapes (read_file id 27818301263: 128 heads, 8 key/value heads, parallel layernorms): with
    new_decoder_architecture the key/value heads are num_kv_heads and each block has ln_attn and ln_mlp."""
    falcon_40b = {**FALCON_7B, "hidden_size": 8192, "num_attention_heads": 128, "num_hidden_layers": 60,
                  "new_decoder_architecture": True, "num_kv_heads": 8}
    m = load_model(falcon_40b)
    assert (m.kv_heads, m.block_norms, m.dhead) == (8, 2, 64)
    assert load_model({**falcon_40b, "num_ln_in_parallel_attn": 1}).block_norms == 1
    assert load_model({**FALCON_7B, "multi_query": False}).kv_heads == 71


def test_gemma_non_embedding_counts_match_the_reports_exactly():
    """The reports print the non-embedding parameters to the unit (Gemma 2) and to the million (Gemma 3): GeGLU
    MLP, 4 norms per block, head_dim 256, Gemma 3's QK-norm -- all of it lands on them."""
    g2, g3 = load_model(GEMMA2_9B), load_model(GEMMA3_12B_TEXT)
    assert g2.total_params() - g2.vocab_size * g2.hidden == 8_324_201_984
    assert round((g3.total_params() - g3.vocab_size * g3.hidden) / 1e6) == 10_759


@pytest.mark.parametrize("name, cfg, published, digits", [
    # Qwen cards: 'Number of Parameters (Non-Embedding)' -- without the input table and the untied head
    ("qwen2.5-7b", QWEN25_7B, 6.53e9, 2), ("qwen3-8b", QWEN3_8B, 6.95e9, 2), ("qwen3-30b-a3b", QWEN3_30B_A3B, 29.9e9, 1),
    ("qwen3-235b-a22b", QWEN3_235B_A22B, 234e9, 0),
])
def test_qwen_non_embedding_counts_match_the_cards(name, cfg, published, digits):
    m = load_model(cfg)
    assert round((m.total_params() - 2 * m.vocab_size * m.hidden) / 1e9, digits) == pytest.approx(published / 1e9)


# --- active parameters of the MoE models ------------------------------------------------------------------------

def test_mixtral_active_is_the_published_12_9b():
    # Mistral AI, Mixtral of experts announcement: "12.9B active parameters per token"
    assert load_model(_file("mixtral-8x7b")).active_params() == pytest.approx(12.9e9, rel=5e-3)


@pytest.mark.parametrize("cfg, printed, unit", [(QWEN3_30B_A3B, 3.3e9, 0.1e9), (QWEN3_235B_A22B, 22e9, 1e9)])
def test_qwen3_moe_active_is_the_cards_figure(cfg, printed, unit):
    """Qwen3 MoE cards: '3.3B activated' (read_file id 2883265704), '22B activated' (id 64991962). Qwen truncates
    its printed counts (30.53B -> '30.5B', 7.616B -> '7.61B'), so '3.3B' means [3.3, 3.4) and '22B' [22, 23):
    8 of 128 experts plus attention, norms, router, embedding and head (3.35B and 22.19B)."""
    m = load_model(cfg)
    assert (m.num_experts, m.top_k, m.qk_norm) == (128, 8, True)
    assert printed <= m.active_params() < printed + unit


@pytest.mark.parametrize("preset, total", [("deepseek-v3", 671e9), ("deepseek-v2", 236e9)])
def test_deepseek_totals_within_half_a_percent(preset, total):
    # DeepSeek-V3 (arXiv:2412.19437) and DeepSeek-V2 (arXiv:2405.04434) abstracts; configs in test_model_deepseek.py
    assert load_model(preset).total_params() == pytest.approx(total, rel=5e-3)


# --- what each architecture maps to ------------------------------------------------------------------------------

def test_architecture_features_are_mapped():
    g2, g3, q3 = load_model(GEMMA2_9B), load_model(GEMMA3_12B_TEXT), load_model(QWEN3_8B)
    assert (g2.activation, g2.tie_embeddings, g2.sliding_window, g2.global_every, g2.num_global_layers) == (
        "geglu", True, 4096, 2, 21)
    assert (g2.attn_softcap, g2.final_softcap, g2.qk_norm) == (50.0, 30.0, False)
    assert (g3.sliding_window, g3.global_every, g3.num_global_layers, g3.qk_norm, g3.final_softcap) == (
        1024, 6, 8, True, None)
    assert q3.qk_norm and not q3.tie_embeddings and q3.sliding_window is None
    assert load_model(QWEN25_7B).qkv_bias and load_model(QWEN25_7B).sliding_window is None  # use_sliding_window false
    assert load_model(PHI3_MINI).sliding_window == 2047 and load_model(PHI3_MINI).global_every is None
    opt = load_model(OPT_350M)
    assert (opt.embed_proj_dim, opt.position_embedding, opt.bias, opt.tie_embeddings) == (512, "learned", True, True)


def test_layer_types_spell_the_same_pattern():
    types = ["sliding_attention", "full_attention"] * 21
    spelled = load_model({**{k: v for k, v in GEMMA2_9B.items()}, "layer_types": types})
    assert (spelled.sliding_window, spelled.global_every) == (4096, 2)
    gemma3 = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(48)]
    assert load_model({**GEMMA3_12B_TEXT, "layer_types": gemma3}).global_every == 6
    unsaved = {k: v for k, v in GEMMA3_12B_TEXT.items() if k != "sliding_window_pattern"}
    assert load_model(unsaved).global_every == 6  # Gemma3TextConfig's default
    assert load_model({**unsaved, "_sliding_window_pattern": 4}).global_every == 4


# --- refusals -----------------------------------------------------------------------------------------------------

def refused_field(cfg: dict) -> str:
    with pytest.raises(SpecError) as err:
        load_model(cfg)
    return err.value.field


BERT_BASE = {  # google-bert/bert-base-uncased config.json keys
    "architectures": ["BertForMaskedLM"], "hidden_act": "gelu", "hidden_size": 768, "intermediate_size": 3072,
    "max_position_embeddings": 512, "model_type": "bert", "num_attention_heads": 12, "num_hidden_layers": 12,
    "type_vocab_size": 2, "vocab_size": 30522,
}
T5_SMALL = {"architectures": ["T5ForConditionalGeneration"], "d_model": 512, "d_ff": 2048, "model_type": "t5",
            "num_heads": 8, "num_layers": 6, "vocab_size": 32128}


@pytest.mark.parametrize("cfg, field", [
    (BERT_BASE, "model.model_type"),
    (T5_SMALL, "model.model_type"),
    ({**LLAMA31_8B, "model_type": "mamba"}, "model.model_type"),
    ({k: v for k, v in LLAMA31_8B.items() if k != "model_type"}, "model.model_type"),
    ({**LLAMA31_8B, "architectures": ["LlamaForSequenceClassification"]}, "model.architectures"),
    ({"model_type": "gemma3", "text_config": GEMMA3_12B_TEXT}, "model.model_type"),
    ({**FALCON_7B, "alibi": True}, "model.alibi"),
    ({**GEMMA3_12B_TEXT, "use_bidirectional_attention": True}, "model.use_bidirectional_attention"),
    ({**GEMMA3_12B_TEXT, "architectures": ["Gemma3TextModel"]}, "model.architectures"),  # EmbeddingGemma's class
    ({**LLAMA31_8B, "attention_bias": True}, "model.attention_bias"),
    ({**LLAMA31_8B, "mlp_bias": True}, "model.mlp_bias"),
    ({**LLAMA31_8B, "num_local_experts": 8}, "model.num_local_experts"),
    ({**OPT_350M, "layer_norm_elementwise_affine": False}, "model.layer_norm_elementwise_affine"),
    ({**GEMMA2_9B, "layer_types": ["full_attention", "sliding_attention"] * 21}, "model.layer_types"),  # global first
    ({**GEMMA2_9B, "layer_types": ["sliding_attention"] * 41}, "model.layer_types"),  # not one per layer
    ({**LLAMA31_8B, "layer_types": ["sliding_attention", "full_attention"] * 16}, "model.layer_types"),
    ({**GEMMA2_9B, "hidden_activation": "relu"}, "model.hidden_activation"),
    ({k: v for k, v in LLAMA31_8B.items() if k != "intermediate_size"}, "model.intermediate_size"),
])
def test_what_cannot_be_costed_faithfully_is_refused_by_name(cfg, field):
    assert refused_field(cfg) == field


def test_a_bert_config_is_one_line_exit_2_on_the_cli(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(BERT_BASE))
    code = main(["predict", "--model", str(path), "--cluster", "dgx-h100"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "model.model_type" in err[0] and "encoder" in err[0]


# --- costs: windows, QK-norm, soft-capping, extra norms, projections -----------------------------------------------

def _scenario(cfg: dict, seq: int, **training):
    return build_scenario({"model": cfg, "cluster": "dgx-h100", "gpus": 8,
                           "training": {"global_batch": 8, "micro_batch": 1, "seq_len": seq, **training}})


def test_sliding_window_attention_flops_are_the_windows_pairs():
    """Mistral-7B at 8,192 tokens with its 4,096-token window: each query attends to min(i+1, w) keys, so the
    attention core does P_w = w(w+1)/2 + (s-w)w of the causal s(s+1)/2 pairs (closed form); the other ops are
    unchanged. At 4,096 tokens the window covers the sequence and nothing changes."""
    mistral, s, w = _file("mistral-7b"), 8192, 4096
    full = {**mistral, "sliding_window": None}
    attn = {op.name: op for op in layer_ops(_scenario(mistral, s))}["attention"]
    attn_full = {op.name: op for op in layer_ops(_scenario(full, s))}["attention"]
    ratio = (w * (w + 1) / 2 + (s - w) * w) / (s * (s + 1) / 2)
    assert attn.fwd_flops == pytest.approx(ratio * attn_full.fwd_flops, rel=1e-12)
    short = layer_flops(_scenario(mistral, 4096)).model
    assert short == layer_flops(_scenario(full, 4096)).model


def test_gemma2_local_and_global_blocks_average_to_the_models_total():
    """Gemma 2: 21 local blocks (window 4,096) and 21 global ones: the model's attention work at 8,192 tokens is
    21 windowed + 21 full blocks' worth, which every block carries as the mean."""
    s, w = 8192, 4096
    local = (w * (w + 1) / 2 + (s - w) * w) / (s * (s + 1) / 2)
    attn = {op.name: op for op in layer_ops(_scenario(GEMMA2_9B, s))}["attention"]
    attn_full = {op.name: op for op in layer_ops(_scenario({**GEMMA2_9B, "sliding_window": None}, s))}["attention"]
    assert attn.fwd_flops == pytest.approx((21 * local + 21) / 42 * attn_full.fwd_flops, rel=1e-12)


def test_unfused_attention_with_a_window_computes_the_whole_matrix():
    """Without flash attention the window is a mask on the full s x s scores: same FLOPs as full attention."""
    mistral = _file("mistral-7b")
    windowed = layer_flops(_scenario(mistral, 8192, flash_attention=False)).model
    full = layer_flops(_scenario({**mistral, "sliding_window": None}, 8192, flash_attention=False)).model
    assert windowed == full


def test_qk_norm_softcap_post_norms_and_projections_are_ops():
    g2 = {op.name for op in layer_ops(_scenario(GEMMA2_9B, 4096))}
    assert {"post_attn_norm", "post_mlp_norm", "norm1", "norm2"} <= g2 and "qk_norm" not in g2
    assert "logit_softcap" in {op.name for op in head_ops(_scenario(GEMMA2_9B, 4096))}
    g3 = {op.name for op in layer_ops(_scenario(GEMMA3_12B_TEXT, 4096))}
    assert "qk_norm" in g3
    assert "logit_softcap" not in {op.name for op in head_ops(_scenario(GEMMA3_12B_TEXT, 4096))}
    falcon = {op.name for op in layer_ops(_scenario(FALCON_7B, 2048))}
    assert "norm1" in falcon and "norm2" not in falcon
    opt = _scenario(OPT_350M, 2048)
    assert "project_in" in {op.name for op in embedding_ops(opt)}
    heads = {op.name: op for op in head_ops(opt)}
    assert "project_out" in heads and heads["logits"].fwd_gemms == ((2048, 50272, 512),)


def test_gemma2_mlp_is_gated():
    """GeGLU: gate and up projections (2·h·f) in, one out -- fc1 is twice the width of an ungated MLP's."""
    fc1 = {op.name: op for op in layer_ops(_scenario(GEMMA2_9B, 4096))}["fc1"]
    assert fc1.fwd_gemms == ((4096, 2 * 14336, 3584),)


# --- the CLI --------------------------------------------------------------------------------------------------------

def test_predict_json_carries_the_models_parameter_counts(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GEMMA2_9B))
    code = main(["predict", "--model", str(path), "--cluster", "dgx-h100", "--gpus", "8", "--seq-len", "8192",
                 "--global-batch", "16", "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""  # supported features: no warning
    m = load_model(GEMMA2_9B)
    assert json.loads(out)["model"] == {"total_params": m.total_params(), "active_params": m.active_params()}


# --- the memory model holds what ModelSpec counts -------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [
    LLAMA31_8B, QWEN25_7B, PHI3_MINI, _file("mixtral-8x7b"), _file("gpt2"),
    GEMMA2_9B,
    QWEN3_8B,
    FALCON_7B,
    OPT_350M,
], ids=["llama3.1-8b", "qwen2.5-7b", "phi3-mini", "mixtral", "gpt2", "gemma2-9b", "qwen3-8b", "falcon-7b", "opt-350m"])
def test_one_rank_without_parallelism_holds_every_parameter(cfg):
    from trainsim.cost_models.memory import rank_param_shards
    scn = build_scenario({"model": cfg, "cluster": "dgx-h100", "gpus": 1,
                          "training": {"global_batch": 1, "micro_batch": 1, "seq_len": 1024}})
    assert rank_param_shards(scn, 0).held == scn.model.total_params()


def test_each_pipeline_stage_is_costed_with_its_own_global_blocks():
    """Gemma 2 on two pipeline stages of 21 layers: layer i is global when (i + 1) % 2 == 0, so stage 0 holds 10
    global blocks and stage 1 holds 11. Each stage's forward time lies between the all-local and all-global
    variants of the same layout in exactly that proportion."""
    from trainsim.simulator.builder import build_cost_table

    def fwd(cfg: dict) -> list[float]:
        scn = build_scenario({"model": cfg, "cluster": "dgx-h100", "gpus": 2, "layout": {"pp": 2},
                              "training": {"global_batch": 8, "micro_batch": 1, "seq_len": 8192}})
        return [st.chunks[0].fwd_s for st in build_cost_table(scn, ideal_network=True).stages]

    gemma = fwd(GEMMA2_9B)
    local = fwd({**GEMMA2_9B, "layer_types": ["sliding_attention"] * 42})
    full = fwd({**GEMMA2_9B, "sliding_window": None})
    for stage, globals_held in ((0, 10), (1, 11)):
        frac = (gemma[stage] - local[stage]) / (full[stage] - local[stage])
        assert frac == pytest.approx(globals_held / 21, rel=1e-9)
