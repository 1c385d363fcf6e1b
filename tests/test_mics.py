"""DeepSpeed-MiCS (Layout.dp_shard under framework deepspeed, ZeRO-3; specs/mics.py): model states as ZeRO-3 over the
shard group, the two-hop gradient synchronization (reduce-scatter in the group every micro-batch, all-reduce of the
partitions across the replicas once per step), the in-place gathers, the AMSP rows and the refusals."""

from __future__ import annotations

import math

import pytest

from trainsim.cli.main import main
from trainsim.cost_models import memory
from trainsim.simulator.builder import build_cost_table
from trainsim.simulator.predict import predict
from trainsim.specs import SpecError, build_scenario
from trainsim.topologies.placement import place

# Llama 3 8B on 64 A100 (8 nodes of 8), DeepSpeed ZeRO-3: dp = 64.
BASE = {"model": "llama3-8b", "cluster": "dgx-a100", "gpus": 64, "layout": {},
        "training": {"seq_len": 4096, "global_batch": 128, "zero": 3, "framework": "deepspeed"}}
REDUCE_BUCKET = 5e8  # DeepSpeed's reduce_bucket_size default (framework_behaviour DEEPSPEED_REDUCE_BUCKET_PARAMS)


def scenario(dp_shard=None, **training):
    raw = {**BASE, "layout": {"dp_shard": dp_shard} if dp_shard else {},
           "training": {**BASE["training"], **training}}
    return build_scenario(raw, {})


@pytest.mark.parametrize("s", [2, 8, 32])
def test_model_states_are_deepspeed_bytes_per_param_over_the_shard_group(s):
    """MiCS shards every state over its partition group (arXiv:2205.00119; mics.py MiCS_Init / MiCS_Optimizer with
    partition_count = mics_shard_size): per GPU 2 bytes of bf16 weights, 2 of bf16 gradients and 12 of fp32 master
    weights + Adam m, v, each over S -- the model's parameter count P times 2/S, 2/S and 12/S."""
    scn = scenario(dp_shard=s)
    p = scn.model.total_params()
    sm = memory.stage_memory(scn, 0)
    assert sm.weights == pytest.approx(2 * p / s, rel=1e-9)
    assert sm.grads == pytest.approx(2 * p / s, rel=1e-9)
    assert sm.optimizer == pytest.approx(12 * p / s, rel=1e-9)


def test_shard_group_is_a_node_and_replicas_one_rank_per_node():
    """mics_utils._generate_mics_config: shard groups np.arange(world).reshape(-1, S), replicate groups the same
    column of every shard group -- with S = 8 one node each, and one rank in each of the 8 nodes."""
    scn = scenario(dp_shard=8)
    shard, rep = place(scn).hsdp_ranks(8)
    assert shard == list(range(8)) and rep == list(range(0, 64, 8))


def _mics_costs(scn):
    st = build_cost_table(scn).stages[0]
    (chunk,) = st.chunks
    return chunk, st.post_step


def test_two_hop_sync_counts_and_sizes_per_step():
    """Per micro-batch all-gather of the parameters (M = 2P bytes) within the node, per step one all-reduce of the
    rank's gradient partitions (2P/S bytes) across the dp/S replicas over the NICs, in ceil(P / reduce_bucket)
    calls (one all_reduce_coalesced per reduce bucket, whole tensors), however many micro-batches there are."""
    one, four = scenario(dp_shard=8, micro_batch=2), scenario(dp_shard=8, micro_batch=1)
    assert (one.num_microbatches, four.num_microbatches) == (1, 2)
    p = one.model.total_params()
    chunk, post = _mics_costs(one)
    assert chunk.param_gather.nbytes == pytest.approx(2 * p, rel=1e-9)
    assert all(link.endswith(("nvl_tx", "nvl_rx")) for link in chunk.param_gather.links)
    (ar,) = post
    assert ar.nbytes == pytest.approx(2 * p / 8, rel=1e-9)
    assert f"({math.ceil(p / REDUCE_BUCKET)} calls)" in ar.name and "8 MiCS replicas" in ar.name
    assert ar.links == ("s0.nic_tx", "s0.nic_rx")
    assert _mics_costs(four)[1] == post  # once per step, not per micro-batch


