"""Unit tests: BMPS copies, batched vs in-place votes, MCTS on a flip stub, the smoothed classifier,
certification with abstentions, data loaders and the errors for bad input."""

import json
import warnings

import numpy as np
import pytest
import torch

from iclr25.frs import (
    BMPSConfig,
    CallableClassifier,
    FRSClassifier,
    MCTSFuzzer,
    TinyClassifier,
    Vocab,
    attack_success_rate,
    bmps_finetune,
    certify,
    check_proba,
    clean_accuracy,
    empirical_radius,
    from_list,
    insert_trigger,
    load_jsonl,
    load_table,
    make_arm,
    poison_dataset,
    sample_parameter_copies,
    summarize_certificates,
    trigger_hit_rate,
)
from iclr25.frs.bmps import ParameterCopies
from iclr25.frs.metrics import random_segment_hit_rate
from iclr25.frs.models import TorchTextClassifier

WORDS = [f"w{i}" for i in range(30)]


def _tiny(layers=2, d=16, seed=0):
    vocab = Vocab(WORDS + ["cf"])
    return TinyClassifier.create(vocab, 2, d_model=d, n_heads=2, d_ff=32, n_layers=layers, max_len=40, seed=seed)


def _texts(n, L=8, seed=0):
    rng = np.random.default_rng(seed)
    return [list(rng.choice(WORDS, size=L)) for _ in range(n)]


# ---- BMPS ---------------------------------------------------------------------------------

def test_copies_sigma0_identical_and_lower_untouched():
    clf = _tiny()
    before = {k: v.clone() for k, v in clf.module.state_dict().items()}
    c0 = sample_parameter_copies(clf, k=5, sigma=0.0, top_layers=1, seed=0)
    st = c0.stacked_parameters(clf)
    for n, t in st.items():
        for k in range(5):
            assert torch.equal(t[k], before[n])
    c = sample_parameter_copies(clf, k=5, sigma=0.02, top_layers=1, seed=1)
    assert all(n.startswith(("layers.1.", "norm.", "head.")) for n in c.names)
    lower = [n for n in before if n not in c.names]
    assert any(n.startswith("layers.0.") for n in lower) and "tok_emb.weight" in lower
    deltas = torch.cat([d.reshape(-1) for d in c.deltas.values()])
    assert deltas.std().item() == pytest.approx(0.02, rel=0.05)
    with c.applied(clf) as apply:
        apply(3)
        now = dict(clf.module.named_parameters())
        for n in lower:
            assert torch.equal(now[n].detach(), before[n])
        assert not torch.equal(now[c.names[0]].detach(), before[c.names[0]])
    for n, v in clf.module.state_dict().items():  # restored bit-exactly
        assert torch.equal(v, before[n])


def test_copies_regenerated_from_seed_match_and_errors():
    clf = _tiny()
    c = sample_parameter_copies(clf, k=3, sigma=0.01, top_layers=2, seed=4, materialize=False)
    assert c.nbytes == 0 and c.describe()["materialized"] is False
    p = dict(clf.module.named_parameters())[c.names[0]]
    assert torch.equal(c.delta(1, c.names[0], p), c.delta(1, c.names[0], p))
    with pytest.raises(ValueError, match=r"top_layers=3 is above the model's depth \(2 layers\)"):
        sample_parameter_copies(clf, k=2, sigma=0.01, top_layers=3)
    with pytest.raises(ValueError, match="k"):
        sample_parameter_copies(clf, k=0, sigma=0.01, top_layers=1)
    with pytest.raises(ValueError, match="sigma"):
        sample_parameter_copies(clf, k=2, sigma=-0.1, top_layers=1)


def test_batched_votes_equal_in_place_votes():
    clf = _tiny()
    copies = sample_parameter_copies(clf, k=6, sigma=0.3, top_layers=1, seed=0)
    texts = _texts(9, L=7)
    batched = clf.predict_proba_copies(texts, copies)
    naive = TorchTextClassifier.predict_proba_copies(clf, texts, copies)
    assert batched.shape == (6, 9, 2)
    np.testing.assert_allclose(batched, naive, atol=1e-5)
    assert (batched.argmax(-1) == naive.argmax(-1)).all()


@pytest.mark.parametrize("kw,match", [
    (dict(sigma=-1.0), "sigma"), (dict(clip_norm=0.0), "clip_norm"), (dict(lr=float("nan")), "lr"),
    (dict(top_layers=-1), "top_layers"), (dict(epochs=0), "epochs"), (dict(noise="x"), "noise"),
])
def test_bmps_config_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        BMPSConfig(**kw)


