"""Uneven pipeline splits for layer counts no default split divides (DeepSeek-V3's 61 layers): the balanced
first/last-stage split (Megatron-Core --decoder-first/last-pipeline-num-layers) and the planner's use of it."""

from __future__ import annotations

import csv
import io
import math
import random

import pytest

from trainsim.cost_models import memory
from trainsim.simulator.planner import PlanRequest, peak_memory_bytes, plan
from trainsim.simulator.search_space import (
    SearchLimits,
    enumerate_candidates,
    splits,
    stage_layers_label,
    uneven_split,
    valid_scenarios,
)
from trainsim.specs import load_cluster, load_model
from trainsim.specs.scenario import balanced_stage_layers


@pytest.mark.parametrize("layers, stages, last_extra, want", [
    (61, 16, 1, (3,) + (4,) * 14 + (2,)),    # 63 units on 16 stages: at most 4 each
    (61, 16, 3, (4,) * 15 + (1,)),           # with one MTP module the loss end carries 3 units
    (61, 8, 3, (4,) + (9,) * 6 + (3,)),      # 9 per middle stage is the least that fits 61 - ends
    (80, 3, 1, (26, 28, 26)),
    (61, 2, 1, (31, 30)),
    (61, 2, 3, (32, 29)),
])
def test_balanced_split_closed_form(layers, stages, last_extra, want):
    assert balanced_stage_layers(layers, stages, last_extra=last_extra) == want


def test_balanced_split_properties_and_optimality():
    """Sums to L, even middle, ends no heavier than a middle stage; and the heaviest stage (embedding and loss counted)
    is the lightest any split with an even middle allows (checked by trying every middle size)."""
    for L in range(1, 130):
        for n in range(2, 70):
            for le in (1, 3):
                got = balanced_stage_layers(L, n, last_extra=le)
                if n == 2:
                    assert got is not None and sum(got) == L
                    assert max(got[0] + 1, got[1] + le) == max(math.ceil((L + 1 + le) / 2), le, 1)
                    continue
                best = None
                for q in range(1, L + 1):
                    rem = L - (n - 2) * q
                    if 0 <= rem <= 2 * q:
                        cand = max(q, min(max(f + 1, rem - f + le) for f in range(max(0, rem - q), min(q, rem) + 1)))
                        best = cand if best is None else min(best, cand)
                if got is None:
                    assert best is None, (L, n, le)
                    continue
                assert sum(got) == L and len(got) == n and len(set(got[1:-1])) == 1
                assert 0 <= got[0] <= got[1] and 0 <= got[-1] <= got[1]
                assert max(got[0] + 1, got[1], got[-1] + le) == best, (L, n, le, got)


def test_unsplittable_depths():
    assert balanced_stage_layers(61, 64) is None       # more stages than layers + ends
    assert balanced_stage_layers(61, 1) is None


def test_label():
    assert stage_layers_label((3,) + (4,) * 14 + (2,)) == "3,4x14,2"
    assert stage_layers_label((26, 28, 26)) == "26,28,26"
    assert stage_layers_label((4, 4, 1)) == "4,4,1"


def test_planner_offers_deepseek_v3_pipelines_no_default_split_allows():
    model = load_model("deepseek-v3")
    assert model.num_layers == 61 and not splits(61, 16) and not splits(61, 8)
    cluster = load_cluster("dgx-h100", 384)
    lim = SearchLimits(fixed={"tp": 1, "cp": 1, "ep": 8, "micro_batch": 1, "recompute": "full", "zero": 1})
    cands = list(enumerate_candidates(model, cluster, 384, 1536, 4096, lim))
    by_depth = {(c.pp, c.vpp): c.stage_layers for c in cands}
    assert by_depth[(16, 1)] == uneven_split(model, 16) == balanced_stage_layers(61, 16, last_extra=3)
    assert by_depth[(8, 2)] == balanced_stage_layers(61, 16, last_extra=3)
    assert by_depth[(1, 1)] is None
    assert (3, 1) in by_depth and by_depth[(3, 1)] is None          # 63 = 3 x 21: Megatron's default split
    scns = dict(valid_scenarios(model, cluster, 384, 1536, 4096, lim))
    pp16 = next(s for c, s in scns.items() if c.pp == 16 and c.vpp == 1)
    assert pp16.stage_layers == by_depth[(16, 1)]
    assert pp16.layers_on_stage(15) == 1 and pp16.layers_on_stage(1) == 4


def test_dense_power_of_two_spaces_unchanged():
    """Llama 3 405B / 70B on power-of-two GPU counts: every depth has a default split, so no candidate is uneven."""
    for name, gpus in (("llama3-405b", 2048), ("llama3-70b", 256)):
        model = load_model(name)
        cands = list(enumerate_candidates(model, load_cluster("dgx-h100", gpus), gpus, 1024, 8192,
                                          SearchLimits(fixed={"tp": 8})))
        assert cands and all(c.stage_layers is None for c in cands)


