"""The console script: --help stays light; train-knowledge -> train-skill (--resume) -> evaluate -> generate
on a local model folder (the --model path route; no hub download)."""

import json
import subprocess
import sys

import pytest

from iclr25.prereq_tune.cli import main

CMDS = ["train-knowledge", "train-skill", "evaluate", "generate", "reproduce", "demo"]
TPL = "question : {question} answer :"


def test_help_imports_nothing_heavy():
    code = ("import sys\nfrom iclr25.prereq_tune.cli import main\n"
            "for c in [[], " + ", ".join(f"[{c!r}]" for c in CMDS) + "]:\n"
            "    try:\n        main([*c, '--help'])\n    except SystemExit:\n        pass\n"
            "heavy = [m for m in ('torch', 'transformers', 'peft', 'accelerate') if m in sys.modules]\n"
            "print('HEAVY', heavy)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stdout
    for c in CMDS:
        assert f"iclr25-prereq-tune {c}" in r.stdout
    assert "--resume" in r.stdout and "--multi-version" in r.stdout and "--real-weight" in r.stdout
    assert "--alternate-groups" in r.stdout


def test_version(capsys):
    assert main(["--version"]) == 0
    assert "iclr25-prereq-tune" in capsys.readouterr().out


@pytest.fixture
def files(tmp_path, world, tok, base):
    from dataclasses import asdict

    from iclr25.core.jsonl import write_jsonl
    from iclr25.prereq_tune import knowledge_corpus, qa_items, skill_examples

    mdir = tmp_path / "m"
    base.save_pretrained(mdir)
    tok.save_pretrained(mdir)
    write_jsonl(tmp_path / "know.jsonl", [{"text": t, "version": v} for v in (1, 2) for t in knowledge_corpus(world, v)])
    write_jsonl(tmp_path / "skill.jsonl", [asdict(e) for e in skill_examples(world, "fictitious", [1, 2])])
    write_jsonl(tmp_path / "qa.jsonl", [{"question": q.question, "answers": list(q.answers)}
                                        for q in qa_items(world, "fictitious", 2)])
    (tmp_path / "ents.json").write_text(json.dumps(["bako ruvin", "temo lisar"]))
    return tmp_path


LORA = ["--r", "4", "--alpha", "8", "--lora-dropout", "0", "--max-length", "32", "--quiet", "--threads", "1"]


def test_pipeline_on_local_model_folder(files, capsys):
    t = files
    assert main(["train-knowledge", "--model", str(t / "m"), "--data", str(t / "know.jsonl"), "--out", str(t / "know"),
                 "--epochs", "1", "--batch-size", "32", "--lr", "3e-3", *LORA]) == 0
    for n in ("know_v1", "know_v2"):
        assert (t / "know" / n / "adapter_config.json").is_file()
        assert json.loads((t / "know" / n / "prereq_tune.json").read_text())["version"] == int(n[-1])
    skill = ["train-skill", "--model", str(t / "m"), "--knowledge", str(t / "know" / "know_v1"),
             str(t / "know" / "know_v2"), "--data", str(t / "skill.jsonl"), "--out", str(t / "sk"),
             "--batch-size", "8", "--grad-accum", "1", "--lr", "3e-3", "--prompt-template", TPL, "--multi-version", *LORA]
    assert main([*skill, "--epochs", "1"]) == 0
    out = capsys.readouterr().out
    assert "bit-identical" in out
    saved = t / "sk" / "skill"
    cfg = json.loads((saved / "adapter_config.json").read_text())
    assert cfg["r"] == 4
    from safetensors import safe_open

    with safe_open(str(saved / "adapter_model.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert keys and not any("know" in k for k in keys)       # the skill adapter alone
    res1 = json.loads((t / "sk" / "results.json").read_text())
    assert main([*skill, "--epochs", "2", "--resume"]) == 0
    res2 = json.loads((t / "sk" / "results.json").read_text())
    assert res2["resumed_from"] == res1["steps"] and res2["steps"] == 2 * res1["steps"]
    assert res2["frozen_changed"] == [] and res2["rows_per_counted_row"] == 1.0
    capsys.readouterr()
    assert main(["evaluate", "--model", str(t / "m"), "--skill", str(saved), "--knowledge", str(t / "know" / "know_v2"),
                 "--data", str(t / "qa.jsonl"), "--out", str(t / "ev"), "--metric", "first-token",
                 "--prompt-template", TPL, "--quiet"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("evaluate: θ₀ + know_v2 + skill: accuracy")
    assert len((t / "ev" / "predictions.jsonl").read_text().splitlines()) == 30
    assert main(["generate", "--model", str(t / "m"), "--skill", str(saved), "--entities", str(t / "ents.json"),
                 "--template", "where was {entity} born ?", "--max-new-tokens", "3", "--out", str(t / "gen"),
                 "--quiet"]) == 0
    rows = [json.loads(l) for l in (t / "gen" / "generations.jsonl").read_text().splitlines()]
    assert [r["entity"] for r in rows] == ["bako ruvin", "temo lisar"]


def test_cli_errors(files, capsys):
    t = files
    assert main(["train-skill", "--model", str(t / "nope"), "--data", str(t / "skill.jsonl"), "--out", str(t / "x"),
                 "--quiet"]) != 0
    assert "nope" in capsys.readouterr().err
    assert main(["train-skill", "--model", str(t / "m"), "--knowledge", str(t / "missing_adapter"), "--data",
                 str(t / "skill.jsonl"), "--out", str(t / "x"), "--quiet"]) != 0
    assert "missing_adapter" in capsys.readouterr().err
    assert main(["train-skill", "--model", str(t / "m"), "--data", str(t / "skill.jsonl"), "--out", str(t / "x"),
                 "--real-weight", "-1", "--quiet", *LORA[:4]]) != 0
    assert "real_weight" in capsys.readouterr().err
    assert main(["train-knowledge", "--model", str(t / "m"), "--data", str(t / "know.jsonl"), "--out", str(t / "x"),
                 "--r", "0", "--quiet"]) != 0
    assert "r=0" in capsys.readouterr().err


def test_packaged_preset_by_name_and_deprecated_save_every(monkeypatch, capsys):
    """--config NAME loads the preset shipped in the package; --save-every still works as an alias of
    --checkpoint-every, with a warning naming the new flag."""
    import iclr25.prereq_tune.cli as C
    from iclr25.prereq_tune.config import PRESETS, preset_path

    assert all(preset_path(n).is_file() for n in PRESETS)
    got = []
    monkeypatch.setattr(C, "cmd_train_skill", lambda cfg: got.append(cfg) or 0)
    with pytest.warns(FutureWarning, match="--checkpoint-every"):
        assert C.main(["train-skill", "--config", "tiny_skill", "--save-every", "7", "--data", "x.jsonl"]) == 0
    cfg = got[0]
    assert (cfg.r, cfg.lr, cfg.epochs, cfg.checkpoint_every) == (16, 0.002, 20.0, 7)
    assert "use --checkpoint-every" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown preset"):
        preset_path("tiny")


@pytest.mark.parametrize("flag", [["--config", "tiny_knowlege"], ["--config=tiny_knowlege"]])
def test_unknown_preset_name_on_the_command_line_lists_the_presets(flag, capsys):
    """`--config tiny_knowlege` (a typo) said only "config file tiny_knowlege does not exist"."""
    from iclr25.prereq_tune.config import PRESETS

    assert main(["train-knowledge", *flag]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"tiny_knowlege: no such file, and not a packaged preset (the presets are {', '.join(PRESETS)})" in err
