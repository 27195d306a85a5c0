"""Issue 17: the true σ_1 of clipped layers (not the tracked estimate), the warm Ritz refresh, the
final exact clip pass, input checks and guarded loading."""

import pickle
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from iclr25.lotos.clip import SpectralClip, final_clip_, spectral_report, true_top_singular
from iclr25.lotos.config import TrainConfig
from iclr25.lotos.spectral import linear_operator, power_qr, ritz_power_qr
from iclr25.lotos.train import load_ensemble, train_ensemble


def _np_sigma1(layer: nn.Module, in_shape) -> float:
    """Independent: numpy's SVD of the operator matrix built column by column from unit inputs."""
    d = int(np.prod(in_shape))
    with torch.no_grad():
        cols = [linear_operator(layer)(torch.eye(d, dtype=torch.float64)[i].reshape(1, *in_shape)).reshape(-1).numpy()
                for i in range(d)]
    return float(np.linalg.svd(np.stack(cols, 1), compute_uv=False)[0])


@pytest.mark.parametrize("kind", ["zeros", "strided", "circular", "linear"])
def test_true_top_singular_matches_numpy_svd(kind):
    torch.manual_seed(0)
    if kind == "linear":
        layer, shape = nn.Linear(12, 7).double(), (12,)
    else:
        stride = 2 if kind == "strided" else 1
        pad = "circular" if kind == "circular" else "zeros"
        layer, shape = nn.Conv2d(2, 3, 3, stride=stride, padding=1, padding_mode=pad).double(), (2, 6, 6)
    w = SpectralClip(layer, clip=1.0)
    w.train()
    w(torch.randn(1, *shape, dtype=torch.float64))
    got, method = true_top_singular(w)
    assert method == {"zeros": "explicit_svd", "strided": "explicit_svd", "circular": "fft", "linear": "dense_svd"}[kind]
    assert got == pytest.approx(_np_sigma1(layer, shape), rel=1e-6)
    # the large-layer path (block PowerQR to convergence) agrees too
    if kind == "zeros":
        got2, m2 = true_top_singular(w, max_entries=0, tol=1e-12, max_iters=20000)
        assert m2 == "power_qr" and got2 == pytest.approx(got, rel=1e-4)


def test_ritz_refresh_finds_a_direction_that_overtook_the_clipped_one():
    # A = diag(1.0, 1.2, 0.3, ...): the old top vector e1 (now sigma 1.0) is an exact singular vector, so
    # PowerQR warm-started from it alone never leaves it; the block + Rayleigh-Ritz step finds e2 (1.2)
    s = torch.tensor([1.0, 1.2, 0.3, 0.2, 0.1, 0.05], dtype=torch.float64)
    op = lambda x: x * s  # noqa: E731
    v = torch.zeros(1, 6, dtype=torch.float64)
    v[0, 0] = 1.0
    _, s_plain = power_qr(op, v, 10)
    assert float(s_plain[0]) == pytest.approx(1.0, abs=1e-9)
    g = torch.Generator().manual_seed(0)
    block = torch.cat([v, torch.randn(2, 6, generator=g, dtype=torch.float64)])
    V, sig = ritz_power_qr(op, block, 10, k=1)
    assert float(sig[0]) == pytest.approx(1.2, rel=1e-3) and abs(float(V[0, 1])) > 0.999


def test_a_few_hundred_steps_then_true_sigma_within_5_percent_of_C(tmp_path):
    torch.set_num_threads(1)
    cfg = TrainConfig(method="lotos", data="digits", n_train=480, width=8, num_models=2, epochs=20, batch_size=32,
                      clip_every=10, clip_opt_iter=5, clip_at_init=True, device="cpu", quiet=True, out=tmp_path / "e")
    models = train_ensemble(cfg)  # 15 steps/epoch x 20 epochs = 300 steps
    spec = __import__("json").loads((tmp_path / "e" / "spectral.json").read_text())
    for m in models:
        m.train()
        m(torch.rand(1, 1, 8, 8))
        m.eval()
        for r in spectral_report(m):
            assert r["true"] <= 1.05 * r["clip"], r  # every clipped layer, measured exactly
    assert spec["max_true_over_clip_after"] <= 1.0 + 1e-3
    assert spec["max_true_over_clip_before"] >= spec["max_true_over_clip_after"]
    # the saved models are the clipped ones
    back, _ = load_ensemble(tmp_path / "e")
    for m in back:
        m.train()
        m(torch.rand(1, 1, 8, 8))
        assert max(r["true"] for r in spectral_report(m)) <= 1.0 + 1e-3


def test_final_clip_rescales_only_layers_above_C():
    torch.manual_seed(1)
    layer = SpectralClip(nn.Conv2d(1, 2, 3, padding=1), clip=1.0)
    layer.train()
    layer(torch.randn(1, 1, 5, 5))
    with torch.no_grad():
        layer.module.weight.mul_(3.0 / true_top_singular(layer)[0])
    model = nn.Sequential(layer, SpectralClip(nn.Linear(4, 2), clip=1.0))
    with torch.no_grad():
        model[1].module.weight.mul_(0.5 / float(torch.linalg.svdvals(model[1].module.weight)[0]))
    model[1].train()
    model[1](torch.randn(1, 4))
    rows = final_clip_(model)
    assert rows[0]["true_before"] == pytest.approx(3.0, rel=1e-5) and rows[0]["true_after"] == pytest.approx(1.0, rel=1e-5)
    assert rows[1]["scale"] == 1.0 and rows[1]["true_after"] == pytest.approx(0.5, rel=1e-5)


def test_mal_at_or_above_C_warns_and_floats_are_checked():
    with pytest.warns(UserWarning, match="always 0"):
        TrainConfig(method="lotos", mal=1.0, clip=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TrainConfig(method="clip", mal=1.0, clip=1.0)  # the penalty is not used by the clip arm
    for bad in (dict(clip=float("nan")), dict(lr=float("nan")), dict(mal=-1.0), dict(lam=-5.0), dict(width=0),
                dict(momentum=1.0), dict(clip=float("inf"))):
        with pytest.raises(ValueError):
            TrainConfig(**bad)


def test_corrupt_or_pickled_checkpoints_are_clean_errors(tmp_path):
    cfg = TrainConfig(method="orig", data="digits", n_train=64, width=4, num_models=1, epochs=1, device="cpu",
                      quiet=True, out=tmp_path / "ok")
    train_ensemble(cfg)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text((tmp_path / "ok" / "config.json").read_text())
    (bad / "models.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot be read as a weights-only checkpoint"):
        load_ensemble(bad)

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    with open(bad / "models.pt", "wb") as fh:
        pickle.dump({"models": [Evil()]}, fh)
    with pytest.raises(ValueError, match="pickled objects are refused"):
        load_ensemble(bad)
    (bad / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a config written by"):
        load_ensemble(bad)
