"""One row of the common run schema (trainsim/data/validation/README.md) as a scenario mapping.

Every column the schema defines is honoured when the row fills it: the accelerator (``gpu_type``,
``gpus_per_node``, ``inter_node_link``), the architecture (``kv_heads``, ``ffn_hidden``, the model family
named in ``model_name``), the layout (``tp``, ``pp``, ``cp``, ``ep``, ``vp_interleave``,
``sequence_parallel``) and the recipe (``micro_batch``, ``recompute``, ``zero_or_sharding``,
``pipeline_schedule``, ``precision``). What the schema has no column for follows the year of the source
(its arXiv id, else a year written in the source columns), by the defaults of that time:

* framework: Megatron-LM of SC21 up to 2021 (``megatron-2021``), of Korthikanti et al. in 2022
  (``megatron-2022``), Megatron-Core from 2023 or when the year is unknown (``megatron``); DeepSpeed ZeRO-3
  rows ``deepspeed-2021`` up to 2021, else ``deepspeed``; FSDP rows ``pytorch-fsdp`` (FSDP1) up to 2023,
  ``torch`` (FSDP2) after;
* FlashAttention (published mid-2022): off up to 2022, on from 2023 or when unknown;
* dropout 0.1 (GPT recipes of the time) up to 2022, none after.

A row whose accelerator has no cluster preset raises ``SpecError`` naming ``gpu_type``, which the loader
turns into a skip reason: a missing GPU is never replaced by another one silently.

Columns beyond the shared schema are read when present (a bundled dataset states with them what its per-run
facts are, so one loader reads every bundled table): ``cp_comm`` (ring / p2p, allgather, a2a / Ulysses), how
context parallelism exchanges keys and values (TrainingSpec.cp_comm), the framework's default when absent; ``dp_shard``,
the ZeRO-3 shard group (Layout.dp_shard: HSDP's, or DeepSpeed-MiCS's ``mics_shard_size``), all of dp when absent; and the explicit
recipe columns ``framework``, ``dtype``, ``grad_dtype_bytes``, ``flash_attention``, ``flash_attention_version``
(1 or 2), ``titan_norm`` (torchtitan's norm_type), ``dropout``, ``overlap_p2p`` (pipeline sends overlapped with compute), ``overlap_grad_reduce`` (data-parallel
gradient reduction overlapped with the backward), ``compile`` (the blocks compiled with torch.compile,
TrainingSpec.compile) and ``fabric`` (scale-out
topology), which replace the year and text rules above when filled (a row that names the code it ran, e.g. a
framework commit older than its paper, states that code's era here). ``assumptions`` states in words the rule that set each value the source leaves open
(documentation only). The loader also reads ``label``, ``category``, ``group`` (rows compared with each other)
and ``skip_reason`` (a run trainsim does not model, e.g. a schedule it has no engine for: skipped with that
reason).
"""

from __future__ import annotations

import re

from trainsim.specs import SpecError, load_cluster
from trainsim.specs.gpu_names import cluster_preset_for
from trainsim.validation.cells import cluster, integer, named_values, negation, num, yes_no

RUN_RECORD_TYPES = ("measured_throughput", "measured_iteration_time", "measured_step_time", "measured_mfu")

NUMBER_WORDS = {w: i for i, w in enumerate(("one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                                              "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen",
                                              "sixteen"), start=1)}
# InfiniBand generations named without a rate: Gb/s per port (one NIC per GPU assumed).
IB_GENERATIONS = {"xdr": 800, "ndr": 400, "hdr": 200, "edr": 100}
# Cells that say a value is not given: the caller's default or unknowns rule decides.
NOT_STATED = re.compile(r"^\s*(?:|-|n/?a|none stated|not stated.*|unknown|\?)\s*$", re.IGNORECASE)

