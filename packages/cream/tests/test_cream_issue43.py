"""Issue 43, item 9 (cream): a reward/reference/SFT model with another vocabulary than the tokenizer it is
scored with is a clear error (before: an IndexError traceback from the embedding)."""

from __future__ import annotations

import json

import pytest


def _word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[PAD]", "[UNK]", "</s>", *"0123456789+="]
    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=t, pad_token="[PAD]", eos_token="</s>", unk_token="[UNK]")


def _save(folder, *, vocab_size=None, word=False):
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    tok = _word_tokenizer() if word else byte_tokenizer()
    kw = dict(eos_token_id=2, pad_token_id=0) if word else {}
    n = vocab_size or len(tok)
    tiny_causal_lm(vocab_size=n, n_layer=1, n_embd=16, n_head=2, n_positions=256, seed=0, **kw).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _samples(path):
    path.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"{i}+{i}=", "responses": [str(2 * i), str(i)]}) + "\n"
                            for i in range(3)))
    return path


COMMON = ("--device", "cpu", "--quiet", "--threads", "1")


def _err(capsys, *argv):
    from iclr25.cream.cli import main

    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def test_reward_ref_with_smaller_embedding_is_exit_2(tmp_path, capsys):
    m = _save(tmp_path / "m")
    small = _save(tmp_path / "small", vocab_size=64)  # the byte tokenizer (258 tokens), a 64-row embedding
    s = _samples(tmp_path / "s.jsonl")
    code, err = _err(capsys, "reward", "--model", m, "--ref", small, "--samples", s, "--out", tmp_path / "o", *COMMON)
    assert code == 2 and "Traceback" not in err, err
    assert "258 tokens" in err and "64 rows" in err
    code, err = _err(capsys, "reward", "--model", small, "--samples", s, "--out", tmp_path / "o2", *COMMON)
    assert code == 2 and "64 rows" in err, err


def test_reward_ref_with_other_tokenizer_is_exit_2(tmp_path, capsys):
    m = _save(tmp_path / "m")
    w = _save(tmp_path / "w", word=True)
    s = _samples(tmp_path / "s.jsonl")
    code, err = _err(capsys, "reward", "--model", m, "--ref", w, "--samples", s, "--out", tmp_path / "o", *COMMON)
    assert code == 2 and "different tokenizer" in err, err


def test_loop_sft_model_with_other_vocabulary_is_exit_2(tmp_path, capsys):
    m = _save(tmp_path / "m")
    w = _save(tmp_path / "w", word=True)
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"{i}+{i}="}) + "\n" for i in range(6)))
    code, err = _err(capsys, "loop", "--model", m, "--sft-model", w, "--prompts", pool, "--iterations", 2,
                     "--out", tmp_path / "o", *COMMON)
    assert code == 2 and "--sft-model" in err and "different tokenizer" in err and "Traceback" not in err, err


def test_api_score_and_loop_refuse_a_foreign_vocabulary(tmp_path):
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm
    from iclr25.cream import CreamConfig
    from iclr25.cream.loop import self_rewarding_loop
    from iclr25.cream.rewards import score_responses

    tok = byte_tokenizer()
    ok = tiny_causal_lm(n_layer=1, n_embd=16, n_head=2, seed=0)
    small = tiny_causal_lm(vocab_size=64, n_layer=1, n_embd=16, n_head=2, seed=0)
    assert score_responses(ok, tok, ["1+1="], ["2"]).shape == (1,)
    with pytest.raises(ValueError, match="outside the model's embedding of 64 rows"):
        score_responses(small, tok, ["1+1="], ["2"])
    with pytest.raises(ValueError, match="sft_model: the tokenizer has 258 tokens"):
        self_rewarding_loop(ok, tok, [["1+1="], ["2+2="]], CreamConfig(iterations=2), sft_model=small)
