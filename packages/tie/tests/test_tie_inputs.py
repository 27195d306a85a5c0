"""Bad and extreme inputs found by trying the package as a new user (issue #30 trial):
prompt files, metadata labels, non-npz files, and embeddings whose squared norms over/underflow."""

import json

import numpy as np
import pytest

from iclr25.tie import TIE, group_metrics, normalize_rows, translate, zero_shot_predict
from iclr25.tie.cli import main
from iclr25.tie.embeddings import EmbeddingSet, load_prompts, read_metadata

CLS = ["a photo of a landbird.", "a photo of a waterbird."]


def test_hand_made_translation_and_worst_group():
    # 3 hand vectors; λ and h' from the spec's formulas written out by hand
    h = np.array([[3.0, 4.0, 0.0], [0.0, 1.0, 1.0], [1.0, 0.0, 2.0]])
    a = np.array([0, 1, 0])
    S = np.array([[2.0, 0.0, 0.0], [0.0, 0.0, 5.0]])
    lam = np.array([(0.6 + 1 / np.sqrt(5)) / 2, 1 / np.sqrt(2)])   # mean <h/|h|, e_0> over rows 0, 2; <h_1, e_2>
    tie = TIE(S).fit(h, a)
    np.testing.assert_allclose(tie.lam_, lam, rtol=1e-12)
    want = np.array([[0.6 - lam[0], 0.8, 0.0], [0.0, 1 / np.sqrt(2), 1 / np.sqrt(2) - lam[1]],
                     [1 / np.sqrt(5) - lam[0], 0.0, 2 / np.sqrt(5)]])
    np.testing.assert_allclose(translate(h, a, S, tie.lam_), want, atol=1e-12)
    T = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    assert tie.predict(h, T, a).tolist() == [1, 1, 2]              # argmax of want @ normalize(T).T by hand
    # confusion by hand: (0,x) 2/2, (0,y) 1/3, (1,x) 3/3, (1,y) 1/2 -> WGA 1/3, average 7/10
    m = group_metrics(np.array([0, 0, 1, 1, 1, 1, 1, 0, 0, 1]), np.array([0, 0, 0, 0, 1, 1, 1, 1, 0, 1]),
                      np.array(list("xxyyxxyyyx")))
    assert m["worst_group"] == pytest.approx(1 / 3) and m["worst_group_key"] == (0, "y")
    assert m["average"] == pytest.approx(0.7)


@pytest.mark.parametrize("scale, dtype", [(1e200, np.float64), (1e25, np.float32), (1e-25, np.float32)])
def test_embeddings_whose_squares_over_or_underflow(scale, dtype):
    # used to give inf norms -> every row a "zero vector" (class 0) or a false zero-norm error
    rng = np.random.default_rng(1)
    x, t, s, a = rng.normal(size=(50, 6)), rng.normal(size=(3, 6)), rng.normal(size=(2, 6)), rng.integers(0, 2, 50)
    xs = (x * scale).astype(dtype)
    np.testing.assert_allclose(np.linalg.norm(normalize_rows(xs).astype(np.float64), axis=1), 1, rtol=1e-6)
    assert (TIE(s).fit(xs, a).predict(xs, t, a) == TIE(s).fit(x, a).predict(x, t, a)).all()
    if scale > 1:
        assert (zero_shot_predict(xs, t) == zero_shot_predict(x, t)).all()


def test_norm_overflowing_float64_is_an_error():
    x = np.full((2, 4), 1e308)
    with pytest.raises(ValueError, match="image_emb: 2 row.*overflows float64"):
        zero_shot_predict(x, np.eye(4)[:2])


@pytest.mark.parametrize("content", [b"", b"garbage\n"])
def test_a_file_that_is_not_npz(tmp_path, content):
    p = tmp_path / "e.npz"
    p.write_bytes(content)
    with pytest.raises(ValueError, match="is not an .npz file"):
        EmbeddingSet.load(p)


@pytest.mark.parametrize("obj, match", [
    ({"class_prompts": CLS, "spurious_prompts_by_attribute": ["a", "b"]}, "must be an object"),
    ({"class_prompts": CLS, "spurious_prompts_by_attribute": "ab"}, "must be an object"),
    ({"class_prompts": CLS, "spurious_prompts_in_index_order": "ab"}, "must be a list"),
    ({"class_prompts": "a photo", "spurious_prompts_by_attribute": {"0": "a"}}, "class_prompts must be a list"),
    ({"class_prompts": CLS, "spurious_prompts_by_attribute": {"0": "a", " 0": "b"}}, "same attribute value"),
])
def test_malformed_prompt_files(tmp_path, obj, match):
    p = tmp_path / "p.json"
    p.write_text(json.dumps(obj))
    with pytest.raises(ValueError, match=match):
        load_prompts(p)


