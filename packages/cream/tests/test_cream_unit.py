"""Unit tests: config validation, file formats and their errors, pairs, generation, training stages."""

import json
import logging
import math

import numpy as np
import pytest
import torch

from iclr25.cream import CreamConfig, PreferencePair, Sample, TrainConfig, build_pairs, cream_dpo_loss
from iclr25.cream.data import (
    check_rewards_match,
    read_eval_data,
    read_pairs,
    read_prompts,
    read_rewards,
    read_samples,
    read_sft_data,
)


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# ---- config ----------------------------------------------------------------------------------


def test_paper_defaults():
    c = CreamConfig()
    assert (c.n_samples, c.temperature, c.top_p, c.beta, c.lr, c.epochs, c.iterations) == (5, 0.8, 0.95, 0.1, 1e-6, 1, 3)
    assert c.reward_reference == "base" and c.consistency_method == "kendall"
    assert (c.lora_r, c.lora_alpha, c.sft_epochs, c.sft_lr) == (32, 64, 5, 5e-6)


@pytest.mark.parametrize("kw, msg", [
    ({"n_samples": 1}, "n_samples"),
    ({"beta": 0.0}, "beta"),
    ({"beta": -1.0}, "beta"),
    ({"beta": float("nan")}, "beta"),
    ({"temperature": -0.1}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"lr": float("inf")}, "lr"),
    ({"method": "best"}, "method"),
    ({"reward_reference": "prev"}, "reward_reference"),
    ({"warmup_ratio": 2.0}, "warmup_ratio"),
])
def test_bad_hyperparameters_are_errors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        CreamConfig(**kw)


def test_train_config_checks_floats():
    with pytest.raises(ValueError, match="lora_dropout"):
        TrainConfig(lora_dropout=1.0)
    with pytest.raises(ValueError, match="max_grad_norm"):
        TrainConfig(max_grad_norm=-1.0)


def test_toy_preset_keeps_the_paper_beta_and_changes_the_scale():
    t = CreamConfig.toy()
    assert t.beta == 0.1 and t.lr == 5e-5 and t.batch_size == 32 and t.temperature == 1.0
    assert t.sft_train().lr == 5e-4 and t.dpo_train(round_index=2).seed == 2


# ---- files -----------------------------------------------------------------------------------


def test_malformed_jsonl_line_is_named(tmp_path):
    p = _write(tmp_path / "s.jsonl", [{"id": "a", "prompt": "x", "responses": ["1", "2"]}, "{not json"])
    with pytest.raises(ValueError, match=r"s\.jsonl:2: invalid JSON"):
        read_samples(p)


def test_missing_and_empty_fields(tmp_path):
    with pytest.raises(ValueError, match=r"missing field.*responses"):
        read_samples(_write(tmp_path / "a.jsonl", [{"id": "a", "prompt": "x"}]))
    with pytest.raises(ValueError, match="prompt"):
        read_samples(_write(tmp_path / "b.jsonl", [{"id": "a", "prompt": " ", "responses": ["1", "2"]}]))
    with pytest.raises(ValueError, match="response 1 is empty"):
        read_samples(_write(tmp_path / "c.jsonl", [{"id": "a", "prompt": "x", "responses": ["1", ""]}]))
    with pytest.raises(ValueError, match="response"):
        read_sft_data(_write(tmp_path / "d.jsonl", [{"prompt": "x", "response": ""}]))
    with pytest.raises(ValueError, match="empty"):
        read_prompts(_write(tmp_path / "e.jsonl", [{"prompt": ""}]))


def test_sample_with_fewer_than_two_responses(tmp_path):
    with pytest.raises(ValueError, match="at least 2 responses"):
        read_samples(_write(tmp_path / "s.jsonl", [{"id": "a", "prompt": "x", "responses": ["1"]}]))


def test_reward_and_sample_ids_must_match_naming_the_first_missing_id(tmp_path):
    s = read_samples(_write(tmp_path / "s.jsonl", [{"id": i, "prompt": "x", "responses": ["1", "2"]}
                                                   for i in ("a", "b", "c")]))
    r = read_rewards(_write(tmp_path / "r.jsonl", [{"id": "a", "rewards": [0, 1]}, {"id": "c", "rewards": [1, 0]}]))
    with pytest.raises(ValueError, match="sample id 'b'"):
        check_rewards_match(s, r, "r.jsonl")
    r2 = read_rewards(_write(tmp_path / "r2.jsonl", [{"id": i, "rewards": [0, 1, 2]} for i in ("a", "b", "c")]))
    with pytest.raises(ValueError, match="3 rewards for 2 responses"):
        check_rewards_match(s, r2, "r2.jsonl")


