"""Regression tests for bugs found by tests/test_fuzz_predict.py (one test per bug, named after it)."""

from __future__ import annotations

from trainsim.cli.main import main


def one_error_line(capsys) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().split("\n")
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_collective_on_one_gpu_is_an_error_not_infinite_bandwidth(capsys):
    # Bug: `trainsim collective --gpus 1` priced the no-op at 0 s and printed algbw Infinity (invalid JSON).
    assert main(["collective", "--cluster", "dgx-h100", "--gpus", "1", "--sizes", "1M", "--json"]) == 2
    assert "gpus" in one_error_line(capsys)


def test_tp_comm_overlap_never_gives_negative_exposed_tp():
    # Bug: --tp-comm-overlap on a tiny memory-bound fc2 GEMM (tile model: two row chunks 31 % faster than the
    # whole GEMM) gave exposed TP = -2.8e-5 s, i.e. overlap made the layer faster than no communication.
    from trainsim.simulator.predict import predict
    from trainsim.specs import build_scenario

    model = {"name": "fz", "num_layers": 1, "hidden": 2, "num_heads": 2, "vocab_size": 1, "bias": False,
             "tie_embeddings": False, "ffn_hidden": 2818}
    training = {"seq_len": 2048, "global_batch": 4, "micro_batch": 4, "dtype": "fp32", "recompute": "full",
                "sequence_parallel": True, "schedule": "1f1b", "tp_comm_overlap": True}
    s = build_scenario({"model": model, "cluster": "dgx-a100", "gpus": 2, "layout": {"tp": 2}, "training": training})
    for fast in (False, True):
        p = predict(s, fast=fast)
        assert p.exposed_comm_s["tp"] >= 0, p.exposed_comm_s
        assert p.breakdown_s["exposed_tp"] >= 0


