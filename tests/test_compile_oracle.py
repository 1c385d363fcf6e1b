"""torch.compile's saved activations, measured from torch itself (TrainingSpec.compile).

The oracle compiles the executor's block (trainsim/kernels/torch_model.py ``Block``) with a torch.compile backend
built on AOTAutograd (``torch._dynamo.backends.common.aot_autograd``) with inductor's decompositions and the
partitioner inductor uses, ``min_cut_rematerialization_partition(..., compiler="inductor")``
(torch/_functorch/partitioners.py), and a forward compiler that records the forward graph's outputs beyond the
user outputs: the tensors handed to the backward. Their bytes (deduplicated by storage, parameters excluded --
the approach of tests/test_cost_memory.py::test_eager_impl_equals_torch_saved_tensor_bytes) are compared with
the activation model on CPU.

Two CPU-only terms are accounted explicitly: CPU flash attention returns its output contiguous in
(b, heads, s, d), so the out-projection's (b, s, heads·d) input is a copy (on CUDA flash writes (b, s, heads, d)
and the transpose back is a view: aten/src/ATen/native/transformers/cuda/attention.cu returns
``output.transpose(1, 2)``), and a checkpointed region saves the CPU generator's state (on CUDA a seed and offset).
"""

from __future__ import annotations

import functools

import pytest

from trainsim.cost_models import activations as act
from trainsim.specs import SpecError, build_scenario
from trainsim.specs.training import TrainingSpec

torch = pytest.importorskip("torch")

LLAMA = {"activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope", "bias": False,
         "vocab_size": 1024, "num_layers": 2}
SAVE_OPS = ("mm", "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
            "_scaled_dot_product_efficient_attention")


def _model(h, a, kv, f, s):
    return {**LLAMA, "hidden": h, "num_heads": a, "num_kv_heads": kv, "ffn_hidden": f, "max_seq_len": s}


def _scen(model, s, tp=1, **training):
    return build_scenario({"model": model, "cluster": "dgx-h100", "gpus": tp, "layout": {"tp": tp},
                           "training": {"seq_len": s, "global_batch": 1, "micro_batch": 1, "dtype": "fp32",
                                        "framework": "torch", **training}})


