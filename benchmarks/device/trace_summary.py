"""Summarise chrome traces of `trainsim execute --profile-trace`: per profiler step, GPU kernels and host ops."""
import gzip
import json
import sys
from collections import Counter, defaultdict


def cat_of(name):
    n = name.lower()
    if any(k in n for k in ("gemm", "cutlass", "sm90_xmma", "nvjet", "cublas", "matmul", "xmma")): return "gemm"
    if "flash" in n or "fmha" in n or "attention" in n: return "attention"
    if "multi_tensor" in n or "adam" in n or "foreach" in n: return "optimizer"
    if "nccl" in n: return "nccl"
    if "reduce" in n: return "reduce"
    if "layer_norm" in n or "layernorm" in n: return "norm"
    if "softmax" in n or "cross_entropy" in n or "nll" in n or "log_softmax" in n: return "loss"
    if "elementwise" in n or "vectorized" in n or "unrolled" in n: return "elementwise"
    if "memcpy" in n or "memset" in n: return "memcpy"
    return "other"

def union(iv):
    iv.sort(); tot = 0; cur = None
    for a, b in iv:
        if cur is None or a > cur[1]:
            if cur: tot += cur[1] - cur[0]
            cur = [a, b]
        else: cur[1] = max(cur[1], b)
    if cur: tot += cur[1] - cur[0]
    return tot

def summarise(path):
    op = gzip.open if path.endswith(".gz") else open
    ev = json.load(op(path, "rt"))["traceEvents"]
    zg = sorted([e for e in ev if e.get("ph") == "X" and e.get("name", "").startswith("Optimizer.zero_grad")], key=lambda e: e["ts"])
    st = sorted([e for e in ev if e.get("ph") == "X" and e.get("name", "").startswith("Optimizer.step")], key=lambda e: e["ts"])
    steps = [{"name": f"step{i}", "ts": z["ts"], "dur": o["ts"] + o["dur"] - z["ts"]} for i, (z, o) in enumerate(zip(zg, st))]
    kern = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    rt = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "cuda_runtime"]
    cpu = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    # correlate kernels to their launch's step by the runtime call's time (kernels run after their launch)
    corr = {e["args"].get("correlation"): e for e in rt if "args" in e}
    out = []
    for s in steps:
        a, b = s["ts"], s["ts"] + s["dur"]
        ks = [k for k in kern if (corr.get(k.get("args", {}).get("correlation")) or k)["ts"] >= a and (corr.get(k.get("args", {}).get("correlation")) or k)["ts"] < b]
        by = defaultdict(lambda: [0, 0.0])
        for k in ks:
            c = cat_of(k["name"]); by[c][0] += 1; by[c][1] += k["dur"]
        launches = [r for r in rt if a <= r["ts"] < b and "Launch" in r["name"]]
        ops = Counter(e["name"] for e in cpu if a <= e["ts"] < b)
        kstart = min((k["ts"] for k in ks), default=a); kend = max((k["ts"] + k["dur"] for k in ks), default=b)
        out.append({"step": s["name"], "host_span_us": s["dur"], "kernels": len(ks), "kernel_sum_us": sum(k["dur"] for k in ks),
                    "gpu_busy_union_us": union([[k["ts"], k["ts"] + k["dur"]] for k in ks]), "gpu_first_to_last_us": kend - kstart,
                    "launch_calls": len(launches), "launch_call_us_sum": sum(r["dur"] for r in launches),
                    "by_category": {c: {"n": v[0], "us": round(v[1], 1)} for c, v in sorted(by.items())},
                    "aten_ops_top": ops.most_common(25), "cpu_ops_total": sum(ops.values())})
    return out

if __name__ == "__main__":
    res = {p: summarise(p) for p in sys.argv[2:]}
    json.dump(res, open(sys.argv[1], "w"), indent=1)
    for p, st in res.items():
        for s in st: print(p.split('/')[-1], s["step"], "host", s["host_span_us"], "kernels", s["kernels"], "ksum", round(s["kernel_sum_us"]), "busy", round(s["gpu_busy_union_us"]), "span", round(s["gpu_first_to_last_us"]), "launches", s["launch_calls"], "cpuops", s["cpu_ops_total"])
