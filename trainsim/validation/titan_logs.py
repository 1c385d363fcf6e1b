"""A torchtitan run from its log and job TOML (see run_logs for the formats and the warm-up rule).

The TOML gives the model (``[model] name``/``flavor``), the parallel degrees (``[parallelism]``), the batch
and sequence (``[training] local_batch_size``/``global_batch_size``/``seq_len``, older ``batch_size``),
activation checkpointing (``[activation_checkpoint] mode`` and ``selective_ac_option``), torch.compile
(``[compile] enable``, older ``[training] compile``) and float8 (``[model] converters = ["float8"]``, older
``[float8] enable_float8_linear``; its recipe, FSDP float8 all-gather and scale precompute in ``[float8]``). The log must agree with it: its device-mesh line, its
"Trainer is initialized with" line and its model-size line are checked against the TOML.
"""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

from trainsim.simulator.run_fit import MeasuredRun
from trainsim.specs import SpecError
from trainsim.specs.fp8_library import TORCHAO_ONLY
from trainsim.specs.safe_read import not_a_file

from .run_logs import _err, _scenario, median_after_warmup, read_lines

# torchtitan's Llama 3 flavours (torchtitan/models/llama3/__init__.py) -> trainsim model presets of the same
# architecture (dim, n_layers, n_heads, n_kv_heads, ffn from ffn_dim_multiplier/multiple_of, vocab 128256).
FLAVOURS = {("llama3", "8B"): "llama3-8b", ("llama3", "70B"): "llama3-70b", ("llama3", "405B"): "llama3-405b"}
MESH = re.compile(r"Building (\d+)-D device mesh with \[([^\]]*)\], \[([^\]]*)\]")
INIT = re.compile(r"Trainer is initialized with local batch size (\d+), global batch size (\d+), .*?"
                  r"sequence length (\d+)")
MODEL_LINE = re.compile(r"(?:Building|Model) (\w+) (\S+?)(?: with| size:)")
STEP = re.compile(r"\bstep:\s*(\d+)\s.*?\btps:\s*([^\s]+)")


def read_toml(path: Path) -> dict:
    """A torchtitan TOML config; SpecError when it is missing, unreadable or not TOML."""
    if (why := not_a_file(path)) is not None:
        raise SpecError(str(path), why)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise _err(path, None, "toml", f"cannot read ({type(e).__name__})") from None
    except tomllib.TOMLDecodeError as e:
        raise _err(path, None, "toml", str(e)) from None


def _get(cfg: dict, path: Path, section: str, key: str, default=None, kind=int):
    """``[section] key`` of the TOML, of type ``kind`` (``default`` where absent)."""
    return _value(_table(cfg, path, section), path, section, key, default, kind)


def _value(table: dict, path: Path, name: str, key: str, default=None, kind=int):
    """``key`` of the TOML table ``name``, of type ``kind`` (``default`` where absent)."""
    v = table.get(key, default)
    if (v is not None and not isinstance(v, kind)) or (isinstance(v, bool) and kind is int):
        raise _err(path, None, f"{name}.{key}", f"{v!r} is not a {kind.__name__}")
    return v


def degrees(cfg: dict, path: Path, world: int | None) -> dict[str, int]:
    """tp, pp, cp, dp_replicate, dp_shard (resolving -1 from the world size)."""
    d = {k: _get(cfg, path, "parallelism", f"{k}_degree", 1) for k in
         ("tensor_parallel", "pipeline_parallel", "context_parallel", "data_parallel_replicate", "data_parallel_shard")}
    for k, v in d.items():  # every degree but a -1 shard is >= 1 before any is divided by (a 0 would divide by zero)
        if v < 1 and not (k == "data_parallel_shard" and v == -1):
            raise _err(path, None, f"parallelism.{k}_degree", f"must be >= 1, got {v}")
    shard = d["data_parallel_shard"]
    others = d["tensor_parallel"] * d["pipeline_parallel"] * d["context_parallel"] * d["data_parallel_replicate"]
    if shard == -1:
        if world is None:
            raise _err(path, None, "parallelism.data_parallel_shard_degree",
                       "-1 needs the world size: the log has no 'Building N-D device mesh' line")
        if world % others:  # torchtitan's ParallelDims refuses it; flooring would cost a smaller job
            raise _err(path, None, "parallelism.data_parallel_shard_degree",
                       f"-1: the world size {world} is not divisible by the other degrees' product {others}")
        shard = world // others
    d["data_parallel_shard"] = shard
    return d