def test_memory_filter_still_equals_the_full_per_stage_model_on_uneven_splits():
    model = load_model("deepseek-v3")
    cluster = load_cluster("dgx-h100", 256)
    scns = [s for c, s in valid_scenarios(model, cluster, 256, 1024, 4096,
                                          SearchLimits(fixed={"tp": 1, "cp": 1, "ep": 32}))
            if c.stage_layers]
    rnd = random.Random(3)
    for scn in rnd.sample(scns, min(60, len(scns))):
        assert peak_memory_bytes(scn) == pytest.approx(memory.peak_bytes(scn), rel=1e-12)


def test_plan_rows_name_the_split():
    from trainsim.cli.plan import write_csv
    from trainsim.reports.tables import layout_row
    req = PlanRequest(model=load_model("deepseek-v3"), cluster=load_cluster("dgx-h100"), gpu_counts=(256,),
                      global_batch=1024, seq_len=4096, top_k=2,
                      limits=SearchLimits(fixed={"tp": 1, "cp": 1, "ep": 16, "pp": 16, "zero": 1,
                                                 "schedule": "1f1b"}))
    res = plan(req)
    assert res.rows
    row = res.rows[0].to_json()
    assert tuple(row["stage_layers"]) == balanced_stage_layers(61, 16, last_extra=3)
    assert "[4x15,1]" in layout_row(1, row)[2]
    buf = io.StringIO()
    write_csv(res, buf)
    first = next(csv.DictReader(io.StringIO(buf.getvalue())))
    assert first["stage_layers"] == " ".join(["4"] * 15 + ["1"])


def test_a_plan_json_row_with_a_split_reopens_as_its_scenario():
    """`trainsim report --plan plan.json --rank N` rebuilds the layout, split included, from the JSON row."""
    import json

    from trainsim.reports.plan_file import scenario_from_plan
    req = PlanRequest(model=load_model("deepseek-v3"), cluster=load_cluster("dgx-h100"), gpu_counts=(256,),
                      global_batch=1024, seq_len=4096, top_k=1,
                      limits=SearchLimits(fixed={"tp": 1, "cp": 1, "ep": 16, "pp": 16, "zero": 1,
                                                 "schedule": "1f1b"}))
    data = json.loads(json.dumps(plan(req).to_json()))
    scn = scenario_from_plan(data, 1)
    assert scn.layout.stage_layers == balanced_stage_layers(61, 16, last_extra=3)


def test_report_variants_and_mfu_grid_reach_uneven_depths():
    """The report's what-if variants take the balanced split where a depth has no default one, so the TP x PP MFU grid
    of a DeepSeek-V3 scenario covers pp 2/4/8/16 instead of marking them invalid."""
    from pathlib import Path

    from trainsim.reports.whatif import mfu_grid, variant
    from trainsim.specs import build_scenario, load_scenario_file
    scn = build_scenario(load_scenario_file(Path(__file__).parent.parent / "examples" / "deepseek-v3-h100.yaml"))
    v = variant(scn, layout={"pp": 16, "vpp": 1}, training={"schedule": "1f1b", "ep_comm_overlap": False})
    assert v.stage_layers == uneven_split(scn.model, 16)
    cells, tps, pps = mfu_grid(scn, None)
    assert {2, 4, 8, 16} <= set(pps)
    for pp in (8, 16):  # pp 16 through the 1F1B fallback, which drops the EP overlap it cannot run without chunks
        assert any(not isinstance(cells[(tp, pp)], str) for tp in tps)


