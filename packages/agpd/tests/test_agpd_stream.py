"""Streamed (DataLoader) gradient extraction, AMP handling, the ImageFolder / torchvision loader and
the ``detect-folder`` command (a tiny ImageFolder written to tmp_path; no downloads)."""

import json

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from iclr25.agpd import AGPD
from iclr25.agpd.gradients import (
    activation_gradients,
    autocast_context,
    penultimate_features,
    predict,
    stream_gradients,
)
from iclr25.agpd.models import candidate_layers, small_preact_cnn


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _net_and_data(n=70, k=4, c=1, side=8, seed=0):
    torch.manual_seed(seed)
    net = small_preact_cnn(k, c, widths=(8, 16), num_blocks=(1, 1))
    x = torch.rand(n, c, side, side)
    y = torch.arange(n) % k
    return net, x, y


def test_tensor_and_dataloader_paths_give_identical_gradients():
    net, x, y = _net_and_data()
    layers = candidate_layers(net)
    ref = activation_gradients(net, x, y, layers, batch_size=16)
    dl = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=False)
    got = activation_gradients(net, dl, None, layers)
    gen = activation_gradients(net, ((x[i:i + 9], y[i:i + 9]) for i in range(0, len(x), 9)), None, layers)
    for n in layers:
        assert got[n].shape == (len(x), ref[n].shape[1])
        assert torch.equal(got[n], ref[n])
        torch.testing.assert_close(gen[n], ref[n], rtol=1e-5, atol=1e-7)  # other batch size, same math
    p = stream_gradients(net, dl, layers, head="linear")
    assert torch.equal(p.labels, y) and torch.equal(p.preds, predict(net, x))
    torch.testing.assert_close(p.features, penultimate_features(net, x))
    assert torch.equal(predict(net, dl), predict(net, x))
    torch.testing.assert_close(penultimate_features(net, dl), penultimate_features(net, x))


def test_detect_on_loaders_matches_tensors():
    net, x, y = _net_and_data(n=80)
    xc, yc = torch.rand(12, 1, 8, 8), torch.arange(12) % 4
    det = AGPD(net)
    a = det.detect(x, y, xc, yc, batch_size=32, num_classes=4)
    b = det.detect(DataLoader(TensorDataset(x, y), batch_size=32), None, DataLoader(TensorDataset(xc, yc), batch_size=5),
                   None, num_classes=4)
    assert torch.equal(a.poison_mask, b.poison_mask) and a.target_classes == b.target_classes
    torch.testing.assert_close(a.rho, b.rho)


def test_stream_errors_and_amp_off_on_cpu():
    net, x, y = _net_and_data(n=8)
    layers = candidate_layers(net)
    with pytest.raises(ValueError, match="shuffle=False"):
        activation_gradients(net, DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True), None, layers)
    with pytest.raises(ValueError, match="y=None"):
        activation_gradients(net, DataLoader(TensorDataset(x, y)), y, layers)
    with pytest.raises(ValueError, match="no labels"):
        activation_gradients(net, [x], None, layers)
    with pytest.raises(ValueError, match="amp"):
        activation_gradients(net, x, y, layers, amp="int8")
    ctx, scale = autocast_context(torch.device("cpu"), "fp16")
    assert scale == 1.0 and type(ctx).__name__ == "nullcontext"
    ref = activation_gradients(net, x, y, layers)
    for amp in ("bf16", "fp16"):  # off on CPU: exact
        assert all(torch.equal(v, ref[k]) for k, v in activation_gradients(net, x, y, layers, amp=amp).items())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_amp_on_cuda_close_to_float32():
    net, x, y = _net_and_data(n=64, c=3, side=16)
    net = net.cuda()
    layers = candidate_layers(net)
    ref = activation_gradients(net, x, y, layers)
    for amp in ("bf16", "fp16"):
        got = activation_gradients(net, x, y, layers, amp=amp)
        for n in layers:
            cos = torch.nn.functional.cosine_similarity(got[n], ref[n], dim=1)
            assert cos.min() > 0.95, (amp, n, float(cos.min()))


def _write_folder(root, x, y):
    Image = pytest.importorskip("PIL.Image")
    import numpy as np

    for i, (img, k) in enumerate(zip(x, y.tolist())):
        d = root / f"c{k}"
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray((img[0].numpy() * 255).round().astype(np.uint8), mode="L").save(d / f"{i:04d}.png")