# Model families whose blocks are Llama-style: SwiGLU MLP, RMSNorm, rotary positions, no biases, untied
# embeddings (their published configs). Anything else is GPT-style (GeLU, LayerNorm, learned positions,
# biases, tied embeddings), as GPT-3, Megatron's GPT, MT-NLG, BLOOM-era and MPT models are.
# (Nemotron-4 is not: its MLP is an ungated squared ReLU; Llama-Nemotron models match "llama".)
LLAMA_STYLE = ("llama", "mistral", "mixtral", "qwen", "deepseek", "gemma", "yi-", "internlm")


def source_year(r: dict) -> int | None:
    """The year of the row's source: its arXiv id (YYMM.NNNNN), else a 20xx year in the source columns."""
    text = " ".join(r.get(k) or "" for k in ("source_title", "source_url", "source_locator"))
    ids = text + " " + (r.get("read_from") or "")  # where it was read may name the arXiv id, never a year
    m = re.search(r"(?:arxiv[:./\s]*|abs/|pdf/)(\d{2})(\d{2})\.\d{4,5}", ids, re.IGNORECASE)
    if m and 1 <= int(m.group(2)) <= 12:
        return 2000 + int(m.group(1))
    years = [int(y) for y in re.findall(r"\b(20[12]\d)\b", text)]
    if years:
        return min(years)
    m = re.search(r"\b(?:SC|ISCA|MLSys|NeurIPS|ICML|OSDI|NSDI|SOSP|PPoPP|ATC|EuroSys)\s*'?(\d{2})\b", text)
    return 2000 + int(m.group(1)) if m else None


def cluster_mapping(r: dict, gpus: int) -> dict:
    """The cluster of the row: preset by ``gpu_type``; node size and NICs as ``gpus_per_node`` and
    ``inter_node_link`` state them; a fat-tree fabric when the link text says so."""
    gpu_text = (r.get("gpu_type") or "").strip()
    if not gpu_text:
        raise SpecError("gpu_type", "missing")
    # A PCIe card, the H100 NVL pair or a Grace Hopper superchip is not the SXM/OAM node of a preset, and is
    # not silently replaced by one (specs.gpu_names).
    match = cluster_preset_for(gpu_text)
    if match is None:
        raise SpecError("gpu_type", f"no cluster preset for {r.get('gpu_type')!r} (the presets are SXM/OAM nodes)")
    preset_name, over = match
    intra = (r.get("intra_node_link") or "").lower()
    if re.search(r"pcie", intra) and not re.search(r"nvlink|nvswitch|xgmi|infinity", intra) or \
            re.search(r"\bno\s+nvlink\b", intra):
        raise SpecError("intra_node_link", f"{r.get('intra_node_link')!r}: PCIe-only nodes have no cluster preset "
                                           "(the presets are NVLink/NVSwitch or Infinity Fabric nodes)")
    base = load_cluster(preset_name)
    per_node = whole(r, "gpus_per_node")
    if per_node is not None and per_node <= 0:
        raise SpecError("gpus_per_node", f"must be a positive whole number, got {r.get('gpus_per_node')!r}")
    if per_node and base.gpus_per_node == 8 and per_node != 8:
        over["gpus_per_node"] = per_node
    link = r.get("inter_node_link") or ""
    out = dict(over.get("scale_out", {}))
    nics = nics_from_text(link, over.get("gpus_per_node", base.gpus_per_node))
    if nics is not None:
        out["nics_per_node"], out["nic_bw_Bps"] = nics
    if re.search(r"fat[\s-]?tree|\bclos\b", link, re.IGNORECASE):
        out["fabric"] = "fat-tree"
    if stated(r, "fabric"):
        out["fabric"] = r["fabric"].strip()
    if out:
        over["scale_out"] = out
    return cluster(preset_name, gpus, **over)


_RATE = r"(\d+(?:\.\d+)?)\s*([TG])(bit|b|B)?(?:ps|/s)?(?![a-z])"


