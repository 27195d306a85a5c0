"""Unit tests: enumeration, sampling, rewards, BoN, losses, trainer/resume, LoRA, input validation."""

import copy

import numpy as np
import pytest
import torch

from iclr25.sharpening import (
    LogLikelihood,
    MajorityVote,
    RLHFConfig,
    SFTConfig,
    TrainConfig,
    TrapArithmeticTask,
    adaptive_sample_count,
    answer_extractor,
    best_of_n,
    enumerate_responses,
    rlhf_sharpen,
    samples_from_texts,
    select_best,
    sft_sharpen,
    sharpening_regression_loss,
    sharpness_report,
    tilted_optimum,
    xpo_loss,
)
from iclr25.sharpening.rewards import score_sequences

TASK = TrapArithmeticTask()


# enumeration ------------------------------------------------------------------------------------
def test_prefix_tree_enumeration_equals_full_sequences(tiny_lm):
    model, tok = tiny_lm
    prompts = ["12+34=", "7+1=", "49+10="]
    cands = ["00", "46", "5", "123", "46x"]
    a = enumerate_responses(model, tok, prompts, cands, method="full")
    b = enumerate_responses(model, tok, prompts, cands, method="prefix-tree", batch_size=7)
    np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)
    # one prompt alone (no padding) gives the same values: left padding does not shift positions
    c = enumerate_responses(model, tok, prompts[1:2], cands)
    np.testing.assert_allclose(c.numpy()[0], a.numpy()[1], atol=1e-5)


def test_enumeration_of_all_answers_is_a_distribution(tiny_lm):
    model, tok = tiny_lm
    lp = enumerate_responses(model, tok, TASK.prompts(TASK.pairs()[:5]), TASK.candidates)
    assert lp.shape == (5, 100)
    total = lp.exp().sum(1)
    assert torch.all(total <= 1 + 1e-6) and torch.all(total > 0.5)   # trained to answer two digits + EOS


def test_enumerate_rejects_bad_input(tiny_lm):
    model, tok = tiny_lm
    with pytest.raises(ValueError, match="at least one"):
        enumerate_responses(model, tok, [], ["1"])
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        enumerate_responses(model, tok, ["1+1=", ""], ["1"])
    with pytest.raises(ValueError, match="method"):
        enumerate_responses(model, tok, ["1+1="], ["1"], method="beam")


def test_sharpness_report_on_tabular_values():
    lp = np.log(np.array([[0.6, 0.3, 0.1], [0.4, 0.35, 0.25]]))
    base = np.log(np.array([[0.5, 0.3, 0.2], [0.2, 0.5, 0.3]]))        # y* = 0 and 1
    r = sharpness_report(lp, base, delta=0.5, correct=[0, 2])
    assert r.mean_mode_mass == pytest.approx((0.6 + 0.35) / 2)
    assert r.sharpened_fraction == 0.5 and r.epsilon == 0.5
    assert r.coverage == pytest.approx((1 / 0.5 + 1 / 0.5) / 2)
    assert r.mode_accuracy == 0.5 and r.expected_sample_accuracy == pytest.approx((0.6 + 0.25) / 2)
    with pytest.raises(ValueError, match="delta"):
        sharpness_report(lp, base, delta=1.0)


def test_tilted_optimum_limits():
    lp = np.log([0.5, 0.3, 0.2])
    assert tilted_optimum(lp, 1e-3)[0] == pytest.approx(1.0)
    np.testing.assert_allclose(tilted_optimum(lp, 1e6), [0.5, 0.3, 0.2], rtol=1e-5)
    assert tilted_optimum([0.0, -np.inf], 0.5).tolist() == [1.0, 0.0]
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="beta"):
            tilted_optimum(lp, bad)


# task / tokens ------------------------------------------------------------------------------------
def test_digits_and_symbols_are_single_byte_tokens():
    from iclr25.core.lm import byte_tokenizer

    tok = byte_tokenizer()
    assert tok("12+34=46", add_special_tokens=False)["input_ids"] == list(b"12+34=46")


