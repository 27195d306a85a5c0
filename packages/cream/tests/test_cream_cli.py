"""CLI tests: every subcommand on a tiny model saved with save_pretrained, the file formats between
steps, --resume (interrupted and finished), the bad-input errors, a local OpenAI-compatible stub for
the server backend, and --help staying light."""

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import torch

from iclr25.cream.cli import main


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    d = tmp_path_factory.mktemp("tiny") / "m0"
    model, tok = tiny_causal_lm(n_layer=1, n_embd=32, n_head=2, n_positions=1024, seed=0), byte_tokenizer()
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return d


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _read(path):
    return [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]


def _run(*argv):
    return main([str(a) for a in argv])


COMMON = ("--device", "cpu", "--quiet", "--threads", "1")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    sft = _jsonl(d / "sft.jsonl", [{"prompt": f"{i}+1=", "response": str(i + 1)} for i in range(6)])
    pool = _jsonl(d / "pool.jsonl", [{"id": f"q{i}", "prompt": f"{i}+{i}="} for i in range(6)])
    return {"sft": sft, "pool": pool, "dir": d}


def test_step_by_step_pipeline(tiny_dir, data, tmp_path):
    o = tmp_path
    assert _run("sft", "--model", tiny_dir, "--data", data["sft"], "--out", o / "sft", "--epochs", 2,
                "--batch-size", 3, "--lr", 1e-3, *COMMON) == 0
    m1 = o / "sft" / "model"
    assert (m1 / "config.json").is_file() and (o / "sft" / "results.json").is_file()
    assert _run("sample", "--model", m1, "--prompts", data["pool"], "--n", 4, "--temperature", 1.0,
                "--max-new-tokens", 3, "--out", o / "s", *COMMON) == 0
    samples = _read(o / "s" / "samples.jsonl")
    assert len(samples) >= 2 and all(len(s["responses"]) >= 2 for s in samples)
    assert {s["id"] for s in samples} <= {f"q{i}" for i in range(6)}
    assert _run("reward", "--model", m1, "--ref", tiny_dir, "--samples", o / "s" / "samples.jsonl",
                "--out", o / "rc", *COMMON) == 0
    assert _run("reward", "--model", tiny_dir, "--normalize", "--samples", o / "s" / "samples.jsonl",
                "--out", o / "rp", *COMMON) == 0
    cur = _read(o / "rc" / "rewards.jsonl")
    assert [r["id"] for r in cur] == [s["id"] for s in samples]
    assert _run("consistency", "--samples", o / "s" / "samples.jsonl", "--cur", o / "rc" / "rewards.jsonl",
                "--prev", o / "rp" / "rewards.jsonl", "--out", o / "c", "--quiet") == 0
    cons = _read(o / "c" / "consistency.jsonl")
    assert all(0 <= r["c"] <= 1 for r in cons)
    pairs = _read(o / "c" / "pairs.jsonl")
    assert pairs and {"prompt", "chosen", "rejected", "c"} <= set(pairs[0])
    for mode in ("avg", "dyn"):
        assert _run("dpo", "--model", m1, "--pairs", o / "c" / "pairs.jsonl", "--mode", mode, "--lr", 1e-3,
                    "--batch-size", 2, "--out", o / f"dpo-{mode}", *COMMON) == 0
        res = json.loads((o / f"dpo-{mode}" / "results.json").read_text())
        assert res["stage"]["steps"] >= 1
    avg = json.loads((o / "dpo-avg" / "results.json").read_text())["c_mean"]
    assert avg == pytest.approx(json.loads((o / "c" / "results.json").read_text())["consistency"]["mean"])


def _interrupt_after(monkeypatch, n):
    calls = {"n": 0}
    orig = torch.optim.AdamW.step

    def step(self, *a, **k):
        calls["n"] += 1
        if calls["n"] > n:
            raise KeyboardInterrupt
        return orig(self, *a, **k)

    monkeypatch.setattr(torch.optim.AdamW, "step", step)


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(Path(folder) / "model.safetensors"))


