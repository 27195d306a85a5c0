"""Known-answer tests of spec §6: closed forms, enumeration and reference libraries (scipy, core DPO)."""

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from iclr25.cream import (
    Sample,
    build_pairs,
    consistency_rates,
    cream_dpo_loss,
    dpo_reward,
    extract_gsm8k_answer,
    kendall_consistency,
    kendall_tau_b,
    ordinal_ranks,
    spearman_consistency,
)

stats = pytest.importorskip("scipy.stats")


# ---- 1. Kendall consistency ---------------------------------------------------------------------


def test_identical_rankings_give_one_and_reversed_give_zero():
    a = np.array([0.1, 0.5, 0.3, 0.9, -2.0])
    assert kendall_consistency(a, a * 3 + 1) == 1.0
    assert kendall_consistency(a, -a) == 0.0


def test_three_responses_one_swap_gives_two_thirds():
    assert kendall_consistency([1, 2, 3], [2, 1, 3]) == pytest.approx(2 / 3, abs=1e-15)


def test_five_responses_one_adjacent_swap_gives_0_9():
    assert kendall_consistency([1, 2, 3, 4, 5], [1, 2, 4, 3, 5]) == pytest.approx(0.9, abs=1e-15)


def test_agrees_with_scipy_kendalltau_on_tie_free_input():
    rng = np.random.default_rng(0)
    for n in (2, 3, 5, 8):
        a, b = rng.normal(size=(40, n)), rng.normal(size=(40, n))
        ours = kendall_consistency(a, b)
        ref = np.array([(stats.kendalltau(x, y).statistic + 1) / 2 for x, y in zip(a, b)])
        np.testing.assert_allclose(ours, ref, atol=1e-12)


def test_spearman_variant_matches_scipy():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(30, 6)), rng.normal(size=(30, 6))
    ref = np.array([(stats.spearmanr(x, y).statistic + 1) / 2 for x, y in zip(a, b)])
    np.testing.assert_allclose(spearman_consistency(a, b), ref, atol=1e-12)


# ---- 2. ordinal ties ---------------------------------------------------------------------------


def test_ordinal_ties_give_consistency_one_where_raw_kendalltau_is_nan():
    tied, inc = [0.5, 0.5, 0.5], [0.1, 0.2, 0.3]
    np.testing.assert_array_equal(ordinal_ranks(tied), [1, 2, 3])
    np.testing.assert_array_equal(ordinal_ranks(inc), [1, 2, 3])
    assert kendall_consistency(tied, inc) == 1.0
    import warnings

    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = stats.kendalltau(tied, inc).statistic
    assert math.isnan(raw)


def test_ordinal_ranks_match_scipy_rankdata_with_ties():
    rng = np.random.default_rng(2)
    x = rng.integers(0, 4, size=(50, 7)).astype(float)
    np.testing.assert_array_equal(ordinal_ranks(x), stats.rankdata(x, method="ordinal", axis=-1))


def test_tau_b_matches_scipy_with_ties():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, size=(60, 5)).astype(float)
    y = rng.integers(0, 3, size=(60, 5)).astype(float)
    ours = kendall_tau_b(x, y)
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = np.array([stats.kendalltau(a, b).statistic for a, b in zip(x, y)])
    np.testing.assert_allclose(ours, ref, atol=1e-12, equal_nan=True)


# ---- 3./4. the loss ----------------------------------------------------------------------------


def _rand_logps(n=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, generator=g, dtype=torch.float64) * 3 for _ in range(4)]


def test_loss_at_c1_equals_core_dpo_and_c0_equals_dpo_on_swapped_pairs():
    from iclr25.core.lm import dpo_loss

    pc, pr, rc, rr = _rand_logps()
    ours, h = cream_dpo_loss(pc, pr, rc, rr, 1.0, beta=0.1)
    core, _, _ = dpo_loss(pc, pr, rc, rr, beta=0.1)
    assert ours.item() == pytest.approx(core.item(), abs=1e-12)
    swapped, _, _ = dpo_loss(pr, pc, rr, rc, beta=0.1)
    assert cream_dpo_loss(pc, pr, rc, rr, 0.0, beta=0.1)[0].item() == pytest.approx(swapped.item(), abs=1e-12)
    np.testing.assert_allclose(h, 0.1 * ((pc - rc) - (pr - rr)), atol=1e-12)


@pytest.mark.parametrize("c", [0.55, 0.7, 0.9, 1.0])
def test_loss_equals_core_label_smoothing_for_scalar_c_above_half(c):
    from iclr25.core.lm import dpo_loss

    pc, pr, rc, rr = _rand_logps(seed=4)
    core, _, _ = dpo_loss(pc, pr, rc, rr, beta=0.2, label_smoothing=1 - c)
    ours, _ = cream_dpo_loss(pc, pr, rc, rr, torch.full((16,), c, dtype=torch.float64), beta=0.2)
    assert ours.item() == pytest.approx(core.item(), abs=1e-12)


