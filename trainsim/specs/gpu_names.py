"""Which preset a GPU's name stands for: one table for torch.cuda device names and published ``gpu_type`` cells.

Two questions, asked by two layers: calibration needs the GPU preset whose dense peaks the device has (efficiency
is measured against them); validating a published run needs the cluster preset that stands for its machine. The
answers differ only for parts whose node is not a preset's: a Grace Hopper superchip has an H200-class GPU's
peaks but no cluster preset, an A100 PCIe card the SXM part's peaks but not its NVSwitch node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GPUName:
    """A name pattern (on the lower-cased name) and the presets it stands for."""

    pattern: str
    gpu: str
    cluster: str
    cluster_overrides: dict[str, Any] = field(default_factory=dict)


# Most specific first: "gb200" contains "b200", "gh200" contains "h200".
GPU_NAMES: tuple[GPUName, ...] = (
    GPUName(r"gb300", "gb300", "gb300-nvl72"),
    GPUName(r"gb200", "gb200", "gb200-nvl72"),
    GPUName(r"b300", "b300", "dgx-b300"),
    GPUName(r"b200", "b200", "dgx-b200"),
    GPUName(r"h200", "h200", "hgx-h200"),
    # H800: H100 compute with NVLink cut to 400 GB/s bidirectional, 200 per direction [h800_dsv3]
    GPUName(r"h800", "h100-sxm", "dgx-h100", {"scale_up": {"bw_per_gpu_Bps": 200e9}}),
    GPUName(r"h100", "h100-sxm", "dgx-h100"),
    # A800: the A100 with NVLink cut to 400 GB/s bidirectional, 200 per direction, otherwise the same part (NVIDIA's
    # export variant, Reuters via tweakers.net/nieuws/203182, Nov 2022; AMSP arXiv:2311.00257 Sec. VI-A testbed)
    GPUName(r"a800.*\b40\s*gb|a800.*-40gb", "a100-40gb", "dgx-a100",
            {"gpu": "a100-40gb", "scale_up": {"bw_per_gpu_Bps": 200e9}}),
    GPUName(r"a800", "a100-80gb", "dgx-a100", {"scale_up": {"bw_per_gpu_Bps": 200e9}}),
    GPUName(r"a100.*\b40\s*gb|a100.*-40gb", "a100-40gb", "dgx-a100", {"gpu": "a100-40gb"}),
    GPUName(r"a100", "a100-80gb", "dgx-a100"),
    GPUName(r"mi300x", "mi300x", "mi300x"),
)
# Parts with lower dense peaks than the preset their name matches (fewer SMs, lower clocks): H100 PCIe has
# ~76 % of the SXM part's peak, the H100 NVL pair's cards are PCIe-class too.
OTHER_PEAKS = (r"h100\s*pcie", r"h100\s*nvl")
# Parts whose node no cluster preset stands for: PCIe cards, the H100 NVL pair, the Grace Hopper superchip, and
# the 96 GB HBM2e H100 of Meta's Grand Teton (2.4 TB/s, 500 W default power limit; hardware.csv h100_ttitan).
NO_CLUSTER = (r"pcie", r"h100\s*nvl", r"gh200", r"grace\s*hopper", r"h100.*\b96\s*gb|h100.*hbm2e")


def _match(name: str) -> GPUName | None:
    low = name.lower()
    return next((g for g in GPU_NAMES if re.search(g.pattern, low)), None)


def gpu_preset_for(name: str) -> str | None:
    """The GPU preset whose datasheet peaks a device of this name has, or None."""
    if any(re.search(p, name.lower()) for p in OTHER_PEAKS):
        return None
    found = _match(name)
    return found.gpu if found else None


def cluster_preset_for(name: str) -> tuple[str, dict[str, Any]] | None:
    """The cluster preset (and overrides) standing for a machine built of this GPU, or None."""
    if any(re.search(p, name.lower()) for p in NO_CLUSTER):
        return None
    found = _match(name)
    return (found.cluster, dict(found.cluster_overrides)) if found else None