def test_trap_task_validation_and_split():
    with pytest.raises(ValueError, match="p_correct"):
        TrapArithmeticTask(p_correct=1.0)
    with pytest.raises(ValueError, match="multiple of 10"):
        TrapArithmeticTask(n_distractors=15)
    with pytest.raises(ValueError, match="unique mode"):
        TrapArithmeticTask(p_correct=0.01, n_distractors=10)
    tr, te = TASK.split(300, 200, seed=0)
    assert len({tuple(p) for p in tr} & {tuple(p) for p in te}) == 0
    assert TASK.parse_prompt("12+34=") == (12, 34)
    with pytest.raises(ValueError):
        TASK.parse_prompt("12*34=")
    rng = np.random.default_rng(0)
    pairs = TASK.pairs()
    ans = np.stack([TASK.sample_answers(pairs, rng) for _ in range(50)])
    assert abs((ans == TASK.correct_index(pairs)).mean() - 0.4) < 0.01
    sweep = TrapArithmeticTask(p_correct=0.1, n_distractors=40)
    assert sweep.is_trap and sweep.distribution(pairs[:3]).sum(1) == pytest.approx(1.0)


# sampling, rewards, BoN ---------------------------------------------------------------------------
def test_samples_layout(trap_samples, tiny_lm):
    _, tok = tiny_lm
    s = trap_samples
    assert s.input_ids.shape[0] == 12 and s.lengths.shape == (4, 3)
    assert torch.equal(s.response_mask.sum(1), s.lengths.reshape(-1))
    for b in range(4):
        for j in range(3):
            ids, am, rm = s.row(b, j)
            assert tok.decode(ids[rm == 0]) == s.prompts[b]
            assert tok.decode(ids[rm == 1], skip_special_tokens=True) == s.responses[b][j]


def test_select_best_breaks_ties_by_first_index():
    scores = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [0.0, -1.0, 5.0]])
    assert select_best(scores).tolist() == [1, 0, 2]
    assert select_best(scores, 2).tolist() == [1, 0, 0]
    with pytest.raises(ValueError, match="NaN"):
        select_best(np.array([[np.nan, 1.0]]))
    with pytest.raises(ValueError, match="exceeds"):
        select_best(scores, 4)


def test_best_of_n_scores_are_forward_pass_log_likelihoods(tiny_lm):
    model, tok = tiny_lm
    torch.manual_seed(1)
    res = best_of_n(model, tok, ["12+34=", "20+21="], 5, max_new_tokens=4)
    s = res.samples
    np.testing.assert_allclose(res.scores.numpy().ravel(),
                               score_sequences(model, s.input_ids, s.attention_mask, s.response_mask).numpy())
    assert res.best_index.tolist() == np.argmax(res.scores.numpy(), 1).tolist()
    assert res.best == [s.responses[b][j] for b, j in enumerate(res.best_index)]


def test_best_of_n_rejects_bad_input(tiny_lm):
    model, tok = tiny_lm
    with pytest.raises(ValueError, match="n must be"):
        best_of_n(model, tok, ["1+1="], 0)
    with pytest.raises(ValueError, match="empty"):
        best_of_n(model, tok, ["1+1=", " "], 2)
    with pytest.raises(ValueError, match="no log-likelihoods"):
        best_of_n(object(), tok, ["1+1="], 2)


def test_text_backend_is_rescored_by_the_reference(tiny_lm):
    """A backend that returns only text is re-tokenised and scored by a forward pass, EOS appended."""
    model, tok = tiny_lm

    class Echo:
        name = "echo"

        def generate(self, prompts, config=None):
            return ["46" if p.startswith("12") else "9" for p in prompts]

    res = best_of_n(Echo(), tok, ["12+34=", "1+1="], 2, LogLikelihood(model), max_new_tokens=4)
    want = enumerate_responses(model, tok, ["12+34=", "1+1="], ["46", "9"])
    assert res.best == ["46", "9"]
    np.testing.assert_allclose(res.best_scores, [want[0, 0], want[1, 1]], atol=1e-5)


def test_majority_vote_counts_answers():
    s = samples_from_texts(_byte(), ["q1", "q2"], [["a 1", "b 2", "c 1"], ["x", "y 3", "z"]])
    mv = MajorityVote("last-number")(s).numpy()
    np.testing.assert_allclose(mv, [[2 / 3, 1 / 3, 2 / 3], [0, 1 / 3, 0]])
    assert select_best(mv).tolist() == [0, 1]
    with pytest.raises(ValueError, match="extractor"):
        MajorityVote(None)


