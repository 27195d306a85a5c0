"""Validity of the certificates (issue #40): empirical coverage of the Clopper-Pearson lower bound against a
classifier whose smoothed class probabilities are known exactly, for every shipped vote design, through the
API and the CLI; and certificates that do not depend on chunking or on kill + resume.

The known-p model: a text of L = 10 tokens, uniform randomisation with ω_M = 1/2, so the set of masked
positions read as a 10-bit number u is uniform on {0, ..., 1023}. Copy k votes class 0 iff u < t_k. The
smoothed probability of class 0 is then mean_k t_k / 1024 (iid design: a copy drawn uniformly per vote) or
#{u : most copies vote 0 (ties -> class 0)} / 1024 (grid design: each text counts once with its copies'
majority) — both computed below by enumerating u, independently of the package.
"""

import json
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from iclr25.frs import clopper_pearson_lower
from iclr25.frs.certification import certify
from iclr25.frs.smoothing import FRSClassifier

L, MASK = 10, "[MASK]"
TEXT = [f"t{i}" for i in range(L)]
ALPHA = 0.05
#: correlated copies: they disagree only for u in [492, 532) (3.9 % of texts)
THRESHOLDS = (492, 502, 512, 522, 532)
#: N = 30 votes: where the single-sample bound at level α undercovers most at p = 1/2 (0.099, see below)
N_VOTES = 30


class KnownModel:
    """Votes by threshold on the mask pattern u (module docstring); ``thresholds`` = one per copy."""

    num_classes, mask_token, token_unit, label_names, truncated = 2, MASK, "whitespace", ["0", "1"], 0

    def __init__(self, thresholds=(512,)):
        self.thresholds = np.asarray(thresholds)

    def tokenize(self, text):
        return text.split()

    def top_parameter_names(self, top_layers):  # lets the CLI build "copies" for it
        return ["w"]

    @staticmethod
    def _u(batch):
        return np.array([sum(1 << i for i, t in enumerate(toks) if t == MASK) for toks in batch])

    def _proba(self, u, t):
        v0 = (u < t).astype(float)
        return np.stack([v0, 1.0 - v0], -1)

    def predict_proba(self, batch):
        return self._proba(self._u(batch), self.thresholds[0])

    def predict_proba_copies(self, batch, copies):
        u = self._u(batch)
        return np.stack([self._proba(u, t) for t in self.thresholds[: copies.k]])


def _copies(k):
    return SimpleNamespace(k=k, sigma=0.01, top_layers=1)


def true_p(thresholds, design):
    """Exact smoothed probabilities [p_0, p_1] by enumerating the 1024 equally likely mask patterns."""
    u = np.arange(1024)[:, None]
    votes0 = (u < np.asarray(thresholds)[None, :])  # [1024, K]
    if design == "iid":
        p0 = votes0.mean()
    else:  # grid: majority of the K copies, ties -> class 0
        p0 = np.mean(votes0.sum(1) * 2 >= len(thresholds))
    return np.array([p0, 1 - p0])


def _coverage(labels, lowers, p):
    covered = np.asarray(lowers) <= p[np.asarray(labels)] + 1e-12
    return float(covered.mean())


def _floor(reps):
    return 1 - ALPHA - 3 * np.sqrt(ALPHA * (1 - ALPHA) / reps)


def test_known_p_model_is_what_the_docstring_says():
    # independent check of the fixture: masking with ω = 1/2 makes u uniform, so the vote share -> t / 1024
    m = KnownModel((300,))
    clf = FRSClassifier(m, None, randomization="uniform", w_high=0.9, w_mid=0.5, n_random=2000, alpha=ALPHA)
    v = clf.predict_many([TEXT])[0]
    assert v.counts[0] / v.num_votes == pytest.approx(300 / 1024, abs=0.035)
    assert true_p(THRESHOLDS, "iid")[0] == 0.5 and true_p(THRESHOLDS, "grid")[0] == 0.5


