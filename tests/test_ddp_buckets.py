"""Megatron DDP's gradient buckets as the engine's reduction calls, and DeepSpeed ZeRO-3's gathers per submodule
(cost_models/ddp_buckets.py, cost_models/zero3_gathers.py), held against layouts worked out by hand from
Megatron-Core's and DeepSpeed's code."""

from __future__ import annotations

import pytest

from trainsim.cost_models import ddp_buckets, zero3_gathers
from trainsim.cost_models.collectives import collective_time
from trainsim.cost_models.param_tensors import ParamTensor, block_tensors, chunk_tensors
from trainsim.simulator.builder import build_cost_table
from trainsim.specs import build_scenario
from trainsim.topologies.placement import place

# A small Llama-style model: h = 1024, 8 heads (qkv 3 x 1024 x 1024), SwiGLU ffn 4096 (fc1 gate|up 2 x 4096 x
# 1024, fc2 4096 x 1024), RMSNorm, vocab 32768 untied: per block 16,779,264 parameters in 6 Megatron tensors.
SMALL = {"num_layers": 4, "hidden": 1024, "num_heads": 8, "ffn_hidden": 4096, "vocab_size": 32768,
         "activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope", "max_seq_len": 2048,
         "bias": False, "tie_embeddings": False}
BUCKET_MIB = 40.0  # of fp32 main grads: 10,485,760 parameters per bucket


def small(pp: int = 1, vpp: int = 1, **training):
    layout = {"pp": pp} if vpp == 1 else {"pp": pp, "vpp": vpp}
    tr = {"seq_len": 2048, "global_batch": 64, "distributed_optimizer": True, "dp_bucket_mb": BUCKET_MIB,
          **training}
    return build_scenario({"model": SMALL, "cluster": "dgx-h100", "gpus": 8 * pp, "layout": layout,
                           "training": tr}, {})


def test_megatron_core_buckets_of_a_small_model_by_hand():
    """Megatron-Core's layout (``_compute_per_buffer_param_layout``: reverse registration order, 64-element starts,
    a bucket closes once it holds >= bucket_size elements and ends padded to lcm(8, 128)), worked by hand:
    output layer 33,554,432 >= 10,485,760 closes bucket 0 alone; final norm 1,024 + block 3's fc2 4,194,304 +
    fc1 8,388,608 = 12,583,936; then each block's norm, proj, qkv, norm (4,196,352) with the next block's fc2 and
    fc1 = 16,779,264, three times; block 0's rest with the embedding 33,554,432 = 37,750,784. Six calls (every size
    already a multiple of 128), where bytes / bucket would have charged 13."""
    scn = small()
    buckets = ddp_buckets.chunk_dp_buckets(scn, 0, 0, 8)
    assert [b.elems for b in buckets] == [33_554_432, 12_583_936, 16_779_264, 16_779_264, 16_779_264, 37_750_784]
    names = [chunk_tensors(scn, 0)[b.closing_tensor].name for b in buckets]
    assert names == ["output_layer.weight", "layers.3.mlp.fc1.weight", "layers.2.mlp.fc1.weight",
                     "layers.1.mlp.fc1.weight", "layers.0.mlp.fc1.weight", "embedding.word.weight"]
    chunk = build_cost_table(scn).stages[0].chunks[0]
    assert len(chunk.grad_buckets) == 4  # six calls in MAX_BUCKETS_PER_CHUNK transfers: (2, 2, 1) + the last
    group = place(scn).group("dp")
    want = [collective_time("reduce_scatter", b.elems * 4, group, scn.cluster) for b in buckets]
    assert sum(t.latency_s for t in chunk.grad_buckets) == pytest.approx(sum(w.latency_s for w in want), rel=1e-9)
    assert sum(t.time_s for t in chunk.grad_buckets) == pytest.approx(sum(w.time_s for w in want), rel=1e-9)
    assert chunk.grad_buckets[-1].time_s == pytest.approx(want[-1].time_s, rel=1e-9)  # the embedding's, alone
    ready = [t.ready_at for t in chunk.grad_buckets]
    assert ready == sorted(ready) and ready[-1] == 1.0 and 0.0 < ready[0] < 1.0


def test_no_bucketing_off_the_first_pipeline_rank_or_chunk_or_without_overlap():
    """``if disable_bucketing or pp_rank > 0: self.bucket_size = None`` and no bucket size without
    overlap_grad_reduce: one call per chunk buffer, all its gradients."""
    two = small(pp=2)
    assert len(ddp_buckets.chunk_dp_buckets(two, 0, 0, 8)) > 1
    last = ddp_buckets.chunk_dp_buckets(two, 1, 0, 8)
    assert len(last) == 1 and last[0].elems == pytest.approx(sum(t.elems for t in chunk_tensors(two, 1)), abs=128)
    inter = small(pp=2, vpp=2, schedule="interleaved")
    assert len(ddp_buckets.chunk_dp_buckets(inter, 0, 1, 8)) == 1
    off = small(overlap_grad_reduce=False)
    assert len(ddp_buckets.chunk_dp_buckets(off, 0, 0, 8)) == 1
    assert len(build_cost_table(two).stages[1].chunks[0].grad_buckets) == 1


def test_tied_embedding_bucket_only_with_the_distributed_optimizer():
    """A tied, pipelined embedding gets its own bucket in the distributed optimizer's layout only."""
    tied = {**SMALL, "tie_embeddings": True}
    def buckets(dist_opt: bool):
        scn = build_scenario({"model": tied, "cluster": "dgx-h100", "gpus": 16, "layout": {"pp": 2},
                              "training": {"seq_len": 2048, "global_batch": 64, "distributed_optimizer": dist_opt,
                                           "overlap_grad_reduce": False}}, {})
        return ddp_buckets.chunk_dp_buckets(scn, 0, 0, 8)
    assert [b.elems for b in buckets(True)][-1] == 33_554_432  # the embedding alone, last in backward
    assert len(buckets(True)) == 2 and len(buckets(False)) == 1