def mesh_of_log(path: Path, lines: list[str]) -> tuple[int, dict[str, int], int] | None:
    """(line, {mesh dim: size}, world size) from the device-mesh line, None when absent."""
    for i, ln in enumerate(lines):
        m = MESH.search(ln)
        if m:
            names = [x.strip().strip("'\"") for x in m.group(2).split(",") if x.strip()]
            try:
                sizes = [int(x) for x in m.group(3).split(",") if x.strip()]
            except ValueError:
                raise _err(path, i + 1, "device mesh", f"unreadable sizes {m.group(3)!r}") from None
            if len(names) != len(sizes):
                raise _err(path, i + 1, "device mesh", "names and sizes differ in number")
            again = next((j for j in range(i + 1, len(lines)) if MESH.search(lines[j])), None)
            if again is not None:  # a second run (a restart, or two logs concatenated)
                raise _err(path, again + 1, "device mesh", "a second device-mesh line: one log holds one run "
                                                           "(split it at this line)")
            world = 1
            for s in sizes:
                world *= s
            return i + 1, dict(zip(names, sizes, strict=True)), world
    return None


def check_log_matches(cfg: dict, toml: Path, log: Path, lines: list[str], deg: dict[str, int]) -> None:
    """The log's mesh, batch line and model line against the TOML; SpecError naming the log line on a
    mismatch."""
    mesh = mesh_of_log(log, lines)
    if mesh is not None:
        line, dims, _ = mesh
        want = {"pp": deg["pipeline_parallel"], "dp_replicate": deg["data_parallel_replicate"],
                "dp_shard": deg["data_parallel_shard"], "cp": deg["context_parallel"], "tp": deg["tensor_parallel"]}
        for k, v in want.items():
            if dims.get(k, 1) != v:
                raise _err(log, line, f"device mesh {k}", f"log has {dims.get(k, 1)}, {toml.name} says {v}")
    lbs, seq = _get(cfg, toml, "training", "local_batch_size") or _get(cfg, toml, "training", "batch_size"), \
        _get(cfg, toml, "training", "seq_len")
    for i, ln in enumerate(lines):
        m = INIT.search(ln)
        if m and (int(m.group(1)) != lbs or int(m.group(3)) != seq):
            raise _err(log, i + 1, "local batch size / sequence length",
                       f"log has {m.group(1)} / {m.group(3)}, {toml.name} says {lbs} / {seq}")
        m = MODEL_LINE.search(ln)
        if m and m.group(1) in ("llama3", "llama2", "llama4", "deepseek_v3", "qwen3"):
            name, flavor = cfg.get("model", {}).get("name"), cfg.get("model", {}).get("flavor")
            if (m.group(1), m.group(2)) != (name, flavor):
                raise _err(log, i + 1, "model", f"log trains {m.group(1)} {m.group(2)}, {toml.name} says {name} {flavor}")


def titan_step(log: Path, lines: list[str], tokens_per_device_step: float) -> tuple[float, int]:
    """Median step seconds after warm-up from the 'tps' (tokens/s per device) lines."""
    points = []
    for i, ln in enumerate(lines):
        m = STEP.search(ln)
        if m is None:
            continue
        text = m.group(2).replace(",", "")
        try:
            tps = float(text)
        except ValueError:
            raise _err(log, i + 1, "tps", f"{m.group(2)!r} is not a number") from None
        if not tps > 0:
            raise _err(log, i + 1, "tps", f"{m.group(2)} is not a positive rate")
        if points and int(m.group(1)) < points[-1][1]:  # the step counter restarted: another run in the same file
            raise _err(log, i + 1, "step", f"step {m.group(1)} follows step {points[-1][1]}: one log holds one run")
        points.append((i + 1, int(m.group(1)), tokens_per_device_step / tps))
    if not points:
        raise _err(log, None, "tps", "no 'step: N ... tps: T' line (torchtitan's metrics log)")
    return median_after_warmup(log, points, "tps")


