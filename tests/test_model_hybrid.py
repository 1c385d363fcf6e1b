"""Hybrid Mamba-2 / attention / MLP / MoE stacks (ModelSpec.hybrid_pattern): parameter counts of the Nemotron-H and
Nemotron 3 presets against their released sizes, the Mamba-2 mixer's parameters by hand, and the pattern's checks."""

import pytest
from pydantic import ValidationError

from trainsim.specs import load_model
from trainsim.specs.model import ModelSpec

# Released totals (presets/models.yaml cites each): the tolerance is 0.5 %, or half a unit of the published figure
# where the source rounds it coarser than that ("47B", "56B": 0.5e9; "3.6B" active: 0.05e9).
RELEASED = {
    "nemotron-h-8b": (8.100852736e9, 0.0),
    "nemotron-h-47b": (47e9, 0.5e9),
    "nemotron-h-56b": (56e9, 0.5e9),
    "nemotron-3-nano-30b-a3b": (31.6e9, 0.0),
}


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_hybrid_total_params_match_release(name):
    m = load_model(name)
    published, half_unit = RELEASED[name]
    assert m.published_params == published
    assert abs(m.total_params() - published) <= max(0.005 * published, half_unit)


def test_nemotron_h_8b_is_the_checkpoint_count_exactly():
    """The 8B checkpoint's tensors sum to 8,100,852,736 (presets/models.yaml): every term of the Mamba-2 mixer
    (conv bias, one D per head, the gated norm) is needed for the exact match."""
    assert load_model("nemotron-h-8b").total_params() == 8_100_852_736


def test_nemotron_3_nano_active_params():
    """3.6B active per token with embeddings (arXiv:2512.20848), published to 0.1B: within half a unit; 23 MoE
    layers of top-6 experts + the shared expert + router, 23 Mamba-2 and 6 attention layers."""
    m = load_model("nemotron-3-nano-30b-a3b")
    assert abs(m.active_params() - m.published_active_params) <= 0.05e9
    assert m.hybrid_counts() == {"M": 23, "E": 23, "*": 6}


def test_mamba_mixer_params_by_hand():
    """Nemotron-H 8B mixer: in_proj 4096 x (2*8192 + 2*8*128 + 128) = 4096 x 18560, conv1d (8192 + 2048) x (4 + 1),
    dt_bias / A_log / D 3 x 128, gated norm 8192, out_proj 8192 x 4096."""
    m = load_model("nemotron-h-8b")
    assert m.mamba_inner == 8192 and m.mamba_nheads == 128
    assert m.mamba_params() == 4096 * 18560 + 10240 * 5 + 3 * 128 + 8192 + 8192 * 4096
    assert m.hybrid_kind("M").layer_params() == m.mamba_params() + 4096


def test_mixed_layer_params_is_the_mean_layer():
    m = load_model("nemotron-h-56b")
    assert m.layer_params() * m.num_layers + m.embedding_params() == pytest.approx(m.total_params(), rel=1e-12)


@pytest.mark.parametrize("bad, field", [
    ({"num_layers": 3}, "num_layers"),
    ({"num_experts": 8, "top_k": 2}, "MoE"),
    ({"block_norms": 2}, "block_norms"),
    ({"mamba_groups": 3}, "mamba_groups"),
    ({"hybrid_pattern": "MXM-"}, "hybrid_pattern"),
])
def test_bad_hybrid_specs_are_refused(bad, field):
    base = dict(num_layers=4, hidden=256, num_heads=4, vocab_size=1000, block_norms=1, hybrid_pattern="M*M-",
                mamba_head_dim=32)
    with pytest.raises(ValidationError, match=field):
        ModelSpec(**{**base, **bad})