def _rate_Bps(value: str, prefix: str, unit: str | None) -> float:
    """Bytes/s of a rate like '400 Gbps' / '100 GB/s' / '3.2 Tbps' / '400G' (a bare G/T is bits, as links are)."""
    scale = 1e12 if prefix == "T" else 1e9
    return float(value) * scale / (1 if unit == "B" else 8)


def nics_from_text(link: str, per_node: int) -> tuple[int, float] | None:
    """(NICs per node, bytes/s per NIC) from ``inter_node_link`` text, or None when it states no rate; SpecError
    naming the column for a rate it cannot place ('100 Gbps Ethernet': per NIC, per GPU or per node?).

    Understood: 'N x <rate>' (N NICs per node, or per GPU when the clause says 'per GPU'), '<rate> per GPU'
    (preferred over a per-node total in the same cell), '<rate> per node' (split over one NIC per GPU), and an
    InfiniBand generation without a rate ('NDR', 'HDR': one such port per GPU). Bits unless written 'B'."""
    # Clauses about the fabric's switches ('64x400G ports per switch', 'spine') say nothing about a node.
    # The cell with its parenthetical remarks dropped comes last: '400Gb/s (Mellanox CX-7) per GPU'.
    flat = re.sub(r"\([^()]*\)", " ", link)
    clauses = [c for c in (*re.split(r"[;()]", link), *flat.split(";"))
               if not re.search(r"switch|spine|leaf", c, re.IGNORECASE)]
    for clause in clauses:
        per_gpu = re.search(r"per\s+gpu", clause, re.IGNORECASE)
        m = re.search(r"(\d+)\s*[x×]\s*(?:[A-Za-z-]+\s+)*?" + _RATE, clause)
        if m:
            n = int(m.group(1)) * (per_node if per_gpu else 1)
            return n, _rate_Bps(m.group(2), m.group(3), m.group(4))
        m = re.search(r"\b(" + "|".join(NUMBER_WORDS) + r")\s+" + _RATE, clause, re.IGNORECASE)
        if m:  # 'eight 200G NICs per server'
            n = NUMBER_WORDS[m.group(1).lower()] * (per_node if per_gpu else 1)
            return n, _rate_Bps(m.group(2), m.group(3), m.group(4))
        m = re.search(_RATE + r"[^;,()]*per\s+gpu", clause, re.IGNORECASE)
        if m:
            return per_node, _rate_Bps(m.group(1), m.group(2), m.group(3))
    for clause in clauses:
        m = re.search(_RATE + r"[^;,()]*per\s+(?:node|server|host)", clause, re.IGNORECASE)
        if m:
            return per_node, _rate_Bps(m.group(1), m.group(2), m.group(3)) / per_node
    gen = re.search(r"\b(xdr|ndr|hdr|edr)\b", link, re.IGNORECASE)
    if gen:
        return per_node, IB_GENERATIONS[gen.group(1).lower()] * 1e9 / 8
    if rate := next((m.group(0) for c in clauses if (m := re.search(_RATE, c, re.IGNORECASE))), None):
        raise SpecError("inter_node_link", f"{link!r}: a rate ({rate}) with no NIC count and not per GPU or per node "
                                           "(write e.g. '8x 100 Gbps per node' or '100 Gbps per GPU')")
    return None


def stated(r: dict, key: str) -> bool:
    """Whether the row fills the optional column ``key`` (else the caller's rule decides)."""
    return not NOT_STATED.match(r.get(key) or "")


def _explicit_recipe(r: dict, training: dict) -> dict:
    """The training mapping with the row's explicit recipe columns (module docstring) in place of the rules
    (a stated ``dtype`` is taken as written: the ``precision`` text is then not read)."""
    for key in ("framework", "dtype", "block_code", "titan_norm"):
        if stated(r, key):
            training[key] = r[key].strip()
    for key in ("flash_attention", "dropout", "overlap_p2p", "overlap_grad_reduce", "compile"):
        if stated(r, key):
            training[key] = yes_no(r, key)
    for key in ("grad_dtype_bytes", "flash_attention_version"):
        if stated(r, key):  # a stated 0 is refused by name, not read as the spec's 'default' (an empty cell)
            training[key] = size_or(r, key, 0)
    return training


