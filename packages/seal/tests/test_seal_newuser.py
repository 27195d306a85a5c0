"""New-user trial regressions: a corrupt checkpoint is a clean error, and --resume refuses a reordered D_ft."""

from __future__ import annotations

import pytest

from iclr25.seal import BilevelConfig, SFTConfig, sft, train_selector


def test_resume_refuses_reordered_ft_and_corrupt_checkpoint(tmp_path, new_model, encoded):
    safe, ft = encoded
    cfg = BilevelConfig(batch_size=8, epochs=2, lr_model=1e-3, lr_selector=0.05, sigma0=1.0, sigma_decay=0.2)
    ck = tmp_path / "ck"
    train_selector(new_model(), safe, ft, cfg, checkpoint_dir=ck, stop_after_steps=1, progress=False)
    reordered = ft.subset(list(range(len(ft)))[::-1])      # same length, other order: ω would be misindexed
    with pytest.raises(ValueError, match="another --ft file"):
        train_selector(new_model(), safe, reordered, cfg, checkpoint_dir=ck, resume=True, progress=False)
    with pytest.raises(ValueError, match="another --safe file"):
        train_selector(new_model(), safe.subset(list(range(len(safe)))[::-1]), ft, cfg, checkpoint_dir=ck,
                       resume=True, progress=False)
    (ck / "loop_state.pt").write_bytes(b"junk")
    with pytest.raises(ValueError, match="loop_state.pt is corrupt or truncated"):
        train_selector(new_model(), safe, ft, cfg, checkpoint_dir=ck, resume=True, progress=False)


def test_sft_resume_corrupt_model_state_is_clean_error(tmp_path, new_model, encoded):
    _, ft = encoded
    cfg = SFTConfig(epochs=1, lr=1e-3, batch_size=8)
    ck = tmp_path / "ck"
    sft(new_model(), ft, cfg, checkpoint_dir=ck, stop_after_steps=1, progress=False)
    data = (ck / "model_state.pt").read_bytes()
    (ck / "model_state.pt").write_bytes(data[: len(data) // 3])
    with pytest.raises(ValueError, match="model_state.pt is corrupt or truncated"):
        sft(new_model(), ft, cfg, checkpoint_dir=ck, resume=True, progress=False)


def test_corrupt_official_pt_selector_is_clean_error(tmp_path):
    from iclr25.seal import load_selector

    p = tmp_path / "logits.pt"
    p.write_bytes(b"junk")
    with pytest.raises(ValueError, match="cannot be read as a weights-only torch file"):
        load_selector(p)
