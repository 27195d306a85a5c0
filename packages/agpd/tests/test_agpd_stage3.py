"""Issue 41: Stage 3 (Algorithm 1) equals the official code's logic.

``official_stage3`` below is an independent transcription of BackdoorBench's AGPD Stage 3
(``detection_pretrain/agpd.py``, the loop after the target labels are known, with
``agpd_utils.stage1_new`` and ``find_small_and_smooth_window_start``, read at commit 3f4b1a92),
written from its behaviour in plain numpy. It shares no code with the package.

Behaviour transcribed:

- iteration 0 = the sample(s) least cosine-similar to the clean basis;
- the first closeness list = the *raw* rates of all other samples against that far end;
- each round: far end = mean gradient of every sample flagged so far; raw rates
  ``(1 - cos_far) / ((1 - cos_far) + (1 - cos_clean))`` of the samples not yet flagged; min-max
  normalised; those ``<= tau`` leave (a round whose rates are all equal removes them all); the loop
  ends when nothing leaves or nothing is left;
- after a round that removed samples: JS = scipy's ``jensenshannon`` of the 100-edge (99-bin)
  density histograms on [0, 1] of the previous list and of the *raw* rates of this round's
  *survivors* (1 when either list is empty); the survivors' rates become the previous list;
- the stop ``m* = argmin_m (mean + 5 std)`` over windows of 10 JS values (first minimum; fewer than
  10 values raise ``ValueError``); poisoned = iterations ``[0, m*)``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.spatial.distance import jensenshannon

from iclr25.agpd import AGPDConfig
from iclr25.agpd.detector import clean_bases, filter_target_class
from iclr25.agpd.synthetic import synthetic_gradients


def _cos(X: np.ndarray, v: np.ndarray) -> np.ndarray:
    return (X @ v) / (np.linalg.norm(X, axis=1) * np.linalg.norm(v))


def official_stage3(G, g0, tau: float, window: int = 10, beta: float = 5.0) -> dict:
    """Returns ``{"poison": bool (n,), "iteration": int (n,) (-1 never), "js": list, "stop": int}``."""
    G = np.asarray(G, dtype=np.float64)
    g0 = np.asarray(g0, dtype=np.float64)
    n = len(G)
    iteration = np.full(n, -1)
    c0 = _cos(G, g0)
    first = np.flatnonzero(c0 == c0.min())
    iteration[first] = 0

    def rates(idx, far):
        dp, dc = _cos(G[idx], far), _cos(G[idx], g0)
        return (1 - dp) / ((1 - dp) + (1 - dc))

    prev = rates(np.flatnonzero(iteration < 0), G[first].mean(0))
    edges = np.linspace(0, 1, 100)
    js: list[float] = []
    it = 1
    while (iteration < 0).any():
        rest = np.flatnonzero(iteration < 0)
        r = rates(rest, G[iteration >= 0].mean(0))
        span = r.max() - r.min()
        out = np.ones(len(r), bool) if span == 0 else (r - r.min()) / span <= tau
        if not out.any():
            break
        iteration[rest[out]] = it
        surv = r[~out]
        if len(prev) == 0 or len(surv) == 0:
            d = 1.0
        else:
            h1, _ = np.histogram(prev, bins=edges, density=True)
            h2, _ = np.histogram(surv, bins=edges, density=True)
            d = float(jensenshannon(h1, h2))
        js.append(d)
        prev = surv
        it += 1
    if len(js) < window:
        raise ValueError("fewer JS values than the window")
    a = np.asarray(js)
    scores = [a[m:m + window].mean() + beta * a[m:m + window].std() for m in range(len(a) - window + 1)]
    stop = int(np.argmin(scores))
    return {"poison": (iteration >= 0) & (iteration < stop), "iteration": iteration, "js": js, "stop": stop}


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _planted(n=300, poison_fraction=0.1, seed=1, **kw):
    G, Y, C, YC, P = synthetic_gradients(n_per_class=n, dim=64, target=3, seed=seed,
                                         poison_fraction=poison_fraction, **kw)
    idx = torch.nonzero(Y == 3).flatten()
    return G[idx], clean_bases(C, YC, 10, "mean")[3], P[idx]


def _assert_equal_to_official(fr, off):
    assert len(fr.js) == len(off["js"])
    np.testing.assert_allclose(fr.js, off["js"], rtol=0, atol=1e-9)
    assert fr.stop == off["stop"]
    assert torch.equal(fr.round_of, torch.as_tensor(off["iteration"]))
    assert torch.equal(fr.poison, torch.as_tensor(off["poison"]))


def test_stage3_equals_official_transcription_on_planted_class():
    """A class of 300 samples, 10 % of them a cluster 100 degrees from the clean one: the package's
    Stage 3 (backdoorbench variant) equals the transcription round by round, finds the poison
    (TPR >= 0.9) and stops late (round >= 10), as the official code does. Before issue 41 the
    package's JS trace (min-max normalised values of all remaining samples) stopped at round 2.

    The official stop rule also keeps most of this isotropic clean cloud (FPR 0.90 here: after
    the poisoned cluster has left, the clean samples leave a few per round with small, smooth JS
    changes, and the smoothest window lies late); that is the official logic, not asserted away."""
    G, g0, p = _planted()
    cfg = AGPDConfig(variant="backdoorbench")
    fr = filter_target_class(G, g0, cfg)
    off = official_stage3(G.numpy(), g0.numpy(), cfg.tau_s)
    _assert_equal_to_official(fr, off)
    tpr = float((fr.poison & p).sum() / p.sum())
    assert tpr >= 0.9 and fr.stop >= 10


@pytest.mark.parametrize("n,pf,spread,seed", [(150, 0.1, 0.1, 0), (150, 0.3, 0.25, 0), (150, 0.5, 0.25, 2),
                                              (200, 0.5, 0.25, 1), (500, 0.3, 0.5, 0), (500, 0.5, 0.25, 1)])
def test_stage3_equals_official_transcription_across_planted_cases(n, pf, spread, seed):
    """Equal round by round on cases where the official rule succeeds and where it fails."""
    G, g0, _ = _planted(n, pf, seed, spread=spread)
    cfg = AGPDConfig(variant="backdoorbench")
    _assert_equal_to_official(filter_target_class(G, g0, cfg), official_stage3(G.numpy(), g0.numpy(), cfg.tau_s))


def test_stage3_earlier_reading_is_a_named_variant():
    """js_values="remaining" (the package's reading before issue 41) is kept by name and differs."""
    G, g0, _ = _planted()
    new = filter_target_class(G, g0, AGPDConfig(variant="backdoorbench"))
    old = filter_target_class(G, g0, AGPDConfig(variant="backdoorbench", js_values="remaining"))
    assert torch.equal(old.round_of, new.round_of)  # same rounds, another trace
    assert old.js != new.js and old.stop < 10 <= new.stop
    with pytest.raises(ValueError, match="js_values"):
        AGPDConfig(js_values="all")


def test_stage3_round0_is_the_far_sample_alone():
    G, g0, _ = _planted()
    fr = filter_target_class(G, g0, AGPDConfig(variant="backdoorbench"))
    far = int(torch.argmin(torch.nn.functional.cosine_similarity(G.double(), g0.double()[None], dim=1)))
    assert torch.nonzero(fr.round_of == 0).flatten().tolist() == [far]
    assert fr.js[-1] == 1.0  # the round that removed the last samples leaves no survivor (official: JS = 1)


@pytest.mark.slow
def test_stage3_equals_official_on_quick_checkpoint(tmp_path):
    """The quick reproduction's BadNets model (digits, seed 0, 15 epochs): at every candidate layer,
    Stage 3 told the true target (0) equals the transcription wherever the official code runs
    (>= 10 JS values)."""
    from iclr25.agpd.data import load_data, split_clean_set
    from iclr25.agpd.gradients import activation_gradients, predict
    from iclr25.agpd.models import candidate_layers
    from iclr25.agpd.pipeline import build_model, poison_dataset
    from iclr25.agpd.train import train_classifier

    data = load_data("digits", 0)
    torch.manual_seed(0)
    xc, yc, _, _ = split_clean_set(data.x_test, data.y_test, 10, 0)
    x, y, pm, _, _ = poison_dataset(data, "badnets", 0.1, 0, seed=0)
    net = build_model("small", 10, data.image_shape[0])
    train_classifier(net, x, y, epochs=15, batch_size=128, lr=0.01, seed=0)
    layers = candidate_layers(net)
    g, gc = activation_gradients(net, x, y, layers), activation_gradients(net, xc, yc, layers)
    correct = predict(net, xc) == yc
    cfg = AGPDConfig(variant="backdoorbench")
    sel = y == 0
    compared, tprs = 0, []
    for layer in layers:
        g0 = clean_bases(gc[layer], yc, 10, "mean", correct)[0]
        fr = filter_target_class(g[layer][sel], g0, cfg)
        try:
            off = official_stage3(g[layer][sel].numpy(), g0.numpy(), cfg.tau_s)
        except ValueError:
            continue
        _assert_equal_to_official(fr, off)
        compared += 1
        tprs.append(float((fr.poison & pm[sel]).sum() / pm[sel].sum()))
    assert compared >= len(layers) // 2
    assert max(tprs) >= 0.9, tprs
