"""Collectives over many ranks: NCCL's latency closed forms for ring and tree up to 16,384 ranks, the algorithm
NCCL's tuner would pick there, and the number of calls each framework issues for ZeRO-1/2's gradient reduction and
gather of the updated parameters (each call pays the latency of a ring over the whole data-parallel group, except
ring reduces queued back to back, which follow each other through the chain); the MegaScale baseline rows run the
Megatron-LM code their commit has."""

from __future__ import annotations

import math

import pytest

from trainsim.cost_models import host_issue
from trainsim.cost_models import nccl_model as nm
from trainsim.cost_models.collectives import candidates, chained_call_latency_s, collective_time
from trainsim.simulator.builder import build_cost_table
from trainsim.specs import build_scenario, load_cluster
from trainsim.topologies.shape import GroupShape

US = 1e-6
LLAMA_7B = {"num_layers": 32, "hidden": 4096, "num_heads": 32, "ffn_hidden": 11008, "vocab_size": 32000,
            "activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope", "max_seq_len": 4096,
            "bias": False, "tie_embeddings": False}


def _ring_simple_net_latency(n: int, nodes: int, steps: int, inter: int) -> float:
    """tuning.cc ring latency, Simple, DGX presets (hwLat at the reference latencies): base + (steps - inter)
    intra-node steps (each at least 3 network posts, getNetOverhead) + inter network steps, plus the launch."""
    intra = max(nm.HW_LAT_US["nvlink"]["ring"]["Simple"], 3 * nm.NET_OVERHEAD_US)
    return (nm.BASE_LAT_US["ring"]["Simple"] + (steps - inter) * intra
            + inter * nm.HW_LAT_US["net"]["ring"]["Simple"]) * US + nm.LAUNCH_OVERHEAD_S


@pytest.mark.parametrize("n", [16, 1024, 16384])
@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_all_gather_and_reduce_scatter_rings_pay_n_minus_one_steps(op, n):
    """Ring-only before NCCL's PAT: n-1 steps, N-1 of them across the network (tuning.cc nsteps/nInterSteps)."""
    cluster = load_cluster("dgx-h100", n)
    g = GroupShape.contiguous(n, cluster)
    assert {c.algo for c in candidates(op, 1 << 30, g)} == {"ring"}
    r = collective_time(op, 1 << 30, g, cluster, protocol="Simple")
    assert r.latency_s == pytest.approx(_ring_simple_net_latency(n, g.nodes, n - 1, g.nodes - 1), rel=1e-9)


