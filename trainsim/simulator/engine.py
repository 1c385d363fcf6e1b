"""The discrete-event engine (simpy): one optimizer step of one data-parallel replica's pipeline.

Symmetry: DP replicas, TP peers and CP peers do identical work, so one GPU per pipeline stage is simulated;
DP size enters only through the collective times in the CostTable. Per stage the engine runs

* a compute stream: the schedule's ops in order (one event per op = one model chunk for one micro-batch),
  each waiting for its input from the neighbouring stage. Exposed TP/CP/EP communication is part of the op
  (Megatron issues TP collectives on the compute stream and waits for them; see ChunkCost);
* a pipeline stream: activation / gradient messages to the neighbour stages, asynchronous to compute
  (Megatron's overlapped p2p), sharing the stage's links with other traffic; with
  ``CostTable.blocking_p2p`` the compute stream waits for each of its sends (Megatron's batched,
  synchronized p2p: 1F1B, or any schedule without --overlap-p2p-communication); with ``CostTable.batched_p2p``
  the interleaved schedule's steady-state forward and backward send their outputs together after both and start
  once both inputs are in (Megatron's one exchange per iteration, schedules.batched_pairs);
* a data-parallel stream: gradient buckets issued in order as backward produces them (once per step, or
  every micro-batch for ZeRO-2/3), or all after the backward pass when ``overlap_grad_reduce`` is off; the step ends with the optimizer step and ZeRO-1/2 parameter
  all-gathers;
* a parameter-gather stream (ZeRO-3/FSDP): each op's parameters are all-gathered one op ahead, layer by
  layer (the op starts after its first layer's parameters and ends no earlier than the last layer's).

Links are shared max-min fairly by `flows.FluidNetwork`. Compute that runs while a bulk collective of
its own GPU is in flight is slowed by ``CostTable.comm_compute_slowdown`` (NCCL kernels occupy SMs,
see COMM_COMPUTE_SLOWDOWN); the overlap is judged when the op starts, from the collectives then in
flight and their current rates (a collective that starts mid-op slows the next op, not this one). Memory is tracked over time: a forward allocates its chunk's activations, its
backward frees them (a split backward keeps ``w_retained_bytes`` until W), so peak memory follows the
schedule.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import simpy

from trainsim.specs.scenario import virtual_stage

from .costtable import COMM_DIMS, CostTable, Transfer
from .flows import FluidNetwork
from .schedules import BW, KIND_NAMES, B, F, W, build_schedule, schedule_with_pairs, stage_of

if TYPE_CHECKING:
    from .fold import FoldInfo

# Compute slows while a bulk NCCL collective of the same GPU is in flight: NCCL runs one CTA per channel,
# each CTA holds a whole SM that compute kernels cannot share, and a DGX with 8 NICs uses 16 SMs for
# inter-node collectives (NCCL maintainer, NVIDIA/nccl#689); NCCL kernels also compete for HBM bandwidth
# (NVIDIA/nccl#1433). The builder uses NCCL_COLLECTIVE_SMS / num_sms of the GPU (16/132 = 12 % on H100,
# 16/108 = 15 % on A100); COMM_COMPUTE_SLOWDOWN is the fallback for GPUs without an SM count.
NCCL_COLLECTIVE_SMS = 16
COMM_COMPUTE_SLOWDOWN = 0.12


class _Counting(simpy.Environment):
    """simpy Environment that counts its steps (the engine's cost measure: the events processed, plus the
    step that finds the schedule empty)."""

    def __init__(self) -> None:
        super().__init__()
        self.events = 0

    def run_counted(self) -> None:
        """``run()`` until no event is left, counting steps in a local (no extra call per event)."""
        step, n = self.step, 0
        try:
            while True:
                n += 1
                step()
        except simpy.core.EmptySchedule:
            pass
        finally:
            self.events += n


@dataclass
class StageTimeline:
    """What one stage's GPU did during the step (seconds, bytes)."""

    compute_s: float = 0.0            # op compute (fwd/bwd/recompute), incl. slowdown from overlapped comm
    slowdown_s: float = 0.0           # of compute_s: extra time from concurrent bulk communication
    exposed_s: dict[str, float] = field(default_factory=lambda: {d: 0.0 for d in COMM_DIMS})
    bubble_s: float = 0.0             # idle within the pipeline span, not explained by communication
    gather_wait_s: float = 0.0        # of exposed dp: waiting for ZeRO-3 parameter gathers mid-pipeline
    dp_inline_s: float = 0.0          # of exposed dp: DP collectives run on the compute stream (ChunkCost.dp_*)
    pipeline_end_s: float = 0.0       # end of its last compute op
    dp_tail_s: float = 0.0            # from pipeline end until its gradient reduction finished
    optimizer_s: float = 0.0
    post_step_s: float = 0.0
    end_s: float = 0.0
    act_peak_bytes: float = 0.0       # activation bytes at the moment of peak
    transient_peak_bytes: float = 0.0  # other transient bytes (gathered params, backward scratch) then
    ops: int = 0


