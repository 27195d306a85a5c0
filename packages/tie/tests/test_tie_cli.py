"""The console script: --help without heavy imports, evaluate on users' npz, clean errors."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from iclr25.tie import EmbeddingSet, make_synthetic
from iclr25.tie.cli import main

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _synthetic_npz(tmp_path, with_a=True, **kw):
    d = make_synthetic(0, **kw)
    x = np.concatenate([d.pool_emb, d.test_emb]).astype(np.float32)
    es = EmbeddingSet(image_emb=x, y=np.concatenate([d.pool_y, d.test_y]),
                      split=np.concatenate([np.zeros(d.pool_y.size, int), 2 * np.ones(d.test_y.size, int)]),
                      text_emb_class=d.text_emb_class.astype(np.float32),
                      text_emb_spurious=d.text_emb_spurious.astype(np.float32), attribute_values=np.array([0, 1]),
                      a=np.concatenate([d.pool_a, d.test_a]) if with_a else None,
                      class_names=np.array(["landbird", "waterbird"]))
    return es.save(tmp_path / "emb.npz")


def test_help_imports_nothing_heavy():
    code = ("import sys; from iclr25.tie.cli import main; rc = main(['--help']);"
            "heavy = [m for m in ('torch', 'open_clip', 'transformers', 'PIL', 'timm') if m in sys.modules];"
            "print('HEAVY', heavy); raise SystemExit(rc)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stdout
    for sub in ("train-encoder", "embed", "evaluate", "reproduce", "bench"):
        assert sub in r.stdout
    assert "offline pair" in r.stdout


@pytest.mark.parametrize("sub", ["train-encoder", "embed", "evaluate", "reproduce", "bench"])
def test_subcommand_help(sub, capsys):
    assert main([sub, "--help"]) == 0
    out = capsys.readouterr().out
    assert "--out" in out
    if sub == "embed":
        assert "offline-pair" in out and "never downloaded" in out


def test_version(capsys):
    assert main(["--version"]) == 0
    assert "iclr25-tie 0.1.0" in capsys.readouterr().out


def test_evaluate_users_npz(tmp_path, capsys):
    p = _synthetic_npz(tmp_path)
    out = tmp_path / "ev"
    assert main(["evaluate", "--embeddings", str(p), "--pool-split", "train", "--out", str(out), "--quiet"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert set(res["methods"]) == {"zero_shot", "tie", "tie_star", "projection"}
    assert res["methods"]["tie"]["worst_group"] > res["methods"]["zero_shot"]["worst_group"] + 0.3
    assert res["methods"]["tie"]["per_group"].keys() == {"y0_a0", "y0_a1", "y1_a0", "y1_a1"}
    text = capsys.readouterr().out
    assert "TIE*" in text and text.strip().splitlines()[-1].startswith("evaluate: WGA zero-shot")
    assert (out / "evaluation.md").is_file()


def test_evaluate_errors_are_clean(tmp_path, capsys):
    p = _synthetic_npz(tmp_path, with_a=False)
    assert main(["evaluate", "--embeddings", str(p), "--pool-split", "train", "--mode", "true",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "needs the attribute labels" in err and "Traceback" not in err
    p = _synthetic_npz(tmp_path)
    assert main(["evaluate", "--embeddings", str(p), "--pool-split", "val", "--out", str(tmp_path / "o")]) == 2
    assert "split 'val' (split == 1) is empty" in capsys.readouterr().err
    assert main(["evaluate", "--embeddings", str(tmp_path / "missing.npz"), "--pool-split", "train"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["evaluate", "--embeddings", str(p)]) == 2     # --pool-split is required (explicit)


def test_embed_needs_a_checkpoint_and_prompts(tmp_path, capsys):
    assert main(["embed", "--source", "cifar10-frames", "--out", str(tmp_path / "e")]) == 2
    assert "--checkpoint" in capsys.readouterr().err
    assert main(["embed", "--out", str(tmp_path / "e")]) == 2      # metadata source: inputs checked before the model
    assert "--prompts FILE.json is needed" in capsys.readouterr().err
