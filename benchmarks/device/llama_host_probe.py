"""Why a Llama-style eager step is host-bound on one GPU: time the executor's chunk (16 blocks, hidden 2048,
seq 2048, mb 1, bf16 autocast) forward and forward+backward per variant (GQA or not, RoPE or learned positions,
RMSNorm or LayerNorm, SwiGLU or GeLU) and per SDPA backend, as host issue time (perf_counter before any
wait) and device time (CUDA events), and count the CUDA runtime's synchronising calls in one profiled
forward+backward. Writes one JSON object to stdout."""
import contextlib
import json
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from trainsim.kernels.torch_model import ModelOptions, build_chunk
from trainsim.specs import ModelSpec

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")
SMALL = len(sys.argv) > 1 and sys.argv[1] == "small"
BASE = dict(name="probe", num_layers=2 if SMALL else 16, hidden=128 if SMALL else 2048, num_heads=16,
            ffn_hidden=352 if SMALL else 5632, vocab_size=32000, max_seq_len=128 if SMALL else 2048,
            tie_embeddings=False)
LLAMA = dict(num_kv_heads=4, activation="swiglu", norm="rmsnorm", position_embedding="rope", bias=False)
VARIANTS = {
    "llama": LLAMA,
    "llama_mha": dict(LLAMA, num_kv_heads=16),
    "llama_learned_pos": dict(LLAMA, position_embedding="learned"),
    "llama_layernorm": dict(LLAMA, norm="layernorm"),
    "llama_gelu": dict(LLAMA, activation="gelu"),
    "gpt": dict(activation="gelu", norm="layernorm", position_embedding="learned", bias=True),
}
BACKENDS = {"default": None, "flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION}


def sync():
    if DEV.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, reps=5):
    """Median host issue seconds and device seconds of fn over reps (after 2 warm-ups)."""
    hs, ds = [], []
    for i in range(reps + 2):
        sync()
        a = torch.cuda.Event(enable_timing=True) if DEV.type == "cuda" else None
        if a: a.record()
        t0 = time.perf_counter()
        fn()
        h = time.perf_counter() - t0
        if a:
            b = torch.cuda.Event(enable_timing=True); b.record(); b.synchronize(); d = a.elapsed_time(b) / 1e3
        else:
            d = h
        if i >= 2:
            hs.append(h); ds.append(d)
    return sorted(hs)[len(hs) // 2], sorted(ds)[len(ds) // 2]


def syncing_calls(fn):
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEV.type == "cuda" else [])
    with profile(activities=acts) as prof:
        fn(); sync()
    counts, kernels = {}, 0
    for e in prof.events():
        n = e.name
        if any(k in n for k in ("Synchronize", "Memcpy", "cudaMalloc", "cudaFree", "item", "_local_scalar_dense", "nonzero")):
            counts[n] = counts.get(n, 0) + 1
        if getattr(e, "device_type", None) is not None and str(e.device_type).endswith("CUDA"):
            kernels += 1
    return counts, kernels


def run_variant(extra, backend):
    torch.manual_seed(0)
    spec = ModelSpec(**dict(BASE, **extra))
    chunk = build_chunk(spec, list(range(spec.num_layers)), True, True, ModelOptions(), seed=0, device=DEV)
    ids = torch.randint(0, spec.vocab_size, (1, spec.max_seq_len), device=DEV)
    ctx = (lambda: sdpa_kernel(backend)) if backend is not None else contextlib.nullcontext
    state = {}

    def fwd():
        with ctx(), torch.autocast(DEV.type, dtype=torch.bfloat16):
            state["l"] = F.cross_entropy(chunk(ids).flatten(0, 1).float(), ids.flatten())

    def fwd_bwd():
        fwd()
        with ctx():
            state.pop("l").backward()

    out = {"fwd": timed(fwd), "fwd_bwd": timed(fwd_bwd)}
    return chunk, fwd_bwd, out


def main():
    res = {"device": torch.cuda.get_device_name(0) if DEV.type == "cuda" else "cpu", "torch": torch.__version__,
           "cudnn_sdp_enabled": torch.backends.cuda.cudnn_sdp_enabled() if DEV.type == "cuda" else None, "runs": {}}
    for name, extra in VARIANTS.items():
        for bname, backend in BACKENDS.items():
            if name not in ("llama", "gpt") and bname != "default":
                continue
            key = f"{name}|{bname}"
            try:
                chunk, fb, out = run_variant(extra, backend)
                if bname == "default" and name in ("llama", "gpt"):
                    out["syncing_calls"], out["profiled_kernels"] = syncing_calls(fb)
                res["runs"][key] = out
                del chunk
            except Exception as exc:  # a backend that refuses the shape is a result too
                res["runs"][key] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            print(key, res["runs"][key].get("fwd"), res["runs"][key].get("fwd_bwd"), file=sys.stderr, flush=True)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
