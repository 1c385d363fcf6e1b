"""torch.autocast on fp32 weights (cost_models/autocast.py) held against the executor's CUDA measurements.

benchmarks/data/executed_h200.jsonl holds one `trainsim execute --device cuda --json` record per line (one NVIDIA
H200, torch 2.11.0+cu130; benchmarks/device/README.md): bytes saved for backward per micro-batch (a
saved_tensors_hooks meter, deduplicated by storage, fp32 parameters left out) and torch.cuda.max_memory_allocated.
Each scenario is rebuilt from the record's sweep line (benchmarks/device/sweep.txt, trace_sweep.txt: the
lines benchmarks/device/gen_scenario.py turned into the executed scenarios) and predicted by today's code, never
from the record's stored prediction.

Tolerances: the saved bytes follow from the tensor shapes alone, so they must agree to 0.01 % (what is left is
flash attention's two 8-byte RNG words per layer and nll_loss's 4-byte total weight, a few hundred bytes);
the peak allocated within 0.2 % -- the caching allocator rounds every block up to 512 bytes and keeps unsplit
remainders below 1 MiB of large segments (c10/cuda/CUDACachingAllocator.cpp ``round_size``, ``should_split``),
a few MiB over the step's hundreds of tensors (measured: all 15 within 0.1 %). g4096_mb1 and g1024_s256_mb1 peak
at the end of a later micro-batch's backward (the deferred gradient casts, autocast.py mechanism 4), the others at
the start of the backward (the loss's workspace).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from trainsim.cost_models import activations as act
from trainsim.cost_models import memory
from trainsim.kernels.exec_config import ExecJob
from trainsim.kernels.executor import predicted_memory, prediction_scenario
from trainsim.specs import SpecError, build_scenario

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks" / "data" / "executed_h200.jsonl"
SWEEPS = {"sweep.txt": False, "trace_sweep.txt": True}  # trace lines carry a "traced" flag as the 2nd field
ACTS_TOL_PCT = 0.01
ALLOC_TOL_PCT = 0.2
DEFERRED_PEAK = {"g4096_mb1", "g1024_s256_mb1"}  # the lines whose peak is the deferred gradient casts


def _sweep_lines() -> dict[str, list[str]]:
    out = {}
    for name, traced in SWEEPS.items():
        for line in (ROOT / "benchmarks" / "device" / name).read_text().splitlines():
            parts = line.split()
            if parts:
                out[parts[0]] = [parts[0]] + parts[2:] if traced else parts
    return out


def _scenario(parts: list[str]) -> dict:
    """The scenario gen_scenario.py writes for a sweep line on the H200 cluster, dtype bf16."""
    name, layers, hidden, heads, ffn, seq, mb, gb, recompute, *extra = parts
    model = {"name": name, "num_layers": int(layers), "hidden": int(hidden), "num_heads": int(heads),
             "ffn_hidden": int(ffn), "vocab_size": 50304, "max_seq_len": int(seq)}
    for kv in (extra[0].split(",") if extra else []):
        key, value = kv.split("=")
        model[key] = yaml.safe_load(value)
    return {"model": model, "cluster": "hgx-h200", "gpus": 1, "layout": {"tp": 1, "pp": 1, "dp": 1},
            "training": {"seq_len": int(seq), "global_batch": int(gb), "micro_batch": int(mb), "dtype": "bf16",
                         "recompute": recompute, "framework": "torch"}}


def _records() -> list[dict]:
    return [json.loads(line) for line in RECORDS.read_text().splitlines() if line.strip()]


RECORD_IDS = [f"{r['sweep_name']}{'-traced' if r.get('traced') else ''}" for r in _records()]


@pytest.fixture(scope="module")
def cases():
    lines = _sweep_lines()
    out = []
    for rec in _records():
        scn = build_scenario(_scenario(lines[rec["sweep_name"]]))
        job = ExecJob(scenario=scn.model_dump(mode="json"), device="cuda")
        out.append((rec, job))
    return out


@pytest.mark.parametrize("index", range(len(RECORD_IDS)), ids=RECORD_IDS)
def test_rebuilt_scenario_is_the_executed_one(cases, index):
    rec, job = cases[index]
    s, rank = job.spec, rec["measured"]["ranks"][0]
    assert rec["device"] == "cuda" and rec["layout"]["micro_batch"] == s.training.micro_batch
    assert rec["layout"]["num_microbatches"] == s.num_microbatches
    assert rec["layout"]["recompute"] == s.training.recompute
    assert rank["num_params_local"] == s.model.total_params()
    assert prediction_scenario(job).training.autocast  # one GPU, no FSDP2: the step runs under torch.autocast


@pytest.mark.parametrize("index", range(len(RECORD_IDS)), ids=RECORD_IDS)
def test_saved_activations_match_cuda_measurement(cases, index):
    rec, job = cases[index]
    measured = rec["measured"]["ranks"][0]["saved_per_microbatch_bytes"]
    predicted = predicted_memory(job)[0]["activations_per_microbatch"]
    assert predicted == pytest.approx(measured, rel=ACTS_TOL_PCT / 100)


@pytest.mark.parametrize("index", range(len(RECORD_IDS)), ids=RECORD_IDS)
def test_peak_allocated_matches_cuda_measurement(cases, index):
    rec, job = cases[index]
    measured = rec["measured"]["ranks"][0]["max_memory_allocated_bytes"]
    predicted = predicted_memory(job)[0]["allocated"]
    err = 100 * (predicted - measured) / measured
    assert abs(err) <= ALLOC_TOL_PCT, f"{err:+.3f} %"
    deferred = "autocast_deferred_grads" in memory.stage_memory(prediction_scenario(job), 0, impl="eager").details
    assert deferred == (rec["sweep_name"] in DEFERRED_PEAK)


def _gpt(**training):
    return build_scenario({"model": {"name": "g", "num_layers": 4, "hidden": 1024, "num_heads": 16,
                                     "ffn_hidden": 4096, "vocab_size": 50304, "max_seq_len": 1024},
                           "cluster": "hgx-h200", "gpus": 1,
                           "training": {"seq_len": 1024, "global_batch": 4, "micro_batch": 1, "framework": "torch",
                                        "param_dtype_bytes": 4, **training}})


def test_autocast_block_closed_form():
    """A LayerNorm GeLU block under autocast saves 8·T·h bytes more than in 16-bit weights: two fp32 norm
    inputs (+2·T·h each) and two more 16-bit casts of the first norm's output for k and v (+2·T·h each)."""
    on, off = _gpt(), _gpt(mixed_precision="param_dtype")
    assert on.training.autocast and not off.training.autocast
    T, h = 1024, 1024
    for impl in ("eager", "fused"):
        diff = act.layer_activation_bytes(on, impl).total - act.layer_activation_bytes(off, impl).total
        assert diff == 8 * T * h
    full_on, full_off = _gpt(recompute="full"), _gpt(recompute="full", mixed_precision="param_dtype")
    assert act.layer_activation_bytes(full_on).total == 2 * act.layer_activation_bytes(full_off).total  # fp32 input


