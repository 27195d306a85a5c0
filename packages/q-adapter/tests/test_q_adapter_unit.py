"""Unit tests: config, loaders and bad input, masks, saving/loading, trainer resume."""

from __future__ import annotations

import gzip
import json
import logging

import pytest
import torch

from iclr25.q_adapter import (
    LoRAPolicy,
    PreferencePair,
    QAdapterConfig,
    QAdapterModel,
    TrainerConfig,
    action_mask,
    collate_pairs,
    load_hh_rlhf,
    load_preference_jsonl,
    split_hh_dialogue,
    tokenize_pairs,
)
from iclr25.q_adapter.trainer import PreferenceTrainer


def test_config_defaults_and_variants(tmp_path):
    c = QAdapterConfig()
    assert (c.alpha_tilde, c.alpha_0, c.gamma, c.lora_r, c.lora_alpha) == (1.0, 0.01, 1.0, 8, 16)
    assert (c.value_index, c.mask_alignment, c.normalize, c.reg_beta) == ("next", "shifted", "none", 0.0)
    code = QAdapterConfig.official_code()
    assert (code.value_index, code.mask_alignment, code.normalize, code.reg_beta) == ("same", "code", "padded", 0.1)
    code.save(tmp_path / "c.json")
    assert QAdapterConfig.load(tmp_path / "c.json") == code
    with pytest.raises(ValueError, match="normalize"):
        QAdapterConfig(normalize="mean")
    with pytest.raises(ValueError, match="alpha_tilde"):
        QAdapterConfig(alpha_tilde=0)


def test_action_mask_alignments():
    resp = torch.tensor([[0, 0, 1, 1, 0]])
    attn = torch.tensor([[1, 1, 1, 1, 0]])
    assert action_mask(resp, attn, "shifted").tolist() == [[0, 1, 1, 0]]
    assert action_mask(resp, attn, "code").tolist() == [[0, 0, 1, 1]]


def test_split_hh_last_assistant():
    text = "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: and?\n\nAssistant: bye"
    p, r = split_hh_dialogue(text)
    assert p.endswith("and?\n\nAssistant:") and r == " bye"


def test_hh_prefix_mismatch_and_empty(tmp_path, caplog):
    rows = [
        {"chosen": "\n\nHuman: a\n\nAssistant: x", "rejected": "\n\nHuman: a\n\nAssistant: y"},
        # prefixes differ before the last assistant turn: split at the common part's last marker
        {"chosen": "\n\nHuman: a\n\nAssistant: one\n\nHuman: b\n\nAssistant: c",
         "rejected": "\n\nHuman: a\n\nAssistant: two"},
        {"chosen": "\n\nHuman: a\n\nAssistant:", "rejected": "\n\nHuman: a\n\nAssistant: y"},  # empty
    ]
    p = tmp_path / "hh.jsonl.gz"
    with gzip.open(p, "wt") as fh:
        fh.write("\n".join(json.dumps(r) for r in rows))
    with caplog.at_level(logging.INFO):
        pairs = load_hh_rlhf(p)
    assert len(pairs) == 2
    assert pairs[1].prompt == "\n\nHuman: a\n\nAssistant:"
    assert pairs[1].chosen.startswith(" one") and pairs[1].rejected == " two"
    assert "'prefix_fixed': 1" in caplog.text and "'empty_response': 1" in caplog.text


