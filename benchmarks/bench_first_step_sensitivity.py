"""Print how the first-step caching-allocator replay (trainsim/cost_models/first_step_fragmentation.py) would move
the reserved peak of the torch FSDP rows of the memory dataset, were it applied to them, under three traces:

* ``kept``: what the replay uses for Megatron -- per block the tensors it saves for backward (``block_saved_tensors``;
  with full recompute also the block's forward set as a transient), the embedding's and the loss stage's tensors;
* ``+work``: as ``kept``, with every block's whole forward set (the no-recompute tensor list) also allocated and
  freed once in the forward and once in the backward, standing for the recompute working set and the backward's
  activation gradients, which ``kept`` leaves out for selective recompute;
* ``-loss``: as ``kept`` without the loss stage's tensors (the logits).

torch.optim's Adam/AdamW create their states lazily too (``_init_group``), so the mechanism applies to these runs;
the spread across the three traces is why the prediction does not use it (lazy_state_bytes says so): where the
loss's logits are the largest tensor, a state that splits an activation's segment can push that activation
into the logits' segment, and the next step's logits into a new one, so the replay's answer jumps by the logits'
size with details the trace does not hold. PR #165's eager per-op SAC rows (FSDP1 and FSDP2) are predicted from
the op-by-op replay of their step (cost_models/op_sac_trace.py), which holds the lazily created states already:
their columns count them a second time.

    TRAINSIM_VALIDATION_DIR=../shared/validation python benchmarks/bench_first_step_sensitivity.py
"""

from __future__ import annotations

from dataclasses import replace

from trainsim.cost_models import memory
from trainsim.cost_models.activations import embedding_activation_bytes
from trainsim.cost_models.first_step_fragmentation import (
    _extra_reserved,
    block_saved_tensors,
    head_saved_tensors,
)
from trainsim.cost_models.grad_buffer import optimizer_tensor_elems
from trainsim.cost_models.shapes import layer_shape
from trainsim.simulator.predict import predict
from trainsim.specs.framework_behaviour import behaviour
from trainsim.specs.memo import memo_scope
from trainsim.validation.memory_runs import load_memory

GiB = 1 << 30
ADAM_STATE_BYTES = (4, 4)  # fp32 exp_avg, exp_avg_sq per element (torch.optim.AdamW)


def variants(scn) -> dict[str, float] | None:
    """Extra reserved bytes of the first-step replay on stage 0 under each trace (module doc)."""
    shp = layer_shape(scn)
    kept = block_saved_tensors(shp, "fused")
    whole = block_saved_tensors(replace(shp, recompute="none"), "fused")
    if kept is None or whole is None:
        return None
    temps = whole if shp.recompute == "full" else ()
    sm = memory.stage_memory(scn, 0)
    inflight = max(1, round(sm.inflight_microbatches))
    first = (embedding_activation_bytes(scn),)
    last = head_saved_tensors(scn, "fused") if scn.loss_stage == 0 else ()
    states = tuple(n * b for n in optimizer_tensor_elems(scn, 0) if n > 0 for b in ADAM_STATE_BYTES)
    layers = scn.layers_on_stage(0)
    return {"kept": _extra_reserved((kept, temps), layers, first, last, inflight, states),
            "+work": _extra_reserved((kept, whole), layers, first, last, inflight, states),
            "-loss": _extra_reserved((kept, temps), layers, first, (), inflight, states)}


def main() -> None:
    print(f"{'row':36s} {'published':>9s} {'predicted':>9s}   error with the replay's extra (GiB): "
          "kept | +work | -loss")
    for c in load_memory().cases:
        scn = c.scenario
        if scn is None or not behaviour(scn.training.framework).torch_fsdp or scn.training.offload_optimizer:
            continue
        if not c.row_id.endswith("resv") and not c.row_id.startswith(("tt24", "tt25")):
            continue
        got = variants(scn)
        if got is None:
            continue
        pred = c.value_fn(predict(scn))
        cells = " | ".join(f"{(pred + x / GiB) / c.published - 1:+6.1%} ({x / GiB:4.2f})" for x in got.values())
        print(f"{c.row_id:36s} {c.published:9.2f} {pred:9.2f}   {cells}")


if __name__ == "__main__":
    with memo_scope():  # one memo for the run, as a CLI command has (specs.memo)
        main()
