"""The allocation trace of a torchtitan training step, recorded from torch itself under FakeTensorMode, for the
caching-allocator replay (cost_models/caching_allocator.py).

``Recorder`` is a dispatch mode that sees every op's outputs: each new storage is an allocation of its bytes, and
a ``weakref.finalize`` on the storage records its free at the moment Python drops the last reference -- the order
the CUDA caching allocator sees them on the stream that runs the step. Storages the recorder is told to skip
(parameters, buffers, the batch) are left out. Under FakeTensorMode nothing is allocated, so real widths run on a CPU in seconds.

``titan_step_events`` builds torchtitan's eager Llama (kernels/titan_block.py; the embedding, the final norm, the
output layer with ``.float()`` and ``F.cross_entropy``, the fp32 logits kept through the backward, as
torchtitan's train.py of March 2024) and records
``steps`` training steps on one rank of an FSDP run: each block under torch's non-reentrant checkpoint (full AC) or
with torchtitan's per-op selective policy (``_save_list``: mm, SDPA; every second mm of a block recomputed), every
parameter's gradient dropped as soon as it is accumulated (FSDP reduce-scatters and frees the unsharded gradient),
and Adam's two fp32 states of every parameter's 1/``shard`` piece created after the first backward (torch.optim's
lazy ``_init_group``) or before the first forward. Left out: FSDP's side-stream pools (fsdp_stream_pools.py), its
unsharded parameters (copied out on the compute stream by FSDP2, kept in the all-gather stream's pool by FSDP1),
the optimizer's foreach temporaries.
"""

from __future__ import annotations

import functools
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from .titan_block import RMSNorm, TitanBlock, block_forward

F = torch.nn.functional
# torchtitan's per-op selective checkpointing saves these ops' outputs (every second aten.mm of a block excepted):
# torchtitan/parallelisms/parallelize_llama.py ``_save_list`` of 2024 (read_file id 16980159914), with the CPU
# flash kernel FakeTensorMode dispatches to on this host.
SAVE_LIST = (torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_flash_attention.default,
             torch.ops.aten._scaled_dot_product_efficient_attention.default,
             torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default)


class Recorder(TorchDispatchMode):
    """Records ``("alloc", handle, bytes)`` and ``("free", handle)`` for every storage the ops create (module
    doc), and ``("mark", name)`` where ``mark`` is called."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple] = []
        self._live: dict[int, int] = {}
        self._skip: set[int] = set()

    def skip(self, t: torch.Tensor) -> None:
        """Leave ``t``'s storage out of the trace (a parameter)."""
        self._skip.add(id(t.untyped_storage()))

    def mark(self, name: str) -> None:
        self.events.append(("mark", name))

    def _track(self, t) -> None:
        if not isinstance(t, torch.Tensor):
            return
        st = t.untyped_storage()
        key = id(st)
        if key in self._live or key in self._skip or st.nbytes() == 0:
            return
        handle = len(self.events)
        self._live[key] = handle
        self.events.append(("alloc", handle, st.nbytes()))
        weakref.finalize(st, self._freed, key, handle)

    def _freed(self, key: int, handle: int) -> None:
        self._live.pop(key, None)
        self.events.append(("free", handle))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            self._track(t)
        return out


def _op_sac_policy():
    """torchtitan's per-op policy with its per-checkpoint mm counter (module doc)."""
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from torch.utils.checkpoint import CheckpointPolicy
    meta: dict[str, int] = {}

    def policy(ctx, func, *args, **kwargs):
        key = ("recompute" if ctx.is_recompute else "forward") + "_mm_count"
        if func == torch.ops.aten.mm.default:
            meta[key] = meta.get(key, 0) + 1
        save = func in SAVE_LIST and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE
    return policy


def _run_block(block, x, freqs_cis, recompute: str):
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts
    fn = functools.partial(block_forward, block)
    if recompute == "full":
        return checkpoint(fn, x, freqs_cis, use_reentrant=False)
    if recompute == "op_sac":
        return checkpoint(fn, x, freqs_cis, use_reentrant=False,
                          context_fn=lambda: create_selective_checkpoint_contexts(_op_sac_policy()))
    return fn(x, freqs_cis)


def _model(layers: int, h: int, a: int, kv: int, f: int, vocab: int):
    torch.set_default_dtype(torch.bfloat16)  # bf16 parameters, as FSDP's mixed-precision policy gathers them
    try:
        return (torch.nn.Embedding(vocab, h), [TitanBlock(h, a, kv, f) for _ in range(layers)], RMSNorm(h),
                torch.nn.Linear(h, vocab, bias=False))
    finally:
        torch.set_default_dtype(torch.float32)


def titan_step_events(*, layers: int, b: int, s: int, h: int, a: int, kv: int, f: int, vocab: int,
                      recompute: str = "none", shard: int = 1, lazy_states: bool = True,
                      steps: int = 2, logits_kept: bool = True) -> list[tuple]:
    """The recorded trace of ``steps`` steps (module doc); ``recompute`` one of none, full, op_sac; marks
    ``forward_end`` before each loss and ``step_end`` after each step. ``logits_kept=False``: torchtitan's loss
    of late 2024 instead -- the model returns its 16-bit logits, ``loss_fn`` runs ``F.cross_entropy`` on their
    fp32 copy, and train.py deletes them before the backward (``del pred``; pytorch/torchtitan 9dec370 train.py,
    the commit of its late-2024 benchmark, fetched mirror)."""
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from torch._subclasses.fake_tensor import FakeTensorMode
    if recompute not in ("none", "full", "op_sac"):
        raise ValueError(f"recompute: {recompute!r} is none of none, full, op_sac")
    with FakeTensorMode():
        emb, blocks, norm, out = _model(layers, h, a, kv, f, vocab)
        params = [*emb.parameters(), *(p for bl in blocks for p in bl.parameters()), *norm.parameters(),
                  *out.parameters()]
        d = h // a
        freqs = 1.0 / (10000.0 ** (torch.arange(0, d, 2).float() / d))
        freqs_cis = torch.polar(torch.ones(s, d // 2), torch.outer(torch.arange(s).float(), freqs))
        tokens, labels = torch.randint(0, vocab, (b, s)), torch.randint(0, vocab, (b, s))
        rec, states = Recorder(), []
        for t in (freqs_cis, tokens, labels):  # made before the step: a model buffer, the batch
            rec.skip(t)
        for p in params:
            rec.skip(p)
            p.register_post_accumulate_grad_hook(lambda p: setattr(p, "grad", None))

        def create_states():
            states.extend(torch.zeros(-(-p.numel() // shard)) for p in params for _ in range(2))
        with rec:
            if not lazy_states:
                create_states()
            for step in range(steps):
                x = emb(tokens)
                for bl in blocks:
                    x = _run_block(bl, x, freqs_cis, recompute)
                rec.mark("forward_end")
                if logits_kept:  # torchtitan of March 2024 keeps its fp32 logits through the backward
                    pred = out(norm(x)).float()
                    loss = F.cross_entropy(pred.flatten(0, 1), labels.flatten(0, 1))
                else:
                    pred = out(norm(x))
                    loss = F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
                    del pred
                del x
                loss.backward()
                if logits_kept:
                    del pred
                del loss
                if step == 0 and lazy_states:
                    create_states()
                rec.mark("step_end")
        return rec.events
