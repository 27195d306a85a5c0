"""Unit tests: shapes, gradients, checkpoints, bad input, equivalences."""

import math

import numpy as np
import pytest
import torch

from iclr25.wm_transfer.attack import transfer_attack, whitebox_attack
from iclr25.wm_transfer.baselines import POST_PROCESSING, match_quality, post_process
from iclr25.wm_transfer.checkpoint import (
    DecoderCheckError,
    check_decoders,
    load_watermark_model,
    save_watermark_model,
)
from iclr25.wm_transfer.config import check_attack_params
from iclr25.wm_transfer.data import load_images, load_npz_images
from iclr25.wm_transfer.detect import double_tail_threshold, evasion_rate, evasion_summary
from iclr25.wm_transfer.models import (
    CallableDecoder,
    Discriminator,
    HiddenConfig,
    HiddenDecoder,
    HiddenEncoder,
    ResNetDecoder,
    WatermarkModel,
    check_images,
    check_messages,
)
from iclr25.wm_transfer.noise import NOISE_KINDS, jpeg_approx, random_noise_layer
from iclr25.wm_transfer.pipeline import surrogate_subsets
from iclr25.wm_transfer.train import TrainSettings, train_watermark_model


def _x(b=4, s=32, seed=0):
    return torch.rand(b, 3, s, s, generator=torch.Generator().manual_seed(seed)) * 2 - 1


@pytest.mark.parametrize("kw", [dict(), dict(message_embed="broadcast", decoder_head="pool", residual=False,
                                             dec_strides=0), dict(decoder="resnet", dec_ch=8)])
def test_model_shapes_and_range(kw):
    cfg = HiddenConfig(n_bits=12, **kw)
    m = WatermarkModel(cfg).eval()
    x, w = _x(), torch.randint(0, 2, (4, 12)).float()
    xw = m.embed(x, w)
    assert xw.shape == x.shape
    if cfg.residual:
        assert float(xw.detach().abs().max()) <= 1.0
    assert m.decode(xw).shape == (4, 12)
    assert Discriminator(cfg)(x).shape == (4, 1)


def test_official_config_and_resnet_decoder():
    cfg = HiddenConfig.official(30)
    assert (cfg.H, cfg.enc_blocks, cfg.dec_blocks, cfg.enc_ch, cfg.message_embed, cfg.decoder_head) == \
        (128, 4, 7, 64, "broadcast", "pool")
    assert HiddenConfig.official(30, "resnet").enc_blocks == 7
    assert ResNetDecoder(HiddenConfig(n_bits=5, dec_ch=4, decoder="resnet"))(_x(2)).shape == (2, 5)