@dataclass
class EngineResult:
    """Timeline summary of one simulated step."""

    step_time_s: float
    stages: list[StageTimeline]
    events: int
    wall_s: float
    pipeline_span_s: float
    trace: list[tuple] | None = None       # (stage, stream, name, start_s, dur_s, args) if recorded
    memory_trace: list[tuple] | None = None  # (stage, t_s, bytes) if recorded
    folded: FoldInfo | None = None          # set when the steady state was folded (fold.simulate_step)

    @property
    def critical_stage(self) -> int:
        return max(range(len(self.stages)), key=lambda s: (self.stages[s].end_s, -s))


@dataclass
class _StageRun:
    """One stage's compute-stream state during a step: its ops, noise scales, weight-gradient passes done
    per chunk, ZeRO-3 gathers in flight, and the sends a fused pair defers to its end."""

    s: int
    st: object                       # the stage's StageCost
    tl: StageTimeline
    ops: list
    heads: set
    scale_s: float
    op_scale: list | None
    weight_done: list[int]
    gather_bytes: list[float]
    split_gather: dict
    gathers: dict = field(default_factory=dict)   # op -> (first layer's gather event, rest's or None)
    deferred: list = field(default_factory=list)  # (direction, mb, destination vstage)


def _split_gathers(st) -> dict:
    """Each chunk's ZeRO-3 gather as (first layer's, the rest's or None): gathers go layer by layer (FSDP wraps
    each block), so an op may start once its first layer's parameters are in and cannot finish before the
    rest have arrived. The builder's latency_s is that of all the chunk's gather calls: split like the bytes."""
    split_gather = {}
    for ci, ch in enumerate(st.chunks):
        pg = ch.param_gather
        if pg is not None and ch.layers > 1:
            f1 = 1.0 / ch.layers
            split_gather[ci] = (replace(pg, transfer_s=pg.transfer_s * f1, latency_s=pg.latency_s * f1,
                                        nbytes=pg.nbytes * f1),
                                replace(pg, name=pg.name + " (rest)", transfer_s=pg.transfer_s * (1 - f1),
                                        latency_s=pg.latency_s * (1 - f1), nbytes=pg.nbytes * (1 - f1)))
        elif pg is not None:
            split_gather[ci] = (pg, None)
    return split_gather


def _account(tl: StageTimeline, comp: float, extra: float, comm: tuple) -> None:
    """Add one op's compute, slowdown and exposed (tp, cp, ep, dp) communication to its stage's timeline."""
    tl.compute_s += comp + extra
    tl.slowdown_s += extra
    tl.exposed_s["tp"] += comm[0]
    tl.exposed_s["cp"] += comm[1]
    tl.exposed_s["ep"] += comm[2]
    tl.exposed_s["dp"] += comm[3]
    tl.dp_inline_s += comm[3]
    tl.ops += 1