def test_duplicate_json_keys_are_an_error(tmp_path):
    p = tmp_path / "p.json"
    p.write_text('{"class_prompts": ["x", "y"], "spurious_prompts_by_attribute": {"0": "a", "0": "b", "1": "c"}}')
    with pytest.raises(ValueError, match=r"duplicate key\(s\) \['0'\]"):
        load_prompts(p)


@pytest.mark.parametrize("value", ["0.5", "inf", "nan", "x"])
def test_metadata_labels_must_be_integers(tmp_path, value):
    (tmp_path / "0.png").write_bytes(b"")
    (tmp_path / "m.csv").write_text(f"img_filename,y,split,place\n0.png,{value},0,0\n")
    with pytest.raises(ValueError, match=f"line 2: column 'y' = '{value}' is not an integer"):
        read_metadata(tmp_path / "m.csv")
    (tmp_path / "m.csv").write_text("img_filename,y,split,place\n0.png,1.0,0,0\n")
    assert read_metadata(tmp_path / "m.csv").y.tolist() == [1]


def _csv(tmp_path, y="{i2}", split="{s}"):
    rows = ["img_filename,y,split,place"]
    for i in range(4):
        (tmp_path / f"{i}.png").write_bytes(b"")
        rows.append(f"{i}.png,{y.format(i2=i % 2)},{split.format(s=0 if i < 2 else 2)},{i // 2}")
    (tmp_path / "m.csv").write_text("\n".join(rows) + "\n")


@pytest.mark.parametrize("prompts, y, split, match", [
    ({"0": "land"}, "{i2}", "{s}", r"attribute value\(s\) \[1\] occurring .* have no prompt"),
    ({"0": "land", "1": "water", "7": "x"}, "{i2}", "{s}", r"value\(s\) \[7\] that never occur"),
    ({"0": "land", "1": "water"}, "5", "{s}", "labels y must lie in 0..1"),
    ({"0": "land", "1": "water"}, "{i2}", "9", "split must hold 0"),
])
def test_embed_checks_labels_and_prompts_before_loading_a_model(tmp_path, capsys, prompts, y, split, match):
    # the mapping used to be checked only after every image was embedded
    _csv(tmp_path, y, split)
    (tmp_path / "p.json").write_text(json.dumps({"class_prompts": CLS, "spurious_prompts_by_attribute": prompts}))
    rc = main(["embed", "--encoder", "hf", "--model-dir", str(tmp_path / "missing-model"), "--metadata",
               str(tmp_path / "m.csv"), "--prompts", str(tmp_path / "p.json"), "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert rc != 0 and "config.json" not in err
    assert __import__("re").search(match, err), err


def test_tie_star_empty_inferred_group_says_inferred():
    rng = np.random.default_rng(0)
    s = rng.normal(size=(1, 5))
    S = np.vstack([s, s])                                          # identical prompts: â is always 0
    with pytest.raises(ValueError, match=r"no image with attribute index \[1\] inferred \(TIE\*"):
        TIE(S, "inferred").fit(rng.normal(size=(20, 5)))
    with pytest.raises(ValueError, match=r"no image with attribute index \[1\]; λ"):
        TIE(S, "true").fit(rng.normal(size=(20, 5)), np.zeros(20, int))


def test_evaluate_with_one_attribute_prompt_skips_projection(tmp_path, capsys):
    # FMoW-like: one value without a prompt (--untranslated keep); projection needs 2 prompts and used to abort
    rng = np.random.default_rng(0)
    n, d = 60, 6
    es = EmbeddingSet(image_emb=rng.normal(size=(n, d)), y=rng.integers(0, 2, n), split=np.repeat([0, 2], n // 2),
                      text_emb_class=rng.normal(size=(2, d)), text_emb_spurious=rng.normal(size=(1, d)),
                      attribute_values=np.array([0]), a=rng.integers(0, 2, n))
    p = es.save(tmp_path / "e.npz")
    assert main(["evaluate", "--embeddings", str(p), "--pool-split", "train", "--untranslated", "keep",
                 "--out", str(tmp_path / "o"), "--quiet"]) == 0
    res = json.loads((tmp_path / "o" / "results.json").read_text())
    assert set(res["methods"]) == {"zero_shot", "tie", "tie_star"}
    assert any(s.startswith("projection") for s in res["skipped"])
