"""A rank's parameter tensors (cost_models/param_tensors.py) and the distributed optimizer's shard of them
(cost_models/grad_buffer.py).

Truth: the executor's own torch model (kernels/torch_model.py build_chunk on the meta device, TP applied by the
executor's apply_tp over a fake two-rank process group), published parameter totals (Hugging Face safetensors
index ``metadata.total_size`` / 2 bytes: Meta-Llama-3-8B 16,060,522,496 B -> 8,030,261,248; Meta-Llama-3-70B
141,107,412,992 B -> 70,553,706,496; Mixtral-8x7B-v0.1 93,405,585,408 B -> 46,702,792,704), the MoE expert
arithmetic and the shard's definition (each of n ranks owns the contiguous n-th of every bucket).
"""

from __future__ import annotations

import importlib.util

import pytest

from trainsim.cost_models.eager import stage_param_tensors
from trainsim.cost_models.grad_buffer import buffer_buckets, optimizer_tensor_elems, shard_pieces
from trainsim.cost_models.memory import rank_param_shards
from trainsim.cost_models.param_tensors import chunk_tensors, rank_tensors
from trainsim.specs import build_scenario

HAS_TORCH = importlib.util.find_spec("torch") is not None
TINY_LLAMA = {"name": "tiny-llama", "num_layers": 4, "hidden": 64, "num_heads": 4, "num_kv_heads": 2,
              "ffn_hidden": 128, "vocab_size": 256, "max_seq_len": 128, "activation": "swiglu", "norm": "rmsnorm",
              "position_embedding": "rope", "bias": False, "tie_embeddings": False}


def scen(model, gpus=1, framework="torch", **over):
    return build_scenario({"model": model, "cluster": "dgx-h100", "gpus": gpus},
                          {"seq_len": 128, "global_batch": 8, "framework": framework, **over})


def two_layers(name: str) -> dict:
    """A preset's real widths with two blocks (building 32 blocks on meta costs seconds)."""
    from trainsim.specs import load_model
    return load_model(name).model_copy(update={"num_layers": 2, "name": f"{name}-2l"}).model_dump()


@pytest.fixture(scope="module")
def tp_mesh():
    """A two-rank TP mesh over torch's fake process group (no communication: DTensor shapes only)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    owned = not dist.is_initialized()  # another module's fake world (test_memory_oracle) serves as well
    assert owned or dist.get_world_size() >= 2
    if owned:
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    yield DeviceMesh("cpu", [0, 1])
    if owned:
        dist.destroy_process_group()


def executor_sizes(sc, stage: int, mesh=None) -> tuple[list[int], int]:
    """Elements of each parameter of the executor's chunk for ``stage`` on this rank, and how many are DTensors."""
    from trainsim.kernels.parallelize import apply_tp, layers_of
    from trainsim.kernels.torch_model import ModelOptions, build_chunk

    last = stage == sc.layout.pp - 1
    chunk = build_chunk(sc.model, layers_of(stage, sc.stage_layers), stage == 0, last, ModelOptions(), 0, None)
    if mesh is not None:
        apply_tp(chunk, mesh, sc.training.sequence_parallel, sc.model.gated_mlp)
        if chunk.tied:  # as torch_model.materialize re-ties them after sharding
            chunk.head.weight = chunk.embed.tok.weight
    params = list(chunk.parameters())
    local = [p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in params]
    return local, sum(hasattr(p, "to_local") for p in params)


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
@pytest.mark.parametrize("model", ["tiny-gpt", TINY_LLAMA, "llama3-8b-2l", "gpt-1.7b-2l"])
@pytest.mark.parametrize("pp", [1, 2])
def test_the_list_is_the_executor_models_parameters(model, pp):
    """Tensor by tensor, in registration order, the torch-style list is what torch_model builds."""
    spec = two_layers(model[:-3]) if isinstance(model, str) and model.endswith("-2l") else model
    sc = scen(spec, gpus=pp, pp=pp)
    for stage in range(pp):
        local, _ = executor_sizes(sc, stage)
        assert [round(t.elems) for t in rank_tensors(sc, stage, "torch")] == local


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
@pytest.mark.parametrize("model", ["gpt-1.7b-2l", "llama3-8b-2l"])
@pytest.mark.parametrize("sp", [False, True])
def test_tp_shards_are_the_executors_dtensor_shards(tp_mesh, model, sp):
    """Under TP 2 each tensor's elements on a rank are its DTensor's local shard (vocab-parallel embedding and
    head, column/row-parallel linears; norms and row-parallel biases replicated), and eager's DTensor count is the
    executor's (norms only under sequence parallelism)."""
    sc = scen(two_layers(model[:-3]), gpus=2, tp=2, sequence_parallel=sp)
    local, dtensors = executor_sizes(sc, 0, tp_mesh)
    assert [round(t.elems) for t in rank_tensors(sc, 0, "torch")] == local
    assert stage_param_tensors(sc, 0) == (len(local) - dtensors, dtensors)


@pytest.mark.parametrize(("model", "params"), [("llama3-8b", 8_030_261_248), ("llama3-70b", 70_553_706_496),
                                               ("mixtral-8x7b", 46_702_792_704)])
