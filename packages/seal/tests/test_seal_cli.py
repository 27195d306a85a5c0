"""CLI tests: the whole pipeline on files with a tiny model saved by save_pretrained, resume, bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from iclr25.seal.cli import main

TEMPLATE = "human {} assistant"


def _write(path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


@pytest.fixture
def files(tmp_path, task):
    schemas = [lambda p, r: {"prompt": p, "response": r}, lambda p, r: {"question": p, "response": r},
               lambda p, r: {"instruction": p, "input": "", "output": r},
               lambda p, r: {"conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": r}]},
               lambda p, r: {"prompt": p, "chosen": r, "rejected": "x"}]
    ft = [{**schemas[i % 5](p, r), "label": lab}
          for i, (p, r, lab) in enumerate(zip(task.ft.prompts, task.ft.responses, task.ft.labels))]
    safe = [{"prompt": p, "response": r} for p, r in zip(task.safe.prompts, task.safe.responses)]
    ev = [{"prompt": p, "kind": "benign", "reference": r}
          for p, r in zip(task.evals["benign_a"]["prompts"], task.evals["benign_a"]["references"])]
    h = task.evals["harmful"]
    ev += [{"prompt": p, "kind": "harmful", "refusal": r, "compliance": c, "terms": t}
           for p, r, c, t in zip(h["prompts"], h["refusals"], h["compliances"], h["terms"])]
    return {"ft": _write(tmp_path / "ft.jsonl", ft), "safe": _write(tmp_path / "safe.jsonl", safe),
            "eval": _write(tmp_path / "eval.jsonl", ev)}


def _sel_args(model, files, out, *extra):
    return ["train-selector", "--model", str(model), "--safe", str(files["safe"]), "--ft", str(files["ft"]),
            "--prompt-template", TEMPLATE, "--max-len", "40", "--epochs", "2", "--batch-size", "8",
            "--lr-model", "1e-3", "--device", "cpu", "--quiet", "--out", str(out), *extra]


def test_help_is_light_and_lists_every_command():
    code = ("import sys; from iclr25.seal import cli; rc = cli.main(['--help']); "
            "heavy = [m for m in ('torch', 'transformers', 'peft', 'accelerate') if m in sys.modules]; "
            "assert not heavy, heavy")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for cmd in ("train-selector", "select", "sft", "evaluate", "reproduce", "demo"):
        assert cmd in r.stdout


@pytest.mark.parametrize("cmd", ["train-selector", "select", "sft", "evaluate", "reproduce", "demo"])
def test_every_command_answers_help(cmd, capsys):
    assert main([cmd, "--help"]) == 0
    assert "--out" in capsys.readouterr().out


def test_pipeline_select_sft_evaluate(tmp_path, saved_model, files, task):
    out = tmp_path / "sel"
    assert main(_sel_args(saved_model, files, out)) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["fraction_updated_every_epoch"] == 1.0 and res["n_ft"] == len(task.ft)
    assert "auroc_unsafe" in res and (out / "metrics.jsonl").is_file()
    # select: kept lines byte for byte, in file order, with scores and ranks beside them
    assert main(["select", "--selector", str(out / "selector.safetensors"), "--ft", str(files["ft"]), "--keep", "0.8",
                 "--out", str(tmp_path / "pick"), "--quiet"]) == 0
    src = files["ft"].read_text().splitlines()
    kept = (tmp_path / "pick" / "kept.jsonl").read_text().splitlines()
    scores = [json.loads(x) for x in (tmp_path / "pick" / "scores.jsonl").read_text().splitlines()]
    assert len(kept) == int(0.8 * len(src)) == len(scores)
    assert kept == [src[s["line"] - 1] for s in scores]
    assert [s["line"] for s in scores] == sorted(s["line"] for s in scores)
    assert sorted(s["rank"] for s in scores) == list(range(1, len(kept) + 1))
    from safetensors.torch import load_file

    logits = load_file(str(out / "selector.safetensors"))["logits"]
    assert min(s["score"] for s in scores) >= float(logits.sort(descending=True).values[len(kept) - 1])
    assert main(["select", "--selector", str(out / "selector.safetensors"), "--ft", str(files["ft"]), "--keep", "0.5",
                 "--annotate", "--out", str(tmp_path / "ann"), "--quiet"]) == 0
    ann = [json.loads(x) for x in (tmp_path / "ann" / "kept.jsonl").read_text().splitlines()]
    assert {"seal_score", "seal_rank", "label"} <= set(ann[0])
    # sft with LoRA on the GPT-2 attention, then evaluate the adapter
    assert main(["sft", "--model", str(saved_model), "--data", str(tmp_path / "pick" / "kept.jsonl"),
                 "--safeinstr", str(files["safe"]), "--prompt-template", TEMPLATE, "--max-len", "40", "--epochs", "1",
                 "--batch-size", "8", "--lr", "1e-3", "--lora-r", "2", "--lora-target-modules", "c_attn",
                 "--out", str(tmp_path / "sft"), "--quiet", "--device", "cpu"]) == 0
    assert (tmp_path / "sft" / "model" / "adapter_config.json").is_file()
    assert main(["evaluate", "--model", str(saved_model), "--adapter", str(tmp_path / "sft" / "model"),
                 "--prompts", str(files["eval"]), "--prompt-template", TEMPLATE, "--max-new-tokens", "8",
                 "--out", str(tmp_path / "ev"), "--quiet", "--device", "cpu"]) == 0
    ev = json.loads((tmp_path / "ev" / "results.json").read_text())
    assert {"exact_match", "refusal_rate", "safety_margin"} <= set(ev)
    lines = (tmp_path / "ev" / "responses.jsonl").read_text().splitlines()
    assert len(lines) == ev["n"] == len(files["eval"].read_text().splitlines())


def test_train_selector_cli_resume_equals_one_run(tmp_path, saved_model, files):
    assert main(_sel_args(saved_model, files, tmp_path / "a")) == 0
    assert main(_sel_args(saved_model, files, tmp_path / "b", "--stop-after-steps", "3")) == 0
    assert not (tmp_path / "b" / "selector.safetensors").exists()
    assert main(_sel_args(saved_model, files, tmp_path / "b", "--resume")) == 0
    from safetensors.torch import load_file

    a, b = (load_file(str(tmp_path / x / "selector.safetensors")) for x in "ab")
    assert torch.equal(a["logits"], b["logits"]) and torch.equal(a["update_counts"], b["update_counts"])


def test_sft_cli_resume(tmp_path, saved_model, files):
    args = ["sft", "--model", str(saved_model), "--data", str(files["ft"]), "--prompt-template", TEMPLATE,
            "--max-len", "40", "--epochs", "2", "--batch-size", "8", "--lr", "1e-3", "--quiet", "--device", "cpu"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--out", str(tmp_path / "b"), "--stop-after-steps", "3"]) == 0
    assert main([*args, "--out", str(tmp_path / "b"), "--resume"]) == 0
    from safetensors.torch import load_file

    a, b = (load_file(str(tmp_path / x / "model" / "model.safetensors")) for x in "ab")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_evaluate_precomputed_answers_win_rate(tmp_path):
    prompts = _write(tmp_path / "p.jsonl", [{"prompt": "q1", "reference": "a b"}, {"prompt": "q2", "kind": "harmful"},
                                            {"prompt": "q3", "reference": "c"}])
    a = _write(tmp_path / "a.jsonl", [{"response": "a b"}, {"response": "I cannot help with that."}, {"response": "c"}])
    b = _write(tmp_path / "b.jsonl", [{"response": "a x"}, {"response": "sure, here"}, {"response": "c"}])
    assert main(["evaluate", "--prompts", str(prompts), "--responses", str(a), "--baseline", str(b),
                 "--out", str(tmp_path / "ev"), "--quiet"]) == 0
    r = json.loads((tmp_path / "ev" / "results.json").read_text())
    assert r["win_rate"] == pytest.approx(100 * 2.5 / 3) and r["refusal_rate"] == 1.0
    assert r["exact_match"] == 1.0


@pytest.mark.parametrize("extra, msg", [
    (["--sigma0", "0"], "sigma0"),
    (["--sigma-decay", "0.6", "--epochs", "3"], "negative at epoch 2"),
    (["--lr-selector", "nan"], "lr_selector"),
])
def test_train_selector_bad_flags(tmp_path, saved_model, files, extra, msg, capsys):
    assert main(_sel_args(saved_model, files, tmp_path / "x", *extra)) == 2
    err = " ".join(capsys.readouterr().err.replace("│", " ").split())   # tyro wraps the message in a box
    assert msg in err


def test_bad_input_files(tmp_path, saved_model, files, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "response": "b"}\n{"prompt": "a" "response": "b"}\n')
    args = _sel_args(saved_model, {**files, "ft": bad}, tmp_path / "x")
    assert main(args) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert main(_sel_args(saved_model, {**files, "safe": empty}, tmp_path / "x")) == 2
    assert "--safe" in capsys.readouterr().err
    unknown = _write(tmp_path / "u.jsonl", [{"text": "x", "answer": "y"}])
    assert main(_sel_args(saved_model, {**files, "ft": unknown}, tmp_path / "x")) == 2
    assert "unknown schema; the record has keys ['answer', 'text']" in capsys.readouterr().err
    assert main(_sel_args(tmp_path / "no_such_model", files, tmp_path / "x")) == 2
    assert "no_such_model" in capsys.readouterr().err


def test_select_rejects_a_selector_of_another_file_and_bad_keep(tmp_path, saved_model, files, capsys):
    out = tmp_path / "sel"
    assert main(_sel_args(saved_model, files, out, "--epochs", "1")) == 0
    short = tmp_path / "short.jsonl"
    short.write_text("".join(files["ft"].read_text().splitlines(keepends=True)[:-2]))
    assert main(["select", "--selector", str(out / "selector.safetensors"), "--ft", str(short),
                 "--out", str(tmp_path / "p")]) == 2
    assert "trained on another file" in capsys.readouterr().err
    for keep in ("0", "1.2"):
        assert main(["select", "--selector", str(out / "selector.safetensors"), "--ft", str(files["ft"]), "--keep", keep,
                     "--out", str(tmp_path / "p")]) == 2
        assert "keep" in capsys.readouterr().err


@pytest.mark.slow  # three processes that each import torch and transformers: ~40 CPU-s
def test_train_selector_kill_and_resume_is_bit_identical(tmp_path, saved_model, files):
    """Issue 44: SIGKILL train-selector a random moment after its first checkpoint; --resume must end with a
    byte-identical selector, model/optimiser state and metrics.jsonl (each step once) as an uninterrupted run."""
    from iclr25.core.testing import kill_and_resume

    args = _sel_args(saved_model, files, "X")[:-2]  # without --out
    args[args.index("--epochs") + 1] = "6"
    cmd = [sys.executable, "-m", "iclr25.seal", *args, "--checkpoint-every", "2", "--log-every", "1"]
    kill_and_resume(cmd, killed_out=tmp_path / "killed", reference_out=tmp_path / "ref",
                    ready=lambda out: (out / "checkpoint" / "loop_state.pt").is_file(), max_delay=0.5,
                    compare=["checkpoint/model_state.pt"], logs=["metrics.jsonl", "history.json"], timeout=300)
    # selector.safetensors: the header's metadata order is not fixed between processes (a hash map) and its history
    # holds wall times, so its tensors and its other metadata are compared instead of its bytes
    from safetensors import safe_open

    files_ = [safe_open(str(tmp_path / d / "selector.safetensors"), "pt") for d in ("ref", "killed")]
    metas = [{k: v for k, v in f.metadata().items() if k != "history"} for f in files_]
    assert metas[0] == metas[1]
    assert sorted(files_[0].keys()) == sorted(files_[1].keys())
    for k in files_[0].keys():
        assert torch.equal(files_[0].get_tensor(k), files_[1].get_tensor(k)), k
    steps = [json.loads(x)["step"] for x in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) > 4


def test_metrics_trimmed_to_the_checkpoint_on_resume(tmp_path, saved_model, files):
    """A kill after logging steps past the last checkpoint left them in metrics.jsonl; the resumed run logged
    them again (twice). The log is now cut back to the checkpointed step before the resumed run appends."""
    out = tmp_path / "b"
    assert main(_sel_args(saved_model, files, out, "--stop-after-steps", "3", "--log-every", "1")) == 0
    with open(out / "metrics.jsonl", "a") as fh:  # what a run killed after logging step 4 leaves
        fh.write(json.dumps({"step": 4, "epoch": 0, "upper_loss": -1.0}) + "\n" + '{"step": 5, "ep')
    assert main(_sel_args(saved_model, files, out, "--resume", "--log-every", "1")) == 0
    recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs] == list(range(1, len(recs) + 1)) and recs[3]["upper_loss"] != -1.0
