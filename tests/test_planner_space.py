"""The planner's search space: the divisor walk finds exactly the layouts `resolve` accepts (checked by
brute force over the product space), and the cheap memory filter equals the full per-stage model."""

import itertools
import random

import pytest

from trainsim.cost_models import memory
from trainsim.simulator.planner import PlanRow, pareto_front, peak_memory_bytes
from trainsim.simulator.search_space import (
    Candidate,
    SearchLimits,
    enumerate_candidates,
    splits,
    valid_scenarios,
)
from trainsim.specs import Layout, SpecError, TrainingSpec, load_cluster, load_model, resolve


def brute_force(model, cluster, gpus, gb, seq, lim: SearchLimits):
    """Every point of the raw product space that resolve accepts and the documented policy keeps."""
    cap = lim.max_tp or cluster.gpus_per_node
    out = set()
    rng = range(1, gpus + 1)
    for tp, cp, pp in itertools.product(rng, rng, rng):
        if gpus % (tp * cp * pp) or tp > cap:
            continue
        if cp > 1 and seq // cp < lim.min_tokens_per_cp_rank:
            continue
        dp = gpus // (tp * cp * pp)
        # policy: a MoE model with tp > 1 tries Megatron's default etp (= tp) and folding (etp 1)
        etps = (tp, 1) if model.is_moe and tp > 1 else (None,)
        for ep, vpp, mb, etp in itertools.product(range(1, max(model.num_experts, 1) + 1),
                                                  range(1, model.num_layers + 3), range(1, lim.max_micro_batch + 1),
                                                  etps):
            for sched, zero, rc in itertools.product(("gpipe", "1f1b", "interleaved", "zb"), (0, 1, 2, 3),
                                                     ("none", "selective", "full")):
                if pp == 1 and sched != "1f1b":
                    continue  # policy: the schedule is moot on one stage
                experts = dp * cp * tp / (ep * (etp or tp))
                if zero in (1, 2) and dp * cp == 1 and not (model.is_moe and experts > 1):
                    continue  # policy: over a one-rank shard group megatron's ZeRO-1/2 are stage 0's run
                try:
                    resolve(model, cluster.with_gpus(gpus),
                            Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, etp=etp),
                            TrainingSpec(seq_len=seq, global_batch=gb, micro_batch=mb, recompute=rc, zero=zero,
                                         schedule=sched, sequence_parallel=tp > 1))
                except SpecError:
                    continue
                # the key ends with the shard-group size: dp (full sharding; Megatron has no HSDP)
                out.add((gpus, tp, pp, dp, cp, ep, vpp, mb, rc, zero, sched, tp > 1, etp, dp))
    return out


TINY_MOE = {"name": "tiny-moe", "num_layers": 6, "hidden": 128, "num_heads": 4, "ffn_hidden": 512, "vocab_size": 1024,
            "num_experts": 4, "top_k": 2, "max_seq_len": 1024}


@pytest.mark.parametrize("model_in, gpus, gb, seq", [
    ("tiny-gpt", 8, 32, 256),
    (TINY_MOE, 8, 16, 512),
])
def test_enumeration_equals_brute_force_over_resolve(model_in, gpus, gb, seq):
    model = load_model(model_in)
    cluster = load_cluster("dgx-h100", 8)
    lim = SearchLimits(max_micro_batch=4, min_tokens_per_cp_rank=64)
    got = {c.key() for c in enumerate_candidates(model, cluster, gpus, gb, seq, lim)}
    valid = {c.key() for c, _ in valid_scenarios(model, cluster, gpus, gb, seq, lim)}
    assert got == valid                  # nothing enumerated that resolve rejects
    assert got == brute_force(model, cluster, gpus, gb, seq, lim)   # and nothing valid missed
    assert len(got) > 50


def test_uneven_pipeline_split_is_searched_for_llama3_405b():
    # Llama 3 405B: 126 layers on 16 stages (one layer fewer on the first and last), as Meta trained it.
    assert splits(126, 16) and splits(126, 64) and splits(126, 128) and not splits(126, 5) and not splits(126, 256)
    model = load_model("llama3-405b")
    cluster = load_cluster("dgx-h100", 16384)
    lim = SearchLimits(fixed={"tp": 8, "pp": 16, "cp": 1})
    cands = list(enumerate_candidates(model, cluster, 16384, 2048, 8192, lim))
    # 16x8 = 128 virtual stages leave the first and last one with the embedding / loss only (allowed by resolve)
    assert {c.vpp for c in cands if c.schedule == "interleaved"} == {2, 4, 8}
    assert all(c.dp == 128 for c in cands)


def test_fixed_dimensions_are_respected():
    model = load_model("llama3-70b")
    cluster = load_cluster("dgx-h100", 64)
    lim = SearchLimits(fixed={"tp": 4, "schedule": "zb", "recompute": "selective"})
    cands = list(enumerate_candidates(model, cluster, 64, 256, 8192, lim))
    assert cands and all(c.tp == 4 and c.recompute == "selective" for c in cands)
    assert all(c.schedule == "zb" for c in cands if c.pp > 1)


def test_cheap_memory_filter_equals_full_per_stage_model():
    """peak_memory_bytes evaluates 3 stages; it must equal memory.peak_bytes (all stages)."""
    rnd = random.Random(7)
    checked = 0
    for name, n, gb, seq in (("llama3-70b", 256, 512, 8192), ("llama3-405b", 2048, 1024, 8192),
                             ("gpt3-175b", 512, 1536, 2048), ("mixtral-8x7b", 64, 256, 4096)):
        model = load_model(name)
        cluster = load_cluster("dgx-h100", n)
        scns = [s for _, s in valid_scenarios(model, cluster, n, gb, seq)]
        for scn in rnd.sample(scns, min(150, len(scns))):
            assert peak_memory_bytes(scn) == pytest.approx(memory.peak_bytes(scn), rel=1e-12)
            checked += 1
    assert checked > 400


def _row(gpus, t, h):
    c = Candidate(gpus, 1, 1, gpus, 1, 1, 1, 1, "none", 0, "1f1b", False)
    return PlanRow(candidate=c, source="engine", step_time_s=1, tokens_per_s=1, mfu=0.5, hfu=0.5, bubble_fraction=0,
                   peak_bytes=1, gpu_bytes=2, fits=True, time_to_train_s=t, gpu_hours=h)


def test_pareto_front_against_brute_force():
    rnd = random.Random(3)
    rows = [_row(rnd.choice([8, 16, 32, 64]), rnd.uniform(1, 100), rnd.uniform(1, 100)) for _ in range(60)]
    front = pareto_front(rows)

    def dominated(a, b):  # b dominates a
        pa = (a.candidate.gpus, a.time_to_train_s, a.gpu_hours)
        pb = (b.candidate.gpus, b.time_to_train_s, b.gpu_hours)
        return all(x <= y for x, y in zip(pb, pa)) and pb != pa

    expected = [r for r in rows if not any(dominated(r, o) for o in rows)]
    assert {id(r) for r in front} == {id(r) for r in expected}
    assert front == sorted(front, key=lambda r: (r.candidate.gpus, r.time_to_train_s))
