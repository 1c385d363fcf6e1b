"""The vTrain single-node A100 table (unbundled: read from shared/validation, skipped where absent): every row
becomes a Megatron GPT scenario with the settings the source states, and the report groups rows by regime."""

from __future__ import annotations

import pytest
from external_tables import table_path

from trainsim.validation.datasets import load_dataset
from trainsim.validation.validate import validate
from trainsim.validation.vtrain import VTRAIN_FILE, VTRAIN_VOCAB, is_vtrain, padded_vocab


@pytest.fixture(scope="module")
def ds():
    return load_dataset(str(table_path(VTRAIN_FILE)))  # recognised by its columns


def test_rows_become_the_stated_scenarios(ds):
    assert len(ds.cases) == 720 and not ds.skipped
    c = next(c for c in ds.cases if c.row_id == "vt1_1")  # 4 GPUs, gb 16, mb 4, L24, tp1 dp2 pp2, 410.491 ms
    s = c.scenario
    assert c.published == pytest.approx(0.410491)
    assert (s.layout.tp, s.layout.pp, s.dp, s.training.micro_batch, s.training.global_batch) == (1, 2, 2, 4, 16)
    assert (s.model.num_layers, s.model.hidden, s.model.num_heads, s.model.vocab_size) == (24, 2048, 16, 50304)
    assert (s.training.recompute, s.training.schedule, s.training.framework) == ("full", "1f1b", "megatron-deepspeed")
    assert c.regimes == ("micro-batch 4", "TP 1", "layers 24", "hidden 2048")
    # the configs' "inter_node_bandwidth": 800, vTrain's "total bandwidth of inter-node communication in Gbps"
    out = s.cluster.scale_out
    assert out.nics_per_node * out.nic_bw_Bps * 8 == pytest.approx(800e9)


def test_vocab_is_padded_as_megatron_pads_it():
    # Megatron's log for the GPT-2 tokenizer at TP 1: "padded vocab (size: 50257) with 47 dummy tokens (new size:
    # 50304)"; at TP t the multiple is 128 t (_vocab_size_with_padding).
    assert VTRAIN_VOCAB == 50257
    assert [padded_vocab(VTRAIN_VOCAB, t) for t in (1, 2, 4, 8)] == [50304, 50432, 50688, 51200]
    assert padded_vocab(256, 2) == 256


def test_errors_are_reported_per_regime(ds):

    class Fixed:  # predicted = published x 0.9 for TP 8 rows, x 1.0 otherwise
        def __init__(self, t):
            self.step_time_s = t

    by_id = {c.scenario.name: c for c in ds.cases}

    def predict(scenario):
        c = by_id[scenario.name]
        return Fixed(c.published * (0.9 if scenario.layout.tp == 8 else 1.0))

    cats = validate(ds, predict_fn=predict).by_category()
    assert cats["TP 8"]["mape_pct"] == pytest.approx(10.0)
    assert cats["TP 1"]["mape_pct"] == pytest.approx(0.0)
    tp8 = sum(1 for c in ds.cases if c.scenario.layout.tp == 8)
    assert cats["TP 8"]["rows"] == tp8
    assert sum(v["rows"] for k, v in cats.items() if k.startswith("layers ")) == 720


def test_common_run_files_are_not_taken_for_vtrain():
    assert not is_vtrain({"row_id", "num_gpus", "global_batch_seqs", "micro_batch", "hidden", "heads", "layers",
                          "seq_len", "tp", "dp", "pp", "step_time_s", "global_batch"})


RAW_HEADER = ("\ufeff# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,"
              "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)")


def test_the_repositorys_own_table_is_read_as_published(tmp_path):
    """VIA-Research/vTrain data/ground_truth_single.csv as published (a BOM, its own column names, milliseconds):
    ``validate --dataset`` reads it; its rows are the adapter's, numbered by line, the time in seconds."""
    raw = tmp_path / "ground_truth_single.csv"
    raw.write_text(RAW_HEADER + "\n2,16,8,1024,16,24,1024,1,1,2,372.160408\n8,32,4,2048,16,24,1024,2,2,2,219.732754\n"
                   "2,16,8,1024,16,24,1024,1,1,2,n/a\n", encoding="utf-8")
    ours = tmp_path / "ours.csv"
    ours.write_text("row_id,num_gpus,global_batch,micro_batch,hidden,heads,layers,seq_len,tp,dp,pp,step_time_s\n"
                    "vt_2,2,16,8,1024,16,24,1024,1,1,2,0.372160408\n"
                    "vt_3,8,32,4,2048,16,24,1024,2,2,2,0.219732754\n")
    got, want = load_dataset(str(raw)), load_dataset(str(ours))
    assert [c.row_id for c in got.cases] == ["vt_2", "vt_3", "vt_4"]
    assert [c.published for c in got.cases[:2]] == pytest.approx([0.372160408, 0.219732754])
    assert [c.scenario for c in got.cases[:2]] == [c.scenario for c in want.cases]
    assert got.cases[2].skip_reason == "iteration time (ms): 'n/a' is not a positive finite number"
    assert got.cases[0].regimes[-1] == "hidden 1024" and got.cases[1].regimes[-1] == "hidden 2048"
    assert got.title.endswith("on one 8xA100 node (MICRO 2024)") and "ground_truth_single" in got.citation