def test_malformed_jsonl_names_line(tmp_path):
    p = tmp_path / "pairs.jsonl"
    p.write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\n{"prompt": "p", "chosen": \n')
    with pytest.raises(ValueError, match=r"pairs.jsonl:2: malformed JSON"):
        load_preference_jsonl(p)
    p.write_text('{"prompt": "p", "chosen": "a"}\n')
    with pytest.raises(ValueError, match=r":1: missing field"):
        load_preference_jsonl(p)
    p.write_text('{"prompt": "  ", "chosen": "a", "rejected": "b"}\n')
    with pytest.raises(ValueError, match=r":1: PreferencePair.prompt is empty"):
        load_preference_jsonl(p)


def test_jsonl_wrong_type_and_encoding_named(tmp_path):
    """Trial QA (s52): a number/list/NaN field said "is empty"; a Latin-1 file gave a bare codec error
    without file or line; a UTF-8 BOM on line 1 was "malformed JSON"."""
    p = tmp_path / "pairs.jsonl"
    for bad, what in (('{"prompt": 5, "chosen": "a", "rejected": "b"}', "prompt must be a string, got int"),
                      ('{"prompt": "p", "chosen": ["a"], "rejected": "b"}', "chosen must be a string, got list"),
                      ('{"prompt": NaN, "chosen": "a", "rejected": "b"}', "prompt must be a string, got float")):
        p.write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\n' + bad + "\n")
        with pytest.raises(ValueError, match=rf"pairs.jsonl:2: PreferencePair.{what}"):
            load_preference_jsonl(p)
    p.write_bytes(b'{"prompt": "p", "chosen": "a", "rejected": "b"}\n'
                  + '{"prompt": "caf\u00e9", "chosen": "a", "rejected": "b"}\n'.encode("latin-1"))
    with pytest.raises(ValueError, match=r"pairs.jsonl:2: not UTF-8 text"):
        load_preference_jsonl(p)
    p.write_bytes(b"\xef\xbb\xbf" + '{"prompt": "caf\u00e9 \u96e8", "chosen": "a", "rejected": "b"}\r\n'.encode())
    assert load_preference_jsonl(p) == [PreferencePair("caf\u00e9 \u96e8", "a", "b")]


def test_empty_response_rejected():
    with pytest.raises(ValueError, match="chosen is empty"):
        PreferencePair("prompt", "", "b")


def test_identical_after_truncation_dropped(tiny_lm, caplog):
    _, tok = tiny_lm
    pairs = [PreferencePair("Q:", " same start then A", " same start then B"), PreferencePair("Q:", " x", " y")]
    with caplog.at_level(logging.WARNING):
        out = tokenize_pairs(pairs, tok, max_length=8, max_prompt_length=3)
    assert len(out) == 1
    assert "dropped 1 of 2 pairs" in caplog.text
    with pytest.raises(ValueError, match="identical after truncation"):
        tokenize_pairs(pairs[:1], tok, max_length=8, max_prompt_length=3)


def test_base_without_lm_head_rejected():
    from transformers import GPT2Config, GPT2Model

    bare = GPT2Model(GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=50, n_positions=16))
    with pytest.raises(ValueError, match="no causal-LM head"):
        QAdapterModel(bare, QAdapterConfig())


def test_collate_and_shapes(tiny_lm):
    model, tok = tiny_lm
    tp = tokenize_pairs([PreferencePair("Hi:", " yes", " no way"), PreferencePair("Hey there:", " a", " bb")], tok,
                        max_length=32, max_prompt_length=16)
    b = collate_pairs(tp, tok.pad_token_id)
    assert b["input_ids"].shape[0] == 4
    qm = QAdapterModel(model, QAdapterConfig())
    q = qm.q_values(b["input_ids"], b["attention_mask"])
    assert q.shape == (*b["input_ids"].shape, 258) and q.dtype == torch.float32
    lp = qm.base_log_probs(b["input_ids"], b["attention_mask"])
    assert not lp.requires_grad
    r, m = qm.token_rewards(b["input_ids"], b["attention_mask"], b["response_mask"])
    assert r.shape == m.shape == (4, b["input_ids"].shape[1] - 1)
    loss, stats = qm.loss(b["input_ids"], b["attention_mask"], b["response_mask"])
    loss.backward()
    grads = [p.grad for n, p in qm.peft_model.named_parameters() if p.requires_grad]
    assert grads and all(g is not None for g in grads)
    assert all(not p.requires_grad for n, p in qm.peft_model.named_parameters() if "lora_" not in n)


def test_save_load_roundtrip(tiny_lm, tmp_path, lora_randomizer):
    from iclr25.core.lm import tiny_causal_lm

    model, tok = tiny_lm
    cfg = QAdapterConfig(alpha_0=0.2, alpha_tilde=0.9)
    qm = QAdapterModel(model, cfg)
    lora_randomizer(qm.peft_model)
    qm.save_pretrained(tmp_path / "ad")
    assert (tmp_path / "ad" / "adapter_config.json").is_file()
    fresh = tiny_causal_lm(n_embd=32, n_layer=2, n_head=2, n_positions=128, seed=0)
    qm2 = QAdapterModel.from_pretrained(fresh, tmp_path / "ad")
    assert qm2.cfg == cfg
    ids = tok(["hello world"], return_tensors="pt")["input_ids"]
    qm.eval()
    assert torch.allclose(qm.log_probs(ids), qm2.log_probs(ids), atol=1e-6)
    with pytest.raises(ValueError, match="'q-adapter' adapter"):
        LoRAPolicy.from_pretrained(tiny_causal_lm(n_embd=32, n_layer=2, n_head=2, n_positions=128), tmp_path / "ad")


