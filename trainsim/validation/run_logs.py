"""Measured runs from training logs: Megatron-LM logs, and torchtitan logs with their job TOML.

Megatron-LM prints its parsed arguments at start-up (megatron/training/arguments.py ``_print_args``)::

    ------------------------ arguments ------------------------
      global_batch_size ............................... 512
      ...
    -------------------- end of arguments ---------------------

and one line per ``--log-interval`` iterations (megatron/training/training.py ``training_log``)::

     [2025-01-01 10:00:00] iteration       20/     100 | consumed samples: 10240 | elapsed time per
     iteration (ms): 5123.4 | ... | global batch size:   512 | lm loss: ... |

torchtitan (torchtitan/train.py, components/metrics.py) logs the device mesh (``Building 2-D device mesh with
['dp_shard', 'tp'], [4, 2]``), the batch (``Trainer is initialized with local batch size 1, global batch size
8, ..., sequence length 8192, ...``) and one line per ``metrics.log_freq`` steps (``step: 10  loss: 7.9
memory: ...  tps: 6,123  tflops: ...  mfu: ...``; tps is tokens per second per device). Model flavour,
parallel degrees, batch, activation checkpointing and float8 come from the job TOML (read with tomllib).

The measured step is the median over the logged intervals after warm-up: intervals whose last iteration is
at or below ``WARMUP_ITERS`` are dropped (CUDA context, NCCL communicators, allocator growth and compilation
happen there), as are iterations logged at another global batch (batch-size ramp-up). Every problem raises
SpecError naming ``file:line`` and the field.
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

from trainsim.cost_models.profile_limits import MAX_MEASURED_S
from trainsim.simulator.run_fit import MeasuredRun
from trainsim.specs import SpecError, build_scenario
from trainsim.specs.hardware import GPUSpec
from trainsim.specs.safe_read import not_a_file

WARMUP_ITERS = 10
MAX_LOG_BYTES = 512 * 1024 * 1024
ANSI = re.compile(r"\x1b\[[0-9;]*m")
PREFIX = r"^(?:\[[^\]]*\]:?\s*)*"  # launcher prefixes such as "[rank0]:" or "[default0]:"
ARGS_START = re.compile(PREFIX + r"-+ arguments -+\s*$")
ARGS_END = re.compile(PREFIX + r"-+ end of arguments -+\s*$")
ARG_LINE = re.compile(PREFIX + r"\s+(\w+) \.*\s?(.*?)\s*$")
MEGATRON_ITER = re.compile(r"iteration\s+(\d+)/\s*(\d+)\s*\|.*?elapsed time per iteration \(ms\):\s*([^|]*)\|")
MEGATRON_GBS = re.compile(r"global batch size:\s*(\d+)")
# No training step is shorter than one kernel launch (GPUSpec.kernel_overhead_s's default, 4 us) or longer than a
# week (profile_limits.MAX_MEASURED_S): a logged value outside is a misread unit or a corrupt line.
MIN_STEP_S = GPUSpec.model_fields["kernel_overhead_s"].default
# Megatron-LM's --transformer-impl choices (megatron/training/arguments.py, _add_transformer_engine_args).
TRANSFORMER_IMPLS = ("local", "transformer_engine")
# --position-embedding-type and --normalization values trainsim models -> ModelSpec's (Megatron-LM's parser also
# offers relative, none, yarn, mrope positions: not modelled, refused rather than costed as learned).
POSITION_EMBEDDINGS = {"learned_absolute": "learned", "rope": "rope"}
NORMALIZATIONS = {"layernorm": "layernorm", "rmsnorm": "rmsnorm"}
PADDED_VOCAB = re.compile(r"padded vocab \(size: \d+\) with \d+ dummy tokens \(new size: (\d+)\)")


def _err(path: Path, line: int | None, field: str, reason: str) -> SpecError:
    where = f"{path}:{line}" if line else str(path)
    return SpecError(f"{where}: {field}", reason)


def read_lines(path: Path) -> list[str]:
    """The file's lines with ANSI colours removed; SpecError if it cannot be read as text."""
    if (why := not_a_file(path)) is not None:
        raise SpecError(str(path), why)
    if path.stat().st_size > MAX_LOG_BYTES:
        raise _err(path, None, "size", f"larger than {MAX_LOG_BYTES >> 20} MiB")
    try:
        text = path.read_text(encoding="utf-8", errors="strict")
    except (OSError, UnicodeDecodeError) as e:
        raise _err(path, None, "encoding", f"cannot read as UTF-8 text ({type(e).__name__})") from None
    return [ANSI.sub("", ln) for ln in text.splitlines()]


