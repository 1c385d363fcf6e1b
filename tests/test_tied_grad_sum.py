"""A tied word embedding whose lookup and output layer share a chunk receives two dense gradients per
micro-batch; frameworks accumulating into ``param.grad`` (grad_accumulation_pass) pay autograd's input-buffer sum
of them before AccumulateGrad, so the chunk's weight-gradient time equals the untied model's, whose two tables
are each accumulated once (simulator/builder.py ``_tied_sum_params``)."""

from __future__ import annotations

import pytest

from trainsim.simulator.builder import build_cost_table
from trainsim.specs import build_scenario


def _bw(tied: bool, framework: str) -> float:
    model = {"num_layers": 2, "hidden": 2048, "num_heads": 16, "vocab_size": 50304, "max_seq_len": 1024,
             "tie_embeddings": tied}
    s = build_scenario({"model": model, "cluster": "dgx-a100", "gpus": 1, "layout": {},
                        "training": {"seq_len": 1024, "global_batch": 2, "micro_batch": 1, "dtype": "fp16",
                                     "framework": framework}})
    return build_cost_table(s).stages[0].chunks[0].bwd_weight_s


def test_param_grad_framework_sums_the_tied_gradients():
    assert _bw(True, "megatron-2021") == pytest.approx(_bw(False, "megatron-2021"), rel=1e-12)
    # megatron-deepspeed's AccumulateGrad steals each step's first gradient (framework_behaviour
    # grad_accumulation_steals_first): the untied tables are each added on 1 of the 2 micro-batches, while the tied
    # table's input-buffer sum runs on both: 3 x 2 bytes x (1 - 1/2) x 50304 x 2048 more per micro-batch.
    from trainsim.cost_models.compute import hw_of
    from trainsim.specs.loaders import load_cluster

    bw = hw_of(load_cluster("dgx-a100").gpu, "fp16").mem_Bps
    extra = 3 * 2 * 0.5 * 50304 * 2048 / bw
    assert _bw(True, "megatron-deepspeed") - _bw(False, "megatron-deepspeed") == pytest.approx(extra, rel=1e-6)


def test_fused_accumulation_has_no_sum_pass():
    # Megatron-Core fuses the accumulation into the GEMM: no separate pass, tied or not.
    assert _bw(True, "megatron") == pytest.approx(_bw(False, "megatron"), rel=1e-12)
