"""Data-parallel gradient bucket size (training.dp_bucket_mb) and reduction overlap (training.overlap_grad_reduce)
as scenario settings: defaults reproduce the framework presets, bucket counts and costs follow their closed
forms, overlap off exposes every bucket, and inconsistent values are refused in one line."""

from __future__ import annotations

import json
import math

import pytest

from trainsim.cli.main import main
from trainsim.cost_models import memory
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
    """calls = min(ceil(gradient bytes / bucket bytes), parameter tensors: 32 blocks x 6 + 3 = MEGATRON_TENSORS); n equal calls cost n x (latency + per-call bandwidth time),
    whose bandwidth part is the whole gradient's bytes over the bandwidth, as one call's would be."""
    scn = scenario(dp_bucket_mb=mib)
    chunk = build_cost_table(scn).stages[0].chunks[0]
    grad = memory.rank_param_shards(scn, 0).held * scn.training.grad_bytes
    calls = min(math.ceil(grad / (mib * MiB)), MEGATRON_TENSORS)
    assert (calls == MEGATRON_TENSORS) == (mib == 100.0)  # 100 MiB buckets would be 305 calls: more than 195 tensors
    one = collective_time("reduce_scatter", grad / calls, place(scn).group("dp"), scn.cluster)
    assert sum(bk.latency_s for bk in chunk.grad_buckets) == pytest.approx(calls * one.latency_s, rel=1e-9)
    assert sum(bk.time_s for bk in chunk.grad_buckets) == pytest.approx(calls * one.time_s, rel=1e-9)
    assert sum(bk.nbytes for bk in chunk.grad_buckets) == pytest.approx(grad, rel=1e-9)
    # Ring reduce-scatter over n = 32 ranks: each call sends (n-1)/n of its bytes at the bottleneck rate, plus one
    # pipeline fill (nccl_model.fill_bytes) -- so n calls cost n x (latency + fill) + (n-1)/n x bytes / rate.
    assert one.algo == "ring"
    n = place(scn).group("dp").size
    wire = (n - 1) / n * grad
    fill = min(wire / calls, nm.fill_bytes(one.protocol))
    want = calls * (one.latency_s + fill / one.rate_Bps) + wire / one.rate_Bps
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


@pytest.mark.parametrize("calls", [1, 2, 3, 7, 40])
def test_overlapped_reduction_exposes_the_last_bucket(calls):
    """With overlap on, buckets ready during the backward are reduced behind it; only the last one (a 1/calls
    share of the gradients, its own latency included) is exposed after the backward pass."""
    grad = memory.rank_param_shards(scenario(), 0).held * 4  # fp32 main grads
    scn = scenario(dp_bucket_mb=grad / (calls - 0.5) / MiB if calls > 1 else grad / MiB)
    chunk = build_cost_table(scn).stages[0].chunks[0]
    assert len(chunk.grad_buckets) == min(calls, 4)  # beyond 4 calls the earlier ones share 3 transfers
    one = collective_time("reduce_scatter", grad / calls, place(scn).group("dp"), scn.cluster)
    assert chunk.grad_buckets[-1].time_s == pytest.approx(one.time_s, rel=1e-9)  # the last is one bucket
    tail = simulate(build_cost_table(scn)).stages[0].dp_tail_s
    assert tail == pytest.approx(chunk.grad_buckets[-1].time_s, rel=1e-6)


def test_a_bucket_below_one_parameter_tensor_issues_one_call_per_tensor():
    """Buckets hold whole tensors (torch DDP, Megatron-Core, DeepSpeed: specs/data_parallel.py), so a chunk issues
    at most one call per parameter tensor: Llama 3 8B's block holds 218.1 M parameters in 9 tensors as torch
    builds it (q, k, v, o, gate, up, down and two RMSNorm weights), in 6 as Megatron-Core does (fused qkv and
    gate|up: MEGATRON_TENSORS), 139 MiB of fp32 gradients each on average at TP 1. A 25 MiB bucket is costed as
    one call per tensor (plus the embedding, final norm and output layer), never as ceil(bytes / 25 MiB) calls,
    and a smaller bucket costs the same."""
    from trainsim.cost_models.param_tensors import block_tensors
    from trainsim.specs import load_model
    m = load_model("llama3-8b")
    assert len(block_tensors(m, 1, 1, 1, "torch")) == 9 and len(block_tensors(m, 1, 1, 1, "fused")) == 6
    assert m.dense_layer_params() == 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    grad = memory.rank_param_shards(scenario(), 0).held * 4
    layers = scenario().model.num_layers
    assert layers * 6 + 3 == MEGATRON_TENSORS
    assert math.ceil(grad / (25 * MiB)) > MEGATRON_TENSORS  # the byte count alone would charge more calls
    tiny, ddp = (build_cost_table(scenario(dp_bucket_mb=mib)).stages[0].chunks[0] for mib in (0.001, 25.0))
    one = collective_time("reduce_scatter", grad / MEGATRON_TENSORS, place(scenario()).group("dp"),
                          scenario().cluster)
    assert tiny.grad_buckets[-1].time_s == pytest.approx(one.time_s, rel=1e-9)
    assert [b.time_s for b in tiny.grad_buckets] == pytest.approx([b.time_s for b in ddp.grad_buckets], rel=1e-12)


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
