"""NVLS all-reduce work per CTA by NCCL release: whole 8 x chunk loops per CTA up to v2.19 (collectives/device/
all_reduce.h v2.18.5: ``offset = gridOffset + bid*nvls->nHeads*chunkSize``; chunk from enqueue.cc computeColl),
an even split over the 16 CTAs from v2.20.3 (enqueue.cc addTunedCollToPlan ``countPerChannels``)."""

from __future__ import annotations

import pytest

from trainsim.cost_models import nccl_model as nm
from trainsim.cost_models.collectives import collective_time
from trainsim.specs import SpecError, load_cluster
from trainsim.topologies.shape import GroupShape

KiB, MiB = 2**10, 2**20


@pytest.mark.parametrize(("nbytes", "chunk"), [
    (64 * KiB, 16 * KiB), (8 * MiB - 1, 16 * KiB), (8 * MiB, 32 * KiB), (64 * MiB, 64 * KiB), (1 << 30, 128 * KiB)])
def test_chunk_follows_compute_coll(nbytes, chunk):
    """128 KiB, cut to 64 KiB below 64 x 128 x 128 KiB, 32 KiB below 8 x 128 x 64 KiB, 16 KiB below 2 x 128 x 32 KiB
    (concurrentOps = 16 channels x 8 heads)."""
    assert nm.nvls_chunk_bytes(nbytes, 8) == chunk


@pytest.mark.parametrize(("nbytes", "share"), [
    (1 * KiB, 1.0), (64 * KiB, 1.0), (128 * KiB, 1.0), (256 * KiB, 0.5), (1 * MiB, 1 / 8), (2 * MiB, 1 / 16),
    (3 * MiB, 256 * KiB / (3 * MiB)), (4 * MiB, 1 / 16)])
def test_v2_18_first_cta_carries_whole_loops(nbytes, share):
    """A CTA's slot is 8 heads x 16 KiB = 128 KiB below 8 MiB: CTA 0 fills first; one loop is 16 slots = 2 MiB."""
    assert nm.nvls_busiest_channel_share(nbytes, 8, (2, 18)) == pytest.approx(share)
    assert nm.nvls_busiest_channel_share(nbytes, 8, (2, 20)) == nm.nvls_busiest_channel_share(nbytes, 8, None) == 1 / 16


def test_the_busiest_cta_sets_the_time():
    """64 KiB on 8 H100: all on CTA 0 at 1/16 of the NVLS rate, i.e. 15 more wire-times than the even split."""
    c = load_cluster("dgx-h100", 8)
    g = GroupShape.contiguous(8, c)
    old = collective_time("all_reduce", 64 * KiB, g, c, algo="nvls", nccl_version="2.18.5")
    new = collective_time("all_reduce", 64 * KiB, g, c, algo="nvls", nccl_version="2.20.5")
    assert new.time_s == collective_time("all_reduce", 64 * KiB, g, c, algo="nvls").time_s
    wire, rate = 64 * KiB * (1 + 1 / 8), g.intra_Bps * g.nvls_efficiency
    assert old.time_s - new.time_s == pytest.approx(15 * wire / rate, rel=1e-9)
    for big in (2 * MiB, 64 * MiB):
        assert collective_time("all_reduce", big, g, c, algo="nvls", nccl_version="2.18.5").time_s == pytest.approx(
            collective_time("all_reduce", big, g, c, algo="nvls").time_s, rel=1e-12)


def test_bad_version_is_refused_by_name():
    c = load_cluster("dgx-h100", 8)
    with pytest.raises(SpecError, match="nccl_version"):
        collective_time("all_reduce", 1024, 8, c, nccl_version="two")


def test_collective_command_takes_the_release():
    """`trainsim collective --nccl-version 2.18.5`: the same latency, 15 more wire-times on CTA 0 at 64 KiB."""
    from trainsim.cli.collective import rows
    c = load_cluster("dgx-h100", 8)
    g = GroupShape.contiguous(8, c)
    old, = rows("all_reduce", c, 8, [64 * KiB], algo="nvls", nccl_version="2.18.5")
    new, = rows("all_reduce", c, 8, [64 * KiB], algo="nvls")
    assert old["latency_s"] == new["latency_s"]
    wire, rate = 64 * KiB * (1 + 1 / 8), g.intra_Bps * g.nvls_efficiency
    assert old["bandwidth_s"] - new["bandwidth_s"] == pytest.approx(15 * wire / rate, rel=1e-9)