def test_moe_plans_search_expert_tensor_parallel_folding():
    """Without a scenario file's etp, MoE candidates with tp > 1 come with etp = tp (Megatron's default) and etp 1
    (MoE parallel folding: whole experts, the EP group across TP ranks); rows, CSV and `report --plan` keep it, and a
    plan written before rows carried etp reopens with its request's."""
    import json

    from trainsim.cli.plan import write_csv
    from trainsim.reports.plan_file import scenario_from_plan
    from trainsim.reports.tables import layout_row
    model = load_model("qwen3-30b-a3b")
    cands = list(enumerate_candidates(model, load_cluster("dgx-h100", 16), 16, 64, 4096,
                                      SearchLimits(fixed={"tp": 2, "pp": 1, "cp": 1, "micro_batch": 1,
                                                          "recompute": "full", "zero": 1})))
    pairs = {(c.ep, c.etp) for c in cands}
    assert (16, 1) in pairs and (8, 2) in pairs and (8, 1) in pairs and (16, 2) not in pairs
    req = PlanRequest(model=model, cluster=load_cluster("dgx-h100"), gpu_counts=(16,), global_batch=64,
                      seq_len=4096, top_k=3, limits=SearchLimits(fixed={"tp": 2, "pp": 1, "cp": 1, "ep": 16}))
    res = plan(req)
    row = res.rows[0].to_json()
    assert row["etp"] == 1 and "etp1" in layout_row(1, row)[2]
    buf = io.StringIO()
    write_csv(res, buf)
    assert next(csv.DictReader(io.StringIO(buf.getvalue())))["etp"] == "1"
    data = json.loads(json.dumps(res.to_json()))
    scn = scenario_from_plan(data, 1)
    assert scn.layout.etp == 1 and scn.layout.ep == 16
    pinned = list(enumerate_candidates(model, load_cluster("dgx-h100", 16), 16, 64, 4096,
                                       SearchLimits(fixed={"tp": 2, "pp": 1, "cp": 1, "etp": 1})))
    assert pinned and {c.etp for c in pinned} == {1}
    for r in data["rows"]:  # an older plan: rows without etp, the file's etp in the request
        r.pop("etp")
    data["request"]["etp"] = 1
    assert scenario_from_plan(data, 1).layout.etp == 1


def test_plan_cli_pins_etp_and_refuses_it_for_dense_models(capsys):
    """--etp 2 holds in every row while ep is searched (pp and micro-batch pinned to keep the sweep small: tp = 2
    MoE candidates would otherwise also try MoE parallel folding, etp = 1)."""
    from trainsim.cli.main import main
    code = main(["plan", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100", "--gpus", "16", "--global-batch", "64",
                 "--seq-len", "4096", "--tp", "2", "--etp", "2", "--pp", "1", "--micro-batch", "1", "--top", "2",
                 "--json"])
    import json
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert code == 0 and rows and all(r["etp"] == 2 for r in rows)
    main(["plan", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100", "--gpus", "16", "--global-batch", "64",
          "--seq-len", "4096", "--tp", "2", "--pp", "1", "--micro-batch", "1", "--top", "2", "--json"])
    assert any(r["etp"] == 1 for r in json.loads(capsys.readouterr().out)["rows"])  # unpinned, folding wins
    code = main(["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--global-batch", "64",
                 "--seq-len", "4096", "--etp", "1"])
    assert code == 2 and "etp" in capsys.readouterr().err


def test_plan_cli_says_a_scenario_files_stage_layers_is_not_searched(tmp_path, capsys):
    """plan searches its own splits; a file's explicit stage_layers is named on stderr, not dropped silently."""
    from trainsim.cli.main import main
    f = tmp_path / "s.yaml"
    f.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 16\nlayout: {pp: 2, stage_layers: [15, 17]}\n"
                 "training: {global_batch: 64, seq_len: 4096}\n")
    code = main(["plan", str(f), "--tp", "8", "--pp", "2", "--micro-batch", "1", "--top", "1", "--json"])
    err = capsys.readouterr().err
    assert code == 0 and "layout.stage_layers is not searched" in err
    # a split given with pp only on the command line, as predict takes it (the file alone has pp 1)
    f.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 16\nlayout: {stage_layers: [15, 17]}\n"
                 "training: {global_batch: 64, seq_len: 4096}\n")
    code = main(["plan", str(f), "--tp", "8", "--pp", "2", "--micro-batch", "1", "--top", "1", "--json"])
    assert code == 0 and "layout.stage_layers is not searched" in capsys.readouterr().err


def test_plan_cli_names_the_files_layout_and_training_it_searches(tmp_path, capsys):
    """A file's layout degrees and searched training settings are not constraints: plan names them on stderr
    (with the flags that pin them), and its rows do take other values; pinned by flags, nothing is noted."""
    import json

    from trainsim.cli.main import main
    f = tmp_path / "s.yaml"
    f.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 8\nlayout: {tp: 2}\n"
                 "training: {global_batch: 64, seq_len: 4096, zero: 1, recompute: full, sequence_parallel: true}\n")
    assert main(["plan", str(f), "--top", "3", "--json"]) == 0
    out = capsys.readouterr()
    rows = json.loads(out.out)["rows"]
    assert "layout.tp=2, training.recompute=full, training.zero=1" in out.err
    assert "--tp 2 --recompute full --zero 1" in out.err and "sequence_parallel" not in out.err
    assert any((r["tp"], r["recompute"], r["zero"]) != (2, "full", 1) for r in rows)
    assert main(["plan", str(f), "--top", "1", "--tp", "2", "--recompute", "full", "--zero", "1", "--json"]) == 0
    assert "note: plan searches" not in capsys.readouterr().err
