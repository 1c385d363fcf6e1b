"""How much of the Nemotron 3 rows' gap each Mamba / LatentMoE cost candidate could hold (prints a table; no assertions).

Run: TRAINSIM_VALIDATION_DIR=../shared/validation python benchmarks/bench_nemotron_gap.py

For every Nemotron 3 row of the nemo dataset (NVIDIA Megatron-Bridge performance tables, unbundled CSV) it prints the
published and predicted step, their gap, and the step seconds of the candidates a missing cost could hide in -- all
on the rows' pp = 1 layouts, one micro-batch's layer ops times the micro-batches per step:

* ``ssd``: the chunked SSD scan (cost_models/mamba.py), and ``x_ssd``, the factor on its time that alone would close
  the gap (its Triton kernels would have to reach 1 / x_ssd of the STREAM bandwidth the model gives them);
* ``conv+norm``: causal_conv1d and the gated group RMSNorm, whose byte counts are the other Mamba-only elementwise
  kernels; even doubled they move a row by ~2 %;
* ``lat_ar``: the all-reduce over TP of LatentMoE's duplicated fc1/fc2_latent_proj gradients (Megatron-Core
  moe_layer.py builds them ``parallel_mode="duplicated"``), 16-bit, over the TP group: milliseconds in a
  step of seconds, and nothing at TP 1.

The mixer's fp32 casts (``-exp(A_log.float())``, ``dt_bias.float()``) are per-head vectors, already counted as launches.
"""

from __future__ import annotations

from trainsim.cost_models.collectives import collective_time
from trainsim.cost_models.compute import layer_op_times
from trainsim.cost_models.shapes import block_kinds
from trainsim.simulator.predict import predict
from trainsim.validation.nemo import load_nemo


def _step_seconds(scn, names: set[str]) -> float:
    """Seconds per step of the layer ops named ``names``: one micro-batch's passes times the micro-batches."""
    t = scn.training
    per_mb = sum(n * (o.fwd_s + o.bwd_input_s + o.bwd_weight_s)
                 for s, n in block_kinds(scn) for o in layer_op_times(s) if o.name in names)
    return per_mb * t.global_batch / (scn.layout.dp * t.micro_batch)


def _latent_allreduce_s(scn) -> float:
    """All-reduce over TP's consecutive GPUs of the LatentMoE projections' 16-bit gradients, by the collective model
    (cost_models.collectives.collective_time); 0 without LatentMoE or TP."""
    m, tp = scn.model, scn.layout.tp
    if not m.moe_latent_size or tp == 1:
        return 0.0
    nbytes = 2 * m.hidden * m.moe_latent_size * m.hybrid_pattern.count("E") * 2
    return collective_time("all_reduce", nbytes, tp, scn.cluster).time_s


def main() -> None:
    ds = load_nemo()
    print(f"{'row':7s} {'label':58s} {'pub_s':>6s} {'pred_s':>6s} {'gap_s':>6s} {'ssd_s':>6s} {'x_ssd':>5s} "
          f"{'conv+norm_s':>11s} {'lat_ar_ms':>9s}")
    for case in ds.cases:
        scn = case.scenario
        if scn is None or not case.label.startswith("Nemotron_3"):
            continue
        tokens = scn.training.global_batch * scn.training.seq_len / scn.layout.dp / scn.layout.tp / scn.layout.cp
        pub = tokens / case.published
        pred = predict(scn).step_time_s
        ssd = _step_seconds(scn, {"ssd_scan"})
        small = _step_seconds(scn, {"mamba_conv1d", "mamba_norm"})
        print(f"{case.row_id:7s} {case.label[:58]:58s} {pub:6.2f} {pred:6.2f} {pub - pred:6.2f} {ssd:6.2f} "
              f"{1 + (pub - pred) / ssd:5.2f} {small:11.2f} {_latent_allreduce_s(scn) * 1e3:9.2f}")


if __name__ == "__main__":
    main()
