"""MoE routing imbalance: how much more than the mean the most loaded expert-parallel rank computes.

A router sends each token to its top-k experts; the tokens per expert, and so per EP rank (E/ep experts each),
are uneven. The dispatch, the experts' GEMMs and the combine of a MoE layer end when the most loaded rank
ends (the all-to-alls and the next layer synchronise every rank of the EP group), so a step runs at the pace of
the maximum load, not the mean. ``moe_load_factor`` returns that maximum over the mean:

* ``TrainingSpec.moe_imbalance`` given: that factor as measured on a real run (max tokens over mean tokens
  per EP rank, the rank-level counterpart of the MaxVio metric of Wang et al., "Auxiliary-Loss-Free Load
  Balancing Strategy for Mixture-of-Experts", arXiv:2408.15664, which is defined per expert as
  max load / mean load - 1).
* Dropless routing (no capacity factor): each rank's load is the mean plus a normal spread with coefficient
  of variation ``moe_load_cv``; the expected largest of ``ep`` such loads is
  ``1 + cv * E[max of ep standard normals]`` (variation.expected_max_std_normal). The default cv is 0 (even
  routing, as the MoE rows of the validation set run: they are force-balanced, trainsim/data/validation/
  README.md): no published router statistic gives a per-EP-rank cv that applies to every model and router,
  so a user sets the value measured on the run being planned (tokens per EP rank over steps and layers).
* Token-dropping routing (``moe_capacity_factor`` c, Megatron-Core --moe-expert-capacity-factor, GShard /
  Switch Transformer's expert capacity = c x mean tokens): an expert computes at most c times its mean share,
  the excess is dropped, so the factor is ``min(spread factor, c)``.

Even routing (factor 1) leaves every cost exactly as the balanced model computes it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .variation import expected_max_std_normal

if TYPE_CHECKING:
    from trainsim.specs import Scenario


def moe_load_factor(ep: int, *, imbalance: float | None = None, cv: float = 0.0,
                    capacity_factor: float | None = None) -> float:
    """Most loaded EP rank's tokens over the mean (1.0 = even routing)."""
    if imbalance is not None:
        factor = float(imbalance)
    elif cv:
        factor = 1.0 + cv * expected_max_std_normal(ep)
    else:
        factor = 1.0
    if capacity_factor is not None:
        factor = min(factor, float(capacity_factor))
    if not math.isfinite(factor) or factor <= 0:
        raise ValueError(f"moe load factor must be finite and positive, got {factor!r}")
    return factor


def scenario_moe_load_factor(scenario: Scenario) -> float:
    """The factor a resolved Scenario's training settings give (1.0 for a dense model)."""
    t = scenario.training
    if not scenario.model.is_moe:
        return 1.0
    return moe_load_factor(scenario.layout.ep, imbalance=t.moe_imbalance, cv=t.moe_load_cv,
                           capacity_factor=t.moe_capacity_factor)


def executed_expert_fraction(scenario: Scenario) -> float:
    """Of the routed tokens' expert work, the share the experts execute: ``min(1, c)`` with a capacity factor c,
    else 1. An expert takes at most c times its mean share, so below c = 1 every expert drops 1 - c of its tokens
    even under even routing, and model and hardware FLOPs (MFU, HFU) count the executed share, as the time does
    (``moe_load_factor``). Above c = 1 only an uneven router's excess is dropped; the FLOPs count every token."""
    c = scenario.training.moe_capacity_factor
    return min(1.0, float(c)) if scenario.model.is_moe and c is not None else 1.0
