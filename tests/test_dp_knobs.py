"""Data-parallel gradient bucket size (training.dp_bucket_mb) and reduction overlap (training.overlap_grad_reduce)
as scenario settings: defaults reproduce the framework presets, bucket counts and costs follow their closed
forms, overlap off exposes every bucket, and inconsistent values are refused in one line."""

from __future__ import annotations

import json
import math

import pytest

from trainsim.cli.main import main
from trainsim.cost_models import ddp_buckets, memory
from trainsim.cost_models import nccl_model as nm
from trainsim.cost_models.collectives import collective_time
from trainsim.simulator import analytic
from trainsim.simulator.builder import DDP_BUCKET_PARAMS, DDP_BUCKET_PARAMS_PER_DP, MiB, build_cost_table
from trainsim.simulator.engine import simulate
from trainsim.simulator.predict import predict
from trainsim.specs import SpecError, build_scenario
from trainsim.topologies.placement import place

# Llama 3 8B on 32 H100 (4 nodes), TP 1, PP 1, DP 32, Megatron's distributed optimizer (ZeRO-1): one chunk.
BASE = {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 32, "layout": {},
        "training": {"seq_len": 4096, "global_batch": 64, "distributed_optimizer": True, "recompute": "full"}}


# Megatron-Core's Llama module (TE layer spec): per TransformerLayer linear_qkv.weight (+ its fused
# layer_norm_weight), linear_proj.weight, linear_fc1.weight (gate|up, + its layer_norm_weight), linear_fc2.weight;
# embedding.word_embeddings.weight, decoder.final_layernorm.weight and output_layer.weight (param_tensors.py).
MEGATRON_TENSORS = 32 * 6 + 3


def scenario(**training):
    return build_scenario({**BASE, "training": {**BASE["training"], **training}}, {})


def test_defaults_are_the_framework_presets():
    """Unset keys, and the keys set to the framework's own values, cost exactly what the presets cost."""
    base = build_cost_table(scenario())
    assert build_cost_table(scenario(overlap_grad_reduce=True)) == base
    # Megatron-Core DDP: max(40M, 1M x dp) parameters of fp32 main grads per bucket.
    default_mib = max(DDP_BUCKET_PARAMS, DDP_BUCKET_PARAMS_PER_DP * 32) * 4 / MiB
    same = build_cost_table(scenario(dp_bucket_mb=default_mib))
    assert same.stages[0].chunks[0].grad_buckets == base.stages[0].chunks[0].grad_buckets
    assert predict(scenario(dp_bucket_mb=default_mib)).step_time_s == predict(scenario()).step_time_s
    j = predict(scenario()).to_json()["data_parallel"]
    assert j["grad_bucket_mib"] == pytest.approx(default_mib) and j["overlap_grad_reduce"] is True


@pytest.mark.parametrize("mib", [100.0, 200.0, 400.0])
def test_bucket_count_and_cost_closed_form(mib):
    """One call per bucket of Megatron-Core's buffer layout (cost_models/ddp_buckets.py; the layout itself is held
    against a hand-worked one in test_ddp_buckets.py), each costing its own latency and bytes; the bandwidth part
    of all of them is the whole gradient's bytes over the bandwidth, as one call's would be."""
    scn = scenario(dp_bucket_mb=mib)
    chunk = build_cost_table(scn).stages[0].chunks[0]
    grad = memory.rank_param_shards(scn, 0).held * scn.training.grad_bytes
    buckets = ddp_buckets.chunk_dp_buckets(scn, 0, 0, 32)
    sizes = [b.elems * scn.training.grad_bytes for b in buckets]
    assert len(buckets) < math.ceil(grad / (mib * MiB))  # whole tensors close buckets past the size
    group = place(scn).group("dp")
    calls = [collective_time("reduce_scatter", x, group, scn.cluster) for x in sizes]
    assert sum(bk.latency_s for bk in chunk.grad_buckets) == pytest.approx(sum(c.latency_s for c in calls), rel=1e-9)
    assert sum(bk.time_s for bk in chunk.grad_buckets) == pytest.approx(sum(c.time_s for c in calls), rel=1e-9)
    assert sum(bk.nbytes for bk in chunk.grad_buckets) == pytest.approx(grad, rel=1e-4)  # + bucket padding
    # Ring reduce-scatter over n = 32 ranks: each call sends (n-1)/n of its bytes at the bottleneck rate, plus one
    # pipeline fill (nccl_model.fill_bytes).
    n = group.size
    assert all(c.algo == "ring" for c in calls)
    want = sum(c.latency_s + (min((n - 1) / n * x, nm.fill_bytes(c.protocol)) + (n - 1) / n * x) / c.rate_Bps
               for c, x in zip(calls, sizes))
    assert sum(bk.time_s for bk in chunk.grad_buckets) == pytest.approx(want, rel=1e-9)


