"""Per-step host work (cost_models/step_host.py): multi_tensor_apply's launch counts against a chunk-by-chunk replay
of its loop and closed forms, each framework's step counts, and the optimizer phase of a host-bound tiny model."""

from __future__ import annotations

import math
import random

import pytest

from trainsim.cost_models import compute
from trainsim.cost_models import host_issue as hi
from trainsim.cost_models import step_host as sh
from trainsim.simulator.builder import build_cost_table
from trainsim.simulator.predict import host_idle_share
from trainsim.specs import build_scenario

D, K = hi.ATEN_DISPATCH_S, hi.KERNEL_LAUNCH_S


def replay(sizes, depth, scalarlist=False):
    """apex csrc/multi_tensor_apply.cuh's host loop, one chunk at a time (the reference the fast count must equal)."""
    max_t = (sh.MTA_MAX_TENSORS_SCALARLIST if scalarlist else sh.MTA_MAX_TENSORS)[depth - 1]
    launches = loc_t = loc_b = 0
    for t, n in enumerate(sizes):
        loc_t += 1
        chunks = (n + 65535) // 65536
        for c in range(chunks):
            loc_b += 1
            tensors_full = loc_t == max_t and c == chunks - 1
            blocks_full = loc_b == 320
            last = t == len(sizes) - 1 and c == chunks - 1
            if tensors_full or blocks_full or last:
                launches += 1
                loc_b = 0
                loc_t = 0 if c == chunks - 1 else 1
    return launches


def test_launches_equal_the_chunk_by_chunk_loop():
    rng = random.Random(0)
    for _ in range(40):
        sizes = [rng.choice((1, 4096, 65536, 65537, 300_000, 5_000_000, 21_000_000, 60_000_000))
                 for _ in range(rng.randint(1, 300))]
        depth = rng.randint(1, 5)
        for sl in (False, True):
            assert sh.multi_tensor_launches(sizes, depth, sl) == replay(sizes, depth, sl)


@pytest.mark.parametrize(("n", "chunks", "depth", "per_launch"), [
    (1000, 1, 1, 110),      # small tensors: the tensor list (110 for one list) fills first
    (1000, 8, 4, 36),       # 36 x 8 = 288 blocks < 320: the 4-list limit of 36 tensors
    (1000, 10, 4, 32),      # 32 x 10 = 320 blocks: the block limit, at the end of a tensor
    (97, 320, 2, 1),        # one tensor of 320 chunks per launch
])
def test_launch_count_closed_forms(n, chunks, depth, per_launch):
    assert sh.multi_tensor_launches([chunks * 65536] * n, depth) == math.ceil(n / per_launch)


def test_one_big_tensor_needs_a_launch_per_320_chunks():
    for chunks in (1, 319, 320, 321, 6400, 6401):
        assert sh.multi_tensor_launches([chunks * 65536], 4) == math.ceil(chunks / 320)
    # counted in closed form, not launch by launch: 10^13 launches return at once
    assert sh.multi_tensor_launches([320 * 65536 * 10**13 + 1], 4) == 10**13 + 1


def test_megatron_step_counts_closed_form():
    """FusedAdam over 2 parameter groups (4 lists), multi_tensor_l2norm (1 list), all_reduce, .item(), zero_."""
    sizes = [4096] * 100
    d, k, syncs = sh.step_counts("megatron-2022", "fused", sizes)
    assert (d, k, syncs) == (2 + 4, 2 * math.ceil(50 / 36) + math.ceil(100 / 110) + 3, 1)


def test_torch_foreach_adam_counts_closed_form():
    """_multi_tensor_adam: seven CUDA foreach ops (lists 2, 1, 3, 2, 1+scalars, 1, 3+scalars) and the CPU step."""
    n = 200
    maxes = (64, 110, 48, 64, 96, 110, 48)
    d, k, syncs = sh.step_counts("torch", "fused", [1000] * n)
    assert (d, k, syncs) == (8, sum(math.ceil(n / m) for m in maxes), 0)


def test_per_param_loop_counts_closed_form():
    """Composer DecoupledAdamW: 8 eager ops per tensor; FSDP clip_grad_norm_: 2 per tensor + 4."""
    assert sh.step_counts("pytorch-fsdp", "per_param_loop", [10] * 50) == (10 * 50 + 4,) * 2 + (0,)


