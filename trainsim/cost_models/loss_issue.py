"""Host time to issue Megatron's output head and loss once per micro-batch, and the GPU idle it causes. Pure.

After the last transformer block the host issues the final layer norm, the logits, Megatron's fp32
vocabulary-parallel cross-entropy, the masked mean of the losses and the fp16 loss scaling, and, first in the
backward pass, their backward. ``trainsim.kernels.megatron_head`` writes that code op for op from
Megatron-DeepSpeed (``megatron/core/tensor_parallel/cross_entropy.py``, ``pretrain_gpt.py`` ``loss_func``); the
dispatch counter (``trainsim.kernels.op_count.count_megatron_head_ops``) gives 36 ops / 26 kernels forward and
29 / 14 backward at any width, vocabulary and micro-batch (``HEAD_LOSS_OPS``, held against the counter by
``tests/test_loss_issue.py``). The cross-entropy's three ``torch.distributed.all_reduce`` calls (maximum,
target logit, sum of exponentials: Megatron calls them whatever the TP size) and, under TP, the logits' input-
gradient all-reduce are one dispatch and one launch each (``host_issue.COLLECTIVE_OPS``).

The seconds follow the blocks' rules through the blocks' own functions (cost_models.host_issue): ``ATEN_DISPATCH_S``
and ``KERNEL_LAUNCH_S`` per op (``eager_issue_s``, the collectives added by ``with_collectives``), times the measured
Python-frame ratios of a whole forward (``MODULE_FRAME_RATIO``, 1.89) and of a backward inside a running backward
pass (``BACKWARD_FRAME_RATIO``, 3.00), and under TP the slowest of the TP ranks' hosts (``paced_s``: the
cross-entropy's all-reduces make the ranks wait for one another as the blocks' do).
They apply to frameworks that run Megatron's legacy Python layer (``FrameworkBehaviour.megatron_layer``) in eager
mode where no GPU profile measured the host: the executor's own chunk has its per-micro-batch work measured
(``CalibrationProfile.host_issue_chunk``), Megatron-Core's head is Transformer Engine's.

GPU idle (host_issue.chunk_idle_s, on the chunk that ends the model): the head's host seconds join the chunk's
host time, which the GPU waits for where it exceeds the chunk's GPU time. Where the framework syncs host and GPU
in every block (Megatron-DeepSpeed), the host cannot be ahead when the head starts: the host issues the head's ops
while the GPU runs them, so the GPU waits only where issuing takes longer than running, ``max(0, host - GPU)`` for
the head's forward and for its backward (``head_idle_s``). A TP 1 head of a 50k vocabulary runs milliseconds per
sequence and hides its issue; at TP 8 and one sequence it runs a fraction of a millisecond.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainsim.specs.framework_behaviour import behaviour

from .host_jitter import measured_sigma
from .shapes import layer_shape

if TYPE_CHECKING:
    from trainsim.specs import Scenario

    from .profile import CalibrationProfile

# (forward ops, forward kernels, backward ops, backward kernels) of Megatron's head and loss per micro-batch,
# as trainsim.kernels.op_count.count_megatron_head_ops counts trainsim.kernels.megatron_head (module doc).
HEAD_LOSS_OPS = (36, 26, 29, 14)
CE_ALL_REDUCE_CALLS = 3       # _VocabParallelCrossEntropy.forward: max, target logit, sum of exponentials
HEAD_BWD_TP_CALLS = 1         # copy_to_tensor_model_parallel_region's backward under TP


def head_loss_issue_s(scenario: Scenario, profile: CalibrationProfile | None = None) -> tuple[float, float]:
    """(forward, backward) host seconds to issue Megatron's head and loss for one micro-batch (module doc); (0, 0)
    where they are not modelled apart (not Megatron's legacy layer, not eager, or a GPU profile measured the
    host)."""
    from .eager import block_style  # cycle: eager -> flops -> host_issue -> here

    # cycle: host_issue imports this module
    from .host_issue import BACKWARD_FRAME_RATIO, MODULE_FRAME_RATIO, eager_issue_s, paced_s, with_collectives

    t, tp = scenario.training, scenario.layout.tp
    if (not behaviour(t.framework).megatron_layer or t.host_issue_mode != "eager"
            or getattr(scenario.cluster.gpu, "num_sms", None) is None or scenario.model.is_moe):
        return 0.0, 0.0
    style = block_style(layer_shape(scenario))
    measured = getattr(profile, "host_issue_block_s", None) if profile is not None else None
    if measured is not None and measured(style) is not None:
        return 0.0, 0.0
    calls = (CE_ALL_REDUCE_CALLS, HEAD_BWD_TP_CALLS if tp > 1 else 0)
    fwd, bwd = eager_issue_s(with_collectives(HEAD_LOSS_OPS, calls), scenario.cluster.host_cpu)
    return paced_s(fwd * MODULE_FRAME_RATIO, bwd * BACKWARD_FRAME_RATIO, tp, measured_sigma(profile, style))


def head_idle_s(host: tuple[float, float], gpu: tuple[float, float]) -> tuple[float, float]:
    """(forward, backward) GPU idle of the head: what issuing its ops takes beyond running them (module doc)."""
    return max(0.0, host[0] - gpu[0]), max(0.0, host[1] - gpu[1])
