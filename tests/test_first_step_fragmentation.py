"""The first optimizer step's fragmentation: Adam's lazily created states replayed through the caching allocator."""

import pytest

from trainsim.cost_models import first_step_fragmentation as fsf
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


# Llama 3 8B's stage tensors at 1024 tokens, micro-batch 1 (block_saved_tensors, head_saved_tensors), one block per
# stage to keep the whole replays short, with a few of its optimizer's state tensors
_LLAMA_KEPT = (8 * MiB, 8 * MiB, 12 * MiB, 8 * MiB, 8 * MiB, 8 * MiB, 56 * MiB, 28 * MiB, 139264.0)
_LLAMA_HEAD = (8 * MiB, 4096.0, 8 * MiB, 525344768.0)
_STATES = (64 * MiB, 64 * MiB, 16 * MiB, 16 * MiB, 224 * MiB, 224 * MiB, 16384.0, 16384.0, 8 * MiB, 8 * MiB)
_FOLD_CASES = {
    "no recompute, loss stage": ((_LLAMA_KEPT, ()), (), _LLAMA_HEAD),
    "full recompute, first stage": (((sum(_LLAMA_KEPT),), _LLAMA_KEPT), (8192.0,), ()),
}


@pytest.mark.parametrize("case", sorted(_FOLD_CASES))
def test_folded_replay_equals_the_whole_replay(case, monkeypatch):
    """Past fsf.FOLD_COST x (FOLD_BASE + 2 FOLD_SPAN) micro-batches in flight the difference is extrapolated from
    three samples; it equals the whole replay at every residue of the span tried, and no whole replay runs."""
    blocks, first, last = _FOLD_CASES[case]
    lo = fsf.FOLD_COST * (fsf.FOLD_BASE + 2 * fsf.FOLD_SPAN) + 1
    whole = {m: fsf._replayed(blocks, 1, first, last, m, _STATES) for m in (lo, lo + 5, lo + fsf.FOLD_SPAN + 2)}
    assert any(whole.values())  # the states do displace activations here
    calls = []
    replayed = fsf._replayed
    monkeypatch.setattr(fsf, "_replayed", lambda *a: calls.append(a[4]) or replayed(*a))
    for m, expected in whole.items():
        calls.clear()
        assert _extra_reserved(blocks, 1, first, last, m, _STATES) == expected
        assert max(calls) < m


def test_replays_do_not_grow_with_the_micro_batches_in_flight(monkeypatch):
    """GPipe's 10^6 micro-batches in flight: three replays of fewer than FOLD_BASE + 3 FOLD_SPAN micro-batches."""
    calls = []
    replayed = fsf._replayed
    monkeypatch.setattr(fsf, "_replayed", lambda *a: calls.append(a[4]) or replayed(*a))
    blocks, first, last = _FOLD_CASES["no recompute, loss stage"]
    _extra_reserved(blocks, 1, first, last, 10**6, _STATES)
    assert len(calls) == 3 and max(calls) < fsf.FOLD_BASE + 3 * fsf.FOLD_SPAN


@pytest.mark.parametrize(("name", "diff", "folds"), [
    ("constant past a transient", lambda m: 5 * MiB if m > 20 else m * MiB, True),
    ("period 2, sampled at the count's phase", lambda m: (m % 2) * MiB + (MiB if m > 20 else 0), True),
    ("affine: replayed whole", lambda m: 7 * MiB * m, False),
    ("period 3: the samples never agree", lambda m: (m % 3) * MiB, False),
])
def test_fold_takes_agreeing_samples_else_replays_whole(name, diff, folds, monkeypatch):
    """The fold on stand-in differences: one that settles (at the count's phase) is taken from the samples at every
    residue of the span; one whose samples disagree is replayed whole, and the answer is the stand-in's own."""
    calls = []
    monkeypatch.setattr(fsf, "_replayed", lambda *a: calls.append(a[4]) or diff(a[4]))
    for m in (193, 194, 200, 1000, 4097, 10**6 + 3):
        calls.clear()
        assert _extra_reserved(((MiB,), ()), 1, (), (), m, (MiB,)) == diff(m)
        assert (m not in calls) == folds
