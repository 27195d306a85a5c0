"""A new user's inputs: label mapping of partial files, unrecognised headers, and --resume safety
(corrupt checkpoints, changed settings) for finetune and certify."""

import json

import pytest

from iclr25.frs.bmps import train_classifier
from iclr25.frs.cli import main
from iclr25.frs.data import load_dataset, load_jsonl
from iclr25.frs.labels import align_labels as _align_labels
from iclr25.frs.models import TinyClassifier, Vocab


def _write(p, text):
    p.write_text(text)
    return p


def test_integer_labels_are_class_indices_even_when_a_class_is_absent(tmp_path):
    # a file of positives only must keep label 1 (it was renumbered to 0 before)
    ds = load_dataset(str(_write(tmp_path / "pos.tsv", "sentence\tlabel\ngood film\t1\ngreat fun\t1\n")))
    assert ds.labels == [1, 1] and ds.label_names == ["0", "1"]
    ds = load_jsonl(_write(tmp_path / "p.jsonl", '{"text": "good", "label": 2}\n{"text": "bad", "label": 0}\n'))
    assert ds.labels == [2, 0] and ds.label_names == ["0", "1", "2"]
    # negative integers are mapped in numeric order
    ds = load_dataset(str(_write(tmp_path / "pm.tsv", "a b\t1\nc d\t-1\ne f\t1\n")))
    assert ds.labels == [1, 0, 1] and ds.label_names == ["-1", "1"]


def test_unrecognised_header_is_an_error_not_a_class(tmp_path):
    p = _write(tmp_path / "h.tsv", "txt\tlbl\nthe film is great\t1\na dull mess\t0\nwarm and lovely\t1\n")
    with pytest.raises(ValueError, match=r"h.tsv:1: the first row .* looks like a header.*--header yes"):
        load_dataset(str(p))
    ds = load_dataset(str(p), header="yes", text_column="txt", label_column="lbl")
    assert ds.texts[0] == "the film is great" and ds.label_names == ["0", "1"]
    # string labels: a singleton first-row label while the other labels repeat
    q = _write(tmp_path / "s.tsv", "review_text\tclass\ngood\tpos\nbad\tneg\nfine\tpos\nawful\tneg\n")
    with pytest.raises(ValueError, match="looks like a header"):
        load_dataset(str(q))
    assert len(load_dataset(str(q), header="no")) == 5  # the user says it is data: kept
    # an ordinary headerless file is not affected
    r = _write(tmp_path / "n.tsv", "good film\t1\nbad film\t0\nfine film\t1\n")
    assert load_dataset(str(r)).labels == [1, 0, 1]


def test_evaluation_labels_follow_the_model_class_names(tmp_path):
    clf = TinyClassifier.create(Vocab.build([["good", "bad"]], min_count=1), 2, d_model=8, n_heads=2, d_ff=8,
                                label_names=["neg", "pos"])
    ds = load_dataset(str(_write(tmp_path / "onlypos.tsv", "sentence\tlabel\ngood film\tpos\n")))
    assert ds.labels == [0]  # on its own the file has one class
    ds = _align_labels(ds, clf, declared=False)
    assert ds.labels == [1] and ds.label_names == ["neg", "pos"]


def _tiny(seed=0):
    texts = [["good", "film"], ["bad", "film"], ["great", "fun"], ["dull", "mess"]] * 4
    labels = [1, 0, 1, 0] * 4
    clf = TinyClassifier.create(Vocab.build(texts, min_count=1), 2, d_model=8, n_heads=2, d_ff=8, seed=seed)
    return clf, texts, labels