def test_weight_cast_cache_is_every_linear_weight_and_bias_once():
    scn = _gpt()
    m = scn.model
    linear = m.num_layers * (12 * m.hidden**2 + 9 * m.hidden) + m.vocab_size * m.hidden  # tied head casts wte
    sm = memory.stage_memory(scn, 0)
    assert sm.details["autocast_weight_cache"] == 2 * linear
    assert "autocast_weight_cache" not in memory.stage_memory(_gpt(mixed_precision="param_dtype"), 0).details
    assert "autocast_weight_cache" not in memory.stage_memory(_gpt(zero=3), 0).details  # FSDP2's policy


def test_mla_latent_norms_are_never_cast():
    """Every norm weight runs in fp32 under autocast, MLA's kv latent norm too (param_tensors' ``kv_norm``):
    DeepSeek-V2-Lite (27 layers, h 2048, kv_lora_rank 512, no q LoRA, RMSNorm, untied 102,400-token vocabulary)
    casts all it holds but 27 x (2h + 512) norm elements, the final norm and the word embedding."""
    scn = build_scenario({"model": "deepseek-v2-lite", "cluster": "hgx-h200", "gpus": 1,
                          "layout": {"tp": 1, "pp": 1, "dp": 1},
                          "training": {"seq_len": 1024, "global_batch": 8, "micro_batch": 1, "dtype": "bf16",
                                       "framework": "torch", "param_dtype_bytes": 4, "mixed_precision": "autocast"}})
    cast, bias, head = memory.autocast_cast_params(scn, 0)
    never = 27 * (2 * 2048 + 512) + 2048 + 102400 * 2048
    assert cast == memory.rank_param_shards(scn, 0).held - never
    assert (bias, head) == (0.0, 102400 * 2048)


