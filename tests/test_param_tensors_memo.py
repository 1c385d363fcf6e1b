"""The tensor lists and everything read off them, memoised per model object and ChunkKey (param_tensors.chunk_key,
grad_buffer.optimizer_pieces_key, ddp_buckets.chunk_dp_buckets / chunk_segment_profile, state_rounding), held
element for element against a per-scenario, per-tensor reference written out here from the modules' definitions:
a key that missed an input the lists depend on would hand one scenario another's list.

The scenarios of each model share one model object, as the planner's candidates do, so every later scenario reads
what an earlier one with the same key left in the memo; dense (Llama 3 8B), coarse MoE (Mixtral 8x7B), fine MoE
(Qwen3-30B-A3B: 128 experts) and MLA + dense-first + MTP (DeepSeek-V3), each cut to a few blocks.
"""

from __future__ import annotations

import pytest

from trainsim.cost_models import ddp_buckets, state_rounding
from trainsim.cost_models.grad_buffer import (
    buffer_buckets,
    megatron_bucket_params,
    optimizer_tensor_elems,
    shard_pieces,
)
from trainsim.cost_models.memory import shard_groups
from trainsim.cost_models.param_tensors import (
    ParamTensor,
    block_tensors,
    chunk_tensors,
    embedding_tensors,
    head_tensors,
    module_style,
    mtp_tensors,
    rank_tensors,
)
from trainsim.specs import Layout, SpecError, TrainingSpec, load_cluster, load_model, resolve
from trainsim.specs.framework_behaviour import BEHAVIOURS

# (tp, pp, ep, etp, vpp, zero, framework, micro_batch): several splits per model, and pairs that differ only in
# what the tensor lists do not depend on (micro-batch, ZeRO stage, framework) so the memo is hit across them.
LAYOUTS = [
    (1, 1, 1, None, 1, 1, "megatron", 1), (1, 1, 1, None, 1, 1, "megatron", 2), (2, 2, 1, None, 1, 0, "megatron", 1),
    (2, 2, 1, None, 2, 1, "megatron", 1), (1, 2, 1, None, 1, 1, "megatron-2022", 1), (2, 1, 1, None, 1, 1, "torch", 1),
    (1, 2, 2, 1, 1, 1, "megatron", 1), (2, 2, 4, 1, 1, 1, "megatron", 2), (2, 1, 2, 2, 1, 1, "megatron", 1),
    (2, 1, 4, 2, 1, 0, "megatron", 1), (1, 1, 1, None, 1, 3, "pytorch-fsdp", 1), (1, 1, 1, None, 1, 2, "deepspeed", 1),
]
MODELS = {"llama3-8b": 4, "mixtral-8x7b": 4, "qwen3-30b-a3b": 4, "deepseek-v3": 4}


def scenarios(name: str):
    model = load_model(name).model_copy(update={"num_layers": MODELS[name]})
    if model.first_dense_layers:
        model = model.model_copy(update={"first_dense_layers": 1})
    cluster = load_cluster("dgx-h100").with_gpus(16)
    out = []
    for tp, pp, ep, etp, vpp, zero, fw, mb in LAYOUTS:
        if ep > 1 and not model.is_moe:
            continue
        layout = Layout(tp=tp, pp=pp, ep=ep, etp=etp, vpp=vpp)
        training = TrainingSpec(seq_len=1024, global_batch=64, micro_batch=mb, zero=zero, framework=fw,
                                sequence_parallel=tp > 1, **({"schedule": "interleaved"} if vpp > 1 else {}),
                                **({"distributed_optimizer": True} if zero and fw.startswith("megatron") else {}))
        try:
            out.append(resolve(model, cluster, layout, training))
        except SpecError:  # a framework without this model's features (e.g. the legacy ones' MoE)
            continue
    assert len(out) >= 5
    return out


def ref_chunk(scn, vstage: int, style: str) -> list[ParamTensor]:
    """A chunk's tensors built for the scenario alone, block by block (param_tensors module doc)."""
    m, lay = scn.model, scn.layout
    last, n = lay.pp * lay.vpp - 1, scn.stage_layers[vstage]
    n_dense, start = scn.dense_layers_in(vstage), sum(scn.stage_layers[:vstage])
    out = embedding_tensors(m, lay.tp) if vstage == 0 else []
    for i in range(n):
        block = m.dense_block() if m.is_moe and i < n_dense else m
        out += block_tensors(block, lay.tp, lay.ep, scn.expert_tp, style, f"layers.{start + i}")
    if vstage == last:
        out += head_tensors(m, lay.tp, with_output=not (m.tie_embeddings and last == 0))
        if m.mtp_layers:
            out += mtp_tensors(m, lay.tp, lay.ep, scn.expert_tp, style, embedding_copy=scn.loss_stage != 0)
    return out