def whole(r: dict, key: str) -> int | None:
    """A whole-number cell: None when it says the value is not given (the caller's default applies); a number as
    ``integer`` reads it ('2,048', '2048.0'), optionally followed by a parenthetical remark ('8 (within node)');
    anything else is an error naming the column -- a fraction or a word in ``seq_len`` would otherwise fall back
    to the default without a word."""
    text = (r.get(key) or "").strip()
    if NOT_STATED.match(text):
        return None
    v = integer(re.sub(r"\s*\(.*\)$", "", text))
    if v is None:
        raise SpecError(key, f"{text!r} is not a whole number")
    return v


def size_or(r: dict, key: str, default: int) -> int:
    """A size cell (``seq_len``, ``vocab``, ``ffn_hidden``, a byte width): ``default`` only when the cell is empty or
    says the value is not given; a stated 0 or negative value is an error naming the column, never the default."""
    v = whole(r, key)
    if v is None:
        return default
    if v <= 0:
        raise SpecError(key, f"{r.get(key)!r} is not positive (leave the cell empty for the default)")
    return v


MODEL_COLUMNS = ("layers", "hidden", "heads")  # the columns model_mapping reads from every row


def model_mapping(r: dict) -> dict:
    """The ModelSpec mapping of a row: its architecture columns, GPT-style unless ``model_name`` names a
    Llama-style family (module docstring); ffn_hidden 4h and vocab 51,200 when absent (GPT-3 values)."""
    hidden = integer(r["hidden"])
    heads = integer(r["heads"])
    model = {"name": r.get("model_name") or r["row_id"], "num_layers": integer(r["layers"]), "hidden": hidden,
             "num_heads": heads, "ffn_hidden": size_or(r, "ffn_hidden", 4 * hidden),
             "vocab_size": size_or(r, "vocab", 51200), "max_seq_len": size_or(r, "seq_len", 2048)}
    kv = whole(r, "kv_heads")
    if kv is not None and kv != heads:
        model["num_kv_heads"] = kv
    if any(k in (r.get("model_name") or "").lower() for k in LLAMA_STYLE):
        model.update(activation="swiglu", norm="rmsnorm", position_embedding="rope", bias=False,
                     tie_embeddings=False)
    return model


_STAGE = r"zero[\s-]*(?:stage[\s-]*)?"
# The stages a ``zero_or_sharding`` cell can name: an explicit ZeRO stage, FSDP's sharding strategies, 'none' first.
ZERO_STAGES = {"0": rf"^\s*none\b|{_STAGE}0\b|no[_\s-]?shard", "1": rf"{_STAGE}1\b",
               "2": rf"{_STAGE}2\b|shard[_\s-]?grad[_\s-]?op|reshard_after_forward\s*=\s*false",
               "3": rf"{_STAGE}3\b|full[_\s-]?shard|fully[\s-]sharded"}
# Words that name a sharding without being a stage ('FSDP' alone is full sharding): negating them is refused too.
SHARDING_WORDS = r"fsdp\d?|deepspeed|zero\b|distributed[\s-]optimizer|sharding"


