"""Figures (issue 47 §2): written from the reproduction's numbers with seed error bars, readable sizes; without
matplotlib one warning naming the install command."""

from __future__ import annotations

import logging

import pytest


def _raw():
    pts = lambda a, f: [{"step": s, "lr": 3e-3, "val_accuracy": 0.5 + a * s, "test_accuracy": 0.5 + a * s,  # noqa: E731
                         "general_nll": 4.0 + f * s} for s in (0, 25, 50)]
    methods = {"q-adapter-code": (0.001, 0.001), "q-adapter-paper": (0.004, 0.004), "dpo": (0.005, 0.006),
               "sft": (0.002, 0.001)}
    points = {m: {0: pts(*v), 1: pts(v[0] * 1.1, v[1] * 0.9)} for m, v in methods.items()}
    tuned = {m: [p[-1] for p in by.values()] for m, by in points.items()}
    matched = {f"{m}|{o}": [{"forgetting_a": 0.01, "forgetting_b": 0.02}, {"forgetting_a": 0.015, "forgetting_b": 0.03}]
               for m in ("q-adapter-code", "q-adapter-paper") for o in ("dpo", "sft")}
    return {"base": {"general_nll": 4.0, "pair_accuracy": 0.51}, "points": points, "tuned": tuned, "matched": matched}


def test_write_plots(tmp_path):
    pytest.importorskip("matplotlib")
    from PIL import Image

    from iclr25.q_adapter.plots import write_plots

    paths = write_plots(_raw(), tmp_path)
    assert [p.name for p in paths] == ["headline.png", "tradeoff.png"]
    for p in paths:
        w, h = Image.open(p).size
        assert w <= 1200 and h > 0  # <= 12 in at 100 dpi


def test_without_matplotlib_warns_once_with_the_install_command(tmp_path, monkeypatch, caplog):
    from iclr25.q_adapter import plots

    monkeypatch.setattr(plots, "have_matplotlib", lambda: False)
    with caplog.at_level(logging.WARNING):
        assert plots.write_plots(_raw(), tmp_path) == []
    msgs = [r.getMessage() for r in caplog.records if "matplotlib" in r.getMessage()]
    assert len(msgs) == 1 and "pip install 'iclr25-q-adapter[plot]'" in msgs[0]
    assert not list(tmp_path.iterdir())