def test_replica_all_reduce_is_no_faster_than_the_ring_bound():
    """A ring all-reduce of B bytes over R ranks sends 2 (R-1)/R x B per rank (MiCS's inter-group hop); the dgx-a100
    preset's 8 HDR NICs give each GPU 25 GB/s, so the transfer lasts at least 2 x 7/8 x B / 25e9."""
    scn = scenario(dp_shard=8)
    (ar,) = _mics_costs(scn)[1]
    per_gpu = scn.cluster.scale_out.nic_bw_Bps * scn.cluster.scale_out.nics_per_node / scn.cluster.gpus_per_node
    assert ar.transfer_s >= 2 * 7 / 8 * ar.nbytes / per_gpu * (1 - 1e-9)
    assert ar.transfer_s < 2 * 2 * 7 / 8 * ar.nbytes / per_gpu  # and within 2x of it


def test_full_group_has_no_replica_hop_and_gathers_in_place():
    """S = dp has no replicas: nothing after the step; giving the group selects MiCS's gathers, which land in the
    parameters' own buffers (no unpacking copy), so the backward is shorter than plain ZeRO-3's, the rest equal."""
    plain, full = scenario(), scenario(dp_shard=64)
    c_plain, post_plain = _mics_costs(plain)
    c_full, post_full = _mics_costs(full)
    assert post_plain == post_full == ()
    assert c_full.param_gather == c_plain.param_gather
    assert c_full.dp_fwd_s < c_plain.dp_fwd_s and c_full.dp_bwd_s < c_plain.dp_bwd_s
    assert memory.stage_memory(full, 0) == memory.stage_memory(plain, 0)


def test_mics_amortizes_its_global_hop_over_the_accumulation_steps(capsys):
    """64 GPUs, S = 8. Per step ZeRO-3 over all 64 ranks sends (n-1)/n x M of gradients out of each node per
    micro-batch (its reduce-scatter), MiCS 2 (R-1)/R x M once (its replica all-reduce: twice one reduce-scatter's
    bytes) and keeps every micro-batch's gathers and reduce-scatters in the node -- MiCS's gain grows with the
    micro-batches: at 16 of them its step is shorter than full sharding's, by more than at 2. predict names the
    MiCS layout."""
    def gain(batch):
        return (predict(scenario(global_batch=batch), fast=True).step_time_s
                - predict(scenario(dp_shard=8, global_batch=batch), fast=True).step_time_s)
    assert gain(1024) > 0 and gain(1024) > gain(128)
    rc = main(["predict", "--model", "llama3-8b", "--cluster", "dgx-a100", "--gpus", "64", "--global-batch", "128",
               "--seq-len", "4096", "--framework", "deepspeed", "--zero", "3", "--dp-shard", "8", "--fast"])
    assert rc == 0 and "MiCS shard group 8 x 8 replicas" in capsys.readouterr().out


@pytest.mark.parametrize("flags,why", [
    (["--tp", "2"], "tp=2"),
    (["--framework", "deepspeed-2021"], "v0.9.2"),
    (["--framework", "megatron-deepspeed"], "megatron-deepspeed is not costed"),
    (["--offload-optimizer"], "no support for CPU offloading"),
    (["--zero", "1"], "mics_shard_size, MiCS, is a ZeRO-3 setting"),
])
def test_uncostable_mics_layouts_are_refused_in_one_line(capsys, flags, why):
    args = ["predict", "--model", "llama3-8b", "--cluster", "dgx-a100", "--gpus", "64", "--global-batch", "128",
            "--seq-len", "4096", "--framework", "deepspeed", "--zero", "3", "--dp-shard", "8", "--fast"]
    rc = main(args + flags)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "layout.dp_shard" in err and why in err