def test_hfu_above_one_at_long_sequences_is_explained(capsys):
    # Bug: a 1M-token sequence on one A100 reported HFU 100.5 % with no explanation (FLOPs count the full
    # s x s attention, SC21 eq. 3, while the causal kernel does half); now a warning says so.
    import json

    argv = ["predict", "--model", "llama3-405b", "--cluster", "dgx-a100", "--gpus", "1", "--seq-len", "1048576",
            "--global-batch", "1", "--recompute", "selective", "--schedule", "1f1b", "--json"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["hfu"] > 1
    assert any("full s x s" in w for w in d["warnings"])
    assert main(argv[:-1] + ["--seq-len", "8192", "--json"]) == 0  # ordinary runs carry no such warning
    d = json.loads(capsys.readouterr().out)
    assert d["hfu"] <= 1 and not any("full s x s" in w for w in d["warnings"])


def test_ring_all_reduce_one_rank_per_node_never_negative():
    # Bug: NCCL's tuner counts 2N inter-node steps in an all-reduce ring; with one rank per node that is more
    # than the 2(N-1) steps, and the negative intra-node step count times a large intra-node latency gave
    # a negative collective time (-4.5 ms), negative exposed TP and bubble fractions above 1.
    from trainsim.cost_models.collectives import collective_time
    from trainsim.specs import load_cluster
    from trainsim.topologies.shape import GroupShape

    c = load_cluster({"preset": "cpu-host", "scale_up": {"latency_s": 1e-3}, "gpus_per_node": 1}, 2)
    g = GroupShape.contiguous(2, c)
    assert g.ranks_per_node == 1 and g.nodes == 2
    for size in (1024, 2**20):
        r = collective_time("all_reduce", size, g, c, algo="ring")
        assert r.time_s > 0 and r.latency_s > 0, r
        # no intra-node hop: the time does not depend on the intra-node latency at all
        c2 = load_cluster({"preset": "cpu-host", "scale_up": {"latency_s": 1e-6}, "gpus_per_node": 1}, 2)
        r2 = collective_time("all_reduce", size, GroupShape.contiguous(2, c2), c2, algo="ring")
        assert r.time_s == r2.time_s


def test_scenario_with_non_string_keys_is_an_error_not_a_traceback(tmp_path, capsys):
    # Bug: a scenario YAML with a numeric key next to an unknown string key (`1: 2` + `foo: 3`) crashed with
    # TypeError ('<' not supported between int and str) while naming the unknown key.
    path = tmp_path / "s.yaml"
    path.write_text("1: 2\nfoo: 3\n")
    assert main(["predict", str(path)]) == 2
    assert one_error_line(capsys).startswith("error: scenario.")


def test_boolean_where_a_number_belongs_is_an_error(tmp_path, capsys):
    # Bug: pydantic's lax mode read `tp: true` as tp=1, `zero: true` as ZeRO-1 and `num_layers: true` as a
    # one-layer model -- a silently wrong scenario instead of an error naming the field.
    cases = {
        "layout.tp": "{model: tiny-gpt, cluster: dgx-h100, gpus: 8, layout: {tp: true}, training: {seq_len: 256}}",
        "training.zero": "{model: tiny-gpt, cluster: dgx-h100, training: {seq_len: 256, zero: true}}",
        "model.num_layers": "{model: {preset: tiny-gpt, num_layers: true}, cluster: dgx-h100}",
        "cluster.scale_out.nics_per_node": "{model: tiny-gpt, cluster: {preset: dgx-h100, scale_out: "
                                           "{nics_per_node: false}}, training: {seq_len: 256}}",
        "cluster.gpu.peak_flops.bf16": "{model: tiny-gpt, cluster: {preset: dgx-h100, gpu: {peak_flops: "
                                       "{bf16: true}}}}",
    }
    for field, text in cases.items():
        path = tmp_path / "s.yaml"
        path.write_text(text)
        assert main(["predict", str(path)]) == 2, field
        assert one_error_line(capsys).startswith(f"error: {field}: must be a number"), field
    # booleans stay fine where a boolean belongs
    path.write_text("{model: tiny-gpt, cluster: dgx-h100, gpus: 8, layout: {tp: 2}, "
                    "training: {seq_len: 256, global_batch: 8, sequence_parallel: true}}")
    assert main(["predict", str(path), "--json"]) == 0


def test_corrupted_regress_baseline_is_an_error(tmp_path, capsys):
    # Bug: a baseline whose metric was a string or whose scenario entry was null crashed `trainsim regress`
    # (ValueError: Unknown format code 'g' / TypeError: NoneType is not iterable).
    import json

    from trainsim.specs import SpecError
    from trainsim.validation.regress import load_baseline

    good = {"kind": "trainsim-regress-baseline", "scenarios": {"a.yaml": {"step_time_s": 1.0, "fits": True}}}
    path = tmp_path / "b.json"
    path.write_text(json.dumps(good))
    assert load_baseline(path)["scenarios"]["a.yaml"]["step_time_s"] == 1.0
    for bad, field in (({"a.yaml": {"step_time_s": "x"}}, "baseline.scenarios.a.yaml.step_time_s"),
                       ({"a.yaml": None}, "baseline.scenarios.a.yaml")):
        path.write_text(json.dumps({**good, "scenarios": bad}))
        try:
            load_baseline(path)
        except SpecError as e:
            assert str(e).startswith(field)
        else:
            raise AssertionError("accepted a corrupted baseline")


def test_gpipe_with_many_micro_batches_replays_the_allocator_a_bounded_number_of_times(monkeypatch, capsys):
    # Bug: GPipe holds all of a step's micro-batches in flight and the first-step fragmentation replayed every one
    # of them through the caching allocator (llama3-8b, pp 8, 10,000 micro-batches: > 100 s). The replay folds
    # (first_step_fragmentation.FOLD_START): its window's replays stay at most FOLD_START + 2 FOLD_PERIOD micro-batches.
    from trainsim.cost_models import first_step_fragmentation as fsf

    sizes = []
    replayed = fsf._replayed
    monkeypatch.setattr(fsf, "_replayed", lambda *a: sizes.append(a[4]) or replayed(*a))
    assert main(["predict", "--model", "tiny-gpt", "--cluster", "dgx-h100", "--gpus", "2", "--pp", "2",
                 "--seq-len", "256", "--micro-batch", "1", "--schedule", "gpipe", "--global-batch", "100000",
                 "--json"]) == 0
    capsys.readouterr()
    assert sizes and max(sizes) <= fsf.FOLD_START + 2 * fsf.FOLD_PERIOD
