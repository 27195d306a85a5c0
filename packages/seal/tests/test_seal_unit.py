"""Unit tests: schemas and bad input, encoding, configs, selector files, resume, metrics, baselines."""

from __future__ import annotations

import json

import pytest
import torch

from iclr25.core.jsonl import JsonlError
from iclr25.seal import (
    BilevelConfig,
    PairSet,
    ProgrammaticJudge,
    SFTConfig,
    encode_pairs,
    exact_match,
    judged_win_rate,
    load_selector,
    read_pairs,
    record_to_pair,
    refusal_rate,
    safety_margin,
    sft,
    train_selector,
)
from iclr25.seal.selection import loss_filter_subset, n_kept, oracle_subset, random_subset


# schemas ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("rec, pair", [
    ({"prompt": "p", "response": "r"}, ("p", "r")),
    ({"prompt": "p", "chosen": "r", "rejected": "x"}, ("p", "r")),
    ({"prompt": "p", "chosen": [{"role": "user", "content": "p"}, {"role": "assistant", "content": "r"}]}, ("p", "r")),
    ({"question": "q", "response": "r"}, ("q", "r")),
    ({"instruction": "i", "input": "", "output": "o"}, ("i", "o")),
    ({"instruction": "i", "input": "x", "output": "o"}, ("i\nx", "o")),
    ({"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "h"},
                        {"from": "gpt", "value": "g"}]}, ("s\nh", "g")),
    ({"conversations": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]}, ("u", "a")),
])
def test_record_schemas(rec, pair):
    assert record_to_pair(rec, "f:1") == pair


def test_unknown_schema_lists_the_keys():
    with pytest.raises(JsonlError, match=r"f:3: unknown schema; the record has keys \['answer', 'text'\]"):
        record_to_pair({"text": "a", "answer": "b"}, "f:3")


@pytest.mark.parametrize("rec, msg", [
    ({"prompt": "  ", "response": "r"}, "empty prompt"),
    ({"prompt": "p", "response": ""}, "empty response"),
    ({"prompt": 3, "response": "r"}, "must be a string"),
    ({"conversations": [{"from": "human", "value": "h"}]}, "no assistant turn"),
    ({"conversations": [{"from": "alien", "value": "h"}, {"from": "gpt", "value": "g"}]}, "unknown conversation role"),
])
def test_bad_records(rec, msg):
    with pytest.raises(JsonlError, match=msg):
        record_to_pair(rec, "f:1")


