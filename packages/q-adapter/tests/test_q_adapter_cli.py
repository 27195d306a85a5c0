"""CLI as a subprocess: --help, and a tiny train -> generate -> resume run on a local base folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def _run(*args, env=None, check=True):
    r = subprocess.run([sys.executable, "-m", "iclr25.q_adapter", *args], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    if check:
        assert r.returncode == 0, r.stderr[-3000:]
    return r


def test_help_lists_subcommands():
    out = _run("--help").stdout
    for sub in ("train", "evaluate", "generate", "tabular-check", "reproduce"):
        assert sub in out
    assert "--resume" in _run("train", "--help").stdout


@pytest.fixture
def local_base(tmp_path):
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    d = tmp_path / "base"
    tiny_causal_lm(n_embd=32, n_layer=1, n_head=2, n_positions=96).save_pretrained(d)
    byte_tokenizer().save_pretrained(d)
    return d


def test_train_generate_resume(tmp_path, local_base):
    """One subprocess run (the installed entry module), then resume/generate/bad input in-process."""
    from iclr25.q_adapter.cli import main

    data = tmp_path / "pairs.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"Q{i}:", "chosen": f" yes {i}", "rejected": f" no {i}!"})
                              for i in range(6)) + "\n")
    out = tmp_path / "run"
    common = ["--data", str(data), "--base", str(local_base), "--out", str(out), "--batch-size", "2",
              "--max-length", "24", "--max-prompt-length", "8", "--quiet"]
    r = _run("train", *common, "--epochs", "1")
    assert "trained q-adapter on 6 pairs (1 process(es)): 3 steps" in r.stdout
    assert (out / "adapter" / "adapter_config.json").is_file()
    assert main(["train", *common, "--epochs", "2", "--resume"]) == 0
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]
    assert main(["generate", "--prompt", "Q1:", "--adapter", str(out / "adapter"), "--base", str(local_base),
                 "--max-new-tokens", "5", "--quiet"]) == 0


def test_bad_input_is_an_error_not_a_traceback(tmp_path, local_base, capsys):
    from iclr25.q_adapter.cli import main

    data = tmp_path / "bad.jsonl"
    data.write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\nnot json\n')
    code = main(["train", "--data", str(data), "--base", str(local_base), "--out", str(tmp_path / "o"),
                 "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert "bad.jsonl:2: malformed JSON" in err and "Traceback" not in err


@pytest.mark.realdata
def test_evaluate_on_dsp(tmp_path, local_base, need_file, capsys):
    need_file("dsp/domain_specific_preference.test.json")
    need_file("hh-rlhf/helpful.test.json")
    need_file("hh-rlhf/harmless-base.test.jsonl.gz")
    from iclr25.q_adapter.cli import main

    out = tmp_path / "run"
    assert main(["train", "--data", "dsp", "--base", str(local_base), "--out", str(out), "--max-pairs", "4",
                 "--batch-size", "2", "--epochs", "1", "--max-length", "32", "--max-prompt-length", "16",
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--adapter", str(out / "adapter"), "--base", str(local_base), "--max-pairs", "4",
                 "--n-general", "2", "--max-length", "32", "--max-prompt-length", "16", "--quiet",
                 "--out", str(tmp_path / "eval")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    res = json.loads(lines[-2])
    assert lines[-1].startswith("pair accuracy ")
    assert json.loads((tmp_path / "eval" / "eval.json").read_text()) == res
    assert set(res) == {"pair_accuracy", "base_pair_accuracy", "general_nll", "base_general_nll", "forgetting"}
    assert 0 <= res["pair_accuracy"] <= 1 and res["general_nll"] > 0


def test_config_by_name_loads_the_packaged_preset(capsys):
    """``--config quick`` / ``--config paper`` name presets shipped in the wheel (issue 46 §5); an unknown name is
    one line, exit 2."""
    from iclr25.q_adapter.cli import _named_presets
    from iclr25.q_adapter.presets import main as presets_main
    from iclr25.q_adapter.presets import preset_path

    got = _named_presets(["train", "--config", "quick", "--lr", "1e-3"])
    assert got[2] == str(preset_path("quick")) and got[3:] == ["--lr", "1e-3"]
    assert _named_presets(["train", "--config=paper"])[1] == f"--config={preset_path('paper')}"
    assert "lr: 0.003" in preset_path("quick").read_text()
    import dataclasses

    from iclr25.core.config import load_config_file
    from iclr25.q_adapter.cli import TrainArgs

    names = {f.name for f in dataclasses.fields(TrainArgs)}
    for p in ("quick", "paper"):  # every key of the presets is a train flag (renamed keys included)
        assert set(load_config_file(preset_path(p))) <= names, p
    assert presets_main(["nope"]) == 2 and "unknown preset" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["train", "--config", "quik"], "--config quik: no such file and not a packaged preset (train presets: quick, paper)"),
    (["evaluate", "--config", "quick"], "--config quick: the packaged presets ['quick', 'paper'] are train settings"),
    (["generate", "--config=paper"], "--config paper: the packaged presets"),
    (["reproduce", "--config", "quick"], "reproduce takes a YAML file of its own flags (reproduce: --quick)"),
])
def test_misspelt_or_misplaced_preset_is_one_line(argv, message, capsys):
    """Trial QA (s52): ``--config quik`` said only "config file quik does not exist"; ``evaluate``/``generate``/
    ``reproduce --config quick`` loaded the train preset and failed on a list of unknown keys."""
    from iclr25.q_adapter.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith(f"iclr25-q-adapter {argv[0]}: error:"), err


def test_generate_past_the_context_is_an_error_or_a_cut_prompt(tmp_path, local_base, capsys, caplog):
    """Trial QA (s52): a prompt + --max-new-tokens beyond the model's context (n_positions) ended in an IndexError
    traceback (exit 1) from the position embeddings."""
    import logging

    from iclr25.q_adapter.cli import main

    common = ["generate", "--base", str(local_base), "--quiet"]
    assert main([*common, "--prompt", "Q1:", "--max-new-tokens", "96"]) == 2  # the context is 96
    err = capsys.readouterr().err
    assert "--max-new-tokens 96 leaves no room" in err and "Traceback" not in err
    with caplog.at_level(logging.WARNING):
        assert main([*common, "--prompt", "word " * 40, "--max-new-tokens", "90"]) == 0
    assert "only the prompt's last 6 tokens are used" in caplog.text
