"""Measurements of a real step: saved-for-backward activation bytes, parameter/gradient/optimizer bytes, timing.

Saved activations are counted with ``torch.autograd.graph.saved_tensors_hooks``: each saved tensor's
storage is counted once (dedup by ``untyped_storage().data_ptr()``, ``nbytes()`` summed) and storages
of parameters are excluded — byte-exact, where a naive sum of saved tensors over-counts (notes).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any, Self

import torch
from torch import nn


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The rank-local data of a DTensor (TP/FSDP2 shard) or of a functional collective's pending result
    (AsyncCollectiveTensor, whose own storage is not accessible), or the tensor itself."""
    inner = getattr(t, "_local_tensor", None)
    t = inner if inner is not None else t
    while type(t).__name__ == "AsyncCollectiveTensor" and isinstance(getattr(t, "elem", None), torch.Tensor):
        t = t.elem
    return t


def tensor_bytes(t: torch.Tensor | None) -> int:
    if t is None:
        return 0
    loc = local_tensor(t)
    return loc.numel() * loc.element_size()


def unique_params(modules: Iterable[nn.Module]) -> list[torch.Tensor]:
    seen: set[int] = set()
    out = []
    for m in modules:
        for p in m.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def state_bytes(modules: list[nn.Module], optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Rank-local bytes of parameters, gradients and optimizer states (the scalar ``step`` counters excluded)."""
    params = unique_params(modules)
    opt = 0
    for state in optimizer.state.values():
        for key, value in state.items():
            if key != "step" and isinstance(value, torch.Tensor):
                opt += tensor_bytes(value)
    return {"params": sum(tensor_bytes(p) for p in params),
            "grads": sum(tensor_bytes(p.grad) for p in params),
            "optimizer": opt,
            "num_params_local": sum(local_tensor(p).numel() for p in params)}


def _storage_ptr(t: torch.Tensor) -> int:
    """Address of a tensor's storage; 0 for storages FSDP2 has freed (resized to zero bytes)."""
    try:
        return t.untyped_storage().data_ptr()
    except RuntimeError:
        return 0


class _Held:
    """Wraps one saved tensor; when autograd drops it, the meter's live byte count goes down."""

    __slots__ = ("meter", "ptr", "tensor")

    def __init__(self, tensor: torch.Tensor, meter: SavedActivationMeter, key: object):
        self.tensor, self.meter, self.ptr = tensor, meter, key

    def __del__(self):
        self.meter._release(self.ptr)


class SavedActivationMeter:
    """Counts bytes saved for backward per forward call of each chunk (one micro-batch) and their live peak.

    A chunk's forward pre-hook opens a window that stays open until the next chunk forward, so the loss
    computed right after the last chunk is counted with it. Saves during backward (recompute) are ignored.
    """

    def __init__(self, chunks: list[nn.Module], inputs: Iterable[torch.Tensor] = ()):
        self.chunks = chunks
        # Token ids / targets are views of the step's batch; count each micro-batch's own bytes, as a data
        # loader handing out one tensor per micro-batch would keep alive, not the whole batch storage.
        self.input_ptrs = {_storage_ptr(local_tensor(t)) for t in inputs}
        self.windows: list[list[dict[object, tuple[int, str]]]] = [[] for _ in chunks]
        self.current: dict[object, tuple[int, str]] | None = None
        self.live: dict[object, list[int]] = {}
        self.live_bytes = 0
        self.peak_live_bytes = 0
        self._handles: list[Any] = []
        self._hooks = None

    def _param_ptrs(self) -> set[int]:
        return {_storage_ptr(local_tensor(p)) for p in unique_params(self.chunks)}

    def _pack(self, t: torch.Tensor):
        if torch._C._current_graph_task_id() != -1:  # inside backward (e.g. a checkpoint recompute)
            return t
        loc = local_tensor(t)
        storage = loc.untyped_storage()
        ptr, nbytes = _storage_ptr(loc), storage.nbytes()
        if nbytes == 0 or ptr == 0 or ptr in self._param_ptrs():
            return t
        key: object = ptr
        if ptr in self.input_ptrs:
            key = (ptr, loc.storage_offset(), loc.numel())
            nbytes = loc.numel() * loc.element_size()
        if self.current is not None:
            self.current[key] = (nbytes, str(loc.dtype).replace("torch.", ""))
        entry = self.live.get(key)
        if entry is None:
            self.live[key] = [nbytes, 1]
            self.live_bytes += nbytes
            self.peak_live_bytes = max(self.peak_live_bytes, self.live_bytes)
        else:
            entry[1] += 1
        return _Held(t, self, key)

    @staticmethod
    def _unpack(held):
        return held.tensor if isinstance(held, _Held) else held

    def _release(self, key: object) -> None:
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.live_bytes -= entry[0]
            del self.live[key]

    def __enter__(self) -> Self:
        for i, chunk in enumerate(self.chunks):
            self._handles.append(chunk.register_forward_pre_hook(self._opener(i)))
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self.current = None

    def _opener(self, index: int):
        def hook(module, args):
            self.current = {}
            self.windows[index].append(self.current)
        return hook

    def per_chunk_bytes(self) -> list[int]:
        """Median over micro-batches of the deduplicated bytes saved by one forward of each chunk."""
        return [int(statistics.median(sum(n for n, _ in w.values()) for w in ws)) if ws else 0
                for ws in self.windows]

    def per_chunk_by_dtype(self) -> list[dict[str, int]]:
        out = []
        for ws in self.windows:
            by: dict[str, int] = {}
            if ws:
                for nbytes, dtype in ws[0].values():
                    by[dtype] = by.get(dtype, 0) + nbytes
            out.append(by)
        return out

    def summary(self) -> dict[str, Any]:
        chunks = self.per_chunk_bytes()
        return {"saved_per_microbatch_bytes": sum(chunks), "saved_per_chunk_bytes": chunks,
                "saved_by_dtype": self.per_chunk_by_dtype(), "peak_saved_bytes": self.peak_live_bytes,
                "forward_calls": [len(ws) for ws in self.windows]}


def timing_stats(times_s: list[float]) -> dict[str, float]:
    """median, min, p99 (nearest rank) and mean of step times."""
    if not times_s:
        return {"median_s": 0.0, "min_s": 0.0, "p99_s": 0.0, "mean_s": 0.0, "n": 0}
    ordered = sorted(times_s)
    rank = max(0, min(len(ordered) - 1, int(-(-0.99 * len(ordered) // 1)) - 1))
    return {"median_s": statistics.median(ordered), "min_s": ordered[0], "p99_s": ordered[rank],
            "mean_s": statistics.fmean(ordered), "n": len(ordered)}