def tiny(framework="megatron-2022", layers=2, hidden=64):
    model = {"name": "tiny", "num_layers": layers, "hidden": hidden, "num_heads": 4, "ffn_hidden": 4 * hidden,
             "vocab_size": 1024, "max_seq_len": 128}
    return build_scenario({"model": model, "cluster": "dgx-a100", "gpus": 1,
                           "training": {"seq_len": 128, "global_batch": 1, "micro_batch": 1,
                                        "framework": framework}})


def test_tiny_model_optimizer_phase_is_the_hosts():
    """A 2-layer width-64 model: the step's host work (closed form from its tensor list) outlasts the GPU's update,
    and the optimizer phase is that host time plus one .item() lead-in."""
    sc = tiny()
    sizes = sh.rank_tensor_sizes(sc, 0)
    n = len(sizes)
    # Megatron-LM's ParallelTransformerLayer: input_layernorm (weight, bias), query_key_value (w, b), dense (w, b),
    # post_attention_layernorm (w, b), dense_h_to_4h (w, b), dense_4h_to_h (w, b); word and position embeddings,
    # the final layernorm (w, b); the output layer is the tied embedding
    assert n == 2 * 12 + 1 + 1 + 2
    d, k, syncs = sh.step_counts("megatron-2022", "fused", sizes)
    host = d * D + k * K
    gpu, _ = compute.optimizer_step_parts(sc, 0)
    assert host > gpu
    st = build_cost_table(sc).stages[0]
    assert st.optimizer_s == pytest.approx(host + syncs * (D + K))
    assert st.optimizer_host_idle_s == pytest.approx(host - gpu + syncs * (D + K))
    assert host_idle_share(build_cost_table(sc), 1.0) >= st.optimizer_host_idle_s


def test_sizes_add_up_to_the_rank_shard():
    from trainsim.cost_models.memory import rank_param_shards
    sc = tiny(layers=4, hidden=256)
    assert sum(sh.rank_tensor_sizes(sc, 0)) == pytest.approx(rank_param_shards(sc, 0).optimizer_params, rel=1e-3)


def test_big_model_keeps_the_gpu_time():
    """Where the update streams gigabytes, the launches hide behind it: the phase is the GPU's."""
    sc = tiny(layers=24, hidden=2048)
    gpu, _ = compute.optimizer_step_parts(sc, 0)
    host = sh.scenario_step_host(sc, 0)
    assert host.issue_s < gpu
    assert sh.optimizer_phase_s(gpu, host) == pytest.approx(gpu + D + K)


def test_contiguous_shards_hold_a_share_of_the_tensors():
    """Megatron's distributed optimizer gives each rank the flat 1/n slice of the gradient buffer: its pieces are
    the tensors (or cut tensors) inside that slice, and the n ranks' pieces add up to every tensor; FSDP2
    (framework torch) cuts every tensor instead."""
    from trainsim.cost_models.grad_buffer import optimizer_tensor_elems

    def scen(framework, zero):
        model = {"name": "m", "num_layers": 4, "hidden": 256, "num_heads": 4, "ffn_hidden": 1024, "vocab_size": 1024,
                 "max_seq_len": 128}
        return build_scenario({"model": model, "cluster": "dgx-a100", "gpus": 8,
                               "training": {"seq_len": 128, "global_batch": 8, "micro_batch": 1,
                                            "framework": framework, "zero": zero}})
    full = sh.rank_tensor_sizes(scen("megatron-2022", 0), 0)
    dist_sc = scen("megatron-2022", 1)
    dist = sh.rank_tensor_sizes(dist_sc, 0)
    assert sum(dist) == pytest.approx(sum(full) / 8, rel=1e-3)
    assert len(dist) < len(full) / 2  # a slice holds about 1/8 of the tensors, two of them cut
    every = [optimizer_tensor_elems(dist_sc, 0, rank=r) for r in range(8)]
    assert sum(sum(p) for p in every) == sum(full)
    fsdp2 = sh.rank_tensor_sizes(scen("torch", 3), 0)
    assert sum(fsdp2) == pytest.approx(sum(full) / 8, rel=1e-2)