@pytest.mark.parametrize("fw", ["megatron-2021", "megatron-2022"])
def test_legacy_megatron_reduces_one_buffer_per_chunk(fw):
    """Megatron-LM's local DDP all-reduces each chunk's contiguous fp32 grad buffer in one call."""
    scn = small(framework=fw, distributed_optimizer=False)
    chunk = build_cost_table(scn).stages[0].chunks[0]
    assert len(chunk.grad_buckets) == 1 and "(" not in chunk.grad_buckets[0].name
    assert chunk.grad_buckets[0].nbytes == pytest.approx(134_226_944 * 4, rel=1e-12)


def test_ready_fractions_closed_form():
    """Head first, blocks last to first, embedding last; within a block by elements: head 1 s, blocks 2 s each,
    embedding 1 s of a 6 s backward."""
    t = (ParamTensor("embedding.word.weight", 9.0, "embedding"), ParamTensor("layers.0.a.weight", 1.0),
         ParamTensor("layers.0.b.weight", 3.0), ParamTensor("layers.1.a.weight", 1.0),
         ParamTensor("layers.1.b.weight", 3.0), ParamTensor("output_layer.weight", 9.0, "head"))
    got = ddp_buckets.ready_fractions(t, [5, 4, 3, 2, 1, 0], 1.0, 2.0, 1.0)
    assert got == pytest.approx([1 / 6, 2.5 / 6, 3 / 6, 4.5 / 6, 5 / 6, 1.0])


def test_deepspeed_zero3_gathers_per_prefetch_bucket():
    """DeepSpeed's ``fetch_sub_module`` gathers the first submodule's own parameters, then prefetches queued ones
    until a call holds 5e7 elements (stage3_prefetch_bucket_size); RMSNorm weights (1,024 <= 1e5 elements)
    persist. A small block (q, k, v, o 1.05e6 elements each; gate, up, down 4.19e6) holds 1.68e7 elements: q on
    demand, the rest in one prefetch = 2 calls, in Hugging Face's and Megatron's module style alike, and with
    biases (they persist); DeepSpeed 2021 gathers per tensor: 7."""
    from trainsim.specs import ModelSpec
    m = ModelSpec(**SMALL)
    assert zero3_gathers.gather_calls(block_tensors(m, 1, 1, 1, "torch"), "deepspeed") == 2
    assert zero3_gathers.gather_calls(block_tensors(m, 1, 1, 1, "fused"), "deepspeed") == 2
    gpt = ModelSpec(**{**SMALL, "activation": "gelu", "norm": "layernorm", "bias": True})
    assert zero3_gathers.gather_calls(block_tensors(gpt, 1, 1, 1, "torch"), "deepspeed") == 2
    assert zero3_gathers.gather_calls(block_tensors(m, 1, 1, 1, "torch"), "deepspeed-2021") == 7
    scn = build_scenario({"model": SMALL, "cluster": "dgx-h100", "gpus": 8,
                          "training": {"seq_len": 2048, "global_batch": 8, "zero": 3, "framework": "deepspeed"}}, {})
    gather = build_cost_table(scn).stages[0].chunks[0].param_gather
    # the embedding (3.36e7) on demand; its prefetch takes blocks 0-2 (3 x 1.68e7 = 5.03e7 >= 5e7, reached at
    # block 2's last linear); block 0's q prefetches block 3 and the output layer; the final norm persists: 3 calls
    one = collective_time("all_gather", gather.nbytes / 3, place(scn).group("dp"), scn.cluster)
    assert gather.latency_s == pytest.approx(3 * one.latency_s, rel=1e-9)


@pytest.mark.parametrize("pp", [1, 2])
def test_closed_form_tail_follows_the_engine(pp):
    """The closed form (analytic._ready_tail_s) queues each bucket at its ready point as the engine does: the
    exposed reduction tail of both agrees within 2 % (the engine adds NCCL's slowdown of the overlapped compute)."""
    from trainsim.simulator import analytic
    from trainsim.simulator.engine import simulate
    table = build_cost_table(small(pp=pp))
    eng, est = simulate(table).stages[0].dp_tail_s, analytic.estimate(table).stages[0].dp_tail_s
    assert est == pytest.approx(eng, rel=0.02)
    # the last bucket is ready only when the backward ends: at least its own reduction is exposed
    assert est >= max(bk.time_s for bk in table.stages[0].chunks[0].grad_buckets[-1:]) * (1 - 1e-9)


def test_deepspeed_2021_gathers_megatrons_gpt_tensor_by_tensor():
    """DeepSpeed 2021's ZeRO-3 GPT is Megatron's (fused ``query_key_value``; param_tensors.module_style) and its
    ``_all_gather`` issues one call per tensor: per block qkv, dense, h->4h, 4h->h weights (biases and LayerNorms
    <= 1e5 elements persist), plus the word and learned position embeddings (tied output: no output layer)."""
    gpt = {**SMALL, "activation": "gelu", "norm": "layernorm", "bias": True, "position_embedding": "learned",
           "tie_embeddings": True}
    scn = build_scenario({"model": gpt, "cluster": "dgx-a100", "gpus": 8,
                          "training": {"seq_len": 2048, "global_batch": 8, "zero": 3,
                                       "framework": "deepspeed-2021"}}, {})
    assert zero3_gathers.gather_calls(chunk_tensors(scn, 0), "deepspeed-2021") == 4 * 4 + 2
