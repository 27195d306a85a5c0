"""New-user trial regressions: train --resume refuses other settings and names a corrupt epoch checkpoint."""

from __future__ import annotations

import pytest
import torch

from iclr25.wm_transfer.models import HiddenConfig
from iclr25.wm_transfer.train import TrainSettings, train_watermark_model


def _setup(tmp_path):
    cfg = HiddenConfig(H=16, W=16, n_bits=8, enc_ch=8, dec_ch=8, msg_ch=4, msg_grid=4, residual_scale=1.0)
    x = torch.rand(40, 3, 16, 16, generator=torch.Generator().manual_seed(0)) * 2 - 1
    ck = tmp_path / "ep.pt"
    train_watermark_model(cfg, x[:32], 0, settings=TrainSettings(epochs=1, batch_size=16), val_images=x[32:],
                          checkpoint=ck)
    return cfg, x, ck


def test_train_resume_refuses_other_settings_and_corrupt_file(tmp_path):
    cfg, x, ck = _setup(tmp_path)
    with pytest.raises(ValueError, match="lr: recorded 0.002, now 0.1"):
        train_watermark_model(cfg, x[:32], 0, settings=TrainSettings(epochs=2, batch_size=16, lr=0.1),
                              val_images=x[32:], checkpoint=ck, resume=True)
    with pytest.raises(ValueError, match="seed: recorded 0, now 5"):
        train_watermark_model(cfg, x[:32], 5, settings=TrainSettings(epochs=2, batch_size=16), val_images=x[32:],
                              checkpoint=ck, resume=True)
    with pytest.raises(ValueError, match="n_train: recorded 32, now 16"):
        train_watermark_model(cfg, x[:16], 0, settings=TrainSettings(epochs=2, batch_size=16), val_images=x[32:],
                              checkpoint=ck, resume=True)
    # --epochs may change
    train_watermark_model(cfg, x[:32], 0, settings=TrainSettings(epochs=2, batch_size=16), val_images=x[32:],
                          checkpoint=ck, resume=True)
    ck.write_bytes(ck.read_bytes()[:500])
    with pytest.raises(ValueError, match="corrupt or truncated"):
        train_watermark_model(cfg, x[:32], 0, settings=TrainSettings(epochs=3, batch_size=16), val_images=x[32:],
                              checkpoint=ck, resume=True)


def test_npz_of_another_size_is_resized_with_a_warning(tmp_path, caplog):
    import numpy as np

    from iclr25.wm_transfer.data import load_npz_images

    p = tmp_path / "x.npz"
    np.savez(p, images=np.zeros((2, 64, 48, 3), dtype=np.uint8))
    with caplog.at_level("WARNING"):
        out = load_npz_images(p, image_size=32)
    assert tuple(out.images.shape) == (2, 3, 32, 32)
    assert "64x48, resized" in caplog.text