@pytest.mark.parametrize("cmd", ["sft", "dpo"])
def test_resume_after_an_interruption_gives_the_uninterrupted_result(cmd, tiny_dir, data, tmp_path, monkeypatch):
    if cmd == "sft":
        args = ["sft", "--model", tiny_dir, "--data", data["sft"], "--epochs", 3, "--batch-size", 2, "--lr", 1e-3]
    else:
        pairs = _jsonl(tmp_path / "pairs.jsonl", [{"prompt": f"{i}=", "chosen": str(i), "rejected": str(i + 3),
                                                   "c": 0.5 + i / 20} for i in range(6)])
        args = ["dpo", "--model", tiny_dir, "--pairs", pairs, "--mode", "dyn", "--epochs", 3, "--batch-size", 2,
                "--lr", 1e-3]
    args += ["--checkpoint-every", 2, "--lr-scheduler", "cosine", *COMMON]
    assert _run(*args, "--out", tmp_path / "full") == 0
    with monkeypatch.context() as m:
        _interrupt_after(m, 5)
        assert _run(*args, "--out", tmp_path / "cut") == 130
    assert (tmp_path / "cut" / "checkpoint" / "trainer_state.json").is_file()
    assert _run(*args, "--out", tmp_path / "cut", "--resume") == 0
    full, resumed = _weights(tmp_path / "full" / "model"), _weights(tmp_path / "cut" / "model")
    for k in full:
        torch.testing.assert_close(resumed[k], full[k], atol=1e-6, rtol=1e-5)
    assert not (tmp_path / "cut" / "checkpoint").exists()


def test_loop_resume_restarts_at_the_first_unfinished_round(tiny_dir, data, tmp_path):
    pool = _jsonl(tmp_path / "pool.jsonl", [{"prompt": f"{i}*{i}="} for i in range(8)])
    args = ["loop", "--model", tiny_dir, "--sft-data", data["sft"], "--prompts", pool, "--iterations", 2,
            "--n-samples", 3, "--temperature", 1.0, "--max-new-tokens", 2, "--lr", 1e-3, "--sft-lr", 1e-3,
            "--sft-epochs", 1, "--batch-size", 2, "--method", "dyn", "--out", tmp_path / "loop", *COMMON]
    assert _run(*args) == 0
    r1, r2 = tmp_path / "loop" / "round_1", tmp_path / "loop" / "round_2"
    assert (r1 / "report.json").is_file() and (r2 / "report.json").is_file()
    stamp = {f.name: f.stat().st_mtime_ns for f in r1.iterdir() if f.is_file()}
    samples2 = (r2 / "samples.jsonl").read_text()
    (r2 / "report.json").unlink()  # round 2 "crashed" after sampling
    assert _run(*args, "--resume") == 0
    assert {f.name: f.stat().st_mtime_ns for f in r1.iterdir() if f.is_file()} == stamp  # round 1 untouched
    assert (r2 / "samples.jsonl").read_text() == samples2  # round 2's samples reused
    reports = json.loads((tmp_path / "loop" / "reports.json").read_text())
    assert [r["iteration"] for r in reports] == [1, 2]
    assert reports[0]["consistency"]["n"] >= 2


