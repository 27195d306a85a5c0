"""New-user trial (stop 37): what a first user ran from the README and how it broke, one test per finding."""

import re
import types
from pathlib import Path

import pytest

from iclr25.sharpening.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def _usage_block() -> str:
    text = README.read_text(encoding="utf-8")
    usage = text.split("## Usage", 1)[1]
    return re.search(r"```python\n(.*?)```", usage, re.S).group(1)


def test_readme_usage_example_runs_as_written(tiny_lm, monkeypatch, capsys):
    """The README's Usage block called best_of_n with its default max_new_tokens=64, which overruns the trap
    base's 32 positions: the first thing a new user ran ended in a ValueError. Run the block exactly as
    written, with the tiny test model (same 32-position context) standing in for the shipped base (the block
    itself, with the real base, runs in the fresh-venv test of tests/test_readme_install.py)."""
    import iclr25.sharpening.shipped as shipped_mod

    model, tok = tiny_lm
    monkeypatch.setattr(shipped_mod, "shipped_trap_base",
                        lambda *a, **k: types.SimpleNamespace(model=model, tokenizer=tok, info={"path": "test"}))
    exec(compile(_usage_block(), str(README), "exec"), {})
    out = capsys.readouterr().out
    assert "SharpnessReport(" in out and "coverage=" in out and "BoN@16 accuracy" in out and "tilted" in out


def _common(tiny_model_dir, prompts_file, out):
    return ["--model", str(tiny_model_dir), "--prompts", str(prompts_file), "--max-new-tokens", "4",
            "--out", str(out), "--threads", "1", "--quiet", "--lora-r", "0", "--batch-size", "2"]


def test_sft_resume_refuses_changed_corpus_settings(tiny_model_dir, prompts_file, tmp_path, capsys):
    """--resume compared only the optimiser settings: `--n`, `--num-prompts`, the prompt file (or its content)
    and the model were silently ignored (the saved corpus was reused) -- a run that says N=3 trained on N=2."""
    out = tmp_path / "sft"
    args = ["sft", *_common(tiny_model_dir, prompts_file, out), "--n", "2", "--epochs", "1", "--eval-samples", "1"]
    assert main(args) == 0
    assert (out / "run_settings.json").is_file()
    capsys.readouterr()
    assert main([*args, "--n", "3", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "n: 2 -> 3" in err and "start a new --out" in err and "Traceback" not in err
    assert main([*args, "--num-prompts", "2", "--resume"]) == 2
    assert "num_prompts: None -> 2" in capsys.readouterr().err
    good = prompts_file.read_bytes()
    prompts_file.write_text('{"prompt": "10+10=", "answer": 20}\n')
    assert main([*args, "--resume"]) == 2
    assert "prompts_sha256" in capsys.readouterr().err
    prompts_file.write_bytes(good)
    # what may change: the evaluation size, quietness, threads
    assert main([*args, "--eval-samples", "2", "--resume"]) == 0


def test_rlhf_resume_refuses_changed_beta(tiny_model_dir, prompts_file, tmp_path, capsys):
    """`rlhf --resume --beta 0.25` after a beta = 0.5 run silently continued Eq. (8) with the other beta (beta
    is no optimiser setting, so the trainer's check did not see it): two losses mixed in one model."""
    out = tmp_path / "r"
    args = ["rlhf", *_common(tiny_model_dir, prompts_file, out), "--epochs", "1"]
    assert main([*args, "--beta", "0.5"]) == 0
    capsys.readouterr()
    assert main([*args, "--beta", "0.25", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "beta: 0.5 -> 0.25" in err and "Traceback" not in err
    assert main([*args, "--beta", "0.5", "--resume"]) == 0


def test_resume_without_checkpoint_fails_before_loading(tmp_path, capsys):
    """--resume onto an empty --out is refused before the model loads (here the model does not even exist)."""
    rc = main(["sft", "--model", "/no/such/model", "--prompts", str(tmp_path / "p.jsonl"), "--out",
               str(tmp_path / "none"), "--resume", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "no checkpoint" in err and "run without --resume" in err


def test_bad_prompt_file_is_reported_before_the_base_loads(tmp_path, monkeypatch, capsys):
    """A malformed prompt file was read only after the model loaded: with the default trap base that is a
    minute (or its first-use pre-training, minutes) before 'FILE:2: invalid JSON'."""
    import iclr25.sharpening.shipped as shipped_mod

    def boom(*a, **k):
        raise AssertionError("the base was loaded before the prompt file was checked")

    monkeypatch.setattr(shipped_mod, "shipped_trap_base", boom)
    p = tmp_path / "bad.jsonl"
    p.write_text('{"prompt": "12+13="}\n{"prompt": "1+1=" "answer": 2}\n')
    assert main(["bon", "--prompts", str(p), "--max-new-tokens", "4", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:2" in err and "Traceback" not in err
    assert main(["bon", "--prompts", str(p.with_name("nope.jsonl")), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "does not exist" in capsys.readouterr().err
    p.write_text('{"prompt": "12+13=", "answer": 25}\n')
    assert main(["bon", "--prompts", str(p), "--answer-extractor", "(", "--out", str(tmp_path / "o"),
                 "--quiet"]) == 2
    assert "regular" in capsys.readouterr().err


def test_list_answer_is_refused_not_stringified(tmp_path):
    """`"answer": ["25"]` became the string "['25']": accuracy 0 on every line, silently."""
    from iclr25.sharpening.commands import read_prompt_file

    p = tmp_path / "a.jsonl"
    p.write_text('{"prompt": "12+13=", "answer": 25}\n{"prompt": "1+1=", "answer": ["2"]}\n')
    with pytest.raises(ValueError, match=r"a\.jsonl:2: 'answer' must be a string or a number"):
        read_prompt_file(p)
    p.write_text('{"prompt": "12+13=", "answer": true}\n')
    with pytest.raises(ValueError, match="'answer' must be"):
        read_prompt_file(p)
    p.write_text('{"prompt": "12+13=", "answer": 25}\n{"prompt": "1+1=", "answer": "2"}\n')
    assert read_prompt_file(p)[1] == ["25", "2"]


@pytest.mark.parametrize("args, msg", [
    (["sft", "--lora-alpha", "0"], "lora_alpha"),     # was silently replaced by 2 x rank (`alpha or 2 * r`)
    (["rlhf", "--lora-alpha", "-4"], "lora_alpha"),
    (["rlhf", "--alpha", "0.1"], "add --xpo"),        # was checked only after the model had loaded
    (["rlhf", "--beta", "nan"], "beta"),
    (["sft", "--lr", "inf"], "lr"),
    (["sft", "--adaptive-delta", "nan"], "adaptive_delta"),
    (["sft", "--lora-dropout", "nan"], "lora_dropout"),
])
def test_bad_hyperparameters_are_refused_up_front(args, msg, tmp_path, capsys):
    rc = main([*args, "--model", "/no/such/model", "--prompts", str(tmp_path / "p.jsonl"),
               "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and msg in err and "no such folder" not in err and "Traceback" not in err


def test_train_config_refuses_non_positive_lora_alpha():
    from iclr25.sharpening.training import TrainConfig

    with pytest.raises(ValueError, match="lora_alpha"):
        TrainConfig(lora_r=8, lora_alpha=0)
    assert TrainConfig(lora_r=8, lora_alpha=None).lora_alpha is None


def test_missing_model_is_still_a_clean_error(prompts_file, tmp_path, capsys):
    assert main(["bon", "--model", "/no/such/model", "--prompts", str(prompts_file), "--out", str(tmp_path / "o"),
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "no such folder" in err and "Traceback" not in err
