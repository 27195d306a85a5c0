"""Known-answer tests: every item of spec §6, each against an independent computation or the spec's value."""

import json
import math
from itertools import product
from pathlib import Path

import numpy as np
import pytest
import torch

from iclr25.sharpening import (
    LengthNormalizedLogLikelihood,
    LogLikelihood,
    TrapArithmeticTask,
    adaptive_mu,
    adaptive_sample_count,
    bon_output_law,
    bon_success_probability,
    coverage_coefficient,
    select_best,
    sharpening_regression_loss,
    tabular_greedy,
    tilted_optimum,
)

KAT = json.loads((Path(__file__).parent / "data" / "kat.json").read_text())


# §6.1 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("beta", ["1.0", "0.5", "0.1"])
def test_tilted_optimum_spec_values(beta):
    k = KAT["tilted_optimum"]
    got = tilted_optimum(np.log(k["base"]), float(beta))
    np.testing.assert_allclose(got, k["beta"][beta], rtol=k["rtol"], atol=k["atol"])
    # independent closed form: p^(1+1/beta) / sum
    p = np.array(k["base"]) ** (1 + 1 / float(beta))
    np.testing.assert_allclose(got, p / p.sum(), rtol=1e-12)


# §6.2 ------------------------------------------------------------------------------------------
def test_eq8_population_minimiser_is_the_tilted_optimum():
    k = KAT["eq8_minimiser"]
    pb = torch.tensor(k["base"], dtype=torch.float64)
    lb = pb.log()
    theta = torch.zeros(4, dtype=torch.float64, requires_grad=True)   # tabular softmax policy, starts uniform
    opt = torch.optim.Adam([theta], lr=0.05)
    ii, jj = torch.meshgrid(torch.arange(4), torch.arange(4), indexing="ij")
    ii, jj = ii.reshape(-1), jj.reshape(-1)
    w = pb[ii] * pb[jj]                                              # all ordered pairs, weight pi_base ⊗ pi_base
    for _ in range(k["steps"]):
        lp = torch.log_softmax(theta, 0)
        loss = sharpening_regression_loss(lp[ii], lp[jj], lb[ii], lb[jj], k["beta"], weights=w)
        opt.zero_grad()
        loss.backward()
        opt.step()
    got = torch.softmax(theta, 0).detach().numpy()
    np.testing.assert_allclose(got, k["expected"], atol=k["atol"])
    np.testing.assert_allclose(got, tilted_optimum(lb.numpy(), k["beta"]), atol=k["atol"])


def test_eq8_loss_matches_hand_computation():
    a, b, c, d = (torch.tensor([x]) for x in (-1.0, -2.0, -1.5, -1.2))
    beta = 0.5
    want = (beta * ((-1.0 + 1.5) - (-2.0 + 1.2)) - (-1.5 + 1.2)) ** 2
    assert float(sharpening_regression_loss(a, b, c, d, beta)) == pytest.approx(want)


# §6.3 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", ["2", "4", "8"])
def test_bon_output_law_spec_values(n):
    k = KAT["bon_law"]
    np.testing.assert_allclose(bon_output_law(np.array(k["base"]), int(n)), k["n"][n], rtol=k["rtol"], atol=k["atol"])


def test_bon_output_law_against_monte_carlo_through_select_best():
    """Draw N iid responses, score each by its log-likelihood, select with the package's tie rule."""
    p = np.array(KAT["bon_law"]["base"])
    rng = np.random.default_rng(0)
    trials, n = 200_000, 4
    draws = rng.choice(3, size=(trials, n), p=p)
    idx = select_best(np.log(p)[draws], n)
    hist = np.bincount(draws[np.arange(trials), idx], minlength=3) / trials
    law = bon_output_law(p, n)
    se = np.sqrt(law * (1 - law) / trials)
    assert np.all(np.abs(hist - law) <= 5 * se + 1e-12), (hist, law)


def test_bon_output_law_with_ties_sums_to_one_and_matches_monte_carlo():
    p = np.array([0.3, 0.3, 0.4])
    law = bon_output_law(p, 3)
    assert law.sum() == pytest.approx(1.0)
    rng = np.random.default_rng(1)
    draws = rng.choice(3, size=(100_000, 3), p=p)
    idx = select_best(np.log(p)[draws], 3)
    hist = np.bincount(draws[np.arange(len(draws)), idx], minlength=3) / len(draws)
    np.testing.assert_allclose(hist, law, atol=0.006)


