"""Unit tests: shapes, state, gradient flow, bad input."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from iclr25.lotos import (
    Ensemble,
    SmallConvNet,
    SpectralClip,
    TrainConfig,
    conv_singular_values_fft,
    cross_gain_matrix,
    layer_top_singular,
    lotos_penalty,
    pgd_linf,
    power_qr,
    spectral_layers,
    transferability_matrix,
)
from iclr25.lotos.models import resnet18_nobn
from iclr25.lotos.train import augment


def _net(clip=1.0, seed=0, **kw):
    torch.manual_seed(seed)
    return SmallConvNet(num_classes=10, in_ch=1, width=4, clip=clip, clip_kwargs=dict(seed=seed, **kw),
                        mean=(0.5,), std=(0.5,))


def test_spectralclip_tracks_and_state_dict_roundtrip():
    m = _net(clip_every=2)
    m.train()
    x = torch.rand(3, 1, 12, 12)
    m(x)
    layers = spectral_layers(m, "all")
    assert len(layers) == 5 and len(spectral_layers(m, "conv")) == 4
    assert layers[0].V.shape == (1, 1, 12, 12) and layers[1].V.shape == (1, 4, 12, 12)
    assert layers[-1].V.shape == (1, 8)
    assert layers[0].num_forward == 1
    sd = m.state_dict()
    m2 = _net(seed=1)
    m2.load_state_dict(sd)  # lazily shaped buffers are resized on load
    for a, b in zip(layers, spectral_layers(m2, "all")):
        assert torch.equal(a.V, b.V) and b.num_forward == 1 and int(sd["convs.0.n_forward"]) == 1


def test_eval_forward_does_not_track():
    m = _net().eval()
    m(torch.rand(2, 1, 12, 12))
    assert not spectral_layers(m)[0].initialized


def test_per_forward_power_step_converges_to_top_singular_value():
    torch.manual_seed(0)
    conv = nn.Conv2d(2, 3, 3, padding=1, padding_mode="circular")
    w = SpectralClip(conv, clip=None, init_iters=1).train()
    x = torch.rand(1, 2, 6, 6)
    for _ in range(300):
        w(x)
    assert float(w.sigma[0]) == pytest.approx(float(conv_singular_values_fft(conv.weight, 6)[0]), rel=1e-3)


def test_clipping_during_training_brings_sigma_towards_C():
    torch.manual_seed(0)
    lin = nn.Linear(6, 6)
    with torch.no_grad():
        lin.weight.mul_(10)
    w = SpectralClip(lin, clip=1.0, clip_every=1).train()
    x = torch.rand(4, 6)
    for _ in range(40):
        w(x)
    assert float(torch.linalg.svdvals(lin.weight.detach())[0]) == pytest.approx(1.0, abs=0.06)


def test_penalty_gradient_only_into_weights_and_not_other_arm():
    a, b = _net(seed=0).train(), _net(seed=1).train()
    x = torch.rand(2, 1, 12, 12)
    a(x), b(x)
    p = lotos_penalty([a, b], mal=0.0, lam=1.0)
    assert p.requires_grad and float(p.detach()) > 0
    p.backward()
    for m in (a, b):
        for layer in spectral_layers(m):
            assert layer.module.weight.grad is not None
            assert layer.V.grad is None
        assert m.fc.module.weight.grad is None  # final linear layer is clipped, not orthogonalised


def test_normalize_divides_by_layers_and_pairs():
    ms = [_net(seed=s).train() for s in range(3)]
    x = torch.rand(2, 1, 12, 12)
    for m in ms:
        m(x)
    p = lotos_penalty(ms, mal=0.0, lam=1.0)
    pn = lotos_penalty(ms, mal=0.0, lam=1.0, normalize=True)
    assert float(pn.detach()) == pytest.approx(float(p.detach()) / (4 * 3 * 2), rel=1e-5)


def test_cross_gain_diagonal_is_sigma():
    ms = [_net(seed=s).train() for s in range(2)]
    for m in ms:
        m(torch.rand(2, 1, 12, 12))
    G = cross_gain_matrix(ms)
    assert G.shape == (4, 2, 2)
    for j, layer in enumerate(spectral_layers(ms[0])):
        assert float(G[j, 0, 0]) == pytest.approx(float(layer.sigma[0]), rel=1e-3)


def test_pgd_respects_ball_and_box_and_increases_loss():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    x, y = torch.rand(20, 1, 4, 4), torch.randint(0, 3, (20,))
    xa = pgd_linf(m, x, y, eps=0.1, steps=10, step_size=0.02, generator=torch.Generator().manual_seed(0))
    assert float((xa - x).abs().max()) <= 0.1 + 1e-6
    assert float(xa.min()) >= 0 and float(xa.max()) <= 1
    assert F.cross_entropy(m(xa), y) > F.cross_entropy(m(x), y)


def test_transferability_matrix_shapes():
    torch.manual_seed(0)
    ms = [nn.Sequential(nn.Flatten(), nn.Linear(16, 3)) for _ in range(3)]
    x, y = torch.rand(30, 1, 4, 4), torch.randint(0, 3, (30,))
    r = transferability_matrix(ms, x, y, eps=0.2, steps=5)
    assert r.T.shape == (3, 3) and r.counts.shape == (3, 3)
    assert torch.all((r.T[~torch.isnan(r.T)] >= 0) & (r.T[~torch.isnan(r.T)] <= 1))


def test_augment_shape_and_content():
    x = torch.rand(5, 3, 8, 8)
    out = augment(x, torch.Generator().manual_seed(0), pad=0)
    # no padding: only flips
    for i in range(5):
        assert torch.equal(out[i], x[i]) or torch.equal(out[i], x[i].flip(-1))


def test_resnet18_nobn_builds_and_runs():
    m = resnet18_nobn(clip=1.0, clip_kwargs=dict(init_iters=2)).train()
    assert len(spectral_layers(m, "conv")) == 20  # stem + 16 block convs + 3 shortcuts
    out = m(torch.rand(1, 3, 16, 16))
    assert out.shape == (1, 10)


# --- bad input ---------------------------------------------------------------------------------
def test_ensemble_of_one_raises():
    with pytest.raises(ValueError, match="at least 2"):
        Ensemble([nn.Linear(2, 2)])
    m = _net().train()
    m(torch.rand(1, 1, 12, 12))
    with pytest.raises(ValueError, match="at least 2"):
        lotos_penalty([m])
    with pytest.raises(ValueError, match="at least 2"):
        TrainConfig(method="lotos", num_models=1)


def test_mismatched_layer_counts_raise():
    a = _net().train()
    b = nn.Sequential(SpectralClip(nn.Conv2d(1, 2, 3, padding=1)))
    a(torch.rand(1, 1, 12, 12)), b(torch.rand(1, 1, 12, 12))
    with pytest.raises(ValueError, match="mismatched numbers"):
        lotos_penalty([a, b])


def test_nonlinear_module_raises():
    with pytest.raises(ValueError, match="not a linear map"):
        layer_top_singular(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), (4,))
    with pytest.raises(ValueError, match="input of shape"):
        layer_top_singular(nn.Linear(4, 4), (5,))


@pytest.mark.parametrize("eps", [-0.1, 1.5])
def test_eps_outside_unit_interval_raises(eps):
    with pytest.raises(ValueError, match="outside"):
        pgd_linf(nn.Linear(2, 2), torch.rand(1, 2), torch.zeros(1, dtype=torch.long), eps=eps)


def test_power_qr_bad_k():
    with pytest.raises(ValueError, match="input dimension"):
        power_qr(lambda x: x, torch.randn(3, 2), 1)


def test_black_box_reuses_precomputed_examples():
    from iclr25.lotos.evaluation import black_box_robust_accuracy, make_attack, surrogate_examples

    torch.manual_seed(0)
    x = torch.rand(60, 1, 4, 4)
    w = torch.randn(3, 16)
    y = (x.flatten(1) @ w.T).argmax(1)  # labels the models below mostly get right

    def lin():
        m = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
        with torch.no_grad():
            m[1].weight.copy_(w + 0.3 * torch.randn(3, 16))
            m[1].bias.zero_()
        return m

    sur = [lin() for _ in range(2)]
    tgt = Ensemble([lin() for _ in range(2)])
    a = black_box_robust_accuracy(sur, tgt, x, y, make_attack(0.3, 5, None, 1))
    adv = surrogate_examples(sur, x, y, eps=0.3, steps=5, seed=0)
    b = black_box_robust_accuracy(sur, tgt, x, y, x_advs=adv)
    assert a[2] == b[2] and all(0 <= v <= 1 for v in a[2])  # finite, identical
    with pytest.raises(ValueError, match="x_advs"):
        black_box_robust_accuracy(sur, tgt, x, y, x_advs=adv[:1])


def test_missing_cifar10_names_file(tmp_path, monkeypatch):
    from iclr25.core.data import DataNotFoundError
    from iclr25.lotos.data import load_data

    monkeypatch.setenv("ICLR25_DATA", str(tmp_path))
    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DataNotFoundError, match="cifar-10-batches-py/data_batch_1"):
        load_data("cifar10")
    with pytest.raises(ValueError, match="unknown data set"):
        load_data("mnist")


def test_digits_loader_shapes():
    pytest.importorskip("sklearn", reason="the digits data set needs the [digits] extra")
    from iclr25.lotos.data import load_data

    d = load_data("digits", n_train=100, n_test=50)
    assert d.x_train.shape == (100, 1, 16, 16) and d.x_test.shape == (50, 1, 16, 16)
    assert float(d.x_train.max()) <= 1.0 and d.y_train.dtype == torch.int64
    assert torch.bincount(d.y_train, minlength=10).tolist() == [10] * 10  # class-balanced subset


@pytest.mark.realdata
def test_cifar10_subset_loader():
    import os
    from pathlib import Path

    if not (Path(os.environ.get("ICLR25_DATA", "")) / "cifar10-subset" / "cifar10_subset.npz").is_file():
        pytest.skip("needs cifar10-subset/cifar10_subset.npz under ICLR25_DATA")
    from iclr25.lotos.data import load_data

    d = load_data("cifar10-subset", n_train=200, n_test=100, image_size=16)
    assert d.x_train.shape == (200, 3, 16, 16) and d.x_test.shape == (100, 3, 16, 16)
    assert torch.bincount(d.y_test, minlength=10).tolist() == [10] * 10
    full = load_data("cifar10-subset")
    assert full.x_train.shape == (4000, 3, 32, 32)
    assert abs(float(full.x_train[:, 0].mean()) - 0.4911) < 1e-3  # PROVENANCE.md channel mean


def test_penalty_k2_equals_pairwise_similarity():
    from iclr25.lotos import lotos_similarity

    torch.manual_seed(0)
    ws = []
    for s in range(2):
        w = SpectralClip(nn.Linear(5, 4), clip=None, k=2, seed=s)
        w.init_vectors((5,))
        ws.append(w)
    p = lotos_penalty([nn.Sequential(ws[0]), nn.Sequential(ws[1])], mal=0.3, lam=1.0, layers="all")
    ref = lotos_similarity(ws[0].op, ws[1].op, ws[0].V, ws[1].V, mal=0.3)
    assert float(p.detach()) == pytest.approx(float(ref.detach()), rel=1e-6) and float(ref.detach()) > 0


def test_clip_to_target_brings_every_layer_near_C():
    from iclr25.lotos.train import clip_to_target

    m = _net(clip=1.0, opt_steps=5)
    counts = clip_to_target([m], torch.rand(2, 1, 12, 12))
    assert counts[0] > 0
    shapes = [(1, 12, 12), (4, 12, 12), (4, 6, 6), (8, 6, 6), (8,)]
    for layer, shp in zip(spectral_layers(m, "all"), shapes):
        _, s = layer_top_singular(layer.module, shp, k=1, n_iters=200, generator=torch.Generator().manual_seed(0))
        assert 0.85 < float(s[0]) < 1.15, (layer, float(s[0]))


def test_cifar_batches_load_with_a_restricted_unpickler(tmp_path):
    """The CIFAR-10 python batches are pickles: real ones load, a crafted one is refused, not run."""
    import pickle

    import numpy as np

    from iclr25.lotos.data import _read_batch

    good = tmp_path / "data_batch_1"
    data = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072)
    good.write_bytes(pickle.dumps({"batch_label": "b", "labels": [3, 7], "data": data, "filenames": ["a", "b"]}))
    x, y = _read_batch(good)
    assert x.shape == (2, 32, 32, 3) and y.tolist() == [3, 7]
    assert np.array_equal(x[0].transpose(2, 0, 1).reshape(-1), data[0])

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    import os

    bad = tmp_path / "data_batch_2"
    bad.write_bytes(pickle.dumps({"data": Evil(), "labels": []}))
    with pytest.raises(ValueError, match="refusing to load"):
        _read_batch(bad)
    assert not (tmp_path / "pwned").exists()