def test_sft_adapter_keeps_its_score_after_loading(tiny_lm, tmp_path, lora_randomizer):
    """Trial QA (s52): ``LoRAPolicy.from_pretrained`` always rebuilt ``score="dpo"``, so ``evaluate`` of an SFT
    adapter ranked pairs by log pi - log pi_1 instead of SFT's log pi (its documented score)."""
    from iclr25.core.lm import tiny_causal_lm

    model, tok = tiny_lm
    for score in ("sft", "dpo"):
        pol = LoRAPolicy(tiny_causal_lm(n_embd=32, n_layer=2, n_head=2, n_positions=128, seed=0), score=score)
        lora_randomizer(pol.peft_model)
        pol.save_pretrained(tmp_path / score)
        back = LoRAPolicy.from_pretrained(tiny_causal_lm(n_embd=32, n_layer=2, n_head=2, n_positions=128, seed=0),
                                          tmp_path / score)
        assert back.score == score
        ids = tok(["Q: yes", "Q: no!"], return_tensors="pt", padding=True)
        resp = torch.zeros_like(ids["input_ids"]); resp[:, 2:] = 1  # noqa: E702
        pol.eval(); back.eval()  # noqa: E702
        assert torch.allclose(pol.scores(ids["input_ids"], ids["attention_mask"], resp),
                              back.scores(ids["input_ids"], ids["attention_mask"], resp), atol=1e-5)


def _train(tok, model, out, steps, resume=False, n_pairs=8, qcfg=None, **tkw):
    pairs = tokenize_pairs([PreferencePair(f"Q{i}:", f" good {i}", f" bad {i}!") for i in range(n_pairs)], tok,
                           max_length=24, max_prompt_length=8)
    qm = QAdapterModel(model, qcfg or QAdapterConfig(lora_dropout=0.0))
    cfg = TrainerConfig(**{**dict(batch_size=2, epochs=2, max_steps=steps, learning_rate=1e-2, progress=False),
                           **tkw})
    PreferenceTrainer(qm, pairs, tok.pad_token_id, cfg, output_dir=out).train(resume=resume)
    return {n: p.detach().clone() for n, p in qm.peft_model.named_parameters() if p.requires_grad}


def test_resume_matches_uninterrupted(tmp_path):
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    tok = byte_tokenizer()
    mk = lambda: tiny_causal_lm(n_embd=32, n_layer=1, n_head=2, n_positions=64, seed=0)  # noqa: E731
    torch.manual_seed(0)
    straight = _train(tok, mk(), tmp_path / "a", 6)
    torch.manual_seed(0)
    _train(tok, mk(), tmp_path / "b", 3)
    resumed = _train(tok, mk(), tmp_path / "b", 6, resume=True)
    for k in straight:
        assert torch.allclose(straight[k], resumed[k], atol=1e-6), k
    lines = (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3, 4, 5, 6]


def test_resume_drops_metrics_after_the_checkpoint(tmp_path):
    """A run killed between checkpoints left metrics past the checkpoint's step (and a torn line): the
    resumed run logs each step once; --resume with no checkpoint is an error (as in vbon)."""
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    tok = byte_tokenizer()
    mk = lambda: tiny_causal_lm(n_embd=32, n_layer=1, n_head=2, n_positions=64, seed=0)  # noqa: E731
    _train(tok, mk(), tmp_path / "b", 3)
    with open(tmp_path / "b" / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps({"step": 4, "loss": 0.0}) + "\n" + '{"step": 5, "lo')
    _train(tok, mk(), tmp_path / "b", 5, resume=True)
    lines = (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3, 4, 5]
    assert json.loads(lines[3])["loss"] != 0.0  # step 4 is the resumed run's, not the stale record
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "metrics.jsonl").write_text(json.dumps({"step": 9, "loss": 1.0}) + "\n")
    # --resume without a checkpoint warned and started over (vbon: an error): one behaviour, vbon's
    with pytest.raises(FileNotFoundError, match="--resume given but no checkpoint in .*train without --resume"):
        _train(tok, mk(), tmp_path / "c", 2, resume=True)