# §6.4 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", KAT["coverage_probability"], ids=lambda c: f"p{c['p']}-n{c['n']}")
def test_coverage_probability(case):
    assert bon_success_probability(case["p"], case["n"]) == pytest.approx(case["expected"], abs=1e-6)
    # independent: enumerate all N-tuples of a 2-outcome space {y*, other}
    hits = sum(math.prod(case["p"] if t else 1 - case["p"] for t in tup)
               for tup in product((0, 1), repeat=case["n"]) if any(tup))
    assert hits == pytest.approx(case["expected"], abs=1e-6)


# §6.5 ------------------------------------------------------------------------------------------
def test_greedy_counterexample():
    joint = np.zeros((2, 3))
    joint[0] = 0.2          # first token A (0.6), three equally likely endings
    joint[1, 0] = 0.4       # first token B (0.4), one ending
    seq, prob = tabular_greedy(joint)
    assert seq[0] == 0 and prob == pytest.approx(KAT["greedy_counterexample"]["greedy_probability"])
    assert joint.max() == pytest.approx(KAT["greedy_counterexample"]["mode_probability"])
    assert np.unravel_index(joint.argmax(), joint.shape) == (1, 0)


def test_prop_3_1_greedy_finds_a_majority_mode_on_random_tabular_models():
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(400):
        V, H = rng.integers(2, 5), rng.integers(2, 4)
        shape = (V,) * H
        rest = rng.dirichlet(np.ones(V ** H) * 0.3).reshape(shape)
        m = rng.uniform(0.5, 0.95)                       # plant a sequence with mass m (> 1/2 after mixing)
        star = tuple(rng.integers(0, V, H))
        joint = (1 - m) * rest
        joint[star] += m
        if joint.max() <= 0.5:
            continue
        assert tabular_greedy(joint)[0] == np.unravel_index(joint.argmax(), shape)
        checked += 1
    assert checked > 300


def test_prop_3_1_threshold_is_tight():
    # mode mass exactly 1/2 can lose to greedy (ties broken towards the first token)
    joint = np.zeros((2, 2))
    joint[0, 0], joint[0, 1], joint[1, 0] = 0.25, 0.25, 0.5
    seq, prob = tabular_greedy(joint)
    assert seq != (1, 0) and prob == 0.25


# §6.6 ------------------------------------------------------------------------------------------
def test_trap_coverage_is_2_5_exactly():
    task = TrapArithmeticTask()
    assert task.coverage_coefficient == KAT["trap_ccov"]
    lp = task.log_distribution(task.pairs())
    assert coverage_coefficient(lp) == pytest.approx(KAT["trap_ccov"], rel=1e-12)


@pytest.mark.parametrize("beta", ["1.0", "0.5", "0.25"])
def test_trap_tilted_optimum_of_data_distribution(beta):
    task = TrapArithmeticTask()
    want = KAT["trap_tilted_correct"][beta]
    assert task.tilted_optimum_correct(float(beta)) == pytest.approx(want, abs=5e-5)
    pairs = task.pairs()[:7]
    t = tilted_optimum(task.log_distribution(pairs), float(beta))
    np.testing.assert_allclose(t[np.arange(7), task.correct_index(pairs)], want, atol=5e-5)