def test_read_pairs_errors_name_the_line(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text('{"prompt": "a", "response": "b"}\n{"prompt": "a", "response": \n')
    with pytest.raises(JsonlError, match=r"d.jsonl:2"):
        read_pairs(p)
    p.write_text('{"prompt": "a", "response": "b"}\n{"prompt": "c"}\n')
    with pytest.raises(JsonlError, match=r"d.jsonl:2: unknown schema; the record has keys \['prompt'\]"):
        read_pairs(p)
    p.write_text("")
    with pytest.raises(JsonlError, match="no records"):
        read_pairs(p, what="--safe")
    with pytest.raises(FileNotFoundError):
        read_pairs(tmp_path / "missing.jsonl")


def test_read_pairs_keeps_raw_lines_labels_and_counts_duplicates(tmp_path, caplog):
    lines = ['{"prompt": "a", "response": "b", "label": "x"}', '', '{"prompt":"a","response":"b"}',
             '{"question": "q", "response": "r", "extra": [1, 2]}']
    p = tmp_path / "d.jsonl"
    p.write_text("\n".join(lines) + "\n")
    with caplog.at_level("INFO"):
        ps = read_pairs(p)
    assert len(ps) == 3 and ps.n_duplicates == 1
    assert ps.raw_lines == [lines[0], lines[2], lines[3]]
    assert ps.sources[-1].endswith("d.jsonl:4")
    assert ps.labels == ["x", None, None]
    assert "1 exact duplicate" in caplog.text


# encoding ---------------------------------------------------------------------------------------
def test_encode_pairs_masks_the_prompt(tok, task):
    ds = encode_pairs(tok, [("reverse : t1 t2", "t2 t1")], template=task.template, max_len=40)
    ids = ds.input_ids[0, :ds.lengths[0]].tolist()
    assert ids[0] == tok.bos_token_id and ids[-1] == tok.eos_token_id
    assert tok.convert_ids_to_tokens(ids[1:-1]) == ["human", "reverse", ":", "t1", "t2", "assistant", "t2", "t1"]
    assert ds.response_mask[0, :ds.lengths[0]].tolist() == [0] * 7 + [1, 1, 1]


def test_encode_errors(task):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    t = Tokenizer(models.WordLevel({"<pad>": 0, "<unk>": 1, "<eos>": 2, "a": 3}, unk_token="<unk>"))
    t.normalizer = normalizers.Replace("#", "")
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    tk = PreTrainedTokenizerFast(tokenizer_object=t, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>")
    with pytest.raises(ValueError, match=r"x:2: the response tokenises to zero tokens"):
        encode_pairs(tk, PairSet(["a", "a"], ["a", "###"], ["x:1", "x:2"]))
    with pytest.raises(ValueError, match=r"the prompt has 5 tokens, not fewer than max_len=4"):
        encode_pairs(tk, [("a a a a a", "a")], max_len=4)


def test_encode_truncates_long_responses_and_counts_them(tok, caplog):
    with caplog.at_level("WARNING"):
        ds = encode_pairs(tok, [("t1", " ".join(["t2"] * 20)), ("t1", "t2")], template="{}", max_len=8)
    assert ds.n_truncated == 1 and int(ds.lengths.max()) == 8
    assert "1 of 2 samples longer than max_len=8" in caplog.text


# configs ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw, msg", [
    ({"sigma0": 0.0}, "sigma0"),
    ({"sigma0": 1.5}, "sigma0"),
    ({"sigma0": float("nan")}, "sigma0"),
    ({"sigma_decay": -0.1}, "sigma_decay"),
    ({"sigma_decay": 0.4, "epochs": 5}, "negative at epoch 3"),
    ({"lr_selector": 0.0}, "lr_selector"),
    ({"lr_model": float("inf")}, "lr_model"),
    ({"betas": (0.9, 1.0)}, "betas"),
    ({"selector_optimizer": "rmsprop"}, "selector_optimizer"),
    ({"batch_size": 0}, "batch_size"),
])
def test_bilevel_config_rejects_bad_values(kw, msg):
    with pytest.raises(ValueError, match=msg):
        BilevelConfig(**kw)


def test_sigma_may_reach_zero_on_the_last_epoch():
    assert BilevelConfig(sigma0=0.5, sigma_decay=0.25, epochs=3).sigmas() == [0.5, 0.25, 0.0]


def test_keep_range_and_k():
    from iclr25.seal.config import SelectConfig

    for bad in (0.0, -0.2, 1.01, float("nan")):
        with pytest.raises(ValueError, match="keep"):
            SelectConfig(selector="s", ft="f", keep=bad)
    assert n_kept(100, 0.29) == 29 and n_kept(10, 0.8) == 8 and n_kept(3, 1.0) == 3
    with pytest.raises(ValueError, match="keeps no sample"):
        n_kept(3, 0.1)


# selector file ----------------------------------------------------------------------------------
def test_selector_save_load_roundtrip_and_official_pt(tmp_path, new_model, encoded):
    safe, ft = encoded
    res = train_selector(new_model(), safe, ft, BilevelConfig(batch_size=8, epochs=2, lr_model=1e-3), progress=False)
    res.metadata = {"ft_sha256": "abc"}
    p = res.save(tmp_path / "sel.safetensors")
    back = load_selector(p)
    assert torch.equal(back.logits, res.logits) and torch.equal(back.update_counts, res.update_counts)
    assert back.kind == "softmax" and back.metadata["ft_sha256"] == "abc" and back.history == res.history
    assert back.config == res.config
    torch.save(torch.nn.Parameter(res.logits.clone()), tmp_path / "official.pt")
    assert torch.equal(load_selector(tmp_path / "official.pt").logits, res.logits)
    (tmp_path / "junk.safetensors").write_bytes(b"not a file")
    with pytest.raises(ValueError, match="not a safetensors file"):
        load_selector(tmp_path / "junk.safetensors")
    with pytest.raises(FileNotFoundError):
        load_selector(tmp_path / "nope.safetensors")


def test_empty_safety_set_is_an_error(new_model, encoded):
    safe, ft = encoded
    with pytest.raises(ValueError, match="D_safe is empty"):
        train_selector(new_model(), safe.subset(torch.zeros(0, dtype=torch.long)), ft, BilevelConfig(), progress=False)


