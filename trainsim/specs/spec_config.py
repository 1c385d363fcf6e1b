"""The pydantic configuration every spec model shares (scenario, model, cluster with its GPU, scale-up, scale-out
and pools, layout, training, and the calibration profile and run factors built on them), and the length limits of
the names and descriptions they carry."""

from __future__ import annotations

from pydantic import ConfigDict

# A key the model lacks is refused (a typo is no silent default); an instance is frozen; no float field takes NaN or
# an infinity however it is written: pydantic's lax mode reads the strings "inf", "Infinity", "nan" and "1e400"
# (which overflows to inf) as floats, which the loaders' check_finite, seeing only YAML/JSON floats, never sees.
SPEC_CONFIG = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

# Characters of a name (model, cluster, GPU, pool, scenario): 255, Linux's NAME_MAX for one file name (a name taken
# from a file's stem always fits) and far above any real one (a Hugging Face repo id is at most 96). Every table
# prints names, and rich wraps a long cell in time quadratic in its length (a 30 000-character model name took
# 4 s to print, 300 000 more than 100 s).
MAX_NAME_CHARS = 255
# Characters of a scenario's free-text description: 4096 (a few paragraphs; Linux's PATH_MAX, the longest
# path a description might quote).
MAX_DESCRIPTION_CHARS = 4096