@pytest.mark.parametrize("flags,why", [
    (["--dp-shard", "1"], "shard group of 1 rank shards nothing"),
    (["--tp", "2", "--dp-shard", "32"], "tp=2"),            # the whole dp: still MiCS's world-rank groups
    (["--tp", "2", "--dp-shard", "16", "--mics-hierarchical-gather"], "tp=2"),
])
def test_shard_groups_of_one_rank_or_beside_tp_are_refused_even_at_full_dp(capsys, flags, why):
    """A given shard group selects MiCS (gathers_in_place) even when it spans all dp ranks, so its layout rules hold
    there too; a group of one rank shards nothing."""
    args = ["predict", "--model", "llama3-8b", "--cluster", "dgx-a100", "--gpus", "64", "--global-batch", "128",
            "--seq-len", "4096", "--framework", "deepspeed", "--zero", "3", "--fast"]
    rc = main(args + flags)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "layout.dp_shard" in err and why in err


def test_pipeline_parallel_mics_is_refused_by_the_spec():
    with pytest.raises(SpecError, match="layout.dp_shard: DeepSpeed-MiCS with tp=1, pp=2"):
        build_scenario({**BASE, "layout": {"pp": 2, "dp_shard": 8}}, {})


def test_amsp_mics_rows_are_predicted_with_the_published_trend():
    """AMSP (arXiv:2311.00257v2 Sec. III-C): LLaMA-7B under MiCS, MFU 50 % on 8 A800s and 35 % on 1,024, a slowdown
    of 50/35 = 1.43 in GPU time per token; the prediction's within 10 % of it and below ZeRO-1 over all ranks'."""
    from trainsim.validation.amsp import SLOWDOWN
    from trainsim.validation.datasets import load_dataset
    from trainsim.validation.validate import validate
    ds = load_dataset("amsp")
    mics = [c for c in ds.cases if "_mics_" in c.row_id]
    assert len(mics) == 2 and all(c.skip_reason is None for c in mics)
    assert all(c.scenario.dp_shard == 8 and c.scenario.training.effective_zero == 3 for c in mics)
    rows = {r.row_id: r for r in validate(ds, predict_fn=lambda s: predict(s, fast=True)).rows}
    got = rows["amsp_7b_mics_1024"].secondary[SLOWDOWN]
    assert got["published"] == pytest.approx(50 / 35, rel=1e-4)
    assert got["predicted"] == pytest.approx(50 / 35, rel=0.10)
    assert got["predicted"] < rows["amsp_7b_zero1_1024"].secondary[SLOWDOWN]["predicted"]


def _hier(gather: bool, nics: int = 8, shard: int = 16, model: str = "llama3-8b"):
    from trainsim.specs import load_cluster
    cluster = load_cluster("dgx-a100").model_dump()
    cluster["scale_out"]["nics_per_node"] = nics
    raw = {**BASE, "model": model, "cluster": cluster, "layout": {"dp_shard": shard},
           "training": {**BASE["training"], "mics_hierarchical_gather": gather}}
    return build_scenario(raw, {})


def test_hierarchical_gather_groups_follow_mics_utils():
    """create_mics_comm_groups with S = 16 on 8-GPU nodes: span 2 nodes, intra-node chunks [0..7] and [8..15], the
    inter-node groups the same position in each chunk ([0, 8], ...)."""
    pl = place(_hier(True))
    assert pl.mics_hierarchy_ranks(16) == (list(range(8)), [0, 8])
    assert pl.mics_hierarchy_ranks(16, rank=11) == (list(range(8, 16)), [3, 11])
    intra, inter = pl.mics_hierarchy_groups(16)
    assert (intra.size, intra.multi_node, inter.size, inter.multi_node) == (8, False, 2, True)