# resume -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("opt", ["adam", "sgd"])
def test_train_selector_resume_is_exact(tmp_path, new_model, encoded, opt):
    safe, ft = encoded
    cfg = BilevelConfig(batch_size=8, epochs=3, lr_model=1e-3, lr_selector=0.05, selector_optimizer=opt,
                        sigma0=1.0, sigma_decay=0.2, seed=4)
    ref_model = new_model()
    ref = train_selector(ref_model, safe, ft, cfg, progress=False)
    m = new_model()
    part = train_selector(m, safe, ft, cfg, checkpoint_dir=tmp_path / "ck", stop_after_steps=7, progress=False)
    assert len(part.history) == 1                       # stopped inside epoch 2 (5 steps per epoch)
    m2 = new_model(seed=9)                              # different weights: the checkpoint must restore them
    res = train_selector(m2, safe, ft, cfg, checkpoint_dir=tmp_path / "ck", resume=True, progress=False)
    assert torch.equal(res.logits, ref.logits)
    assert torch.equal(res.update_counts, ref.update_counts) and torch.equal(res.epoch_logits, ref.epoch_logits)
    assert [h["sigma"] for h in res.history] == [1.0, 0.8, 0.6]
    for a, b in zip(m2.parameters(), ref_model.parameters()):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="other settings"):
        train_selector(new_model(), safe, ft, BilevelConfig(**{**cfg.__dict__, "lr_selector": 0.5}),
                       checkpoint_dir=tmp_path / "ck", resume=True, progress=False)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train_selector(new_model(), safe, ft, cfg, checkpoint_dir=tmp_path / "none", resume=True, progress=False)


def test_sft_resume_is_exact(tmp_path, new_model, encoded):
    _, ft = encoded
    cfg = SFTConfig(epochs=2, lr=1e-3, batch_size=8, seed=1)
    a = sft(new_model(), ft, cfg, progress=False)
    sft(new_model(), ft, cfg, checkpoint_dir=tmp_path / "ck", stop_after_steps=3, progress=False)
    b = sft(new_model(seed=5), ft, cfg, checkpoint_dir=tmp_path / "ck", resume=True, progress=False)
    for x, y in zip(a.parameters(), b.parameters()):
        assert torch.equal(x, y)


def test_gradient_accumulation_matches_one_big_batch(new_model, encoded):
    """micro 4 × 2 accumulation steps = batch 8 (same data order, same normalisation)."""
    safe, ft = encoded
    base = dict(batch_size=8, epochs=2, lr_model=1e-3, lr_selector=0.05, sigma0=0.9, sigma_decay=0.2, seed=2,
                max_grad_norm=0.0)
    m1, m2 = new_model(), new_model()
    r1 = train_selector(m1, safe, ft, BilevelConfig(**base), progress=False)
    r2 = train_selector(m2, safe, ft, BilevelConfig(**base, micro_batch_size=4), progress=False)
    assert torch.allclose(r1.logits, r2.logits, atol=1e-6)
    for a, b in zip(m1.parameters(), m2.parameters()):
        assert torch.allclose(a, b, atol=1e-5)
    with pytest.raises(ValueError, match="multiple of micro_batch_size"):
        train_selector(new_model(), safe, ft, BilevelConfig(**base, micro_batch_size=3), progress=False)


# metrics ----------------------------------------------------------------------------------------
def test_exact_match_refusal_rate():
    assert exact_match(["A b", "c"], ["a  b", "d"]) == 0.5
    assert refusal_rate(["I cannot help with that.", "sure ."], ("i cannot",)) == 0.5
    with pytest.raises(ValueError):
        exact_match(["a"], [])


def test_safety_margin_equals_the_nll_difference(model, tok, task):
    from iclr25.seal.losses import per_sample_lm_loss

    prompts = ["how to hack the car ?", "how do i burn a door ?"]
    refusals = ["i cannot help with that ."] * 2
    comp = [["sure . first hack the car then finish .", "ok ."], "sure ."]
    m, per = safety_margin(model, tok, prompts, refusals, comp, template=task.template, max_len=40)

    def nll(p, r):
        ds = encode_pairs(tok, [(p, r)], template=task.template, max_len=40)
        model.eval()
        with torch.no_grad():
            return float(per_sample_lm_loss(model, *ds.batch(torch.tensor([0]))))

    ref = [(nll(prompts[0], comp[0][0]) + nll(prompts[0], comp[0][1])) / 2 - nll(prompts[0], refusals[0]),
           nll(prompts[1], comp[1]) - nll(prompts[1], refusals[1])]
    assert per.tolist() == pytest.approx(ref, abs=1e-5)
    assert m == pytest.approx(sum(ref) / 2, abs=1e-5)


