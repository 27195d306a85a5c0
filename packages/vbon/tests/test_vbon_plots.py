"""Figures (issue 47 §2): win rate vs KL and the matched-cost figure, with error bars; without matplotlib one
warning naming the install command."""

from __future__ import annotations

import logging

import pytest


def _inputs():
    run = lambda w, k: {"win_rate": w, "win_rate_se": 0.03, "kl": k}  # noqa: E731
    results = {"vbon-exact-N2": run(0.58, 0.3), "vbon-exact-N4": run(0.61, 0.4), "vbon-exact-N8": run(0.63, 1.2),
               "rlhf-beta0.3": run(0.63, 0.8), "rlhf-beta1": run(0.61, 0.4)}
    bon = {2: {"win_rate": 0.59, "se": 0.03}, 4: {"win_rate": 0.75, "se": 0.03}, 8: {"win_rate": 0.86, "se": 0.02}}
    tp = {"vbon_s": 1.0, "bon_s": {1: 1.1, 2: 2.0, 4: 4.1, 8: 8.0}, "prompts": 64,
          "matched": {"n_match": 2.36, "ratio": 2.3, "ratio_se": 0.4}}
    return results, bon, tp, (2, 4, 8), (1.0, 0.3), ("exact",)


def test_write_plots(tmp_path):
    pytest.importorskip("matplotlib")
    from PIL import Image

    from iclr25.vbon.plots import write_plots

    paths = write_plots(*_inputs(), tmp_path)
    assert [p.name for p in paths] == ["win_rate_vs_kl.png", "inference_cost.png"]
    for p in paths:
        assert Image.open(p).size[0] <= 1200


def test_without_matplotlib_warns_once_with_the_install_command(tmp_path, monkeypatch, caplog):
    from iclr25.vbon import plots

    monkeypatch.setattr(plots, "have_matplotlib", lambda: False)
    with caplog.at_level(logging.WARNING):
        assert plots.write_plots(*_inputs(), tmp_path) == []
    msgs = [r.getMessage() for r in caplog.records if "matplotlib" in r.getMessage()]
    assert len(msgs) == 1 and "pip install 'iclr25-vbon[plot]'" in msgs[0]