def zero_stage(r: dict) -> tuple[int, bool]:
    """(ZeRO stage, Megatron distributed optimizer) from ``zero_or_sharding``: the one stage the cell names (an
    explicit ZeRO stage, an FSDP strategy, 'none'), else 3 for FSDP named alone; a cell naming two stages or
    negating a sharding ('none (ZeRO-3 not used)', 'plain DDP (no FSDP)') is refused (cells.named_values)."""
    raw = r.get("zero_or_sharding") or ""
    t = raw.lower()
    if re.search(r"hsdp|hybrid[_\s-]?shard|offload|infinity|zero\+\+|zeropp", t):
        raise SpecError("zero_or_sharding", f"{raw!r}: hybrid sharding, ZeRO-Offload/Infinity and ZeRO++ are not "
                                            "mapped")
    stated = re.search(_STAGE + r"(\d+)\b", t)
    if stated and int(stated.group(1)) > 3:  # ZeRO has stages 0-3 (Rajbhandari et al., arXiv:1910.02054)
        raise SpecError("zero_or_sharding", f"{raw!r}: ZeRO has stages 0 to 3")
    named = named_values("zero_or_sharding", raw, ZERO_STAGES, negatable=SHARDING_WORDS)
    stage = int(named.pop()) if named else 3 if "fsdp" in t else 0
    if stage or re.search(r"no[_\s-]?shard", t):
        return stage, False
    return 0, "distributed optimizer" in t or "distributed-optimizer" in t


def framework_for(r: dict, zero: int, year: int | None) -> str:
    """The framework of the row's era and sharding (module docstring)."""
    t = (r.get("zero_or_sharding") or "").lower()
    fsdp = re.search(r"fsdp|full[_\s-]?shard|fully[\s-]sharded[\s-]data|shard[_\s-]?grad[_\s-]?op|reshard_after", t)
    if zero >= 2 and fsdp and "deepspeed" not in t:
        return "pytorch-fsdp" if year is not None and year <= 2023 else "torch"
    if zero >= 2 or "deepspeed" in t:
        return "deepspeed-2021" if year is not None and year <= 2021 else "deepspeed"
    if year is not None and year <= 2021:
        return "megatron-2021"
    if year == 2022:
        return "megatron-2022"
    return "megatron"


# The two 16-bit formats a ``precision`` cell may name, one at most. fp32 beside one of them is mixed precision's
# master or reduction dtype ('bf16 (fp32 main grads)'); bf16 beside fp8 the dtype of the layers fp8 leaves alone.
SIXTEEN_BIT = {"bf16": r"bf16|bfloat16", "fp16": r"fp16|(?<!b)float16|\bhalf\b"}
DTYPE_WORDS = r"(?:bf16|bfloat16|fp\d+|float\d+|half|e4m3|e5m2|mxfp\d|nvfp\d|tf32|int\d+)\b"


def precision(r: dict) -> str:
    """The training dtype the ``precision`` text names; bf16 when it names none ("mixed precision", empty). A cell
    naming both 16-bit formats, or negating a format ('fp16 (bf16 unsupported on V100)'), is refused."""
    t = (r.get("precision") or "").lower()
    named_values("precision", r.get("precision") or "", SIXTEEN_BIT, negatable=DTYPE_WORDS)
    if re.search(r"fp8|float8|e4m3|e5m2|mxfp8", t):
        return "fp8"
    if "bf16" in t or "bfloat16" in t:
        return "bf16"
    if "fp16" in t or "float16" in t:
        return "fp16"
    if "half" in t:
        return "fp16"
    if re.search(r"\bfp32\b|float32|single precision", t):
        return "fp32"
    if re.search(r"tf32|int\d|fp\d|nvfp|float\d", t):  # a number format named, none of those above
        raise SpecError("precision", f"{r.get('precision')!r} is not a training dtype trainsim models "
                                     "(bf16, fp16, fp8, fp32)")
    return "bf16"


# torchtitan's selective AC with selective_ac_option="op" (its per-op policy: torchtitan/parallelisms/
# parallelize_llama.py, ``_get_custom_policy``; "selective op" in its docs/performance.md tables): trainsim's
# recompute_modules op_sac (cost_models/activations.py, titan_ops.op_sac_rerun).
TORCHTITAN_OP_SAC = re.compile(r"per-op SAC|torchtitan SAC|op-level SAC", re.IGNORECASE)


def recompute_modules(r: dict) -> list[str] | None:
    """["op_sac"] where the ``recompute`` text names torchtitan's per-op selective policy, else None (the
    framework's default modules)."""
    return ["op_sac"] if recompute(r) == "selective" and TORCHTITAN_OP_SAC.search(r.get("recompute") or "") else None