def titan_scenario_parts(cfg: dict, toml: Path, deg: dict[str, int]) -> tuple[str, dict, dict]:
    """(model preset, layout, training) from the TOML."""
    model = cfg.get("model", {})
    key = (model.get("name"), str(model.get("flavor")))
    if key not in FLAVOURS:
        raise _err(toml, None, "model.flavor", f"{key[0]} {key[1]} is not a torchtitan flavour trainsim knows "
                                               f"({', '.join(f'{a} {b}' for a, b in FLAVOURS)})")
    if deg["data_parallel_replicate"] > 1 and deg["data_parallel_shard"] > 1:
        raise _err(toml, None, "parallelism", "HSDP (replicate and shard both > 1) is not modelled")
    dp = deg["data_parallel_replicate"] * deg["data_parallel_shard"]
    lbs = _get(cfg, toml, "training", "local_batch_size") or _get(cfg, toml, "training", "batch_size")
    seq = _get(cfg, toml, "training", "seq_len")
    if not lbs or not seq:
        raise _err(toml, None, "training.local_batch_size / seq_len", "both are needed")
    gbs = _get(cfg, toml, "training", "global_batch_size", -1)
    gbs = gbs if gbs and gbs > 0 else lbs * dp
    float8 = _float8_enabled(cfg, toml)
    mp = _get(cfg, toml, "training", "mixed_precision_param", "bfloat16", str)
    dtype = "fp8" if float8 else {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}.get(mp)
    if dtype is None:
        raise _err(toml, None, "training.mixed_precision_param", f"{mp!r} is not bfloat16/float32/float16")
    pp = deg["pipeline_parallel"]
    sched = _get(cfg, toml, "parallelism", "pipeline_parallel_schedule", "1F1B", str)
    if pp > 1 and sched not in ("1F1B", "GPipe"):
        raise _err(toml, None, "parallelism.pipeline_parallel_schedule", f"{sched!r} is not mapped (1F1B, GPipe)")
    mb = _get(cfg, toml, "parallelism", "pipeline_parallel_microbatch_size", 1) if pp > 1 else lbs
    training = {"seq_len": seq, "global_batch": gbs, "micro_batch": mb, "dtype": dtype, **_recompute(cfg, toml),
                "zero": 3 if deg["data_parallel_shard"] > 1 else 0, "framework": "torch",
                "schedule": "gpipe" if sched == "GPipe" and pp > 1 else "1f1b",
                **_compile(cfg, toml), **(_float8_settings(cfg, toml, deg) if float8 else {})}
    layout = {"tp": deg["tensor_parallel"], "pp": pp, "cp": deg["context_parallel"], "dp": dp}
    if layout["cp"] > 1:
        training["cp_comm"] = _cp_rotate(cfg, toml)
    return FLAVOURS[key], layout, training


def _table(cfg: dict, toml: Path, section: str) -> dict:
    sec = cfg.get(section, {})
    if not isinstance(sec, dict):
        raise _err(toml, None, section, "must be a table")
    return sec


def _recompute(cfg: dict, toml: Path) -> dict:
    """TrainingSpec recompute settings from ``[activation_checkpoint]`` (torchtitan job_config.py
    ActivationCheckpoint: mode "selective" and selective_ac_option "2" by default). none and full as named;
    selective with option "op" is torchtitan's per-op policy (recompute_modules op_sac); with an integer N every
    N-th block is wrapped in full AC (``_apply_ac_to_transformer_block``: ``not ac_freq or count % ac_freq == 0``,
    so 0 and 1 wrap every block: full), which no setting costs for N > 1 -- refused, not read as Megatron's
    selective recompute of the attention core."""
    mode = _get(cfg, toml, "activation_checkpoint", "mode", "selective", str)
    if mode not in ("none", "selective", "full"):
        raise _err(toml, None, "activation_checkpoint.mode", f"{mode!r} is none of none, selective, full")
    if mode != "selective":
        return {"recompute": mode}
    option = _table(cfg, toml, "activation_checkpoint").get("selective_ac_option", "2")
    if option == "op":
        return {"recompute": "selective", "recompute_modules": ["op_sac"]}
    text = str(option).strip() if not isinstance(option, bool) else ""
    if text in ("0", "1"):
        return {"recompute": "full"}
    raise _err(toml, None, "activation_checkpoint.selective_ac_option",
               f"{option!r}: full AC on every N-th block (an integer N > 1, torchtitan's default '2') is not "
               f"modelled; use 'op' (per-op selective) or mode full / none")


def _compile(cfg: dict, toml: Path) -> dict:
    """``compile: true`` where the job compiles the model's blocks: ``[compile] enable`` with "model" among its
    ``components`` (default model and loss), or the older ``[training] compile``."""
    sec = _table(cfg, toml, "compile")
    enabled = _get(cfg, toml, "compile", "enable", False, bool)
    components = sec.get("components", ["model", "loss"])
    if not isinstance(components, list):
        raise _err(toml, None, "compile.components", f"{components!r} is not a list")
    on = (enabled and "model" in components) or _get(cfg, toml, "training", "compile", False, bool)
    return {"compile": True} if on else {}


FLOAT8_RECIPES = ("tensorwise", *TORCHAO_ONLY)  # torchao Float8LinearConfig.from_recipe_name
# The float8 converter's name: "float8" with a [float8] table (torchtitan of 2024-25), "quantize.linear.float8" with a
# [quantize.linear.float8] table (later torchtitan: tests/integration_tests/h100.py passes --model.converters
# quantize.linear.float8 --quantize.linear.float8.enable_fsdp_float8_all_gather).
FLOAT8_CONVERTERS = ("float8", "quantize.linear.float8")


