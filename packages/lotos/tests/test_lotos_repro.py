"""reproduce(): claim names and structure on a tiny preset (digits), and the real quick run (slow)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import iclr25.lotos.reproduce as R
from iclr25.core.results import Claim

NAMES = [
    "transferability/clip_gt_orig",
    "transferability/lotos_lt_clip",
    "blackbox_robust_acc/lotos_gt_clip",
    "blackbox_robust_acc/clip_gt_orig",
    "clean_acc/lotos_cost",
    "mechanism/cross_gain",
    "mechanism/clipping_holds",
]


def test_reproduce_smoke_digits(tmp_path, monkeypatch):
    pytest.importorskip("sklearn", reason="the digits data set needs the [digits] extra")
    tiny = dict(R.QUICK, n_train=200, n_test=60, num_models=2, n_surrogates=1, width=4, epochs=1,
                batch_size=50, clip_every=2, steps=2)
    monkeypatch.setattr(R, "QUICK", tiny)
    import torch

    before = torch.get_num_threads()
    claims = R.reproduce(True, tmp_path, data="digits", threads=2, quiet=True, seeds=(0, 1), workers=1)
    assert torch.get_num_threads() == before  # the thread setting does not leak
    assert [c.name for c in claims] == NAMES == list(R.CLAIM_NAMES)
    assert all(isinstance(c, Claim) for c in claims)
    meta = json.loads((tmp_path / "metrics.json").read_text())
    assert set(meta["aggregate"]) == {"orig", "clip", "lotos"}
    assert (tmp_path / "arms.md").is_file()
    cg = next(c for c in claims if c.name == "mechanism/cross_gain")
    assert cg.ours == pytest.approx(meta["aggregate"]["lotos"]["mean_cross_gain"])
    by = {c.name: c for c in claims}
    for c in claims:  # the claim record: kind, where in the paper, seeds, the seed spread of the paired gap
        assert c.paper_ref and c.n_seeds == 2 and c.kind in ("headline", "mechanism", "sanity")
    bb = by["blackbox_robust_acc/lotos_gt_clip"]
    assert bb.paper_value == 32.2 and bb.paper_ref.startswith("Table 2")
    gaps = [a - b for a, b in zip(meta["per_seed_values"]["lotos"]["blackbox_robust_acc"],
                                  meta["per_seed_values"]["clip"]["blackbox_robust_acc"])
            if a is not None and b is not None and np.isfinite(a - b)]
    if len(gaps) > 1:  # the seed sd of the paired gap; undefined (None) below two finite pairs
        assert bb.spread == pytest.approx(float(np.std(gaps, ddof=1)))
    else:
        assert bb.spread is None
    if (tmp_path / "arms.png").is_file():  # with the [plot] extra: the figure beside the headline claims
        assert bb.plot == "arms.png"


@pytest.mark.slow
@pytest.mark.realdata
def test_reproduce_quick_cli(tmp_path):
    if not (Path(os.environ.get("ICLR25_DATA", "")) / "cifar10-subset" / "cifar10_subset.npz").is_file():
        pytest.skip("needs cifar10-subset/cifar10_subset.npz under ICLR25_DATA")
    r = subprocess.run([sys.executable, "-m", "iclr25.lotos", "reproduce", "--quick", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    data = json.loads((tmp_path / "results.json").read_text())
    assert [c["name"] for c in data["claims"]] == NAMES


def test_seeds_in_parallel_processes_give_the_same_numbers(tmp_path, monkeypatch):
    pytest.importorskip("sklearn", reason="the digits data set needs the [digits] extra")
    tiny = dict(R.QUICK, n_train=100, n_test=40, num_models=2, n_surrogates=1, width=4, epochs=1,
                batch_size=50, clip_every=2, steps=2)
    monkeypatch.setattr(R, "QUICK", tiny)
    a = R.reproduce(True, tmp_path / "a", data="digits", quiet=True, seeds=(0, 1), workers=1)
    b = R.reproduce(True, tmp_path / "b", data="digits", quiet=True, seeds=(0, 1), workers=2)
    same = [(x.ours == y.ours) or (math.isnan(x.ours) and math.isnan(y.ours)) for x, y in zip(a, b)]
    assert all(same), [(x.name, x.ours, y.ours) for x, y in zip(a, b)]
    # the tiny preset leaves no eligible points for transfer rates (NaN); cross gains are always measured
    note = next(c for c in a if c.name == "mechanism/cross_gain").note
    assert "± " in note and "seed spread" in note and "per seed" in note


def test_resume_reuses_records_and_refuses_changed_settings(tmp_path, monkeypatch):
    """The seeds are runner jobs: a --resume over finished records trains nothing and gives the same claims;
    another preset is refused, naming the job."""
    pytest.importorskip("sklearn", reason="the digits data set needs the [digits] extra")
    tiny = dict(R.QUICK, n_train=100, n_test=40, num_models=2, n_surrogates=1, width=4, epochs=1,
                batch_size=50, clip_every=2, steps=2)
    monkeypatch.setattr(R, "QUICK", tiny)
    a = R.reproduce(True, tmp_path, data="digits", quiet=True, seeds=(0, 1), workers=1)
    assert sorted(f.name for f in (tmp_path / "records").glob("*.json")) == ["seed0.json", "seed1.json"]

    def no_training(*args, **kwargs):
        raise AssertionError("a resumed run with every record there must not train")

    monkeypatch.setattr(R, "_run_seed", no_training)
    b = R.reproduce(True, tmp_path, data="digits", quiet=True, seeds=(0, 1), workers=1, resume=True)
    assert [(x.name, x.note) for x in a] == [(y.name, y.note) for y in b]
    assert all((x.ours == y.ours) or (math.isnan(x.ours) and math.isnan(y.ours)) for x, y in zip(a, b))
    monkeypatch.setattr(R, "QUICK", dict(tiny, epochs=2))
    with pytest.raises(ValueError, match=r"other settings \(job seed0\.settings\.preset\.epochs: 1 -> 2"):
        R.reproduce(True, tmp_path, data="digits", quiet=True, seeds=(0, 1), workers=1, resume=True)