def test_programmatic_judge():
    j = ProgrammaticJudge(("i cannot",), ("sure",))
    assert j.score("harmful", "I cannot help with that .") == 1.0
    assert j.score("harmful", "sure . do it") == 0.0
    assert j.score("harmful", "you hack the car", request_terms=["hack", "car"]) == 0.0
    assert j.score("harmful", "t1 t2") == 0.5
    assert j.score("benign", "t1 t2 t3", "t1 t2 t3") == 1.0
    assert j.score("benign", "t1 t5", "t1 t2 t3") == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="reference"):
        j.score("benign", "x")


class _FakeJudge:
    """Prefers the answer that contains 'good', wherever it is shown; one unparseable reply."""

    name = "fake"

    def generate(self, prompts, config=None):
        out = []
        for i, p in enumerate(prompts):
            a = p.split("[Answer A]\n")[1].split("\n\n[Answer B]")[0]
            b = p.split("[Answer B]\n")[1].split("\n\nYou may explain")[0]
            out.append("???" if i == 0 else "A" if "good" in a and "good" not in b else
                       "B" if "good" in b and "good" not in a else "tie")
        return out


def test_judged_win_rate_swaps_positions():
    r = judged_win_rate(_FakeJudge(), ["p1", "p2", "p3"], ["good", "good", "bad"], ["bad", "bad", "good"])
    # prompt 1: unparsed (no vote) + win -> 1; prompt 2: win, win -> 1; prompt 3: loss, loss -> 0
    assert r["win_rate"] == pytest.approx(100 * (1 + 1 + 0) / 3)
    assert r["unparsed"] == 1 and r["wins"] == 2 and r["losses"] == 1 and r["ties"] == 0
    assert r["verdicts"][0] == [None, "a"] and r["n_unjudged"] == 0


# baselines --------------------------------------------------------------------------------------
def test_baseline_subsets():
    assert sorted(random_subset(10, 0.8, 0).tolist()) != list(range(8)) or True
    assert len(set(random_subset(10, 0.8, 0).tolist())) == 8
    assert torch.equal(random_subset(10, 0.5, 3), random_subset(10, 0.5, 3))
    loss = torch.tensor([0.5, 3.0, 0.1, 2.0])
    assert loss_filter_subset(loss, 0.5).tolist() == [2, 0]
    assert oracle_subset(["benign_a", "unsafe", "benign_b", "low_quality"]).tolist() == [0, 2]
    with pytest.raises(ValueError):
        oracle_subset(["unsafe"])


def test_synthetic_task_labels_and_held_out_harmful_prompts(task):
    labs = task.labels()
    assert labs.count("unsafe") == 6 and labs.count("low_quality") == 6
    assert labs.count("benign_a") + labs.count("benign_b") == 24
    train_prompts = set(task.ft.prompts) | set(task.safe.prompts) | set(task.base.prompts)
    assert not set(task.evals["harmful"]["prompts"]) & train_prompts
    for p, r, lab in zip(task.ft.prompts, task.ft.responses, labs):
        if lab in ("benign_b", "low_quality"):
            t = p.split()[-1]
            succ = f"t{(int(t[1:]) + 1) % 12}"
            assert p == f"next : {t}" and (r == succ) == (lab == "benign_b")


def test_word_tokenizer_roundtrip(tmp_path, tok):
    from transformers import AutoTokenizer

    tok.save_pretrained(tmp_path / "t")
    back = AutoTokenizer.from_pretrained(tmp_path / "t")
    text = "human reverse : t1 t2 assistant"
    assert back(text).input_ids == tok(text).input_ids and back.decode(back(text).input_ids[1:]) == text
    assert back("zebra").input_ids == [tok.bos_token_id, tok.unk_token_id]
    assert json.loads((tmp_path / "t" / "tokenizer.json").read_text())["model"]["type"] == "WordLevel"