def test_autocast_needs_fp32_weights_and_a_16_bit_dtype():
    with pytest.raises((SpecError, ValueError), match="mixed_precision"):
        _gpt(dtype="fp32", mixed_precision="autocast")


def test_deferred_gradient_casts_closed_form():
    """At the end of a later micro-batch's backward: the cache and as many bytes of waiting 16-bit gradients
    (2 x 2 bytes per cast element), the output layer's fp32 gradient and the tied embedding's (4 + 4 bytes per
    vocabulary element); activations and the loss workspace are gone by then."""
    scn = build_scenario({"model": {"name": "g", "num_layers": 12, "hidden": 1024, "num_heads": 16,
                                    "ffn_hidden": 4096, "vocab_size": 50304, "max_seq_len": 256},
                          "cluster": "hgx-h200", "gpus": 1,
                          "training": {"seq_len": 256, "global_batch": 4, "micro_batch": 1, "framework": "torch",
                                       "param_dtype_bytes": 4}})
    m = scn.model
    cast = m.num_layers * (12 * m.hidden**2 + 9 * m.hidden) + m.vocab_size * m.hidden
    sm = memory.stage_memory(scn, 0, impl="eager")
    fwd_bwd = sm.activations + sm.details["logits_workspace"]
    end = 2 * cast + 8 * m.vocab_size * m.hidden
    assert sm.details["autocast_deferred_grads"] == end - fwd_bwd > 0
    for other in ({"recompute": "full"}, {"global_batch": 1}):  # the cache is rebuilt / no later micro-batch
        scn2 = build_scenario({**scn.model_dump(mode="json"),
                               "training": {**scn.training.model_dump(mode="json"), **other}})
        assert "autocast_deferred_grads" not in memory.stage_memory(scn2, 0, impl="eager").details


def test_cached_casts_gradients_run_last_in_later_microbatches():
    """Mechanism 4's premise on real torch (CPU autocast casts linear weights through the same ``cached_cast``):
    the first micro-batch converts each weight's gradient as soon as it exists; in the second the same cached
    copies' ToCopyBackward nodes run only after everything else, the embedding's backward included."""
    torch = pytest.importorskip("torch")
    from trainsim.kernels.parallelize import cross_entropy
    from trainsim.kernels.torch_model import ModelOptions, build_chunk, synthetic_batch
    from trainsim.specs import load_model

    m = load_model({"num_layers": 2, "hidden": 32, "num_heads": 2, "ffn_hidden": 64, "vocab_size": 50,
                    "max_seq_len": 8, "tie_embeddings": True})
    model = build_chunk(m, [0, 1], True, True, ModelOptions(), 0, torch.device("cpu"))
    ids, targets = synthetic_batch(0, 0, 2, 8, m.vocab_size)
    orders: list[list[str]] = []
    hooked: dict[int, object] = {}  # node id -> node (kept alive, so no id is reused by a later node)

    def hook_graph(root):
        stack = [root]
        while stack:
            node = stack.pop()
            if node is None or id(node) in hooked:
                continue
            hooked[id(node)] = node
            node.register_prehook(lambda grads, name=node.name(): orders[-1].append(name))
            stack.extend(nxt for nxt, _ in node.next_functions)

    with torch.autocast("cpu", dtype=torch.bfloat16):
        for mb in range(2):
            loss = cross_entropy(model(ids[mb:mb + 1]), targets[mb:mb + 1])
            hook_graph(loss.grad_fn)
            orders.append([])
            loss.backward()
    first, second = orders
    weights = 2 * m.num_layers * 6 + 1  # q, k, v, o, fc1, fc2 weights and biases per layer, the tied head
    activations = m.num_layers * 4 + 2  # the fp32 norm outputs cast per linear (q, k, v; fc1), head input, logits
    assert first.count("ToCopyBackward0") == second.count("ToCopyBackward0") == weights + activations
    # the first micro-batch converts along the way: only the embedding's own gradient remains after its backward
    assert first[first.index("EmbeddingBackward0") + 1:].count("ToCopyBackward0") == 0
    tail = second[second.index("EmbeddingBackward0") + 1:]
    assert tail.count("ToCopyBackward0") == weights  # all the cached copies' conversions deferred to the end