def _tear(path):
    """What a crash mid-write leaves: the first half of the file."""
    data = path.read_bytes()
    path.write_bytes(data[: max(1, len(data) // 2)])


def test_dpo_resume_from_a_torn_checkpoint_is_a_clean_error(tiny_dir, tmp_path, monkeypatch, capsys):
    import shutil

    pairs = _jsonl(tmp_path / "pairs.jsonl", [{"prompt": f"{i}=", "chosen": str(i), "rejected": str(i + 3),
                                               "c": 0.5 + i / 20} for i in range(6)])
    args = ["dpo", "--model", tiny_dir, "--pairs", pairs, "--mode", "dyn", "--epochs", 3, "--batch-size", 2,
            "--lr", 1e-3, "--checkpoint-every", 2, *COMMON]
    with monkeypatch.context() as m:
        _interrupt_after(m, 3)
        assert _run(*args, "--out", tmp_path / "cut") == 130
    cut = tmp_path / "cut"
    assert (cut / "checkpoint" / "trainer_state.json").is_file() and (cut / "ref_logps.pt").is_file()
    cases = {"checkpoint/trainer_state.json": "corrupt or torn", "checkpoint/model/model.safetensors": "corrupt or torn",
             "checkpoint/optimizer.pt": "corrupt or torn", "checkpoint/scheduler.pt": "corrupt or torn",
             "ref_logps.pt": "corrupt or torn"}
    for k, (name, words) in enumerate(cases.items()):
        d = tmp_path / f"case{k}"
        shutil.copytree(cut, d)
        _tear(d / name)
        capsys.readouterr()
        assert _run(*args, "--out", d, "--resume") == 2, name
        err = capsys.readouterr().err
        assert words in err and Path(name).name in err and "Traceback" not in err, (name, err)
    # a state file that parses but is not a trainer state; reference log-probs of the wrong shape
    d = tmp_path / "bad-state"
    shutil.copytree(cut, d)
    (d / "checkpoint" / "trainer_state.json").write_text(json.dumps({"global_step": "2"}))
    assert _run(*args, "--out", d, "--resume") == 2
    assert "not a trainer state" in capsys.readouterr().err
    d = tmp_path / "bad-ref"
    shutil.copytree(cut, d)
    torch.save(torch.zeros(5, 2, dtype=torch.float64), d / "ref_logps.pt")
    assert _run(*args, "--out", d, "--resume") == 2
    err = capsys.readouterr().err
    assert "(6, 2) reference log-probs" in err and "Traceback" not in err
    # the untouched checkpoint still resumes
    assert _run(*args, "--out", cut, "--resume") == 0


def test_loop_resume_from_torn_round_files_is_a_clean_error(tiny_dir, data, tmp_path, capsys):
    import shutil

    pool = _jsonl(tmp_path / "pool.jsonl", [{"prompt": f"{i}*{i}="} for i in range(8)])
    args = ["loop", "--model", tiny_dir, "--sft-data", data["sft"], "--prompts", pool, "--iterations", 2,
            "--n-samples", 3, "--temperature", 1.0, "--max-new-tokens", 2, "--lr", 1e-3, "--sft-lr", 1e-3,
            "--sft-epochs", 1, "--batch-size", 2, "--method", "dyn", *COMMON]
    done = tmp_path / "loop"
    assert _run(*args, "--out", done) == 0

    def case(name, edit, words):
        d = tmp_path / name
        shutil.copytree(done, d)
        edit(d)
        capsys.readouterr()
        assert _run(*args, "--out", d, "--resume") == 2, name
        err = capsys.readouterr().err
        assert all(w in err for w in words) and "Traceback" not in err, (name, err)

    case("report", lambda d: _tear(d / "round_2" / "report.json"), ["round_2", "report.json", "corrupt or torn"])
    case("model", lambda d: _tear(d / "round_1" / "dpo" / "model" / "model.safetensors"),
         ["round_1", "cannot be loaded"])

    def torn_logps(d):
        (d / "round_2" / "report.json").unlink()  # round 2 crashed after scoring
        _tear(d / "round_2" / "logps_m0.json")

    case("logps", torn_logps, ["logps_m0.json", "corrupt or torn"])

    def short_logps(d):
        (d / "round_2" / "report.json").unlink()
        (d / "round_2" / "logps_m0.json").write_text("[0.5, 1.0]")

    case("logps-short", short_logps, ["logps_m0.json", "finite log-probabilities"])

    def torn_dpo_checkpoint(d):
        (d / "round_2" / "report.json").unlink()  # round 2 crashed inside its DPO stage
        (d / "round_2" / "dpo" / "stage.json").unlink()
        ck = d / "round_2" / "dpo" / "checkpoint"
        ck.mkdir(parents=True)
        (ck / "trainer_state.json").write_text('{"global_step": 1, "epo')

    case("dpo-checkpoint", torn_dpo_checkpoint, ["trainer_state.json", "corrupt or torn"])


# ---- bad input -------------------------------------------------------------------------------


def _err(capsys, *argv):
    code = _run(*argv)
    return code, capsys.readouterr().err


def test_bad_inputs_are_clean_errors(tiny_dir, data, tmp_path, capsys):
    s = _jsonl(tmp_path / "s.jsonl", [{"id": i, "prompt": "x", "responses": ["1", "2"]} for i in ("a", "b")])
    r = _jsonl(tmp_path / "r.jsonl", [{"id": "a", "rewards": [0, 1]}])
    code, err = _err(capsys, "consistency", "--samples", s, "--cur", r, "--out", tmp_path / "o", "--quiet")
    assert code == 2 and "sample id 'b'" in err and "Traceback" not in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "prompt": "x", "responses": ["1", "2"]}\n{oops\n')
    code, err = _err(capsys, "reward", "--model", tiny_dir, "--samples", bad, "--out", tmp_path / "o2", *COMMON)
    assert code == 2 and "bad.jsonl:2" in err
    one = _jsonl(tmp_path / "one.jsonl", [{"id": "a", "prompt": "x", "responses": ["1"]}])
    code, err = _err(capsys, "reward", "--model", tiny_dir, "--samples", one, "--out", tmp_path / "o3", *COMMON)
    assert code == 2 and "at least 2 responses" in err
    p = _jsonl(tmp_path / "p.jsonl", [{"prompt": "x", "chosen": "a", "rejected": "b", "c": 1.3}])
    code, err = _err(capsys, "dpo", "--model", tiny_dir, "--pairs", p, "--out", tmp_path / "o4", *COMMON)
    assert code == 2 and "'c'" in err and "[0, 1]" in err
    code, err = _err(capsys, "reward", "--model", tmp_path / "nope", "--samples", s, "--out", tmp_path / "o5",
                     *COMMON)
    assert code == 2 and "nope" in err
    for flags, word in ((("--n", 1), "n"), (("--temperature", -1), "temperature"), (("--top-p", 1.5), "top_p")):
        code, err = _err(capsys, "sample", "--model", tiny_dir, "--prompts", data["pool"], *flags,
                         "--out", tmp_path / "o6", *COMMON)
        assert code == 2 and word in err
    code, err = _err(capsys, "dpo", "--model", tiny_dir, "--pairs", p, "--beta", 0, "--out", tmp_path / "o7", *COMMON)
    assert code == 2 and "beta" in err
    code, err = _err(capsys, "loop", "--n-samples", 1, "--task", "addition", "--out", tmp_path / "o8", *COMMON)
    assert code == 2 and "n_samples" in err


# ---- server backend --------------------------------------------------------------------------


class _Stub(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)  # type: ignore[attr-defined]
        k = len(self.server.requests)  # type: ignore[attr-defined]
        text = f" answer {k}" if k % 4 else " "  # every 4th completion is empty
        out = {"id": "x", "object": "text_completion", "created": 0, "model": body["model"],
               "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}]}
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


def test_sample_through_an_openai_compatible_server(data, tmp_path):
    pytest.importorskip("openai")
    srv = HTTPServer(("127.0.0.1", 0), _Stub)
    srv.requests = []
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        code = _run("sample", "--backend", "openai-completions", "--base-url",
                    f"http://127.0.0.1:{srv.server_port}/v1", "--model", "served-tiny", "--prompts", data["pool"],
                    "--n", 3, "--out", tmp_path / "s", "--quiet")
    finally:
        srv.shutdown()
        th.join(5)
    assert code == 0
    assert len(srv.requests) == 18 and all("seed" not in r for r in srv.requests)  # 6 prompts x N=3
    assert srv.requests[0]["temperature"] == 0.8 and srv.requests[0]["top_p"] == 0.95
    samples = _read(tmp_path / "s" / "samples.jsonl")
    assert all(all(x.strip() for x in s["responses"]) for s in samples)  # empty completions dropped


# ---- evaluate, help --------------------------------------------------------------------------


@pytest.mark.realdata
def test_evaluate_gsm8k_on_the_mirror(tiny_dir, tmp_path, monkeypatch):
    import os

    if not any((Path(r) / "cream" / "gsm8k_test.jsonl").is_file() for r in os.environ.get("ICLR25_DATA", "").split(":") if r):
        pytest.skip("mirrored file cream/gsm8k_test.jsonl not found under ICLR25_DATA")
    assert _run("evaluate", "--model", tiny_dir, "--task", "gsm8k", "--limit", 3, "--max-new-tokens", 4,
                "--out", tmp_path / "e", *COMMON) == 0
    res = json.loads((tmp_path / "e" / "results.json").read_text())
    assert res["metrics"]["n"] == 3 and 0 <= res["metrics"]["accuracy"] <= 1
    assert len(_read(tmp_path / "e" / "predictions.jsonl")) == 3
    code = _run("evaluate", "--model", tiny_dir, "--task", "gsm8k", "--limit", 3, "--max-new-tokens", 4000,
                "--out", tmp_path / "e2", *COMMON)
    assert code == 2  # longer than the model's context: a clean error


def test_help_is_light_and_lists_every_command():
    code = ("import sys; from iclr25.cream.cli import main; rc = main(['--help']); "
            "assert rc == 0; bad = [m for m in ('torch', 'transformers', 'accelerate', 'peft') if m in sys.modules]; "
            "assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for cmd in ("sft", "sample", "reward", "consistency", "dpo", "loop", "evaluate", "reproduce", "demo"):
        assert cmd in r.stdout


@pytest.mark.parametrize("cmd", ["sft", "dpo", "loop", "reproduce"])
def test_subcommand_help(cmd, capsys):
    assert main([cmd, "--help"]) == 0
    out = capsys.readouterr().out
    assert "--out" in out and ("--resume" in out or cmd == "reproduce")


@pytest.mark.slow
def test_accelerate_launch_two_cpu_processes_shards_data_and_syncs_gradients(tiny_dir, tmp_path):
    """`accelerate launch` with 2 CPU processes (DDP/gloo) on batch b equals one process on batch 2b:
    the two processes take alternate batches of one global order and average their gradients."""
    import shutil

    from iclr25.cream import accelerate_config_path

    exe = shutil.which("accelerate", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("accelerate launcher not installed")
    pairs = _jsonl(tmp_path / "pairs.jsonl", [{"prompt": f"{i}=", "chosen": str(i), "rejected": str(i + 5),
                                               "c": 0.6 + i / 40} for i in range(8)])
    common = ["--model", str(tiny_dir), "--pairs", str(pairs), "--mode", "dyn", "--epochs", "2", "--lr", "1e-3",
              "--lr-scheduler", "constant", "--warmup-ratio", "0", "--device", "cpu", "--quiet", "--threads", "1"]
    r = subprocess.run([exe, "launch", "--config_file", str(accelerate_config_path("multi_cpu")), "-m", "iclr25.cream",
                        "dpo", *common, "--batch-size", "2", "--out", str(tmp_path / "ddp")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert main(["dpo", *common, "--batch-size", "4", "--out", str(tmp_path / "one")]) == 0
    ddp = json.loads((tmp_path / "ddp" / "results.json").read_text())["stage"]
    assert ddp["steps"] == 4  # 8 pairs / (2 processes x 2) per epoch, 2 epochs
    a, b = _weights(tmp_path / "ddp" / "model"), _weights(tmp_path / "one" / "model")
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=2e-5, rtol=1e-4)