def test_hierarchical_gather_moves_half_the_parameters_over_thin_nics():
    """One 25 GB/s NIC per node (a cloud-like node): a flat ring over the 16 ranks sends (S-1)/S of the M parameter
    bytes out of each node, the hierarchical gather (span-1)/span = 1/2 of them, then spreads them over NVLink: the
    hierarchical gather is faster, and no faster than M/2 over the node's NIC. Llama 3 70B: its per-submodule
    gathers are large enough that NCCL's per-call pipeline fill (nccl_model.fill_bytes) does not outweigh it."""
    flat = build_cost_table(_hier(False, nics=1, model="llama3-70b")).stages[0].chunks[0].param_gather
    hier = build_cost_table(_hier(True, nics=1, model="llama3-70b")).stages[0].chunks[0].param_gather
    assert "hierarchical" in hier.name and hier.nbytes == flat.nbytes
    assert hier.time_s < flat.time_s
    assert hier.transfer_s >= flat.nbytes / 2 / 25e9 * (1 - 1e-9)
    assert flat.transfer_s >= flat.nbytes * 15 / 16 / 25e9 * (1 - 1e-9)


@pytest.mark.parametrize("raw,why", [
    ({"layout": {"dp_shard": 8}}, "spans on single node"),
    ({"layout": {"dp_shard": 4}}, "spans on single node"),
    ({"layout": {}}, "needs MiCS"),
    ({"layout": {"dp_shard": 16}, "framework": "pytorch-fsdp"}, "needs MiCS"),
])
def test_hierarchical_gather_needs_mics_over_whole_nodes(raw, why):
    training = {**BASE["training"], "mics_hierarchical_gather": True, **({"framework": raw["framework"]}
                                                                         if "framework" in raw else {})}
    with pytest.raises(SpecError, match=f"training.mics_hierarchical_gather: .*{why}"):
        build_scenario({**BASE, "layout": raw["layout"], "training": training}, {})


def test_predict_takes_the_hierarchical_gather_flag(capsys):
    args = ["predict", "--model", "llama3-8b", "--cluster", "dgx-a100", "--gpus", "64", "--global-batch", "128",
            "--seq-len", "4096", "--framework", "deepspeed", "--zero", "3", "--fast", "--mics-hierarchical-gather"]
    assert main(args + ["--dp-shard", "16"]) == 0
    capsys.readouterr()
    assert main(args + ["--dp-shard", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "training.mics_hierarchical_gather" in err


def test_first_hop_is_zero3_over_one_node():
    """MiCS's per-micro-batch work is ZeRO-3's over its partition group: on 64 GPUs with S = 8 the gathers and the
    serialized reduce-scatters of a micro-batch cost what they cost for ZeRO-3 on the 8 GPUs of one node (the same
    group, bytes and calls; only the slowest-of-n-GPUs stretch of the HBM copies differs, cost_models/variation.py)."""
    one_node = build_scenario({**BASE, "gpus": 8, "layout": {"dp_shard": 8},
                               "training": {**BASE["training"], "global_batch": 16}}, {})
    mics = scenario(dp_shard=8)
    assert one_node.num_microbatches == mics.num_microbatches
    (a,), (b,) = build_cost_table(one_node).stages[0].chunks, build_cost_table(mics).stages[0].chunks
    assert b.param_gather == a.param_gather
    assert b.dp_bwd_s == pytest.approx(a.dp_bwd_s, rel=0.05)
    assert build_cost_table(one_node).stages[0].post_step == ()


def test_persistent_parameters_are_regathered_over_the_shard_group(monkeypatch):
    """After the step DeepSpeed re-gathers each persistent parameter over the group it is partitioned over
    (stage3.py ``_post_step`` -> ``_allgather_params_coalesced`` on ``ds_process_group``); MiCS_Init sets that group
    to the shard group (mics.py, v0.12.3), so the calls span the S = 8 ranks of a node, not all 64."""
    import trainsim.simulator.builder as builder
    sizes = []
    real = builder._persistent_regather_s

    def record(scenario, stage, group, profile, how):
        sizes.append(group.size)
        return real(scenario, stage, group, profile, how)

    monkeypatch.setattr(builder, "_persistent_regather_s", record)
    build_cost_table(scenario(dp_shard=8))
    build_cost_table(scenario())
    assert sizes == [8, 64]
