"""Known-answer tests (spec 'Known-answer tests' 1-8 and claim 5), each against an independent
computation: closed forms, hand-computed values, scipy / scikit-learn."""

import math

import numpy as np
import pytest
import torch
from scipy.spatial.distance import jensenshannon
from sklearn.metrics import confusion_matrix, f1_score, precision_score, recall_score

from iclr25.agpd import (
    AGPDConfig,
    badnets,
    blended,
    closeness,
    cvbt,
    detect_from_gradients,
    detection_metrics,
)
from iclr25.agpd.gcd import angles, far_end
from iclr25.agpd.gradients import activation_gradients
from iclr25.agpd.stats import js_between, robust_z, select_stop, window_scores
from iclr25.agpd.synthetic import synthetic_gradients

G2 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
E1 = torch.tensor([1.0, 0.0])

@pytest.fixture(autouse=True)
def _one_thread():
    """Small convolutions: one torch thread is much faster on a busy 2-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)



def test_kat1_toy_circle():
    assert torch.allclose(angles(G2, E1), torch.tensor([0.0, math.pi / 2, math.pi], dtype=torch.float64))
    assert torch.equal(far_end(G2, E1)[0], torch.tensor([-1.0, 0.0]))
    assert cvbt(G2, E1, include_far=True) == pytest.approx(math.sqrt(8 / 3), abs=1e-6)  # 1.632993
    assert cvbt(G2, E1, include_far=False) == pytest.approx(2 / math.sqrt(3), abs=1e-6)  # 1.154701
    s = closeness(G2, E1, torch.tensor([-1.0, 0.0]))
    assert torch.allclose(s, torch.tensor([1.0, 0.5, 0.0], dtype=torch.float64))


def test_kat2_parallel_and_scale_invariance():
    g0 = torch.tensor([0.3, -1.0, 2.0])
    G = g0 * torch.tensor([[0.5], [1.0], [7.0]])
    assert cvbt(G, g0) == pytest.approx(0.0, abs=1e-7)
    torch.manual_seed(0)
    G = torch.randn(50, 8)
    g0 = torch.randn(8)
    scale = torch.rand(50, 1) * 10 + 0.1
    assert cvbt(G * scale, 3.7 * g0) == pytest.approx(cvbt(G, g0), rel=1e-9)


def test_kat3_robust_z():
    rho = [0.10, 0.12, 0.11, 0.09, 0.10, 0.13, 0.10, 0.12, 0.11, 0.50]
    z = robust_z(rho)
    assert float(z[9]) == pytest.approx(0.39 / 0.014826, rel=1e-9)  # 26.305
    assert float(z[9]) == pytest.approx(26.305, abs=1e-3)
    assert float(z[5]) == pytest.approx(1.349, abs=1e-3)
    z1 = robust_z(rho, one_sided=True, eps=1e-6)
    assert float(z1[9]) == pytest.approx(26.3025, abs=1e-3)
    assert (z1 >= 0).all() and float(z1[3]) == 0.0
    # independent: numpy medians
    med = np.median(rho)
    mad = np.median(np.abs(np.array(rho) - med))
    assert np.allclose(z.numpy(), (np.array(rho) - med) / (1.4826 * mad))
    assert torch.nonzero(z >= math.e**2).flatten().tolist() == [9]


def test_kat4_window_rule():
    js = [0.5, 0.4, 0.45] + [0.05] * 10 + [0.3, 0.6, 0.7, 0.8]
    s = window_scores(js, 10, 5)
    ref = [np.mean(js[m:m + 10]) + 5 * np.std(js[m:m + 10]) for m in range(8)]
    assert np.allclose(s, ref)
    assert np.allclose(s, [1.0933, 0.8771, 0.69, 0.05, 0.45, 0.9975, 1.3963, 1.7414], atol=1e-4)
    assert select_stop(js, 10, 5, "middle") == 8
    assert select_stop(js, 10, 5, "start") == 3


def test_select_stop_short_trace_keeps_all_rounds():
    assert select_stop([0.3, 0.1], 10, 5) == 3
    assert select_stop([], 10, 5, "start") == 1
    with pytest.raises(ValueError):
        select_stop([0.1], 10, 5, "end")


def test_select_stop_short_exhausted_trace_excludes_the_tail():
    # the class was filtered to the last sample: stop after the largest change, never mark all rounds
    assert select_stop([0.05, 0.4, 0.02, 0.01], 10, 5, exhausted=True) == 2
    assert select_stop([0.3], 10, 5, "start", exhausted=True) == 1
    assert select_stop([], 10, 5, exhausted=True) == 0


@pytest.mark.parametrize("n", [8, 12])
def test_small_target_class_with_planted_split_is_not_flagged_whole(n):
    """Issue 18: min-max normalisation removes >= 1 sample per round, so a small class ends
    empty after a trace shorter than the window; the stop must keep the clean tail."""
    from iclr25.agpd.detector import clean_bases, filter_target_class

    G, Y, C, YC, P = synthetic_gradients(n_per_class=n, dim=64, target=3, seed=1, angle=110,
                                         poison_fraction=0.25)
    cfg = AGPDConfig(variant="backdoorbench")
    idx = torch.nonzero(Y == 3).flatten()
    fr = filter_target_class(G[idx], clean_bases(C, YC, 10, cfg.basis)[3], cfg)
    assert len(fr.js) < cfg.window and (fr.round_of >= 0).all()  # short trace, class exhausted
    p = P[idx]
    assert fr.poison[p].all()  # every planted poisoned sample found
    assert (~fr.poison[~p]).sum() >= (~p).sum() // 2  # most of the clean samples kept


def test_kat5_jensen_shannon():
    assert jensenshannon([1, 0], [0, 1]) == pytest.approx(math.sqrt(math.log(2)), abs=1e-6)
    assert jensenshannon([1, 0], [0, 1], base=2) == pytest.approx(1.0)
    a, b = np.full(20, 0.005), np.full(20, 0.995)  # all mass in the first / last bin
    assert js_between(a, b, distance=True) == pytest.approx(0.832555, abs=1e-6)
    assert js_between(a, b, distance=False) == pytest.approx(math.log(2), abs=1e-9)
    assert js_between(a, a) == 0.0


class _Head(torch.nn.Module):
    def __init__(self, relu: bool):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.relu = relu
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x):
        h = self.conv(x)
        return self.linear((torch.relu(h) if self.relu else h).mean((2, 3)))


def test_kat6_analytic_activation_gradient():
    torch.manual_seed(1)
    x, y = torch.randn(16, 2, 5, 5), torch.randint(0, 3, (16,))
    m = _Head(relu=True)
    g = activation_gradients(m, x, y, ["conv"], batch_size=5)["conv"]
    with torch.no_grad():
        h = m.conv(x)
    W = m.linear.weight
    ref = W[y] * (h > 0).float().mean((2, 3)) / 25.0
    assert torch.allclose(g, ref, atol=1e-6)
    lin = _Head(relu=False)
    g = activation_gradients(lin, x, y, ["conv"])["conv"]
    assert torch.allclose(g, lin.linear.weight[y] / 25.0, atol=1e-7)
    for k in range(3):
        assert cvbt(g[y == k], lin.linear.weight[k]) < 1e-6  # rho = 0: no false target


def test_kat7_detection_metrics():
    true = np.array([1, 1, 1, 1, 0, 0, 0, 0, 0, 0], bool)
    pred = np.array([1, 1, 1, 0, 1, 0, 0, 0, 0, 0], bool)
    m = detection_metrics(true, pred)
    assert (m["tp"], m["fp"], m["fn"], m["tn"]) == (3, 1, 1, 5)
    assert m["TPR"] == pytest.approx(0.75) and m["FPR"] == pytest.approx(1 / 6)
    assert m["precision"] == pytest.approx(0.75) and m["F1"] == pytest.approx(0.75)
    tn, fp, fn, tp = confusion_matrix(true, pred).ravel()
    assert (tp, fp, fn, tn) == (3, 1, 1, 5)
    assert m["F1"] == pytest.approx(f1_score(true, pred))
    assert m["precision"] == pytest.approx(precision_score(true, pred))
    assert m["TPR"] == pytest.approx(recall_score(true, pred))


def test_kat8_poisoning_helpers():
    torch.manual_seed(0)
    x, y = torch.rand(200, 3, 8, 8) * 0.9, torch.randint(0, 5, (200,))
    xb, yb, mask = badnets(x, y, target=0, ratio=0.1, patch_size=2, seed=3)
    assert int(mask.sum()) == round(0.1 * 200)
    assert (yb[mask] == 0).all() and (y[mask] != 0).all()
    assert (xb[mask][..., -2:, -2:] == 1.0).all()
    assert torch.equal(xb[~mask], x[~mask]) and torch.equal(yb[~mask], y[~mask])
    assert torch.equal(xb[mask][..., :-2, :], x[mask][..., :-2, :])
    pat = torch.rand(3, 8, 8)
    xb, yb, mask = blended(x, y, target=2, ratio=0.15, alpha=0.2, pattern=pat, seed=1)
    assert int(mask.sum()) == round(0.15 * 200)
    assert torch.allclose(xb[mask], 0.8 * x[mask] + 0.2 * pat)
    assert torch.equal(xb[~mask], x[~mask]) and (yb[mask] == 2).all()


@pytest.mark.parametrize("variant", ["paper", "backdoorbench"])
def test_synthetic_planted_split(variant):
    """Spec claim 5: one class holds two clusters (clean around g0, poisoned around a far
    direction), every other class one cluster: rho, z and Stage 3 recover the planted split."""
    G, Y, C, YC, P = synthetic_gradients(n_per_class=200, dim=64, target=3, seed=1)
    res = detect_from_gradients({"l": G}, Y, {"l": C}, YC, AGPDConfig(variant=variant))
    assert res.target_classes == [3]
    assert int(torch.argmax(res.rho[0])) == 3 and res.rho[0, 3] > 1.0
    m = detection_metrics(P, res.poison_mask)
    if variant == "paper":
        assert torch.equal(res.poison_mask, P)
    else:
        # Stage 3 is the official logic (equal to the transcription in test_agpd_stage3, this case
        # included). On a 50/50 split round 1 removes the whole poisoned cluster, the JS trace is
        # smooth from round 2 on, and the official window *start* (rounds [0, m*), m* = 1) keeps
        # only round 0, the far sample: TPR 1 %, FPR 0. Measured, not hidden (README).
        fr = res.filters[3]
        assert fr.stop == 1 and m["FPR"] == 0.0 and m["TPR"] == pytest.approx(0.01)
        idx = torch.nonzero(Y == 3).flatten()
        assert torch.equal(fr.round_of <= 1, P[idx])  # rounds 0-1 hold exactly the planted cluster


def test_no_target_without_poison():
    G, Y, C, YC, P = synthetic_gradients(poison_fraction=0.0, seed=2)
    res = detect_from_gradients({"l": G}, Y, {"l": C}, YC, AGPDConfig(fallback_rho=0.3))
    assert res.target_classes == [] and not res.poison_mask.any()