def recompute_stated(r: dict) -> bool:
    """Whether the row says anything about activation recomputation (else the caller's unknowns rule decides)."""
    return not NOT_STATED.match((r.get("recompute") or "").strip().lower())


# Words for recomputation itself: negated ('without activation checkpointing', 'not recomputed') or switched off
# ('activation checkpointing: off', 'AC disabled', 'recompute = False') they say none.
RECOMPUTE_WORDS = r"(?:activation\s+)?(?:recomput\w*|checkpoint\w*)"
RECOMPUTE_OFF = r"(?:" + RECOMPUTE_WORDS + r"|\bac\b)\s*[:=]?\s*(?:off|false|disabled|no|none)\b"
RECOMPUTE_VALUES = {"none": r"^\s*(?:no|none|off|false|disabled)\b|\bnone\b|" + RECOMPUTE_OFF,
                    "selective": r"selective", "full": r"\bfull\b"}


def recompute(r: dict) -> str:
    """none / selective / full from the ``recompute`` text (none when empty); text that says neither, names two
    ('full (not selective)') or negates one ('non-selective') is an error naming the column."""
    raw = r.get("recompute") or ""
    t = raw.strip().lower()
    if NOT_STATED.match(t):
        return "none"
    named = named_values("recompute", raw.strip(), RECOMPUTE_VALUES)
    if negation(t, RECOMPUTE_WORDS):  # 'none (trained without activation checkpointing)'
        named.add("none")
    if len(named) > 1:
        raise SpecError("recompute", f"{raw!r} says both no recomputation and {' / '.join(sorted(named - {'none'}))}")
    if named:
        return named.pop()
    if re.search(r"\b(?:without|not|no)\b", t):  # 'recomputation: off by default, not used'
        return "none"
    if re.search(r"recomput|checkpoint|\bfull\b|\byes\b|\btrue\b|enabled|\bon\b|\bac\b|uniform|block", t):
        return "full"
    raise SpecError("recompute", f"{raw!r} names neither none, selective nor full recomputation")


def interleave_depth(r: dict, pp: int, layers_per_stage: int | None) -> int | None:
    """``vp_interleave`` when it is a number; 1 when the schedule is stated and not interleaved (2 for DualPipe's
    two chunks per rank); None when the row leaves it open (the caller's unknowns rule decides)."""
    v = whole(r, "vp_interleave") if re.match(r"\s*-?\d", r.get("vp_interleave") or "") else None
    if v is not None:  # a stated 0 or negative depth is rejected by the spec, by name
        return v
    sched = schedule_text(r)
    if "dualpipe" in sched:
        return 2
    if pp <= 1 or _not_interleaved(sched):
        return 1
    return None


def _not_interleaved(sched: str) -> bool:
    if re.search(r"non[\s-]?interleav|no\s+interleav|without\s+interleav|not\s+interleav", sched):
        return True
    return bool(sched) and "interleav" not in sched and bool(re.search(r"1f1b|gpipe|zero|zb|pipedream", sched))


# The schedule families a ``pipeline_schedule`` cell may name, one at most ('interleaved' qualifies 1F1B); schedules
# trainsim has no engine for are refused by name rather than costed as 1F1B.
# PipeDream-Flush is 1F1B itself (Narayanan et al., SC21 Sec. 2.2.1); asynchronous PipeDream and PipeDream-2BW are
# not.
SCHEDULES = {"gpipe": r"gpipe", "1f1b": r"1f1b|pipedream[\s-]*flush", "zb": r"zero[\s-]*bubble|\bzb\b|zb-",
             "dualpipe": r"dualpipe"}
UNMODELLED_SCHEDULES = r"bpipe|chimera|hanayo|pipedream(?![\s-]*flush)|breadth[\s-]first|\bbfs\b"


