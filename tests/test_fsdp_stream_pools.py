"""FSDP's side-stream pools in the caching allocator (cost_models/fsdp_stream_pools.py), held against traces worked
by hand from the allocator's rules (caching_allocator.py: requests of 10 MiB or more take a segment of their size
rounded to 2 MiB; best fit among the stream's free blocks; a block is split when more than 1 MiB remains)."""

import pytest

from trainsim.cost_models.fsdp_stream_pools import gather_pool_extra, reduce_pool_extra, stream_pool_cached
from trainsim.specs import SpecError
from trainsim.specs.training import TrainingSpec

MiB = 1 << 20
SHARD = 8
# A block of 64 Mi elements: its fp32 reduce-scatter input is 256 MiB and its sharded output 32 MiB, both multiples
# of 2 MiB, so no segment rounding enters the closed forms below.
BLOCK = 64 * MiB


def test_identical_units_keep_one_input_segment():
    """Each input is freed before the next unit's is allocated, which takes the same block: one input's bytes
    beyond the outputs, over any number of units. A later micro-batch's output, accumulated into the first's and
    freed, needs one more output segment while all of the first's are held."""
    for n in (1, 4):
        assert reduce_pool_extra((float(BLOCK),) * n, SHARD, 4, True, 1) == BLOCK * 4
    assert reduce_pool_extra((float(BLOCK),) * 4, SHARD, 4, True, 3) == BLOCK * 4 + BLOCK * 4 / SHARD
    assert reduce_pool_extra((float(BLOCK),) * 4, SHARD, 4, True, 16) == BLOCK * 4 + BLOCK * 4 / SHARD


def test_outputs_alone_add_nothing():
    """Torch >= 2.5 (compute-stream input): the pool holds only the sharded outputs, counted as gradients."""
    assert reduce_pool_extra((float(BLOCK),) * 4, SHARD, 4, False, 1) == 0.0


def test_larger_root_unit_takes_a_second_segment():
    """A root (embedding / output) unit twice a block's size, reduced last: its input fits no free block and takes
    a new 512 MiB segment; its 64 MiB output is carved from the free block-input segment (best fit, 192 MiB left),
    so the pool holds both input segments beyond the outputs less the root's output."""
    root = 2.0 * BLOCK
    got = reduce_pool_extra((root,) + (float(BLOCK),) * 3, SHARD, 4, True, 1)
    assert got == BLOCK * 4 + root * 4 - root * 4 / SHARD


def test_gather_pool_two_outputs_alive():
    """In the forward each all-gather output lives until the next is allocated: two blocks' outputs for identical
    blocks; with a larger root first, the root's and a block's (each later block carved from the root's segment or
    taking the block's) -- beyond the one unit the memory model counts, a block's bytes either way."""
    assert gather_pool_extra((float(BLOCK),) * 4, SHARD, 2) == BLOCK * 2
    assert gather_pool_extra((2.0 * BLOCK,) + (float(BLOCK),) * 4, SHARD, 2) == BLOCK * 2


def test_gather_pool_beyond_the_outputs_the_peak_moment_holds():
    """The pool's reserved peak is the forward's root and first-block outputs (3 blocks' bytes for a root of two);
    what the stage's peak counts as allocated depends on its FSDP2 moment (fsdp2_peak.py): one block's output at the
    activation peak leaves the root's cached, both at the forward moment leave nothing, none at the root's
    reduce-scatter or the loss's backward leaves all of it cached."""
    from trainsim.cost_models.fsdp2_peak import fsdp2_phases
    root, units = 2.0 * BLOCK, (2.0 * BLOCK,) + (float(BLOCK),) * 4
    counted = fsdp2_phases(root, float(BLOCK), 2, 2, 4).gather_outputs
    assert counted == {"backward": BLOCK * 2, "forward": 3 * BLOCK * 2, "reduce": 0.0, "loss": 0.0}
    extra = {k: gather_pool_extra(units, SHARD, 2, v) for k, v in counted.items()}
    assert extra == {"backward": root * 2, "forward": 0.0, "reduce": 3 * BLOCK * 2, "loss": 3 * BLOCK * 2}


def test_fsdp2_loss_moment_closed_form():
    """At the loss's backward FSDP2 holds only the units left unsharded after forward: none, the root R, or the
    root and the last block B (16-bit copies); the loss moment rules where the workspace W plus those reaches the
    bound on the last block's backward: working - head_saved + backward + block_reduce + head_grad."""
    from trainsim.cost_models.fsdp2_peak import fsdp2_phases, loss_moment_rules
    R, B = 3.0 * BLOCK, float(BLOCK)
    assert [fsdp2_phases(R, B, 2, 2, 4, kept).loss for kept in ("none", "root", "root_and_last_block")] == \
        [0.0, 2 * R, 2 * (R + B)]
    ph = fsdp2_phases(R, B, 2, 2, 4, "root")
    bound = 10.0 - 5.0 + ph.backward + 4 * B + 7.0  # working 10, head_saved 5, block_reduce 4B, head_grad 7
    common = {"working": 10.0, "head_saved": 5.0, "head_grad": 7.0, "block_reduce": 4 * B}
    assert loss_moment_rules(ph, workspace=bound - ph.loss, **common)
    assert not loss_moment_rules(ph, workspace=bound - ph.loss - 1.0, **common)


