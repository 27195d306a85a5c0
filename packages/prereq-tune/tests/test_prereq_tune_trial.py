"""New-user trial (stop 37): the CLI chain train-knowledge -> train-skill -> evaluate / generate, broken on
purpose; one test per finding."""

from dataclasses import asdict

import pytest

from iclr25.prereq_tune.cli import main

TPL = "question : {question} answer :"
LORA = ["--r", "4", "--alpha", "8", "--lora-dropout", "0", "--max-length", "32", "--quiet", "--threads", "1"]


@pytest.fixture
def files(tmp_path, world, tok, base):
    from iclr25.core.jsonl import write_jsonl
    from iclr25.prereq_tune import knowledge_corpus, qa_items, skill_examples

    mdir = tmp_path / "m"
    base.save_pretrained(mdir)
    tok.save_pretrained(mdir)
    write_jsonl(tmp_path / "know.jsonl", [{"text": t, "version": v} for v in (1, 2)
                                          for t in knowledge_corpus(world, v)[:12]])
    write_jsonl(tmp_path / "skill.jsonl", [asdict(e) for e in skill_examples(world, "fictitious", [1, 2])][:8])
    write_jsonl(tmp_path / "qa.jsonl", [{"question": q.question, "answers": list(q.answers)}
                                        for q in qa_items(world, "fictitious", 2)][:4])
    return tmp_path


def _know(t, *extra):
    return ["train-knowledge", "--model", str(t / "m"), "--data", str(t / "know.jsonl"), "--out", str(t / "know"),
            "--epochs", "1", "--batch-size", "8", "--lr", "3e-3", *LORA, *extra]


def _skill(t, *extra):
    return ["train-skill", "--model", str(t / "m"), "--knowledge", str(t / "know" / "know_v1"),
            str(t / "know" / "know_v2"), "--data", str(t / "skill.jsonl"), "--out", str(t / "sk"), "--batch-size",
            "4", "--grad-accum", "1", "--lr", "3e-3", "--prompt-template", TPL, "--multi-version", *LORA, *extra]