def test_trap_distribution_is_a_trap():
    task = TrapArithmeticTask()
    pairs = task.pairs()
    p = task.distribution(pairs)
    np.testing.assert_allclose(p.sum(1), 1.0)
    c = task.correct_index(pairs)
    assert np.all(p.argmax(1) == c)                                   # the sequence mode is correct
    first = p.reshape(-1, 10, 10).sum(2)                              # first-digit marginal
    assert np.all(first.argmax(1) != c // 10)                         # greedy's first digit is wrong
    assert np.all(p[np.arange(len(c)), c] == 0.4)


# §6.7 ------------------------------------------------------------------------------------------
def test_adaptive_stopping_rule():
    k = KAT["adaptive"]
    assert adaptive_mu(k["delta"]) == pytest.approx(k["mu"], abs=1e-6)
    lp = np.full(20, math.log(0.01))
    lp[0] = math.log(k["best_likelihood"])
    stop, stopped = adaptive_sample_count(lp, delta=k["delta"])
    assert stopped and stop == k["stop"]
    # independent: first k with k >= mu / best
    assert stop == math.ceil(k["mu"] / k["best_likelihood"])


def test_adaptive_rule_uses_the_running_maximum():
    lp = np.log([0.05, 0.1, 0.9, 0.2])     # best so far: .05, .1, .9 -> stop at k = 4? mu/0.9 = 3.33 -> k = 4
    stop, stopped = adaptive_sample_count(lp, mu=3.0)
    assert (stop, stopped) == (4, True)
    stop, stopped = adaptive_sample_count(np.log([0.01, 0.01]), mu=3.0)
    assert (stop, stopped) == (2, False)


# §6.8 ------------------------------------------------------------------------------------------
def test_length_normalisation_counts_eos(tiny_lm, trap_samples):
    model, tok = tiny_lm
    ll = LogLikelihood(model)(trap_samples).numpy()
    ln = LengthNormalizedLogLikelihood(model)(trap_samples).numpy()
    lengths = trap_samples.lengths.numpy()
    fin = trap_samples.finished.numpy()
    assert fin.all() and set(lengths.ravel()) == {1, 3}       # "7+1=" -> EOS at once; others: 2 digits + EOS
    np.testing.assert_allclose(ln, ll / lengths, rtol=1e-6)
    # independent per-token computation for one response
    b, j = map(int, np.argwhere(lengths == 3)[0])
    ids, am, rm = trap_samples.row(b, j)
    with torch.no_grad():
        logits = model(input_ids=ids[None]).logits[0]
    lp = torch.log_softmax(logits.double(), -1)
    pos = torch.nonzero(rm).squeeze(1)
    manual = sum(float(lp[t - 1, ids[t]]) for t in pos)
    assert ll[b, j] == pytest.approx(manual, abs=1e-4)
    assert len(pos) == lengths[b, j] == 3 and int(ids[-1]) == tok.eos_token_id


# §6.9 ------------------------------------------------------------------------------------------
def _generation_logprobs(model, tok, prompts, **kw):
    from iclr25.sharpening.exact import _pad_prompts

    P, Pm, pad = _pad_prompts(tok, prompts)
    torch.manual_seed(0)
    out = model.generate(input_ids=P, attention_mask=Pm, max_new_tokens=4, do_sample=True, pad_token_id=pad,
                         eos_token_id=tok.eos_token_id, output_scores=True, return_dict_in_generate=True, **kw)
    new = out.sequences[:, P.shape[1]:]
    steps = torch.stack([torch.log_softmax(s.double(), -1) for s in out.scores], 1)        # (B, T, V)
    tok_lp = steps.gather(-1, new[:, :steps.shape[1], None]).squeeze(-1)
    eos = new == tok.eos_token_id
    alive = torch.cumsum(eos.long(), 1) - eos.long() == 0                                 # up to first EOS
    gen = torch.where(alive, tok_lp, torch.zeros_like(tok_lp)).sum(1)   # -inf after EOS under top-k
    ids = torch.cat([P, new], 1)
    am = torch.cat([Pm, alive.long()], 1)
    rm = torch.cat([torch.zeros_like(Pm), alive.long()], 1)
    return gen, ids, am, rm


def test_forward_logprobs_equal_unwarped_generation_scores_and_differ_under_top_k(tiny_lm):
    from iclr25.sharpening.rewards import score_sequences

    model, tok = tiny_lm
    prompts = ["12+34=", "7+1=", "49+49="]          # mixed lengths: left padding must not shift positions
    gen, ids, am, rm = _generation_logprobs(model, tok, prompts, temperature=1.0, top_k=0, top_p=1.0)
    fwd = score_sequences(model, ids, am, rm)
    np.testing.assert_allclose(gen.numpy(), fwd.numpy(), atol=1e-4)
    gen_k, ids_k, am_k, rm_k = _generation_logprobs(model, tok, prompts, temperature=1.0, top_k=5)
    fwd_k = score_sequences(model, ids_k, am_k, rm_k)
    assert np.abs(gen_k.numpy() - fwd_k.numpy()).max() > 1e-2      # processed scores are not log pi
    gen_t, ids_t, am_t, rm_t = _generation_logprobs(model, tok, prompts, temperature=0.5, top_k=0)
    assert np.abs(gen_t.numpy() - score_sequences(model, ids_t, am_t, rm_t).numpy()).max() > 1e-2
