"""Settings a prediction accepts but that cannot act on the scenario as given: stated in predict's notes, not
refused, so a scenario file (or a planner sweep over dp) that carries them stays valid where they have nothing to
act on, and the output says that they changed nothing."""

from __future__ import annotations

from trainsim.specs import Scenario


def inert_data_parallel_notes(scenario: Scenario) -> list[str]:
    """``dp_bucket_mb`` / ``overlap_grad_reduce`` with one data-parallel x context-parallel rank: the step has no
    gradient reduction (step_context: no DP group where dp x cp = 1), so neither a bucket size nor its overlap
    changes it. With cp > 1 the gradients reduce over the dp x cp ranks, so the settings act even at dp = 1."""
    t = scenario.training
    given = [k for k in ("dp_bucket_mb", "overlap_grad_reduce") if getattr(t, k) is not None]
    if scenario.dp * scenario.layout.cp > 1 or not given:
        return []
    verb = "changes" if len(given) == 1 else "change"
    return [f"{' and '.join(given)} {verb} nothing here: with dp = 1 the step has no data-parallel gradient "
            "reduction to bucket or overlap"]


def inert_pipeline_notes(scenario: Scenario) -> list[str]:
    """``overlap_p2p`` with one pipeline stage: there are no pipeline sends to overlap."""
    if scenario.layout.pp > 1 or scenario.training.overlap_p2p is None:
        return []
    return ["overlap_p2p changes nothing here: with pp = 1 there are no pipeline sends to overlap"]