def test_answer_extractors():
    assert answer_extractor("last-number")("so 3 then -1,234.50 dollars") == "-1234.5"
    assert answer_extractor("gsm8k")("... 12 apples #### 1,000") == "1000"
    assert answer_extractor("gsm8k")("no marker 4.0") == "4"
    assert answer_extractor(r"answer is (\w+)")("the answer is B. no, the answer is C") == "C"
    assert answer_extractor("last-number")("none") is None
    with pytest.raises(ValueError, match="regular expression"):
        answer_extractor("(")
    with pytest.raises(ValueError, match="required"):
        answer_extractor(None)


def _byte():
    from iclr25.core.lm import byte_tokenizer

    return byte_tokenizer(padding_side="left")


# losses -------------------------------------------------------------------------------------------
def test_losses_validate_hyperparameters():
    t = torch.zeros(3)
    for bad in (0.0, -0.5, float("nan")):
        with pytest.raises(ValueError, match="beta"):
            sharpening_regression_loss(t, t, t, t, bad)
    with pytest.raises(ValueError, match="alpha"):
        xpo_loss(t, t, t, t, 0.5, -0.1)
    with pytest.raises(ValueError, match="shape"):
        sharpening_regression_loss(t, torch.zeros(2), t, t, 0.5)


def test_xpo_loss_is_optimism_plus_regression():
    g = torch.Generator().manual_seed(0)
    a, b, c, d = (torch.randn(5, generator=g) for _ in range(4))
    want = 0.3 * b.mean() + sharpening_regression_loss(a, b, c, d, 0.5)
    assert float(xpo_loss(a, b, c, d, 0.5, 0.3)) == pytest.approx(float(want))
    assert float(xpo_loss(a, b, c, d, 0.5, 0.0)) == pytest.approx(float(sharpening_regression_loss(a, b, c, d, 0.5)))


def test_configs_validate():
    with pytest.raises(ValueError, match="n must"):
        SFTConfig(n=0)
    with pytest.raises(ValueError, match="delta"):
        SFTConfig(adaptive_delta=1.5)
    with pytest.raises(ValueError, match="beta"):
        RLHFConfig(beta=0)
    with pytest.raises(ValueError, match="alpha"):
        RLHFConfig(alpha=-1)
    with pytest.raises(ValueError, match="lr"):
        TrainConfig(lr=float("inf"))
    with pytest.raises(ValueError, match="delta"):
        adaptive_sample_count(np.zeros(3), delta=0.0)


# training -----------------------------------------------------------------------------------------
def _sft_cfg(**kw):
    t = dict(epochs=2, lr=2e-3, batch_size=8, lora_r=0, max_grad_norm=1.0, seed=0)
    t.update(kw)
    return SFTConfig(n=4, max_new_tokens=4, sample_batch_size=256, train=TrainConfig(**t))


def test_sft_sharpen_raises_the_likelihood_of_its_targets(tiny_lm):
    model, tok = tiny_lm
    torch.manual_seed(0)
    prompts = TASK.prompts(TASK.pairs()[::97])
    res = sft_sharpen(model, tok, prompts, _sft_cfg(epochs=4))
    assert res.history[-1]["loss"] < res.history[0]["loss"]
    assert all(p1.data_ptr() != p2.data_ptr() for p1, p2 in zip(model.parameters(), res.model.parameters()))
    assert res.stats["samples_total"] == 4 * len(prompts)


def test_sft_adaptive_rule_draws_until_the_stop(tiny_lm):
    model, tok = tiny_lm
    torch.manual_seed(0)
    cfg = SFTConfig(n=4, adaptive_delta=0.5, max_n=12, adaptive_round=3, max_new_tokens=4, sample_batch_size=256,
                    train=TrainConfig(epochs=1, lr=1e-3, batch_size=8, lora_r=0))
    res = sft_sharpen(model, tok, TASK.prompts(TASK.pairs()[:6]), cfg)
    mu = np.log(2 / 0.5)
    for e in res.corpus:
        assert 1 <= e["samples"] <= 12
        if e["samples"] < 12:
            assert e["samples"] * np.exp(e["score"]) >= mu - 1e-9   # stopped: k * best >= mu


