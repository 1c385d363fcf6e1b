"""Per-call cost of ``memory.stage_memory`` on FSDP2 (torch ``fully_shard``) ZeRO-3 ranks, whose phases and
activation-peak moment (cost_models/fsdp2_peak.py) each call needs; prints µs per call.

Run: python benchmarks/bench_stage_memory.py
The fastest of 7 rounds of 300 calls counts (the host is shared). Each call runs inside one memo scope, as a CLI command does (specs.memo), so the memoised activation and shape
terms are warm and the figure is stage_memory's own work.
"""

from __future__ import annotations

from bench_common import per_call_s

from trainsim.cost_models import memory
from trainsim.specs import build_scenario
from trainsim.specs.memo import memo_scope

SCENARIOS = {
    "Llama-3-8B, 64 H100, FSDP2 ZeRO-3, 8 x 8,192 tokens": {
        "model": "llama3-8b", "cluster": "dgx-h100", "gpus": 64, "layout": {"tp": 1, "pp": 1},
        "training": {"seq_len": 8192, "global_batch": 64, "micro_batch": 1, "zero": 3, "framework": "torch"}},
    "Llama-3-70B, 256 H100, FSDP2 ZeRO-3, TP 8, full recompute": {
        "model": "llama3-70b", "cluster": "dgx-h100", "gpus": 256, "layout": {"tp": 8, "pp": 1},
        "training": {"seq_len": 8192, "global_batch": 256, "micro_batch": 1, "zero": 3, "framework": "torch",
                     "recompute": "full"}},
}


def main() -> None:
    for name, spec in SCENARIOS.items():
        scn = build_scenario(spec)
        per_call = per_call_s(lambda: memory.stage_memory(scn, 0), 300, rounds=7, warm=True)
        print(f"{name}: stage_memory {1e6 * per_call:8.1f} us per call")


if __name__ == "__main__":
    with memo_scope():
        main()