def test_resume_refuses_changed_settings_and_torn_checkpoint(tmp_path):
    """--resume with another batch size / lr / LoRA rank / alpha / data size, or a torn trainer_state.pt,
    is a ValueError naming the change and the fix (it was a shape RuntimeError or silently reused state)."""
    import shutil

    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    tok = byte_tokenizer()
    mk = lambda: tiny_causal_lm(n_embd=32, n_layer=1, n_head=2, n_positions=64, seed=0)  # noqa: E731
    _train(tok, mk(), tmp_path / "a", 2)
    cases = [(dict(batch_size=3), "batch_size: 2 -> 3"), (dict(learning_rate=1e-3), "learning_rate"),
             (dict(qcfg=QAdapterConfig(lora_dropout=0.0, lora_r=4)), "lora_r: 8 -> 4"),
             (dict(qcfg=QAdapterConfig(lora_dropout=0.0, alpha_0=0.5)), "alpha_0: 0.01 -> 0.5"),
             (dict(n_pairs=6), "training pairs: 8 -> 6")]
    for i, (kw, msg) in enumerate(cases):
        shutil.copytree(tmp_path / "a", tmp_path / f"c{i}")
        with pytest.raises(ValueError, match=msg):
            _train(tok, mk(), tmp_path / f"c{i}", 4, resume=True, **kw)
    shutil.copytree(tmp_path / "a", tmp_path / "ok")
    _train(tok, mk(), tmp_path / "ok", 4, resume=True, epochs=3)  # longer runs may resume
    (tmp_path / "a" / "checkpoint" / "trainer_state.pt").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="torn or not a PreferenceTrainer state.*delete"):
        _train(tok, mk(), tmp_path / "a", 4, resume=True)


def test_grad_accum_must_match_the_launch_config(monkeypatch):
    """`accelerate launch` with a DeepSpeed config exports ACCELERATE_GRADIENT_ACCUMULATION_STEPS, which
    overrides the Accelerator's value: a mismatch with --grad-accum is an error, not a miscounted run."""
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    tok = byte_tokenizer()
    pairs = tokenize_pairs([PreferencePair("Q:", " good", " bad!")] * 4, tok, max_length=24, max_prompt_length=8)
    qm = QAdapterModel(tiny_causal_lm(n_embd=32, n_layer=1, n_head=2, n_positions=64, seed=0),
                       QAdapterConfig(lora_dropout=0.0))
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4")
    with pytest.raises(ValueError, match="grad_accum: the trainer is set to 2 but the Accelerator accumulates 4"):
        PreferenceTrainer(qm, pairs, tok.pad_token_id, TrainerConfig(batch_size=2, grad_accum=2, progress=False))


def _dpo_batch(tok):
    from iclr25.q_adapter.data import collate_pairs

    pairs = tokenize_pairs([PreferencePair(f"Q{i}:", f" good {i} yes", f" bad {i}!") for i in range(4)], tok,
                           max_length=24, max_prompt_length=8)
    return collate_pairs(pairs, tok.pad_token_id), pairs


@pytest.mark.parametrize("disable", [True, False])
def test_dpo_is_log2_at_init_with_dropout(disable):
    """Issue 44 item 4: with the policy equal to the reference (LoRA B = 0 at init) DPO's loss is log 2 exactly
    on a checkpoint whose config carries dropout 0.3, because the trainer sets the base model's dropout to 0
    (TRL's default for preference losses). ``disable_dropout=False`` keeps the model's dropout: the policy and
    the reference forwards then draw different masks and the loss is not log 2 (the defect)."""
    import math

    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    tok = byte_tokenizer()
    batch, pairs = _dpo_batch(tok)
    torch.manual_seed(0)
    pol = LoRAPolicy(tiny_causal_lm(n_embd=32, n_layer=2, n_head=2, n_positions=64, seed=0, dropout=0.3),
                     QAdapterConfig(lora_dropout=0.3), score="dpo")
    tr = PreferenceTrainer(pol, pairs, tok.pad_token_id, TrainerConfig(method="dpo", batch_size=2, progress=False,
                                                                       disable_dropout=disable))
    tr.model.train()
    loss, stats = tr.model(**batch, method="dpo", dpo_beta=0.1)
    if disable:
        assert loss.item() == math.log(2) or torch.equal(loss, torch.log(torch.tensor(2.0, dtype=loss.dtype)))
        assert stats["margin"] == 0.0
    else:
        assert abs(loss.item() - math.log(2)) > 1e-4


def test_qadapter_loss_dropout_free_in_training():
    """Q-Adapter's residual rewards compare the adapter-on forward with the base (reference) forward; on a
    checkpoint with dropout 0.3 the training-mode loss must equal the eval-mode (dropout-free) loss, by
    default; with the model's dropout kept it does not (two different masks)."""
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    tok = byte_tokenizer()
    batch, pairs = _dpo_batch(tok)
    losses = {}
    for disable in (True, False):
        torch.manual_seed(0)
        qm = QAdapterModel(tiny_causal_lm(n_embd=32, n_layer=2, n_head=2, n_positions=64, seed=0, dropout=0.3),
                           QAdapterConfig())
        tr = PreferenceTrainer(qm, pairs, tok.pad_token_id, TrainerConfig(batch_size=2, progress=False,
                                                                          disable_dropout=disable))
        tr.model.train()
        train_loss = tr.model(**batch)[0].detach()
        tr.model.eval()
        with torch.no_grad():
            losses[disable] = (train_loss, tr.model(**batch)[0])
    assert torch.equal(*losses[True])
    assert not torch.equal(*losses[False])


