"""CLI tests: --help and a tiny convert in a subprocess; the other subcommands in-process."""

import os
import subprocess
import sys

import torch

from iclr25.mgvga.cli import main

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def run(*args, check=True):
    r = subprocess.run([sys.executable, "-m", "iclr25.mgvga", *args], capture_output=True, text=True, env=ENV,
                       timeout=300)
    if check and r.returncode != 0:
        raise AssertionError(f"exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def _aag(tmp_path):
    p = tmp_path / "t.aag"
    p.write_bytes(b"aag 5 3 0 2 2\n2\n4\n6\n8\n11\n8 2 5\n10 8 6\n")
    return p


def test_help_subprocess():
    r = run("--help")
    for sub in ("convert", "pretrain", "probe", "embed", "reproduce", "bench"):
        assert sub in r.stdout


def test_convert_subprocess(tmp_path):
    src = _aag(tmp_path)
    out = tmp_path / "g.pt"
    r = run("convert", "--inputs", str(src), "--out", str(out))
    assert '"ands": 2' in r.stdout
    data = torch.load(out, weights_only=False)
    assert data[0].num_nodes == 9 and data[0].x.tolist() == [0, 0, 0, 2, 2, 1, 1, 3, 3]


def test_subcommand_help(capsys):
    assert main(["pretrain", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--objective" in out and "--resume" in out


def test_embed_in_process(tmp_path, capsys):
    src = _aag(tmp_path)
    emb = tmp_path / "e.pt"
    assert main(["embed", "--inputs", str(src), "--out", str(emb)]) == 0
    e = torch.load(emb, weights_only=False)
    assert e["t"]["nodes"].shape == (9, 64)


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    p = tmp_path / "bad.aag"
    p.write_bytes(b"aag 3 2 0 1 1\n2\n4\n9\n6 2 4\n")
    assert main(["convert", "--inputs", str(p)]) == 2
    err = capsys.readouterr().err
    assert "bad.aag:4" in err and "out of range" in err


def test_pretrain_and_resume(tmp_path, capsys):
    out = tmp_path / "run"
    common = ["pretrain", "--objective", "mgm", "--out", str(out), "--hidden-size", "16", "--num-encoder-layers",
              "2", "--n-synthetic", "10", "--synth-max-width", "3", "--batch-size", "2", "--no-use-mirror"]
    assert main([*common, "--steps", "4", "--checkpoint-every", "2"]) == 0
    assert torch.load(out / "checkpoint.pt", weights_only=False)["step"] == 4
    assert main([*common, "--steps", "6", "--resume"]) == 0
    assert torch.load(out / "checkpoint.pt", weights_only=False)["step"] == 6