def ref_optimizer_elems(scn, stage: int) -> list[float]:
    """grad_buffer's module doc applied tensor by tensor to this scenario's own lists."""
    tr, fw = scn.training, BEHAVIOURS[scn.training.framework]
    groups = dict(zip((False, True), shard_groups(scn))) if tr.effective_zero >= 1 else {False: 1, True: 1}
    out: list[float] = []
    for c in range(scn.layout.vpp):
        tensors = ref_chunk(scn, scn.virtual_stage(stage, c), module_style(tr.framework))
        for expert, group in groups.items():
            n, chosen = max(1, round(group)), [t for t in tensors if t.expert == expert]
            if n == 1 or fw.fsdp2:
                out += [t.elems / n for t in chosen]
                continue
            units: dict[str, list] = {}
            for t in chosen:
                units.setdefault("all" if fw.megatron_arguments else
                                 (t.name.split(".")[1] if t.name.startswith("layers.") else "root"), []).append(t)
            for unit in units.values():
                sizes = [max(1, round(t.elems)) for t in unit]
                if not fw.megatron_arguments:
                    out += shard_pieces(buffer_buckets(sizes, n, None, False), n, 0)
                    continue
                core = fw.megatron_ddp == "core"
                overlap = tr.overlap_grad_reduce if tr.overlap_grad_reduce is not None else \
                    (fw.overlap_grad_reduce and (fw.overlap_below_zero3 or tr.effective_zero >= 3))
                bucket = megatron_bucket_params(scn, tr.dp_bucket_mb) if core and overlap and c == 0 and stage == 0 \
                    else None
                own = frozenset(i for i, t in enumerate(unit) if scn.model.tie_embeddings and scn.layout.pp > 1
                                and core and t.kind in ("embedding", "head"))
                out += shard_pieces(buffer_buckets(sizes, n, bucket, core, own), n, 0)
    return out


def ref_ready(tensors, closing, head_s, block_s, emb_s):
    """Each tensor's gradient walked through the chunk's backward one by one (ddp_buckets module doc)."""
    def seg(name):
        return ".".join(name.split(".")[:2]) if name.startswith("layers.") else \
            ("embedding" if name.startswith("embedding.") else "head")
    secs = {"head": head_s, "embedding": emb_s}
    elems: dict[str, float] = {}
    for t in tensors:
        elems[seg(t.name)] = elems.get(seg(t.name), 0.0) + t.elems
    ready, clock, current, done = [0.0] * len(tensors), 0.0, None, 0.0
    for i in reversed(range(len(tensors))):
        if seg(tensors[i].name) != current:
            clock += secs.get(current, block_s) if current is not None else 0.0
            current, done = seg(tensors[i].name), 0.0
        done += tensors[i].elems
        ready[i] = clock + secs.get(current, block_s) * done / max(elems[current], 1.0)
    total = clock + (secs.get(current, block_s) if current is not None else 0.0)
    return tuple(min(1.0, ready[i] / total) if total > 0 else 1.0 for i in closing)


@pytest.mark.parametrize("name", list(MODELS))
def test_memoised_lists_equal_the_per_scenario_reference(name):
    for scn in scenarios(name):
        style = module_style(scn.training.framework)
        for s in range(scn.layout.pp):
            chunks = [ref_chunk(scn, scn.virtual_stage(s, c), style) for c in range(scn.layout.vpp)]
            for c, ref in enumerate(chunks):
                assert list(chunk_tensors(scn, scn.virtual_stage(s, c))) == ref
            assert list(rank_tensors(scn, s)) == [t for ch in chunks for t in ch]
            assert optimizer_tensor_elems(scn, s) == ref_optimizer_elems(scn, s)


@pytest.mark.parametrize("name", list(MODELS))
def test_bucket_ready_fractions_equal_the_per_tensor_walk(name):
    """Megatron's DDP buckets of each chunk and when each is ready, from the memoised segment profile, bit for bit
    against the tensor-by-tensor walk (times chosen so no sum is exact in binary)."""
    for scn in scenarios(name):
        for s in range(scn.layout.pp):
            for c in range(scn.layout.vpp):
                vs = scn.virtual_stage(s, c)
                buckets = ddp_buckets.chunk_dp_buckets(scn, s, c, scn.dp, 2)
                closing = [b.closing_tensor for b in buckets]
                assert sum(b.elems for b in buckets) >= sum(round(t.elems) for t in chunk_tensors(scn, vs))
                got = ddp_buckets.profile_ready_fractions(ddp_buckets.chunk_segment_profile(scn, vs), closing,
                                                          0.3, 0.7, 0.1)
                assert got == ref_ready(chunk_tensors(scn, vs), closing, 0.3, 0.7, 0.1)
                assert got == ddp_buckets.ready_fractions(chunk_tensors(scn, vs), closing, 0.3, 0.7, 0.1)


def test_state_rounding_of_a_shared_key_equals_a_fresh_model():
    """The allocator replay memoised per model and keys gives what a fresh model object (an empty memo) gives."""
    for name in ("qwen3-30b-a3b", "llama3-8b"):
        for scn in scenarios(name):
            fresh = scn.model_copy(update={"model": scn.model.model_copy()})
            for s in range(scn.layout.pp):
                opt = sum(optimizer_tensor_elems(scn, s))
                assert state_rounding.megatron_state_rounding_bytes(scn, s, optimizer_params=opt) == \
                    state_rounding.megatron_state_rounding_bytes(fresh, s, optimizer_params=opt)