@pytest.mark.parametrize("design,thresholds,n_random", [
    ("independent", (512,), 30),  # K = 1: each vote a Bernoulli(1/2) draw
    ("iid", THRESHOLDS, 6),  # correlated copies, N = K n = 30
    ("grid", THRESHOLDS, 30),  # correlated copies, each text once: N = n = 30
    ("iid", (700, 720, 740, 760, 780), 6),  # p_0 = 0.72: not a tie
])
def test_api_lower_bound_covers_the_true_probability(design, thresholds, n_random):
    reps = 2000
    m = KnownModel(thresholds)
    copies = None if design == "independent" else _copies(len(thresholds))
    clf = FRSClassifier(m, copies, randomization="uniform", w_high=0.9, w_mid=0.5, n_random=n_random, alpha=ALPHA,
                        vote_design="grid" if design == "grid" else "iid", seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        certs = certify(clf, [TEXT] * reps, alpha=ALPHA)
    p = true_p(thresholds, "grid" if design == "grid" else "iid")
    assert certs[0].num_votes == N_VOTES
    cov = _coverage([c.label for c in certs], [c.p_a_lower for c in certs], p)
    assert cov >= _floor(reps), f"{design}: coverage {cov:.4f} < {_floor(reps):.4f} (true p {p})"
    if max(p) > 0.6:  # not vacuous: most texts are certified at p_0 = 0.71
        assert np.mean([not c.abstain for c in certs]) > 0.5


def test_the_old_single_sample_bound_at_alpha_undercovers_near_a_tie():
    """Why certify bounds at α/C: the same votes select and bound the class; at level α the selected class's
    bound fails ≈ 2α of the time when p = 1/2 (exact enumeration, N = 30)."""
    from scipy.stats import binom

    n = N_VOTES
    k = np.arange(n + 1)
    pk = binom.pmf(k, n, 0.5)
    bad = lambda a: float(np.sum(pk[clopper_pearson_lower(np.maximum(k, n - k), n, a) > 0.5]))  # noqa: E731
    assert bad(ALPHA) > 0.09 and bad(ALPHA / 2) <= ALPHA


def test_grid_votes_counted_as_k_times_n_trials_are_not_a_certificate():
    """The issue's simulation: K = 4 near-identical copies x n = 2 texts, true p_A = 1/2, votes counted as
    N = 8 independent trials -> the bound exceeds 1/2 in ~25 % of runs (the shipped grid counts N = n)."""
    k = 4 * np.random.default_rng(0).binomial(2, 0.5, 200000)
    assert np.mean(clopper_pearson_lower(k, 8, 0.05) > 0.5) > 0.2


@pytest.mark.parametrize("design", ["iid", "grid"])
def test_cli_certificates_cover_the_true_probability(design, tmp_path, monkeypatch, capsys):
    import iclr25.frs.bmps as bmps
    import iclr25.frs.cli as cli

    reps = 2000
    m = KnownModel(THRESHOLDS)
    monkeypatch.setattr(cli, "_load_model", lambda *a, **k: m)
    monkeypatch.setattr(bmps, "sample_parameter_copies", lambda model, k, **kw: _copies(k))
    data = tmp_path / "d.tsv"
    data.write_text("sentence\tlabel\n" + f"{' '.join(TEXT)}\t0\n" * reps)
    n_random = 6 if design == "iid" else 30
    args = ["certify", "--model", "known", "--data", str(data), "--defense", "uniform", "--w-mid", "0.5", "--k", "5",
            "--n-random", str(n_random), "--vote-design", design, "--out", str(tmp_path / "c"), "--quiet", "--seed", "5"]
    assert cli.main(args) == 0, capsys.readouterr().err
    recs = [json.loads(r) for r in (tmp_path / "c" / "certificates.jsonl").read_text().splitlines()]
    assert len(recs) == reps and {r["num_votes"] for r in recs} == {N_VOTES}
    res = json.loads((tmp_path / "c" / "results.json").read_text())
    assert res["smoothing"]["vote_design"] == design
    cov = _coverage([r["label"] for r in recs], [r["p_a_lower"] for r in recs], true_p(THRESHOLDS, design))
    assert cov >= _floor(reps), f"CLI {design}: coverage {cov:.4f}"


def test_cli_and_api_default_to_the_iid_design():
    from iclr25.frs.config import CertifyConfig, EvaluateConfig

    assert CertifyConfig(model="m").vote_design == "iid" and EvaluateConfig(model="m").vote_design == "iid"
    assert FRSClassifier(KnownModel(), None, randomization="uniform").vote_design == "iid"


# ---- chunking and resume ---------------------------------------------------------------------------------


def _cert_args(model, data, out, *extra):
    return ["certify", "--model", str(model), "--data", str(data), "--k", "3", "--n-random", "3", "--iterations", "4",
            "--n", "12", "--out", str(out), "--quiet", *extra]


def _read(path):
    recs = [json.loads(r) for r in path.read_text().splitlines()]
    return {r["index"]: r for r in recs}


def test_certificates_do_not_depend_on_chunk_or_kill_and_resume(tmp_path, tiny_tsv):
    from iclr25.frs.cli import main
    from iclr25.frs.data import load_dataset
    from iclr25.frs.models import TinyClassifier, Vocab

    ds = load_dataset(str(tiny_tsv))
    toks = [t.split() for t in ds.texts]
    clf = TinyClassifier.create(Vocab.build(toks, min_count=1), 2, d_model=8, n_heads=2, d_ff=8, seed=0)
    clf.save(tmp_path / "m")
    assert main(_cert_args(tmp_path / "m", tiny_tsv, tmp_path / "a", "--chunk", "64")) == 0
    a = _read(tmp_path / "a" / "certificates.jsonl")
    assert main(_cert_args(tmp_path / "m", tiny_tsv, tmp_path / "b", "--chunk", "5")) == 0
    assert _read(tmp_path / "b" / "certificates.jsonl") == a
    # kill after the first chunk (a torn line after it), then --resume
    assert main(_cert_args(tmp_path / "m", tiny_tsv, tmp_path / "r", "--chunk", "5")) == 0
    path = tmp_path / "r" / "certificates.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:5]) + "\n" + lines[5][:40])
    assert main(_cert_args(tmp_path / "m", tiny_tsv, tmp_path / "r", "--chunk", "3", "--resume")) == 0
    assert _read(path) == a
    # the comparison is not vacuous: another run seed changes the randomness and so some certificates
    assert main(_cert_args(tmp_path / "m", tiny_tsv, tmp_path / "s", "--seed", "1")) == 0
    other = _read(tmp_path / "s" / "certificates.jsonl")
    assert any(other[i]["counts"] != a[i]["counts"] or other[i]["segment"] != a[i]["segment"] for i in a)


def test_votes_of_a_text_do_not_depend_on_the_other_texts_of_the_call():
    m = KnownModel(THRESHOLDS)
    clf = FRSClassifier(m, _copies(5), randomization="uniform", w_high=0.9, w_mid=0.5, n_random=3, seed=0)
    texts = [TEXT, TEXT[::-1], TEXT[:5] + TEXT[:5]]
    together = clf.predict_many(texts, indices=[10, 11, 12])
    alone = [clf.predict_many([t], indices=[i])[0] for t, i in zip(texts, [10, 11, 12])]
    assert [v.counts.tolist() for v in together] == [v.counts.tolist() for v in alone]


def test_certify_resume_refuses_an_edited_data_file_or_a_model_retrained_in_place(tmp_path, tiny_tsv, capsys):
    """--resume compared the model and the data by path only: relabelled data or a model retrained into the same
    folder were resumed silently, mixing certificates of two models / datasets."""
    from iclr25.frs.cli import main
    from iclr25.frs.data import load_dataset
    from iclr25.frs.models import TinyClassifier, Vocab

    ds = load_dataset(str(tiny_tsv))
    vocab = Vocab.build([t.split() for t in ds.texts], min_count=1)
    TinyClassifier.create(vocab, 2, d_model=8, n_heads=2, d_ff=8, seed=0).save(tmp_path / "m")
    data = tmp_path / "d.tsv"
    data.write_text(tiny_tsv.read_text())
    args = _cert_args(tmp_path / "m", data, tmp_path / "r")
    assert main([*args, "--n", "4"]) == 0
    lines = data.read_text().splitlines()
    data.write_text("\n".join([lines[0]] + [ln[:-1] + str(1 - int(ln[-1])) for ln in lines[1:]]) + "\n")
    capsys.readouterr()
    assert main([*args, "--n", "8", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "data_sha256" in err and "model_fingerprint" not in err and "Traceback" not in err
    data.write_text(tiny_tsv.read_text())
    TinyClassifier.create(vocab, 2, d_model=8, n_heads=2, d_ff=8, seed=1).save(tmp_path / "m")
    assert main([*args, "--n", "8", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "model_fingerprint" in err and "data_sha256" not in err
    TinyClassifier.create(vocab, 2, d_model=8, n_heads=2, d_ff=8, seed=0).save(tmp_path / "m")
    settings = tmp_path / "r" / "certify_settings.json"
    kept = settings.read_text()
    settings.unlink()  # without the recorded settings nothing can be checked: refused, not rewritten
    assert main([*args, "--seed", "9", "--n", "8", "--resume"]) == 2
    assert "certify_settings.json is missing" in capsys.readouterr().err
    settings.write_text(kept)
    assert main([*args, "--n", "8", "--resume"]) == 0  # the same model and data again: --n may still be extended
    assert len(_read(tmp_path / "r" / "certificates.jsonl")) == 8


def test_grid_design_says_what_it_certifies_and_the_few_votes_warning_is_printed_once(tmp_path, tiny_tsv, capsys):
    """The grid design's results.json said only ``vote_design: grid``; and the few-votes warning came twice (a raw
    Python warning with a source line on stderr, even with --quiet, then ``warning: ...``)."""
    from iclr25.frs.cli import main
    from iclr25.frs.data import load_dataset
    from iclr25.frs.models import TinyClassifier, Vocab

    ds = load_dataset(str(tiny_tsv))
    vocab = Vocab.build([t.split() for t in ds.texts], min_count=1)
    TinyClassifier.create(vocab, 2, d_model=8, n_heads=2, d_ff=8, seed=0).save(tmp_path / "m")
    capsys.readouterr()
    assert main(_cert_args(tmp_path / "m", tiny_tsv, tmp_path / "g", "--vote-design", "grid", "--n", "3")) == 0
    cap = capsys.readouterr()
    assert "Warning:" not in cap.err and "check_num_votes" not in cap.err
    assert cap.out.count("EVERY text abstains") == 1
    res = json.loads((tmp_path / "g" / "results.json").read_text())
    assert res["smoothing"]["certifies"].startswith("grid: the majority of the K = 3 copies")
    assert "N = n = 3" in res["smoothing"]["certifies"]
    clf = FRSClassifier(KnownModel(THRESHOLDS), _copies(5), randomization="uniform", w_mid=0.5, n_random=6)
    assert clf.describe()["certifies"].startswith("iid: a copy drawn uniformly from K = 5")


def test_certify_records_inputs_truncated_to_the_model_max_len(tmp_path, tiny_tsv):
    """A test text longer than the tiny encoder's max_len was truncated with a log line only: results.json said
    nothing, while the certificate's L and radius count all of its tokens."""
    from iclr25.frs.cli import main
    from iclr25.frs.data import load_dataset
    from iclr25.frs.models import TinyClassifier, Vocab

    ds = load_dataset(str(tiny_tsv))
    vocab = Vocab.build([t.split() for t in ds.texts], min_count=1)
    TinyClassifier.create(vocab, 2, d_model=8, n_heads=2, d_ff=8, max_len=16, seed=0).save(tmp_path / "m")
    data = tmp_path / "long.tsv"
    data.write_text("sentence\tlabel\n" + " ".join(["good"] * 40) + "\t1\nbad film\t0\n")
    assert main(_cert_args(tmp_path / "m", data, tmp_path / "c")) == 0
    res = json.loads((tmp_path / "c" / "results.json").read_text())
    assert any("truncated" in w for w in res["warnings"])
    short = tmp_path / "short.tsv"
    short.write_text("sentence\tlabel\ngood film\t1\nbad film\t0\n")
    assert main(_cert_args(tmp_path / "m", short, tmp_path / "s")) == 0
    assert not any("truncated" in w for w in json.loads((tmp_path / "s" / "results.json").read_text())["warnings"])
