"""The Muon optimizer's step as Megatron-Core runs it: which parameters it orthogonalises, the Newton-Schulz GEMMs
and element-wise passes per parameter, the state bytes it keeps, and how its LayerWise distributed optimizer splits
the work over data-parallel ranks. Pure.

Sources (NVIDIA/Megatron-LM @ d98e8a64, NVIDIA-NeMo/Emerging-Optimizers @ fd772926, NVIDIA-NeMo/Megatron-Bridge
@ 067f987d):

* Which parameters: ``emerging_optimizers.py`` routes to Adam every parameter that is not 2D or is flagged
  ``is_embedding_or_output_parameter`` (``_is_nonlinear_or_embedding``; language_module.py flags the word
  embedding, its MTP copy and the output layer). So the attention projections, each MLP's fc1 (gate and up in
  one matrix) and fc2, each expert's ``weight{i}`` (TEGroupedMLP keeps one 2D weight per expert), the router
  and learned position embeddings take Muon; norms, biases, the word embedding and the output layer take AdamW.
  A fused ``linear_qkv`` is orthogonalised as its q, k and v parts (``muon_split_qkv`` defaults to True; MLA's
  projections are not split).
* Newton-Schulz (emerging_optimizers/orthogonalized_optimizers/muon_utils.py ``newton_schulz``): the momentum is
  transposed so that the iteration runs on the short side (X is m x n, m <= n), normalised, cast to bf16
  (``fp32_matmul_prec`` "medium", the default) and iterated ``steps`` times (``muon_num_ns_steps`` 5; the quintic
  coefficients of Keller Jordan's Muon, modded-nanogpt) as ``A = X Xᵀ`` (2·m²·n), ``B = b·A + c·A·A`` (2·m³),
  ``X = a·X + B·X`` (2·m²·n). ``muon_tp_mode`` "blockwise" (Megatron-Bridge's recipes) orthogonalises a
  TP-sharded matrix as its local shard, without a collective; "duplicated" (Megatron-LM's default;
  ``newton_schulz_tp``) all-gathers the fp32 momentum over the TP group (the expert-TP group for an expert's) and
  iterates the whole matrix on every TP rank, one blocking all-gather per matrix (q, k and v apart).
* Element-wise passes per Muon parameter (orthogonalized_optimizer.py ``step``; fp32 main parameter p, gradient g
  and momentum buffer): decoupled weight decay ``p.add_(p, alpha=-lr·wd)`` (mixin.py; p read once from HBM and
  written, 8 B), ``momentum.lerp_(g)`` (12 B), Nesterov ``g.lerp(momentum)`` (12 B), the Frobenius normalisation
  (a norm read and a divide, 12 B), the casts to and from bf16 around the iteration (6 + 6 B), the two scale
  multiplies (16 B), ``p.add_`` (12 B); and
  Float16OptimizerWithFloat16Params' copy of the main parameter into the 16-bit model parameter (4 + 2 B) and of
  a 16-bit main gradient into fp32 (2 + 4 B). One kernel each, one parameter at a time.
* State: the fp32 main parameter and one fp32 momentum buffer per Muon parameter; the fp32 main parameter and
  Adam's m, v for the rest (the Kimi K2 recipe keeps all of them in fp32: ``_apply_kimi_k2_optimizer``).
* Split over ranks: ``dist_muon`` is the LayerWiseDistributedOptimizer (layer_wise_optimizer.py). The Kimi K2
  recipe leaves DDP without ``use_distributed_optimizer``, so the legacy path runs: DDP all-reduces the
  gradients, ``_shard_params_ping_pong`` sorts every parameter by size and deals them out whole in ping-pong
  order over the data-parallel ranks (experts over the expert-data-parallel ranks), each rank updates its own
  and ``allgather_params`` gathers the updated parameters. Moonlight's distributed Muon (Liu et al. 2025,
  "Muon is Scalable for LLM Training", arXiv:2502.16982, Sec. 2.3) instead gathers ZeRO-1 shards into full
  matrices per rank; Megatron-Core's whole-parameter split needs no such gather.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainsim.specs.memo import IdentityMemo
from trainsim.topologies.placement import place

from .collectives import collective_time
from .param_tensors import ParamTensor, module_style, rank_tensors

if TYPE_CHECKING:
    from collections.abc import Callable

    from trainsim.specs import ModelSpec, Scenario, TrainingSpec

    from .compute import _Hw
    from .profile import CalibrationProfile

# Bytes per Muon parameter of the element-wise passes (module doc), beside the gradient's cast and the 16-bit copy.
MUON_ELEMENTWISE_BYTES = 8 + 12 + 12 + 12 + 6 + 6 + 16 + 12
# The passes newton_schulz makes over its whole input (the normalisation 12 B, the casts 6 + 6 B): in the duplicated
# TP mode over the gathered matrix, so (tp - 1) / tp of those bytes come on top of the shard's.
GATHERED_PASS_BYTES = 12 + 6 + 6
# Element-wise kernels per Muon parameter: decay, two lerps, norm, divide, two casts, two scales, add, copy.
MUON_ELEMENTWISE_KERNELS = 11
FP32 = 4
# Adam's fp32 m and v; Muon's fp32 momentum buffer.
ADAM_MOMENTS_BYTES = 8
MUON_MOMENTUM_BYTES = 4


def ns_flops(rows: float, cols: float, steps: int) -> float:
    """Newton-Schulz FLOPs of one (rows x cols) matrix: per iteration 4·m²·n + 2·m³ with m the shorter side."""
    m, n = min(rows, cols), max(rows, cols)
    return steps * (4.0 * m * m * n + 2.0 * m ** 3)


def ns_gemms(rows: float, cols: float) -> tuple[tuple[int, int, int], ...]:
    """The (m, n, k) GEMMs of one iteration, output m x n: X Xᵀ, A·A, B·X (m the shorter side)."""
    m, n = round(min(rows, cols)), round(max(rows, cols))
    return (m, m, n), (m, m, m), (m, n, m)


def is_muon_param(t: ParamTensor) -> bool:
    """Whether Megatron-Core updates ``t`` with Muon: a matrix that is neither the word embedding nor the output
    layer (``_is_muon_excluded``)."""
    return t.shape is not None and t.kind not in ("embedding", "head")


def muon_matrices(t: ParamTensor, model: ModelSpec, style: str,
                  gather: int = 1) -> tuple[tuple[float, float], ...]:
    """The matrices Newton-Schulz runs on for ``t`` (none for an AdamW parameter): its local shard, or with
    ``gather`` > 1 (duplicated TP mode) the whole matrix its TP group's ``gather`` shards make; a fused linear_qkv's
    q, k and v rows apart (``TensorParallelMuon.orthogonalize`` with ``split_qkv``)."""
    if not is_muon_param(t):
        return ()
    rows, cols = t.shape
    if gather > 1 and t.split_dim is not None:
        rows, cols = (rows * gather, cols) if t.split_dim == 0 else (rows, cols * gather)
    if style == "fused" and t.name.endswith("linear_qkv.weight") and not model.is_mla:
        q, kv = model.num_heads * model.dhead, model.kv_heads * model.dhead
        return tuple((rows * part / (q + 2 * kv), cols) for part in (q, kv, kv))
    return ((rows, cols),)


def state_bytes(is_muon: bool, master: bool) -> int:
    """Optimizer-state bytes of one parameter: fp32 main (with a 16-bit model copy) + Muon's momentum or Adam's
    m and v."""
    return (FP32 if master else 0) + (MUON_MOMENTUM_BYTES if is_muon else ADAM_MOMENTS_BYTES)


def rank_state_bytes_per_param(scenario: Scenario, stage: int) -> float:
    """Mean optimizer-state bytes per parameter on a rank of ``stage``: Muon's on its matrices, Adam's on the rest,
    weighted by their elements."""
    t = scenario.training
    master = t.param_bytes < FP32
    tensors = rank_tensors(scenario, stage)
    total = sum(x.elems for x in tensors)
    if not total:
        return float(state_bytes(True, master))
    return sum(x.elems * state_bytes(is_muon_param(x), master) for x in tensors) / total


def model_state_bytes_per_param(scenario: Scenario) -> float:
    """Mean optimizer-state bytes per parameter of the whole model (a checkpoint's): the stages' rank means,
    weighted by the elements a rank of each holds (every TP/EP rank of a stage holds the same kinds)."""
    per_stage = [(sum(x.elems for x in rank_tensors(scenario, s)), rank_state_bytes_per_param(scenario, s))
                 for s in range(scenario.layout.pp)]
    total = sum(n for n, _ in per_stage)
    return sum(n * b for n, b in per_stage) / total if total else float(state_bytes(True, True))


@dataclass(frozen=True)
class Shard:
    """The parameters one data-parallel rank updates: Newton-Schulz matrices, Muon and AdamW elements and
    parameter tensors, and the duplicated TP mode's all-gathers (bytes of each gathered fp32 matrix)."""

    matrices: tuple[tuple[float, float], ...] = ()
    muon_elems: float = 0.0
    adam_elems: float = 0.0
    muon_tensors: int = 0
    gathers: tuple[float, ...] = ()
    gather_ways: int = 1


def _ping_pong(tensors: list[ParamTensor], n: int) -> list[list[ParamTensor]]:
    """``_shard_params_ping_pong``: sorted by size, dealt out 0..n-1 then n-1..0, repeatedly."""
    loop = list(range(n)) + list(range(n))[::-1]
    out: list[list[ParamTensor]] = [[] for _ in range(n)]
    for i, t in enumerate(sorted(tensors, key=lambda x: x.elems)):
        out[loop[i % len(loop)]].append(t)
    return out


def _shard(tensors: list[ParamTensor], model, style: str, gather: int) -> Shard:
    muon = [t for t in tensors if is_muon_param(t)]
    mats = [(t, muon_matrices(t, model, style, gather)) for t in muon]
    gathered = tuple(r * c * FP32 for t, ms in mats if gather > 1 and t.split_dim is not None for r, c in ms)
    return Shard(tuple(m for _, ms in mats for m in ms), sum(t.elems for t in muon),
                 sum(t.elems for t in tensors if not is_muon_param(t)), len(muon), gathered, gather)


def _rank_shards(scenario, stage: int) -> tuple[tuple[Shard, ...], tuple[Shard, ...]]:
    from .memory import shard_groups  # memory imports this module's state bytes through model_states

    tensors = list(rank_tensors(scenario, stage))
    model, style = scenario.model, module_style(scenario.training.framework)
    n_dense, n_exp = shard_groups(scenario) if scenario.training.effective_zero >= 1 else (1, 1)
    duplicated = scenario.training.muon_tp_mode == "duplicated"
    parts = []
    for expert, n in ((False, n_dense), (True, n_exp)):
        gather = (scenario.expert_tp if expert else scenario.layout.tp) if duplicated else 1
        mine = [t for t in tensors if t.expert == expert]
        parts.append(tuple(_shard(s, model, style, gather) for s in _ping_pong(mine, max(1, round(n)))))
    return parts[0], parts[1]


_RANK_SHARDS = IdentityMemo(_rank_shards)


def rank_shards(scenario: Scenario, stage: int) -> tuple[tuple[Shard, ...], tuple[Shard, ...]]:
    """(dense shards, expert shards): what each data-parallel rank of ``stage`` updates. With the distributed
    optimizer (dist_muon) the dense parameters are dealt over the data x context-parallel ranks and the expert
    ones over the expert-data-parallel ranks (memory.shard_groups); without it every rank updates all. Memoised
    per Scenario object and stage (specs/memo.py): the step's device time and its host launches read the same
    shards."""
    return _RANK_SHARDS(scenario, stage)


def muon_bytes_per_param(training: TrainingSpec) -> float:
    """HBM bytes per Muon parameter of its element-wise passes, the gradient's cast to fp32 and the 16-bit copy."""
    g = training.grad_bytes
    return MUON_ELEMENTWISE_BYTES + (g + FP32 if g < FP32 else 0) + FP32 + training.param_bytes


def adam_bytes_per_param(training: TrainingSpec) -> float:
    """HBM bytes per AdamW parameter of the fused update (fp32 main, m, v read and written, the gradient read, the
    16-bit weight written), as compute.optimizer_step_parts costs Adam."""
    return 2 * state_bytes(False, training.param_bytes < FP32) + training.grad_bytes + training.param_bytes


def shard_seconds(shard: Shard, training: TrainingSpec, steps: int, hw: _Hw,
                  profile: CalibrationProfile | None = None,
                  gather_s: Callable[[float], float] | None = None) -> float:
    """Seconds of one rank's update of ``shard``: the Newton-Schulz GEMMs in bf16 (three per iteration), the Muon
    parameters' element-wise kernels, the AdamW parameters' fused update and, in the duplicated TP mode, the
    blocking all-gathers (``gather_s``: seconds of one all-gather of that many bytes)."""
    from .compute import gemm_time_s, memory_time_s  # cycle: compute imports this module

    per_matrix: dict[tuple[float, float], float] = {}
    ns = 0.0
    for rows, cols in shard.matrices:
        key = (rows, cols)
        if key not in per_matrix:
            per_matrix[key] = steps * sum(gemm_time_s(m, n, k, hw, profile=profile, dtype="bf16")
                                          for m, n, k in ns_gemms(rows, cols))
        ns += per_matrix[key]
    nbytes = shard.muon_elems * muon_bytes_per_param(training) + shard.adam_elems * adam_bytes_per_param(training)
    launches = shard.muon_tensors * (MUON_ELEMENTWISE_KERNELS - 1) * hw.overhead_s
    gathers = sum(gather_s(b) for b in shard.gathers) if gather_s is not None else 0.0
    nbytes += sum(shard.gathers) / FP32 * GATHERED_PASS_BYTES * (1.0 - 1.0 / shard.gather_ways)
    return ns + (memory_time_s(nbytes, hw, profile, "copy") if nbytes else 0.0) + launches + gathers


def shard_launches(shard: Shard, steps: int) -> int:
    """Kernels the host issues for a shard's Muon parameters, one parameter at a time: the element-wise ones and
    three GEMMs per iteration of each matrix."""
    return shard.muon_tensors * MUON_ELEMENTWISE_KERNELS + 3 * steps * len(shard.matrices) + len(shard.gathers)


def busiest_launches(scenario: Scenario, stage: int) -> int:
    """shard_launches of the busiest dense and expert shards of ``stage`` together (as step_seconds)."""
    steps = scenario.training.muon_ns_steps
    return sum(max((shard_launches(s, steps) for s in group), default=0) for group in rank_shards(scenario, stage))


def step_seconds(scenario: Scenario, stage: int, profile: CalibrationProfile | None = None) -> float:
    """Device seconds of the Muon step on the busiest rank of ``stage``: its dense shard's and its expert shard's
    update (the most loaded of each group together: exact where either group is one rank, an upper bound
    otherwise). The updated parameters' all-gather follows on every rank, so the slowest rank sets the pace."""
    from .compute import hw_of  # cycle: compute imports this module

    t = scenario.training
    hw = hw_of(scenario.cluster.gpu, "bf16")  # the iteration runs in bf16 whatever the training dtype
    dense, expert = rank_shards(scenario, stage)
    gathers = _tp_gather_seconds(scenario, profile)
    return sum(max((shard_seconds(s, t, t.muon_ns_steps, hw, profile, g) for s in group), default=0.0)
               for group, g in zip((dense, expert), gathers))


def _tp_gather_seconds(scenario, profile=None) -> tuple:
    """(dense, expert) functions of the all-gather seconds of a gathered fp32 matrix's bytes over the TP and the
    expert-TP group in the duplicated TP mode (None where nothing is gathered)."""
    if scenario.training.muon_tp_mode != "duplicated":
        return None, None
    pl = place(scenario)
    groups = (pl.group("tp") if scenario.layout.tp > 1 else None,
              pl.expert_tp_group() if scenario.expert_tp > 1 else None)

    def seconds_over(group):
        if group is None:
            return None
        return lambda nbytes: float(collective_time("all_gather", nbytes, group, scenario.cluster,
                                                    profile=profile).time_s)
    return tuple(seconds_over(g) for g in groups)
