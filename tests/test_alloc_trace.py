"""kernels/alloc_trace.py: the allocation trace torch records for torchtitan's eager Llama step under FakeTensorMode."""

from __future__ import annotations

import pytest

from trainsim.cost_models import activations as act
from trainsim.cost_models.caching_allocator import replay
from trainsim.cost_models.shapes import LayerShape

torch = pytest.importorskip("torch")
from trainsim.kernels.alloc_trace import Recorder, titan_step_events

DIMS = {"b": 2, "s": 64, "h": 128, "a": 8, "kv": 2, "f": 352, "vocab": 1024}


def _live_at(events, mark: str, nth: int = 0) -> int:
    """Bytes alive at the ``nth`` ``mark``: each allocation's bytes until its free."""
    live: dict[int, int] = {}
    for ev in events:
        if ev[0] == "mark" and ev[1] == mark:
            if nth == 0:
                return sum(live.values())
            nth -= 1
        if ev[0] == "alloc":
            live[ev[1]] = ev[2]
        elif ev[0] == "free":
            live.pop(ev[1])
    raise AssertionError(f"no mark {mark!r}")


def test_recorder_sees_allocations_and_frees_in_order():
    rec = Recorder()
    with rec:
        x = torch.empty(1000)
        y = x * 2
        del x
        z = y.view(10, 100)  # a view: no new storage
        del y, z
    assert rec.events == [("alloc", 0, 4000), ("alloc", 1, 4000), ("free", 0), ("free", 1)]


def test_forward_keeps_what_the_titan_costing_saves():
    """No recompute: at the end of the first forward each block's saved tensors (activations.py ``"titan"``, held
    against torch's autograd in tests/test_titan_oracle.py) and the last block's output are alive, nothing else
    (parameters are skipped, the embedding output is no block's saved tensor)."""
    layers = 3
    events = titan_step_events(layers=layers, recompute="none", steps=1, **DIMS)
    shp = LayerShape(b=2, s=64, h=128, a=8, kv=2, d=16, f=352, gated=True, norm="rmsnorm", rope=True, bias=False,
                     experts=0, top_k=0, fe=0, vocab=1024, dtype="bf16", flash=True, titan=True)
    saved = act.layer_activation_bytes(shp, "fused").total
    assert _live_at(events, "forward_end") == layers * saved + 2 * 2 * 64 * 128


def test_full_checkpointing_keeps_only_block_inputs():
    events = titan_step_events(layers=3, recompute="full", steps=1, **DIMS)
    assert _live_at(events, "forward_end") == 4 * 2 * 2 * 64 * 128  # three block inputs and the last output


def test_each_step_frees_all_but_the_states():
    """Two steps with Adam's states created after the first backward: what stays is the states, 2 x 4 bytes per
    element of each parameter's 1/shard piece."""
    events = titan_step_events(layers=2, recompute="op_sac", shard=4, **DIMS)
    h, f, a, kv, d, v = 128, 352, 8, 2, 16, 1024
    params = [v * h] + 2 * [h * a * d, h * kv * d, h * kv * d, a * d * h, h * f, f * h, h * f, h, h] + [h, v * h]
    states = sum(2 * 4 * -(-n // 4) for n in params)
    assert _live_at(events, "step_end", 0) == states
    assert _live_at(events, "step_end", 1) == states
    assert replay([e for e in events if e[0] != "mark"]).peak_reserved > 0
