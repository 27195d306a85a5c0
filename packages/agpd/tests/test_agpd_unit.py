"""Unit tests: shapes, invariances, errors, variants, checkpoints, data loaders."""

import math

import pytest
import torch

from iclr25.agpd import AGPD, AGPDConfig, activation_gradients, candidate_layers, small_preact_cnn
from iclr25.agpd.baselines import activation_clustering, spectral_signatures
from iclr25.agpd.config import VARIANTS
from iclr25.agpd.detector import clean_bases, filter_target_class
from iclr25.agpd.gcd import closeness, cvbt
from iclr25.agpd.models import conv_layer_names, preact_resnet18
from iclr25.agpd.stats import robust_z
from iclr25.agpd.train import load_checkpoint, train_classifier


@pytest.fixture(autouse=True)
def _one_thread():
    """Small convolutions: one torch thread is much faster on a busy 2-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)



def test_config_variants_fill_defaults_and_overrides_win():
    p, b = AGPDConfig(variant="paper"), AGPDConfig(variant="backdoorbench")
    for k, v in VARIANTS["paper"].items():
        assert getattr(p, k) == v
    for k, v in VARIANTS["backdoorbench"].items():
        assert getattr(b, k) == v
    assert AGPDConfig(variant="backdoorbench", basis="single").basis == "single"
    assert p.tau_z == pytest.approx(math.e**2)
    with pytest.raises(ValueError, match="variant"):
        AGPDConfig(variant="official")
    with pytest.raises(ValueError, match="tau_s"):
        AGPDConfig(tau_s=2.0)


def test_preact_resnet18_layer_names_match_backdoorbench():
    names = conv_layer_names(preact_resnet18())
    assert len(names) == 16 and names[0] == "layer1.0.conv1" and names[-1] == "layer4.1.conv2"
    assert candidate_layers(preact_resnet18())[-1] == "layer4.1.conv1"
    assert len(candidate_layers(small_preact_cnn(10, 1))) == 7


def test_activation_gradients_shapes_and_mode_restored():
    m = small_preact_cnn(10, 1)
    m.train()
    x, y = torch.rand(9, 1, 8, 8), torch.randint(0, 10, (9,))
    layers = candidate_layers(m)
    g = activation_gradients(m, x, y, layers, batch_size=4)
    assert set(g) == set(layers) and g["layer1.0.conv1"].shape == (9, 32) and g["layer2.1.conv1"].shape == (9, 64)
    assert m.training  # restored
    # eval mode: a sample's gradient does not depend on its batch mates
    g1 = activation_gradients(m, x[:1], y[:1], layers)
    assert torch.allclose(g1["layer1.0.conv1"][0], g["layer1.0.conv1"][0], atol=1e-6)
    gce = activation_gradients(m, x, y, layers, target="ce")
    assert not torch.allclose(gce["layer1.0.conv1"], g["layer1.0.conv1"])
    with pytest.raises(KeyError, match="no layer"):
        activation_gradients(m, x, y, ["layer9.conv1"])
    with pytest.raises(ValueError, match="target"):
        activation_gradients(m, x, y, layers, target="loss")


def test_gcd_shape_errors_and_far_set():
    with pytest.raises(ValueError, match=r"\(n, C\)"):
        cvbt(torch.ones(3), torch.ones(3))
    with pytest.raises(ValueError, match="basis"):
        closeness(torch.ones(3, 2), torch.ones(3), torch.ones(2))
    G = torch.randn(30, 5)
    assert 0.0 <= cvbt(G, torch.randn(5), m=5) <= 2.0
    assert cvbt(torch.zeros(0, 5), torch.ones(5)) == 0.0


def test_robust_z_zero_scale():
    z = robust_z([0.0, 0.0, 0.0, 0.1])
    assert z[0] == 0 and math.isinf(z[3])
    assert torch.equal(robust_z([0.0, 0.0, 0.0]), torch.zeros(3, dtype=torch.float64))


def test_clean_bases_errors_and_choice():
    cg = torch.randn(6, 4)
    cy = torch.tensor([0, 0, 0, 1, 1, 1])
    mean = clean_bases(cg, cy, 2, "mean")
    assert torch.allclose(mean[0], cg[:3].mean(0))
    correct = torch.tensor([True, False, False, True, True, True])
    assert torch.allclose(clean_bases(cg, cy, 2, "mean", correct)[0], cg[0])
    single = clean_bases(cg, cy, 2, "single", seed=0)
    assert any(torch.equal(single[1], cg[i]) for i in range(3, 6))
    with pytest.raises(ValueError, match="class 2"):
        clean_bases(cg, cy, 3)


def test_filter_fixed_far_end_and_empty_class():
    cfg = AGPDConfig(variant="paper", far_update="fixed")
    G = torch.cat([torch.tensor([[1.0, 0.0]]).repeat(5, 1), torch.tensor([[-1.0, 0.1]]).repeat(3, 1)])
    fr = filter_target_class(G, torch.tensor([1.0, 0.0]), cfg)
    assert fr.poison.tolist() == [False] * 5 + [True] * 3
    assert filter_target_class(torch.zeros(0, 2), torch.ones(2), cfg).poison.numel() == 0


def test_agpd_rejects_config_and_overrides():
    with pytest.raises(ValueError, match="either"):
        AGPD(small_preact_cnn(10, 1), config=AGPDConfig(), tau_s=0.1)


def test_baselines_flag_planted_outliers():
    torch.manual_seed(0)
    f = torch.randn(400, 16)
    y = torch.arange(400) % 4
    bad = torch.zeros(400, dtype=torch.bool)
    bad[:40:4] = True  # 10 samples of class 0
    f[bad] += 6.0
    flag = spectral_signatures(f, y, ratio=0.1)
    assert flag[bad].all() and flag.sum() == 4 * int(1.5 * 0.1 * 100)
    ac = activation_clustering(f, y, n_components=4)
    assert ac[bad].all() and ac[~bad].sum() <= 5
    with pytest.raises(ValueError, match="features"):
        spectral_signatures(f[:10], y)


def test_resume_continues_from_saved_epoch(tmp_path):
    torch.manual_seed(0)
    x, y = torch.rand(64, 1, 8, 8), torch.randint(0, 10, (64,))
    ck = tmp_path / "ck.pt"
    torch.manual_seed(1)
    full = train_classifier(small_preact_cnn(10, 1, (8, 8), (1, 1)), x, y, epochs=3, batch_size=32)
    # interrupted run: 3-epoch schedule stopped after epoch 1 (simulate by training epochs=3 but saving at 1)
    torch.manual_seed(1)
    part = small_preact_cnn(10, 1, (8, 8), (1, 1))
    import iclr25.agpd.train as T

    class Stop(Exception):
        pass

    orig = T.save_checkpoint

    def save_then_stop(*a, **k):
        orig(*a, **k)
        raise Stop

    T.save_checkpoint = save_then_stop
    try:
        with pytest.raises(Stop):
            train_classifier(part, x, y, epochs=3, batch_size=32, checkpoint=ck)
    finally:
        T.save_checkpoint = orig
    assert load_checkpoint(ck)["epoch"] == 1
    resumed = train_classifier(small_preact_cnn(10, 1, (8, 8), (1, 1)), x, y, epochs=3, batch_size=32,
                               checkpoint=ck, resume=True)
    for p, q in zip(full.state_dict().values(), resumed.state_dict().values()):
        assert torch.allclose(p, q, atol=1e-6)
    # a resume with other settings or data is refused, naming what changed (the saved optimiser and
    # schedule would silently override the new lr / epochs, and another data set would be trained on)
    net = small_preact_cnn(10, 1, (8, 8), (1, 1))
    with pytest.raises(ValueError, match=r"lr: 0.01 -> 0.5"):
        train_classifier(net, x, y, epochs=3, batch_size=32, lr=0.5, checkpoint=ck, resume=True)
    with pytest.raises(ValueError, match=r"epochs: 3 -> 1"):
        train_classifier(net, x, y, epochs=1, batch_size=32, checkpoint=ck, resume=True)
    with pytest.raises(ValueError, match=r"data_sha256"):
        train_classifier(net, x.flip(0), y, epochs=3, batch_size=32, checkpoint=ck, resume=True)
    with pytest.raises(ValueError, match=r"another architecture"):
        train_classifier(small_preact_cnn(10, 1, (8, 8), (2, 2)), x, y, epochs=3, batch_size=32, checkpoint=ck,
                         resume=True)


class _Evil:
    def __reduce__(self):
        import os

        return (os.system, ("true",))


def test_bad_checkpoints_are_clean_errors(tmp_path):
    evil, short = tmp_path / "evil.pt", tmp_path / "short.pt"
    torch.save({"model": _Evil()}, evil)
    with pytest.raises(ValueError, match="refused to load"):
        load_checkpoint(evil)
    good = tmp_path / "good.pt"
    torch.save({"model": {}, "epoch": 1}, good)
    short.write_bytes(good.read_bytes()[:40])
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        load_checkpoint(short)
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "none.pt")


def test_digits_loader_and_clean_split():
    from iclr25.agpd.data import load_digits_data, split_clean_set

    d = load_digits_data()
    assert d.x_train.shape[1:] == (1, 8, 8) and d.x_train.dtype == torch.float32
    assert float(d.x_train.max()) <= 1.0 and len(d.y_train) + len(d.y_test) == 1797
    xc, yc, xe, ye = split_clean_set(d.x_test, d.y_test, 10)
    assert len(xc) == 100 and torch.bincount(yc).tolist() == [10] * 10 and len(xe) == len(d.x_test) - 100
    with pytest.raises(ValueError, match="per_class"):
        split_clean_set(d.x_test, d.y_test, 1000)


@pytest.mark.realdata
def test_cifar10_subset_loader():
    from iclr25.agpd.data import load_cifar10_subset
    from iclr25.core.data import DataNotFoundError

    try:
        d = load_cifar10_subset(download=False)
    except DataNotFoundError as e:
        pytest.skip(f"cifar10-subset/cifar10_subset.npz not mirrored (set ICLR25_DATA): {e}")
    assert d.x_train.shape == (4000, 3, 32, 32) and d.x_test.shape == (1000, 3, 32, 32)
    assert torch.bincount(d.y_train).tolist() == [400] * 10
    mean = d.x_train.mean((0, 2, 3))
    assert torch.allclose(mean, torch.tensor([0.4911, 0.4808, 0.4442]), atol=2e-3)  # PROVENANCE.md


def test_inclass_separation_recovers_the_planted_angle():
    from iclr25.agpd.pipeline import inclass_separation
    from iclr25.agpd.synthetic import synthetic_gradients

    for angle in (30.0, 100.0):
        G, Y, C, YC, P = synthetic_gradients(n_per_class=200, target=3, angle=angle, seed=0)
        s = Y == 3
        r = inclass_separation(G[s], P[s])
        assert abs(r["angle_deg"] - angle) < 2.0  # the means of the two planted clouds
        assert r["ratio"] > 1.0
    assert inclass_separation(G[s], torch.zeros(int(s.sum()), dtype=torch.bool))["ratio"] is None


def test_m_fraction_averages_a_share_of_each_class():
    from iclr25.agpd.detector import cvbt_matrix
    from iclr25.agpd.gcd import cvbt

    g = torch.Generator().manual_seed(0)
    G = torch.randn(50, 8, generator=g, dtype=torch.float64)
    y = torch.tensor([0] * 20 + [1] * 30)
    bases = {"l": torch.randn(2, 8, generator=g, dtype=torch.float64)}
    rho = cvbt_matrix({"l": G}, y, bases, 2, m_fraction=0.1)
    assert torch.isclose(rho[0, 0], torch.as_tensor(cvbt(G[:20], bases["l"][0], m=2), dtype=torch.float64))
    assert torch.isclose(rho[0, 1], torch.as_tensor(cvbt(G[20:], bases["l"][1], m=3), dtype=torch.float64))


def test_pixel_range_warning_and_label_range_error():
    import warnings as _w

    from iclr25.agpd import small_preact_cnn
    from iclr25.agpd.data import check_images, check_label_range

    x = torch.rand(8, 3, 8, 8)
    with _w.catch_warnings():
        _w.simplefilter("error")
        check_images(x, torch.arange(8), name="ok")  # [0, 1]: silent
    with pytest.warns(UserWarning, match="divide by 255"):
        check_images(x * 255, torch.arange(8), name="x255")
    model = small_preact_cnn(10, 3)
    assert check_label_range(model, x, torch.arange(8)) == 10
    with pytest.raises(ValueError, match="label 12 at index 3 but the model has 10 outputs"):
        check_label_range(model, x, torch.tensor([0, 1, 2, 12, 4, 5, 6, 7]))
    assert model.training  # the probe forward restored train mode


def test_default_variant_is_the_one_that_detects():
    """Issue 41 item 4: AGPD(model) and AGPDConfig() use the official code's variant."""
    assert AGPDConfig().variant == "backdoorbench" and AGPDConfig().normalize_closeness
    assert AGPD(small_preact_cnn(10, 1)).config.variant == "backdoorbench"