def test_sft_resume_reuses_the_corpus_and_checks_the_config(tiny_lm, tmp_path):
    model, tok = tiny_lm
    prompts = TASK.prompts(TASK.pairs()[::131])
    torch.manual_seed(0)
    first = sft_sharpen(model, tok, prompts, _sft_cfg(), out_dir=tmp_path)
    assert (tmp_path / "checkpoint" / "policy.safetensors").is_file() and (tmp_path / "corpus.jsonl").is_file()
    with pytest.raises(ValueError, match="other settings"):
        sft_sharpen(model, tok, prompts, _sft_cfg(lr=1e-2), out_dir=tmp_path, resume=True)
    torch.manual_seed(123)                                            # resampling would give another corpus
    again = sft_sharpen(model, tok, prompts, _sft_cfg(), out_dir=tmp_path, resume=True)
    assert again.corpus == first.corpus and again.history == []      # finished: nothing left to train
    for p, q in zip(first.model.parameters(), again.model.parameters()):
        torch.testing.assert_close(p, q)
    with pytest.raises(FileNotFoundError, match="run without --resume"):
        sft_sharpen(model, tok, prompts, _sft_cfg(), out_dir=tmp_path / "empty", resume=True)


def test_resume_restores_weights_optimiser_and_data_order_exactly(tiny_lm, tmp_path):
    """Two steps, checkpoint, two more == four steps straight (PolicyTrainer)."""
    from iclr25.sharpening.sft import collate_examples, sft_loss
    from iclr25.sharpening.training import PolicyTrainer

    model, tok = tiny_lm
    ex = [{"prompt_ids": list(b"12+34="), "response_ids": [52, 54, 256]},
          {"prompt_ids": list(b"7+1="), "response_ids": [56, 256]}] * 4

    def loss_fn(m, idx):
        return sft_loss(m, *collate_examples([ex[i] for i in idx.tolist()], 257)), {}

    cfg = TrainConfig(epochs=2, lr=1e-2, batch_size=3, lora_r=0, max_grad_norm=1.0, seed=3)
    a = PolicyTrainer(copy.deepcopy(model), loss_fn, len(ex), cfg)
    ha = a.fit(progress=False)
    b = PolicyTrainer(copy.deepcopy(model), loss_fn, len(ex), cfg)
    b.fit(progress=False, max_steps=2)
    b.save_checkpoint(tmp_path / "ck")
    c = PolicyTrainer(copy.deepcopy(model), loss_fn, len(ex), cfg)
    c.load_checkpoint(tmp_path / "ck")
    hc = c.fit(progress=False)
    assert [h["loss"] for h in hc] == pytest.approx([h["loss"] for h in ha[2:]], rel=1e-5)
    for p, q in zip(a.model.parameters(), c.model.parameters()):
        torch.testing.assert_close(p, q)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        c.load_checkpoint(tmp_path / "missing")


def test_rlhf_offline_and_xpo_run_and_report_identical_pairs(tiny_lm, tmp_path):
    model, tok = tiny_lm
    torch.manual_seed(0)
    prompts = TASK.prompts(TASK.pairs()[::101])
    tr = TrainConfig(epochs=2, lr=1e-3, batch_size=8, lora_r=0, max_grad_norm=1.0)
    r = rlhf_sharpen(model, tok, prompts, RLHFConfig(beta=0.5, max_new_tokens=4, sample_batch_size=256, train=tr))
    assert 0 <= r.stats["identical_pair_share"] <= 1 and r.stats["samples_drawn"] == 2 * len(prompts)
    assert r.history[-1]["loss"] <= r.history[0]["loss"] * 1.5
    cfg = RLHFConfig(beta=0.5, algo="xpo", alpha=0.1, iterations=2, prompts_per_iteration=4, steps_per_iteration=2,
                     max_new_tokens=4, sample_batch_size=256, train=tr)
    seen = []
    x = rlhf_sharpen(model, tok, prompts, cfg, val_prompts=prompts[:3], out_dir=tmp_path / "x",
                     on_iteration=lambda t, pol, m: seen.append((t, m)))
    assert seen == [(1, 8), (2, 16)] and len(x.pairs) == 8
    assert 0 <= x.stats["best_iteration"] <= 2
    # resume after the last iteration is a no-op continuation that keeps the data set
    y = rlhf_sharpen(model, tok, prompts, cfg, val_prompts=prompts[:3], out_dir=tmp_path / "x", resume=True)
    assert len(y.pairs) == 8
    # a crash after an iteration's pairs were appended but before its checkpoint: resume drops those pairs
    pf = tmp_path / "x" / "pairs.jsonl"
    lines = pf.read_text().splitlines(keepends=True)
    pf.write_text("".join(lines + lines[:3]))
    z = rlhf_sharpen(model, tok, prompts, cfg, val_prompts=prompts[:3], out_dir=tmp_path / "x", resume=True)
    assert len(z.pairs) == 8 and pf.read_text() == "".join(lines)
    pf.write_text("".join(lines[:5]))                   # fewer pairs than the checkpoint saw: truncated
    with pytest.raises(ValueError, match=r"pairs\.jsonl has 5 pairs but the checkpoint .* after 8.*truncated"):
        rlhf_sharpen(model, tok, prompts, cfg, val_prompts=prompts[:3], out_dir=tmp_path / "x", resume=True)