class _Engine:
    def __init__(self, table: CostTable, record: bool, op_scale: list[list[float]] | None,
                 stage_scale: list[float] | None):
        self.t = table
        self.p = table.pp
        self.v = table.vpp
        self.m = table.num_microbatches
        self.env = _Counting()
        self.net = FluidNetwork(self.env)
        self.vstage = [[virtual_stage(table.schedule, self.p, s, c) for c in range(self.v)] for s in range(self.p)]
        # DualPipeV's V: a message goes to whichever neighbour holds the destination virtual stage (or stays on
        # the GPU at the bottom of the V); other schedules send activations forward and gradients backward.
        self.by_destination = table.schedule == "dualpipev"
        # Op i of a stage in heads[s] runs fused with op i+1 (DualPipeV's overlapped F&B; Megatron's batched
        # steady-state exchange of the interleaved schedule with blocking p2p, schedules.batched_pairs): the pair
        # starts when both inputs are in, and both outputs are sent when the pair ends.
        self.ops, self.heads = schedule_with_pairs(table.schedule, self.p, self.m, self.v,
                                                   batched_p2p=table.batched_p2p)
        self.record = record
        self.trace: list[tuple] | None = [] if record else None
        self.mem_trace: list[tuple] | None = [] if record else None
        self.op_scale = op_scale
        self.stage_scale = stage_scale or [1.0] * self.p
        self.tl = [StageTimeline() for _ in range(self.p)]
        n_msgs = 2 * self.m * self.p * self.v
        self.arrival: list[float | None] = [None] * n_msgs
        self.sent_at: list[float] = [0.0] * n_msgs
        self.waiters: dict[int, simpy.Event] = {}
        # Data-parallel streams per stage, FIFO of (transfer, callback): gradient reduction (and the ZeRO-1/2
        # post-step all-gather) on one, ZeRO-3 parameter all-gathers on another (FSDP uses separate
        # all-gather and reduce-scatter streams); both share the stage's links.
        self.dp_queue = [simpy.Store(self.env) for _ in range(self.p)]
        self.ag_queue = [simpy.Store(self.env) for _ in range(self.p)]
        # HSDP: each reduce-scatter's follow-up all-reduce across the replicas (Transfer.then) on a third stream.
        self.ar_queue = [simpy.Store(self.env) for _ in range(self.p)]
        self.chained = any(bk.then is not None for st in table.stages for c in st.chunks for bk in c.grad_buckets)
        self.act = [0.0] * self.p
        self.transient = [0.0] * self.p
        self.mem_peak = [0.0] * self.p

    # -- messages between virtual stages -------------------------------------------------------------
    def _key(self, direction: int, mb: int, vs: int) -> int:
        return ((mb * self.p * self.v) + vs) * 2 + direction

    def _deliver(self, key: int) -> None:
        self.arrival[key] = self.env.now
        ev = self.waiters.pop(key, None)
        if ev is not None:
            ev.succeed()

    def _send(self, s: int, direction: int, mb: int, dst_vs: int) -> simpy.Event | None:
        """Start a pipeline message; returns an event that fires when it is delivered (None if instant)."""
        key = self._key(direction, mb, dst_vs)
        self.sent_at[key] = self.env.now
        st = self.t.stages[s]
        if self.by_destination:
            dst = stage_of(self.t.schedule, self.p, dst_vs)
            tr = None if dst == s else (st.send_fwd if dst == s + 1 else st.send_bwd)
        else:
            tr = st.send_fwd if direction == 0 else st.send_bwd
        if tr is None or tr.time_s <= 0:
            self._deliver(key)
            return None
        t0 = self.env.now
        sent = self.env.event()

        def done() -> None:
            if self.trace is not None:
                what = "send act" if direction == 0 else "send grad"
                self.trace.append((s, "pp", f"{what} mb{mb} -> vstage {dst_vs}", t0, self.env.now - t0,
                                   {"bytes": tr.nbytes, "alone_s": tr.time_s}))
            self._deliver(key)
            sent.succeed()

        self.net.start(tr, done, owner=s)
        return sent

    # -- memory ---------------------------------------------------------------------------------------
    def _mem(self, s: int, d_act: float, d_transient: float = 0.0) -> None:
        self.act[s] += d_act
        self.transient[s] += d_transient
        total = self.act[s] + self.transient[s]
        if total > self.mem_peak[s]:
            self.mem_peak[s] = total
            self.tl[s].act_peak_bytes = self.act[s]
            self.tl[s].transient_peak_bytes = self.transient[s]
        if self.mem_trace is not None:
            self.mem_trace.append((s, self.env.now, total))

    # -- data-parallel stream ---------------------------------------------------------------------------
    def _dp_stream(self, s: int, q: simpy.Store, stream: str):
        while True:
            tr, cb = yield q.get()
            if tr is None:           # barrier marker
                cb()
                continue
            ev = self.env.event()
            t0 = self.env.now
            self.net.start(tr, ev.succeed, owner=s)
            yield ev
            if self.trace is not None:
                self.trace.append((s, stream, tr.name, t0, self.env.now - t0, {"bytes": tr.nbytes, "alone_s": tr.time_s}))
            if tr.then is not None:
                self.ar_queue[s].put((tr.then, None))
            if cb is not None:
                cb()

    def _enqueue_dp(self, s: int, tr: Transfer, cb=None, delay: float = 0.0) -> None:
        if delay > 0:
            ev = self.env.timeout(delay)
            ev.callbacks.append(lambda _e: self.dp_queue[s].put((tr, cb)))
        else:
            self.dp_queue[s].put((tr, cb))

    def _comm_busy_s(self, s: int, mid_op: tuple[Transfer, ...] = ()) -> float:
        """Seconds of bulk communication of stage ``s`` that will overlap an op starting now.

        In flight (at current rates), plus what is already queued on its streams (a ZeRO-3 gather
        prefetched for this op starts as soon as the previous one ends) and the gradient buckets this op
        itself releases mid-way: what is in flight plus the longer of the two queues.
        """
        inflight = self.net.bulk_remaining_s(s)
        if not (mid_op or self.ag_queue[s].items or self.dp_queue[s].items or self.ar_queue[s].items):
            return inflight           # nothing queued (the common case): the sums below would all be 0
        gather = sum(tr.time_s for tr, _ in self.ag_queue[s].items if tr is not None and tr.bulk)
        reduce = sum(tr.time_s for tr, _ in self.dp_queue[s].items if tr is not None and tr.bulk)
        reduce += sum(tr.time_s for tr in mid_op if tr.bulk)
        replicate = sum(tr.time_s for tr, _ in self.ar_queue[s].items if tr is not None and tr.bulk)
        return inflight + max(gather, reduce, replicate)

    # -- one stage's compute stream ----------------------------------------------------------------------
    def _stage(self, s: int):
        """Stage ``s``'s compute stream: its schedule's ops in order, then the step's tail."""
        run = _StageRun(s=s, st=self.t.stages[s], tl=self.tl[s], ops=self.ops[s], heads=self.heads[s],
                        scale_s=self.stage_scale[s],
                        op_scale=self.op_scale[s] if self.op_scale is not None else None,
                        weight_done=[0] * self.v, gather_bytes=[0.0] * len(self.ops[s]),
                        split_gather=_split_gathers(self.t.stages[s]))
        if run.ops and self._needs_gather(run, 0):
            self._launch_gather(run, 0)
        for i in range(len(run.ops)):
            yield from self._op(run, i)
        yield from self._step_tail(run)

    def _needs_gather(self, run: _StageRun, i: int) -> bool:
        kind, _mb, c = run.ops[i]
        return kind != W and run.st.chunks[c].param_gather is not None

    def _launch_gather(self, run: _StageRun, i: int) -> None:
        """Queue op ``i``'s ZeRO-3 parameter gathers (first layer, then the rest) on the gather stream."""
        c = run.ops[i][2]
        chunk = run.st.chunks[c]
        head, tail = run.split_gather[c]
        ev_h = self.env.event()
        ev_t = self.env.event() if tail is not None else None
        run.gathers[i] = (ev_h, ev_t)
        run.gather_bytes[i] = chunk.param_gather_bytes
        self._mem(run.s, 0.0, chunk.param_gather_bytes)
        self.ag_queue[run.s].put((head, ev_h.succeed))
        if tail is not None:
            self.ag_queue[run.s].put((tail, ev_t.succeed))

    def _input_key(self, run: _StageRun, j: int) -> int | None:
        """Message op j waits for: activation from the previous virtual stage or gradient from the next."""
        kind_j, mb_j, c_j = run.ops[j]
        vs_j = self.vstage[run.s][c_j]
        if kind_j == F and vs_j > 0:
            return self._key(0, mb_j, vs_j)
        if kind_j in (B, BW) and vs_j < self.p * self.v - 1:
            return self._key(1, mb_j, vs_j)
        return None

    def _op(self, run: _StageRun, i: int):
        """Run op ``i``: wait for its inputs and parameters, compute, release memory and send its outputs."""
        kind, mb, c = run.ops[i]
        chunk = run.st.chunks[c]
        t_start, gtail = yield from self._op_start(run, i)
        comp, extra, comm = self._op_duration(run, i, kind, chunk)
        dur = comp + extra + comm[0] + comm[1] + comm[2] + comm[3]
        _account(run.tl, comp, extra, comm)
        buckets = self._weight_buckets(run, kind, chunk, c, dur)
        if dur > 0:
            yield self.env.timeout(dur)
        if gtail is not None and not gtail.processed:
            t_w = self.env.now
            yield gtail
            run.tl.gather_wait_s += self.env.now - t_w
            run.tl.exposed_s["dp"] += self.env.now - t_w
        if self.trace is not None:
            name = f"{KIND_NAMES[kind]} mb{mb} chunk{c}" + (f" ({chunk.label})" if chunk.label else "")
            self.trace.append((run.s, "compute", name, t_start, dur, {
                "compute_s": comp + extra, "tp_s": comm[0], "cp_s": comm[1], "ep_s": comm[2], "dp_s": comm[3],
                "slowdown_s": extra, "layers": chunk.layers, "vstage": self.vstage[run.s][c]}))
        if buckets:
            for bk in (buckets[-1:] if self.t.overlap_grad_reduce else buckets):
                self._enqueue_dp(run.s, bk, None)
        self._release(run, i, kind, chunk)
        yield from self._send_outputs(run, i, kind, mb, self.vstage[run.s][c])

    def _op_start(self, run: _StageRun, i: int):
        """Wait for op ``i``'s input messages (a fused pair: both ops') and its first layer's parameters,
        prefetching the next op's; charge the wait to pp or dp. Returns (start time, the gather tail event)."""
        env, tl = self.env, run.tl
        t_ready = env.now
        keys = [self._input_key(run, i)] + ([self._input_key(run, i + 1)] if i in run.heads else [])
        t_send = t_data = t_ready
        for key in keys:
            if key is None:
                continue
            if self.arrival[key] is None:
                ev = self.waiters.get(key)
                if ev is None:
                    ev = self.waiters[key] = env.event()
                yield ev
            if self.arrival[key] >= t_data:   # the later input decides the exposed wait
                t_send, t_data = self.sent_at[key], self.arrival[key]
        if i + 1 < len(run.ops) and self._needs_gather(run, i + 1):
            self._launch_gather(run, i + 1)       # prefetch one op ahead
        gev, gtail = run.gathers.pop(i, (None, None))
        if gev is not None and not gev.processed:
            yield gev
        t_start = env.now
        if t_start > t_ready:
            tl.exposed_s["pp"] += max(0.0, min(t_data, t_start) - max(t_send, t_ready))
            gw = max(0.0, t_start - max(t_data, t_ready))
            tl.gather_wait_s += gw
            tl.exposed_s["dp"] += gw
        return t_start, gtail

    def _op_duration(self, run: _StageRun, i: int, kind: int, chunk) -> tuple[float, float, tuple]:
        """(compute scaled by noise / straggler, its slowdown from concurrent bulk communication, exposed
        (tp, cp, ep, dp) communication on the compute stream) of op ``i``; allocates its activations."""
        s = run.s
        if kind == F:
            comp = chunk.fwd_s
            comm = (chunk.tp_fwd_s, chunk.cp_fwd_s, chunk.ep_fwd_s, chunk.dp_fwd_s)
            self._mem(s, chunk.act_bytes)
        elif kind == BW:
            comp = chunk.recompute_s + chunk.bwd_input_s + chunk.bwd_weight_s
            comm = (chunk.tp_bwd_s, chunk.cp_bwd_s, chunk.ep_bwd_s, chunk.dp_bwd_s)
            self._mem(s, 0.0, chunk.bwd_transient_bytes)
        elif kind == B:
            comp = chunk.recompute_s + chunk.bwd_input_s
            comm = (chunk.tp_bwd_s, chunk.cp_bwd_s, chunk.ep_bwd_s, chunk.dp_bwd_s)
            self._mem(s, 0.0, chunk.bwd_transient_bytes)
        else:
            comp = chunk.bwd_weight_s
            comm = (0.0, 0.0, 0.0, 0.0)
        scale = run.scale_s * (run.op_scale[i] if run.op_scale is not None else 1.0)
        comp *= scale
        extra = 0.0
        t = self.t
        if t.comm_compute_slowdown > 0:
            c = run.ops[i][2]
            releases = kind in (BW, W) and t.overlap_grad_reduce and (
                t.reduce_grads_every_microbatch or run.weight_done[c] + 1 == self.m)
            busy = self._comm_busy_s(s, chunk.grad_buckets[:-1] if releases else ())
            if busy > 0:
                extra = min(comp, busy) * t.comm_compute_slowdown
        return comp, extra, comm

    def _weight_buckets(self, run: _StageRun, kind: int, chunk, c: int, dur: float) -> tuple[Transfer, ...]:
        """DP buckets of chunk ``c`` become ready during its last weight-gradient pass (every pass for ZeRO-2/3):
        with overlap all but the last are queued when their gradients are produced (Transfer.ready_at, else at even
        points of the op); returns the buckets it releases."""
        buckets = ()
        if kind in (BW, W):
            per_mb, overlap = self.t.reduce_grads_every_microbatch, self.t.overlap_grad_reduce
            run.weight_done[c] += 1
            if per_mb or (overlap and run.weight_done[c] == self.m):
                buckets = chunk.grad_buckets
            nb = len(buckets)
            if overlap:
                for k in range(nb - 1):
                    at = buckets[k].ready_at
                    self._enqueue_dp(run.s, buckets[k], None, delay=dur * (at if at is not None else (k + 1) / nb))
        return buckets

    def _release(self, run: _StageRun, i: int, kind: int, chunk) -> None:
        """Memory an op frees at its end: a backward its chunk's activations (a split one keeps what W needs),
        W the retained inputs, every op its gathered parameters."""
        s = run.s
        if kind == BW:
            self._mem(s, -chunk.act_bytes, -chunk.bwd_transient_bytes)
        elif kind == B:
            self._mem(s, -(chunk.act_bytes - chunk.w_retained_bytes), -chunk.bwd_transient_bytes)
        elif kind == W:
            self._mem(s, -chunk.w_retained_bytes)
        if run.gather_bytes[i]:
            self._mem(s, 0.0, -run.gather_bytes[i])

    def _send_outputs(self, run: _StageRun, i: int, kind: int, mb: int, vs: int):
        """Send op ``i``'s output (activation forward, gradient backward); a fused pair's first op defers its
        send to the pair's end. With blocking p2p the compute stream waits for each send."""
        if kind == F and vs < self.p * self.v - 1:
            run.deferred.append((0, mb, vs + 1))
        elif kind in (B, BW) and vs > 0:
            run.deferred.append((1, mb, vs - 1))
        if i in run.heads:
            return                    # the pair's second op sends both outputs
        for direction, mb_s, dst_vs in run.deferred:
            sent = self._send(run.s, direction, mb_s, dst_vs)
            if sent is not None and self.t.blocking_p2p and not sent.processed:
                t_w = self.env.now         # the compute stream waits for its own send (torch.cuda.synchronize)
                yield sent
                run.tl.exposed_s["pp"] += self.env.now - t_w
        run.deferred.clear()

    def _step_tail(self, run: _StageRun):
        """After the stage's last op: gradient reduction (all of it when not overlapped), the optimizer step and
        ZeRO-1/2's parameter all-gather."""
        env, tl, st, s = self.env, run.tl, run.st, run.s
        tl.pipeline_end_s = env.now
        if not self.t.overlap_grad_reduce and not self.t.reduce_grads_every_microbatch:
            for chunk in st.chunks:    # reduce every chunk's gradients after the whole backward pass
                for bk in chunk.grad_buckets:
                    self._enqueue_dp(s, bk, None)
        # Wait for this stage's data-parallel stream to drain (the exposed tail of gradient reduction).
        done = env.event()
        self.dp_queue[s].put((None, done.succeed))
        yield done
        if self.chained:            # and HSDP's replica all-reduces queued behind the last reduce-scatters
            done = env.event()
            self.ar_queue[s].put((None, done.succeed))
            yield done
        tl.dp_tail_s = env.now - tl.pipeline_end_s
        tl.exposed_s["dp"] += tl.dp_tail_s
        if st.optimizer_s > 0:
            t0 = env.now
            yield env.timeout(st.optimizer_s * run.scale_s)
            tl.optimizer_s = env.now - t0
            if self.trace is not None:
                self.trace.append((s, "compute", "optimizer step", t0, tl.optimizer_s, {}))
        t0 = env.now
        for tr in st.post_step:
            ev = env.event()
            self._enqueue_dp(s, tr, ev.succeed)
            yield ev
        tl.post_step_s = env.now - t0
        tl.exposed_s["dp"] += tl.post_step_s
        tl.end_s = env.now

    def run(self) -> EngineResult:
        t0 = time.perf_counter()
        for s in range(self.p):
            self.env.process(self._dp_stream(s, self.dp_queue[s], "dp"))
            self.env.process(self._dp_stream(s, self.ag_queue[s], "dp-gather"))
            if self.chained:
                self.env.process(self._dp_stream(s, self.ar_queue[s], "dp-replicate"))
        procs = [self.env.process(self._stage(s)) for s in range(self.p)]
        self.env.run_counted()
        for s, pr in enumerate(procs):
            if not pr.triggered:
                raise RuntimeError(f"engine deadlock: stage {s} did not finish (schedule {self.t.schedule})")
        wall = time.perf_counter() - t0
        step = max(tl.end_s for tl in self.tl)
        span = max(tl.pipeline_end_s for tl in self.tl)
        set_bubbles(self.tl, span)
        return EngineResult(step_time_s=step, stages=self.tl, events=self.env.events, wall_s=wall,
                            pipeline_span_s=span, trace=self.trace, memory_trace=self.mem_trace)


def set_bubbles(stages: list[StageTimeline], span: float) -> None:
    """Each stage's bubble: idle time within the pipeline span not explained by communication."""
    for tl in stages:
        busy = tl.compute_s + tl.exposed_s["tp"] + tl.exposed_s["cp"] + tl.exposed_s["ep"] + tl.dp_inline_s
        tl.bubble_s = max(0.0, span - busy - tl.exposed_s["pp"] - tl.gather_wait_s)


def simulate(table: CostTable, *, record: bool = False, op_scale: list[list[float]] | None = None,
             stage_scale: list[float] | None = None) -> EngineResult:
    """Run one step of ``table`` through the engine. ``record`` keeps the timeline for a trace;
    ``op_scale[s][i]`` / ``stage_scale[s]`` multiply compute times (jitter, stragglers)."""
    if table.num_microbatches < 1:
        raise ValueError("num_microbatches must be >= 1")
    return _Engine(table, record, op_scale, stage_scale).run()


def schedule_ops(table: CostTable) -> list[list[tuple[int, int, int]]]:
    """The per-stage op lists the engine will run for ``table`` (for noise arrays and inspection)."""
    return build_schedule(table.schedule, table.pp, table.num_microbatches, table.vpp)