def is_megatron_log(lines: list[str]) -> bool:
    """Whether log lines are Megatron-LM's (its arguments block or iteration lines)."""
    return any(ARGS_START.match(ln) or MEGATRON_ITER.search(ln) for ln in lines)


def is_torchtitan_log(lines: list[str]) -> bool:
    """Whether log lines are torchtitan's (``step: N ... tps:`` lines)."""
    return any(re.search(r"\bstep:\s*\d+\s.*\btps:", ln) for ln in lines)


def median_after_warmup(path: Path, points: list[tuple[int, int, float]], field: str) -> tuple[float, int]:
    """(median seconds, intervals used) of (line, iteration, seconds) after warm-up; checks every value."""
    for line, _, v in points:
        if not (math.isfinite(v) and MIN_STEP_S <= v <= MAX_MEASURED_S):
            raise _err(path, line, field, f"a step of {v:g} s is no training step (between {MIN_STEP_S:g} s and a "
                                          "week)")
    kept = [v for _, it, v in points if it > WARMUP_ITERS]
    if not kept:
        raise _err(path, None, field, f"no logged iteration after the first {WARMUP_ITERS} (warm-up); "
                                      f"{len(points)} interval(s) in the log")
    return statistics.median(kept), len(kept)


# --- Megatron-LM ---------------------------------------------------------------------------------------

def megatron_args(path: Path, lines: list[str]) -> tuple[dict[str, str], dict[str, int]]:
    """(argument -> printed value, argument -> line number) of the arguments block."""
    start = next((i for i, ln in enumerate(lines) if ARGS_START.match(ln)), None)
    if start is None:
        raise _err(path, None, "arguments", "no '---- arguments ----' block (Megatron-LM prints it at start-up; "
                                            "keep the log from the first line)")
    args, where = {}, {}
    for i in range(start + 1, len(lines)):
        if ARGS_END.match(lines[i]):
            again = next((j for j in range(i + 1, len(lines)) if ARGS_START.match(lines[j])), None)
            if again is not None:  # a second run (a restart, or two logs concatenated): its settings and times differ
                raise _err(path, again + 1, "arguments", "a second arguments block: one log holds one run (split "
                                                         "it at this line)")
            return args, where
        m = ARG_LINE.match(lines[i])
        if m is None:
            raise _err(path, i + 1, "arguments", f"the arguments block is truncated or corrupt: {lines[i][:60]!r} "
                                                 "is neither an argument nor '---- end of arguments ----'")
        args[m.group(1)], where[m.group(1)] = m.group(2), i + 1
    raise _err(path, start + 1, "arguments", "the arguments block is truncated (no '---- end of arguments ----')")


