"""The measured-memory dataset (trainsim/data/validation/memory_runs.csv, `validate --dataset memory`).

Rows are checked against the CSV read independently with the csv module and against their sources (row ids and
tables cited); the accuracy guard records what the current memory model gives, through the public prediction path.
"""

from __future__ import annotations

import csv
from types import SimpleNamespace

import pytest

from trainsim.cli.main import main
from trainsim.data import validation_path
from trainsim.validation.datasets import load_dataset
from trainsim.validation.memory_runs import MEMORY_METRICS, GiB, load_memory, memory_case, predicted_gib
from trainsim.validation.validate import default_predict_fn, render_text, validate


@pytest.fixture(scope="module")
def raw_rows():
    with open(validation_path("memory_runs.csv"), newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def dataset():
    return load_dataset("memory")


@pytest.fixture(scope="module")
def report(dataset):
    return validate(dataset, predict_fn=default_predict_fn())


def test_loader_reads_every_row_and_every_scenario_builds(raw_rows, dataset):
    assert len(raw_rows) >= 65
    assert [c.row_id for c in dataset.cases] == [r["row_id"] for r in raw_rows]
    assert len({c.row_id for c in dataset.cases}) == len(raw_rows)
    # the runs that kept their activation checkpoints in host memory (DeepSpeed --checkpoint-in-cpu) are shown, not
    # compared: trainsim keeps every checkpoint on the GPU
    host = [r["row_id"] for r in raw_rows if r["activation_checkpoints"] == "host"]
    assert host == ["dsi22_gpt100b_z3off_mb4", "dsi22_gpt100b_z3off_mb8", "dsi22_gpt100b_z3off_mb16",
                    "bs21_meg_ds_z3_52b_tp4_alloc", "bs21_meg_ds_z3_52b_tp4_resv"]
    assert [c.row_id for c in dataset.cases if c.skip_reason or c.scenario is None] == host
    assert all("activation_checkpoints: host" in c.skip_reason for c in dataset.cases if c.row_id in host)
    for r, c in zip(raw_rows, dataset.cases):
        assert c.published == float(r["peak_memory_gib"])
        assert c.scenario is None or c.scenario.num_gpus == int(r["num_gpus"])
        assert r["memory_metric"] in MEMORY_METRICS
        for col in ("source_title", "source_locator", "read_from", "source_type", "confidence", "unknowns"):
            assert r[col].strip(), f"{r['row_id']}: {col} is empty"


def test_torchtitan_table1_fsdp_row_equals_its_source(dataset):
    """torchtitan benchmarks/llama3_h100_202412_torchtitan.md Table 1, row 'FSDP | 5,762 | 82.4': Llama 3.1 8B,
    8 GPUs, FSDP, local batch 2 (global 16), selective AC, 82.4 GiB (torchtitan logs max_reserved_gib); the
    Grand Teton H100 has 96 GB HBM2e."""
    case = next(c for c in dataset.cases if c.row_id == "tt24_t1_fsdp")
    s = case.scenario
    assert case.published == 82.4 and case.category == "torch FSDP2"
    assert (s.num_gpus, s.training.micro_batch, s.training.global_batch, s.training.seq_len) == (8, 2, 16, 8192)
    assert (s.training.zero, s.training.framework, s.training.recompute, s.training.dtype) == (3, "torch", "selective",
                                                                                              "bf16")
    m = s.model
    assert (m.num_layers, m.hidden, m.num_heads, m.kv_heads, m.ffn, m.vocab_size) == (32, 4096, 32, 8, 14336, 128256)
    assert s.cluster.gpu.memory_bytes == 96 * (1 << 30)
    assert "resv" in case.label


def test_zero_bubble_interleaved_row_equals_its_source(dataset):
    """Qi et al. 2024 Tables 3-4: 28.3B (62 layers, 48 heads, hidden 6144, seq 1024), 32 stages, micro-batch 1,
    1F1B-I with one layer per chunk: 58 GB. First and last stage hold one layer fewer, so (62 + 2) / 32 = 2 chunks."""
    case = next(c for c in dataset.cases if c.row_id == "zb24_28.3B_1F1B-I")
    s = case.scenario
    assert case.published == 58.0 and case.category == "Megatron"
    assert (s.layout.pp, s.layout.vpp, s.layout.tp, s.training.micro_batch, s.training.schedule) == (
        32, 2, 1, 1, "interleaved")
    assert (s.model.num_layers, s.model.hidden, s.model.num_heads, s.training.seq_len) == (62, 6144, 48, 1024)


def test_bloom_production_layout_row_equals_its_source(dataset):
    """BigScience tr11-176B-ml chronicles-prequel, 'Rebalancing layers', NHIDDEN=14336 / NLAYERS=70 table, row
    DP 8 TP 4 PP 12 MBS 2 NHEADS 112 GBS 2048: 59GB (BLOOM's final layout); BF16_Optimizer: fp32 gradients (4 bytes)
    and a ZeRO-1 equivalent over the 8 replicas; 48 nodes x 8 A100 80GB."""
    case = next(c for c in dataset.cases if c.row_id == "bloom22_h14336_l70_a112_tp4pp12_mb2")
    s = case.scenario
    assert case.published == 59.0 and case.category == "DeepSpeed ZeRO-1"
    assert (s.num_gpus, s.layout.tp, s.layout.pp, s.layout.dp, s.training.micro_batch, s.training.global_batch) == (
        384, 4, 12, 8, 2, 2048)
    assert (s.model.hidden, s.model.num_layers, s.model.num_heads, s.model.vocab_size) == (14336, 70, 112, 250880)
    assert (s.training.zero, s.training.grad_bytes, s.training.recompute, s.training.framework) == (1, 4, "full",
                                                                                                   "deepspeed")


def test_zero3_rows_with_host_checkpoints_equal_their_sources(raw_rows, dataset):
    """DeepSpeed issue #1830 (ZeRO-Infinity, 2022-03-14): GPT with hidden 10240, 128 heads, 80 layers, MP 1 on 4 A100
    80GB, checkpointing every layer, parameters and optimizer offloaded; 'mini-batch 8: ... [actual] 31GB'
    (nvidia-smi); sequence 1024 and fp16 from the launcher it names (ds_pretrain_gpt2-zero3.sh). BigScience's
    Megatron-DeepSpeed ZeRO-3 log (meg_ds_zero_gpt2_perf_n16_nbs48_ms48.out): 52B (8192 x 64 layers, 32 heads), TP 4
    on 64 V100, micro-batch 48, 'max allocated: 26118.2294921875' MB. Both ran with --checkpoint-in-cpu."""
    from trainsim.validation.memory_runs import scenario_mapping
    rows = {r["row_id"]: r for r in raw_rows}
    case = next(c for c in dataset.cases if c.row_id == "dsi22_gpt100b_z3off_mb8")
    assert case.published == 31.0 and "activation_checkpoints: host" in case.skip_reason
    raw = scenario_mapping(rows["dsi22_gpt100b_z3off_mb8"])
    assert (raw["layout"]["tp"], raw["layout"]["dp"], raw["training"]["micro_batch"], raw["training"]["seq_len"]) == (
        1, 4, 8, 1024)
    assert (raw["model"]["hidden"], raw["model"]["num_layers"], raw["model"]["num_heads"]) == (10240, 80, 128)
    assert (raw["training"]["zero"], raw["training"]["offload_optimizer"], raw["training"]["offload_params"],
            raw["training"]["recompute"], raw["training"]["framework"]) == (3, True, True, "full", "deepspeed")
    case = next(c for c in dataset.cases if c.row_id == "bs21_meg_ds_z3_52b_tp4_alloc")
    assert case.published == pytest.approx(26118.2294921875 / 1024) and case.skip_reason
    raw = scenario_mapping(rows["bs21_meg_ds_z3_52b_tp4_alloc"])
    assert (raw["layout"]["tp"], raw["layout"]["dp"], raw["training"]["micro_batch"], raw["training"]["zero"],
            raw["training"]["offload_optimizer"], raw["model"]["vocab_size"]) == (4, 16, 48, 3, False, 50688)


def test_fairseq_fsdp_offload_row_equals_its_source(dataset):
    """fairseq examples/fully_sharded_data_parallel/README.md, '13B params on 8 V100 GPUs': transformer_lm_gpt3_13,
    --tokens-per-sample 2048 --batch-size 8, --cpu-offload --checkpoint-activations --fp16, gb_free 9.3 of the
    V100-SXM2-32GB's 31.75 GiB (fairseq logs total_memory_in_GB - max_memory_allocated). The log prints
    13,110,865,920 parameters: the row's untied 50,272 vocabulary gives that less fairseq's two padding positions
    (2 x 5120)."""
    case = next(c for c in dataset.cases if c.row_id == "fsq21_gpt3_13b_8gpu_cpuoffload")
    s = case.scenario
    assert case.published == pytest.approx(31.75 - 9.3) and case.category == "torch FSDP1 + offload"
    assert s.model.total_params() == 13_110_865_920 - 2 * 5120
    assert (s.num_gpus, s.layout.dp, s.training.micro_batch, s.training.seq_len, s.training.global_batch) == (
        8, 8, 8, 2048, 64)
    assert (s.training.zero, s.training.offload_optimizer, s.training.offload_params, s.training.recompute,
            s.training.dtype, s.training.dropout) == (3, True, True, "full", "fp16", False)
    assert s.cluster.gpu.memory_bytes == int(31.75 * (1 << 30)) and "alloc" in case.label


def test_one_run_on_three_counters(dataset):
    """The Megatron GPT-345M log (read_file id 16669093845): max allocated 8696.85 MB, max reserved 8786 MB,
    nvidia-smi 9652 MiB per process -- one scenario, three published bases, in MiB / 1024."""
    rows = {c.row_id: c for c in dataset.cases if c.row_id.startswith("mlm23_345m_dp4_")}
    assert rows["mlm23_345m_dp4_alloc"].published == pytest.approx(8696.8515625 / 1024, abs=1e-3)
    assert rows["mlm23_345m_dp4_resv"].published == pytest.approx(8786.0 / 1024, abs=1e-3)
    assert rows["mlm23_345m_dp4_smi"].published == pytest.approx(9652 / 1024, abs=1e-3)
    dumps = [c.scenario.model_dump(exclude={"name"}) for c in rows.values()]
    assert dumps[0] == dumps[1] == dumps[2]
    s = rows["mlm23_345m_dp4_alloc"].scenario
    assert (s.layout.dp, s.training.dtype, s.training.flash_attention, s.model.tie_embeddings) == (4, "fp16", False,
                                                                                                   True)


def test_predicted_gib_takes_the_counter_the_source_printed():
    """peak_bytes is the fallback; a model that reports the counter separately is compared on it (torch's peak
    active bytes on the allocated figure)."""
    bare = SimpleNamespace(peak_bytes=10 * GiB)
    assert predicted_gib(bare, "reserved peak") == 10.0
    assert predicted_gib(bare, "not stated") == 10.0
    split = SimpleNamespace(peak_bytes=10 * GiB, peak_reserved_bytes=12 * GiB, peak_allocated_bytes=9 * GiB)
    assert predicted_gib(split, "reserved peak") == 12.0
    assert predicted_gib(split, "allocated peak") == 9.0
    assert predicted_gib(split, "active peak") == 9.0
    assert predicted_gib(split, "nvidia-smi") == 10.0


def test_summary_per_measured_counter(raw_rows, dataset, capsys):
    """A stand-in model that predicts one constant per counter (allocated 10, reserved 20, device 30, peak 40 GiB):
    each row's error is then C / published - 1, and the summary of each counter group is the mean |error| over the
    CSV's rows on that counter (read with the csv module), allocated and active peaks together; the host-checkpoint
    rows are skipped before any prediction. The same groups reach the text report and --json."""
    const = {"allocated peak": 10.0, "active peak": 10.0, "reserved peak": 20.0, "nvidia-smi": 30.0,
             "not stated": 40.0}
    group = {"allocated peak": "allocated/active peak", "active peak": "allocated/active peak",
             "reserved peak": "reserved peak", "nvidia-smi": "nvidia-smi", "not stated": "not stated"}
    model = SimpleNamespace(peak_allocated_bytes=10 * GiB, peak_reserved_bytes=20 * GiB, peak_device_bytes=30 * GiB,
                            peak_bytes=40 * GiB)
    rep = validate(dataset, predict_fn=lambda scenario: model)
    expected: dict[str, list[float]] = {}
    for r in raw_rows:
        if (r["activation_checkpoints"] or "").strip() == "host":
            continue
        m = r["memory_metric"].strip()
        expected.setdefault(group[m], []).append(abs(const[m] / float(r["peak_memory_gib"]) - 1) * 100)
    got = rep.by_counter()
    assert list(got) == sorted(expected)  # allocated/active, not stated, nvidia-smi, reserved
    for name, errs in expected.items():
        assert got[name]["rows"] == len(errs)
        assert got[name]["mape_pct"] == pytest.approx(sum(errs) / len(errs), rel=1e-9)
        assert got[name]["worst_pct"] == pytest.approx(max(errs), rel=1e-9)
    assert sum(v["rows"] for v in got.values()) == len(rep.compared)
    assert rep.to_json()["by_counter"] == got
    line = "  MAPE by counter: " + ", ".join(f"{name} {v['mape_pct']:.2f}%" for name, v in got.items())
    assert line in render_text(rep).splitlines()


def test_bad_cells_skip_the_row_naming_the_column(raw_rows):
    row = dict(raw_rows[0])
    assert "memory_metric" in memory_case({**row, "memory_metric": "peak"}).skip_reason
    assert "offload" in memory_case({**row, "offload": "gpu"}).skip_reason
    assert "activation_checkpoints" in memory_case({**row, "activation_checkpoints": "cpu"}).skip_reason
    assert "flash_attention" in memory_case({**row, "flash_attention": "maybe"}).skip_reason
    assert "peak_memory_gib" in memory_case({**row, "peak_memory_gib": "-3"}).skip_reason
    assert "gpu_memory_gib" in memory_case({**row, "gpu_memory_gib": "0"}).skip_reason
    # an unreadable optional cell is refused, not read as empty (the preset's 80 GB, the derived CUDA context)
    for column, text in (("gpu_memory_gib", "lots"), ("cuda_context_mib", "abc"), ("grad_bytes", "0"),
                         ("recompute", "full, not selective")):
        why = memory_case({**row, column: text}).skip_reason
        assert why and f"{column}: {text!r}" in why, why
    off = memory_case({**row, "offload": "optimizer+params"})  # FSDP's CPUOffload moves both
    assert off.scenario.training.offload_optimizer and off.scenario.training.offload_params
    assert off.category == "torch FSDP2 + offload"
    assert "offload" in memory_case({**row, "offload": "optimizer"}).skip_reason  # FSDP cannot offload only one


def test_a_csv_path_in_this_schema_loads_as_memory_rows(tmp_path, raw_rows):
    p = tmp_path / "mine.csv"
    with open(p, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(raw_rows[0]))
        w.writeheader()
        w.writerows(raw_rows[:2])
    d = load_dataset(str(p))
    assert d.metric == "peak_memory_gib" and [c.row_id for c in d.cases] == [r["row_id"] for r in raw_rows[:2]]
    assert load_memory(p).name == "memory"


def test_accuracy_today(report):
    """Guard at what the memory model gives (framework model states, named runtime terms; each row compared on
    its own counter: allocated/active rows with Prediction.peak_allocated_bytes, reserved rows with
    peak_reserved_bytes, nvidia-smi rows with the device peak; torchtitan's per-op SAC rows as recompute_modules
    op_sac; DeepSpeed's BF16_Optimizer keeping bf16 grads beside its fp32 ones; torchtitan's eager fp32 loss
    workspace, loss_parallel's on TP, not overlapping the recompute working set; the caching allocator's cached
    blocks at the loss's peak; DeepSpeed's pipeline keeping each in-flight stage output; BLOOM's measured CUDA
    context, embedding LayerNorm and the bf16 copy of the fp32 gradient DeepSpeed's pipeline engine all-reduces;
    the NCCL communicators Megatron and DeepSpeed use beyond one per parallel dimension; Megatron's persistent
    "mpu" buffer under unfused attention; Megatron-Core DDP's start-up peak with the distributed optimizer; the K/V
    block Transformer Engine's ring context parallelism saves; PR #165's fp32 logits kept through the backward;
    FSDP's sharded gradients off the activation peak and cached in the reduce-scatter stream's pool; reserved
    memory capped at what the device leaves the allocator; the segments Megatron's Adam states, created at the
    first step, take from the freed activations, replayed through the caching allocator; torch.compile'd blocks
    as AOTAutograd's partitioner saves them, TrainingSpec.compile; the CUDA context's per-process driver state and
    module images measured on an H200, runtime_memory.CUDA_DRIVER_AND_MODULES_BYTES; the 2 MiB segment rounding of
    Megatron's per-tensor 16-bit and fp32 main parameters, state_rounding.py; torchtitan's uncompiled Llama
    blocks as its eager code saves them, activations.py impl "titan"; FSDP's side-stream pools --
    FSDP1's reduce-dtype gradient copies, the reduce-scatter inputs of PR #165's FSDP2 (before pytorch/pytorch#129721)
    and FSDP2's all-gather outputs -- replayed through the caching allocator, fsdp_stream_pools.py; loss_parallel's forward holding the fp32 copy,
    the shifted logits and their exp beside the caller's bf16 logits, activations.LOSS_PARALLEL_FORWARD_BYTES; NCCL's
    per-process state and a one-GPU Megatron run's one-rank world communicator, measured on an H200,
    runtime_memory.NCCL_PROCESS_STATE_BYTES / NCCL_ONE_RANK_COMM_BYTES; the last block's unfused torch-softmax
    backward under full recompute, softmax_backward_peak.py; the op-by-op allocation replay of torchtitan's step under
    per-op SAC, op_sac_trace.py): 60 rows, MAPE 3.02 %, worst -8.8 % (the June 2025 H200 run on 64 GPUs);
    by framework: Megatron 3.7 % (21 rows, 20 low: the GPT-2 XL mb 1 runs on nvidia-smi 6.6-7.3 %, the first-step
    replay adds nothing there; GPT-2 large mb 64 2-5 %; the zero-bubble rows 0.4-6 %), Megatron + CPU optimizer
    offload +6.7 % (1 row), torch FSDP2 2.55 % (21), torch FSDP1 2.1 % (4), DeepSpeed ZeRO-1 (BLOOM's BF16_Optimizer,
    nvidia-smi) 3.05 % (11), fairscale FSDP with CPU offload (fairseq's GPT-3 13B example on 1 and 8 V100, allocated)
    +0.4 % (2 rows: its peak is the last block's softmax backward in torch's F.multi_head_attention_forward, a
    16-bit softmax whose torch <= 1.10 backward keeps its input; the model's FSDP1 behaviours are torch's, not
    fairscale's of 2021, and agree with its root unit kept gathered). torchtitan's PR #165 FSDP2 active-peak rows are within
    0.4 % (at the loss's backward FSDP2 holds only the root and the last block, left unsharded after forward), its
    FSDP2 eager reserved-peak rows +0.0 % (SAC) and +3.6 % (AC), FSDP1 ones (torchtitan's block code) +0.7 % (AC)
    and -6.7 % (SAC: FSDP1's further reserve under per-op SAC is not in torch's trace); PR #165's compile rows -1.5 % (SAC
    mb 8), +2.1 % (SAC mb 16), -1.0 % (no AC) and +7.5 % (AC: with the reduce-scatter pool counted the full-AC
    rows' cached blocks at the loss come out high, not attributed); the late-2024 torch.compile per-op SAC rows
    are within 2.5 % (the partitioner drops the unread w2 output; they were 5-8 % high without it), the June 2025
    H200 rows 6.7-8.8 % low (their float8 FSDP all-gather is not modelled; from 32 to 64 ranks the reserved
    peak falls 0.99 GiB where the sharded states and gradients fall 2.3 GiB, not attributed); the late-2024 full-AC compile rows
    (whose saved bytes compile does not change) stay 2.7-3.5 % high and its 70B FSDP x TP 8 row is 4.2 % low.
    FSDP2's transient terms are the three moments of cost_models/fsdp2_peak.py (held against FSDPMemTracker's
    peak in tests/test_memory_oracle.py): the root unit gathered once per pass, the blocks double-buffered --
    torchtitan wraps the embedding and the output layer in the root unit in every version these rows cite
    (PR #165 of March 2024, late 2024, June 2025; the separate wrapping of pytorch/torchtitan#1094 merged later). The issue's targets (MAPE
    <= 2 % on allocated, <= 5 % on reserved / nvidia-smi, worst <= 8 %) are not met: strict xfail below. The five
    DeepSpeed ZeRO-3 rows (issue #1830 with offload, BigScience's 52B without) kept their activation checkpoints
    in host memory and are skipped: predicted as if on the GPU they came out -10.9 / -8.5 / +0.4 % and +186 /
    +165 %, the checkpoints being 37-49 % and 66 % of those predictions."""
    assert len(report.compared) == len(report.dataset.cases) - 5 and len(report.skipped) == 5
    assert report.mape_pct <= 3.1
    cats = report.by_category()
    assert {k: v["rows"] for k, v in cats.items()} == {"Megatron": 21, "Megatron + offload": 1, "torch FSDP2": 21,
                                                        "torch FSDP1": 4, "DeepSpeed ZeRO-1": 11,
                                                        "torch FSDP1 + offload": 2}
    assert cats["Megatron"]["mape_pct"] <= 3.8
    # GPT-2 large, mb 64 (nvidia-smi): the Adam states split the freed activation segments at the first step
    for rid, err in (("vs25_gpt2l_tp2", -2.3), ("vs25_gpt2l_tp2_sp", -2.9), ("vs25_gpt2l_pp2", -2.8)):
        assert next(r for r in report.compared if r.row_id == rid).error_pct == pytest.approx(err, abs=0.5)
    assert cats["torch FSDP2"]["mape_pct"] <= 2.6
    # the 70B FSDP x TP 8 run: loss_parallel's forward (three fp32 vocabulary shards beside the bf16 logits)
    assert next(r for r in report.compared if r.row_id == "tt24_t4_2d").error_pct == pytest.approx(-4.2, abs=1.0)
    assert cats["torch FSDP1"]["mape_pct"] <= 2.2
    # PR #165's per-op SAC runs (reserved): the compute stream's cached bytes from the op-by-op replay of
    # torchtitan's step (op_sac_trace.py, 4.29 GiB, torch's own trace one for one); FSDP1 runs torchtitan's block
    # code (block_code column). FSDP1's remaining -6.7 % (4.3 GiB more reserved than FSDP2 at the same allocated
    # peak, against 0.3 GiB with full AC) is not in the trace
    for rid, err in (("tt165_fsdp2_sac_resv", 0.0), ("tt165_fsdp1_sac_resv", -6.7)):
        assert next(r for r in report.compared if r.row_id == rid).error_pct == pytest.approx(err, abs=0.5)
    assert cats["DeepSpeed ZeRO-1"]["mape_pct"] <= 3.1
    # the issue's headline row: torchtitan's 82.4 GiB run (reserved peak): eager fp32 loss, its per-op SAC step
    # replayed op by op (op_sac_trace.py: grouped-query attention, late 2024's loss), -0.1 % (-1.6 % with the
    # loss-stage term); the same run on 128 GPUs +0.7 % (-0.0 %)
    row = next(r for r in report.compared if r.row_id == "tt24_t1_fsdp")
    assert row.error_pct == pytest.approx(-0.1, abs=0.5)
    assert next(r for r in report.compared if r.row_id == "tt24_t3_fsdp").error_pct == pytest.approx(0.7, abs=0.5)
    # torch.compile with torchtitan's per-op SAC (TrainingSpec.compile): late 2024 (bf16 and float8), June 2025 on
    # H200 (float8, compiled loss); the eager step's op-by-op replay stands in for the compiled one's cached bytes
    # (op_sac_trace.compiled_stand_in), an upper estimate (-1.6 / -0.4 / -6.7 / -8.8 % with the loss-stage term)
    for rid in ("tt24_t1_compile", "tt24_t1_compile_fp8", "tt24_t3_compile", "tt24_t3_compile_fp8"):
        assert 0.0 <= next(r for r in report.compared if r.row_id == rid).error_pct <= 2.5
    for rid, err in (("tt25_h200_32", 1.4), ("tt25_h200_64", 1.7)):
        assert next(r for r in report.compared if r.row_id == rid).error_pct == pytest.approx(err, abs=0.5)
    # from 32 to 64 ranks the published reserved peak falls 0.99 GiB: the fp32 parameters' and gradients' halves,
    # Adam's lazily created states sitting in cached segments either way (op_sac_trace module doc)
    h200 = {r.row_id: r for r in report.compared if r.row_id.startswith("tt25_h200_")}
    fall = h200["tt25_h200_32"].predicted - h200["tt25_h200_64"].predicted
    assert fall == pytest.approx(h200["tt25_h200_32"].published - h200["tt25_h200_64"].published, abs=0.2)
    # Megatron's CPU optimizer offload (ms-swift, Qwen2.5-72B tp 8): bf16 weights and the fp32 grad buffer stay, and
    # DDP's start-up with the distributed optimizer holds the weights twice (memory.ddp_param_remap_bytes)
    assert next(r for r in report.compared if r.row_id == "swift26_qwen72b_tp8_optoffload").error_pct == \
        pytest.approx(6.7, abs=1.0)
    # fairscale FSDP + CPU offload (fairseq GPT-3 13B, allocated = 31.75 GiB - gb_free 9.3): 1 and 8 GPUs alike,
    # its 16-bit attention softmax (torch's F.multi_head_attention_forward): +0.4 %. Its peak is the last block's
    # softmax backward (40 checkpoints; scores kept by torch <= 1.10's softmax backward, probabilities, their
    # gradient, CUDA softmax_backward's grad * output temporary and the score gradient: five 2.5 GiB tensors;
    # the root unit kept gathered with the output layer's gradient): softmax_backward_peak.py, 22.55 GiB against
    # 22.40-22.50 (gb_free rounded to 0.1)
    for rid in ("fsq21_gpt3_13b_1gpu_cpuoffload", "fsq21_gpt3_13b_8gpu_cpuoffload"):
        assert next(r for r in report.compared if r.row_id == rid).error_pct == pytest.approx(0.4, abs=0.3)
    # the active-peak counter, which carries no allocator reserve (PR #165, Llama 2 7B, mb 8, AC and per-op SAC)
    for rid in ("tt165_fsdp1_ac_active", "tt165_fsdp1_sac_active", "tt165_fsdp2_sac_active", "tt165_fsdp2_ac_active"):
        assert abs(next(r for r in report.compared if r.row_id == rid).error_pct) <= 2.0
    # FSDP2 + full AC (-0.3 %; +3.0 % with the lumped backward term): its peak is the loss's backward, where FSDP2
    # holds only the units left unsharded after forward -- the root (torch before pytorch/pytorch#154704) and the
    # last block (torchtitan), 0.87 GiB -- not the last block's backward's root, two blocks and a block's gradient,
    # 1.62 GiB (fsdp2_peak.activation_peak_gather)
    assert next(r for r in report.compared if r.row_id == "tt165_fsdp2_ac_active").error_pct == pytest.approx(-0.3,
                                                                                                           abs=0.2)


def test_issue_target(report):
    """issue 21 item 3: MAPE <= 5 % and every row within 8 % (the reserved counter's target)."""
    assert report.mape_pct <= 5.0 and report.worst_pct <= 8.0


def test_cli_prints_the_table_and_gates(capsys):
    assert main(["validate", "--dataset", "memory", "--max-mape", "25"]) == 0
    out = capsys.readouterr().out
    assert "tt24_t1_fsdp" in out and "zb24_28.3B_ZB-1p" in out and "Megatron:" in out
    assert main(["validate", "--dataset", "memory", "--max-mape", "2"]) == 1


def test_reserved_peak_stops_at_what_the_device_leaves_the_allocator(raw_rows):
    """PR #165's mb-16 SAC row run eagerly (its compile column cleared): the model's allocated peak plus cached
    blocks exceed the 95.04 GiB part, but the caching allocator frees its cached blocks and retries when
    cudaMalloc fails, so the reserved counter stops at the HBM less the CUDA context and NCCL's buffers
    (Prediction.peak_reserved_bytes); its nvidia-smi view at the HBM itself."""
    from trainsim.cost_models.runtime_memory import runtime_terms
    from trainsim.simulator.predict import predict
    from trainsim.specs import build_scenario
    from trainsim.validation.memory_runs import scenario_mapping
    raw = next(r for r in raw_rows if r["row_id"] == "tt165_fsdp2_sac_compile_mb16_resv")
    mapping = scenario_mapping({**raw, "compile": ""})
    assert "compile" not in mapping["training"]
    scenario = build_scenario(mapping)
    pred = predict(scenario)
    outside = sum(v for k, v in runtime_terms(scenario).items() if k in ("cuda_context", "nccl_buffers"))
    assert pred.peak_allocated_bytes + pred.allocator_cached_bytes > pred.gpu_memory_bytes - outside
    assert pred.peak_reserved_bytes == pytest.approx(pred.gpu_memory_bytes - outside)
    assert pred.peak_device_bytes == pytest.approx(pred.gpu_memory_bytes)
    assert pred.peak_reserved_bytes / GiB == pytest.approx((95.0396 * GiB - outside) / GiB, rel=1e-6)


def test_compile_column_sets_training_compile(dataset, raw_rows):
    """Rows that ran with torch.compile state it in the compile column (TrainingSpec.compile), not in unmodelled."""
    compiled = {r["row_id"] for r in raw_rows if (r.get("compile") or "").strip() == "yes"}
    assert {"tt24_t1_compile", "tt24_t2_cp1", "tt165_fsdp2_noac_compile_resv"} <= compiled
    for r, c in zip(raw_rows, dataset.cases):
        if c.scenario is not None:  # rows skipped for a named reason have no scenario
            assert c.scenario.training.compile == (r["row_id"] in compiled)
        assert "torch.compile" not in (r["unmodelled"] or "")


@pytest.mark.parametrize("peak", ["84377", "200"])
def test_a_peak_above_the_gpus_memory_is_skipped_with_the_reason(raw_rows, peak):
    """A run that held more than its GPU has did not run: a MiB figure typed as GiB (84377) or another part's figure
    is skipped naming the column, not compared as a prediction error."""
    row = dict(raw_rows[0], peak_memory_gib=peak)
    case = memory_case(row)
    assert case.scenario is None and case.skip_reason.startswith(f"peak_memory_gib: {peak} GiB exceeds the")
