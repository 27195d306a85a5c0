"""Smoke test of reproduce() with tiny settings (the full quick run is marked slow)."""

import json
import os

import pytest
import torch

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
    return out, reproduce(True, out, settings=ReproSettings(**TINY), quiet=True, workers=1)


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


@pytest.mark.realdata
def test_claim_fields_and_plots(tiny_run):
    tmp_path, claims = tiny_run
    for c in claims:
        assert c.kind in ("headline", "mechanism") and c.paper_ref and c.n_seeds == 2
        assert c.spread is not None and c.spread == pytest.approx(
            json.loads((tmp_path / "raw_metrics.json").read_text())["stats"][c.name]["paired_sd"])
        assert "spec" not in c.paper_ref and "prototype" not in c.paper_ref
        if pytest.importorskip("matplotlib"):
            assert (tmp_path / c.plot).is_file()


@pytest.mark.realdata
def test_latent_mask_claim_can_fail_and_has_controls(tiny_run):
    """The mechanism read-out goes through each model's own trained decoder: the random-init control and the
    majority class are reported, and the claim compares two trained models (either may win)."""
    tmp_path, claims = tiny_run
    raw = json.loads((tmp_path / "raw_metrics.json").read_text())
    mech = raw["runs"][0]["mechanism"]
    assert set(mech) == {"mgm", "graphmae", "scratch_latent", "scratch_input", "majority"}
    assert all(0.0 <= v <= 1.0 for v in mech.values())
    c = {c.name: c for c in claims}["mechanism/latent_mask_keeps_circuit"]
    assert c.kind == "mechanism" and "random init with a latent mask" in c.note


def test_masked_reconstruction_known_answer():
    """A model whose decoder output ignores the graph and whose type head always says type t scores exactly the
    share of t among the masked nodes (independent count with the same masks)."""
    from types import SimpleNamespace

    from iclr25.mgvga.graph import mask_nodes
    from iclr25.mgvga.model import MGVGAConfig, MGVGAPretrainer
    from iclr25.mgvga.readouts import masked_reconstruction_accuracy

    torch.manual_seed(0)
    m = MGVGAPretrainer(MGVGAConfig(hidden_size=16, num_encoder_layers=1))
    head = m.mgm_type_head
    last = [x for x in head.modules() if isinstance(x, torch.nn.Linear)][-1]
    with torch.no_grad():
        for p in head.parameters():
            p.zero_()
        last.bias[1] = 1.0                                            # always predict type 1
    n = 50
    x = torch.randint(0, 3, (n,))
    g = SimpleNamespace(x=x, edge_index=torch.stack([torch.arange(n - 1), torch.arange(1, n)]), num_nodes=n)
    acc = masked_reconstruction_accuracy(m, [SimpleNamespace(graph=g)], input_masking=False, seed=5)
    mask = mask_nodes(n, m.cfg.mgm_mask_ratio, torch.Generator().manual_seed(5))
    assert acc == pytest.approx(float((x[mask] == 1).float().mean()))


@pytest.mark.realdata
def test_runner_resume_reuses_every_job(tiny_run, tmp_path):
    """The jobs run under the core runner: records per job; --resume after a finished run trains nothing and
    gives the same claims; other settings are refused."""
    ref_dir, ref = tiny_run
    assert sorted(p.name for p in (ref_dir / "records").iterdir()) == sorted(
        ["prep.json", *(f"pretrain_{o}_seed{s}.json" for o in ("mgm", "graphmae", "mgvga") for s in (0, 1)),
         "probes_seed0.json", "probes_seed1.json"])
    got = reproduce(True, ref_dir, settings=ReproSettings(**TINY), quiet=True, resume=True)
    assert _facts(got) == _facts(ref)
    with pytest.raises(ValueError, match="steps"):
        reproduce(True, ref_dir, settings=ReproSettings(**{**TINY, "steps": 5}), quiet=True, resume=True)


@pytest.mark.realdata
def test_resume_with_a_relative_out_is_the_same_run(tiny_run, monkeypatch):
    """`--out A --resume` from A's parent folder resumes a run started as `--out /abs/A` (the job settings hold
    absolute checkpoint paths; a relative --out used to count as changed settings and was refused)."""
    ref_dir, ref = tiny_run
    monkeypatch.chdir(ref_dir.parent)
    got = reproduce(True, ref_dir.name, settings=ReproSettings(**TINY), quiet=True, resume=True)
    assert _facts(got) == _facts(ref)


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