def test_near_chance_model_is_warned_about():
    """Issue 41 item 5: an untrained model (clean accuracy near chance) is named, not accepted silently."""
    from iclr25.agpd.detector import check_model_fit

    with pytest.warns(UserWarning, match="8.0 % of the 100 clean samples"):
        assert check_model_fit(0.08, 10, 100) is True
    assert check_model_fit(0.5, 10, 100) is False
    torch.manual_seed(0)
    net = small_preact_cnn(10, 1).eval()
    x, y = torch.rand(60, 1, 8, 8), torch.arange(60) % 10
    with pytest.warns(UserWarning, match=r"chance 10\.0 %"):
        AGPD(net, fallback_rho=None).detect(x, y, x[:30], y[:30])


def test_two_classes_warn_that_the_z_score_cannot_name_a_target():
    """With K = 2 the robust z-score is +-1/1.4826 = +-0.674 whatever rho is (the median is the mean of
    the two values and the MAD half their gap), so no class can reach tau_z = e^2: Stage 2 can only
    name a target through the rho fallback. Found by a user with a 2-class shapes data set whose
    end-to-end run flagged nothing without a word; it is now warned about."""
    from iclr25.agpd.detector import detect_from_gradients
    from iclr25.agpd.synthetic import synthetic_gradients

    G, Y, C, YC, _ = synthetic_gradients(60, 2, 16, 0, 0.3, seed=0)
    with pytest.warns(UserWarning, match="2 classes"):
        res = detect_from_gradients({"s": G}, Y, {"s": C}, YC, AGPDConfig(fallback_rho=None))
    assert float(res.z.max()) == pytest.approx(1 / 1.4826, rel=1e-4) and res.target_classes == []
    G, Y, C, YC, _ = synthetic_gradients(30, 3, 16, 0, 0.3, seed=0)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        detect_from_gradients({"s": G}, Y, {"s": C}, YC, AGPDConfig(fallback_rho=None))