def test_loss_at_half_and_zero_margin_is_log2_with_zero_gradient():
    z = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    zero = torch.zeros(1, dtype=torch.float64)
    loss, _ = cream_dpo_loss(z, zero, zero, zero, 0.5, beta=0.1)
    loss.backward()
    assert loss.item() == pytest.approx(math.log(2), abs=1e-15)
    assert z.grad.item() == 0.0


@pytest.mark.parametrize("c", [0.0, 0.3, 0.5, 0.77, 1.0])
@pytest.mark.parametrize("h0", [-3.0, -0.4, 0.0, 1.3, 5.0])
def test_gradient_in_h_is_sigmoid_minus_c(c, h0):
    beta = 0.1
    x = torch.tensor([h0 / beta], dtype=torch.float64, requires_grad=True)  # h = beta * x
    zero = torch.zeros(1, dtype=torch.float64)
    loss, h = cream_dpo_loss(x, zero, zero, zero, c, beta=beta)
    loss.backward()
    dL_dh = x.grad.item() / beta
    assert dL_dh == pytest.approx(1 / (1 + math.exp(-h0)) - c, abs=1e-7)
    assert h.item() == pytest.approx(h0, abs=1e-12)


@pytest.mark.parametrize("c", [0.6, 0.8, 0.95])
def test_minimiser_is_logit_c(c):
    from scipy.optimize import minimize_scalar

    zero = torch.zeros(1, dtype=torch.float64)

    def f(h):
        return cream_dpo_loss(torch.tensor([h], dtype=torch.float64), zero, zero, zero, c, beta=1.0)[0].item()

    res = minimize_scalar(f, bounds=(-10, 10), method="bounded", options={"xatol": 1e-10})
    assert res.x == pytest.approx(math.log(c / (1 - c)), abs=1e-4)


# ---- 5. pairs ----------------------------------------------------------------------------------


def test_pair_is_first_argmax_and_first_argmin():
    s = [Sample("p", "q", ("a", "b", "c", "d"))]
    (pair,) = build_pairs(s, {"p": [1, 3, 2, 3]})
    assert (pair.chosen_index, pair.rejected_index, pair.chosen, pair.rejected, pair.c) == (1, 0, "b", "a", 1.0)


def test_all_equal_rewards_give_no_pair():
    assert build_pairs([Sample("p", "q", ("a", "b", "c"))], {"p": [0.2, 0.2, 0.2]}) == []


def test_avg_mode_uses_the_mean_and_dyn_mode_fills_a_missing_c_with_it():
    s = [Sample(str(i), f"q{i}", ("a", "b", "c")) for i in range(4)]
    r = {str(i): [0.0, 1.0, 2.0] for i in range(4)}
    c = {"0": 0.2, "1": 0.6, "3": 1.0}  # prompt "2" has no C
    mean = (0.2 + 0.6 + 1.0) / 3
    assert [p.c for p in build_pairs(s, r, c, "avg")] == pytest.approx([mean] * 4)
    assert [p.c for p in build_pairs(s, r, c, "dyn")] == pytest.approx([0.2, 0.6, mean, 1.0])


def test_regression_c_stays_attached_to_its_prompt_when_prompts_are_skipped():
    """The official code zipped a shortened value list with the key set: after a skipped prompt every
    later C moved to the wrong prompt. Here C is keyed by prompt id."""
    rng = np.random.default_rng(5)
    cur = {f"p{i}": rng.normal(size=5).tolist() for i in range(8)}
    prev = {k: v for k, v in cur.items()}
    prev["p1"] = prev["p1"][:4]            # length mismatch -> skipped
    del prev["p4"]                          # missing -> skipped
    prev["p6"] = [-x for x in cur["p6"]]    # reversed -> C = 0
    rates = consistency_rates(cur, prev)
    assert set(rates) == {"p0", "p2", "p3", "p5", "p6", "p7"}
    assert rates["p6"] == 0.0 and all(rates[k] == 1.0 for k in ("p0", "p2", "p3", "p5", "p7"))
    s = [Sample(k, k, tuple("abcde")) for k in cur]
    pairs = {p.id: p.c for p in build_pairs(s, cur, rates, "dyn")}
    assert pairs["p6"] == 0.0 and pairs["p7"] == 1.0
    assert pairs["p1"] == pairs["p4"] == pytest.approx(np.mean(list(rates.values())))


def test_regression_fewer_than_two_valid_prompts_is_a_clear_error():
    cur = {"a": [1.0, 2.0], "b": [1.0, 2.0]}
    with pytest.raises(ValueError, match="at least 2 prompts"):
        consistency_rates(cur, {"a": [2.0, 1.0]})