def test_resume_refuses_changed_settings_and_corrupt_checkpoints(tmp_path):
    clf, x, y = _tiny()
    train_classifier(clf, x, y, epochs=1, batch_size=4, out=tmp_path, quiet=True)
    with pytest.raises(ValueError, match=r"settings differ .*lr \(checkpoint 0.001, now 0.01\)"):
        train_classifier(_tiny()[0], x, y, epochs=2, lr=1e-2, batch_size=4, out=tmp_path, resume=True, quiet=True)
    with pytest.raises(ValueError, match="data_sha256"):
        train_classifier(_tiny()[0], x, [1 - v for v in y], epochs=2, batch_size=4, out=tmp_path, resume=True,
                         quiet=True)
    hist = train_classifier(_tiny()[0], x, y, epochs=2, batch_size=4, out=tmp_path, resume=True, quiet=True)
    assert [h["epoch"] for h in hist] == [1, 2]
    (tmp_path / "checkpoint" / "model.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(ValueError, match="cannot be read"):
        train_classifier(_tiny()[0], x, y, epochs=3, batch_size=4, out=tmp_path, resume=True, quiet=True)


def test_cli_resume_errors_are_clean(tmp_path, capsys):
    clf, x, y = _tiny()
    data = _write(tmp_path / "d.tsv", "sentence\tlabel\n" + "".join(f"{' '.join(t)} film\t{v}\n" for t, v in zip(x, y)))
    clf.save(tmp_path / "m")
    ft = ["finetune", "--model", str(tmp_path / "m"), "--data", str(data), "--top-layers", "1", "--out",
          str(tmp_path / "ft"), "--quiet", "--batch-size", "4"]
    assert main(ft) == 0
    assert main(ft) == 2 and "pass --resume to continue it" in capsys.readouterr().err  # no silent overwrite
    assert main([*ft, "--resume", "--sigma", "0.05", "--epochs", "2"]) == 2
    err = capsys.readouterr().err
    assert "sigma (checkpoint 0.01, now 0.05)" in err and "Traceback" not in err
    (tmp_path / "ft" / "checkpoint" / "state.json").write_text("{trunc")
    assert main([*ft, "--resume", "--epochs", "2"]) == 2
    err = capsys.readouterr().err
    assert "cannot be read" in err and "Traceback" not in err
    # the advice must be one that works: "run without --resume" was refused ("pass --resume to continue it")
    assert "or run without --resume" not in err and "choose another --out" in err
    cert = ["certify", "--model", str(tmp_path / "m"), "--data", str(data), "--k", "2", "--iterations", "2", "--n",
            "3", "--out", str(tmp_path / "c"), "--quiet"]
    assert main(cert) == 0
    assert main([*cert, "--resume", "--k", "4"]) == 2  # would mix N = 4 and N = 8 certificates
    err = capsys.readouterr().err
    assert "k (was 2, now 4)" in err
    assert main([*cert[:-5], "--n", "5", "--out", str(tmp_path / "c"), "--quiet", "--resume"]) == 0
    recs = [json.loads(r) for r in (tmp_path / "c" / "certificates.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in recs) == list(range(5)) and {r["num_votes"] for r in recs} == {4}


def test_target_outside_the_model_classes_is_an_error(tmp_path, capsys):
    clf, x, y = _tiny()
    clf.save(tmp_path / "m")
    data = _write(tmp_path / "d.tsv", "sentence\tlabel\n" + "".join(f"{' '.join(t)}\t{v}\n" for t, v in zip(x, y)))
    code = main(["evaluate", "--model", str(tmp_path / "m"), "--data", str(data), "--target", "5", "--k", "2",
                 "--iterations", "2", "--n-clean", "2", "--n-triggered", "2", "--out", str(tmp_path / "e"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "target=5 is not a class of the model (2 classes" in err  # ran with ASR 0 before


def test_conditional_radius_never_exceeds_the_segment_at_omega_high():
    """A trigger longer than |T| cannot lie inside T(x'): beyond |T| tokens the radius continues with ω_L.
    Independent check: the largest real m with 1 − ω_in^min(m,|T|) ω_out^max(0,m−|T|) <= gap/2, by bisection."""
    import math

    from iclr25.frs.bounds import certified_radius, clopper_pearson_lower, segment_radius_tokens

    lower = clopper_pearson_lower(40, 40, 0.05)  # K = 20, n = 2 unanimous: 0.9278
    pa, pb, L = lower, 1 - lower, 20
    plain = certified_radius(pa, pb, 0.9, L) * L
    assert plain > 5  # the formula alone would certify a 5-token trigger "inside" a 3-token T
    for seg, w_out in ((3, 0.15), (2, 0.2), (3, 0.0)):
        got = segment_radius_tokens(pa, pb, 0.9, w_out, seg, L)
        lo, hi = 0.0, float(L)
        for _ in range(200):
            mid = (lo + hi) / 2
            keep = 1 - 0.9 ** min(mid, seg) * (w_out ** max(mid - seg, 0.0) if w_out > 0 else (0.0 if mid > seg else 1))
            lo, hi = (mid, hi) if keep <= (pa - pb) / 2 + 1e-15 else (lo, mid)
        assert got == pytest.approx(lo, abs=1e-9) and seg <= got < plain
    # within |T| the formula is unchanged (the spec's known answer)
    assert segment_radius_tokens(0.9, 0.1, 0.9, 0.15, 5, 20) == pytest.approx(0.2424179592 * 20, abs=1e-9)
    assert math.isclose(segment_radius_tokens(0.9, 0.1, 0.9, 0.15, 5, 20), certified_radius(0.9, 0.1, 0.9, 20) * 20)


@pytest.mark.parametrize("sub", ["evaluate", "certify", "demo"])
def test_untrained_minilm_head_is_refused_outside_finetune(sub, tmp_path, capsys):
    # before: evaluate/certify/demo built MiniLM with a random head and reported its numbers
    assert main([sub, "--model", "minilm", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "untrained classification head" in err and "Traceback" not in err


def test_certify_resume_after_a_torn_last_line(tmp_path):
    """A crash mid-append leaves a torn last line; --resume must drop it, not bury it mid-file (that made the
    final read fail with an invalid-JSON line)."""
    clf, x, y = _tiny()
    clf.save(tmp_path / "m")
    data = _write(tmp_path / "d.tsv", "sentence\tlabel\n" + "".join(f"{' '.join(t)}\t{v}\n" for t, v in zip(x, y)))
    cert = ["certify", "--model", str(tmp_path / "m"), "--data", str(data), "--k", "4", "--iterations", "2",
            "--chunk", "2", "--out", str(tmp_path / "c"), "--quiet"]
    assert main([*cert, "--n", "2"]) == 0
    path = tmp_path / "c" / "certificates.jsonl"
    path.write_text(path.read_text() + '{"index": 2, "label": 0, "p_a"')  # torn, no newline
    assert main([*cert, "--n", "4", "--resume"]) == 0
    recs = [json.loads(r) for r in path.read_text().splitlines()]
    assert sorted(r["index"] for r in recs) == [0, 1, 2, 3] and all("p_a" in r for r in recs)


def test_finetune_records_the_data_class_names_on_the_model(tmp_path):
    clf, x, y = _tiny()  # label names "0", "1" (as after an attack on integer labels)
    clf.save(tmp_path / "m")
    rows = "".join(f"{' '.join(t)},{'pos' if v else 'neg'}\n" for t, v in zip(x, y))
    data = _write(tmp_path / "d.csv", "text,label\n" + rows)
    assert main(["finetune", "--model", str(tmp_path / "m"), "--data", str(data), "--top-layers", "1", "--out",
                 str(tmp_path / "ft"), "--quiet", "--batch-size", "8"]) == 0
    saved = TinyClassifier.load(tmp_path / "ft" / "model")
    assert saved.label_names == ["neg", "pos"]
    only_pos = load_dataset(str(_write(tmp_path / "p.csv", "text,label\ngood film,pos\n")))
    assert _align_labels(only_pos, saved, declared=False).labels == [1]


# ---- issue #40 items 5, 6 and issue #43 item 9: one-line errors instead of remaps and tracebacks -----------


def test_unknown_evaluation_labels_are_an_error_not_a_sorted_remap(tmp_path, capsys):
    clf, x, y = _tiny()
    clf.label_names = ["neg", "pos"]
    clf.save(tmp_path / "m")
    # "negative"/"positive" are not the model's class names: they were mapped in sorted order before
    data = _write(tmp_path / "d.tsv", "sentence\tlabel\n" + "".join(
        f"{' '.join(t)}\t{'positive' if v else 'negative'}\n" for t, v in zip(x, y)))
    code = main(["certify", "--model", str(tmp_path / "m"), "--data", str(data), "--k", "2", "--iterations", "2",
                 "--n", "2", "--out", str(tmp_path / "c"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "'negative', 'positive'" in err and "['neg', 'pos']" in err and "--labels" in err
    # one unknown label among known ones is named alone
    ds = load_dataset(str(_write(tmp_path / "e.tsv", "sentence\tlabel\ngood film\tpos\nbad film\tmeh\n")))
    with pytest.raises(ValueError, match=r"label\(s\) 'meh' are not among the model's class names"):
        _align_labels(ds, clf, declared=False)
    # declared labels and integer class indices stay valid
    assert _align_labels(load_dataset(str(_write(tmp_path / "i.tsv", "sentence\tlabel\ngood\t1\n"))), clf,
                         declared=False).labels == [1]


@pytest.mark.parametrize("sub", ["certify", "evaluate"])
def test_truncated_model_safetensors_is_a_one_line_error(sub, tmp_path, capsys):
    clf, x, y = _tiny()
    clf.save(tmp_path / "m")
    w = tmp_path / "m" / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    data = _write(tmp_path / "d.tsv", "sentence\tlabel\n" + "".join(f"{' '.join(t)}\t{v}\n" for t, v in zip(x, y)))
    args = [sub, "--model", str(tmp_path / "m"), "--data", str(data), "--k", "2", "--iterations", "2",
            "--out", str(tmp_path / "o"), "--quiet"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "model.safetensors cannot be read" in err and "truncated" in err


def test_model_of_another_vocabulary_is_a_one_line_error(tmp_path, capsys):
    """Issue #43 item 9 for frs: weights and vocabulary of different models gave an IndexError traceback."""
    clf, x, y = _tiny()
    clf.save(tmp_path / "m")
    big = TinyClassifier.create(Vocab.build([[f"w{i}" for i in range(40)]], min_count=1), 2, d_model=8, n_heads=2,
                                d_ff=8, seed=0)
    big.save(tmp_path / "big")
    # the other model's weights (larger embedding) beside this model's config and vocabulary
    (tmp_path / "m" / "model.safetensors").write_bytes((tmp_path / "big" / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match=r"embedding of \d+ tokens but vocab.json / config.json have \d+"):
        TinyClassifier.load(tmp_path / "m")
    # a vocabulary of another model beside this model's config and weights
    (tmp_path / "m" / "model.safetensors").unlink()
    clf.save(tmp_path / "m")
    (tmp_path / "m" / "vocab.json").write_text((tmp_path / "big" / "vocab.json").read_text())
    data = _write(tmp_path / "d.tsv", "sentence\tlabel\n" + "".join(f"{' '.join(t)}\t{v}\n" for t, v in zip(x, y)))
    assert main(["certify", "--model", str(tmp_path / "m"), "--data", str(data), "--out", str(tmp_path / "o"),
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"vocab.json has {len(big.vocab)} tokens" in err and f"vocabulary of {len(clf.vocab)}" in err


def test_integer_label_outside_the_model_classes_names_only_that_index(tmp_path):
    """Integer labels {0, 5} against a 2-class model named neg/pos: the error listed '0' as an unknown class name
    too, although 0 is a valid class index."""
    clf, _, _ = _tiny()
    clf.label_names = ["neg", "pos"]
    ds = load_dataset(str(_write(tmp_path / "i.jsonl", '{"text": "good film", "label": 5}\n'
                                 '{"text": "bad film", "label": 0}\n')))
    with pytest.raises(ValueError, match=r"class index\(es\) 5 outside the model's 2 classes 0\.\.1") as e:
        _align_labels(ds, clf, declared=False)
    assert "'0'" not in str(e.value)
    # in range: kept as class indices
    ds = load_dataset(str(_write(tmp_path / "j.jsonl", '{"text": "good film", "label": 1}\n')))
    assert _align_labels(ds, clf, declared=False).labels == [1]


def test_labels_in_another_order_than_the_model_classes_is_an_error(tmp_path):
    """``--labels positive negative`` against a model whose classes are [negative, positive] flipped every true label
    silently (certificates' ``correct`` inverted)."""
    clf, _, _ = _tiny()
    clf.label_names = ["negative", "positive"]
    path = _write(tmp_path / "d.tsv", "sentence\tlabel\ngood film\tpositive\nbad film\tnegative\n")
    ds = load_dataset(str(path), labels=["positive", "negative"])
    with pytest.raises(ValueError, match=r"'positive' is class 0 in --labels but class 1 of the model"):
        _align_labels(ds, clf, declared=True)
    ok = _align_labels(load_dataset(str(path), labels=["negative", "positive"]), clf, declared=True)
    assert ok.labels == [1, 0]
    # other names declared positionally (the documented use of --labels) stay valid
    ds = load_dataset(str(_write(tmp_path / "e.tsv", "sentence\tlabel\ngood\tpos\nbad\tneg\n")), labels=["neg", "pos"])
    assert _align_labels(ds, clf, declared=True).labels == [1, 0]


@pytest.mark.parametrize("body,msg", [
    ('{"text": "good", "label": null}\n', r"field 'label' must be a class name \(string\) or a class index \(integer\)"),
    ('{"text": "good", "label": true}\n', r"must be a class name"),
    ('{"text": "good", "label": 1.5}\n', r"got 1\.5"),
    ('{"text": "good", "label": ""}\n', r"\.jsonl:2: empty label"),
])
def test_null_empty_or_non_class_jsonl_labels_are_errors_not_classes(tmp_path, body, msg):
    """A null label became a class named 'None' and an empty one a class named '' (silently, also for training)."""
    with pytest.raises(ValueError, match=msg):
        load_dataset(str(_write(tmp_path / "d.jsonl", '{"text": "bad", "label": "neg"}\n' + body)))


def test_empty_tsv_label_cell_is_an_error(tmp_path):
    with pytest.raises(ValueError, match=r"d\.tsv:2: empty label"):
        load_dataset(str(_write(tmp_path / "d.tsv", "sentence\tlabel\ngood\t\nbad\tneg\n")))
    assert load_dataset(str(_write(tmp_path / "f.jsonl", '{"text": "good", "label": 1.0}\n'))).labels == [1]


@pytest.mark.parametrize("name", ["d.tsv", "d.csv"])
def test_non_utf8_table_names_the_file_and_line(tmp_path, name):
    """A TSV / CSV with a non-UTF-8 byte gave "'utf-8' codec can't decode byte 0xff ..." without the file name."""
    p = tmp_path / name
    sep = "," if name.endswith("csv") else "\t"
    p.write_bytes(f"sentence{sep}label\ngood{sep}pos\n".encode() + b"\xff bad" + f"{sep}neg\n".encode())
    with pytest.raises(ValueError, match=rf"{name}:3: not UTF-8"):
        load_dataset(str(p))


@pytest.mark.parametrize("name,body", [
    ("bom.tsv", "sentence\tlabel\r\ngreat film\tpos\r\ndull film\tneg\r\n"),
    ("bom.csv", "text,label\ngreat film,pos\ndull film,neg\n"),
])
def test_utf8_bom_does_not_hide_the_header(tmp_path, name, body):
    """A file saved as "UTF-8 with BOM" (Excel, Notepad): the header row was read as data ('\\ufeffsentence'),
    so its label 'label' became a class (attack) or an unknown-label error (certify)."""
    p = tmp_path / name
    p.write_bytes(b"\xef\xbb\xbf" + body.encode())
    ds = load_dataset(str(p))
    assert ds.texts == ["great film", "dull film"] and ds.label_names == ["neg", "pos"]


@pytest.mark.parametrize("body,match", [('{"k": 4,', "is unreadable"), ("[1, 2]", "holds a JSON list")])
def test_certify_resume_with_a_corrupt_settings_file_names_it(tmp_path, body, match):
    """A damaged certify_settings.json gave 'error: Expecting property name ...' naming no file ([] a traceback)."""
    from iclr25.frs.certify_resume import resume_certificates

    path, spath = tmp_path / "certificates.jsonl", tmp_path / "certify_settings.json"
    path.write_text('{"index": 0}\n')
    spath.write_text(body)
    with pytest.raises(ValueError, match=match) as e:
        resume_certificates(path, spath, {"k": 4}, resume=True)
    assert str(spath) in str(e.value) and "\n" not in str(e.value)
