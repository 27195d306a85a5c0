"""The shipped accelerate configs (FSDP, DeepSpeed ZeRO-2/3) parse with accelerate's own loader, and its
launcher turns them into the FSDP / DeepSpeed settings the README promises.

FSDP itself cannot run on CPU through accelerate (1.15): its FSDP plugin needs a CUDA/XPU/... device, and
with ``ACCELERATE_USE_FSDP=true`` on CPU ``Accelerator`` silently falls back to DDP (``MULTI_CPU``), which
``test_q_adapter_ddp.py`` already covers. DeepSpeed is not installed. So only parsing and the launcher's
translation are tested here."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFIGS = Path(__file__).resolve().parents[1] / "src" / "iclr25" / "q_adapter" / "configs" / "accelerate"


def _launch_args(path: Path):
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    args = launch_command_parser().parse_args(["--config_file", str(path), "train.py"])
    return _validate_launch_command(args)[0]


def test_the_three_configs_are_shipped():
    assert sorted(p.name for p in CONFIGS.glob("*.yaml")) == ["deepspeed-zero2.yaml", "deepspeed-zero3.yaml",
                                                              "fsdp.yaml"]


def test_fsdp_config_full_shard_with_transformer_layer_wrap():
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
    from accelerate.utils import DistributedType
    from accelerate.utils.launch import prepare_multi_gpu_env
    from transformers.models.llama import modeling_llama

    cfg = load_config_from_file(str(CONFIGS / "fsdp.yaml"))
    assert isinstance(cfg, ClusterConfig) and cfg.distributed_type == DistributedType.FSDP
    assert cfg.mixed_precision == "bf16" and cfg.num_processes >= 2
    env = prepare_multi_gpu_env(_launch_args(CONFIGS / "fsdp.yaml"))
    assert env["ACCELERATE_USE_FSDP"] == "true" and env["FSDP_VERSION"] == "1"
    assert env["FSDP_SHARDING_STRATEGY"] == "FULL_SHARD"
    assert env["FSDP_AUTO_WRAP_POLICY"] == "TRANSFORMER_BASED_WRAP"
    assert env["FSDP_USE_ORIG_PARAMS"] == "true"  # LoRA: trainable and frozen weights in one FSDP unit
    layer = env["FSDP_TRANSFORMER_CLS_TO_WRAP"]
    assert isinstance(getattr(modeling_llama, layer), type)  # the wrapped class exists for Llama-3.1-8B


@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_configs(stage):
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
    from accelerate.utils import DistributedType

    path = CONFIGS / f"deepspeed-zero{stage}.yaml"
    cfg = load_config_from_file(str(path))
    assert isinstance(cfg, ClusterConfig) and cfg.distributed_type == DistributedType.DEEPSPEED
    assert cfg.deepspeed_config["zero_stage"] == stage and cfg.mixed_precision == "bf16"
    args = _launch_args(path)
    assert args.use_deepspeed and int(args.zero_stage) == stage
    assert int(args.gradient_accumulation_steps) == 1 and args.num_processes == cfg.num_processes
    # the model is loaded before the Accelerator exists, so deepspeed.zero.Init must stay off
    assert str(args.zero3_init_flag).lower() == "false"


def test_readme_launch_commands_name_the_shipped_files():
    from iclr25.q_adapter.presets import ACCELERATE_CONFIGS, preset_path

    readme = (CONFIGS.parents[4] / "README.md").read_text(encoding="utf-8")
    assert sorted(f"accelerate/{p.stem}" for p in CONFIGS.glob("*.yaml")) == sorted(ACCELERATE_CONFIGS)
    for name in ACCELERATE_CONFIGS:
        assert f'accelerate launch --config_file "$(python -m iclr25.q_adapter.presets {name})"' in readme, name
        assert preset_path(name).is_file()