def _float8_table(cfg: dict, toml: Path) -> tuple[str, dict]:
    """(name, table) of the job's float8 settings: ``[quantize.linear.float8]`` where present, else ``[float8]``."""
    nested = cfg.get("quantize", {})
    for part in ("linear", "float8"):
        nested = nested.get(part, {}) if isinstance(nested, dict) else None
    if nested:
        if not isinstance(nested, dict):
            raise _err(toml, None, "quantize.linear.float8", "must be a table")
        return "quantize.linear.float8", nested
    return "float8", _table(cfg, toml, "float8")


def _float8_enabled(cfg: dict, toml: Path) -> bool:
    """Whether the job converts its linears to float8: ``[model] converters`` (each one costed: the float8
    converter only, under either name) or the older ``[float8] enable_float8_linear``."""
    converters = _table(cfg, toml, "model").get("converters") or []
    if not isinstance(converters, list):
        raise _err(toml, None, "model.converters", f"{converters!r} is not a list")
    other = [c for c in converters if c not in FLOAT8_CONVERTERS]
    if other:
        raise _err(toml, None, "model.converters", f"{other[0]!r} is not costed (the float8 converter is: "
                                                    f"torchao Float8Linear, named {' or '.join(FLOAT8_CONVERTERS)})")
    return bool(converters) or _get(cfg, toml, "float8", "enable_float8_linear", False, bool)


def _float8_settings(cfg: dict, toml: Path, deg: dict[str, int]) -> dict:
    """torchao float8 settings of the float8 table (_float8_table): recipe_name -> fp8_recipe;
    enable_fsdp_float8_all_gather -> float8_all_gather where the data-parallel shard dimension is on (torchtitan
    applies it only then: ``parallel_dims.dp_shard_enabled and ...``), precompute_float8_dynamic_scale_for_fsdp ->
    float8_precompute_scale with it (specs/fp8_library.py)."""
    name, table = _float8_table(cfg, toml)
    recipe = _value(table, toml, name, "recipe_name", None, str)
    if recipe is not None and recipe not in FLOAT8_RECIPES:
        raise _err(toml, None, f"{name}.recipe_name", f"{recipe!r} is none of {', '.join(FLOAT8_RECIPES)}")
    gather = _value(table, toml, name, "enable_fsdp_float8_all_gather", False, bool) and deg["data_parallel_shard"] > 1
    precompute = gather and _value(table, toml, name, "precompute_float8_dynamic_scale_for_fsdp", False, bool)
    return {**({"fp8_recipe": recipe} if recipe else {}), **({"float8_all_gather": True} if gather else {}),
            **({"float8_precompute_scale": True} if precompute else {})}


# torchtitan's context_parallel_rotate_method (its default "allgather", the torch default) -> TrainingSpec.cp_comm:
# "alltoall" passes K/V to the next rank each step, the ring trainsim costs as p2p.
ROTATE_METHODS = {"allgather": "torch_allgather", "alltoall": "p2p"}


def _cp_rotate(cfg: dict, toml: Path) -> str:
    """The run's context-parallel exchange from ``parallelism.context_parallel_rotate_method`` (``experimental.``
    in torchtitan's configs of 2024), "allgather" where neither is set."""
    section = "parallelism" if "context_parallel_rotate_method" in cfg.get("parallelism", {}) else "experimental"
    method = _get(cfg, toml, section, "context_parallel_rotate_method", "allgather", str)
    if method not in ROTATE_METHODS:
        raise _err(toml, None, f"{section}.context_parallel_rotate_method", f"{method!r} is none of "
                                                                            f"{', '.join(ROTATE_METHODS)}")
    return ROTATE_METHODS[method]


def titan_run(log: Path, toml: Path, cluster: str | None) -> MeasuredRun:
    """A MeasuredRun from a torchtitan log and its TOML config, checked against each other (degrees, device
    mesh)."""
    lines = read_lines(log)
    cfg = read_toml(toml)
    mesh = mesh_of_log(log, lines)
    deg = degrees(cfg, toml, mesh[2] if mesh else None)
    check_log_matches(cfg, toml, log, lines, deg)
    preset, layout, training = titan_scenario_parts(cfg, toml, deg)
    world = layout["tp"] * layout["pp"] * layout["cp"] * layout["dp"]
    if mesh is not None and mesh[2] != world:
        raise _err(log, mesh[0], "device mesh", f"{mesh[2]} devices, {toml.name} describes {world}")
    step, used = titan_step(log, lines, training["global_batch"] * training["seq_len"] / world)
    return MeasuredRun(name=log.stem, source=f"{log} + {toml.name}", step_time_s=step, steps_used=used,
                       scenario=_scenario(log, preset, cluster, world, layout, training, "torchtitan log"))