@pytest.mark.parametrize("n", [64, 1024, 16384])
def test_small_all_reduce_over_many_nodes_takes_the_tree(n):
    """A double binary tree pays 2(log2 N) network steps where a ring pays 2N: NCCL's tuner picks it for small
    all-reduces across nodes; its latency is tuning.cc's base + 2((ppn-1) intra + log2(N) inter)."""
    cluster = load_cluster("dgx-a100", n)
    g = GroupShape.contiguous(n, cluster)
    r = collective_time("all_reduce", 4096, g, cluster)
    assert r.algo == "tree"
    tree = collective_time("all_reduce", 4096, g, cluster, algo="tree", protocol="LL")
    closed = (nm.BASE_LAT_US["tree"]["LL"] + 2 * (7 * nm.HW_LAT_US["nvlink"]["tree"]["LL"]
                                                  + math.log2(n // 8) * nm.HW_LAT_US["net"]["tree"]["LL"])) * US
    assert tree.latency_s == pytest.approx(closed + nm.LAUNCH_OVERHEAD_S, rel=1e-9)
    ring = collective_time("all_reduce", 4096, g, cluster, algo="ring", protocol="LL")
    assert ring.latency_s > tree.latency_s * (2 if n == 64 else 20)


def _zero1(framework: str, gpus: int):
    return build_scenario({"model": LLAMA_7B, "cluster": "dgx-a100", "gpus": gpus,
                           "training": {"seq_len": 2048, "micro_batch": 4, "global_batch": 4 * gpus, "zero": 1,
                                        "framework": framework}})


def test_deepspeed_zero1_before_0_12_4_gathers_in_allgather_bucket_calls_each_a_ring_over_all_ranks():
    """DeepSpeed v0.12.3 all_gather_dp_groups: max(1, numel // allgather_bucket_size) list all-gathers of 5e8
    elements; over 1,024 A100s (128 nodes) each is a Simple ring of 1,023 steps, 127 across the network, and
    torch's list all_gather copies the flat result back with one copy_ per rank, issued by the host (one aten
    dispatch and one launch each): at 1,024 ranks those issues outlast the copies' HBM time."""
    sc = _zero1("deepspeed-2023", 1024)
    (gather,) = build_cost_table(sc).stages[0].post_step
    held = sc.model.total_params()
    calls = int(held // 5e8)
    assert f"({calls} calls)" in gather.name
    copies = calls * 1024 * (host_issue.ATEN_DISPATCH_S + host_issue.KERNEL_LAUNCH_S)
    assert copies > 2 * held * 2 / sc.cluster.gpu.hbm_bw_Bps  # host-bound: each copy moves 1/1024 of a bucket
    assert gather.latency_s == pytest.approx(calls * _ring_simple_net_latency(1024, 128, 1023, 127) + copies,
                                             rel=1e-6)
    assert gather.nbytes == pytest.approx(held * 2)


def test_deepspeed_zero1_gathers_into_one_tensor_per_param_group():
    """DeepSpeed from v0.12.4 (PR #4705): all_gather_dp_groups calls all_gather_into_tensor once per parameter
    group whatever allgather_bucket_size: one ring over all ranks, the same bytes as the bucketed gather."""
    sc = _zero1("deepspeed", 1024)
    (gather,) = build_cost_table(sc).stages[0].post_step
    assert gather.name == "all_gather updated params"
    assert gather.latency_s == pytest.approx(_ring_simple_net_latency(1024, 128, 1023, 127), rel=1e-6)
    assert gather.nbytes == pytest.approx(sc.model.total_params() * 2)


def test_megatron_distributed_optimizer_gathers_in_one_exposed_call():
    """Megatron's distributed optimizer: one all-gather of the whole buffer after the step (Megatron-Core's
    per-bucket gathers overlap the next forward, which the engine does not model), one ring over all ranks."""
    sc = _zero1("megatron", 1024)
    (gather,) = build_cost_table(sc).stages[0].post_step
    assert gather.name == "all_gather updated params"
    assert gather.latency_s == pytest.approx(_ring_simple_net_latency(1024, 128, 1023, 127), rel=1e-6)


def test_torch_zero_redundancy_optimizer_broadcasts_each_parameter_from_its_owner():
    """torch ZeroRedundancyOptimizer (parameters_as_bucket_view=False) broadcasts parameter by parameter: the
    executor's Llama blocks (kernels/torch_model.py Block) hold q, k, v, o, fc1, gate, fc2 and two norms, plus
    embedding, final norm and head; DDP all-reduces the gradients in full."""
    sc = _zero1("torch", 64)
    st = build_cost_table(sc).stages[0]
    (bcast,) = st.post_step
    assert bcast.name == f"broadcast updated params ({32 * 9 + 1 + 2} calls)"
    assert all(b.name.startswith("all_reduce") for c in st.chunks for b in c.grad_buckets)


def test_per_call_latency_grows_the_zero1_gather_with_ranks():
    """The same model's gather costs the same bytes per GPU at 64 and 1,024 ranks but 16x the ring steps."""
    lat = {g: build_cost_table(_zero1("megatron", g)).stages[0].post_step[0].latency_s for g in (64, 1024)}
    assert lat[1024] / lat[64] == pytest.approx(
        _ring_simple_net_latency(1024, 128, 1023, 127) / _ring_simple_net_latency(64, 8, 63, 7), rel=1e-6)
    assert lat[1024] / lat[64] > 10


def _megascale():
    from trainsim.validation.common_run_cases import load_common_runs
    from trainsim.validation.residual_sources import REPO
    ds = load_common_runs(REPO / "docs" / "probe_runs.csv", name="probe_runs")
    return {c.scenario.num_gpus: c for c in ds.active if c.row_id.startswith("megascale_mlm_175b_")}


def test_megascale_baseline_runs_the_code_its_commit_has():
    """MegaScale Sec. 6.1: the baseline is Megatron-LM commit 285068c8 (2023-01-11), whose train_step all-reduces
    the gradient buffers after the backward pass (local DDP), blocks on pipeline p2p and calls flash_attn 1.x:
    the rows state megatron-2022 and FlashAttention 1, not the year rule's Megatron-Core (arXiv 2024)."""
    cases = _megascale()
    assert sorted(cases) == [256, 512, 768, 1024, 3072, 6144, 8192, 12288]
    for c in cases.values():
        t = c.scenario.training
        assert (t.framework, t.flash_attention_version, t.zero) == ("megatron-2022", 1, 0)
        assert (c.scenario.layout.tp, c.scenario.layout.pp, c.scenario.layout.vpp) == (8, 8, 6)


def test_megascale_gradient_all_reduce_is_exposed_in_full():
    """Without overlap the step exposes every gradient all-reduce of the data-parallel group: the engine's exposed
    DP time at 256 GPUs (dp 4, one A100 rail per ring) is the sum of the bucket all-reduces' closed-form times
    over the DP group (fp32 main grads), within the engine's link sharing."""
    from trainsim.simulator.predict import predict
    sc = _megascale()[256].scenario
    st = build_cost_table(sc).stages[0]
    buckets = [b for ch in st.chunks for b in ch.grad_buckets]
    assert buckets and all(b.name.startswith("all_reduce") for b in buckets)
    assert sum(b.nbytes for b in buckets) == pytest.approx(st.grads_bytes, rel=1e-3)  # fp32: 4 B per parameter
    closed = sum(b.transfer_s + b.latency_s for b in buckets)
    assert predict(sc).exposed_comm_s["dp"] == pytest.approx(closed, rel=0.02)


def _chain_ll_latency(steps: int, inter: int) -> float:
    """A ring reduce / broadcast under LL on the DGX presets: base + (steps - inter) NVLink hops + inter network hops,
    plus the launch -- a chain whose intra-node hops post nothing to the network (no getNetOverhead floor, which
    tuning.cc applies only to its all-reduce / all-gather / reduce-scatter branch)."""
    return (nm.BASE_LAT_US["ring"]["LL"] + (steps - inter) * nm.HW_LAT_US["nvlink"]["ring"]["LL"]
            + inter * nm.HW_LAT_US["net"]["ring"]["LL"]) * US + nm.LAUNCH_OVERHEAD_S


@pytest.mark.parametrize("n", [16, 1024, 16384])
@pytest.mark.parametrize("op", ["broadcast", "reduce"])
def test_broadcast_and_reduce_chains_pay_one_hop_per_rank(op, n):
    """NCCL's reduce and broadcast are ring-only chains of n-1 hops, N-1 of them across the network."""
    cluster = load_cluster("dgx-a100", n)
    g = GroupShape.contiguous(n, cluster)
    assert {c.algo for c in candidates(op, 1 << 20, g)} == {"ring"}
    r = collective_time(op, 1 << 20, g, cluster, protocol="LL")
    assert r.latency_s == pytest.approx(_chain_ll_latency(n - 1, g.nodes - 1), rel=1e-9)


def _zero1_bf16_grads(framework: str, gpus: int):
    return build_scenario({"model": LLAMA_7B, "cluster": "dgx-a100", "gpus": gpus,
                           "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": gpus, "zero": 1,
                                        "framework": framework}})


@pytest.mark.parametrize("fw", ["deepspeed-2021", "deepspeed-2023"])
def test_deepspeed_before_0_12_4_reduces_each_owner_slice_as_a_ring_over_all_ranks(fw):
    """DeepSpeed ZeRO-1 (DeepSpeedZeroOptimizer.average_tensor, reduce_scatter=True, v0.12.3 and before): one
    dist.reduce per (5e8-element bucket, owner rank) pair, buckets + dp - 1 calls; over 1,024 A100s each is a chain
    of 1,023 hops, 127 across the network (NCCL's reduce has no tree): ~0.9 ms of latency. A bucket's reduces are
    queued back to back, owners in rank order, so they follow each other through the chain: the first of each
    bucket pays the chain's latency, every further one its base latency, one network hop and its launch."""
    sc = _zero1_bf16_grads(fw, 1024)
    st = build_cost_table(sc).stages[0]
    buckets = [b for ch in st.chunks for b in ch.grad_buckets]
    held = sc.model.total_params()
    bursts = math.ceil(held / 5e8)
    calls = bursts + 1024 - 1
    assert all(b.name.startswith("reduce grads") for b in buckets)
    assert sum(b.nbytes for b in buckets) == pytest.approx(held * 2)
    one = collective_time("reduce", held * 2 / calls, GroupShape.contiguous(1024, sc.cluster), sc.cluster)
    assert one.protocol == "LL" and one.latency_s == pytest.approx(_chain_ll_latency(1023, 127), rel=1e-9)
    follow = (nm.BASE_LAT_US["ring"]["LL"] + nm.HW_LAT_US["net"]["ring"]["LL"]) * US + nm.LAUNCH_OVERHEAD_S
    assert sum(b.latency_s for b in buckets) == pytest.approx(bursts * one.latency_s + (calls - bursts) * follow,
                                                              rel=1e-9)
    assert sum(b.latency_s for b in buckets) < 0.05 * calls * one.latency_s


@pytest.mark.parametrize("n", [16, 1024, 16384])
def test_a_burst_of_chained_reduces_pays_the_chain_latency_once(n):
    """Ring reduce and broadcast end on each rank once it has forwarded its last chunk: a call queued behind another
    waits one step, not a whole chain (collectives.chained_call_latency_s); a single node's step is an NVLink hop.
    All-gather ends with every rank holding everything: no chaining, one call's latency each."""
    cluster = load_cluster("dgx-a100", n)
    g = GroupShape.contiguous(n, cluster)
    hop = "net" if g.multi_node else "nvlink"
    for op in ("reduce", "broadcast"):
        r = collective_time(op, 1 << 20, g, cluster, protocol="LL")
        follow = (nm.BASE_LAT_US["ring"]["LL"] + nm.HW_LAT_US[hop]["ring"]["LL"]) * US + nm.LAUNCH_OVERHEAD_S
        assert chained_call_latency_s(r, g) == pytest.approx(follow, rel=1e-9)
    ag = collective_time("all_gather", 1 << 20, g, cluster)
    assert chained_call_latency_s(ag, g) == ag.latency_s


def test_deepspeed_all_reduces_each_bucket_after_the_backward():
    """DeepSpeed >= 0.12.4 (use_multi_rank_bucket_allreduce): one all-reduce per 5e8-element bucket, and with
    overlap_comm off for stage 1 (its default) after the backward pass: the step exposes every call."""
    from trainsim.simulator.predict import predict
    sc = _zero1_bf16_grads("deepspeed", 64)
    st = build_cost_table(sc).stages[0]
    buckets = [b for ch in st.chunks for b in ch.grad_buckets]
    held = sc.model.total_params()
    calls = math.ceil(held / 5e8)
    one = collective_time("all_reduce", held * 2 / calls, GroupShape.contiguous(64, sc.cluster), sc.cluster)
    assert all(b.name.startswith("all_reduce grads") for b in buckets)
    assert sum(b.time_s for b in buckets) == pytest.approx(calls * one.time_s, rel=1e-9)
    gather = st.post_step[0]
    exposed = predict(sc).exposed_comm_s["dp"]
    assert exposed == pytest.approx(calls * one.time_s + gather.time_s, rel=0.02)


def test_default_overlap_by_framework_and_stage():
    """DeepSpeed's overlap_comm defaults to stage == 3; Megatron-Core and torch overlap at every stage; an explicit
    overlap_grad_reduce wins."""
    from trainsim.cost_models import framework
    def t(fw, zero, **kw):
        return build_scenario({"model": LLAMA_7B, "cluster": "dgx-a100", "gpus": 16,
                               "training": {"seq_len": 2048, "global_batch": 16, "zero": zero, "framework": fw,
                                            **kw}}).training
    assert [framework.default_overlap_grad_reduce(t("deepspeed", z)) for z in (0, 1, 2, 3)] == [False] * 3 + [True]
    assert all(framework.default_overlap_grad_reduce(t("megatron", z)) for z in (0, 1))
    assert framework.grad_reduce_op(t("deepspeed", 0)) == "all_reduce"
    assert framework.grad_reduce_op(t("deepspeed-2021", 1)) == "reduce"
    assert framework.grad_reduce_op(t("megatron", 1)) == "reduce_scatter"
    on = build_cost_table(build_scenario({"model": LLAMA_7B, "cluster": "dgx-a100", "gpus": 16, "training": {
        "seq_len": 2048, "global_batch": 16, "zero": 1, "framework": "deepspeed", "overlap_grad_reduce": True}}))
    assert on.overlap_grad_reduce is True


def _ds_training(zero: int, micro_batches: int, framework: str = "deepspeed-2023", grad_bytes: int = 0):
    return build_scenario({"model": LLAMA_7B, "cluster": "dgx-a100", "gpus": 8,
                           "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 8 * micro_batches,
                                        "zero": zero, "framework": framework, "grad_dtype_bytes": grad_bytes}})


def test_deepspeed_zero1_accumulates_in_param_grad_between_boundaries():
    """DeepSpeed ZeRO-1 (stage_1_and_2.py v0.12.3): the hooks act only at the accumulation boundary, so autograd's
    AccumulateGrad adds every micro-batch's gradient but the first into param.grad (read both, write one); the
    hook copies each gradient into the contiguous bucket at the boundary (ZeRO-2: every micro-batch). Its
    BF16_Optimizer (fp32 accumulation) casts and adds into the fp32 gradient after every micro-batch; ZeRO-3 keeps
    only its shard; Megatron-LM 2021's hooks add into main_grad every micro-batch."""
    from trainsim.cost_models.framework import bf16_optimizer
    from trainsim.cost_models.framework import grad_accumulation_bytes_per_param as acc
    sc = _ds_training(1, 128)
    assert sc.training.grad_bytes == 2 and not bf16_optimizer(sc.training)
    # AccumulateGrad in 127 of 128 micro-batches, the hook's copy into the bucket in the last one
    assert acc(sc.training, sc.num_microbatches) == pytest.approx(3 * 2 * 127 / 128 + 2 * 2 / 128)
    one = _ds_training(1, 1)
    assert acc(one.training, one.num_microbatches) == pytest.approx(2 * 2)
    z2 = _ds_training(2, 4)
    assert acc(z2.training, z2.num_microbatches) == pytest.approx(2 * 2)
    bf16 = _ds_training(1, 4, grad_bytes=4)
    assert bf16_optimizer(bf16.training)
    assert acc(bf16.training, bf16.num_microbatches) == pytest.approx(2 + 4 + 3 * 4)
    z3 = _ds_training(3, 128)
    assert acc(z3.training, z3.num_microbatches) == 0.0
    mlm = _ds_training(1, 4, framework="megatron-2021")
    assert acc(mlm.training, mlm.num_microbatches) == 3 * mlm.training.grad_bytes


def test_megatron_deepspeed_steals_the_first_micro_batch_gradient():
    """Megatron-DeepSpeed accumulates in autograd's param.grad, which DeepSpeed's FP16_Optimizer.step sets to None:
    AccumulateGrad takes the step's first gradient as it is and adds the other m - 1 (read both, write one), so
    over m micro-batches the pass moves 3 x grad_bytes x (m - 1) bytes per parameter, none with one micro-batch;
    megatron-2021's local DDP adds every micro-batch into its zeroed main_grad."""
    from trainsim.cost_models.framework import grad_accumulation_bytes_per_param as acc
    for m in (1, 2, 16):
        sc = _ds_training(0, m, framework="megatron-deepspeed")
        g = sc.training.grad_bytes
        assert acc(sc.training, sc.num_microbatches) * m == pytest.approx(3 * g * (m - 1))
        mlm = _ds_training(0, m, framework="megatron-2021")
        assert acc(mlm.training, mlm.num_microbatches) * m == pytest.approx(3 * g * m)
