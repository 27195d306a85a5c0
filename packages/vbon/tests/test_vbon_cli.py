"""CLI: ``--help`` as a subprocess; error exits and a tiny bon-sample / train / --resume / evaluate run
in-process through ``cli.main`` (the same code path, without paying the import cost per call)."""

import json
import os
import subprocess
import sys

import pytest

from iclr25.vbon.cli import main


def _run(args, timeout=300):
    return subprocess.run([sys.executable, "-m", "iclr25.vbon", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


def test_help_lists_subcommands():
    r = _run(["--help"])
    assert r.returncode == 0
    for cmd in ("bon-sample", "train", "evaluate", "reproduce"):
        assert cmd in r.stdout



def test_train_help_in_process(capsys):
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--vbon.n" in out and "--resume" in out and "--policy" in out and "--reward-model" in out
    for flag in ("--out", "--seed", "--device", "--threads", "--quiet"):  # core CommonOptions + SeedOption
        assert flag in out
    assert "--output-dir" not in out and "--vbon.seed" not in out


def test_version_and_common_options(capsys):
    from iclr25.core.config import CommonOptions, ReproduceOptions, SeedOption
    from iclr25.vbon import __version__
    from iclr25.vbon.cli import COMMANDS

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"iclr25-vbon {__version__}"
    for name, cmd in COMMANDS.items():
        assert issubclass(cmd.config, CommonOptions), name
        assert issubclass(cmd.config, ReproduceOptions if name == "reproduce" else SeedOption), name
    assert main(["reproduce", "--help"]) == 0 and "--quick" in capsys.readouterr().out


def test_default_out_and_deprecated_flags(tmp_path, monkeypatch):
    from iclr25.core.config import _apply_common, parse_config
    from iclr25.vbon.cli import COMMANDS
    from iclr25.vbon.config import TrainArgs

    cfg = _apply_common("iclr25-vbon", "train", parse_config(TrainArgs, []))
    assert cfg.out == __import__("pathlib").Path("runs/vbon/train")
    rep = _apply_common("iclr25-vbon", "reproduce", parse_config(COMMANDS["reproduce"].config, ["--quick"]))
    assert rep.out == __import__("pathlib").Path("results/vbon") and rep.quick
    monkeypatch.chdir(tmp_path)
    with pytest.warns(FutureWarning, match="--out"):  # the old flag still works for one release
        assert main(["train", "--output-dir", str(tmp_path / "x"), "--resume"]) == 2


def test_bad_input_exits_2(tmp_path, capsys):
    assert main(["train", "--vbon.n", "1", "--out", str(tmp_path)]) == 2
    assert "n must be >= 2" in capsys.readouterr().err
    assert main(["train", "--resume", "--out", str(tmp_path / "none")]) == 2
    assert "no checkpoint" in capsys.readouterr().err
    assert main(["train", "--device", "gpu0", "--out", str(tmp_path)]) == 2
    assert "device" in capsys.readouterr().err
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    assert main(["bon-sample", "--prompts-file", str(empty)]) == 2
    assert "empty" in capsys.readouterr().err
    for i, (line, msg) in enumerate([('{"prompt": ""}', "empty 'prompt'"), ('{"prompt": "  "}', "empty 'prompt'"),
                                      ('{"prompt": null}', "must be a string"), ('{"prompt": 3}', "must be a string")]):
        bad = tmp_path / f"bad{i}.jsonl"
        bad.write_text('{"prompt": "the movie"}\n' + line + "\n")
        # a blank prompt was an IndexError traceback inside generate; null/3 became the prompts "None"/"3"
        assert main(["bon-sample", "--prompts-file", str(bad)]) == 2
        assert f"{bad}:2: " in (err := capsys.readouterr().err) and msg in err, err


@pytest.mark.realdata
def test_tiny_train_resume_evaluate(tiny_lm, data_dir, shared_cache, tmp_path, monkeypatch, capsys):
    model, tok = tiny_lm
    lm = tmp_path / "lm"
    model.save_pretrained(lm)
    tok.save_pretrained(lm)
    prompts = tmp_path / "p.txt"
    prompts.write_text("the movie is\na very\nthe plot and\ncast is a\n")
    monkeypatch.setenv("ICLR25_DATA", str(data_dir))
    monkeypatch.setenv("ICLR25_CACHE", str(shared_cache))
    common = ["--policy", str(lm), "--prompts-file", str(prompts)]
    assert main(["bon-sample", "--n", "4", "--max-new-tokens", "6", "--out", str(tmp_path / "b"), *common]) == 0
    rows = [json.loads(x) for x in (tmp_path / "b" / "bon_samples.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(row["best_reward"] == max(row["rewards"]) for row in rows)
    out = tmp_path / "run"
    base = ["train", "--out", str(out), "--vbon.m", "8", "--vbon.prompts-per-step", "2",
            "--vbon.samples-per-prompt", "2", "--vbon.max-new-tokens", "6", "--checkpoint-every", "1", "--quiet", *common]
    assert main([*base, "--vbon.steps", "2"]) == 0
    assert (out / "checkpoint" / "trainer_state.pt").is_file() and (out / "reward_cdf.jsonl").is_file()
    assert main([*base, "--vbon.steps", "3", "--resume"]) == 0
    assert json.loads((out / "results.json").read_text())["steps"] == 3
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out / "checkpoint"), "--num-prompts", "4", "--samples-per-prompt", "2",
                 "--max-new-tokens", "6", "--out", str(out), *common]) == 0
    ev = json.loads((out / "eval.json").read_text())
    assert 0 <= ev["win_rate"] <= 1 and capsys.readouterr().out.strip().splitlines()[-1].startswith("evaluate:")


@pytest.mark.realdata
def test_resume_refuses_changed_files_and_model_flags(tiny_lm, data_dir, shared_cache, tmp_path, monkeypatch, capsys):
    """``--resume`` with another ``--cdf-path``, another content of the prompts file (same count) or another
    model flag changes the objective: refused with exit 2 naming it, and ``config.json`` is left as it was (the
    checkpoint's own key holds only ``--vbon.*``, so these were accepted silently)."""
    model, tok = tiny_lm
    lm = tmp_path / "lm"
    model.save_pretrained(lm)
    tok.save_pretrained(lm)
    prompts = tmp_path / "p.txt"
    prompts.write_text("the movie is\na very\n")
    monkeypatch.setenv("ICLR25_DATA", str(data_dir))
    monkeypatch.setenv("ICLR25_CACHE", str(shared_cache))
    out = tmp_path / "run"
    base = ["train", "--out", str(out), "--policy", str(lm), "--prompts-file", str(prompts), "--vbon.m", "4",
            "--vbon.prompts-per-step", "2", "--vbon.samples-per-prompt", "2", "--vbon.max-new-tokens", "4",
            "--checkpoint-every", "1", "--quiet"]
    assert main([*base, "--vbon.steps", "1"]) == 0
    saved = (out / "config.json").read_text()
    weights = (out / "checkpoint" / "model.safetensors").read_bytes()
    capsys.readouterr()
    assert main([*base, "--vbon.steps", "1"]) == 2  # a fresh run into it overwrote checkpoint and log silently
    assert "pass --resume" in capsys.readouterr().err
    assert (out / "checkpoint" / "model.safetensors").read_bytes() == weights
    other = tmp_path / "other_cdf.jsonl"
    other.write_text("".join(json.dumps({"prompt": p, "rewards": [0.0, 1.0, 2.0, 3.0]}) + "\n"
                             for p in ("the movie is", "a very")))
    capsys.readouterr()
    assert main([*base, "--vbon.steps", "2", "--resume", "--cdf-path", str(other)]) == 2
    err = capsys.readouterr().err
    assert "--cdf-path" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert main([*base, "--vbon.steps", "2", "--resume", "--reward-label", "NEGATIVE"]) == 2
    assert "--reward-label" in capsys.readouterr().err
    prompts.write_text("the plot and\ncast is a\n")  # same file, same count, other prompts
    assert main([*base, "--vbon.steps", "2", "--resume", "--cdf-path", str(other)]) == 2
    assert "prompts-sha256" in capsys.readouterr().err
    assert (out / "config.json").read_text() == saved
    prompts.write_text("the movie is\na very\n")
    assert main([*base, "--vbon.steps", "2", "--resume", "--threads", "1"]) == 0  # --vbon.steps/--threads may change
    assert json.loads((out / "results.json").read_text())["steps"] == 2


@pytest.mark.realdata
def test_prompts_file_is_used_whole_unless_num_prompts_given(tiny_lm, data_dir, shared_cache, tmp_path, monkeypatch,
                                                            capsys):
    """``--num-prompts`` (default 8 for bon-sample, 32 for train/evaluate) cut a ``--prompts-file`` silently: a
    10-prompt file gave 8 BoN rows. A file's prompts are now all used; an explicit ``--num-prompts`` takes its
    first N. Also: a non-UTF-8 file and a ``.json`` file (read as text lines) are errors naming the file."""
    model, tok = tiny_lm
    lm = tmp_path / "lm"
    model.save_pretrained(lm)
    tok.save_pretrained(lm)
    monkeypatch.setenv("ICLR25_DATA", str(data_dir))
    monkeypatch.setenv("ICLR25_CACHE", str(shared_cache))
    prompts = tmp_path / "p.txt"
    prompts.write_text("".join(f"the movie number {i} is\n" for i in range(10)))
    common = ["bon-sample", "--policy", str(lm), "--prompts-file", str(prompts), "--n", "2", "--max-new-tokens", "2",
              "--quiet"]
    assert main([*common, "--out", str(tmp_path / "all")]) == 0
    assert len((tmp_path / "all" / "bon_samples.jsonl").read_text().splitlines()) == 10
    assert main([*common, "--num-prompts", "3", "--out", str(tmp_path / "three")]) == 0
    assert len((tmp_path / "three" / "bon_samples.jsonl").read_text().splitlines()) == 3
    capsys.readouterr()
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("un film très beau\n".encode("latin-1"))
    as_json = tmp_path / "p.json"
    as_json.write_text('["the movie", "a film"]\n')
    for bad, msg in ((latin, "not UTF-8"), (as_json, ".jsonl")):
        assert main([*common, "--prompts-file", str(bad), "--out", str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err
        assert str(bad) in err and msg in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("name", ["quick", "paper-imdb"])
def test_yaml_presets_parse(name):
    from pathlib import Path

    from iclr25.core.config import config_from_dict, load_config_file
    from iclr25.vbon.config import TrainArgs

    a = config_from_dict(TrainArgs, load_config_file(Path(__file__).parents[1] / "configs" / f"{name}.yaml"))
    assert a.vbon.kl_coef == pytest.approx(1 / (a.vbon.n - 1))


@pytest.mark.parametrize("cmd,flag,value,named", [
    ("train", "--vbon.lr", "nan", "--vbon.lr"),
    ("train", "--vbon.lr", "0", "--vbon.lr"),
    ("train", "--vbon.lr", "inf", "--vbon.lr"),
    ("train", "--vbon.lr", "2", "--vbon.lr"),
    ("train", "--vbon.clip", "0", "--vbon.clip"),
    ("train", "--vbon.clip", "1", "--vbon.clip"),
    ("train", "--vbon.clip", "nan", "--vbon.clip"),
    ("train", "--vbon.temperature", "0", "--vbon.temperature"),
    ("train", "--vbon.temperature", "-inf", "--vbon.temperature"),
    ("train", "--vbon.beta", "-0.1", "--vbon.beta"),
    ("train", "--vbon.beta", "nan", "--vbon.beta"),
    ("train", "--vbon.max-grad-norm", "0", "--vbon.max-grad-norm"),
    ("train", "--vbon.max-grad-norm", "inf", "--vbon.max-grad-norm"),
    ("train", "--vbon.steps", "-3", "--vbon.steps"),
    ("train", "--vbon.samples-per-prompt", "1", "--vbon.samples-per-prompt"),
    ("train", "--checkpoint-every", "-1", "--checkpoint-every"),
    ("train", "--save-every", "-1", "--checkpoint-every"),  # the deprecated alias still works
    ("train", "--num-prompts", "0", "--num-prompts"),
    ("bon-sample", "--temperature", "nan", "--temperature"),
    ("bon-sample", "--temperature", "0", "--temperature"),
    ("bon-sample", "--n", "0", "--n"),
    ("bon-sample", "--batch-size", "0", "--batch-size"),
    ("evaluate", "--max-new-tokens", "0", "--max-new-tokens"),
])
def test_bad_setting_names_the_flag(cmd, flag, value, named, tmp_path, capsys):
    assert main([cmd, flag, value, "--out", str(tmp_path)]) == 2
    raw = capsys.readouterr().err
    err = " ".join(raw.replace("│", " ").split())  # tyro may box and wrap the __post_init__ message
    assert named in err and "must be" in err and value in err and "Traceback" not in raw


def test_good_float_settings_accepted():
    from iclr25.vbon.config import VBoNConfig, check_float

    c = VBoNConfig(lr=1e-6, clip=0.999, temperature=0.7, beta=1e-3, max_grad_norm=10.0)
    assert c.kl_coef == pytest.approx(1 / 7)
    assert check_float(1.0, "x", low=0.0, high=1.0) == 1.0  # closed upper bound
    with pytest.raises(ValueError, match=r"x must be a finite number in \(0, 1\)"):
        check_float(1.0, "x", low=0.0, high=1.0, high_open=True)


def test_evaluate_refuses_checkpoint_of_another_policy(tiny_lm, tmp_path, capsys):
    """A checkpoint trained from --policy X evaluated against another reference was an IndexError traceback
    in the embedding; now exit 2 naming --policy."""
    from transformers import GPT2Config, GPT2LMHeadModel

    model, tok = tiny_lm
    model.save_pretrained(tmp_path / "ref")
    tok.save_pretrained(tmp_path / "ref")
    other = GPT2LMHeadModel(GPT2Config(vocab_size=model.config.vocab_size + 7, n_positions=32, n_embd=16,
                                       n_layer=1, n_head=2))
    other.save_pretrained(tmp_path / "ck")
    prompts = tmp_path / "p.txt"
    prompts.write_text("the movie is\n")
    assert main(["evaluate", "--checkpoint", str(tmp_path / "ck"), "--policy", str(tmp_path / "ref"),
                 "--prompts-file", str(prompts), "--num-prompts", "1", "--out", str(tmp_path / "e")]) == 2
    assert "pass the --policy it was trained from" in capsys.readouterr().err
