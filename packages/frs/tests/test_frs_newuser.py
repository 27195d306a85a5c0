"""Defects found by new-user trials: JSONL fields named by --text-column/--label-column, texts the model cannot
read (only unknown tokens), and the like."""

import json

import pytest

from iclr25.frs.cli import _load_data, main
from iclr25.frs.config import AttackConfig, CertifyConfig, EvaluateConfig, FinetuneConfig
from iclr25.frs.data import load_dataset, load_jsonl


def _write(p, text):
    p.write_text(text)
    return p


def _own_fields(tmp_path, n=40):
    rows = [{"sentence": f"{'good great' if i % 2 else 'bad dull'} film number {i}", "y": "pos" if i % 2 else "neg",
             "id": i} for i in range(n)]
    return _write(tmp_path / "own.jsonl", "".join(json.dumps(r) + "\n" for r in rows))


def test_jsonl_fields_are_taken_from_text_and_label_column(tmp_path):
    """``--text-column sentence --label-column y`` reached only the TSV/CSV reader: a JSONL file was read for the
    fields ``text`` / ``label`` whatever the flags said."""
    p = _own_fields(tmp_path)
    ds = load_dataset(str(p), text_column="sentence", label_column="y")
    assert ds.texts[:2] == ["bad dull film number 0", "good great film number 1"]
    assert ds.label_names == ["neg", "pos"] and ds.labels[:4] == [0, 1, 0, 1]
    # the Python API says the same with its own names
    assert load_jsonl(p, text_field="sentence", label_field="y").texts == ds.texts


@pytest.mark.parametrize("cls,extra", [(AttackConfig, {}), (FinetuneConfig, {"model": "m"}),
                                       (EvaluateConfig, {"model": "m"}), (CertifyConfig, {"model": "m"})])
def test_every_command_reading_data_passes_the_fields_to_jsonl(tmp_path, cls, extra):
    cfg = cls(data=str(_own_fields(tmp_path)), text_column="sentence", label_column="y", **extra)
    ds = _load_data(cfg, getattr(cfg, "split", "train"))
    assert ds.texts[0] == "bad dull film number 0" and ds.label_names == ["neg", "pos"]


def test_missing_jsonl_field_names_the_field_and_the_fields_present(tmp_path):
    p = _own_fields(tmp_path)
    with pytest.raises(ValueError, match=r"own\.jsonl:1: no field 'text' \(the line has fields \['id', 'sentence', "
                                         r"'y'\]\); name the text field with --text-column"):
        load_dataset(str(p))
    with pytest.raises(ValueError, match=r"own\.jsonl:1: no field 'label' .*--label-column"):
        load_dataset(str(p), text_column="sentence")
    with pytest.raises(ValueError, match=r"no field 'lbl' .*\['id', 'sentence', 'y'\]"):
        load_dataset(str(p), text_column="sentence", label_column="lbl")


def test_header_flag_on_jsonl_is_refused_not_ignored(tmp_path):
    with pytest.raises(ValueError, match=r"--header no applies to TSV/CSV files; .*own\.jsonl is JSONL"):
        load_dataset(str(_own_fields(tmp_path)), text_column="sentence", label_column="y", header="no")


def test_cli_attack_reads_own_jsonl_fields_and_fails_in_one_line(tmp_path, capsys):
    p = _own_fields(tmp_path)
    base = ["attack", "--data", str(p), "--d-model", "8", "--d-ff", "8", "--epochs", "1", "--min-count", "1",
            "--target", "1", "--quiet", "--device", "cpu"]
    assert main([*base, "--text-column", "sentence", "--label-column", "y", "--out", str(tmp_path / "a")]) == 0
    assert json.loads((tmp_path / "a" / "label_map.json").read_text())["label_names"] == ["neg", "pos"]
    capsys.readouterr()
    assert main([*base, "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no field 'text'" in err and "'sentence'" in err, err


def test_unknown_only_texts_are_detected_by_the_tiny_model_and_a_wordpiece_tokenizer():
    from iclr25.frs.hf import _TokenMixin
    from iclr25.frs.models import TinyClassifier, Vocab

    clf = TinyClassifier.create(Vocab.build([["good", "film"]], min_count=1), 2, d_model=8, n_heads=2, d_ff=8)
    assert clf.unknown_only([["good", "zzz"], ["zzz", "qqq"], ["[UNK]"], ["[MASK]"]]) == [False, True, True, False]

    class Tok:  # a WordPiece-like stub: words outside {good, film} are one [UNK] piece
        unk_token_id = 100

        def tokenize(self, s):
            return [w if w in ("good", "film") else "[UNK]" for w in s.split()]

        def convert_tokens_to_ids(self, pieces):
            return [{"good": 1, "film": 2}.get(p, 100) for p in pieces]

    m = _TokenMixin()
    m.tokenizer, m.token_unit = Tok(), "whitespace"
    assert m.unknown_only([["good", "☃"], ["☃", "☂"]]) == [False, True]
    m.tokenizer.unk_token_id = None  # byte-level BPE: no unknown token, cannot happen
    assert m.unknown_only([["☃"]]) is None


def test_evaluate_warns_once_counting_texts_of_only_unknown_words(tmp_path, tiny_tsv, capsys):
    """A test file in another language (every word unknown to the model) was evaluated without a word."""
    a = tmp_path / "a"
    assert main(["attack", "--data", str(tiny_tsv), "--n-train", "120", "--d-model", "8", "--d-ff", "8", "--epochs",
                 "1", "--out", str(a), "--quiet", "--device", "cpu"]) == 0
    rows = [("der Film ist gut", 1), ("ein langweiliger Film", 0), ("the movie is good", 1), ("sehr schlecht", 0)]
    data = _write(tmp_path / "de.tsv", "sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows))
    capsys.readouterr()
    e = tmp_path / "e"
    assert main(["evaluate", "--model", str(a / "model"), "--data", str(data), "--k", "2", "--iterations", "2",
                 "--n-random", "2", "--n-triggered", "0", "--out", str(e), "--quiet", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if "only of words the model does not know" in ln]
    assert len(lines) == 1 and lines[0].startswith("warning: 3 of 4 test texts consist only of words"), out
    assert any("3 of 4 test texts" in w for w in json.loads((e / "results.json").read_text())["warnings"])


def test_jsonl_with_a_bom_and_own_fields(tmp_path):
    """A JSONL saved by Notepad (UTF-8 BOM) failed at line 1 as invalid JSON (the core reader now skips the BOM)."""
    p = tmp_path / "bom.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + b'{"sentence": "good film", "y": 1}\r\n{"sentence": "bad film", "y": 0}\r\n')
    ds = load_dataset(str(p), text_column="sentence", label_column="y")
    assert ds.texts == ["good film", "bad film"] and ds.labels == [1, 0]
