"""Smoke test of reproduce() with tiny settings (the full quick run is marked slow)."""

import json
import os
import signal

import pytest
import torch

import iclr25.mgvga.reproduce as R
from iclr25.mgvga.reproduce import ReproSettings, reproduce

NAMES = ["qor/mgm_lt_input_masking", "qor/mgm_lt_scratch", "gate/logicprob_mgm_lt_input_masking",
         "gate/logicprob_mgm_lt_scratch", "gate/logicprob_mgvga_lt_mgm", "gate/equiv_mgm_gt_scratch",
         "gate/equiv_mgvga_gt_mgm", "vga/paired_text_lt_shuffled", "equivalence/mgvga_ge_mgm",
         "mechanism/latent_mask_keeps_circuit"]

TINY = dict(hidden_size=16, num_encoder_layers=2, steps=4, n_synthetic=12, n_eval_pairs=6, max_nodes=600,
            qor_max_recipes=20, qor_seeds=(0,), qor_max_designs=4, eq_max_pairs=12, pretrain_seeds=(0, 1),
            gate_designs=("ctrl", "int2float", "dec"), gate_folds=3, gate_epochs=10, gate_max_pairs=20,
            gate_max_gates=300)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from pathlib import Path

    if not any(r and (Path(r) / "mgvga" / "epfl").is_dir() for r in os.environ.get("ICLR25_DATA", "").split(os.pathsep)):
        pytest.skip("needs the mirrored data $ICLR25_DATA/mgvga (e.g. export ICLR25_DATA=/path/to/data)")
    out = tmp_path_factory.mktemp("tiny")
    return out, reproduce(True, out, settings=ReproSettings(**TINY), quiet=True)


@pytest.mark.realdata
def test_reproduce_tiny(tiny_run):
    tmp_path, claims = tiny_run
    assert [c.name for c in claims] == NAMES
    for c in claims:
        assert c.baseline is not None and c.ours == c.ours  # measured, not NaN
        assert "paired sd" in c.note and c.margin > 0
    raw = json.loads((tmp_path / "raw_metrics.json").read_text())  # strict JSON: no NaN
    assert raw["pool"]["eval_dropped_same_structure"] == 0
    assert len(raw["runs"]) == 2 and set(raw["runs"][0]["gate_lp"]) == {"mgm", "graphmae", "mgvga", "scratch"}
    assert all(v["positives"] > 0 for v in raw["gate_pairs"].values())


def _facts(claims):
    return [(c.name, c.ours, c.baseline, c.margin, c.holds, c.note) for c in claims]


def _sigterm_self():
    os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.slow
@pytest.mark.realdata
def test_reproduce_stopped_by_sigterm_resumes_to_the_uninterrupted_result(tiny_run, tmp_path, monkeypatch):
    ref_dir, ref = tiny_run
    s = ReproSettings(**TINY)
    real_pretrain, real_node_emb = R.pretrain, R.node_embeddings

    # piece 1: SIGTERM during seed 0's GraphMAE-style pre-training, after its 2nd step
    def pretrain_sigterm(model, *a, should_stop, **kw):
        n = []

        def poll():
            n.append(1)
            if model.cfg.objective == "graphmae" and len(n) == 2:
                _sigterm_self()
            return should_stop()

        return real_pretrain(model, *a, should_stop=poll, **kw)

    monkeypatch.setattr(R, "pretrain", pretrain_sigterm)
    with pytest.raises(KeyboardInterrupt):
        reproduce(True, tmp_path, settings=s, quiet=True)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored
    st = json.loads((tmp_path / "run_state.json").read_text())
    assert [p["status"] for p in st["pieces"]] == ["stopped"] and st["done"]["0"]["pretrained"] == ["mgm"]
    meta = json.loads(torch.load(tmp_path / "ckpt_graphmae_seed0.pt", weights_only=True)["meta"])
    assert meta["step"] == 2 and not (tmp_path / "ckpt_mgvga_seed0.pt").exists()
    assert {"qor_fixed", "gate_pairs", "gate_hand"} <= set(json.loads((tmp_path / "prep.json").read_text()))

    # piece 2: SIGTERM in the probes (not pre-training): the 3rd node-embedding pass = GraphMAE's probe
    monkeypatch.setattr(R, "pretrain", real_pretrain)
    calls = []

    def node_emb_sigterm(*a, **kw):
        calls.append(1)
        if len(calls) == 3:
            _sigterm_self()
        return real_node_emb(*a, **kw)

    monkeypatch.setattr(R, "node_embeddings", node_emb_sigterm)
    with pytest.raises(KeyboardInterrupt):
        reproduce(True, tmp_path, settings=s, quiet=True, resume=True)
    st = json.loads((tmp_path / "run_state.json").read_text())
    assert [p["status"] for p in st["pieces"]] == ["stopped", "stopped"]
    assert st["done"]["0"] == {"pretrained": ["mgm", "graphmae", "mgvga"], "probes": ["mgm"]}
    assert list(json.loads((tmp_path / "seed0_probes.json").read_text())["gate_eq"]) == ["mgm"]

    # piece 3: resume to the end; everything measured equals the uninterrupted run
    monkeypatch.setattr(R, "node_embeddings", real_node_emb)
    with pytest.raises(ValueError, match="other settings.*steps"):
        reproduce(True, tmp_path, settings=ReproSettings(**{**TINY, "steps": 5}), quiet=True, resume=True)
    got = reproduce(True, tmp_path, settings=s, quiet=True, resume=True)
    assert _facts(got) == _facts(ref)
    a, b = (json.loads((d / "raw_metrics.json").read_text()) for d in (ref_dir, tmp_path))
    assert a["runs"] == b["runs"] and a["pretrain_last"] == b["pretrain_last"]
    assert [p["status"] for p in b["timing_s"]["pieces"]] == ["stopped", "stopped", "running"]
    assert json.loads((tmp_path / "run_state.json").read_text())["pieces"][-1]["status"] == "finished"
    # a run without --resume starts fresh: earlier checkpoints and probe results are removed first
    monkeypatch.setattr(R, "pretrain", pretrain_sigterm)
    with pytest.raises(KeyboardInterrupt):
        reproduce(True, tmp_path, settings=s, quiet=True)
    assert not (tmp_path / "seed0_probes.json").exists() and not (tmp_path / "ckpt_mgm_seed1.pt").exists()
    assert (tmp_path / "prep.json").is_file()  # rebuilt by the fresh run before it was stopped


def test_reproduce_needs_two_seeds():
    with pytest.raises(ValueError, match="at least 2 pre-training seeds"):
        ReproSettings(pretrain_seeds=(0,))


@pytest.mark.slow
@pytest.mark.realdata
def test_reproduce_quick(tmp_path, mirror):
    claims = reproduce(True, tmp_path)
    assert [c.name for c in claims] == NAMES


def test_repeated_pretrain_seeds_are_refused():
    """`--seeds 42 42` would make every paired spread 0, so any positive gain would 'hold'."""
    with pytest.raises(ValueError, match="repeats a seed"):
        ReproSettings(pretrain_seeds=(42, 42))
    with pytest.raises(ValueError, match="repeats a seed"):
        reproduce(True, "unused-out", seeds=[42, 42])