def test_bad_images_and_messages():
    cfg = HiddenConfig(n_bits=8)
    with pytest.raises(ValueError, match="4-D"):
        check_images(torch.zeros(3, 32, 32), cfg)
    with pytest.raises(ValueError, match="3 channels"):
        check_images(torch.zeros(1, 1, 32, 32), cfg)
    with pytest.raises(ValueError, match="16x16.*32x32"):
        check_images(torch.zeros(1, 3, 16, 16), cfg)
    with pytest.raises(ValueError, match="uint8"):
        check_images(torch.full((1, 3, 32, 32), 200.0), cfg)
    with pytest.raises(ValueError, match="dtype"):
        check_images(torch.zeros(1, 3, 32, 32, dtype=torch.uint8), cfg)
    bad = torch.zeros(1, 3, 32, 32)
    bad[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        check_images(bad, cfg)
    with pytest.raises(ValueError, match="n_bits=8"):
        check_messages(torch.zeros(2, 7), 8)
    with pytest.raises(ValueError, match="0 or 1"):
        check_messages(torch.full((2, 8), 0.5), 8)


def test_noise_layers_differentiable_and_in_range():
    x = _x(2).requires_grad_(True)
    layer = random_noise_layer(NOISE_KINDS)
    g = torch.Generator().manual_seed(0)
    for choice in layer.choices:
        y = choice(x, g)
        assert y.shape == x.shape and float(y.detach().min()) >= -1 - 1e-6 and float(y.detach().max()) <= 1 + 1e-6
        (gr,) = torch.autograd.grad(y.sum(), x)
        assert torch.isfinite(gr).all()
    y = jpeg_approx(x, 50)
    (gr,) = torch.autograd.grad(y.sum(), x)
    assert float(gr.abs().sum()) > 0
    with pytest.raises(ValueError, match="unknown noise"):
        random_noise_layer(["fog"])


def test_detector_errors():
    with pytest.raises(ValueError, match=r"fpr must be in \(0, 1\)"):
        double_tail_threshold(20, 0.0)
    with pytest.raises(ValueError, match="smallest reachable rate is 0.0001221"):
        double_tail_threshold(14, 1e-4)
    assert double_tail_threshold(15, 1e-4) == (15, 0)


def test_evasion_undefined_without_detections():
    before = torch.tensor([False, False])
    assert math.isnan(evasion_rate(before, before))
    s = evasion_summary(before, before)
    assert s["evasion_rate"] is None and "no image was detected" in s["evasion_note"]
    assert evasion_rate(torch.tensor([True, True, False]), torch.tensor([False, True, False])) == 0.5


def test_attack_parameter_errors():
    ok = dict(alpha=1.0, r=0.5, eps=0.2, max_iters=10, ssim_stop=0.9)
    for k, v, msg in [("alpha", 0.0, "alpha"), ("r", -1.0, "r "), ("eps", 1.0, "eps"), ("max_iters", 0, "max_iters"),
                      ("ssim_stop", 0.0, "ssim_stop"), ("alpha", float("nan"), "alpha")]:
        with pytest.raises(ValueError, match=msg):
            check_attack_params(**dict(ok, **{k: v}))
    with pytest.raises(ValueError, match="at least one surrogate"):
        transfer_attack(_x(), [], **ok)
    with pytest.raises(ValueError, match="update"):
        check_attack_params(**ok, update="adam")


def test_attack_respects_bounds_and_active_set_equivalence():
    torch.manual_seed(0)
    surs = [WatermarkModel(HiddenConfig(n_bits=16)).eval() for _ in range(2)]
    xw = _x(6) * 0.9
    kw = dict(alpha=0.5, r=0.05, eps=0.2, max_iters=15, ssim_stop=0.9)
    a = transfer_attack(xw, surs, **kw)
    b = transfer_attack(xw, surs, active_set=False, **kw)
    assert float(a.delta.flatten(1).abs().max()) <= 0.05 + 1e-6
    assert float((a.x_adv - b.x_adv).abs().max()) <= 1e-5
    assert torch.equal(a.iterations, b.iterations) and a.stop_reason == b.stop_reason
    # the per-image box: x stays inside [min, max] of the watermarked image
    lo = xw.flatten(1).min(1).values
    assert bool((a.x_adv.flatten(1).min(1).values >= lo - 1e-6).all())
    assert set(a.stop_reason) <= {"bit_acc", "ssim", "max_iters"}
    assert a.iterations.max() <= 15


def test_whitebox_eps_zero_flips_more_bits_than_eps_stop():
    torch.manual_seed(1)
    m = WatermarkModel(HiddenConfig(n_bits=16)).eval()
    xw = _x(4)
    r02 = whitebox_attack(xw, m, alpha=0.5, r=0.5, eps=0.2, max_iters=60, ssim_stop=0.5)
    r0 = whitebox_attack(xw, m, alpha=0.5, r=0.5, eps=0.0, max_iters=60, ssim_stop=0.5)
    assert float(r0.surrogate_bit_acc.mean()) >= float(r02.surrogate_bit_acc.mean())
    assert all(s in ("bit_acc", "ssim", "max_iters") for s in r02.stop_reason)
    hit = [a for a, s in zip(r02.surrogate_bit_acc.tolist(), r02.stop_reason) if s == "bit_acc"]
    assert all(a >= 0.8 for a in hit)


def test_callable_decoder_in_attack():
    torch.manual_seed(0)
    dec = HiddenDecoder(HiddenConfig(n_bits=10)).eval()
    wrapped = CallableDecoder(lambda x: dec(x), n_bits=10, H=32, W=32)
    r = transfer_attack(_x(2), [wrapped], alpha=0.5, r=0.5, eps=0.2, max_iters=3, ssim_stop=0.9)
    assert r.x_adv.shape == (2, 3, 32, 32)
    bad = CallableDecoder(lambda x: dec(x)[:, :3], n_bits=10, H=32, W=32)
    with pytest.raises(ValueError, match="expected"):
        bad.decode(_x(1))


def test_match_quality_reaches_target_from_above():
    x = _x(4) * 0.8
    for kind in POST_PROCESSING:
        mr = match_quality(x, kind, 0.9, iters=12)
        assert mr.ssim >= 0.9 - 1e-6
        assert mr.kind == kind
    with pytest.raises(ValueError, match="strength"):
        post_process(x, "blur", -1.0)
    with pytest.raises(ValueError, match="unknown post-processing"):
        post_process(x, "sepia", 0.1)


def test_surrogate_subsets():
    assert surrogate_subsets(3, 2, 3) == [(0, 1), (2, 0), (1, 2)]
    assert surrogate_subsets(3, 1, 3) == [(0,), (1,), (2,)]
    subs = surrogate_subsets(5, 4, 3)
    assert len({frozenset(s) for s in subs}) == 3 and all(len(s) == 4 for s in subs)
    with pytest.raises(ValueError):
        surrogate_subsets(2, 3, 1)


def _tiny_trained(tmp_path, epochs=1, **kw):
    cfg = HiddenConfig(H=16, W=16, n_bits=8, enc_ch=8, dec_ch=8, msg_ch=4, msg_grid=4, residual_scale=1.0)
    x = _x(40, 16)
    return cfg, x, train_watermark_model(cfg, x[:32], 0, settings=TrainSettings(epochs=epochs, batch_size=16),
                                         val_images=x[32:], checkpoint=tmp_path / "ep.pt", **kw)


def test_train_checkpoint_roundtrip_and_resume(tmp_path):
    cfg, x, m = _tiny_trained(tmp_path, epochs=2)
    assert m.clean_bit_acc is not None and len(m.train_info["history"]) == 2
    p = save_watermark_model(m, tmp_path / "m.pt", role="target")
    m2 = load_watermark_model(p)
    assert m2.cfg == cfg and torch.equal(m2.message, m.message)
    with torch.no_grad():
        assert torch.allclose(m2.decode(x[:4]), m.decode(x[:4]))
    # resume from epoch 1 reproduces the uninterrupted 2-epoch run exactly
    _, _, m1 = _tiny_trained(tmp_path / "r", epochs=1)
    m1b = train_watermark_model(cfg, x[:32], 0, settings=TrainSettings(epochs=2, batch_size=16), val_images=x[32:],
                                checkpoint=tmp_path / "r" / "ep.pt", resume=True)
    for a, b in zip(m1b.decoder.state_dict().values(), m.decoder.state_dict().values()):
        assert torch.allclose(a.float(), b.float(), atol=1e-6)


def test_checkpoint_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_watermark_model(tmp_path / "nope.pt")
    torch.save({"format_version": 1, "config": {}}, tmp_path / "a.pt")
    with pytest.raises(ValueError, match="missing key"):
        load_watermark_model(tmp_path / "a.pt")
    m = WatermarkModel(HiddenConfig(n_bits=8), message=torch.zeros(8))
    p = save_watermark_model(m, tmp_path / "b.pt")
    st = torch.load(p, weights_only=True)
    st["format_version"] = 99
    torch.save(st, tmp_path / "c.pt")
    with pytest.raises(ValueError, match="unknown format_version 99"):
        load_watermark_model(tmp_path / "c.pt")
    with pytest.raises(FileNotFoundError, match="resume"):
        train_watermark_model(HiddenConfig(n_bits=8), _x(8), 0, checkpoint=tmp_path / "none.pt", resume=True)


def test_hidden_checkpoint_format_loads(tmp_path):
    # a checkpoint laid out as ando-khachatryan/HiDDeN saves it (EncoderDecoder.state_dict())
    cfg = HiddenConfig(H=32, W=32, n_bits=12, enc_blocks=4, enc_ch=8, dec_blocks=3, dec_ch=8, dec_strides=0,
                       message_embed="broadcast", decoder_head="pool", residual=False)
    enc, dec = HiddenEncoder(cfg), HiddenDecoder(cfg)
    sd = {f"encoder.{k}": v for k, v in enc.state_dict().items()} | {f"decoder.{k}": v for k, v in dec.state_dict().items()}
    torch.save({"enc-dec-model": sd, "discrim-model": {}, "epoch": 3}, tmp_path / "hidden.pyt")
    m = load_watermark_model(tmp_path / "hidden.pyt", image_size=32, message=torch.ones(12))
    assert (m.cfg.enc_blocks, m.cfg.dec_blocks, m.cfg.n_bits) == (4, 3, 12)
    x, w = _x(2), torch.ones(2, 12)
    with torch.no_grad():
        assert torch.allclose(m.encoder(x, w), enc.eval()(x, w))


def test_decoder_check_refuses_untrained(tmp_path):
    m = WatermarkModel(HiddenConfig(n_bits=20), message=torch.randint(0, 2, (20,)).float()).eval()
    with pytest.raises(DecoderCheckError, match=r"m0\.pt: clean bit accuracy 0\.\d+ < 0\.9") as e:
        check_decoders({"m0.pt": m}, _x(8))
    assert "m0.pt" in e.value.accuracies


def test_image_loaders(tmp_path):
    u8 = (np.random.default_rng(0).random((3, 32, 32, 3)) * 255).astype(np.uint8)
    np.savez(tmp_path / "a.npz", images=u8, messages=np.ones((3, 20), dtype=np.int64))
    s = load_npz_images(tmp_path / "a.npz")
    assert s.images.shape == (3, 3, 32, 32) and float(s.images.max()) <= 1 and s.messages.shape == (3, 20)
    np.savez(tmp_path / "b.npz", images=np.random.rand(2, 3, 16, 16).astype(np.float32))
    assert load_npz_images(tmp_path / "b.npz", image_size=32).images.shape == (2, 3, 32, 32)
    np.savez(tmp_path / "c.npz", images=np.random.rand(2, 3, 8, 8) * 255)
    with pytest.raises(ValueError, match=r"must be in \[0, 1\]"):
        load_npz_images(tmp_path / "c.npz")
    np.savez(tmp_path / "d.npz", pictures=u8)
    with pytest.raises(ValueError, match="missing key 'images'"):
        load_npz_images(tmp_path / "d.npz")
    np.savez(tmp_path / "e.npz", images=u8, messages=np.full((3, 20), 2))
    with pytest.raises(ValueError, match="0 or 1"):
        load_npz_images(tmp_path / "e.npz")
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_images(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="image folder diffusiondb/x not found"):
        load_images("data:diffusiondb/x")
    PIL = pytest.importorskip("PIL.Image")
    folder = tmp_path / "imgs"
    folder.mkdir()
    PIL.fromarray(np.zeros((40, 60, 3), dtype=np.uint8)).save(folder / "x.png")
    PIL.fromarray(np.full((50, 50, 3), 255, dtype=np.uint8)).save(folder / "y.jpg")
    s = load_images(folder, image_size=32)
    assert s.images.shape == (2, 3, 32, 32) and s.names == ["x.png", "y.jpg"]


def test_data_root_folder(tmp_path, monkeypatch):
    PIL = pytest.importorskip("PIL.Image")
    d = tmp_path / "diffusiondb" / "tiny"
    d.mkdir(parents=True)
    PIL.fromarray(np.zeros((130, 140, 3), dtype=np.uint8)).save(d / "a.png")
    monkeypatch.setenv("ICLR25_DATA", str(tmp_path))
    assert load_images("data:diffusiondb/tiny", image_size=128).images.shape == (1, 3, 128, 128)


@pytest.mark.parametrize("name,cls", [("train-paper.yaml", "TrainConfig"), ("attack-paper.yaml", "AttackConfig"),
                                      ("reproduce-quick.yaml", "ReproduceConfig")])
def test_shipped_configs_parse(name, cls):
    from pathlib import Path

    from iclr25.core.config import config_from_dict, load_config_file
    from iclr25.wm_transfer import config

    values = load_config_file(Path(__file__).parents[1] / "configs" / name)
    extra = {"target": "t.pt", "surrogates": ["s.pt"]} if cls == "AttackConfig" else {}
    config_from_dict(getattr(config, cls), {**values, **extra})


def test_run_comparison_reports_each_row_as_it_finishes():
    import json

    from iclr25.wm_transfer.pipeline import run_comparison

    cfg = HiddenConfig(H=16, W=16, n_bits=8, enc_ch=8, dec_ch=8, msg_ch=4, msg_grid=4, residual_scale=1.0)
    torch.manual_seed(0)
    target, s1, s2 = (WatermarkModel(cfg, message=torch.ones(8)).eval() for _ in range(3))
    x = _x(4, 16)
    w = torch.ones(4, 8)
    snaps = []
    comp = run_comparison(target, [s1, s2], x, w, alpha=0.1, r=0.5, eps=0.2, max_iters=2, ssim_stop=0.9,
                          m_values=(1, 2), n_subsets=1, post_processing=("noise",), fpr=0.05,
                          on_row=lambda c: snaps.append(json.loads(json.dumps(c, default=float))))
    # 2 transfer rows, 4 variants at m = 2, 1 baseline subset (random noise + post-processing), 2 white-box
    assert len(snaps) == 9
    n_transfer = [sum(len(v) for v in s["transfer"].values()) for s in snaps]
    assert n_transfer[:2] == [1, 2] and n_transfer == sorted(n_transfer)
    assert "whitebox" not in snaps[0] and "whitebox_eps0" in snaps[-1]
    assert snaps[-1] == json.loads(json.dumps(comp, default=float))