def test_rewards_must_be_finite_numbers(tmp_path):
    with pytest.raises(ValueError, match="finite numbers"):
        read_rewards(_write(tmp_path / "r.jsonl", [{"id": "a", "rewards": [0, "x"]}]))


@pytest.mark.parametrize("c", [-0.1, 1.5, "0.5", None])
def test_pairs_file_with_c_outside_unit_interval(tmp_path, c):
    p = _write(tmp_path / "p.jsonl", [{"prompt": "x", "chosen": "a", "rejected": "b", "c": 0.5},
                                      {"prompt": "x", "chosen": "a", "rejected": "b", "c": c}])
    with pytest.raises(ValueError, match=r"p\.jsonl:2: field 'c'"):
        read_pairs(p)


def test_eval_data_formats(tmp_path):
    g = read_eval_data(_write(tmp_path / "g.jsonl", [{"question": "q", "answer": "so #### 1,200"}]), "gsm8k")
    assert g[0].answer == "1200"
    m = read_eval_data(_write(tmp_path / "m.jsonl", [{"question": "q", "choices": ["x", "y", "z"], "answer": 2}]),
                       "choice")
    assert m[0].answer == "C"
    with pytest.raises(ValueError, match="not one of"):
        read_eval_data(_write(tmp_path / "b.jsonl", [{"question": "q", "choices": ["x", "y"], "answer": "D"}]), "choice")


# ---- pairs, loss -----------------------------------------------------------------------------


def test_identical_chosen_and_rejected_texts_are_dropped_and_counted(caplog):
    s = [Sample("a", "q", ("x", "x", "y")), Sample("b", "q", ("x", "y", "z"))]
    stats = {}
    with caplog.at_level(logging.INFO):
        pairs = build_pairs(s, {"a": [0.1, 0.3, 0.2], "b": [0, 1, 2]}, stats=stats)
    # sample a: argmax 1 ("x"), argmin 0 ("x") -> identical texts
    assert [p.id for p in pairs] == ["b"] and stats["n_identical"] == 1
    assert "identical" in caplog.text


def test_build_pairs_errors():
    s = [Sample("a", "q", ("x", "y"))]
    with pytest.raises(ValueError, match="sample id 'a'"):
        build_pairs(s, {})
    with pytest.raises(ValueError, match="3 rewards for 2"):
        build_pairs(s, {"a": [1, 2, 3]})
    with pytest.raises(ValueError, match="mode"):
        build_pairs(s, {"a": [1, 2]}, {"a": 0.5}, mode="set")


def test_loss_rejects_bad_c_and_beta():
    t = torch.zeros(2)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        cream_dpo_loss(t, t, t, t, torch.tensor([0.5, 1.2]))
    with pytest.raises(ValueError, match="beta"):
        cream_dpo_loss(t, t, t, t, 1.0, beta=0.0)
    with pytest.raises(ValueError, match="2 pairs"):
        cream_dpo_loss(t, t, t, t, torch.tensor([0.5, 0.5, 0.5]))


def test_per_pair_c_below_half_reverses_the_gradient():
    x = torch.zeros(2, requires_grad=True)
    z = torch.zeros(2)
    cream_dpo_loss(x, z, z, z, torch.tensor([1.0, 0.2]), beta=1.0, reduction="sum")[0].backward()
    assert x.grad[0] < 0 < x.grad[1]  # minimising: pair 0 pushes h up, pair 1 (c < 1/2) down


def test_pair_c_values_modes():
    from iclr25.cream import pair_c_values

    ps = [PreferencePair("q", "a", "b", c=0.2, c_avg=0.6), PreferencePair("q", "a", "b", c=0.8, c_avg=0.6)]
    assert pair_c_values(ps, "dyn") == [0.2, 0.8]
    assert pair_c_values(ps, "avg") == [0.6, 0.6]
    assert pair_c_values(ps, "srlm") == [1.0, 1.0]


# ---- consistency helpers ----------------------------------------------------------------------


def test_consistency_summary_needs_two_values():
    from iclr25.cream import consistency_summary

    with pytest.raises(ValueError, match="at least 2"):
        consistency_summary({"a": 0.5})
    s = consistency_summary({"a": 0.5, "b": 1.0})
    assert s["mean"] == 0.75 and s["std"] == pytest.approx(math.sqrt(0.125))