def schedule_text(r: dict) -> str:
    """The ``pipeline_schedule`` cell, lower case, once it names one schedule trainsim has (or none: empty, 'none',
    'n/a'); SpecError naming the column for an unknown or unmodelled schedule, two schedules, or a negated one."""
    raw = r.get("pipeline_schedule") or ""
    sched = raw.strip().lower()
    if NOT_STATED.match(sched) or re.match(r"none\b", sched):
        return sched
    if m := re.search(UNMODELLED_SCHEDULES, sched):
        raise SpecError("pipeline_schedule", f"{raw!r}: {m.group(0)} is a schedule trainsim has no engine for")
    if not named_values("pipeline_schedule", raw, SCHEDULES) and "interleav" not in sched:
        raise SpecError("pipeline_schedule", f"{raw!r} names no schedule trainsim models (1F1B, interleaved 1F1B, "
                                             "GPipe, zero bubble, DualPipe)")
    return sched


def schedule(r: dict, vpp: int) -> str:
    """The TrainingSpec schedule the ``pipeline_schedule`` text names (interleaved 1F1B when vpp > 1)."""
    sched = schedule_text(r)
    if "dualpipe" in sched:
        return "dualpipev"
    if "gpipe" in sched:
        return "gpipe"
    if re.search(r"zero[\s-]*bubble|\bzb\b|zb-", sched):
        return "zb"
    if vpp > 1 and not _not_interleaved(sched):
        return "interleaved"
    return "1f1b"


def published_step_time(r: dict) -> float | None:
    """Seconds per step as printed, else from the tokens/s the row prints and its tokens per batch (None when
    neither is there or a value is not positive)."""
    step = num(r.get("step_time_s"))
    if step is not None:
        return step if step > 0 else None
    tokens = num(r.get("global_batch_tokens"))
    if tokens is None:
        seqs, seq = integer(r.get("global_batch_seqs")), integer(r.get("seq_len"))
        tokens = float(seqs * seq) if seqs and seq else None
    tps = num(r.get("tokens_per_s"))
    if tps is None:
        per_gpu, gpus = num(r.get("tokens_per_s_per_gpu")), integer(r.get("num_gpus"))
        tps = per_gpu * gpus if per_gpu and gpus else None
    return tokens / tps if tokens and tps and tokens > 0 and tps > 0 else None


def throughput_disagreement(r: dict) -> str | None:
    """Why a row's redundant throughput columns contradict one another, or None: global_batch_tokens against
    global_batch_seqs x seq_len, step_time_s against tokens per batch / tokens_per_s, tokens_per_s against
    tokens_per_s_per_gpu x num_gpus -- each to 2 % (sources round their printed figures)."""
    seqs, seq, gpus = integer(r.get("global_batch_seqs")), integer(r.get("seq_len")), integer(r.get("num_gpus"))
    tokens, step, tps = num(r.get("global_batch_tokens")), num(r.get("step_time_s")), num(r.get("tokens_per_s"))
    per_gpu = num(r.get("tokens_per_s_per_gpu"))
    pairs = [("global_batch_tokens", tokens, "global_batch_seqs x seq_len", seqs * seq if seqs and seq else None),
             ("tokens_per_s", tps, "tokens_per_s_per_gpu x num_gpus", per_gpu * gpus if per_gpu and gpus else None)]
    batch = tokens or (seqs * seq if seqs and seq else None)
    rate = tps or pairs[1][3]
    pairs.append(("step_time_s", step, "tokens per batch / tokens per s", batch / rate if batch and rate else None))
    for name, value, other, derived in pairs:
        if value and derived and value > 0 and derived > 0 and abs(value / derived - 1) > 0.02:
            return f"{name}: {value:g} is not {other} = {derived:.4g}"
    return None


def is_run_row(r: dict) -> bool:
    """A measured run (its step time, printed or from tokens/s, is checked by the caller)."""
    return r.get("record_type") in RUN_RECORD_TYPES


