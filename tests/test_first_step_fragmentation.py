"""The first optimizer step's fragmentation: Adam's lazily created states replayed through the caching allocator."""

import pytest

from trainsim.cost_models import memory
from trainsim.cost_models.activations import layer_activation_bytes
from trainsim.cost_models.first_step_fragmentation import (
    _extra_reserved,
    block_saved_tensors,
    lazy_state_bytes,
)
from trainsim.cost_models.shapes import LayerShape

MiB = 1 << 20


def _gpt(**kw) -> LayerShape:
    base = dict(b=4, s=1024, h=1280, a=16, kv=16, d=80, f=5120, gated=False, norm="layernorm", rope=False,
                bias=True, experts=1, top_k=1, fe=5120, vocab=50304, tp=2, dropout=True, flash=True)
    return LayerShape(**{**base, **kw})


def test_toy_trace_reserved_peak_by_hand():
    """Two blocks saving one 30 MiB tensor each, two 16 MiB states. Lazily: the states split the two freed 30 MiB
    segments (remainder 14 MiB > kSmallSize), so the second step's two 30 MiB tensors take new segments:
    4 x 30 = 120 MiB. Up front: the states take two 16 MiB segments (kMinLargeAlloc and up: own segment, 2 MiB
    multiple) and the activations reuse theirs: 2 x 16 + 2 x 30 = 92 MiB. The difference is 28 MiB."""
    blocks = ((30 * MiB,), ())
    assert _extra_reserved(blocks, 2, (), (), 1, (16 * MiB, 16 * MiB)) == 28 * MiB


def test_toy_trace_states_larger_than_every_activation_segment_add_nothing():
    # a 40 MiB state fits no freed 30 MiB segment: it takes its own either way
    assert _extra_reserved(((30 * MiB,), ()), 2, (), (), 1, (40 * MiB,)) == 0


def test_toy_trace_checkpointed_block_temporaries_are_reused():
    """Full recompute: each block keeps an 11 MiB input (a 12 MiB segment, remainder 1 MiB not split) and runs a
    24 MiB temporary in its forward and again in its backward; the first step leaves 12 + 24 + 24 MiB reserved
    (the second block's input splits the first temporary's freed segment, so its temporary takes another).
    Lazily, the 20 MiB state lands in a freed 24 MiB segment (remainder 4 MiB: split), so one of the second step's
    24 MiB requests takes a new segment: 84 MiB. Up front the state takes its own 20 MiB segment and the steps
    reuse the same three: 80 MiB. 4 MiB more."""
    blocks = ((11 * MiB,), (24 * MiB,))
    assert _extra_reserved(blocks, 2, (), (), 1, (20 * MiB,)) == 4 * MiB


@pytest.mark.parametrize("kw", [dict(), dict(sp=True), dict(recompute="full"), dict(flash=False),
                                dict(gated=True, norm="rmsnorm", rope=True, bias=False, kv=4)])
def test_block_tensor_list_adds_up_to_the_activation_model(kw):
    shp = _gpt(**kw)
    tensors = block_saved_tensors(shp, "fused")
    assert tensors is not None
    assert sum(tensors) == pytest.approx(layer_activation_bytes(shp, "fused").total, rel=1e-9)


def test_blocks_the_list_does_not_cover_are_not_replayed():
    assert block_saved_tensors(_gpt(experts=8, top_k=2), "fused") is None


@pytest.mark.parametrize("kw", [{}, {"compiled": True}, {"sp": True, "tp": 2}, {"gated": True, "kv": 4},
                                {"gated": True, "kv": 4, "compiled": True}, {"flash": False}])
def test_op_sac_list_is_torchtitans_per_op_policy(kw):
    """torchtitan's per-op SAC keeps the block input, matmuls 1, 3, 5(, 7) and the SDPA output + logsumexp
    (activations.op_sac_saved_tensors): the list adds up to the activation model's block and names q's size first."""
    shp = _gpt(recompute="selective", rc_modules=frozenset({"op_sac"}), **kw)
    tensors = block_saved_tensors(shp, "fused")
    assert tensors is not None
    assert sum(tensors) == pytest.approx(layer_activation_bytes(shp, "fused").total, rel=1e-9)
    block_in, q = tensors[0], tensors[1]
    assert block_in == shp.e * shp.tokens * shp.h / shp.sp_div
    assert q == shp.e * shp.tokens * shp.a * shp.d / shp.tp


def test_which_frameworks_replay():
    from trainsim.specs.training import TrainingSpec
    assert lazy_state_bytes(TrainingSpec(framework="megatron"))[0] == (4, 4)
    none, why = lazy_state_bytes(TrainingSpec(framework="deepspeed"))
    assert none is None and "initialize_optimizer_states" in why
    none, why = lazy_state_bytes(TrainingSpec(framework="torch"))
    assert none is None and "not replayed" in why


def test_only_the_reserved_counter_moves():
    """vs25_gpt2l_tp2 (Megatron GPT-2 large, tp 2, mb 64, nvidia-smi): the replay adds reserved bytes; the
    allocated peak (StageMemory.total less the runtime outside the allocator) does not include them."""
    from trainsim.simulator.predict import predict
    from trainsim.validation.memory_runs import load_memory
    case = next(c for c in load_memory().cases if c.row_id == "vs25_gpt2l_tp2")
    sm = memory.stage_memory(case.scenario, 0)
    cached, first_step, note = memory.reserved_cached(case.scenario, 0, sm)
    assert first_step > 1 << 30 and cached == pytest.approx(sm.allocator_cached + first_step)
    assert "first step" in note
    pred = predict(case.scenario)
    assert pred.peak_allocated_bytes == pytest.approx(sm.allocated)
    assert pred.peak_reserved_bytes == pytest.approx(sm.allocated + cached)
    assert pred.memory_assumptions["first_step_reserved_bytes"] == first_step


def test_toy_trace_logits_segment_takes_the_displaced_activation():
    """Why torch's FSDP runs are not replayed (module doc): two blocks saving one 30 MiB tensor each, a 100 MiB
    loss tensor, one 16 MiB state. Lazily the state splits the first block's freed segment (remainder 14 MiB), so
    the second step's second block takes the logits' freed 100 MiB segment and the logits a new one: 30 + 30 +
    100 + 100 = 260 MiB against 16 + 30 + 30 + 100 = 176 MiB up front, 84 MiB more. Without the loss tensor the
    displaced block takes a new 30 MiB segment: 90 against 76 MiB, 14 MiB."""
    blocks = ((30 * MiB,), ())
    assert _extra_reserved(blocks, 2, (), (100 * MiB,), 1, (16 * MiB,)) == 84 * MiB
    assert _extra_reserved(blocks, 2, (), (), 1, (16 * MiB,)) == 14 * MiB