def test_lora_adapter_trains_saves_and_resumes(tiny_lm, tmp_path):
    pytest.importorskip("peft")
    from peft import PeftModel

    from iclr25.sharpening.training import save_policy

    model, tok = tiny_lm
    torch.manual_seed(0)
    prompts = TASK.prompts(TASK.pairs()[::211])
    cfg = _sft_cfg(lora_r=4, epochs=1)
    res = sft_sharpen(model, tok, prompts, cfg, out_dir=tmp_path / "run")
    assert isinstance(res.model, PeftModel)
    trainable = [n for n, p in res.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora" in n for n in trainable)
    d = save_policy(res.model, tok, tmp_path / "adapter")
    assert (d / "adapter_config.json").is_file() and (d / "adapter_model.safetensors").is_file()
    again = PeftModel.from_pretrained(copy.deepcopy(model), d)
    x = torch.tensor([list(b"12+34=46")])
    torch.testing.assert_close(again(input_ids=x).logits, res.model(input_ids=x).logits)
    res2 = sft_sharpen(model, tok, prompts, cfg, out_dir=tmp_path / "run", resume=True)   # finished: no new steps
    assert res2.history == []


# input files and models -------------------------------------------------------------------------
def test_prompt_file_errors(tmp_path):
    from iclr25.sharpening.commands import read_prompt_file

    p = tmp_path / "p.jsonl"
    p.write_text('{"prompt": "a", "answer": 1}\n{"prompt": "b", "answer": "2"}\n')
    assert read_prompt_file(p) == (["a", "b"], ["1", "2"], None)
    p.write_text('{"prompt": "a"}\n{"prompt": "b"\n')
    with pytest.raises(ValueError, match=r"p.jsonl:2"):
        read_prompt_file(p)
    p.write_text('{"prompt": "a"}\n{"question": "b"}\n')
    with pytest.raises(ValueError, match=r"2.*prompt"):
        read_prompt_file(p)
    p.write_text('{"prompt": "a"}\n{"prompt": "  "}\n')
    with pytest.raises(ValueError, match="prompt"):
        read_prompt_file(p)
    p.write_text('{"prompt": "a", "answer": 1}\n{"prompt": "b"}\n')
    with pytest.raises(ValueError, match="answer"):
        read_prompt_file(p)
    with pytest.raises(FileNotFoundError):
        read_prompt_file(tmp_path / "none.jsonl")


def test_model_loading_errors(tmp_path, tiny_model_dir):
    from transformers import DistilBertConfig, DistilBertModel

    from iclr25.core.lm import ModelNotFoundError, load_causal_lm

    with pytest.raises(ModelNotFoundError):
        load_causal_lm(str(tmp_path / "nope"))
    headless = tmp_path / "headless"
    DistilBertModel(DistilBertConfig(vocab_size=50, dim=16, n_layers=1, n_heads=2, hidden_dim=32)).save_pretrained(headless)
    with pytest.raises(ValueError, match="causal"):
        load_causal_lm(str(headless))
    m, t = load_causal_lm(str(tiny_model_dir), padding_side="left")
    assert t.padding_side == "left" and hasattr(m, "generate")