@pytest.mark.parametrize("framework", ["torch", "megatron"])
def test_totals_are_the_published_checkpoints(model, params, framework):
    """One rank holding the whole model holds every published parameter, whichever module style builds it; the
    Megatron style fuses q, k, v and gate|up into fewer tensors of the same elements."""
    sc = scen(model, gpus=8, framework=framework)
    tensors = rank_tensors(sc, 0)
    assert sum(t.elems for t in tensors) == params
    m = sc.model
    per_block = {"torch": 2 + 4 + 3, "megatron": 2 + 2 + 2}[framework]
    if m.is_moe:  # router + per expert (w1, w3, w2) or (fc1 = gate|up, fc2)
        per_block = per_block - 3 + 1 + m.num_experts * 3 if framework == "torch" else per_block - 2 + 1 + m.num_experts * 2
    assert len(tensors) == m.num_layers * per_block + 3  # word embedding, final norm, output layer


def test_moe_rank_holds_its_experts_and_the_router():
    """Mixtral at EP 4, TP 2: a block holds the router (8 x 4096, replicated), 8 / 4 = 2 local experts of three
    4096 x 14336 projections split over TP (etp = tp), marked expert; attention split over TP."""
    sc = scen("mixtral-8x7b", gpus=8, tp=2, ep=4, framework="torch", sequence_parallel=True)
    h, f, L = 4096, 14336, 32
    block = [t for t in chunk_tensors(sc, 0) if t.name.startswith("layers.0.")]
    experts = [t for t in block if t.expert]
    assert len(experts) == 2 * 3 and all(t.elems == h * f / 2 for t in experts)
    assert [t.elems for t in block if t.kind == "router"] == [8 * h]
    total = sum(t.elems for t in rank_tensors(sc, 0))
    attn = (2 * h * h + 2 * h * 1024) / 2
    assert total == pytest.approx(L * (attn + 2 * h + 8 * h + 2 * 3 * h * f / 2) + 2 * 32000 * h / 2 + h)
    sh = rank_param_shards(sc, 0)
    assert sum(t.elems for t in rank_tensors(sc, 0) if t.expert) == pytest.approx(sh.expert)


@pytest.mark.parametrize(("model", "pp"), [("llama3-70b", 4), ("deepseek-v3", 3), ("qwen3-30b-a3b", 4),
                                           ("gpt3-175b", 4), ("mpt-7b", 4)])
def test_every_stage_holds_what_the_memory_model_counts(model, pp):
    """The list and memory.rank_param_shards agree on every pipeline stage (MLA, MoE with dense first layers,
    shared experts, MTP, QK-norm, biases, tied and untied embeddings)."""
    moe = {"ep": 4} if model in ("deepseek-v3", "qwen3-30b-a3b") else {}
    sc = scen(model, gpus=8 * pp, framework="megatron", tp=2, pp=pp, sequence_parallel=True, **moe)
    for stage in range(pp):
        sh = rank_param_shards(sc, stage)
        assert sum(t.elems for t in rank_tensors(sc, stage)) == pytest.approx(sh.dense + sh.expert, rel=1e-12)


def test_shards_are_contiguous_slices_of_each_bucket():
    """Megatron-Core's buffer (reverse order, 64-element aligned starts, buckets padded to lcm(n, 128)): the n
    ranks' slices of a bucket abut, and their pieces add up to every tensor exactly once."""
    sizes = [262_668_288, 4096, 8_388_608, 2_097_152, 2_097_152, 8_388_608, 4096, 29_360_128, 29_360_128, 29_360_128,
             4096, 7, 1000]
    n = 8
    buckets = buffer_buckets(sizes, n, 40_000_000, True)
    assert all(b.size % 128 == 0 and b.size % n == 0 for b in buckets)
    assert all(s % 64 == 0 for b in buckets for s, _ in b.ranges)
    pieces = [shard_pieces(buckets, n, r) for r in range(n)]
    assert sum(map(sum, pieces)) == sum(sizes)
    assert all(sum(p) <= sum(b.size for b in buckets) // n for p in pieces)  # a slice may hold alignment padding
    # reverse order: 1000, 7, 4096 and two 29.4M reach 40M; the third 29.4M, 4096, 8.4M and two 2.1M; the rest
    assert [len(b.ranges) for b in buckets] == [5, 5, 3]
    assert buckets[0].ranges[:2] == ((0, 1000), (1024, 1031))


def test_the_tied_embedding_of_a_pipeline_gets_its_own_bucket():
    """_does_param_require_new_bucket: a shared embedding closes the bucket before it and its own bucket."""
    buckets = buffer_buckets([100, 50, 30], 2, None, True, own_bucket=frozenset({0}))
    assert [len(b.ranges) for b in buckets] == [2, 1] and buckets[1].ranges == ((0, 100),)


def test_optimizer_pieces_add_up_over_the_data_parallel_group():
    """Llama 3 8B, Megatron-Core, distributed optimizer over dp 8: the 8 ranks' pieces are every tensor's
    elements once; rank 0's sum is 1/8 of the padded buffer; unsharded, the optimizer sees whole tensors."""
    sc = scen("llama3-8b", gpus=8, framework="megatron", distributed_optimizer=True)
    every = [optimizer_tensor_elems(sc, 0, rank=r) for r in range(8)]
    assert sum(map(sum, every)) == 8_030_261_248
    assert sum(every[0]) == pytest.approx(8_030_261_248 / 8, rel=1e-4)
    # a piece per tensor, plus one per cut: at most n - 1 cuts inside each bucket
    sizes = [round(t.elems) for t in rank_tensors(sc, 0)]
    buckets = buffer_buckets(sizes, 8, 40_000_000, True)
    assert 195 < sum(map(len, every)) <= 195 + 7 * len(buckets)
    whole = optimizer_tensor_elems(scen("llama3-8b", gpus=8, framework="megatron"), 0)
    assert whole == [t.elems for t in rank_tensors(sc, 0)]