def cp_comm(r: dict) -> str | None:
    """TrainingSpec.cp_comm from the optional ``cp_comm`` column (None when absent: the framework's default,
    specs.training.default_cp_comm)."""
    t = (r.get("cp_comm") or "").strip().lower()
    if NOT_STATED.match(t):
        return None
    if re.search(r"ring|p2p", t):
        return "p2p"
    if re.search(r"torch", t) and re.search(r"all[\s_-]?gather", t):
        return "torch_allgather"
    if re.search(r"all[\s_-]?gather", t):
        return "allgather"
    if re.search(r"a2a|all[\s_-]?to[\s_-]?all|ulysses", t):
        return "a2a"
    raise SpecError("cp_comm", f"{r.get('cp_comm')!r} is none of ring/p2p, allgather, torch all-gather, a2a")


def degree(r: dict, key: str) -> int:
    """A parallel degree: 1 when the cell does not state it; the spec rejects a stated 0 or negative value."""
    v = whole(r, key)
    return 1 if v is None else v


# torchao's FSDP2 float8 all-gather and its per-step scale precompute, as a row's precision or sharding text names
# them (TrainingSpec.float8_all_gather, float8_precompute_scale; specs/fp8_library.py).
FLOAT8_ALL_GATHER = re.compile(r"float8 (fsdp )?all-gather", re.IGNORECASE)
FLOAT8_PRECOMPUTE = re.compile(r"precomputed float8 scales", re.IGNORECASE)


def float8_settings(r: dict) -> dict:
    """The torchao float8 settings a row's ``precision`` and ``zero_or_sharding`` text states (none unless fp8)."""
    text = f"{r.get('precision') or ''} {r.get('zero_or_sharding') or ''}"
    if not FLOAT8_ALL_GATHER.search(text):
        return {}
    if (r["dtype"].strip() if stated(r, "dtype") else precision(r)) != "fp8":
        return {}
    return {"float8_all_gather": True, **({"float8_precompute_scale": True} if FLOAT8_PRECOMPUTE.search(text) else {})}


def scenario_mapping(r: dict, micro_batch: int, vpp: int) -> dict:
    """The scenario mapping of a run row, with the micro-batch and interleaving depth decided by the caller."""
    year = source_year(r)
    gpus, gbs = integer(r["num_gpus"]), integer(r["global_batch_seqs"])
    tp, pp, cp, ep = (degree(r, k) for k in ("tp", "pp", "cp", "ep"))
    zero, dist_opt = zero_stage(r)
    modern = year is None or year >= 2023
    sp = stated(r, "sequence_parallel") and yes_no(r, "sequence_parallel")
    training = {"seq_len": size_or(r, "seq_len", 2048), "global_batch": gbs, "micro_batch": micro_batch,
                "dtype": "" if stated(r, "dtype") else precision(r), "recompute": recompute(r), "zero": zero,
                "schedule": schedule(r, vpp), "flash_attention": modern, "dropout": not modern,
                "framework": framework_for(r, zero, year)}
    _explicit_recipe(r, training)
    if recompute_modules(r):
        training["recompute_modules"] = recompute_modules(r)
    training.update(float8_settings(r))
    if dist_opt:
        training["distributed_optimizer"] = True
    if cp > 1 and cp_comm(r):
        training["cp_comm"] = cp_comm(r)
    if sp and tp > 1:
        training["sequence_parallel"] = True
    layout = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "vpp": vpp}
    dp = whole(r, "dp")
    if dp is not None:  # stated: the spec checks tp x cp x pp x dp against the GPU count
        layout["dp"] = dp
    if stated(r, "dp_shard"):  # HSDP's shard group, DeepSpeed-MiCS's mics_shard_size (specs refuse the rest)
        layout["dp_shard"] = whole(r, "dp_shard")
    return {"model": model_mapping(r), "cluster": cluster_mapping(r, gpus), "layout": layout,
            "training": training}
