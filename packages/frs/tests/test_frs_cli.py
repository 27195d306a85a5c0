"""CLI: --help for every subcommand (one subprocess), clean errors, and a small end-to-end run on a tiny TSV."""

import json
import os
import subprocess
import sys

import pytest

from iclr25.frs.cli import main

SUBS = ["attack", "finetune", "evaluate", "certify", "reproduce", "demo"]


def test_subprocess_help_is_light():
    code = ("import sys, runpy; sys.argv=['iclr25-frs','--help']\n"
            "from iclr25.frs.cli import main\nmain(['--help'])\n"
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, sorted(sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    for s in SUBS:
        assert s in r.stdout


@pytest.fixture
def run(capsys):
    def _run(*args, check=True):
        code = main([str(a) for a in args])
        cap = capsys.readouterr()
        if check and code != 0:
            raise AssertionError(f"exit {code}\n{cap.out}\n{cap.err}")
        return code, cap.out, cap.err
    return _run


@pytest.mark.parametrize("sub", SUBS)
def test_help(sub, run):
    assert "usage" in run(sub, "--help")[1].lower()


@pytest.mark.parametrize("args,match", [
    (["evaluate", "--model", "m", "--w-mid", "0.95"], "w_mid and w_high"),
    (["evaluate", "--model", "m", "--alpha", "0"], "alpha"),
    (["evaluate", "--model", "m", "--k", "0"], "k must be"),
    (["evaluate", "--model", "m", "--iterations", "0"], "iterations"),
    (["evaluate", "--model", "m", "--max-span", "0"], "max_span"),
    (["evaluate", "--model", "m", "--n-random", "0"], "n_random"),
    (["finetune", "--model", "m", "--sigma", "-1"], "sigma"),
    (["finetune", "--model", "m", "--clip-norm", "0"], "clip_norm"),
    (["attack", "--poison-rate", "1.5"], "poison_rate"),
    (["attack", "--trigger", " "], "trigger"),
    (["evaluate", "--model", "/nonexistent/dir/m", "--data", "sst2"], "no such folder"),
])
def test_bad_input_is_a_clean_error(args, match, run):
    code, out, err = run(*args, check=False)
    assert code == 2 and match in err and "Traceback" not in err, err


def test_end_to_end_on_tiny_tsv(tmp_path, tiny_tsv, run):
    a, f = tmp_path / "attack", tmp_path / "ft"
    run("attack", "--data", tiny_tsv, "--n-train", 160, "--d-model", 16, "--d-ff", 32, "--epochs", 2, "--out", a,
        "--quiet", "--device", "cpu")
    assert (a / "model" / "model.safetensors").is_file() and json.loads((a / "poisoned.json").read_text())["indices"]
    code, out, err = run("finetune", "--model", a / "model", "--data", tiny_tsv, "--top-layers", 3, "--out", f,
                         check=False)
    assert code == 2 and "above the model's depth (2 layers)" in err
    run("finetune", "--model", a / "model", "--data", tiny_tsv, "--skip", 160, "--top-layers", 1, "--out", f, "--quiet")
    code, out, _ = run("finetune", "--model", a / "model", "--data", tiny_tsv, "--skip", 160, "--top-layers", 1,
                       "--epochs", 2, "--resume", "--out", f, "--quiet")
    assert "2 epoch(s)" in out
    assert [json.loads(x)["epoch"] for x in (f / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    e = tmp_path / "ev"
    code, out, _ = run("evaluate", "--model", f / "model", "--data", tiny_tsv, "--split", "test", "--k", 4,
                       "--iterations", 4, "--n-clean", 20, "--n-triggered", 10, "--out", e, "--quiet")
    recs = [json.loads(x) for x in (e / "predictions.jsonl").read_text().splitlines()]
    assert len(recs) == 30 and {"abstain", "radius", "p_a_lower", "segment", "trigger_in_segment"} <= set(recs[-1])
    res = json.loads((e / "results.json").read_text())
    assert "abstention_clean" in json.dumps(res) and "N=8" in out
    c = tmp_path / "cert"
    args = ["certify", "--model", f / "model", "--data", tiny_tsv, "--k", 2, "--n-random", 2, "--iterations", 4,
            "--chunk", 4, "--out", c, "--quiet"]
    code, out, _ = run(*args, "--n", 6)
    assert "EVERY text abstains" in out  # N = 4 at alpha 0.05
    code, out, err = run(*args, "--n", 10, check=False)
    assert code == 2 and "--resume" in err
    run(*args, "--n", 10, "--resume")
    lines = [json.loads(x) for x in (c / "certificates.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in lines) == list(range(10)) and all(r["abstain"] for r in lines)
    assert "warnings" in json.dumps(json.loads((c / "results.json").read_text()))
    code, out, _ = run("demo", "--model", f / "model", "--k", 4, "--iterations", 8, "--out", tmp_path / "d", "--text",
                       "the film is very dull and bad")
    assert "MCTS T(x')" in out and "votes" in out
    assert out.count("warning: N = 8 votes") == 1, out  # was printed twice (FRSClassifier and certify)
    assert "at α/C = 0.025: α = 0.05, C = 2 classes" in out  # the printed bound is the α/C one (said α before)


def test_bad_tsv_line_reported(tmp_path, run):
    p = tmp_path / "b.tsv"
    p.write_text("sentence\tlabel\na good one\t1\nbroken line\n")
    code, _, err = run("attack", "--data", p, "--out", tmp_path / "a", check=False)
    assert code == 2 and "b.tsv:3: expected exactly one tab" in err


def test_certify_shards_merge(tmp_path, tiny_tsv, run, monkeypatch):
    """Two launcher ranks (as accelerate launch / torchrun set RANK, WORLD_SIZE) each certify a shard;
    rank 0 merges them. Run one after the other in-process: rank 1 first, then rank 0."""
    a = tmp_path / "a"
    run("attack", "--data", tiny_tsv, "--n-train", 80, "--d-model", 16, "--d-ff", 32, "--epochs", 1, "--out", a, "--quiet")
    args = ["certify", "--model", a / "model", "--data", tiny_tsv, "--k", 4, "--iterations", 4, "--n", 9, "--chunk", 2,
            "--out", tmp_path / "c", "--quiet"]
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in (1, 0):
        monkeypatch.setenv("RANK", str(rank))
        run(*args)
    out = tmp_path / "c"
    assert len((out / "certificates.shard1.jsonl").read_text().splitlines()) == 4
    recs = [json.loads(x) for x in (out / "certificates.jsonl").read_text().splitlines()]
    assert [r["index"] for r in recs] == list(range(9)) and not list(out.glob("*.done"))


def test_certify_two_real_processes(tmp_path, tiny_tsv, run):
    """Two concurrent rank processes (with the RANK / WORLD_SIZE / LOCAL_RANK a launcher such as torchrun
    or accelerate launch sets) certify their shards; rank 0 waits for rank 1 and merges: every text once,
    in order, the shards kept beside the merged file."""
    a = tmp_path / "a"
    run("attack", "--data", tiny_tsv, "--n-train", 80, "--d-model", 16, "--d-ff", 32, "--epochs", 1, "--out", a, "--quiet")
    out = tmp_path / "c"
    cmd = [sys.executable, "-m", "iclr25.frs", "certify", "--model", str(a / "model"), "--data", str(tiny_tsv),
           "--k", "4", "--iterations", "4", "--n", "9", "--chunk", "2", "--out", str(out), "--quiet"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1", "WORLD_SIZE": "2", "RANK": str(rank),
                                   "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2"})
             for rank in (0, 1)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
    recs = [json.loads(x) for x in (out / "certificates.jsonl").read_text().splitlines()]
    assert [r["index"] for r in recs] == list(range(9))
    assert not list(out.glob("*.done"))
    assert sorted(len(f.read_text().splitlines()) for f in out.glob("certificates.shard*.jsonl")) == [4, 5]


def test_evaluate_says_when_the_data_has_fewer_texts_than_asked():
    """--n-clean 300 / --n-triggered 20 on a file with 40 texts (18 non-target) silently used 40 / 18."""
    from iclr25.frs.cli import _fewer_texts

    w = _fewer_texts({"--n-clean": 300, "--n-triggered": 20}, {"--n-clean": 40, "--n-triggered": 18})
    assert w == ["--n-clean 300: the data has only 40 texts; 40 used",
                 "--n-triggered 20: the data has only 18 texts of a class other than --target; 18 used"]
    assert _fewer_texts({"--n-clean": None, "--n-triggered": 0}, {"--n-clean": 40, "--n-triggered": 0}) == []
    assert _fewer_texts({"--n-clean": 40}, {"--n-clean": 40}) == []
