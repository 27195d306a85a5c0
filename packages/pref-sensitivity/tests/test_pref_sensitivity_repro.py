"""Smoke test of reproduce() with tiny settings; the full quick run is marked slow."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from iclr25.core.results import Claim
from iclr25.pref_sensitivity import reproduce as repro_mod

NAMES = [
    "bt_mle/variance_peaks_near_dominant",
    "mechanism/bt_mle/sd_follows_sensitivity",
    "dpo_tabular/implied_prob_matches_bt",
    "mechanism/dpo_tabular/trained_edges_fit_empirical",
    "dpo_tiny_lm/sharp_rise_near_dominant",
    "mechanism/dpo_tiny_lm/trained_edge_tracks_target",
]


def test_reproduce_tiny_settings(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    tiny = dict(mle_n=(1000,), mle_seeds=8, tab_pairs=1000, lm_grid=(0.01, 0.05), lm_contrast_grid=(0.01, 0.05),
                lm_steps=5, lm_seeds=1, lm_pairs=64)
    monkeypatch.setitem(repro_mod.SETTINGS, "quick", tiny)
    claims = repro_mod.reproduce(True, tmp_path, workers=1, quiet=True)
    assert [c.name for c in claims] == NAMES
    assert all(isinstance(c, Claim) for c in claims)
    by = {c.name: c for c in claims}
    # the exact parts hold even at tiny scale; the LM claims are only measured (5 steps), and the
    # delta-method sd needs many seeds at a large N
    for n in ("bt_mle/variance_peaks_near_dominant", "dpo_tabular/implied_prob_matches_bt",
              "mechanism/dpo_tabular/trained_edges_fit_empirical"):
        assert by[n].holds, (n, by[n].ours)
    for n in ("mechanism/bt_mle/sd_follows_sensitivity", "dpo_tiny_lm/sharp_rise_near_dominant",
              "mechanism/dpo_tiny_lm/trained_edge_tracks_target"):
        assert math.isfinite(by[n].ours), n
    for f in ("bt_mle.csv", "dpo_tabular.csv", "dpo_tiny_lm_dominant.jsonl", "dpo_tiny_lm_contrast.jsonl",
              "records/bt_mle.json", "details.json", "sensitivity_heatmap.png",
              "bt_mle.png", "dpo_tiny_lm.png"):
        assert (tmp_path / f).is_file(), f
    for c in claims:  # the claim record: kind, where in the paper, seeds behind it, the figure (written)
        assert c.paper_ref.endswith("direction only") and c.n_seeds >= 1 and "spec" not in c.paper
        assert not c.plot or (tmp_path / c.plot).is_file()
    assert by["bt_mle/variance_peaks_near_dominant"].n_seeds == 8 and by["dpo_tabular/implied_prob_matches_bt"].kind == "sanity"
    details = json.loads((tmp_path / "details.json").read_text())
    np.testing.assert_allclose(details["region_area"]["1"]["quad"], math.log(2) / 2, atol=1e-9)
    # the identities are tests now; their measured differences stay in details.json
    assert details["closed_form_vs_autograd"]["max_abs_diff"] < 1e-8
    assert details["bt_mle_identities"]["max_abs_diff_p13_mle_vs_closed_form"] < 1e-6


def test_entry_point_registered():
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="iclr25.methods")}
    assert eps.get("pref-sensitivity") == "iclr25.pref_sensitivity.reproduce:reproduce"


def test_dpo_tiny_lm_learns_training_preferences():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from iclr25.pref_sensitivity import make_chain_data, tiny_gpt2_options, train_dpo_lm

    torch.set_num_threads(1)
    model, batch = tiny_gpt2_options(seed=0)
    data = make_chain_data(0.9, 0.2, n_pairs=200)
    res = train_dpo_lm(model, batch, data, steps=150, lr=3e-3)
    assert res["loss_history"][-1] < res["loss_history"][0]
    assert res["implied"][0, 1] > 0.7 and res["implied"][1, 2] < 0.4


def test_tokenize_options_with_byte_tokenizer():
    pytest.importorskip("transformers")
    from iclr25.core.lm import byte_tokenizer
    from iclr25.pref_sensitivity import tokenize_options

    b = tokenize_options(byte_tokenizer(), "Q: pet? A:", [" dog", " bird"])
    assert b.input_ids.shape == (2, 15)
    assert b.response_mask[0].sum() == 4 and b.response_mask[1].sum() == 5
    assert b.attention_mask[0].sum() == 14
    with pytest.raises(ValueError, match="non-empty"):
        tokenize_options(byte_tokenizer(), "Q", ["", "x"])


def test_dpo_resume_skips_finished_points(tmp_path):
    pytest.importorskip("torch")
    from iclr25.pref_sensitivity import dpo_chain_experiment

    f = tmp_path / "sweep.jsonl"
    rows = dpo_chain_experiment(0.99, (0.01, 0.2), backend="tabular", n_pairs=100, out_file=f)
    assert len(f.read_text().splitlines()) == 2
    again = dpo_chain_experiment(0.99, (0.01, 0.2, 0.5), backend="tabular", n_pairs=100, out_file=f, resume=True)
    assert len(f.read_text().splitlines()) == 3  # only the new point was run and appended
    assert again[0]["seconds"] == rows[0]["seconds"]
    with pytest.raises(ValueError, match="backend"):
        dpo_chain_experiment(0.99, (0.01,), backend="nope")


@pytest.mark.slow
def test_reproduce_quick_cli(tmp_path):
    r = subprocess.run([sys.executable, "-m", "iclr25.pref_sensitivity", "reproduce", "--quick", "--out",
                        str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    chk = Path(__file__).resolve().parents[4] / "shared" / "tools" / "check_claims.py"  # ../shared beside the checkout
    data = json.loads((tmp_path / "results.json").read_text())
    assert [c["name"] for c in data["claims"]] == NAMES
    if chk.is_file():
        r = subprocess.run([sys.executable, str(chk), str(tmp_path), "pref-sensitivity", *NAMES],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout


@pytest.mark.realdata
def test_hh_rlhf_loader():
    from iclr25.core.data import DataNotFoundError
    from iclr25.pref_sensitivity.data import load_hh_pairs

    try:
        pairs = load_hh_pairs(limit=50)
    except DataNotFoundError as e:
        pytest.skip(f"aihf/hh_rlhf_harmless_base_test.jsonl.gz not mirrored: {e}")
    assert len(pairs) == 50
    prompt, chosen, rejected = pairs[0]
    assert prompt.startswith("\n\nHuman:") and prompt.endswith("Assistant:")
    assert chosen and rejected and chosen != rejected


@pytest.mark.realdata
def test_hh_reward_sensitivity_real_data():
    from iclr25.core.data import DataNotFoundError
    from iclr25.pref_sensitivity.realdata import hh_reward_sensitivity

    try:
        r = hh_reward_sensitivity((2.0, 5.0, 10.0), n_responses=40, l2=1e-5)
    except DataNotFoundError as e:
        pytest.skip(f"aihf/hh_rlhf_harmless_base_test.jsonl.gz not mirrored: {e}")
    assert r["n_pairs"] == 2307
    assert r["heldout_accuracy"] > 0.55  # a real (if weak) reward model: chance is 0.5
    f = list(r["by_lambda"].values())
    assert 0 <= f[2] <= f[1] <= f[0] <= 1 and f[0] > 0


def test_train_dpo_lm_checkpoint_resume_matches_uninterrupted(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from iclr25.pref_sensitivity import make_chain_data, tiny_gpt2_options, train_dpo_lm

    torch.set_num_threads(1)
    data = make_chain_data(0.9, 0.3, n_pairs=100)
    m, b = tiny_gpt2_options(seed=1)
    full = train_dpo_lm(m, b, data, steps=12, batch_size=16, seed=3)
    m1, b1 = tiny_gpt2_options(seed=1)
    train_dpo_lm(m1, b1, data, steps=6, batch_size=16, seed=3, checkpoint_dir=tmp_path / "ck", checkpoint_every=3)
    assert (tmp_path / "ck" / "model.safetensors").is_file()
    m2, b2 = tiny_gpt2_options(seed=1)  # a fresh start: the initial model is the reference
    res = train_dpo_lm(m2, b2, data, steps=12, batch_size=16, seed=3, checkpoint_dir=tmp_path / "ck")
    assert res["resumed_from"] == 6
    np.testing.assert_allclose(res["loss_history"], full["loss_history"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(res["implied"], full["implied"], atol=1e-6)


def test_train_dpo_lm_refuses_a_checkpoint_of_other_settings(tmp_path):
    """Trial b (session 52): a point killed mid-training and resumed with another --lr went on from the
    checkpoint with the old lr (Adam's saved state wins) and another beta/batch size mixed two trainings;
    a checkpoint past --steps returned a model trained for more steps than asked."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from iclr25.pref_sensitivity import make_chain_data, tiny_gpt2_options, train_dpo_lm

    torch.set_num_threads(1)
    data = make_chain_data(0.9, 0.3, n_pairs=50)
    m, b = tiny_gpt2_options(seed=1)
    train_dpo_lm(m, b, data, steps=4, batch_size=16, seed=3, checkpoint_dir=tmp_path / "ck", checkpoint_every=2)
    for kw, name in (({"lr": 1e-2}, "lr"), ({"beta": 0.5}, "beta"), ({"batch_size": 8}, "batch_size"),
                     ({"steps": 2}, "past steps")):
        m2, b2 = tiny_gpt2_options(seed=1)
        with pytest.raises(ValueError, match=name):
            train_dpo_lm(m2, b2, data, **{"steps": 8, "batch_size": 16, "seed": 3, **kw},
                         checkpoint_dir=tmp_path / "ck")


def test_dpo_resume_refuses_changed_settings_naming_them(tmp_path):
    """Trial b (session 52): `dpo --resume --beta 0.2` into a sweep run with beta 0.1 reused the beta-0.1
    points silently (exit 0, the table labelled as this run). Changed training settings are refused by
    name; a larger p23 grid or more seeds is a resume."""
    pytest.importorskip("torch")
    from iclr25.pref_sensitivity import dpo_chain_experiment

    f = tmp_path / "sweep.jsonl"
    dpo_chain_experiment(0.99, (0.01, 0.2), backend="tabular", n_pairs=100, out_file=f)
    with pytest.raises(ValueError, match=r"beta.*0\.1.*0\.2"):
        dpo_chain_experiment(0.99, (0.01, 0.2), backend="tabular", n_pairs=100, beta=0.2, out_file=f, resume=True)
    with pytest.raises(ValueError, match="n_pairs"):
        dpo_chain_experiment(0.99, (0.01,), backend="tabular", n_pairs=200, out_file=f, resume=True)
    with pytest.raises(ValueError, match="sampling"):
        dpo_chain_experiment(0.99, (0.01,), backend="tabular", n_pairs=100, sampling="bernoulli", out_file=f,
                             resume=True)
    again = dpo_chain_experiment(0.99, (0.01, 0.2, 0.5), backend="tabular", n_pairs=100, seeds=[0, 1],
                                 out_file=f, resume=True)
    assert len(again) == 6 and len(f.read_text().splitlines()) == 6
    f.write_text(f.read_text() + '{"backend": "tabular", "p12": 0.9')  # a row cut short by kill -9
    again = dpo_chain_experiment(0.99, (0.01, 0.2, 0.5), backend="tabular", n_pairs=100, seeds=[0, 1],
                                 out_file=f, resume=True)
    assert len(again) == 6 and len(f.read_text().splitlines()) == 6


def test_dpo_fresh_run_starts_the_sweep_file_over(tmp_path):
    """Without --resume the old points were kept and the new ones appended: sweep.jsonl held both runs."""
    pytest.importorskip("torch")
    from iclr25.pref_sensitivity import dpo_chain_experiment

    f = tmp_path / "sweep.jsonl"
    dpo_chain_experiment(0.99, (0.01, 0.2), backend="tabular", n_pairs=100, out_file=f)
    dpo_chain_experiment(0.99, (0.05,), backend="tabular", n_pairs=100, beta=0.2, out_file=f)
    rows = [json.loads(x) for x in f.read_text().splitlines()]
    assert [r["p23"] for r in rows] == [0.05] and rows[0]["beta"] == 0.2
