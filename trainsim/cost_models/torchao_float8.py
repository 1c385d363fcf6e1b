"""HBM bytes and collectives of torchao's float8 training (``Float8Linear``, dynamic scaling: tensorwise, rowwise,
rowwise_with_gw_hp), as torchtitan runs it (TrainingSpec.fp8_library torchao; specs/fp8_library.py).

Code read: pytorch/ao torchao/float8/float8_linear.py (``matmul_with_hp_or_float8_args``; at 0afa4c1, the
version of the Trainy H200 runs, and at 36027d8), float8_scaling_utils.py ``hp_tensor_to_float8_dynamic``
(``tensor_to_scale``, then ``hp_tensor_and_scale_to_float8``), float8_utils.py ``tensor_to_amax``
(``torch.max(torch.abs(x))``: a reduction over the whole tensor), float8_ops.py ``preprocess_addmm`` (the first
``_scaled_mm`` operand made row-major: ``a_data.contiguous()``; the second column-major:
``b_data.t().contiguous().t()``) and fsdp_utils.py (``WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather``,
``precompute_float8_dynamic_scale_for_fsdp``).

The passes costed are those of the graphs AOTAutograd's min-cut partitioner hands Inductor under torch.compile, which
torchtitan's float8 recipes pair with float8 (its converter warns without it; an eager run issues the same reductions,
casts and copies as separate kernels, the partitioner's moves aside). Those graphs, for
one compiled ``Float8Linear`` (torch 2.13, torchao 0.18, read on this project's CPU machine by printing the
forward and backward graphs of ``aot_autograd`` with ``min_cut_rematerialization_partition``), hold:

* X (the input): forward ``abs``/``max`` then the scaled cast to e4m3 for the forward GEMM; the partitioner moves
  the weight-gradient cast into the forward too -- a second ``abs``/``max`` of X, the cast and the
  ``t().clone()`` of preprocess_addmm -- and saves that 1-byte column-major copy instead of X.
* W (the weight): forward ``abs``/``max`` and the cast (its transpose view is already column-major); the amax is
  saved and the backward re-casts the 16-bit weight, ``t().clone()``'d to the column-major operand of dX.
* dY (the output gradient): one ``abs``/``max`` and one cast to e5m2, shared by dX and dW (the two identical casts
  of the autograd Function are one node); dW's first operand ``dY_fp8.t()`` is ``clone``'d row-major.

Byte counts assume each reduction is a kernel reading its tensor once, a chain of pointwise ops (cast, clamp,
transposing clone) one kernel reading its source once and writing its 1-byte result, and a 1-byte tensor an
extern GEMM reads (dY's cast) realized, so the clone after it reads 1 byte; no two passes are assumed fused.
Per element, with e the bytes of the 16-bit tensor: ``(a, b)`` means a·e + b.

The rowwise recipes (TrainingSpec.fp8_recipe; torchao config.py ``Float8LinearConfig.from_recipe_name``) scale
along an axis (``tensor_to_amax``: ``torch.amax(torch.abs(x), dim=axiswise_dim, keepdim=True)``, a reduction reading
its tensor once, as the whole-tensor one does; its fp32 scales, one per row or column, are left out: 4/k bytes per
element). Their bytes follow ``matmul_with_hp_or_float8_args`` under the same assumptions, and the graphs of one
compiled Float8Linear per recipe (torch 2.13, torchao 0.18 on CPU, X 512×128, W 256×128) hold exactly these reductions, casts and
layout copies. ``rowwise``: every operand scaled along the GEMM's reduction dimension, so each of the six uses takes
its own amax and cast (the graph shares only the ``abs``), each cast followed by the layout copy its GEMM needs
where it has one: X (4e+2: amax per row and cast for the forward; amax per column and cast, ``t().clone()``'d
column-major, for dW), dY (4e+2: per row for dX; per column, cloned row-major, for dW), W (4e+2: forward along its
input dimension, column-major already; for dX along the other, cloned column-major).
``rowwise_with_gw_hp``: the weight-gradient GEMM on the 16-bit X and dY (cast configs disabled), so X and dY take
one axiswise cast each (2e+1), and W an axiswise cast forward and a tensorwise one (``max``) for dX, cloned
column-major (4e+2); the backward holds one 16-bit ``mm``, which runs at the 16-bit rate (flops.Op.hp_weight_grad).
Float8 all-gather is tensorwise only (torchao asserts
``enable_fsdp_float8_all_gather`` only with tensorwise weight scaling; torchtitan asserts it off with a recipe name).

With FSDP2's float8 all-gather (TrainingSpec.float8_all_gather) the gathered weight is already float8
(``tensor_already_casted_to_fp8``: no cast in the Linear); only dX's column-major operand is copied (read 1,
write 1). The cast moves to the shard: ``fsdp_pre_all_gather`` reads the local shard of the sharded parameter
(fp32 under torchtitan's MixedPrecisionPolicy) and writes 1 byte, each time the unit is gathered (forward, and
again in the backward where it was resharded after forward). Without the precompute it first takes the shard's amax
(``reduce_amax=True``: one all-reduce of that scalar per weight per gather); with it
``precompute_float8_dynamic_scale_for_fsdp`` reads every local shard once after the optimizer step
(``torch._foreach_norm(weights, ord=math.inf)``) and all-reduces the stacked amaxes in one collective.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from trainsim.specs import Scenario, TrainingSpec

    from .param_tensors import ParamTensor

# (a, b): bytes per element = a * e + b (module doc).
X_CAST = (4, 2)        # amax e + cast e + 1 (forward GEMM); amax e + cast written column-major e + 1 (dW)
DY_CAST = (2, 3)       # amax e + cast e + 1 (shared by dX and dW); row-major copy of dYᵀ for dW: read 1, write 1
W_CAST = (3, 2)        # amax e + cast e + 1 (forward); re-cast with the saved scale, column-major, e + 1 (dX)
W_GATHERED = (0, 2)    # float8 all-gather: the weight arrives in float8; dX's column-major copy, read 1, write 1
# (X, dY, W) per recipe (module doc): tensorwise shares dY's cast and W's amax, rowwise casts every use on its own.
RECIPE_CASTS = {"tensorwise": (X_CAST, DY_CAST, W_CAST), "rowwise": ((4, 2), (4, 2), (4, 2)),
                "rowwise_with_gw_hp": ((2, 1), (2, 1), (4, 2))}
FP8_BYTES = 1          # e4m3 / e5m2
AMAX_BYTES = 4         # an fp32 amax: the sharded parameter's dtype (``torch._foreach_norm`` of fp32 shards)
SHARD_AMAX_PASSES = 1  # reads of the shard for its amax when the scale is not precomputed


def _per_elem(coef: tuple[int, int], e: float) -> float:
    return coef[0] * e + coef[1]


def linear_cast_bytes(m: int, n: int, k: int, e: float, *, weight_gathered_fp8: bool = False,
                      weight_casts: float = 1.0, recipe: str = "tensorwise") -> tuple[float, float]:
    """(forward, backward) cast bytes of one float8 Linear Y(m×n) = X(m×k)·W(k×n) per micro-batch under ``recipe``
    (RECIPE_CASTS): X's casts are charged to the forward (where the partitioner puts both), dY's and the weight's
    backward cast to the backward; the weight's forward cast (amax and cast, 2e+1) ``weight_casts`` times (once per
    forward for torchao: it has no step cache). With ``weight_gathered_fp8`` the weight needs only dX's layout
    copy."""
    x_cast, dy_cast, w_cast = RECIPE_CASTS[recipe or "tensorwise"]
    x = m * k * _per_elem(x_cast, e)
    dy = m * n * _per_elem(dy_cast, e)
    if weight_gathered_fp8:
        return x, dy + k * n * _per_elem(W_GATHERED, e)
    w_fwd = k * n * (2 * e + 1) * weight_casts
    w_bwd = k * n * (_per_elem(w_cast, e) - (2 * e + 1))
    return x + w_fwd, dy + w_bwd


def shard_cast_bytes(shard_elems: float, sharded_param_bytes: float, precomputed: bool) -> float:
    """HBM bytes of ``fsdp_pre_all_gather`` on one rank's shard of float8-gathered weights, per gather: the amax
    read (without the precompute) and the scaled cast (read the sharded parameter, write 1 byte)."""
    amax = 0 if precomputed else SHARD_AMAX_PASSES * sharded_param_bytes
    return shard_elems * (amax + sharded_param_bytes + FP8_BYTES)


def gathered_bytes(params: float, float8_elems: float, param_bytes: float) -> float:
    """Bytes one float8 all-gather of ``params`` parameters produces (and the unsharded buffers hold):
    ``float8_elems`` of them at 1 byte, the rest in ``param_bytes``."""
    f8 = min(float8_elems, params)
    return (params - f8) * param_bytes + f8 * FP8_BYTES


def precompute_bytes(shard_elems: float, sharded_param_bytes: float) -> float:
    """HBM bytes of ``precompute_float8_dynamic_scale_for_fsdp`` on one rank per step: one read of every local
    shard of the float8 weights (``_foreach_norm`` with ord=inf)."""
    return shard_elems * sharded_param_bytes


def float8_weight_elems(tensors: Sequence[ParamTensor]) -> float:
    """Elements of the float8 Linear weights among ``tensors`` (param_tensors.ParamTensor): the blocks' linear
    weights (kind "weight"); the embedding, norms and output layer stay 16-bit (torchtitan's llama3 configs set
    ``float8.filter_fqns = ["output"]``), and routed experts are not ``nn.Linear`` modules."""
    return float(sum(p.elems for p in tensors if _is_float8_weight(p)))


def gather_bytes_per_param(scenario: Scenario, tensors: Sequence[ParamTensor], params: float) -> float:
    """Average bytes per parameter one FSDP all-gather of ``params`` parameters (``tensors``) moves and leaves
    unsharded: the training's ``param_bytes``, less where float8 all-gather gathers float8 weights in 1 byte."""
    t = scenario.training
    if not (t.float8_all_gather and params > 0):
        return float(t.param_bytes)
    return gathered_bytes(params, float8_weight_elems(tensors), t.param_bytes) / params


def sharded_param_bytes(training: TrainingSpec) -> int:
    """Bytes per element of the sharded parameter that ``fsdp_pre_all_gather`` casts: fp32 where the run keeps fp32
    master weights (torchtitan's FSDP2 MixedPrecisionPolicy: fp32 sharded parameters, bf16 ``param_dtype``), else
    the training's parameter bytes."""
    return 4 if training.master_weights else int(training.param_bytes)


def float8_weight_count(tensors: Sequence[ParamTensor]) -> int:
    """Number of float8 Linear weight tensors among ``tensors`` (one amax each)."""
    return sum(1 for p in tensors if _is_float8_weight(p))


def _is_float8_weight(p) -> bool:
    """A block linear's weight (kind "weight"), not a routed expert's (float8_weight_elems)."""
    return p.kind == "weight" and not p.expert
