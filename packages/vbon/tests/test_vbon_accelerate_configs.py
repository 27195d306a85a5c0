"""The shipped accelerate configs (FSDP, DeepSpeed ZeRO-2) parse with accelerate's own loader, and its
launcher turns them into the FSDP / DeepSpeed settings the README promises.

FSDP itself cannot run on CPU through accelerate (1.15): its FSDP plugin needs a CUDA/XPU/... device, and
with ``ACCELERATE_USE_FSDP=true`` on CPU ``Accelerator`` silently falls back to DDP (``MULTI_CPU``), which
``test_vbon_ddp.py`` already covers. DeepSpeed is not installed. So only parsing and the launcher's
translation are tested here."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "accelerate"


def _launch_args(path: Path):
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    args = launch_command_parser().parse_args(["--config_file", str(path), "train.py"])
    return _validate_launch_command(args)[0]


def test_the_three_configs_are_shipped():
    assert sorted(p.name for p in CONFIGS.glob("*.yaml")) == ["deepspeed-zero2.yaml", "fsdp.yaml"]


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
    assert env["FSDP_USE_ORIG_PARAMS"] == "true"
    layer = env["FSDP_TRANSFORMER_CLS_TO_WRAP"]
    assert isinstance(getattr(modeling_llama, layer), type)  # the wrapped class exists for Llama-3.1-8B


@pytest.mark.parametrize("stage", [2])
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


def test_trainer_refuses_zero3_and_fsdp2():
    """Rollouts need the whole policy on each rank: ZeRO-3 and FSDP2 are refused with the config to use."""
    from types import SimpleNamespace

    from accelerate.utils import DistributedType

    from iclr25.vbon.trainer import check_sharding

    ds = lambda z: SimpleNamespace(distributed_type=DistributedType.DEEPSPEED,  # noqa: E731
                                   state=SimpleNamespace(deepspeed_plugin=SimpleNamespace(zero_stage=z)))
    fsdp = lambda v: SimpleNamespace(distributed_type=DistributedType.FSDP,  # noqa: E731
                                     state=SimpleNamespace(fsdp_plugin=SimpleNamespace(fsdp_version=v)))
    with pytest.raises(ValueError, match="deepspeed-zero2.yaml"):
        check_sharding(ds(3))
    with pytest.raises(ValueError, match="fsdp_version: 1"):
        check_sharding(fsdp(2))
    for ok in (ds(2), fsdp(1), SimpleNamespace(distributed_type=DistributedType.MULTI_CPU, state=None)):
        check_sharding(ok)
    accum = SimpleNamespace(distributed_type=DistributedType.DEEPSPEED, gradient_accumulation_steps=4,
                            state=SimpleNamespace(deepspeed_plugin=SimpleNamespace(zero_stage=2)))
    with pytest.raises(ValueError, match="gradient_accumulation_steps is 4.*set gradient_accumulation_steps: 1"):
        check_sharding(accum)


def test_readme_launch_commands_name_the_shipped_files():
    readme = (CONFIGS.parents[1] / "README.md").read_text(encoding="utf-8")
    for p in CONFIGS.glob("*.yaml"):
        assert f"accelerate launch --config_file packages/vbon/configs/accelerate/{p.name}" in readme, p.name
