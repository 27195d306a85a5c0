"""Ragged reward-CDF caches: never cut to a common size (issue 28)."""

import json

import pytest
import torch

from iclr25.vbon import RewardCDFCache, empirical_log_cdf


def _write(path, groups):
    lines = [json.dumps({"prompt": p, "text": "t", "reward": v}) for p, vals in groups.items() for v in vals]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_from_jsonl_unequal_counts_raise_naming_prompt_and_count(tmp_path):
    p = _write(tmp_path / "c.jsonl", {"long prompt": [0.1, 0.5, 0.9, 1.3], "lonely one": [2.0]})
    with pytest.raises(ValueError, match=r"'lonely one' has 1 sample") as e:
        RewardCDFCache.from_jsonl(p)
    assert "ragged" in str(e.value)


def test_from_jsonl_ragged_keeps_every_prompts_own_m(tmp_path):
    groups = {"a": [0.1, 0.5, 0.9, 1.3], "b": [2.0], "c": [3.0, -1.0]}
    cache = RewardCDFCache.from_jsonl(_write(tmp_path / "c.jsonl", groups), ragged=True)
    assert cache.ragged and cache.counts.tolist() == [4, 1, 2] and cache.m == 4
    queries = {"a": 1.0, "b": 5.0, "c": 0.0}
    got = cache.log_cdf(list(queries), list(queries.values())).exp()
    # independent: (1 + #less) / (M_p + 1) per prompt, with its own M_p (nothing truncated)
    want = [(1 + sum(v < q for v in groups[k])) / (len(groups[k]) + 1) for k, q in queries.items()]
    assert got.tolist() == pytest.approx(want)
    # the same as a per-prompt rectangular cache of that prompt alone
    for k, q in queries.items():
        one = empirical_log_cdf(torch.tensor(sorted(groups[k])), torch.tensor([q]))
        assert float(one.exp()) == pytest.approx(float(cache.log_cdf([k], [q]).exp()))
    # plain smoothing uses M_p too; a round trip keeps the counts
    none = RewardCDFCache.from_jsonl(tmp_path / "c.jsonl", smoothing="none", ragged=True)
    assert none.log_cdf(["c"], [0.0]).exp().tolist() == pytest.approx([0.5])
    again = RewardCDFCache.from_jsonl(cache.to_jsonl(tmp_path / "r.jsonl"), ragged=True)
    assert again.counts.tolist() == [4, 1, 2] and torch.equal(again.sorted_rewards, cache.sorted_rewards)


def test_from_jsonl_max_m_caps_without_silent_common_size(tmp_path):
    p = _write(tmp_path / "c.jsonl", {"a": [0.0, 1.0, 2.0, 3.0], "b": [5.0, 4.0, 6.0]})
    assert RewardCDFCache.from_jsonl(p, max_m=3).counts.tolist() == [3, 3]
    with pytest.raises(ValueError, match="'b' has 3"):
        RewardCDFCache.from_jsonl(p, max_m=4)
    bad = tmp_path / "nan.jsonl"
    bad.write_text(json.dumps({"prompt": "a", "reward": float("nan")}) + "\n")
    with pytest.raises(ValueError, match="non-finite"):
        RewardCDFCache.from_jsonl(bad)


def test_from_jsonl_max_m_of_a_sorted_rewards_list_is_no_prefix(tmp_path, caplog):
    """Our own cache files (``to_jsonl``, ``train``'s reward_cdf.jsonl) hold each prompt's rewards sorted ascending.
    Capping one with ``max_m`` (``train --cdf-path FILE`` with the default ``--vbon.m 64`` < the file's M) kept the
    first ``max_m``: the *lowest* rewards, so F-hat of a median reward was 1 (every sample looked like the best).
    A sorted list is thinned to evenly spaced order statistics instead, with a warning."""
    rewards = torch.arange(8, dtype=torch.float64)[None, :]
    path = RewardCDFCache(["a"], rewards).to_jsonl(tmp_path / "sorted.jsonl")
    with caplog.at_level("WARNING"):
        capped = RewardCDFCache.from_jsonl(path, max_m=4)
    assert capped.counts.tolist() == [4]
    assert capped.sorted_rewards[0].tolist() == [1.0, 3.0, 5.0, 7.0]  # not [0, 1, 2, 3]
    assert float(capped.log_cdf(["a"], [3.5]).exp()) == pytest.approx(3 / 5)  # (1 + #less) / (M + 1), median
    assert "max_m=4" in caplog.text
    # a list in sampling order (the official files) keeps its first max_m, as before
    unsorted = _write(tmp_path / "u.jsonl", {"a": [5.0, 0.0, 7.0, 1.0, 2.0]})
    assert RewardCDFCache.from_jsonl(unsorted, max_m=3).sorted_rewards[0].tolist() == [0.0, 5.0, 7.0]
