"""CLI: --help everywhere (light imports), each command on a local tiny model, --resume, presets, clean errors."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from iclr25.core.config import config_from_dict
from iclr25.sharpening.cli import COMMANDS, main
from iclr25.sharpening.config import PRESETS, preset_path

CONFIGS = preset_path("quick").parent


def test_help_imports_nothing_heavy():
    code = ("import sys; from iclr25.sharpening.cli import main; rc = main(['--help']); "
            "heavy = [m for m in ('torch', 'transformers', 'peft', 'accelerate') if m in sys.modules]; "
            "assert rc == 0 and not heavy, heavy")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "reproduce" in r.stdout and "demo" in r.stdout


@pytest.mark.parametrize("cmd", list(COMMANDS))
def test_every_subcommand_answers_help(cmd, capsys):
    assert main([cmd, "--help"]) == 0
    out = capsys.readouterr().out
    assert "--config" in out and "--out" in out


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("iclr25-sharpening 0.")


def _common(tiny_model_dir, prompts_file, out):
    return ["--model", str(tiny_model_dir), "--prompts", str(prompts_file), "--max-new-tokens", "4",
            "--out", str(out), "--threads", "1", "--quiet"]


def test_bon_command(tiny_model_dir, prompts_file, tmp_path, capsys):
    out = tmp_path / "bon"
    assert main(["bon", *_common(tiny_model_dir, prompts_file, out), "--n", "4"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("bon: N=4") and "accuracy BoN" in last
    recs = [json.loads(line) for line in (out / "bon.jsonl").read_text().splitlines()]
    assert len(recs) == 4 and all(len(r["responses"]) == 4 and "greedy" in r for r in recs)
    res = json.loads((out / "results.json").read_text())
    assert {"accuracy_bon", "accuracy_greedy", "mean_best_logp", "mean_best_length"} <= set(res["results"] if "results" in res else res)


def test_majority_vote_needs_an_extractor(tiny_model_dir, tmp_path, capsys):
    p = tmp_path / "free.jsonl"
    p.write_text('{"prompt": "the movie"}\n')
    rc = main(["bon", "--model", str(tiny_model_dir), "--prompts", str(p), "--reward", "majority-vote",
               "--n", "2", "--max-new-tokens", "4", "--out", str(tmp_path / "o"), "--quiet"])
    assert rc == 2 and "extractor" in capsys.readouterr().err


def test_prompt_longer_than_model_context_is_clean_error(tiny_model_dir, tmp_path, capsys):
    """New-user trial: a prompt that, with max_new_tokens, overruns the model's 32 positions used to end in an
    IndexError traceback inside generate; now a clean error names the prompt and the fix."""
    p = tmp_path / "long.jsonl"
    p.write_text('{"prompt": "12+34="}\n' + json.dumps({"prompt": "1+" * 20 + "1="}) + "\n")
    rc = main(["bon", "--model", str(tiny_model_dir), "--prompts", str(p), "--n", "2", "--max-new-tokens", "4",
               "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "prompt 1 has 42 tokens" in err and "--max-new-tokens" in err and "Traceback" not in err


@pytest.mark.parametrize("args, msg", [
    (["bon", "--n", "0"], "n must be"),
    (["rlhf", "--beta", "0"], "beta"),
    (["rlhf", "--xpo", "--alpha", "-1"], "alpha"),
    (["sft", "--adaptive-delta", "1.0"], "adaptive_delta"),
    (["report", "--delta", "0"], "delta"),
    (["bon", "--model", "/no/such/model", "--prompts", "x.jsonl"], "x.jsonl does not exist"),  # checked before the model
])
def test_bad_input_is_a_clean_error(args, msg, capsys):
    assert main([*args, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err


def test_malformed_prompt_file_names_the_line(tiny_model_dir, tmp_path, capsys):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"prompt": "1+1="}\n{"prompt": \n')
    assert main(["bon", "--model", str(tiny_model_dir), "--prompts", str(p), "--out", str(tmp_path / "o"),
                 "--quiet"]) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err


def test_sft_command_and_resume(tiny_model_dir, prompts_file, tmp_path, capsys):
    out = tmp_path / "sft"
    args = ["sft", *_common(tiny_model_dir, prompts_file, out), "--n", "2", "--epochs", "2", "--lora-r", "0",
            "--batch-size", "2", "--lr", "1e-3", "--eval-samples", "2"]
    assert main(args) == 0
    assert (out / "model" / "model.safetensors").is_file() and (out / "checkpoint" / "trainer_state.pt").is_file()
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("sft: ")
    assert main([*args, "--resume"]) == 0
    assert main([*args[:-2], "--eval-samples", "2", "--lr", "5e-3", "--resume"]) == 2
    assert "other settings" in capsys.readouterr().err
    _check_damaged_resume(args, out, ["checkpoint/trainer_state.pt", "checkpoint/policy.safetensors", "corpus.jsonl"],
                          capsys)


def _check_damaged_resume(args, out, files, capsys):
    """Each saved file truncated in turn: --resume exits 2 with one clean line naming the file and the fix."""
    for name in files:
        f = out / name
        good = f.read_bytes()
        for bad in (good[: len(good) // 2], b""):
            f.write_bytes(bad)
            capsys.readouterr()
            assert main([*args, "--resume"]) == 2, name
            err = capsys.readouterr().err
            assert "Traceback" not in err and f.name in err and "run without --resume" in err, (name, err)
            assert "truncated" in err, (name, err)
        f.write_bytes(good)
    assert main([*args, "--resume"]) == 0          # intact again: resumes


def test_rlhf_command_offline_and_xpo(tiny_model_dir, prompts_file, tmp_path, capsys):
    base = ["rlhf", *_common(tiny_model_dir, prompts_file, tmp_path / "r"), "--lora-r", "0", "--batch-size", "2"]
    assert main([*base, "--beta", "0.5", "--epochs", "1"]) == 0
    assert "identical pairs" in capsys.readouterr().out
    x = ["rlhf", *_common(tiny_model_dir, prompts_file, tmp_path / "x"), "--lora-r", "0", "--batch-size", "2",
         "--xpo", "--alpha", "0.1", "--iterations", "2", "--prompts-per-iteration", "2", "--steps-per-iteration", "1"]
    assert main(x) == 0
    assert main([*x, "--resume"]) == 0
    _check_damaged_resume(x, tmp_path / "x", ["checkpoint/best.safetensors", "pairs.jsonl"], capsys)
    _check_damaged_resume([*base, "--beta", "0.5", "--epochs", "1"], tmp_path / "r", ["checkpoint/trainer_state.pt"],
                          capsys)
    assert main([*base, "--alpha", "0.1"]) == 2


def test_report_command_exact_and_sampled(tiny_model_dir, prompts_file, tmp_path, capsys):
    cands = tmp_path / "cands.jsonl"
    cands.write_text("".join(json.dumps({"prompt": f"{a}+{b}=", "answer": a + b,
                                         "candidates": [f"{a + b}", "00", "99"]}) + "\n" for a, b in [(12, 34), (20, 21)]))
    out = tmp_path / "rep"
    assert main(["report", *_common(tiny_model_dir, cands, out)]) == 0
    res = json.loads((out / "results.json").read_text())
    res = res.get("results", res)
    assert "exact" in res and 0 <= res["exact"]["mean_mode_mass"] <= 1
    assert main(["report", *_common(tiny_model_dir, prompts_file, tmp_path / "rep2"), "--n", "3"]) == 0
    assert "report (sampled" in capsys.readouterr().out


def test_report_refuses_an_answer_outside_its_candidates_and_repeated_candidates(tiny_model_dir, tmp_path, capsys):
    """Both used to pass silently: an answer missing from its candidates dropped y* for every prompt (the report
    fell back to the mode), a repeated candidate counted its mass twice."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "12+13=", "answer": "25", "candidates": ["25", "26"]}) + "\n"
                   + json.dumps({"prompt": "20+22=", "answer": "99", "candidates": ["42", "43"]}) + "\n")
    assert main(["report", *_common(tiny_model_dir, bad, tmp_path / "r1")]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:2: answer '99' is none of its candidates" in err and "Traceback" not in err
    dup = tmp_path / "dup.jsonl"
    dup.write_text(json.dumps({"prompt": "12+13=", "candidates": ["25", "26", "25"]}) + "\n")
    assert main(["report", *_common(tiny_model_dir, dup, tmp_path / "r2")]) == 2
    assert "dup.jsonl:1: 'candidates' repeats ['25']" in capsys.readouterr().err


def test_presets_have_a_valid_section_per_command():
    import yaml

    for name in ("quick.yaml", "paper.yaml"):
        data = yaml.safe_load((CONFIGS / name).read_text())
        assert set(data) == set(COMMANDS), name
        for cmd, section in data.items():
            config_from_dict(COMMANDS[cmd].config, section or {}, source=f"{name}:{cmd}")


def test_quick_preset_matches_the_reproduction():
    import yaml

    from iclr25.sharpening.reproduce import ReproSettings

    q = yaml.safe_load((CONFIGS / "quick.yaml").read_text())
    st = ReproSettings.preset(quick=True)
    assert (q["sft"]["n"], q["sft"]["epochs"], q["sft"]["lr"], q["sft"]["batch_size"]) == \
        (st.sft_n, st.sft_epochs, st.sft_lr, st.sft_batch)
    assert (q["rlhf"]["epochs"], q["rlhf"]["lr"], q["rlhf"]["batch_size"], q["rlhf"]["pairs_per_prompt"]) == \
        (st.rlhf_epochs, st.rlhf_lr, st.rlhf_batch, st.rlhf_pairs_per_prompt)
    assert q["rlhf"]["beta"] in st.rlhf_betas and q["bon"]["n"] == max(st.bon_ns)
    assert q["sft"]["num_prompts"] == st.n_train and q["bon"]["num_prompts"] == st.n_test
    assert tuple(q["reproduce"]["seeds"]) == st.seeds


def test_packaged_presets_are_found_by_name(tmp_path, monkeypatch):
    for name in PRESETS:
        p = preset_path(name)
        assert p.is_file() and p.name == f"{name}.yaml" and p.parent.parent.name == "sharpening"
    with pytest.raises(ValueError, match="unknown preset 'fast'.*quick"):
        preset_path("fast")
    monkeypatch.chdir(tmp_path)            # a file named like a preset wins over the packaged one
    (tmp_path / "quick").write_text("n: 7\n")
    from iclr25.sharpening.cli import _section_config

    assert _section_config(["bon", "--config", "quick"]) == (["bon", "--config", "quick"], None)


def test_built_wheel_ships_the_presets(tmp_path):
    """The wheel (built offline by uv from the uv cache) carries configs/{quick,paper}.yaml and the shipped base as
    package data."""
    import shutil
    import zipfile

    uv = [shutil.which("uv")] if shutil.which("uv") else [sys.executable, "-m", "uv"]
    root = Path(__file__).parents[1]
    r = subprocess.run([*uv, "build", str(root), "--wheel", "--out-dir", str(tmp_path), "--offline", "--quiet"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0 and ("offline" in r.stderr.lower() or "no module named uv" in r.stderr.lower()):
        pytest.skip(f"uv cannot build offline here: {r.stderr[-300:]}")
    assert r.returncode == 0, r.stderr
    (wheel,) = tmp_path.glob("iclr25_sharpening-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in PRESETS:
        member = f"iclr25/sharpening/configs/{name}.yaml"
        assert member in names
        assert zipfile.ZipFile(wheel).read(member) == preset_path(name).read_bytes()
    from iclr25.sharpening.shipped import SHIPPED_BASE_DIR

    for f in ("model.safetensors", "config.json", "trapbase_train.json"):       # the shipped trap base
        member = f"iclr25/sharpening/weights/{SHIPPED_BASE_DIR.name}/{f}"
        assert zipfile.ZipFile(wheel).read(member) == (SHIPPED_BASE_DIR / f).read_bytes()


def test_config_section_is_selected_and_flags_override(tiny_model_dir, prompts_file, tmp_path, monkeypatch):
    out = tmp_path / "bon"
    monkeypatch.chdir(tmp_path)
    rc = main(["bon", "--config", "quick", *_common(tiny_model_dir, prompts_file, out),
               "--n", "3", "--batch-size", "8"])
    assert rc == 0
    cfg = json.loads((out / "config.json").read_text())
    cfg = cfg.get("config", cfg)
    assert cfg["n"] == 3 and cfg["num_prompts"] == 200 and cfg["max_new_tokens"] == 4


@pytest.mark.parametrize("flag", [["--config", "quik"], ["--config=quik"]])
def test_unknown_preset_name_on_the_command_line_lists_the_presets(flag, capsys):
    """`--config quik` (a typo) said only "config file quik does not exist", not which presets exist."""
    assert main(["bon", *flag]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "quik: no such file, and not a packaged preset (the presets are quick, paper)" in err