def test_code_regulariser_dominates_the_loss_at_init(tiny_lm):
    """Was the claim ``mechanism/code_regulariser_dominates_loss_at_init`` (issue 45 §2: fixed by the base's NLL
    at init, so it is a property of the loss, tested here). The official code's ``reg_beta * mean r_t^2``
    equals the value recomputed from the residual rewards, and at init (adapter B = 0) it outweighs the
    Bradley-Terry term divided by the padded length; the paper's loss has no regulariser."""
    from iclr25.q_adapter import QAdapterConfig, QAdapterModel
    model, tok = tiny_lm
    b, _ = _dpo_batch(tok)
    ids, attn, resp = b["input_ids"], b["attention_mask"], b["response_mask"]
    pol = QAdapterModel(model, QAdapterConfig.variant("code"))
    _, stats = pol.loss(ids, attn, resp)
    r, mask = pol.token_rewards(ids, attn, resp)
    expected = 0.1 * float((r.detach() ** 2 * mask).sum() / mask.sum())
    assert stats["reg_loss"] == pytest.approx(expected, rel=1e-5)
    assert stats["reg_loss"] > stats["pref_loss"]
    _, paper = QAdapterModel(model, QAdapterConfig.variant("paper")).loss(ids, attn, resp)
    assert paper["reg_loss"] == 0.0


@pytest.mark.parametrize("kind", ["q-adapter", "dpo"])
def test_reused_base_log_probs_equal_a_direct_computation(tiny_lm, lora_randomizer, kind):
    """The checkpoint evaluations reuse the frozen base's log-probs of each fixed batch (issue 48 §5): the memoised
    tensor equals the log-softmax of a separate copy of the unwrapped base, the scores and the general-text NLL
    equal those computed without the memo bitwise, and nothing is memoised outside the block."""
    import copy

    from iclr25.q_adapter.evaluate import general_nll, pair_accuracy

    model, tok = tiny_lm
    plain = copy.deepcopy(model).eval()
    pol = (QAdapterModel(model, QAdapterConfig()) if kind == "q-adapter"
           else LoRAPolicy(model, QAdapterConfig(), score="dpo"))
    lora_randomizer(pol.peft_model)
    pol.eval()
    pairs = tokenize_pairs([PreferencePair(f"Q{i}:", f" good {i}" * (i + 1), f" bad {i}!") for i in range(5)], tok,
                           max_length=40, max_prompt_length=8)
    texts = ["hello world, how are you?", "a longer general text " * 3, "ok then"]
    b = collate_pairs(pairs, tok.pad_token_id)
    ids, attn, resp = b["input_ids"], b["attention_mask"], b["response_mask"]
    direct = (pol.scores(ids, attn, resp), pair_accuracy(pol, pairs, tok.pad_token_id, batch_size=2),
              general_nll(pol, texts, tok, batch_size=2))
    memo: dict = {}
    for _ in range(2):  # the first pass fills the memo, the second reads it
        with pol.reuse_base_log_probs(memo):
            assert torch.equal(pol.scores(ids, attn, resp), direct[0])
            assert pair_accuracy(pol, pairs, tok.pad_token_id, batch_size=2) == direct[1]
            assert general_nll(pol, texts, tok, batch_size=2) == direct[2]
    n = len(memo)
    # the whole batch, the pair batches of 2, and the 2 text batches (Q-Adapter's pi~ needs log pi_1; DPO's
    # general-text NLL is of pi_theta alone)
    assert n == 1 + -(-len(pairs) // 2) + (2 if kind == "q-adapter" else 0)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # the position ids the policy's forward uses
    with torch.no_grad():
        ref = torch.log_softmax(plain(input_ids=ids, attention_mask=attn, position_ids=pos).logits.float(), dim=-1)
    hit = [v for k, v in memo.items() if k[0] == tuple(ids.shape) and k[2] == ids.numpy().tobytes()]
    assert len(hit) == 1 and torch.equal(hit[0], ref)
    pol.base_log_probs(ids[:1], attn[:1])
    assert len(memo) == n and pol._base_memo is None