def test_fsdp2_moments_closed_form():
    """fsdp2_peak.py's three moments for a root of R and blocks of B parameters, bf16 compute, fp32 reduce:
    backward R*2 + 2*B*2 + B*2 beside the activations; forward 2*(R + B)*2; reduce R*(2 + 4). The peak moment is
    the one largest once the activation peak's own bytes are added to the backward."""
    from trainsim.cost_models.fsdp2_peak import fsdp2_phases, peak_moment
    R, B = 3.0 * BLOCK, float(BLOCK)
    ph = fsdp2_phases(R, B, 2, 2, 4)
    assert (ph.backward, ph.forward, ph.reduce) == (R * 2 + 6 * B, 4 * (R + B), 6 * R)
    assert peak_moment(ph, ph.backward + 100 * B, 0.0) == ("backward", 0.0)
    assert peak_moment(ph, ph.backward, 0.0) == ("reduce", 6 * R - ph.backward)
    assert peak_moment(fsdp2_phases(R, B, 4, 4, 4), R * 4 + 12 * B, 0.0) == ("forward", 8 * (R + B) - R * 4 - 12 * B)


def _training(**kw):
    base = {"seq_len": 2048, "global_batch": 64, "micro_batch": 8, "zero": 3, "dtype": "bf16"}
    return TrainingSpec(**{**base, **kw})


def test_which_frameworks_and_versions_hold_an_input_segment():
    units = (float(BLOCK),) * 4
    fsdp1 = _training(framework="pytorch-fsdp")  # fp32 reduce of bf16 gradients: cast in the post-backward stream
    assert stream_pool_cached(fsdp1, units, SHARD, 4, 1) == BLOCK * 4
    assert stream_pool_cached(fsdp1, units, SHARD, 2, 1) == 0.0  # bf16 reduce: no cast copy
    torch25 = _training(framework="torch")  # compute-stream input; the all-gather pool's second block
    assert stream_pool_cached(torch25, units, SHARD, 4, 1) == BLOCK * 2
    torch24 = _training(framework="torch", fsdp_reduce_scatter_input="reduce_scatter_stream")
    assert stream_pool_cached(torch24, units, SHARD, 4, 1) == BLOCK * 4 + BLOCK * 2
    assert stream_pool_cached(_training(framework="megatron", zero=1), units, SHARD, 4, 1) == 0.0
    assert stream_pool_cached(_training(framework="torch", offload_optimizer=True, offload_params=True),
                              units, SHARD, 4, 1) == 0.0


@pytest.mark.parametrize("framework", ["megatron", "pytorch-fsdp", "deepspeed"])
def test_key_refused_outside_fsdp2(framework):
    """FSDP2's input placement is a setting of framework torch only: elsewhere refused, naming the field."""
    from trainsim.specs import build_scenario
    training = {"seq_len": 2048, "global_batch": 8, "micro_batch": 1, "zero": 3, "framework": framework,
                "fsdp_reduce_scatter_input": "reduce_scatter_stream"}
    with pytest.raises(SpecError, match="fsdp_reduce_scatter_input: .* framework " + framework):
        build_scenario({"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "training": training})


def test_stage_memory_carries_the_pools_in_the_reserved_figure():
    """PR #165's FSDP1 run (Llama 2 7B, 8 H100): the pool term is part of the cached bytes only -- the allocated
    peak (``total``) does not move."""
    from trainsim.cost_models import memory
    from trainsim.specs import build_scenario
    from trainsim.validation.memory_runs import load_memory
    case = next(c for c in load_memory().cases if c.row_id == "tt165_fsdp1_sac_resv")
    sm = memory.stage_memory(case.scenario, 0)
    assert sm.stream_pools > 0 and sm.allocator_cached >= sm.stream_pools
    raw = case.scenario.model_dump()
    raw["training"]["framework"] = "torch"  # FSDP2 of torch >= 2.5: only the all-gather pool's second unit
    sm2 = memory.stage_memory(build_scenario(raw), 0)
    assert sm2.total == pytest.approx(sm.total, rel=0.05) and 0 < sm2.stream_pools < sm.stream_pools


def test_predict_states_the_pool_bytes():
    """predict names the side-stream pools' bytes among its memory assumptions, and they are in the reserved
    figure beyond the allocated peak."""
    from trainsim.cost_models import memory
    from trainsim.simulator.predict import predict
    from trainsim.validation.memory_runs import load_memory
    case = next(c for c in load_memory().cases if c.row_id == "tt165_fsdp1_ac_resv")
    pred = predict(case.scenario)
    pools = memory.stage_memory(case.scenario, 0).stream_pools
    assert pred.memory_assumptions["fsdp_stream_pool_bytes"] == pools > 0
    assert pred.peak_reserved_bytes - pred.peak_allocated_bytes >= pools