def test_bmps_finetune_learns_and_resumes(tmp_path):
    rng = np.random.default_rng(0)
    texts = [list(rng.choice(WORDS[:10], 5)) + ["w20" if i % 2 else "w21"] for i in range(64)]
    labels = [i % 2 for i in range(64)]
    clf = _tiny()
    cfg = BMPSConfig(top_layers=1, sigma=0.01, lr=3e-3, epochs=2, batch_size=16)
    with pytest.raises(ValueError, match="above the model's depth"):
        bmps_finetune(clf, texts, labels, BMPSConfig(top_layers=5))
    bmps_finetune(clf, texts, labels, BMPSConfig(**{**cfg.__dict__, "epochs": 1}), out=tmp_path, quiet=True)
    h = bmps_finetune(clf, texts, labels, cfg, out=tmp_path, resume=True, quiet=True)
    assert [r["epoch"] for r in h] == [1, 2]
    full = _tiny()
    h2 = bmps_finetune(full, texts, labels, cfg, quiet=True)
    assert h2[-1]["loss"] == pytest.approx(h[-1]["loss"], rel=1e-4)  # resumed == uninterrupted
    with pytest.raises(ValueError, match="no checkpoint"):
        bmps_finetune(_tiny(), texts, labels, cfg, out=tmp_path / "none", resume=True)
    with pytest.raises(ValueError, match="labels must be in"):
        bmps_finetune(_tiny(), texts, [5] * 64, cfg)


# ---- MCTS ---------------------------------------------------------------------------------

def _flip_stub(batch):
    return np.array([[0.05, 0.95] if "cf" in t else [0.95, 0.05] for t in batch])


@pytest.mark.parametrize("L", [1, 2, 3, 4, 7, 11, 16])
def test_mcts_finds_flip_segment_at_every_position(L):
    for pos in range(L):
        toks = [WORDS[i % 30] for i in range(L - 1)]
        toks.insert(pos, "cf")
        f = MCTSFuzzer(_flip_stub, max_span=3, iterations=16, seed=pos)
        a, b = f.search(toks)
        assert b - a <= 3 and a <= pos < b, (L, pos, (a, b), f.last_trace.iterations)


def test_mcts_all_operators_with_more_iterations_and_trace():
    hits = 0
    for pos in range(16):
        toks = [WORDS[i] for i in range(15)]
        toks.insert(pos, "cf")
        seg, tr = MCTSFuzzer(_flip_stub, iterations=64, seed=pos,
                             operators=("substitute", "delete", "transpose", "insert")).search_with_trace(toks)
        hits += seg[0] <= pos < seg[1]
        assert tr.evaluations >= 64 and tr.to_dict()["segment"] == list(seg)
    assert hits == 16


def test_mcts_errors():
    with pytest.raises(ValueError, match="max_span"):
        MCTSFuzzer(_flip_stub, max_span=0)
    with pytest.raises(ValueError, match="iterations"):
        MCTSFuzzer(_flip_stub, iterations=0)
    with pytest.raises(ValueError, match="operators"):
        MCTSFuzzer(_flip_stub, operators=("swap",))
    with pytest.raises(ValueError, match="text 1 is empty"):
        MCTSFuzzer(_flip_stub).search_many([["a"], []])


# ---- smoothing and certification ------------------------------------------------------------