# ---- 6./7. rewards and log-probs -----------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    torch.manual_seed(0)
    return tiny_causal_lm(n_layer=2, n_embd=32, n_head=2, seed=0).eval(), byte_tokenizer()


def test_reference_equal_to_policy_gives_zero_rewards_and_no_pairs(tiny):
    from iclr25.cream import encode_responses, score_responses

    model, tok = tiny
    s = [Sample("0", "2+2=", ("4", "5", "22")), Sample("1", "1+1=", ("2", "3", "11"))]
    enc = encode_responses(tok, [x.prompt for x in s for _ in x.responses], [r for x in s for r in x.responses])
    r = dpo_reward(model, model, enc.input_ids, enc.attention_mask, enc.response_mask)
    assert torch.equal(r, torch.zeros_like(r))
    lp = score_responses(model, tok, [x.prompt for x in s for _ in x.responses], [r for x in s for r in x.responses])
    rewards = {x.id: (lp - lp)[3 * i:3 * i + 3].tolist() for i, x in enumerate(s)}
    assert build_pairs(s, rewards) == []


def test_length_normalised_m0_reward_is_sum_over_response_token_count(tiny):
    from iclr25.cream import encode_responses

    model, tok = tiny
    enc = encode_responses(tok, ["ab", "abcd"], ["xyz", "q"])
    total = dpo_reward(model, None, enc.input_ids, enc.attention_mask, enc.response_mask)
    avg = dpo_reward(model, None, enc.input_ids, enc.attention_mask, enc.response_mask, average=True)
    n_tokens = torch.tensor([4.0, 2.0])  # 3 bytes + EOS, 1 byte + EOS
    torch.testing.assert_close(avg, total / n_tokens)


def _manual_logp(model, ids, start):
    """log p(ids[start:] | ids[:start]) by one forward per position (no padding at all)."""
    total = 0.0
    for t in range(start, len(ids)):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids[:t]])).logits[0, -1]
        total += torch.log_softmax(logits.double(), -1)[ids[t]].item()
    return total


@pytest.mark.parametrize("side", ["right", "left"])
def test_sequence_logprob_equals_a_manual_token_loop_and_ignores_prompt_and_padding(tiny, side):
    from iclr25.core.lm import tiny_causal_lm
    from iclr25.cream import encode_responses

    model = tiny_causal_lm(n_layer=2, n_embd=32, n_head=2, seed=1).eval()
    tok = tiny[1]
    prompts, resp = ["hello ", "a", "xyz+1="], ["world", "bcdefgh", "7"]
    enc = encode_responses(tok, prompts, resp)
    ids, am, rm = enc.input_ids, enc.attention_mask, enc.response_mask
    if side == "left":  # move the padding to the left
        L = am.sum(-1)
        W = ids.shape[1]
        for i in range(len(prompts)):
            n = int(L[i])
            ids[i] = torch.cat([torch.full((W - n,), tok.pad_token_id), ids[i, :n]])
            am[i] = torch.cat([torch.zeros(W - n, dtype=am.dtype), am[i, :n]])
            rm[i] = torch.cat([torch.zeros(W - n, dtype=rm.dtype), rm[i, :n]])
    got = dpo_reward(model, None, ids, am, rm)
    for i, (p, r) in enumerate(zip(prompts, resp)):
        p_ids = tok(p)["input_ids"]
        full = p_ids + tok(r, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        assert got[i].item() == pytest.approx(_manual_logp(model, full, len(p_ids)), abs=1e-4)
    # prompt tokens never count: changing the prompt's response_mask region would change nothing
    assert int(rm.sum()) == sum(len(r) + 1 for r in resp)


# ---- 8. GSM8K parser ---------------------------------------------------------------------------


def _gsm8k_test_file():
    for root in os.environ.get("ICLR25_DATA", "").split(os.pathsep):
        p = Path(root) / "cream" / "gsm8k_test.jsonl" if root else None
        if p is not None and p.is_file():
            return p
    pytest.skip("mirrored file cream/gsm8k_test.jsonl not found under ICLR25_DATA (set ICLR25_DATA=/path/to/data)")


@pytest.mark.realdata
def test_gsm8k_parser_on_the_mirrored_test_file():
    path = _gsm8k_test_file()
    lines = path.read_text(encoding="utf-8").splitlines()[:50]
    for line in lines:
        rec = json.loads(line)
        final = rec["answer"].split("####")[-1].strip().replace(",", "")
        assert extract_gsm8k_answer(rec["answer"]) == final
    assert extract_gsm8k_answer(json.loads(lines[0])["answer"]) == "18"
