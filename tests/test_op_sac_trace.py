"""cost_models/op_sac_trace.py: the per-op allocation sequence of torchtitan's eager step under per-op SAC, generated
from shapes, held against torch's own trace of the same step (kernels/alloc_trace.py) at small widths."""

from __future__ import annotations

import csv

import pytest

from trainsim.cost_models import op_sac_trace as ot
from trainsim.cost_models.caching_allocator import replay

torch = pytest.importorskip("torch")
from trainsim.kernels.alloc_trace import titan_step_events

SHARD = 8


def _shape(events):
    """The events with handles renamed to their allocation's rank: what the allocator sees, whatever the names."""
    ids: dict = {}
    out = []
    for ev in events:
        if ev[0] == "alloc":
            ids[ev[1]] = len(ids)
            out.append(("alloc", int(ev[2])))
        elif ev[0] == "free":
            out.append(("free", ids[ev[1]]))
    return out


def _named(shaped):
    """Replayable events of ``_shape``'s output: each allocation named by its rank."""
    allocs = iter(range(len(shaped)))
    return [("alloc", next(allocs), n) if k == "alloc" else ("free", n) for k, n in shaped]


def _generated(layers: int, dims: dict, kept: bool) -> list[tuple]:
    size = ot.sizes(**{k: dims[k] for k in ("b", "s", "h", "a", "kv", "f", "vocab")})
    elems = ot.titan_param_elems(layers=layers, **{k: dims[k] for k in ("h", "a", "kv", "f", "vocab")})
    states = [("alloc", ("state", i), 4 * -(-n // SHARD)) for i, n in enumerate(x for x in elems for _ in "mv")]
    phases = ot.tables(gqa=dims["kv"] < dims["a"], logits_kept=kept)
    return ot.step_events(0, layers, size, phases) + states + ot.step_events(1, layers, size, phases)


@pytest.mark.parametrize("dims, kept", [
    ({"b": 1, "s": 16, "h": 40, "a": 4, "kv": 4, "f": 72, "vocab": 232}, True),   # every size symbol distinct
    ({"b": 3, "s": 16, "h": 60, "a": 6, "kv": 2, "f": 88, "vocab": 232}, False),  # GQA, late-2024 loss
    ({"b": 2, "s": 512, "h": 256, "a": 4, "kv": 4, "f": 688, "vocab": 1000}, True),  # the large pool
    ({"b": 2, "s": 512, "h": 256, "a": 8, "kv": 2, "f": 688, "vocab": 1000}, False),
])
def test_generated_sequence_is_torchs_own(dims, kept):
    """Two steps of two blocks, Adam's states created lazily: the generator's allocations and frees are torch's,
    one for one (torch frees the states when FakeTensorMode exits, after the last step), and so is the replay."""
    layers = 2
    traced = _shape(titan_step_events(layers=layers, recompute="op_sac", shard=SHARD, logits_kept=kept, **dims))
    generated = _shape(_generated(layers, dims, kept))
    assert traced[:len(generated)] == generated
    assert all(ev[0] == "free" for ev in traced[len(generated):])
    assert replay(_named(traced)) == replay(_generated(layers, dims, kept))


def test_cached_bytes_of_pr165_step():
    """Llama 2 7B at torchtitan PR #165's local batch 8 x 2048 over 8 ranks: the compute stream's reserved less
    allocated peak, 4.29 GiB, as the trace's replay prints it (benchmarks/bench_titan_allocator_trace.py)."""
    size = ot.sizes(b=8, s=2048, h=4096, a=32, f=11008, vocab=32000)
    elems = ot.titan_param_elems(layers=32, h=4096, a=32, kv=32, f=11008, vocab=32000)
    states = tuple(4 * -(-n // SHARD) for n in elems for _ in range(2))
    assert ot.trace_cached_bytes(32, tuple(sorted(size.items())), states) / 2**30 == pytest.approx(4.29, abs=0.01)


def _scenario(row: str = "tt165_fsdp2_sac_resv", **training):
    """A run of memory_runs.csv (PR #165's per-op SAC runs: FSDP2, and FSDP1 over torchtitan's block code) with
    ``training`` changed (a key set to None dropped)."""
    from trainsim.data import validation_path
    from trainsim.specs import build_scenario
    from trainsim.validation.memory_runs import scenario_mapping
    with open(validation_path("memory_runs.csv"), newline="", encoding="utf-8") as f:
        raw = next(r for r in csv.DictReader(f) if r["row_id"] == row)
    mapping = scenario_mapping(raw)
    mapping["training"].update(training)
    mapping["training"] = {k: v for k, v in mapping["training"].items() if v is not None}
    return build_scenario(mapping)


def test_covers_only_the_code_it_replays():
    """The scenario's reserved term is the replay's where the step is the traced one -- torchtitan's eager block
    under FSDP 1 or 2 with per-op SAC and its kept fp32 logits -- or that step compiled, and ``None`` (the
    loss-stage term) elsewhere."""
    assert ot.op_sac_cached_bytes(_scenario(), SHARD) == pytest.approx(4.29 * 2**30, rel=0.01)
    assert ot.op_sac_cached_bytes(_scenario("tt165_fsdp1_sac_resv"), SHARD) == pytest.approx(4.29 * 2**30, rel=0.01)
    assert ot.op_sac_cached_bytes(_scenario("tt24_t1_fsdp"), SHARD) == pytest.approx(7.45 * 2**30, rel=0.01)
    for other in ({"recompute": "full", "recompute_modules": None}, {"cross_entropy": "fused"},
                  {"global_batch": 128}):
        assert ot.op_sac_cached_bytes(_scenario(**other), SHARD) is None, other
    # compiled, the eager step's tables stand in (compiled_stand_in); for a compiled loss, the late-2024 eager loss
    assert ot.op_sac_cached_bytes(_scenario(compile=True), SHARD) == pytest.approx(4.29 * 2**30, rel=0.01)
    late_2024 = ot.op_sac_cached_bytes(_scenario(compile=True, cross_entropy="eager_fp32"), SHARD)
    assert late_2024 is not None
    assert ot.op_sac_cached_bytes(_scenario(compile=True, cross_entropy="fused"), SHARD) == late_2024
    assert ot.op_sac_cached_bytes(_scenario("tt165_fsdp1_sac_resv", block_code=None), SHARD) is None  # Composer's


def test_plain_ddp_is_not_the_replayed_fsdp_step():
    """The tables free each weight gradient as FSDP reduce-scatters it and cut Adam's states to the FSDP shard: the
    same block code under plain DDP (zero 0, gradients kept to the all-reduce, whole states) is not covered, FSDP's
    SHARD_GRAD_OP (zero 2) is."""
    fsdp1 = "tt165_fsdp1_sac_resv"
    assert not ot.covers(_scenario(fsdp1, zero=0))
    assert ot.op_sac_cached_bytes(_scenario(fsdp1, zero=0), SHARD) is None
    assert ot.covers(_scenario(fsdp1, zero=2)) and ot.covers(_scenario(fsdp1))


def test_adam_states_take_the_parameters_dtype_without_master_weights():
    """master_weights false: torch.optim's m, v are ``zeros_like`` the bf16 parameter, 2 bytes an element, not 4;
    the replay is the trace's with those states (PR #165's Llama 2 7B step over 8 ranks)."""
    pure = _scenario(master_weights=False)
    assert ot.adam_state_element_bytes(pure.training) == 2 and ot.adam_state_element_bytes(_scenario().training) == 4
    size = ot.sizes(b=8, s=2048, h=4096, a=32, f=11008, vocab=32000)
    elems = ot.titan_param_elems(layers=32, h=4096, a=32, kv=32, f=11008, vocab=32000)
    states = tuple(2 * -(-n // SHARD) for n in elems for _ in range(2))
    expected = ot.trace_cached_bytes(32, tuple(sorted(size.items())), states)
    assert ot.op_sac_cached_bytes(pure, SHARD) == pytest.approx(expected, rel=1e-12)
    assert ot.op_sac_cached_bytes(pure, SHARD) != pytest.approx(ot.op_sac_cached_bytes(_scenario(), SHARD), rel=1e-3)


def test_lazy_states_land_in_the_cached_segments():
    """Llama 3.1 8B's per-op SAC step (local batch 2 x 8192, GQA, late 2024's loss): Adam's states created after the
    first backward take segments the step leaves cached, so the two steps' reserved peak is the stateless one's
    (62.15 GiB) within 0.2 GiB for the states of 32, 64 and 128 ranks (1.87 / 0.93 / 0.47 GiB), while those of 8
    ranks (7.48 GiB) do not fit and add more than themselves (op_sac_trace module doc)."""
    GiB = 1 << 30
    size = ot.sizes(b=2, s=8192, h=4096, a=32, kv=8, f=14336, vocab=128256)
    elems = ot.titan_param_elems(layers=32, h=4096, a=32, kv=8, f=14336, vocab=128256)
    phases = ot.tables(gqa=True, logits_kept=False)
    steps = (ot.step_events(0, 32, size, phases), ot.step_events(1, 32, size, phases))
    bare = replay(steps[0] + steps[1]).peak_reserved

    def reserved(shard: int) -> tuple[float, float]:
        states = [4 * -(-n // shard) for n in elems for _ in "mv"]
        lazy = [("alloc", ("state", i), x) for i, x in enumerate(states)]
        return (replay(steps[0] + lazy + steps[1]).peak_reserved - bare) / GiB, sum(states) / GiB

    for shard in (32, 64, 128):
        extra, states = reserved(shard)
        assert 0.0 <= extra <= 0.2 and states >= 0.45
    extra, states = reserved(8)
    assert extra > states > 7.0


def test_compiled_steps_are_replayed_with_the_eager_tables():
    """torchtitan's compiled per-op SAC step (the June 2025 H200 run: float8 Linear layers, compiled loss) is
    replayed with the eager tables standing in (op_sac_trace.compiled_stand_in) and says so; fused block code is
    not."""
    from trainsim.cost_models import memory
    from trainsim.specs import build_scenario
    from trainsim.validation.memory_runs import load_memory
    case = next(c for c in load_memory().cases if c.row_id == "tt25_h200_64")
    scn = case.scenario
    assert ot.compiled_stand_in(scn) and ot.covers(scn)
    assert ot.states_note(scn) is ot.COMPILED_NOTE
    sm = memory.stage_memory(scn, 0)
    assert sm.allocator_cached == pytest.approx(ot.op_sac_cached_bytes(scn, 64) + sm.grads_off_peak + sm.stream_pools)
    fused = build_scenario({**scn.model_dump(), "training": {**scn.training.model_dump(), "block_code": "fused"}})
    assert not ot.compiled_stand_in(fused) and not ot.covers(fused)