def test_deterministic_cuda_sets_and_restores_the_torch_flags():
    """On a CUDA device the experiment runs with deterministic kernels; the caller's flags come back after
    (checked without a GPU: the flags are process-wide settings, set whether or not a GPU is present)."""
    import torch

    from iclr25.agpd.experiments import deterministic_cuda

    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
              torch.backends.cudnn.benchmark)
    with deterministic_cuda("cpu"):
        assert not torch.are_deterministic_algorithms_enabled()
    with deterministic_cuda("cuda:0"):
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
            torch.backends.cudnn.benchmark) == before


def test_model_warnings_are_printed_once_on_the_command_line():
    """The near-chance and two-class warnings were each printed twice on stderr (a ``UserWarning`` and a
    log line of the same text); as a command prints them (the core's logging set-up), each comes once."""
    import os
    import subprocess
    import sys

    code = ("import torch\nfrom iclr25.core.progress import configure_logging\nconfigure_logging(False)\n"
            "from iclr25.agpd import AGPDConfig\nfrom iclr25.agpd.detector import check_model_fit, identify_targets\n"
            "check_model_fit(0.08, 10, 100)\nidentify_targets(torch.rand(3, 2), AGPDConfig())\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("8.0 % of the 100 clean samples") == 1, r.stderr
    assert r.stderr.count("the robust z-score is at most") == 1, r.stderr
