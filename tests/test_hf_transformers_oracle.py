"""ModelSpec's parameter counts against transformers' own modelling code (an independent oracle).

Each fixture config is instantiated with ``AutoModelForCausalLM.from_config`` on the meta device (shapes only, no
memory) and its parameters counted, tied tensors once. transformers is a test dependency only (pinned to 5.24.0 in
pyproject's test extra), not one of trainsim's; skipped where it is not installed. Every family equals the parameter.
"""

from __future__ import annotations

import warnings

import pytest
import test_hf_architectures as T
import test_model_deepseek as D
import test_model_gpt_oss as G

from trainsim.specs import load_model

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

CASES = {
    "llama3.1-8b": T.LLAMA31_8B, "qwen2.5-7b": T.QWEN25_7B, "qwen3-8b": T.QWEN3_8B, "qwen3-30b-a3b": T.QWEN3_30B_A3B,
    "qwen3-235b-a22b": T.QWEN3_235B_A22B, "gemma2-9b": T.GEMMA2_9B, "gemma3-12b": T.GEMMA3_12B_TEXT,
    "phi3-mini": T.PHI3_MINI, "falcon-7b": T.FALCON_7B, "opt-350m": T.OPT_350M, "mistral-7b": T._file("mistral-7b"),
    "mixtral-8x7b": T._file("mixtral-8x7b"), "gpt2": T._file("gpt2"), "deepseek-v3": D.DEEPSEEK_V3,
    "deepseek-v2": D.DEEPSEEK_V2, "deepseek-v2-lite": D.DEEPSEEK_V2_LITE, "glm4.5": D.GLM45,
    # the released files' mxfp4 quantization_config describes the checkpoint's storage, not the trained model
    **{name: {k: v for k, v in cfg.items() if k != "quantization_config"}
       for name, cfg in (("gpt-oss-20b", G.GPT_OSS_20B), ("gpt-oss-120b", G.GPT_OSS_120B))},
}
# Qwen2-MoE's shared-expert gate, Linear(hidden, 1) per block, has no ModelSpec term (hf_config._qwen2_moe_fields).
SHARED_EXPERT_GATE = {"qwen1.5-moe-a2.7b": (D.QWEN15_MOE, 2048 * 24), "qwen2-57b-a14b": (D.QWEN2_57B, 3584 * 28)}


def transformers_count(cfg: dict) -> int:
    kw = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "auto_map")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conf = transformers.AutoConfig.for_model(cfg["model_type"], **kw)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(conf)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", sorted(CASES))
def test_parameter_count_equals_transformers(name):
    assert load_model(CASES[name]).total_params() == transformers_count(CASES[name])


@pytest.mark.parametrize("name", sorted(SHARED_EXPERT_GATE))
def test_qwen2_moe_differs_by_its_shared_expert_gate_only(name):
    cfg, gate = SHARED_EXPERT_GATE[name]
    assert load_model(cfg).total_params() + gate == transformers_count(cfg)