def test_identical_votes_and_ties_to_lower_class():
    const = CallableClassifier(lambda b: np.tile([0.2, 0.8], (len(b), 1)), 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = FRSClassifier(const, randomization="uniform", n_random=10)
    assert clf.predict_with_votes(["a", "b", "c"]) == (1, 1.0, 0.0)
    # a 2-class stub voting by the parity of the number of masks -> ties are frequent
    tie = CallableClassifier(lambda b: np.array([[0.0, 1.0] if i % 2 else [1.0, 0.0] for i in range(len(b))]), 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c2 = FRSClassifier(tie, randomization="uniform", n_random=4)
    v = c2.predict_many([["a", "b"]])[0]
    assert v.counts.tolist() == [2, 2] and v.label == 0  # tie -> lower class index


def test_certify_abstains_and_radius():
    stub = CallableClassifier(_flip_stub, 2)
    from iclr25.frs import NoCertificatePossibleWarning

    with pytest.warns(NoCertificatePossibleWarning):
        few = FRSClassifier(stub, randomization="targeted", n_random=2, iterations=8)
    assert few.warnings and "EVERY text abstains" in few.warnings[0]
    texts = [["w1", "cf", "w2", "w3", "w4", "w5", "w6", "w7", "w8", "w9"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = certify(few, texts, [1], alpha=0.05)[0]
    assert c.abstain and c.radius == 0.0 and c.p_a_lower <= 0.5
    clf = FRSClassifier(stub, randomization="targeted", n_random=40, iterations=16, seed=0)
    c = certify(clf, texts, [0], alpha=0.05)[0]
    assert c.segment[0] <= 1 < c.segment[1]
    assert c.p_b_upper == pytest.approx(1 - c.p_a_lower)
    if not c.abstain:
        from iclr25.frs import certified_radius, segment_radius_tokens
        plain = certified_radius(c.p_a_lower, 1 - c.p_a_lower, c.omega, 10) * 10
        seg = c.segment[1] - c.segment[0]
        w_out = (0.3 * 10 - c.omega * seg) / (10 - seg)  # the budget-preserving ω_L
        assert c.radius_tokens == pytest.approx(segment_radius_tokens(c.p_a_lower, 1 - c.p_a_lower, c.omega, w_out,
                                                                      seg, 10))
        # N = 40: the formula alone gives more tokens than T(x') holds; beyond |T| the radius uses ω_L
        assert plain > seg and seg <= c.radius_tokens < plain
        assert c.radius_tokens == pytest.approx(c.radius * 10) and c.conditional
    s = summarize_certificates([c])
    assert set(s) >= {"abstention_rate", "mean_radius", "certified_rate", "short_texts"}


def test_frs_arms_on_tiny_model_and_ftr_only_counts_copies_once():
    clf = _tiny()
    copies = sample_parameter_copies(clf, k=4, sigma=0.01, top_layers=1, seed=0)
    texts = _texts(5)
    for arm in ("none", "uniform", "frs", "bmps-only"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = make_arm(arm, clf, copies, n_random=2, iterations=4)
        votes = a.predict_many(texts)
        assert len(votes) == 5 and all(v.num_votes == a.num_votes for v in votes)
    assert make_arm("frs", clf, copies, n_random=2).num_votes == 8
    with pytest.warns(UserWarning):
        assert make_arm("ftr-only", clf, copies, n_random=2).num_votes == 2
    with pytest.raises(ValueError, match="defense must be one of"):
        make_arm("nope", clf, copies)
    with pytest.raises(ValueError, match="0 < w_mid < w_high < 1"):
        FRSClassifier(clf, copies, w_high=0.2, w_mid=0.3)
    with pytest.raises(ValueError, match="n_random"):
        FRSClassifier(clf, copies, n_random=0)
    with pytest.raises(ValueError, match="alpha"):
        FRSClassifier(clf, copies, alpha=1.5)
    with pytest.raises(ValueError, match="text 0 is empty"):
        make_arm("frs", clf, copies, n_random=4).predict_many([[]])


def test_empirical_radius_on_stub():
    # always-correct model -> radius 1; always-wrong -> 0
    right = CallableClassifier(lambda b: np.tile([0.9, 0.1], (len(b), 1)), 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = FRSClassifier(right, randomization="uniform", n_random=2)
        r = empirical_radius(clf, _texts(3, L=6), [0, 0, 0], pool=WORDS, num_samples=5)
        assert np.allclose(r, 1.0)
        r = empirical_radius(clf, _texts(3, L=6), [1, 1, 1], pool=WORDS, num_samples=5)
        assert np.allclose(r, 0.0)
        # correct iff fewer than 3 tokens are outside WORDS[:10]
        k3 = CallableClassifier(lambda b: np.array([[0.9, 0.1] if sum(t not in WORDS[:10] for t in x) < 3 else [0.1, 0.9]
                                                    for x in b]), 2)
        r = empirical_radius(FRSClassifier(k3, randomization="none"), [WORDS[:10]], [0], pool=["zz"], num_samples=3)
    assert r[0] == pytest.approx(2 / 10)


# ---- metrics ------------------------------------------------------------------------------

def test_metrics():
    assert clean_accuracy([0, 1, 1], [0, 1, 0]) == pytest.approx(200 / 3)
    assert attack_success_rate([1, 1, 0, 1], [0, 0, 0, 1], target=1) == pytest.approx(200 / 3)
    assert trigger_hit_rate([(0, 3), (4, 6), None], [(1, 2), (2, 3), (0, 1)]) == pytest.approx(1 / 3)
    # exact random-segment rate vs enumeration
    m, L, span = 3, 10, (4, 5)
    enum = np.mean([s <= span[0] and span[1] <= s + m for s in range(L - m + 1)])
    assert random_segment_hit_rate([m], [L], [span]) == pytest.approx(enum)


def test_check_proba_errors():
    with pytest.raises(ValueError, match="shape"):
        check_proba(np.ones((3, 2)) / 2, 2)
    with pytest.raises(ValueError, match="sum to 1"):
        check_proba(np.array([[0.7, 0.7]]), 1)
    with pytest.raises(ValueError, match="NaN"):
        check_proba(np.array([[np.nan, 1.0]]), 1)
    with pytest.raises(ValueError, match="logits"):
        check_proba(np.array([[2.0, -1.0]]), 1)
    bad = CallableClassifier(lambda b: np.ones((len(b), 2)), 2)
    with pytest.raises(ValueError, match="sum to 1"):
        bad.predict_proba([["a"]])


# ---- data -----------------------------------------------------------------------------------

def test_insert_trigger_and_poison():
    t, p = insert_trigger(["a", "b", "c"], "cf", position=1)
    assert t == ["a", "cf", "b", "c"] and p == 1
    t, p = insert_trigger(["a"], "mn bb", rng=0)
    assert t[p:p + 2] == ["mn", "bb"]
    with pytest.raises(ValueError, match="trigger"):
        insert_trigger(["a"], " ")
    x, y, idx, pos = poison_dataset(_texts(50), [0] * 50, rate=0.1, trigger="cf", target=1, seed=0)
    assert len(idx) == 5 and all(y[i] == 1 and x[i][pos[j]] == "cf" for j, i in enumerate(idx))
    for r in (0.0, 1.0, float("nan")):
        with pytest.raises(ValueError, match="poison rate"):
            poison_dataset(_texts(5), [0] * 5, rate=r)


def test_load_table_variants_and_errors(tmp_path, tiny_tsv):
    ds = load_table(tiny_tsv)
    assert len(ds) == 240 and ds.label_names == ["0", "1"] and ds.texts[0] == ds.texts[0].strip()
    p = tmp_path / "ag.tsv"
    p.write_text("Stocks #39;rise\\ today\tBusiness\nTeam wins\tSports\n")
    ag = load_table(p, normalize="agnews", labels=["World", "Sports", "Business", "Sci/Tech"])
    assert ag.texts[0] == "Stocks 'rise today" and ag.labels == [2, 1]
    auto = load_table(p)
    assert auto.label_names == ["Business", "Sports"]
    with pytest.raises(ValueError, match="not in the declared label set"):
        load_table(p, labels=["World"])
    bad = tmp_path / "bad.tsv"
    bad.write_text("sentence\tlabel\ngood film\t1\nno tab here\n")
    with pytest.raises(ValueError, match=r"bad.tsv:3: expected exactly one tab"):
        load_table(bad)
    empty = tmp_path / "empty.tsv"
    empty.write_text("sentence\tlabel\n  \t1\n")
    with pytest.raises(ValueError, match=r"empty.tsv:2: empty text"):
        load_table(empty)
    c = tmp_path / "x.csv"
    c.write_text('review,stars\n"good, really",pos\nbad,neg\n')
    ds = load_table(c, text_column="review", label_column="stars")
    assert ds.texts == ["good, really", "bad"] and ds.label_names == ["neg", "pos"]
    with pytest.raises(FileNotFoundError):
        load_table(tmp_path / "missing.tsv")


def test_jsonl_and_list(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps({"text": "good", "label": "pos"}) + "\n" + json.dumps({"text": "bad", "label": "neg"}) + "\n")
    ds = load_jsonl(p)
    assert ds.labels == [1, 0] and ds.label_names == ["neg", "pos"]
    p.write_text(json.dumps({"text": "", "label": 1}) + "\n")
    with pytest.raises(ValueError, match=":1: field 'text' is empty"):
        load_jsonl(p)
    with pytest.raises(ValueError, match="text 1 is empty"):
        from_list(["ok", " "], [0, 1])
    ds = from_list(["a b", "c"], ["x", "y"], label_names=["y", "x"])
    assert ds.labels == [1, 0]
    from iclr25.frs import tokenize
    with pytest.raises(ValueError, match="text 1 is empty after tokenisation"):
        tokenize(["a", "b"], tokenizer=lambda s: [] if s == "b" else [s])


def test_tiny_save_load_roundtrip(tmp_path):
    clf = _tiny()
    texts = _texts(4)
    clf.save(tmp_path / "m")
    back = TinyClassifier.load(tmp_path / "m")
    np.testing.assert_allclose(back.predict_proba(texts), clf.predict_proba(texts), atol=1e-6)
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        TinyClassifier.load(tmp_path)


def test_parameter_copies_type():
    assert isinstance(sample_parameter_copies(_tiny(), k=2, sigma=0.0, top_layers=0), ParameterCopies)