def test_non_finite_scores_are_rejected():
    from iclr25.cream import kendall_consistency

    with pytest.raises(ValueError, match="NaN"):
        kendall_consistency([0.1, float("nan")], [0.1, 0.2])


# ---- toy task --------------------------------------------------------------------------------


def test_addition_task_splits_and_utility():
    from iclr25.cream import AdditionTask

    t = AdditionTask(seed=3)
    test, seeds, parts = t.test_prompts, t.seed_prompts, t.unlabeled_splits()
    assert len(test) == 200 and len(seeds) == 120 and [len(p) for p in parts] == [194, 193, 193]
    allp = test + seeds + [p for part in parts for p in part]
    assert len(set(allp)) == 900
    np.testing.assert_array_equal(t.utility("07+12=", ["19", "21", "x9", "9"]), [0, -2, -100, -100])
    corpus = t.noisy_corpus()
    assert len(corpus) == 5400
    right = np.mean([r == t.answer(*t.operands(p)) for p, r in corpus])
    assert 0.17 < right < 0.24  # p_correct 0.2 (+ U{-20..20} hitting 0)
    assert AdditionTask(seed=3).test_prompts == test and AdditionTask(seed=4).test_prompts != test


# ---- generation ------------------------------------------------------------------------------


class _Echo:
    name = "echo"

    def __init__(self, texts):
        self.texts = texts

    def generate(self, prompts, config=None):
        return [self.texts[i % len(self.texts)] for i in range(len(prompts))]


def test_sample_responses_shapes_and_empty_drops(caplog):
    from iclr25.core.lm import GenerationConfig
    from iclr25.cream import sample_responses

    out = sample_responses(_Echo(["a", "b", "c"]), ["p", "q"], 3, GenerationConfig())
    assert [s.responses for s in out] == [("a", "b", "c"), ("a", "b", "c")]
    with caplog.at_level(logging.WARNING):
        out = sample_responses(_Echo(["", " ", "x", "y"]), ["p", "q"], 2, GenerationConfig())
    assert [s.id for s in out] == ["1"] and "empty" in caplog.text
    with pytest.raises(ValueError, match="n must be >= 2"):
        sample_responses(_Echo(["a"]), ["p"], 1, GenerationConfig())


# ---- training stages --------------------------------------------------------------------------


@pytest.fixture()
def tiny():
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    return tiny_causal_lm(n_layer=1, n_embd=32, n_head=2, seed=0), byte_tokenizer()


def test_dpo_stage_raises_the_margin_and_srlm_grows_more_than_cream(tiny):
    import copy

    from iclr25.cream import train_dpo

    model, tok = tiny
    pairs = [PreferencePair(f"{i}+{i}=", str(2 * i), str(2 * i + 1)) for i in range(8)]
    cfg = TrainConfig(lr=5e-3, epochs=30, batch_size=8, lr_scheduler="constant", warmup_ratio=0.0, beta=0.5,
                      device="cpu")
    srlm = train_dpo(copy.deepcopy(model), tok, pairs, cfg, c=[1.0] * 8, progress=False)
    cream = train_dpo(copy.deepcopy(model), tok, pairs, cfg, c=[0.7] * 8, progress=False)
    assert srlm.ref_logps.shape == (8, 2)
    assert srlm.final_margin_mean > cream.final_margin_mean > 0
    assert cream.final_margin_mean < math.log(0.7 / 0.3) + 0.5 < srlm.final_margin_mean
    assert len(srlm.history) == 30


def test_dpo_drops_identical_pairs_and_refuses_an_empty_set(tiny):
    from iclr25.cream import train_dpo

    model, tok = tiny
    cfg = TrainConfig(lr=1e-3, device="cpu", batch_size=4)
    with pytest.raises(ValueError, match="no pairs"):
        train_dpo(model, tok, [PreferencePair("q", "a", "a")], cfg, progress=False)
    res = train_dpo(model, tok, [PreferencePair("q", "a", "a"), PreferencePair("q", "a", "b")], cfg, progress=False)
    assert res.n_dropped == 1 and res.n_examples == 1


def test_sft_lowers_the_loss(tiny):
    from iclr25.cream import train_sft

    model, tok = tiny
    data = [(f"{i}+1=", str(i + 1)) for i in range(8)]
    res = train_sft(model, tok, data, TrainConfig(lr=3e-3, epochs=15, batch_size=8, device="cpu",
                                                  lr_scheduler="constant", warmup_ratio=0.0), progress=False)
    assert res.history[-1]["loss"] < 0.7 * res.history[0]["loss"]


