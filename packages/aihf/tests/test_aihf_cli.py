"""CLI tests: --help everywhere, --version, train/evaluate/demo, --resume exactness, bad input -> exit code 2."""

import json
import subprocess
import sys

import pytest
import torch

from iclr25.aihf.cli import main


def _code(fn, argv) -> int:
    try:
        return fn(argv)
    except SystemExit as e:
        return int(e.code or 0)


@pytest.mark.parametrize("sub", [None, "train", "evaluate", "reproduce", "demo"])
def test_help(sub, capsys):
    argv = ([sub] if sub else []) + ["--help"]
    assert _code(main, argv) == 0
    assert "usage" in capsys.readouterr().out.lower()


def test_version(capsys):
    from iclr25.aihf import __version__

    assert _code(main, ["--version"]) == 0
    assert f"iclr25-aihf {__version__}" in capsys.readouterr().out


def test_help_imports_nothing_heavy():
    code = ("import sys; from iclr25.aihf.cli import main\ntry: main(['train', '--help'])\nexcept SystemExit: pass\n"
            "bad = [m for m in ('torch', 'transformers', 'scipy', 'peft', 'accelerate') if m in sys.modules]\n"
            "sys.stderr.write(repr(bad)); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-500:]


def test_train_resume_is_exact_and_evaluate(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    common = ["--task", "bandit", "--n-pref", "10", "--quiet", "--pref-batch", "5", "--demo-batch", "64"]
    assert main(["train", *common, "--iters", "40", "--out", str(a)]) == 0
    assert main(["train", *common, "--iters", "20", "--out", str(b)]) == 0
    assert main(["train", *common, "--iters", "40", "--resume", "--out", str(b)]) == 0
    ca = torch.load(a / "checkpoint.pt", weights_only=True)
    cb = torch.load(b / "checkpoint.pt", weights_only=True)
    assert int(cb["iteration"]) == 40
    assert torch.allclose(ca["theta"], cb["theta"], atol=1e-12, rtol=0)
    assert torch.allclose(ca["log_pi"], cb["log_pi"], atol=1e-12, rtol=0)
    res = json.loads((a / "results.json").read_text())
    assert res["results"]["regret"] > 0 if "results" in res else res["regret"] > 0
    capsys.readouterr()
    assert main(["evaluate", "--run", str(a), "--out", str(tmp_path / "ev")]) == 0
    out = capsys.readouterr().out.strip().splitlines()[-1]
    assert out.startswith("aihf evaluate: bandit aihf: regret")
    ev = json.loads((tmp_path / "ev" / "eval.json").read_text())
    assert abs(ev["regret"] - (res.get("results", res))["regret"]) < 1e-12


def test_train_gridworld_and_baselines(tmp_path, capsys):
    for m in ("sft", "sft-rlhf", "rlhf"):
        assert main(["train", "--task", "gridworld", "--method", m, "--n-pref", "5", "--iters", "10",
                     "--policy-steps", "5", "--quiet", "--out", str(tmp_path / m)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert all("normalized_return" in ln for ln in lines)


def test_demo(capsys, tmp_path):
    assert main(["demo", "--quiet", "--out", str(tmp_path / "demo")]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("aihf demo: AIHF regret")


@pytest.mark.parametrize("argv, msg", [
    (["train", "--w", "1.5"], "w=1.5"),
    (["train", "--beta", "0"], "beta"),
    (["train", "--task", "tinylm", "--method", "sft-rlhf"], "not a tinylm method"),
    (["train", "--task", "text"], "--policy"),
    (["train", "--task", "text", "--policy", "/nonexistent/model", "--demos", "DEMOS", "--prefs", "PREFS"],
     "no such folder"),
    (["evaluate", "--run", "/nonexistent/run"], "not a train run folder"),
    # zero / negative counts used to train nothing silently (issue 22 review): each is an error naming its field
    (["train", "--iters", "0"], "iters must be an integer >= 1, got 0"),
    (["train", "--iters", "-5"], "iters must be an integer >= 1"),
    (["train", "--policy-steps", "-1"], "policy_steps must be an integer >= 0"),
    (["train", "--task", "tinylm", "--rounds", "0"], "rounds must be an integer >= 1"),
    (["train", "--task", "tinylm", "--epochs", "0"], "epochs must be an integer >= 1"),
    (["train", "--task", "tinylm", "--method", "sft", "--sft-epochs", "0"], "sft_epochs must be an integer >= 1"),
    (["train", "--n-pref", "-1"], "n_pref must be an integer >= 0"),
    (["train", "--n-demo", "0"], "n_demo must be an integer >= 1"),
    (["train", "--pref-batch", "0"], "pref_batch must be an integer >= 1"),
    (["train", "--checkpoint-every", "0"], "checkpoint_every"),
    (["train", "--task", "text", "--policy", "m", "--batch-size", "0"], "batch_size must be an integer >= 1"),
    (["train", "--task", "text", "--policy", "m", "--grad-accum", "0"], "grad_accum must be an integer >= 1"),
    (["train", "--task", "text", "--policy", "m", "--max-new-tokens", "0"], "max_new_tokens"),
    (["train", "--task", "text", "--policy", "m", "--lora-r", "-2"], "lora_r must be an integer >= 0"),
    (["train", "--n-pref", "0"], "needs preference pairs"),  # AIHF w = 0.5 with no pairs
    (["demo", "--n-pref", "0"], "n_pref must be an integer >= 1"),
])
def test_bad_input_exit_code_2(argv, msg, tmp_path, capsys):
    (tmp_path / "d.jsonl").write_text('{"prompt": "p", "response": "r"}\n')
    (tmp_path / "p.jsonl").write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\n')
    argv = [str(tmp_path / "d.jsonl") if x == "DEMOS" else str(tmp_path / "p.jsonl") if x == "PREFS" else x
            for x in argv]
    code = main([*argv, "--out", str(tmp_path / "o"), "--quiet"])
    assert code == 2
    assert msg in capsys.readouterr().err


def test_bad_jsonl_line_exit_code_2(tmp_path, capsys):
    # the data are read (and checked) before any model is loaded
    m = tmp_path / "no-model"
    (tmp_path / "d.jsonl").write_text('{"prompt": "p", "response": "r"}\n{"prompt": \n')
    (tmp_path / "p.jsonl").write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\n')
    code = main(["train", "--task", "text", "--policy", str(m), "--demos", str(tmp_path / "d.jsonl"), "--prefs",
                 str(tmp_path / "p.jsonl"), "--out", str(tmp_path / "o"), "--quiet"])
    assert code == 2
    assert "d.jsonl:2" in capsys.readouterr().err


def test_config_presets_parse():
    from pathlib import Path

    from iclr25.aihf.config import TrainConfig, preset_path
    from iclr25.core.config import load_config_file

    d = load_config_file(Path(preset_path("hh_pythia")))
    cfg = TrainConfig(**d)
    assert cfg.policy == "EleutherAI/pythia-1b-deduped" and cfg.reward_model == "EleutherAI/pythia-1.4b"


def test_resume_refuses_other_settings_and_corrupt_checkpoint(tmp_path, capsys):
    """New-user trial: --resume with another --w silently continued the old run's checkpoint under new settings,
    and a torn checkpoint.pt ended in a RuntimeError traceback; both are clean errors now."""
    out = tmp_path / "b"
    base = ["train", "--task", "bandit", "--quiet", "--out", str(out)]
    assert main([*base, "--iters", "20"]) == 0
    capsys.readouterr()
    assert main([*base, "--iters", "40", "--resume", "--w", "0.9"]) == 2
    err = capsys.readouterr().err
    assert "w=0.5 -> 0.9" in err and "Traceback" not in err
    assert main([*base, "--iters", "40", "--resume"]) == 0  # the horizon may change
    assert main([*base, "--iters", "20", "--resume"]) == 2  # fewer than done: an error, not a silent no-op
    assert "already at iteration 40" in capsys.readouterr().err
    ck = out / "checkpoint.pt"
    ck.write_bytes(ck.read_bytes()[:100])
    capsys.readouterr()
    assert main([*base, "--iters", "60", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "unreadable checkpoint" in err and "without --resume" in err


def test_packaged_presets_load_by_name():
    """Presets ship inside the package: `--config hh_pythia` resolves to the packaged file, the accelerate file has
    a path, an unknown name is an error naming the presets; an existing file of that name wins."""
    import yaml

    from iclr25.aihf.config import PRESETS, preset_path
    from iclr25.core.config import expand_presets

    argv = expand_presets(["--config", "hh_pythia", "--w", "0.3"], PRESETS, preset_path)
    assert argv[1] == str(preset_path("hh_pythia")) and argv[2:] == ["--w", "0.3"]
    assert yaml.safe_load(open(argv[1]))["task"] == "text"
    assert expand_presets(["--config=hh_pythia"], PRESETS, preset_path)[0] == f"--config={preset_path('hh_pythia')}"
    assert all(preset_path(n).is_file() for n in PRESETS)
    with pytest.raises(ValueError, match="packaged presets"):
        preset_path("nope")


@pytest.mark.parametrize("flag", [["--config", "hh_pythiaa"], ["--config=hh_pythiaa"]])
def test_unknown_preset_name_on_the_command_line_lists_the_presets(flag, capsys):
    """`--config hh_pythiaa` (a typo) said only "config file hh_pythiaa does not exist", not which presets exist."""
    assert main(["train", *flag]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "hh_pythiaa: no such file, and not a packaged preset (the presets are hh_pythia, accelerate_ds)" in err