@pytest.mark.parametrize(("row", "reason"), [
    ("2,16,8,1024,16,24,1024,,1,2,372.1", "tensor parallelism: '' is not a whole number >= 1"),
    ("2,16,8,1024,16,24,1024,1,3,2,372.1",
     "tensor parallelism x pipeline parallelism x data parallelism = 1 x 2 x 3 is not # GPUs 2"),
    ("2,16,8,1024,16,24,1024,1,1,2,372.1,9", "more cells than the header"),
    ("2,16,8,1024,16,24,1024", "fewer cells than the header"),
    ("2,16,8,abc,16,24,1024,1,1,2,5", "hidden size: 'abc' is not a whole number >= 1"),
    ("2,16,8,1024,16,24,1024,1,1,2,-5", "iteration time (ms): must be a finite number >= 0, got -5"),
    ("2,16,8,1024,16,24,1024,1,1,2,", "iteration time (ms): '' is not a positive finite number"),
])
def test_an_unusable_row_of_the_repositorys_table_is_skipped_naming_its_column(tmp_path, row, reason):
    raw = tmp_path / "t.csv"
    raw.write_text(RAW_HEADER + "\n" + row + "\n", encoding="utf-8")
    (case,) = load_dataset(str(raw)).cases
    assert case.skip_reason == reason and case.scenario is None


def test_a_table_with_some_of_the_repositorys_columns_is_refused_naming_the_rest(tmp_path):
    from trainsim.specs.errors import SpecError

    raw = tmp_path / "t.csv"
    raw.write_text("# GPUs,global batch,iteration time (ms)\n2,16,5\n")
    with pytest.raises(SpecError, match="without the column.s. '# layers', 'attention heads'"):
        load_dataset(str(raw))


def test_the_adapters_own_rows_are_checked_the_same_way(tmp_path):
    """A blank TP cell is not read as TP 1, and TP x PP x DP must be the row's GPUs."""
    p = tmp_path / "t.csv"
    p.write_text("row_id,num_gpus,global_batch,micro_batch,hidden,heads,layers,seq_len,tp,dp,pp,step_time_s\n"
                 "a,2,16,8,1024,16,24,1024,,1,2,0.3\nb,4,16,8,1024,16,24,1024,1,1,2,0.3\n")
    a, b = load_dataset(str(p)).cases
    assert a.skip_reason == "tp: '' is not a whole number >= 1"
    assert b.skip_reason == "tp x pp x dp = 1 x 2 x 1 is not num_gpus 4"


@pytest.mark.parametrize(("ids", "message"), [
    (("a", "a"), "row_id 'a' at row 3 repeats row 2"), (("a", ""), "row 3 has an empty row_id"),
])
def test_a_raw_table_with_its_own_row_ids_needs_them_unique_and_filled(tmp_path, ids, message):
    """A repository table with a row_id column of its own keeps those ids, so they must tell the rows apart (as
    the common run schema's must): a repeated or empty id refuses the file, not a row reported as ''."""
    from trainsim.specs.errors import SpecError

    raw = tmp_path / "t.csv"
    rows = [f"{i},8,32,4,2048,16,24,1024,2,2,2,219.7" for i in ids]
    raw.write_text("row_id," + RAW_HEADER.lstrip("\ufeff") + "\n" + "\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(SpecError, match=f"^dataset: .*{message}"):
        load_dataset(str(raw))
    raw.write_text("row_id," + RAW_HEADER.lstrip("\ufeff") + "\n" + "\n".join(r.replace(f"{i},", f"r{n},", 1)
                   for n, (i, r) in enumerate(zip(ids, rows))) + "\n", encoding="utf-8")
    assert [c.row_id for c in load_dataset(str(raw)).cases] == ["r0", "r1"]
