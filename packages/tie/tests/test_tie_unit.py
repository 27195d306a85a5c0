"""Unit tests: shapes, dtypes and every bad input of issue #30 giving a clear error."""

import json

import numpy as np
import pytest

from iclr25.tie import (
    TIE,
    EmbeddingSet,
    estimate_scales,
    evaluate_methods,
    group_metrics,
    load_prompts,
    make_synthetic,
    translate,
    zero_shot_predict,
)
from iclr25.tie.embeddings import check_prompt_mapping, read_celeba, read_metadata
from iclr25.tie.evaluate import evaluate_embedding_set


def _es(n=40, d=8, C=2, seed=0, **over) -> EmbeddingSet:
    rng = np.random.default_rng(seed)
    kw = dict(image_emb=rng.standard_normal((n, d)), y=rng.integers(0, C, n), split=np.tile([0, 1, 2, 2], n // 4),
              text_emb_class=rng.standard_normal((C, d)), text_emb_spurious=rng.standard_normal((2, d)),
              attribute_values=np.array([0, 1]), a=np.tile([0, 1], n // 2))
    kw.update(over)
    return EmbeddingSet(**kw)


def test_dtypes_and_shapes():
    d = make_synthetic(0)
    for dt in (np.float32, np.float64):
        t = TIE(d.text_emb_spurious.astype(dt)).fit(d.pool_emb.astype(dt), d.pool_a)
        assert t.lam_.shape == (2,) and t.lam_.dtype == np.float64
        h = t.transform(d.test_emb.astype(dt), d.test_a)
        assert h.shape == d.test_emb.shape and h.dtype == dt
        p = t.predict(d.test_emb.astype(dt), d.text_emb_class.astype(dt), d.test_a)
        assert p.shape == (d.test_emb.shape[0],) and p.dtype == np.int64


def test_dimension_mismatch_names_both_shapes():
    x, T = np.ones((3, 4)), np.ones((2, 5))
    with pytest.raises(ValueError, match=r"dimensions differ.*\(3, 4\).*\(2, 5\)"):
        zero_shot_predict(x, T)
    with pytest.raises(ValueError, match=r"dimensions differ.*\(40, 8\).*text_emb_class.*\(2, 6\)"):
        _es(text_emb_class=np.ones((2, 6))).validate()


def test_missing_npz_key(tmp_path):
    es = _es()
    p = es.save(tmp_path / "e.npz")
    z = dict(np.load(p))
    del z["split"]
    np.savez(tmp_path / "bad.npz", **z)
    with pytest.raises(ValueError, match=r"missing key\(s\) \['split'\]"):
        EmbeddingSet.load(tmp_path / "bad.npz")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        EmbeddingSet.load(tmp_path / "none.npz")
    back = EmbeddingSet.load(p)
    np.testing.assert_array_equal(back.image_emb, es.image_emb)


@pytest.mark.parametrize("field", ["y", "a", "split"])
def test_unequal_lengths(field):
    es = _es()
    setattr(es, field, np.asarray(getattr(es, field))[:-1])
    with pytest.raises(ValueError, match=rf"{field} has shape \(39,\) but image_emb has 40 rows"):
        es.validate()


def test_nan_inf_and_zero_rows_name_first_indices():
    x = np.ones((6, 3))
    x[2, 1], x[4, 0] = np.nan, np.inf
    with pytest.raises(ValueError, match=r"2 row\(s\) contain NaN/inf, first indices \[2, 4\]"):
        zero_shot_predict(x, np.eye(3)[:2])
    x = np.ones((6, 3))
    x[[1, 5]] = 0
    with pytest.raises(ValueError, match=r"zero norm, first indices \[1, 5\]"):
        TIE(np.eye(3)[:2]).fit(x, np.zeros(6, int))
    with pytest.raises(ValueError, match="text_emb_spurious.*zero norm"):
        TIE(np.zeros((2, 3)))


def test_prompt_mapping_checks():
    with pytest.raises(ValueError, match=r"value\(s\) \[5\] occurring in a have no prompt.*untranslated='keep'"):
        check_prompt_mapping([0, 1, 5], [0, 1])
    assert check_prompt_mapping([0, 1, 5], [0, 1], untranslated="keep") == [5]
    with pytest.raises(ValueError, match=r"prompt is given for attribute value\(s\) \[2\] that never occur"):
        check_prompt_mapping([0, 1], [0, 1, 2])
    with pytest.raises(ValueError, match="no prompt"):
        _es(a=np.tile([0, 1, 2, 1], 10)).validate()
    with pytest.raises(ValueError, match="never occur"):
        _es(a=np.zeros(40, int)).validate()


def test_untranslated_keep_leaves_those_images_untouched():
    es = _es(a=np.tile([0, 1, 5, 1], 10), split=np.tile([0, 0, 2, 2], 10))
    es.validate(untranslated="keep")
    idx = es.attribute_index()
    assert set(idx.tolist()) == {0, 1, -1}
    h = translate(es.image_emb, idx, es.text_emb_spurious, np.array([0.3, 0.2]))
    raw = es.image_emb / np.linalg.norm(es.image_emb, axis=1, keepdims=True)
    np.testing.assert_allclose(h[idx == -1], raw[idx == -1])
    assert not np.allclose(h[idx == 0], raw[idx == 0])
    res = evaluate_embedding_set(es, pool_split="train", untranslated="keep")
    assert (5 in {k[1] for k in res["methods"]["tie"]["per_group"]}) and res["untranslated_test_images"] > 0


def test_empty_pool_group():
    x = np.random.default_rng(0).standard_normal((10, 4))
    S = np.random.default_rng(1).standard_normal((3, 4))
    with pytest.raises(ValueError, match=r"no image with attribute index \[2\].*--empty-group zero"):
        estimate_scales(x, np.tile([0, 1], 5), S)
    lam = estimate_scales(x, np.tile([0, 1], 5), S, empty_group="zero")
    assert lam[2] == 0.0 and lam[0] != 0.0
    es = _es(a=np.tile([0, 1], 20), split=np.tile([0, 2], 20))              # pool holds only value 0
    with pytest.raises(ValueError, match=r"no image with attribute value\(s\) \[1\]"):
        evaluate_embedding_set(es, pool_split="train")
    res = evaluate_embedding_set(es, pool_split="train", empty_group="zero")
    assert res["lambda"]["tie"][1] == 0.0


def test_mode_true_without_a_and_inferred_without_a():
    es = _es(a=None)
    with pytest.raises(ValueError, match="needs the attribute labels"):
        es.attribute_index()
    x = es.image_emb
    with pytest.raises(ValueError, match=r"mode='true' \(TIE\) needs the attribute labels"):
        TIE(es.text_emb_spurious, "true").fit(x)
    assert TIE(es.text_emb_spurious, "inferred").fit(x).predict(x, es.text_emb_class).shape == (40,)
    with pytest.raises(ValueError, match="mode must be"):
        TIE(es.text_emb_spurious, "both")


def test_empty_pool_split_and_fewer_than_two_classes():
    es = _es(split=np.tile([0, 2], 20))
    with pytest.raises(ValueError, match=r"split 'val' \(split == 1\) is empty.*--pool-split"):
        evaluate_embedding_set(es, pool_split="val")
    with pytest.raises(ValueError, match="at least 2 classes"):
        zero_shot_predict(np.ones((3, 4)), np.ones((1, 4)))
    with pytest.raises(ValueError, match="at least 2 classes"):
        _es(text_emb_class=np.ones((1, 8)), y=np.zeros(40, int)).validate()
    with pytest.raises(ValueError, match="pool_split must be"):
        evaluate_embedding_set(_es(), pool_split="test")


def test_empty_test_group_is_listed_and_left_out_of_wga():
    d = make_synthetic(0, test_sizes=(50, 50, 60, 0))
    res = evaluate_methods(d.pool_emb, d.test_emb, d.test_y, d.test_a, d.text_emb_class, d.text_emb_spurious,
                           pool_a=d.pool_a, classes=[0, 1], attributes=[0, 1])
    for m in res["methods"].values():
        assert m["empty_groups"] == [(1, 1)] and (1, 1) not in m["per_group"]
        assert np.isfinite(m["worst_group"])


def test_group_metrics_length_mismatch():
    with pytest.raises(ValueError, match="equal length"):
        group_metrics(np.zeros(3), np.zeros(4), np.zeros(3))


def test_hyperparameter_range_checks():
    with pytest.raises(ValueError, match="sigma must be a finite number"):
        make_synthetic(0, sigma=float("nan"))
    with pytest.raises(ValueError, match="rho must be a finite number in"):
        make_synthetic(0, rho=1.5)
    with pytest.raises(ValueError, match="non-finite"):
        translate(np.ones((2, 3)), [0, 1], np.eye(3)[:2], [np.inf, 0.1])
    from iclr25.tie.config import EmbedConfig, TrainEncoderConfig

    with pytest.raises(ValueError, match="rho"):
        TrainEncoderConfig(rho=float("inf"))
    with pytest.raises(ValueError, match="shard must be 'k/n'"):
        EmbedConfig(shard="3/2")


def test_attribute_index_out_of_range():
    with pytest.raises(ValueError, match=r"index 3 at position 1 is outside 0..1"):
        translate(np.ones((2, 3)), [0, 3], np.eye(3)[:2], [0.1, 0.1])


def test_metadata_csv_missing_image_and_columns(tmp_path):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.jpg").write_bytes(b"x")
    csvp = tmp_path / "metadata.csv"
    csvp.write_text("img_id,img_filename,y,split,place,place_filename\n1,img/a.jpg,0,0,1,x\n2,img/b.jpg,1,2,0,x\n")
    with pytest.raises(FileNotFoundError, match=r"line 3: image .*b.jpg does not exist"):
        read_metadata(csvp)
    (tmp_path / "img" / "b.jpg").write_bytes(b"x")
    md = read_metadata(csvp)                               # WILDS columns as is: a from 'place'
    assert md.a.tolist() == [1, 0] and md.y.tolist() == [0, 1] and md.split.tolist() == [0, 2]
    with pytest.raises(ValueError, match="no column 'group'"):
        read_metadata(csvp, a_column="group")
    csvp.write_text("img_filename,y,a,split\nimg/a.jpg,zero,0,0\n")
    with pytest.raises(ValueError, match=r"line 2: column 'y' = 'zero' is not an integer"):
        read_metadata(csvp)


def test_celeba_lists(tmp_path):
    (tmp_path / "img_align_celeba").mkdir()
    for f in ("000001.jpg", "000002.jpg"):
        (tmp_path / "img_align_celeba" / f).write_bytes(b"x")
    (tmp_path / "list_attr_celeba.txt").write_text("2\nBlond_Hair Male Smiling\n000001.jpg 1 -1 1\n000002.jpg -1 1 -1\n")
    (tmp_path / "list_eval_partition.txt").write_text("000001.jpg 0\n000002.jpg 2\n")
    md = read_celeba(tmp_path)
    assert md.y.tolist() == [1, 0] and md.a.tolist() == [0, 1] and md.split.tolist() == [0, 2]
    with pytest.raises(ValueError, match="no attribute 'Eyeglasses'"):
        read_celeba(tmp_path, target="Eyeglasses")


def test_load_prompts_official_format(tmp_path):
    obj = {"waterbirds": {"class_prompts": ["a photo of a landbird.", "a photo of a waterbird."],
                          "spurious_prompts_by_attribute": {"0": "a photo with a land background",
                                                            "1": "a photo with a water background"}},
           "fmow": {"class_prompt_template": "A satellite image of {class name with '_' replaced by ' '}.",
                    "spurious_prompts_in_index_order": ["Over Europe.", "Over Asia"]}}
    p = tmp_path / "p.json"
    p.write_text(json.dumps(obj))
    ps = load_prompts(p, "waterbirds")
    assert ps.spurious_prompts == {0: "a photo with a land background", 1: "a photo with a water background"}
    fm = load_prompts(p, "fmow", class_names=["airport", "crop_field"])
    assert fm.class_prompts == ["A satellite image of airport.", "A satellite image of crop field."]
    assert fm.spurious_prompts == {0: "Over Europe.", 1: "Over Asia"}
    with pytest.raises(ValueError, match="give the data set to use"):
        load_prompts(p)
    with pytest.raises(ValueError, match="no data set 'isic'"):
        load_prompts(p, "isic")


def test_inferred_labels_are_attribute_indices():
    d = make_synthetic(0)
    t = TIE(d.text_emb_spurious, "inferred").fit(d.pool_emb)
    a = t.attributes(d.test_emb)
    assert set(np.unique(a).tolist()) <= {0, 1} and (a == d.test_a).mean() > 0.99