def test_smaller_buckets_pay_more_latency():
    lat = [sum(bk.latency_s for bk in build_cost_table(scenario(dp_bucket_mb=m)).stages[0].chunks[0].grad_buckets)
           for m in (400.0, 200.0, 100.0)]
    assert lat[0] < lat[1] < lat[2]


def test_overlap_off_exposes_the_sum_of_bucket_times():
    """With the reduction after the backward pass, the step's DP tail is every bucket back to back (engine and
    closed form), and exceeds the overlapped run's exposed last bucket."""
    scn = scenario(overlap_grad_reduce=False)
    table = build_cost_table(scn)
    assert table.overlap_grad_reduce is False
    total = sum(bk.time_s for c in table.stages[0].chunks for bk in c.grad_buckets)
    assert simulate(table).stages[0].dp_tail_s == pytest.approx(total, rel=1e-9)
    assert analytic.estimate(table).stages[0].dp_tail_s == pytest.approx(total, rel=1e-9)
    on = simulate(build_cost_table(scenario())).stages[0].dp_tail_s
    assert on < total


def test_overlap_on_for_a_framework_without_it():
    """Megatron 2021's local DDP reduces after the backward; overlap_grad_reduce=true costs the overlapped run."""
    off = build_cost_table(scenario(framework="megatron-2021", distributed_optimizer=False))
    on = build_cost_table(scenario(framework="megatron-2021", distributed_optimizer=False, overlap_grad_reduce=True))
    assert off.overlap_grad_reduce is False and on.overlap_grad_reduce is True
    assert simulate(on).step_time_s < simulate(off).step_time_s


def test_deepspeed_reduce_bucket():
    """DeepSpeed ZeRO-2 reduces in reduce_bucket_size buckets (dp_bucket_mb sets them), one all-reduce per bucket
    (use_multi_rank_bucket_allreduce, DeepSpeed >= 0.12.4), in its backward hooks on the compute stream
    (overlap_comm defaults to stage == 3): every micro-batch's backward carries the calls, none reach the DP
    stream; with overlap_grad_reduce on they go back to the engine as buckets of the same calls."""
    scn = scenario(framework="deepspeed", distributed_optimizer=False, zero=2, dp_bucket_mb=64.0)
    chunk = build_cost_table(scn).stages[0].chunks[0]
    grad = memory.rank_param_shards(scn, 0).held * scn.training.grad_bytes
    calls = math.ceil(grad / (64 * MiB))
    one = collective_time("all_reduce", grad / calls, place(scn).group("dp"), scn.cluster)
    assert chunk.grad_buckets == ()
    assert chunk.dp_bwd_s == pytest.approx(calls * one.time_s, rel=1e-9)
    on = build_cost_table(scenario(framework="deepspeed", distributed_optimizer=False, zero=2, dp_bucket_mb=64.0,
                                   overlap_grad_reduce=True)).stages[0].chunks[0]
    assert on.dp_bwd_s == 0.0 and all(bk.name.startswith("all_reduce") for bk in on.grad_buckets)
    assert sum(bk.latency_s for bk in on.grad_buckets) == pytest.approx(calls * one.latency_s, rel=1e-9)


@pytest.mark.parametrize("training,msg", [
    ({"dp_bucket_mb": 0}, "training.dp_bucket_mb"),
    ({"dp_bucket_mb": -5}, "training.dp_bucket_mb"),
    ({"zero": 3, "framework": "pytorch-fsdp", "distributed_optimizer": False, "dp_bucket_mb": 25},
     "training.dp_bucket_mb: zero=3 with framework pytorch-fsdp"),
    ({"framework": "torch", "distributed_optimizer": False, "overlap_grad_reduce": False},
     "training.overlap_grad_reduce: framework torch"),
])
def test_bad_settings_are_refused(training, msg):
    with pytest.raises(SpecError, match=msg):
        scenario(**training)