def test_image_folder_loader_and_detect_folder_cli(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torchvision")
    from iclr25.agpd.cli import main
    from iclr25.agpd.train import save_checkpoint
    from iclr25.agpd.vision import image_folder, make_loader, sample_paths

    net, x, y = _net_and_data(n=40)
    x = (x * 255).round() / 255  # what PNG round-trips exactly
    order = torch.argsort(y * 1000 + torch.arange(len(y)))  # ImageFolder order: class folder, then file name
    _write_folder(tmp_path / "train", x, y)
    xc, yc = x[:8], y[:8]
    _write_folder(tmp_path / "clean", xc, yc)
    ds = image_folder(tmp_path / "train", channels=1)
    assert ds.classes == ["c0", "c1", "c2", "c3"] and len(ds) == 40
    assert sample_paths(ds)[0].endswith("0000.png")
    layers = candidate_layers(net)
    got = activation_gradients(net, make_loader(ds, 16), None, layers)
    ref = activation_gradients(net, x[order], y[order], layers)
    for n in layers:
        torch.testing.assert_close(got[n], ref[n], rtol=1e-4, atol=1e-6)
    with pytest.raises(FileNotFoundError, match="not a folder"):
        image_folder(tmp_path / "missing")
    save_checkpoint(tmp_path / "model" / "model.pt", net,
                    meta={"model": "small", "num_classes": 4, "in_channels": 1})
    torch.save(net.state_dict(), tmp_path / "sd.pt")
    (tmp_path / "truth.txt").write_text("\n".join("1" if i % 7 == 0 else "0" for i in range(40)) + "\n")
    common = ["--data", str(tmp_path / "train"), "--clean", str(tmp_path / "clean"), "--channels", "1",
              "--out", str(tmp_path / "o"), "--quiet"]
    assert main(["detect-folder", *common, "--model", str(tmp_path / "sd.pt")]) != 0
    assert "--arch" in capsys.readouterr().err
    from iclr25.agpd import pipeline

    # the tiny test net is the 'small' class with narrower widths
    monkeypatch.setattr(pipeline, "build_model",
                        lambda kind, k, c: small_preact_cnn(k, c, widths=(8, 16), num_blocks=(1, 1)))
    rc = main(["detect-folder", *common, "--model", str(tmp_path / "model"), "--batch-size", "16",
               "--truth", str(tmp_path / "truth.txt")])
    assert rc == 0, capsys.readouterr().err
    rc = main(["detect-folder", *common, "--model", str(tmp_path / "sd.pt"), "--arch", "small", "--num-classes", "4",
               "--batch-size", "16", "--truth", str(tmp_path / "truth.txt")])
    assert rc == 0, capsys.readouterr().err
    out = json.loads((tmp_path / "o" / "detection.json").read_text())
    assert out["n"] == 40 and out["classes"] == ["c0", "c1", "c2", "c3"] and "TPR" in out["metrics"]
    mask = (tmp_path / "o" / "poison_mask.txt").read_text().split()
    flagged = (tmp_path / "o" / "flagged.txt").read_text().splitlines()
    assert len(mask) == 40 and len(flagged) == mask.count("1")


def test_detect_folder_corrupt_image_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torchvision")
    from iclr25.agpd import pipeline
    from iclr25.agpd.cli import main
    from iclr25.agpd.train import save_checkpoint

    net, x, y = _net_and_data(n=40)
    _write_folder(tmp_path / "train", x, y)
    _write_folder(tmp_path / "clean", x[:8], y[:8])
    (tmp_path / "train" / "c1" / "broken.png").write_text("not an image")
    monkeypatch.setattr(pipeline, "build_model",
                        lambda kind, k, c: small_preact_cnn(k, c, widths=(8, 16), num_blocks=(1, 1)))
    save_checkpoint(tmp_path / "model" / "model.pt", net, meta={"model": "small", "num_classes": 4, "in_channels": 1})
    rc = main(["detect-folder", "--data", str(tmp_path / "train"), "--clean", str(tmp_path / "clean"),
               "--channels", "1", "--model", str(tmp_path / "model"), "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "broken.png" in err and "Traceback" not in err


def test_vision_needs_the_extra_and_never_downloads(tmp_path, monkeypatch):
    import sys

    from iclr25.agpd import vision

    monkeypatch.setitem(sys.modules, "torchvision", None)
    with pytest.raises(ImportError, match=r"iclr25-agpd\[vision\]"):
        vision.image_folder(tmp_path)
    monkeypatch.undo()
    pytest.importorskip("torchvision")
    with pytest.raises(ValueError, match="unknown torchvision"):
        vision.torchvision_dataset("imagenet-xl", tmp_path)
    with pytest.raises(FileNotFoundError, match="never downloads"):
        vision.torchvision_dataset("cifar10", tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("text, needle", [("0\n2\n", "line 2: '2'"), ("0\nyes\n", "line 2: 'yes'"),
                                          ("0\n1\n", "2 entries but the data set has 12 images")])
def test_detect_folder_bad_truth_file_is_checked_before_detection(tmp_path, capsys, text, needle):
    """--truth used to be read after the whole detection: a '2' was silently taken as poisoned (bool),
    a word gave int()'s bare message without the file's name. Now each line must be 0 or 1, and the
    file is checked (values and length) before any gradient is computed."""
    pytest.importorskip("torchvision")
    from iclr25.agpd.cli import main

    net, x, y = _net_and_data(n=12)
    _write_folder(tmp_path / "train", x, y)
    (tmp_path / "truth.txt").write_text(text)
    rc = main(["detect-folder", "--data", str(tmp_path / "train"), "--clean", str(tmp_path / "train"),
               "--channels", "1", "--model", str(tmp_path / "no-model.pt"), "--truth", str(tmp_path / "truth.txt"),
               "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "truth.txt" in err and "Traceback" not in err
