"""The pydantic configuration every spec model shares: scenario, model, cluster (GPU, scale-up, scale-out,
pools), layout, training, and the calibration profile and run factors built on them."""

from __future__ import annotations

from pydantic import ConfigDict

# A key the model lacks is refused (a typo is no silent default); an instance is frozen; no float field takes NaN or
# an infinity however it is written: pydantic's lax mode reads the strings "inf", "Infinity", "nan" and "1e400"
# (which overflows to inf) as floats, which the loaders' check_finite, seeing only YAML/JSON floats, never sees.
SPEC_CONFIG = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
