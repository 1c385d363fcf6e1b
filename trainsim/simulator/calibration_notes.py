"""What a calibration profile leaves unapplied to a scenario, as notes for the prediction's warnings: the
calibration field names the profile, and these say where its measurements or factors do not reach (another
device, collectives of other group shapes, a compute factor fitted for another GPU)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainsim.specs import ClusterSpec, GPUSpec, Scenario
from trainsim.specs.gpu_names import gpu_preset_for
from trainsim.topologies.placement import place

if TYPE_CHECKING:
    from trainsim.cost_models.profile import CalibrationProfile


def calibration_notes(scenario: Scenario, profile: CalibrationProfile | None) -> list[str]:
    """The notes for ``profile`` (as given to predict, before its run calibration is applied) on ``scenario``."""
    if profile is None:
        return []
    return device_notes(scenario, profile) + _collectives_note(scenario, profile) + _run_factor_note(scenario, profile)


def device_class_refusal(devices: dict[str, GPUSpec], profile) -> str | None:
    """Why ``profile`` cannot price a cluster of these devices (name -> spec) at all, or None: its measurements ran
    on a CPU and the cluster has no CPU device, or on a GPU and the cluster is the host CPU. Their times are
    absolute (GEMM rates, gloo or NCCL fits), so across that divide no prediction would be faithful (a GPU profile
    of another preset is named in a note instead: ``device_notes``)."""
    measured = _measured_preset(profile)
    if measured is None:
        return None
    cpu = {name for name, d in devices.items() if d.kind == "cpu"}
    if (measured == "cpu") == bool(cpu) or (cpu and cpu != set(devices)):
        return None
    fp = profile.fingerprint
    where = "the host CPU" if measured == "cpu" else f"a GPU ({fp.device_name}, preset {measured})"
    return (f"the profile was measured on {where} and the cluster's devices are {', '.join(sorted(devices))}: "
            "its measured times cannot price them; calibrate on the cluster's own device")


def cluster_devices(scenario_or_cluster) -> dict[str, GPUSpec]:
    """The devices of a cluster (a Scenario's or a ClusterSpec) by name, its pools' included."""
    cluster = getattr(scenario_or_cluster, "cluster", scenario_or_cluster)
    return {cluster.gpu.name: cluster.gpu, **{p.gpu.name: p.gpu for p in (cluster.pools or ()) if p.gpu is not None}}


def device_notes(scenario: Scenario | ClusterSpec, profile) -> list[str]:
    """A note where a profile's microbenchmarks ran on another device than the cluster's GPU -- a GPU of another
    preset, or a CPU profile on a GPU cluster and the reverse (its GEMM, attention and collective times are
    absolute: they are used as measured, not rescaled to the cluster's GPU). A run-calibration factor names its
    GPU and applies to that GPU only (cost_models.run_factors): no note."""
    measured = _measured_preset(profile)
    if measured is None:
        return _unknown_device_note(scenario, profile)
    fp = profile.fingerprint
    other = sorted(name for name, d in cluster_devices(scenario).items() if _device_preset(d) not in (None, measured))
    if not other:
        return []
    note = (f"calibration measured on {fp.device_name or fp.device} (preset {measured}) but the cluster's "
            f"GPU is {', '.join(other)}: the profile's measured times are used as they are, not rescaled "
            "to that GPU")
    return [note]


def _unknown_device_note(scenario: Scenario | ClusterSpec, profile) -> list[str]:
    """A note where a profile holds measurements from a device that names no preset and is none of the cluster's
    devices (a hand-written or edited fingerprint, a GPU trainsim has no preset for): nothing checks that its times
    belong to the cluster's devices, so the prediction says so. A CPU profile on a cluster of CPU ranks is of their
    kind (whatever peak preset it was compared with): no note."""
    if profile is None or not profile.has_measurements():
        return []
    fp = profile.fingerprint
    devices = cluster_devices(scenario)
    if fp.device_name in devices or (fp.device == "cpu" and all(d.kind == "cpu" for d in devices.values())):
        return []
    where = ("a device it does not record" if fp.device_name == "unknown"
             else f"a device no preset names ({fp.device_name}, {fp.device})")
    return [f"calibration measured on {where}: its measured times are used as they are for "
            f"{', '.join(sorted(devices))}, unchecked against that device"]


def _measured_preset(profile) -> str | None:
    """The preset of the device a profile's microbenchmarks ran on: "cpu" for a CPU run (one that names its processor
    and compares with the cpu preset; a hand-written profile keeps the default fingerprint, device cpu and
    device_name unknown, and is not taken for one), a GPU's preset by its device name; None without measurements or
    where the device is not known."""
    if profile is None or not profile.has_measurements():
        return None
    fp = profile.fingerprint
    if fp.device == "cpu":
        cpu_run = fp.device_name != "unknown" and profile.reference_preset in (None, "cpu")
        return "cpu" if cpu_run else None
    return gpu_preset_for(fp.device_name)


def _device_preset(device: GPUSpec) -> str | None:
    """The preset a cluster device stands for: "cpu" for a host CPU, a GPU preset by its name, or None (not known)."""
    return "cpu" if device.kind == "cpu" else gpu_preset_for(device.name)


def _collectives_note(scenario: Scenario, profile) -> list[str]:
    """A note where a profile holds measured collectives but none on a group of this layout's shape (a fit applies
    to its exact op, group size and node count, cost_models.collectives; the note compares size and node count
    only): every collective then uses the cluster's modelled links, which the profile's name in the calibration
    field does not say."""
    fits = getattr(profile, "collective_fits", None) or []
    if not fits:
        return []
    pl = place(scenario)
    groups = [*pl.groups().values(), pl.dp_cp_group()]
    if scenario.dp_shard < scenario.dp:
        groups += pl.hsdp_groups(scenario.dp_shard)
    if scenario.model.is_moe:
        groups += [pl.expert_tp_group(), pl.expert_dp_group(), pl.expert_tp_ep_group()]
    groups += [pl.pp_p2p(stage) for stage in range(scenario.layout.pp - 1)]
    shapes = {(g.size, g.nodes) for g in groups if g.size > 1}
    if not shapes or any((f.group_size, f.nodes) in shapes for f in fits):
        return []
    measured = ", ".join(f"{n} ranks/{k} node{'s' if k > 1 else ''}" for n, k in sorted({(f.group_size, f.nodes)
                                                                                       for f in fits}))
    layout = ", ".join(f"{n}/{k}" for n, k in sorted(shapes))
    note = (f"calibration: its collectives were measured on {measured}, none of this layout's groups "
            f"(ranks/nodes {layout}): collectives use the cluster's modelled links")
    return [note]


def _run_factor_note(scenario: Scenario, profile) -> list[str]:
    """A note where a run calibration holds compute factors (keyed by GPU, cost_models.run_factors) but none for
    the cluster's GPU: no compute factor scales that GPU's rates (a profile's measured GEMM and attention times,
    where it holds them, still apply), while the factors that are not per GPU (kernel overhead, scale-up and
    scale-out bandwidth, per-step overhead) do."""
    rc = getattr(profile, "run_calibration", None)
    if rc is None:
        return []
    fitted = sorted(k.split(":", 1)[1] for k in rc.fitted_names() if k.startswith("compute:"))
    if not fitted or scenario.cluster.gpu.name in fitted:
        return []
    note = (f"run calibration fits compute for {', '.join(fitted)}, not for {scenario.cluster.gpu.name}: its "
            "compute factor is not applied to that GPU")
    return [note]