def test_lora_stage_computes_the_reference_with_the_adapter_disabled_and_merges(tiny):
    pytest.importorskip("peft")
    import copy

    from iclr25.cream import score_responses, train_dpo

    model, tok = tiny
    start = copy.deepcopy(model)
    pairs = [PreferencePair(f"{i}=", "ab", "cd") for i in range(4)]
    cfg = TrainConfig(lr=1e-2, epochs=5, batch_size=4, device="cpu", lora=True, lora_r=4, lora_alpha=8,
                      lora_target_modules="c_attn,c_proj,c_fc")
    res = train_dpo(copy.deepcopy(model), tok, pairs, cfg, progress=False)
    expect = torch.stack([score_responses(start, tok, [p.prompt for p in pairs], [p.chosen for p in pairs]),
                          score_responses(start, tok, [p.prompt for p in pairs], [p.rejected for p in pairs])], 1)
    torch.testing.assert_close(res.ref_logps, expect, atol=1e-5, rtol=0)
    assert not hasattr(res.model, "peft_config")  # merged back into a plain model
    assert res.final_margin_mean > 0


def test_resume_without_checkpoint_is_an_error(tiny, tmp_path):
    from iclr25.cream import train_sft

    model, tok = tiny
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train_sft(model, tok, [("a", "b")], TrainConfig(device="cpu"), out_dir=tmp_path, resume=True, progress=False)


def test_encode_responses_masks_only_the_response_and_eos(tiny):
    from iclr25.cream import encode_responses

    _, tok = tiny
    enc = encode_responses(tok, ["ab", "c"], ["xyz", "w"])
    assert enc.response_mask.tolist() == [[0, 0, 1, 1, 1, 1], [0, 1, 1, 0, 0, 0]]
    assert enc.attention_mask.tolist() == [[1] * 6, [1, 1, 1, 0, 0, 0]]
    assert enc.input_ids[0, -1].item() == tok.eos_token_id
    cut = encode_responses(tok, ["ab"], ["xyzuvw"], max_length=4)
    assert cut.n_truncated == 1 and cut.input_ids.shape[1] == 4
    with pytest.raises(ValueError, match="max_length"):
        encode_responses(tok, ["abcd"], ["x"], max_length=3)


def test_shipped_yaml_presets_parse():
    from pathlib import Path

    from iclr25.core.config import config_from_dict, load_config_file
    from iclr25.cream.config import LoopConfig

    root = Path(__file__).resolve().parents[1] / "configs"
    q = config_from_dict(LoopConfig, load_config_file(root / "quick.yaml"))
    assert q.task == "addition" and q.method == "dyn"
    p = config_from_dict(LoopConfig, {**load_config_file(root / "paper.yaml"), "model": "m0", "prompts": "p.jsonl",
                                      "sft_data": "s.jsonl"})
    assert (p.n_samples, p.beta, p.lr, p.lora_r) == (5, 0.1, 1e-6, 32)


def test_shipped_accelerate_configs():
    import yaml

    from iclr25.cream import accelerate_config_path, deepspeed_config_path

    ds = yaml.safe_load(accelerate_config_path("deepspeed_zero2").read_text())
    assert ds["distributed_type"] == "DEEPSPEED" and ds["deepspeed_config"]["zero_stage"] == 2
    assert json.loads(deepspeed_config_path().read_text())["zero_optimization"]["stage"] == 2
    assert yaml.safe_load(accelerate_config_path("multi_cpu").read_text())["num_processes"] == 2


def test_response_longer_than_model_context_is_truncated_not_an_index_error(caplog):
    """New-user trial: with the default max_length (None / 4096) a response longer than a 64-position model used
    to end in an IndexError inside the forward pass; now max_length is capped at the model's context and the
    response goes through the counted truncation, scoring exactly its first 64 - len(prompt) tokens."""
    import logging

    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm
    from iclr25.cream import score_responses
    from iclr25.cream.rewards import fit_max_length

    model, tok = tiny_causal_lm(n_layer=1, n_embd=32, n_head=2, n_positions=64, seed=0), byte_tokenizer()
    assert fit_max_length(model, 4096) == 64 and fit_max_length(model, 32) == 32 and fit_max_length(model, None) == 64
    with caplog.at_level(logging.WARNING):
        long = score_responses(model, tok, ["1+1="], ["2" * 200], max_length=4096)
    assert "truncated" in caplog.text and torch.isfinite(long).all()
    cut = score_responses(model, tok, ["1+1="], ["2" * 60], append_eos=False)  # 4 + 60 = 64 tokens, no EOS
    assert torch.allclose(long, cut, atol=1e-5)