@pytest.mark.parametrize(("framework", "adds"), [("megatron-2021", 4 + 4 + 4), ("megatron-2022", 4 + 4),
                                                 ("megatron", 0), ("torch", 0)])
def test_megatron_ddp_hooks_add_to_the_backward_issue(framework, adds):
    """Megatron's local-DDP hook: main_grad.add_ per tensor with a param.grad (2022: wgrad fused, biases and norms
    only); each is one dispatch and one launch more in a block's backward."""
    sc = tiny(framework)
    assert hi.ddp_hook_adds(sc) == adds
    from trainsim.cost_models.eager import block_style
    from trainsim.cost_models.shapes import layer_shape
    from trainsim.specs.framework_behaviour import behaviour
    shp = layer_shape(sc)
    base = hi.block_issue(hi.issue_style(block_style(shp), megatron_layer=behaviour(framework).megatron_layer,
                                         flash=shp.flash), recompute_full=sc.training.recompute == "full")
    issue = hi.scenario_block_issue(sc)
    megatron_layer = behaviour(framework).megatron_layer   # the legacy Python layer's measured ratios
    frames, bwd_frames = (hi.MODULE_FRAME_RATIO, hi.BACKWARD_FRAME_RATIO) if megatron_layer else (1.0, 1.0)
    recomputed = base.fwd_s if sc.training.recompute == "full" else 0.0
    w = hi.legacy_wrapper_s(sc, shp)  # the legacy layer's Python wrappers, tp 1 (no pace)
    wrappers = w.bwd_s + w.recompute_s if megatron_layer else 0.0
    assert issue.bwd_s == pytest.approx(recomputed * frames + (base.bwd_s - recomputed + adds * (D + K)) * bwd_frames
                                        + wrappers)


@pytest.mark.parametrize("framework", ["deepspeed", "megatron-deepspeed"])
def test_deepspeed_flat_groups_closed_form(framework):
    """Two flat fp32 groups (FusedAdam: one launch per 320 chunks of each), a norm per group, all_reduce, .item()."""
    sizes = [65536 * 100] * 64   # 6,400 chunks in all: 3,200 per group, 10 launches each
    assert sh.step_counts(framework, "fused", sizes) == (2 + 4, 2 * 10 + 4, 1)


def test_the_grad_norm_scalar_all_reduce_is_exposed_once_per_step():
    """TP 2: the optimizer phase gains one 4-byte all-reduce's time over the TP group (collectives.collective_time),
    not counted as host idle."""
    from trainsim.cost_models.collectives import collective_time
    from trainsim.topologies import place
    model = {"name": "m", "num_layers": 2, "hidden": 64, "num_heads": 4, "ffn_hidden": 256, "vocab_size": 1024,
             "max_seq_len": 128}
    sc = build_scenario({"model": model, "cluster": "dgx-a100", "gpus": 2, "layout": {"tp": 2},
                         "training": {"seq_len": 128, "global_batch": 1, "micro_batch": 1,
                                      "framework": "megatron-2022"}})
    ar = float(collective_time("all_reduce", 4.0, place(sc).group("tp"), sc.cluster).time_s)
    assert ar > 0
    host = sh.scenario_step_host(sc, 0)
    table = build_cost_table(sc)
    st = table.stages[0]
    gpu = compute.optimizer_step_parts(sc, 0)[0] * table.slowest_gpu_factor   # the job's slowest GPU's pace
    assert st.optimizer_s == pytest.approx(max(gpu, host.issue_s) + ar + host.sync_lead_s)
    assert st.optimizer_host_idle_s == pytest.approx(max(0.0, host.issue_s - gpu) + host.sync_lead_s)


def test_moe_and_offload_keep_the_gpu_time_and_no_idle():
    """Where the step's host work is not modelled apart (MoE, offloaded optimizer) the phase is the device's and
    records no host idle."""
    sc = build_scenario({"model": "mixtral-8x7b", "gpus": 8, "cluster": "dgx-h100",
                         "layout": {"tp": 1, "ep": 8}, "training": {"seq_len": 1024, "global_batch": 8, "zero": 1}})
    assert sh.scenario_step_host(sc, 0) is None
    st = build_cost_table(sc).stages[0]
    assert st.optimizer_host_idle_s == 0.0
