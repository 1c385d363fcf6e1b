"""Refusals raised by TrainingSpec's validators name ``training.<field>`` as the error's field, one line, exit 2."""

from __future__ import annotations

import pytest

from trainsim.cli.main import main

BASE = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--seq-len", "4096",
        "--global-batch", "32", "--fast"]


@pytest.mark.parametrize("yaml_training, field", [
    ("{framework: megatron, mixed_precision: autocast}", "training.mixed_precision: autocast is torch.autocast"),
    ("{framework: megatron, cross_entropy: eager_fp32_kept}", "training.cross_entropy: eager_fp32_kept"),
    ("{framework: megatron-2021, distributed_optimizer: true}",
     "training.distributed_optimizer: distributed_optimizer=true"),
    ("{framework: pytorch-fsdp, distributed_optimizer: true}", "training.distributed_optimizer: Megatron-Core's"),
    ("{framework: megatron, block_code: torchtitan}", "training.block_code: torchtitan"),
])
def test_a_validator_refusal_is_prefixed_with_its_field(tmp_path, capsys, yaml_training, field):
    f = tmp_path / "s.yaml"
    f.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 16\n"
                 f"training: {{seq_len: 4096, global_batch: 32, {yaml_training[1:-1]}}}\n")
    rc = main(["predict", str(f), "--fast"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and err.startswith("error: " + field), err


def test_the_cli_flag_path_names_the_field_too(capsys):
    rc = main([*BASE, "--framework", "megatron-2021", "--distributed-optimizer"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and err.startswith("error: training.distributed_optimizer: "), err