def _op_sac_policy(reduce_scatter: bool = False):
    """torchtitan's per-op policy (torchtitan/distributed/activation_checkpoint.py): mm and SDPA outputs (and
    with ``reduce_scatter`` its list's ``_c10d_functional.reduce_scatter_tensor``) are MUST_SAVE except every
    second mm of the block; everything else PREFER_RECOMPUTE."""
    from torch.utils.checkpoint import CheckpointPolicy
    save = {getattr(torch.ops.aten, n).default for n in SAVE_OPS if hasattr(torch.ops.aten, n)}
    if reduce_scatter:
        save.add(torch.ops._c10d_functional.reduce_scatter_tensor.default)
    counts = {"fwd": 0, "rc": 0}

    def policy(ctx, func, *args, **kwargs):
        key = "rc" if ctx.is_recompute else "fwd"
        if func == torch.ops.aten.mm.default:
            counts[key] += 1
        keep = func in save and not (func == torch.ops.aten.mm.default and counts[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE
    return policy


class _Checkpointed(torch.nn.Module):
    def __init__(self, block, policy):
        super().__init__()
        self.block, self.policy = block, policy

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts
        if self.policy is None:
            return checkpoint(self.block, x, use_reentrant=False)
        ctx = functools.partial(create_selective_checkpoint_contexts, self.policy)
        return checkpoint(self.block, x, use_reentrant=False, context_fn=ctx)


def compiled_saved_bytes(module, x) -> int:
    """Bytes of the tensors the partitioned forward hands to the backward (storage-deduplicated, no parameters)."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch._inductor.decomposition import select_decomp_table
    rec: dict = {}

    def partition(joint, joint_inputs, **kw):
        rec["n_out"] = kw["num_fwd_outputs"]
        return min_cut_rematerialization_partition(joint, joint_inputs, compiler="inductor", **kw)

    def fw_compiler(gm, _inputs):
        def run(*args):
            outs = gm(*args)
            rec["saved"] = [t for t in outs[rec["n_out"]:] if isinstance(t, torch.Tensor)]
            return outs
        return run

    backend = aot_autograd(fw_compiler=fw_compiler, bw_compiler=lambda gm, _: gm, partition_fn=partition,
                           decompositions=select_decomp_table())
    torch._dynamo.reset()
    y = torch.compile(module, backend=backend, fullgraph=True)(x)
    params = {getattr(p, "_local_tensor", p).untyped_storage().data_ptr() for p in module.parameters()}
    stores = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in rec["saved"]}
    y.sum().backward()
    return sum(n for ptr, n in stores.items() if ptr not in params)


def _measure(model, s, wrap=None):
    from trainsim.kernels.torch_model import Block, ModelOptions
    from trainsim.specs import ModelSpec
    torch.manual_seed(0)
    block = Block(ModelSpec(**model), ModelOptions())
    module = block if wrap is None else _Checkpointed(block, None if wrap == "full" else wrap)
    x = torch.randn(1, s, model["hidden"], requires_grad=True)
    return compiled_saved_bytes(module, x)


def _cpu_sdpa_output_copy(model, s) -> int:
    """The out-projection input copy CPU flash attention forces (fp32), after checking the layout that forces it."""
    q = torch.randn(1, 2, 4, 8)
    out = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert out.is_contiguous() and not out.transpose(1, 2).is_contiguous()
    return 4 * s * model["hidden"]


SMALL = (128, 4, 2, 352, 64)


def test_compiled_block_without_ac_saves_what_fused_kernels_save():
    """No AC: the partitioner keeps each norm's input and output, q, k, v, the attention output and logsumexp,
    the gate and up outputs and their product (3·f, not eager's 4·f) -- trainsim's fused-kernel block."""
    model, s = _model(*SMALL[:4], SMALL[4]), SMALL[4]
    measured = _measure(model, s)
    fused = act.layer_activation_bytes(_scen(model, s, compile=True), "fused").total
    assert measured == fused + _cpu_sdpa_output_copy(model, s)
    assert measured < act.layer_activation_bytes(_scen(model, s), "eager").total


def test_compiled_full_ac_keeps_the_block_input():
    """Full AC under compile: the checkpointed block keeps its input only (plus the CPU generator state)."""
    model, s = _model(*SMALL[:4], SMALL[4]), SMALL[4]
    measured = _measure(model, s, wrap="full")
    full = act.layer_activation_bytes(_scen(model, s, compile=True, recompute="full")).total
    assert measured == full + torch.get_rng_state().numel()


@pytest.mark.parametrize("shape", [SMALL, (4096, 32, 8, 14336, 16)], ids=["small", "llama3-8b-width"])
def test_compiled_op_sac_drops_the_unread_last_matmul_output(shape):
    """torchtitan's per-op SAC under compile: matmuls 1, 3, 5 (q, v, w1) and SDPA's output and logsumexp are
    kept; matmul 7 (w2), MUST_SAVE under the policy, is read by no backward op, so the partitioner drops it:
    e·T·h less than eager op_sac. Exact at the executor block's widths and at Llama 3 8B's."""
    h, a, kv, f, s = shape
    model = _model(h, a, kv, f, s)
    measured = _measure(model, s, wrap=_op_sac_policy())
    sac = {"recompute": "selective", "recompute_modules": ["op_sac"]}
    compiled = act.layer_activation_bytes(_scen(model, s, compile=True, **sac)).total
    eager = act.layer_activation_bytes(_scen(model, s, **sac)).total
    assert measured == compiled
    assert eager - compiled == 4 * s * h


@pytest.fixture(scope="module")
def fake_world():
    """One process standing in for 8 ranks (torch's fake process group answers every collective locally, so
    DTensor's sequence-parallel gathers and reduce-scatters trace with their real shapes)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    owned = not dist.is_initialized()  # another module's fake world of 8 (test_memory_oracle) serves as well
    assert owned or dist.get_world_size() >= 8
    if owned:
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
    yield
    if owned:
        dist.destroy_process_group()


def _measure_sp(model, s, tp):
    """Compiled saved bytes of the executor's block under torchtitan's per-op SAC, laid out by the executor's
    TP plan with sequence parallelism (trainsim/kernels/parallelize.py tp_plan_block) on a TP group of ``tp``;
    the block takes its sequence shard as a plain tensor, as the executor's chunk hands it over."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    from trainsim.kernels.parallelize import tp_plan_block
    from trainsim.kernels.torch_model import Block, ModelOptions
    from trainsim.specs import ModelSpec
    mesh = init_device_mesh("cpu", (8 // tp, tp), mesh_dim_names=("dp", "tp"))["tp"]
    torch.manual_seed(0)
    block = Block(ModelSpec(**model), ModelOptions())
    plan = tp_plan_block(True)
    if model["activation"] != "swiglu":
        plan.pop("mlp.gate")
    parallelize_module(block, mesh, plan)
    x = torch.randn(1, s // tp, model["hidden"], requires_grad=True)
    return compiled_saved_bytes(_Checkpointed(block, _op_sac_policy(reduce_scatter=True)), x)


@pytest.mark.parametrize("shape,tp,mlp", [(SMALL, 2, "swiglu"), (SMALL, 2, "gelu"), ((128, 4, 4, 352, 64), 4, "swiglu"),
                                          ((4096, 32, 8, 14336, 16), 8, "swiglu")],
                         ids=["small-tp2", "small-gelu-tp2", "small-mha-tp4", "llama3-8b-width-tp8"])
def test_compiled_op_sac_under_sequence_parallelism(fake_world, shape, tp, mlp):
    """torchtitan's per-op SAC with sequence parallelism under compile: the policy's reduce-scatter outputs are
    MUST_SAVE, but the MLP's -- like w2's output before it -- feeds only the residual add, so the partitioner
    keeps the attention's reduce-scatter output alone: eager op_sac less e·T·h (w2) and e·T·h/tp. Exact at TP 2,
    4 and 8, for SwiGLU and GeLU MLPs."""
    h, a, kv, f, s = shape
    model = _model(h, a, kv, f, s)
    if mlp == "gelu":
        model = {**model, "activation": "gelu", "norm": "layernorm"}
    measured = _measure_sp(model, s, tp)
    sac = {"recompute": "selective", "recompute_modules": ["op_sac"], "sequence_parallel": True}
    compiled = act.layer_activation_bytes(_scen(model, s, tp, compile=True, **sac)).total
    eager = act.layer_activation_bytes(_scen(model, s, tp, **sac)).total
    assert measured == compiled
    w2 = 4 * s * h if mlp == "swiglu" else 0  # GeLU's fc2 is matmul 6: not kept by the policy at all
    assert eager - compiled == w2 + 4 * s * h // tp


def test_compile_refuses_what_is_not_measured():
    TrainingSpec(framework="torch", compile=True, recompute="full")
    TrainingSpec(framework="torch", compile=True, recompute="selective", recompute_modules=["op_sac"],
                 sequence_parallel=True)
    for bad in ({"framework": "megatron"},
                {"framework": "torch", "recompute": "selective"},
                {"framework": "torch", "recompute": "selective", "recompute_modules": ["op_sac"],
                 "sequence_parallel": True, "dtype": "fp8"}):
        with pytest.raises((ValueError, SpecError), match="compile"):
            TrainingSpec(compile=True, **bad)


def test_predict_states_the_compile_assumption_and_saves_less():
    """Llama 3 8B, FSDP on 8 GPUs, torchtitan per-op SAC: compile keeps 2·T·h bytes less per block (w2's output)."""
    from trainsim.simulator.predict import predict
    base = {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "layout": {}}
    training = {"seq_len": 8192, "global_batch": 16, "micro_batch": 2, "framework": "torch", "zero": 3,
                "recompute": "selective", "recompute_modules": ["op_sac"]}
    eager = build_scenario({**base, "training": training})
    compiled = build_scenario({**base, "training": {**training, "compile": True}})
    saved = act.layer_activation_bytes(eager).total - act.layer_activation_bytes(compiled).total
    assert saved == 2 * 2 * 8192 * 4096
    pred = predict(compiled)
    assert "per-op SAC" in pred.memory_assumptions["compile"]
    assert "compile" not in predict(eager).memory_assumptions