class _Args:
    """Typed access to printed Megatron arguments, each error naming the argument's line."""

    def __init__(self, path: Path, args: dict[str, str], where: dict[str, int]):
        self.path, self.args, self.where = path, args, where

    def raw(self, key: str) -> str | None:
        v = self.args.get(key)
        return None if v is None or v == "None" else v

    def int(self, key: str, default: int | None = None, required: bool = False) -> int | None:
        v = self.raw(key)
        if v is None:
            if required:
                raise _err(self.path, None, key, "missing from the arguments block")
            return default
        try:
            out = int(v)
        except ValueError:
            raise _err(self.path, self.where[key], key, f"{v!r} is not a whole number") from None
        if out <= 0:
            raise _err(self.path, self.where[key], key, f"must be positive, got {out}")
        return out

    def flag(self, key: str, default: bool = False) -> bool:
        v = self.raw(key)
        if v is None:
            return default
        if v not in ("True", "False"):
            raise _err(self.path, self.where[key], key, f"{v!r} is neither True nor False")
        return v == "True"

    def float(self, key: str, default: float = 0.0) -> float:
        v = self.raw(key)
        try:
            out = default if v is None else float(v)
        except ValueError:
            raise _err(self.path, self.where[key], key, f"{v!r} is not a number") from None
        if not math.isfinite(out):
            raise _err(self.path, self.where[key], key, f"{v!r} is not a finite number")
        return out

    def probability(self, key: str) -> float:
        """A dropout rate: Megatron-LM draws masks with it, so it lies in [0, 1]."""
        out = self.float(key)
        if not 0.0 <= out <= 1.0:
            raise _err(self.path, self.where[key], key, f"{out:g} is not a probability in [0, 1]")
        return out

    def mapped(self, key: str, known: dict[str, str], default: str) -> str:
        """The trainsim value of an argument whose value (any case) is a key of ``known`` -- the values trainsim
        models; ``known[default]`` when not printed (the logs of Megatron-LM versions before the argument)."""
        v = self.raw(key)
        if v is None:
            return known[default.lower()]
        if v.lower() not in known:
            raise _err(self.path, self.where[key], key, f"{v!r} is not modelled (only {', '.join(known)})")
        return known[v.lower()]

    def choice(self, key: str, choices: tuple[str, ...]) -> str | None:
        """An argument Megatron-LM's parser limits to ``choices`` (None when not printed)."""
        v = self.raw(key)
        if v is not None and v not in choices:
            raise _err(self.path, self.where[key], key, f"{v!r} is none of Megatron-LM's choices "
                                                        f"({', '.join(choices)})")
        return v


def megatron_model(a: _Args, lines: list[str]) -> dict:
    """ModelSpec mapping from the arguments (vocabulary from the tokenizer's 'padded vocab' line)."""
    layers, hidden, heads = (a.int(k, required=True) for k in ("num_layers", "hidden_size", "num_attention_heads"))
    vocab = next((int(m.group(1)) for ln in lines if (m := PADDED_VOCAB.search(ln))), None) or a.int("vocab_size")
    if vocab is None:
        raise _err(a.path, None, "vocab", "neither a 'padded vocab (size: ...)' line nor vocab_size in the log")
    model = {"name": a.path.stem, "num_layers": layers, "hidden": hidden, "num_heads": heads,
             "ffn_hidden": a.int("ffn_hidden_size", 4 * hidden), "vocab_size": vocab,
             "max_seq_len": a.int("max_position_embeddings") or a.int("seq_length", required=True),
             "activation": "swiglu" if a.flag("swiglu") else "gelu",
             "norm": a.mapped("normalization", NORMALIZATIONS, "LayerNorm"),
             "position_embedding": a.mapped("position_embedding_type", POSITION_EMBEDDINGS, "learned_absolute"),
             "bias": a.flag("add_bias_linear", True),
             "tie_embeddings": not a.flag("untie_embeddings_and_output_weights")}
    if a.flag("group_query_attention"):
        model["num_kv_heads"] = a.int("num_query_groups", required=True)
    experts = a.int("num_experts", 1)
    if experts and experts > 1:
        model.update(num_experts=experts, top_k=a.int("moe_router_topk", 2),
                     moe_ffn_hidden=a.int("moe_ffn_hidden_size", model["ffn_hidden"]))
    return model


def megatron_recompute(a: _Args, layers_per_stage: int) -> str:
    """The recompute mode a Megatron-LM run's arguments state: none, selective, or full over every layer of a
    stage (block recompute of fewer is refused)."""
    gran = a.raw("recompute_granularity")
    if gran is None:
        return "none"
    if gran == "selective":
        return "selective"
    if gran != "full":
        raise _err(a.path, a.where.get("recompute_granularity"), "recompute_granularity", f"{gran!r} is not full/selective")
    n = a.int("recompute_num_layers", 1)
    if a.raw("recompute_method") == "block" and n is not None and n < layers_per_stage:
        raise _err(a.path, a.where.get("recompute_num_layers"), "recompute_num_layers",
                   f"block recompute of {n} of {layers_per_stage} layers per stage is not modelled (only all layers)")
    return "full"


