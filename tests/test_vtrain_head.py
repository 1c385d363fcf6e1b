"""The vTrain rows' output head, byte for byte against Megatron-DeepSpeed's code (no data file needed).

GPTModelPipe (megatron/model/gpt_model.py of Megatron-DeepSpeed, 2022) ends in the tied ``_logits_helper``
(``parallel_lm_logits``: one fp16 GEMM against the word-embedding table), the ``float16_to_fp32`` layer
(``.float()``: read 2, write 4 per logit) and the ``CrossEntropy`` loss, whose ``output.contiguous().float()`` is a
no-op on the contiguous fp32 logits. ``_VocabParallelCrossEntropy`` (megatron/mpu/cross_entropy.py) then runs, all
in place on [b·s, V/tp] fp32: ``max`` (read 4), ``sub_`` (4 + 4), ``exp(out=)`` (4 + 4), ``sum`` (read 4),
``div_`` (4 + 4); backward ``mul_`` by the loss gradient (4 + 4) and the cast back to fp16 (4 + 2). The target
gather and the one-hot subtraction touch one value per token, not per logit. Per logit: 2 + 36 = 38 bytes forward,
12 + 2 = 14 backward, over Megatron's padded vocabulary shard (50,304 rows at TP 1, 50,432 / 2 at TP 2).
Read at microsoft/Megatron-DeepSpeed c24020485 (gpt_model.py ``GPTModelPipe``, ``CrossEntropy``), NVIDIA/Megatron-LM
d63c2541 (mpu/cross_entropy.py) and DeepSpeed's runtime/pipe/module.py ``_is_checkpointable`` (read_file id
42505370263).
"""

from __future__ import annotations

import pytest

from trainsim.cost_models import compute, flops
from trainsim.validation.vtrain import _vtrain_case

SEQ, MB = 1024, 4


def _scenario(tp: int):
    row = {"row_id": f"head-tp{tp}", "num_gpus": "8", "global_batch": str(8 * MB * 8 // tp), "micro_batch": str(MB),
           "hidden": "2048", "heads": "16", "layers": "24", "seq_len": str(SEQ), "tp": str(tp), "dp": str(8 // tp),
           "pp": "1", "step_time_s": "1.0"}
    case = _vtrain_case(row)
    assert case.scenario is not None, case.skip_reason
    return case.scenario


@pytest.mark.parametrize(("tp", "v_local"), [(1, 50304), (2, 50432 // 2)])
def test_loss_bytes_are_megatrons_fp32_passes(tp, v_local):
    ops = {op.name: op for op in flops.head_ops(_scenario(tp))}
    assert set(ops) == {"final_norm", "logits", "cross_entropy"}  # no extra cast or metric pass over the logits
    logits = SEQ * MB * v_local
    ce = ops["cross_entropy"]
    assert ce.fwd_bytes == pytest.approx((2 + 4 + 4 + 8 + 8 + 4 + 8) * logits)  # .float, max, sub_, exp, sum, div_
    assert ce.bwd_input_bytes == pytest.approx((8 + 4 + 2) * logits)  # mul_, cast back to fp16
    assert ce.bwd_weight_bytes == 0.0
    # the GEMM writes the fp16 logits forward and reads their fp16 gradient in each backward GEMM
    h = 2048
    assert ops["logits"].fwd_bytes == pytest.approx(2 * (SEQ * MB * h + v_local * h + logits))


def test_head_is_not_recomputed_under_full_checkpointing():
    # GPTModelPipe's _is_checkpointable (DeepSpeed runtime/pipe/module.py) checkpoints ParallelTransformerLayerPipe
    # only: the final norm, logits and loss run once per micro-batch.
    assert compute.head_times(_scenario(1)).recompute_s == 0.0
