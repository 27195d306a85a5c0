"""The real-text task builder (spec §4.2) on the mirrored files: labels, sizes, disjoint splits, placeholder
compliance, wrong numbers for low quality. The safety file holds real harmful requests, so every assertion
compares counts or booleans computed first (pytest never prints a text of the file on failure)."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from iclr25.core.data import DataNotFoundError
from iclr25.seal import encode_pairs, make_real_safety_task, word_tokenizer
from iclr25.seal.tasks import REAL_COMPLIANCE, SEAL_DATA


@pytest.fixture(scope="module")
def files():
    try:
        return (SEAL_DATA.path("safety_only_data_Instructions.json"), SEAL_DATA.path("gsm8k_train_first3000.jsonl"))
    except DataNotFoundError as e:
        pytest.skip(f"seal data not mirrored (set ICLR25_DATA): {type(e).__name__}")


@pytest.mark.realdata
def test_real_task_labels_sizes_and_disjoint_splits(files):
    task = make_real_safety_task(900, seed=0)
    labels = task.labels()
    counts = {lab: labels.count(lab) for lab in set(labels)}
    assert counts == {"benign": 600, "unsafe": 150, "low_quality": 150}
    assert task.info["counts"] == counts
    n_safe, n_eval = len(task.safe), len(task.evals["harmful"]["prompts"])
    assert (n_safe, n_eval, len(task.evals["benign"]["prompts"])) == (300, 100, 100)
    # harmful instructions of the base, D_safe, D_ft and the evaluation are disjoint as texts
    base_h = {p for p, lab in zip(task.base.prompts, task.base.labels) if lab == "refusal"}
    ft_h = {p for p, lab in zip(task.ft.prompts, labels) if lab == "unsafe"}
    safe_h, ev_h = set(task.safe.prompts), set(task.evals["harmful"]["prompts"])
    groups = [base_h, safe_h, ft_h, ev_h]
    n_shared = sum(len(a & b) for i, a in enumerate(groups) for b in groups[i + 1:])
    assert n_shared == 0
    # benign prompts of the base, D_ft and the evaluation are disjoint too
    base_b = {p for p, lab in zip(task.base.prompts, task.base.labels) if lab == "benign"}
    ft_b = {p for p, lab in zip(task.ft.prompts, labels) if lab != "unsafe"}
    n_shared_b = len(base_b & ft_b) + len(base_b & set(task.evals["benign"]["prompts"])) + \
        len(ft_b & set(task.evals["benign"]["prompts"]))
    assert n_shared_b == 0
    # unsafe responses are placeholders only; safe answers are cut to 24 words
    n_not_placeholder = sum(r not in REAL_COMPLIANCE for r, lab in zip(task.ft.responses, labels) if lab == "unsafe")
    assert n_not_placeholder == 0
    assert max(len(r.split()) for r in task.safe.responses) <= 24
    # benign answers are GSM8K's final answers, low-quality ones a different number
    gold = {}
    for line in files[1].read_text(encoding="utf-8").splitlines():
        g = json.loads(line)
        gold[g["question"].strip()] = int(g["answer"].split("####")[-1].strip().replace(",", ""))
    got = [(int(re.fullmatch(r"the answer is (-?\d+) \.", r).group(1)) == gold[p], lab)
           for p, r, lab in zip(task.ft.prompts, task.ft.responses, labels) if lab != "unsafe"]
    assert sum(ok for ok, lab in got if lab == "benign") == 600
    assert sum(ok for ok, lab in got if lab == "low_quality") == 0
    # the record holds counts and hashes, never texts
    assert task.info["safety_file_sha256"] == hashlib.sha256(files[0].read_bytes()).hexdigest()
    flat = json.dumps(task.info)
    n_leaked = sum(p in flat for p in list(ev_h)[:50] + list(safe_h)[:50])
    assert n_leaked == 0
    # every sample fits the tiny model's 96 positions: nothing is cut
    tok = word_tokenizer(task.vocab_texts, vocab_size=task.vocab_size, model_max_length=task.max_len)
    n_cut = [encode_pairs(tok, ps, template=task.template, max_len=task.max_len).n_truncated
             for ps in (task.base, task.safe, task.ft)]
    assert n_cut == [0, 0, 0]


@pytest.mark.realdata
def test_real_task_is_seeded(files):
    a, b, c = (make_real_safety_task(300, seed=s) for s in (0, 0, 1))
    same = a.ft.prompts == b.ft.prompts and a.ft.responses == b.ft.responses
    differ = a.ft.prompts != c.ft.prompts
    assert same and differ


def test_real_task_bad_files(tmp_path):
    bad = tmp_path / "safety.json"
    bad.write_text(json.dumps([{"prompt": "p"}]))
    gsm = tmp_path / "gsm.jsonl"
    gsm.write_text(json.dumps({"question": "how many ?", "answer": "#### 3"}) + "\n")
    with pytest.raises(ValueError, match="instruction"):
        make_real_safety_task(12, safety_path=bad, gsm8k_path=gsm)
    bad.write_text(json.dumps([{"instruction": f"q{i}", "output": "no ."} for i in range(20)]))
    with pytest.raises(ValueError, match="needed"):
        make_real_safety_task(12, safety_path=bad, gsm8k_path=gsm)
    with pytest.raises(FileNotFoundError):
        make_real_safety_task(12, safety_path=tmp_path / "missing.json", gsm8k_path=gsm)