def megatron_vpp(a: _Args, layers: int, pp: int) -> int:
    """The interleaving depth --num-layers-per-virtual-pipeline-stage gives: the stage's layers over it, which
    Megatron-LM's arguments.py asserts divide evenly (a log that does not is no run of it); 1 when not printed."""
    per_vstage = a.int("num_layers_per_virtual_pipeline_stage")
    if per_vstage is None:
        return 1
    if layers % pp or (layers // pp) % per_vstage:
        raise _err(a.path, a.where["num_layers_per_virtual_pipeline_stage"], "num_layers_per_virtual_pipeline_stage",
                   f"{per_vstage} does not divide the {layers} / {pp} layers per pipeline stage")
    return layers // pp // per_vstage


def megatron_training(a: _Args) -> tuple[dict, dict, int]:
    """(training mapping, layout mapping, world size)."""
    world = a.int("world_size", required=True)
    tp, pp = a.int("tensor_model_parallel_size", 1), a.int("pipeline_model_parallel_size", 1)
    cp, ep = a.int("context_parallel_size", 1), a.int("expert_model_parallel_size", 1)
    layers = a.int("num_layers", required=True)
    vpp = a.int("virtual_pipeline_model_parallel_size") or megatron_vpp(a, layers, pp)
    dtype = "fp8" if a.raw("fp8") else ("bf16" if a.flag("bf16") else ("fp16" if a.flag("fp16") else "fp32"))
    opt = (a.raw("optimizer") or "adam").lower()
    if opt not in ("adam", "adamw"):
        raise _err(a.path, a.where.get("optimizer"), "optimizer", f"{opt!r}: only Adam is modelled")
    # --transformer-impl choices (megatron/training/arguments.py): an unknown one is refused, not costed as "local"
    impl = a.choice("transformer_impl", TRANSFORMER_IMPLS)
    flash = a.flag("use_flash_attn") or impl == "transformer_engine"
    training = {"seq_len": a.int("seq_length", required=True), "global_batch": a.int("global_batch_size", required=True),
                "micro_batch": a.int("micro_batch_size", required=True), "dtype": dtype,
                "recompute": megatron_recompute(a, max(1, layers // pp)),
                "distributed_optimizer": a.flag("use_distributed_optimizer"),
                "sequence_parallel": a.flag("sequence_parallel") and tp > 1,
                "schedule": "interleaved" if vpp > 1 else "1f1b", "flash_attention": flash,
                "dropout": a.probability("hidden_dropout") > 0 or a.probability("attention_dropout") > 0,
                "framework": "megatron", **megatron_recipe(a, dtype, tp)}
    return training, {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "vpp": vpp}, world


# Megatron-LM's --fp8-recipe choices (megatron/training/arguments.py) -> TrainingSpec.fp8_recipe; delayed and
# tensorwise are both one scale per tensor; blockwise and custom have no TrainingSpec recipe.
FP8_RECIPES = {"delayed": "tensorwise", "tensorwise": "tensorwise", "mxfp8": "mxfp8"}


def megatron_recipe(a: _Args, dtype: str, tp: int) -> dict:
    """The printed arguments with a TrainingSpec field of their own, where printed (older logs lack them and
    keep the framework's defaults): --overlap-grad-reduce, --tp-comm-overlap, --recompute-modules,
    --num-distributed-optimizer-instances, --grad-reduce-in-bf16 and, with fp8, --fp8-recipe and
    --fp8-param-gather (an overlap_grad_reduce False log is costed without Megatron's overlap, as it ran).
    TP overlap counts at tp > 1 only, as sequence parallelism does (Megatron-LM turns both off at tp 1)."""
    out: dict = {}
    if a.raw("overlap_grad_reduce") is not None:
        out["overlap_grad_reduce"] = a.flag("overlap_grad_reduce")
    if a.flag("tp_comm_overlap") and tp > 1:
        out["tp_comm_overlap"] = True
    if a.raw("recompute_granularity") == "selective" and a.raw("recompute_modules") is not None:
        text = a.raw("recompute_modules")
        if not re.fullmatch(r"\[\s*(?:'\w+'\s*,\s*)*(?:'\w+'\s*)?\]", text):
            raise _err(a.path, a.where["recompute_modules"], "recompute_modules", f"{text!r} is not a list of names")
        out["recompute_modules"] = re.findall(r"'(\w+)'", text)
    if a.int("num_distributed_optimizer_instances", 1) != 1:
        out["distributed_optimizer_instances"] = a.int("num_distributed_optimizer_instances")
    if a.flag("grad_reduce_in_bf16"):
        out["grad_dtype"] = "bf16"
    if dtype == "fp8":
        recipe = a.choice("fp8_recipe", ("delayed", "tensorwise", "mxfp8", "blockwise", "custom"))
        if recipe is not None and recipe not in FP8_RECIPES:
            raise _err(a.path, a.where["fp8_recipe"], "fp8_recipe", f"{recipe!r} has no costed recipe (delayed, "
                                                                      f"tensorwise, mxfp8)")
        out.update({"fp8_recipe": FP8_RECIPES[recipe]} if recipe else {})
        if a.flag("fp8_param_gather"):
            out["fp8_param_gather"] = True
    return out


def megatron_step(path: Path, lines: list[str], gbs: int) -> tuple[float, int]:
    """Median seconds per iteration after warm-up, and how many logged intervals it used."""
    points = []
    for i, ln in enumerate(lines):
        m = MEGATRON_ITER.search(ln)
        if m is None:
            if "elapsed time per iteration" in ln:
                raise _err(path, i + 1, "elapsed time per iteration (ms)", "unreadable iteration line")
            continue
        g = MEGATRON_GBS.search(ln)
        if g is not None and int(g.group(1)) != gbs:
            continue  # batch-size ramp-up: another configuration
        text = m.group(3).strip()
        try:
            ms = float(text)
        except ValueError:
            raise _err(path, i + 1, "elapsed time per iteration (ms)", f"{text!r} is not a number") from None
        if points and int(m.group(1)) < points[-1][1]:  # the counter restarted: another run in the same file
            raise _err(path, i + 1, "iteration", f"iteration {m.group(1)} follows iteration {points[-1][1]}: one log "
                                                 "holds one run")
        points.append((i + 1, int(m.group(1)), ms / 1e3))
    if not points:
        raise _err(path, None, "elapsed time per iteration (ms)", "no 'iteration N/M | ... elapsed time per "
                                                                  "iteration (ms): T |' line")
    return median_after_warmup(path, points, "elapsed time per iteration (ms)")


def megatron_run(path: Path, cluster: str | None) -> MeasuredRun:
    """A MeasuredRun from a Megatron-LM log: the scenario from its arguments block, the step time from its
    iteration lines."""
    lines = read_lines(path)
    args, where = megatron_args(path, lines)
    a = _Args(path, args, where)
    model = megatron_model(a, lines)
    training, layout, world = megatron_training(a)
    step, used = megatron_step(path, lines, training["global_batch"])
    return MeasuredRun(name=path.stem, source=str(path), step_time_s=step, steps_used=used,
                       scenario=_scenario(path, model, cluster, world, layout, training, "Megatron-LM log"))


def _scenario(path: Path, model: dict, cluster: str | None, gpus: int, layout: dict, training: dict, what: str):
    if not cluster:
        raise SpecError("cluster", f"a {what} does not name the GPU type: pass --cluster NAME|PATH for {path}")
    try:
        return build_scenario({"name": path.stem, "model": model, "cluster": cluster, "gpus": gpus,
                               "layout": layout, "training": training})
    except SpecError as e:
        raise _err(path, None, e.field, e.reason) from None