@pytest.mark.parametrize("yaml_training,field", [
    ("dp_bucket_mb: 0", "training.dp_bucket_mb"),
    ("overlap_grad_reduce: maybe", "training.overlap_grad_reduce"),
])
def test_scenario_file_refusals_exit_2_with_one_line(tmp_path, capsys, yaml_training, field):
    f = tmp_path / "s.yaml"
    f.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 8\n"
                 f"training: {{seq_len: 2048, global_batch: 16, {yaml_training}}}\n")
    assert main(["predict", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and field in err


def test_flags_reach_predict_json(capsys):
    argv = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "32", "--seq-len", "4096",
            "--global-batch", "64", "--dp-bucket-mb", "128", "--no-overlap-grad-reduce", "--json"]
    assert main(argv) == 0
    dp = json.loads(capsys.readouterr().out)["data_parallel"]
    assert dp["grad_bucket_mib"] == 128.0 and dp["overlap_grad_reduce"] is False and dp["dp_shard"] == 32


@pytest.mark.parametrize("mib", [1e4, 2000.0, 600.0, 100.0])
def test_overlapped_reduction_exposes_the_last_bucket(mib):
    """With overlap on, buckets ready during the backward are reduced behind it: the last one -- the bucket the
    embedding's gradient closes, produced last -- is exposed after the backward pass, and of the others only what
    the backward after their last gradient cannot hide (block 0's bucket is ready a block before the end)."""
    scn = scenario(dp_bucket_mb=mib)
    chunk = build_cost_table(scn).stages[0].chunks[0]
    buckets = ddp_buckets.chunk_dp_buckets(scn, 0, 0, 32)
    assert len(chunk.grad_buckets) == min(len(buckets), 4)  # beyond 4 calls the earlier ones share 3 transfers
    one = collective_time("reduce_scatter", buckets[-1].elems * 4, place(scn).group("dp"), scn.cluster)
    assert chunk.grad_buckets[-1].time_s == pytest.approx(one.time_s, rel=1e-9)  # the last is one bucket
    tail = simulate(build_cost_table(scn)).stages[0].dp_tail_s
    if len(buckets) == 1:
        assert tail == pytest.approx(chunk.grad_buckets[-1].time_s, rel=1e-6)
    else:
        assert chunk.grad_buckets[-1].time_s * (1 - 1e-9) <= tail < sum(b.time_s for b in chunk.grad_buckets[-2:])


def test_a_bucket_below_one_parameter_tensor_issues_one_call_per_tensor():
    """Buckets hold whole tensors, closing once they reach the bucket size (Megatron-Core's layout): Llama 3 8B's
    block holds 6 Megatron tensors (fused qkv and gate|up, each norm fused into the next linear as its own
    tensor), the smallest the 4,096-element norms. A 0.001 MiB bucket is one call per tensor (MEGATRON_TENSORS);
    a 25 MiB bucket (6,553,600 fp32 parameters) closes, by hand, at the output layer, then per block at
    [previous norm + fc2], fc1, [norm + proj], qkv, and last at [block 0's norm + embedding]: 1 + 4 x 32 + 1."""
    from trainsim.cost_models.param_tensors import block_tensors
    from trainsim.specs import load_model
    m = load_model("llama3-8b")
    assert len(block_tensors(m, 1, 1, 1, "torch")) == 9 and len(block_tensors(m, 1, 1, 1, "fused")) == 6
    assert len(ddp_buckets.chunk_dp_buckets(scenario(dp_bucket_mb=0.001), 0, 0, 32)) == MEGATRON_TENSORS
    assert len(ddp_buckets.chunk_dp_buckets(scenario(dp_bucket_mb=25.0), 0, 0, 32)) == 1 + 4 * 32 + 1
    grad = memory.rank_param_shards(scenario(), 0).held * 4
    assert math.ceil(grad / (25 * MiB)) > MEGATRON_TENSORS  # the byte count alone would charge more calls


@pytest.mark.parametrize("extra", [
    {"model": "llama3-8b", "gpus": 8, "training": {"framework": "deepspeed", "zero": 2}},
    {"model": "llama3-8b", "gpus": 8, "training": {"framework": "deepspeed", "zero": 1}},
    {"model": "mixtral-8x7b", "gpus": 64, "layout": {"ep": 8}, "training": {"zero": 1}},
])
def test_whole_tensor_cap_holds_for_deepspeed_buckets_and_moe_chunks(extra):
    """DeepSpeed's own ZeRO 0-2 buckets and a MoE chunk's buckets hold whole tensors too (a MoE block: its
    router and each local expert's projections), so below the smallest tensor the bucket size stops mattering:
    a 1e-6 MiB and a 1e-3 MiB bucket cost the same calls, a finite step."""
    def step(mib: float) -> float:
        spec = {"model": extra["model"], "cluster": "dgx-h100", "gpus": extra["gpus"],
                "layout": extra.get("layout", {}),
                "training": {"seq_len": 2048, "global_batch": extra["gpus"], **extra["training"],
                             "dp_bucket_mb": mib}}
        return predict(build_scenario(spec, {}), fast=True).step_time_s
    assert step(1e-6) == pytest.approx(step(1e-3), rel=1e-12)
    assert step(1e-6) < 2 * step(1e6)  # one call per tensor, not millions of calls
