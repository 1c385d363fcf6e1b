"""The model-state dtypes predict states are the ones it costs: the note names the gradient dtype whose bytes
the memory holds, whatever combination of dtype, grad_dtype and master_weights set it."""

from __future__ import annotations

import json

import pytest

from trainsim.cli.main import main

BASE = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "32",
        "--seq-len", "4096", "--json"]


@pytest.mark.parametrize("flags,grads,named", [
    (["--pure-bf16", "--grad-dtype", "fp32"], 4, "fp32 grads"),    # pure bf16 weights/Adam, fp32 gradient buffer
    (["--pure-bf16"], 2, "grads and Adam m, v in bf16"),
    (["--dtype", "fp32", "--grad-dtype", "bf16"], 2, "bf16 grads"),
    (["--dtype", "fp32"], 4, "fp32 grads"),
    ([], 4, "fp32 grads"),                                           # Megatron's fp32 main-grad buffer
])
def test_the_note_names_the_gradient_dtype_it_costs(capsys, flags, grads, named):
    assert main([*BASE, *flags]) == 0
    a = json.loads(capsys.readouterr().out)["memory"]["assumptions"]
    assert a["grads_bytes_per_param"] == grads and a["grad_reduce_dtype"] == {4: "fp32", 2: "bf16"}[grads]
    assert named in a["note"]


def test_the_report_states_the_same_dtypes():
    """The what-if report's memory section carries the dtypes and bytes per parameter the prediction assumed."""
    from trainsim.reports.whatif import memory_assumptions_text
    from trainsim.simulator.predict import predict
    from trainsim.specs import build_scenario
    s = build_scenario({"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "layout": {},
                        "training": {"seq_len": 4096, "global_batch": 32, "micro_batch": 1, "master_weights": False,
                                     "grad_dtype": "fp32"}})
    text = memory_assumptions_text(predict(s, fast=True))
    assert "megatron" in text and "fp32 grads" in text and "no fp32 master" in text
    assert "(2 + 4 + 4 bytes per parameter before sharding)" in text