def test_train_knowledge_resume_refuses_changed_settings(files, capsys):
    """`train-knowledge --resume --r 8 --lr 0.1` skipped the finished adapters as "already trained" and
    reported success, while config.json recorded r 8 / lr 0.1: the adapters on disk were trained otherwise."""
    t = files
    assert main(_know(t)) == 0
    capsys.readouterr()
    assert main([*_know(t), "--lr", "0.1", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "lr: 0.003 -> 0.1" in err and "start a new --out" in err and "Traceback" not in err
    assert main([*_know(t), "--r", "8", "--alpha", "16", "--resume"]) == 2
    assert "r: 4 -> 8" in capsys.readouterr().err
    (t / "know.jsonl").write_text((t / "know.jsonl").read_text().splitlines()[0] + "\n")
    assert main([*_know(t), "--resume"]) == 2
    assert "data_sha256" in capsys.readouterr().err


def test_train_skill_resume_refuses_changed_settings(files, capsys):
    """`train-skill --resume --lr 0.5` silently continued with the other learning rate (the checkpoint's
    fingerprint held the data and frozen tensors, not the optimiser or LoRA settings). --epochs may grow."""
    t = files
    assert main(_know(t)) == 0
    assert main([*_skill(t), "--epochs", "1"]) == 0
    capsys.readouterr()
    assert main([*_skill(t), "--epochs", "1", "--lr", "0.5", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "lr: 0.003 -> 0.5" in err and "Traceback" not in err
    assert main([*_skill(t), "--epochs", "1", "--no-multi-version", "--resume"]) == 2
    assert "multi_version: True -> False" in capsys.readouterr().err
    assert main([*_skill(t), "--epochs", "2", "--resume"]) == 0        # training on: allowed


def test_resume_without_checkpoint_is_refused_before_loading(tmp_path, capsys):
    rc = main(["train-skill", "--model", str(tmp_path / "nope"), "--data", str(tmp_path / "s.jsonl"),
               "--out", str(tmp_path / "o"), "--resume", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "no checkpoint" in err and "nope" not in err


@pytest.mark.parametrize("cmd, args, msg", [
    ("train-skill", ["--real-weight", "nan"], "real_weight"),
    ("train-skill", ["--alpha", "-1"], "alpha"),
    ("train-skill", ["--lr", "-1"], "lr"),
    ("train-knowledge", ["--epochs", "nan"], "epochs"),
    ("train-knowledge", ["--lora-dropout", "1.5"], "dropout"),
    ("train-knowledge", ["--warmup-ratio", "2"], "warmup_ratio"),
    ("train-knowledge", ["--r", "0"], "r=0"),
])
def test_hyperparameters_are_checked_before_the_model_loads(cmd, args, msg, tmp_path, capsys):
    """These were refused only after the model had loaded (minutes for an 8B model): here the model path does
    not exist, and the hyper-parameter error must come first."""
    (tmp_path / "d.jsonl").write_text('{"text": "a", "version": 1, "question": "q", "answer": "a"}\n')
    rc = main([cmd, "--model", str(tmp_path / "nope"), "--data", str(tmp_path / "d.jsonl"), "--out",
               str(tmp_path / "o"), "--quiet", *args])
    err = capsys.readouterr().err
    assert rc == 2 and msg in err and "nope" not in err and "Traceback" not in err


def test_tiny_vocabulary_refuses_unknown_words(tok, world):
    """--model tiny's word-level tokenizer maps any other word (capitals, 'born?') to <unk>: a user's own
    JSONL trained and evaluated on <unk> tokens, silently (accuracy 0, generations from <unk> prompts)."""
    from iclr25.prereq_tune import qa_items
    from iclr25.prereq_tune.cli import _check_tiny_vocab

    q = qa_items(world, "real_test")[0].question          # e.g. "where was vere memin born ?"
    assert q.startswith("where was ") and q.endswith(" born ?")
    user = "Where was " + q[len("where was "):-len(" born ?")] + " born?"
    _check_tiny_vocab(tok, [("row 1 'question'", q)], "qa.jsonl")
    with pytest.raises(ValueError, match=r"qa\.jsonl row 2 'question': \['Where', 'born\?'\] are not in the vocab"):
        _check_tiny_vocab(tok, [("row 1 'question'", q), ("row 2 'question'", user)], "qa.jsonl")


class _Evil:
    def __reduce__(self):
        import os

        return (os.system, ("echo pwned > /dev/null",))


def test_damaged_or_crafted_checkpoint_is_named(files, capsys):
    """A truncated trainer_state.json ended in a bare 'Unterminated string starting at: line 1 column 6266';
    a truncated adapter.safetensors / optim.pt in a safetensors / unpickling message. Each is now named with
    the fix; a crafted pickle in optim.pt is refused (weights_only=True) and never executed."""
    import pickle

    t = files
    assert main(_know(t)) == 0
    assert main([*_skill(t), "--epochs", "1"]) == 0
    last = t / "sk" / "checkpoints" / "skill" / "last"
    for name in ("trainer_state.json", "adapter.safetensors", "optim.pt"):
        f = last / name
        good = f.read_bytes()
        for bad in (good[: len(good) // 2], b""):
            f.write_bytes(bad)
            capsys.readouterr()
            assert main([*_skill(t), "--epochs", "2", "--resume"]) == 2, name
            err = capsys.readouterr().err
            assert name in err and "run without --resume" in err and "Traceback" not in err, (name, err)
        f.write_bytes(good)
    (last / "optim.pt").write_bytes(pickle.dumps(_Evil()))
    assert main([*_skill(t), "--epochs", "2", "--resume"]) == 2
    assert "optim.pt is damaged" in capsys.readouterr().err
