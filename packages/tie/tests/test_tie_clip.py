"""open_clip and Hugging Face CLIP from local folders only (tiny random models saved in tmp dirs),
end to end through ``embed`` (metadata CSV + prompts JSON) and ``evaluate``; no hub access."""

import json

import numpy as np
import pytest

from iclr25.tie.cli import main
from iclr25.tie.encoders import NO_DOWNLOAD, load_hf_clip, load_open_clip


def test_missing_weights_and_folders_say_no_download(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"is not a file.*{NO_DOWNLOAD}"):
        load_open_clip("ViT-L-14", tmp_path / "open_clip_pytorch_model.bin")
    with pytest.raises(ValueError, match=NO_DOWNLOAD):
        load_open_clip("ViT-L-14", None)
    with pytest.raises(FileNotFoundError, match=f"no open_clip_config.json.*{NO_DOWNLOAD}"):
        load_open_clip(model_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match=f"no config.json.*{NO_DOWNLOAD}"):
        load_hf_clip(tmp_path / "clip-vit-large-patch14")
    # a config without weights: open_clip alone would embed with random weights after a mere warning
    (tmp_path / "open_clip_config.json").write_text(json.dumps({"model_cfg": {}}))
    with pytest.raises(FileNotFoundError, match=f"no weights file.*{NO_DOWNLOAD}"):
        load_open_clip(model_dir=tmp_path)


def _images(tmp_path, n=16):
    from PIL import Image

    rng = np.random.default_rng(0)
    (tmp_path / "img").mkdir()
    rows = ["img_id,img_filename,y,split,place"]
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, (40, 36, 3), dtype=np.uint8)).save(tmp_path / "img" / f"{i}.png")
        rows.append(f"{i},img/{i}.png,{i % 2},{0 if i < 8 else 2},{(i // 2) % 2}")
    (tmp_path / "metadata.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "prompts.json").write_text(json.dumps({"waterbirds": {
        "class_prompts": ["a photo of a landbird.", "a photo of a waterbird."],
        "spurious_prompts_by_attribute": {"0": "a photo with a land background", "1": "a photo with a water background"}}}))


def _embed_and_evaluate(tmp_path, enc_args, capsys):
    out = tmp_path / "emb"
    args = ["embed", *enc_args, "--metadata", str(tmp_path / "metadata.csv"), "--prompts", str(tmp_path / "prompts.json"),
            "--prompts-key", "waterbirds", "--out", str(out), "--shard-size", "5", "--batch-size", "4", "--quiet"]
    assert main([*args, "--shard", "0/2"]) == 0
    assert not (out / "embeddings.npz").exists()                    # shards 1, 3 pending
    assert main([*args, "--shard", "1/2"]) == 0
    z = np.load(out / "embeddings.npz")
    assert z["image_emb"].shape[0] == 16 and z["text_emb_spurious"].shape[0] == 2
    assert z["attribute_values"].tolist() == [0, 1] and z["a"].tolist() == [(i // 2) % 2 for i in range(16)]
    capsys.readouterr()
    assert main(["evaluate", "--embeddings", str(out / "embeddings.npz"), "--pool-split", "train",
                 "--out", str(tmp_path / "ev"), "--quiet", "--empty-group", "zero"]) == 0  # random model: â may miss a value
    res = json.loads((tmp_path / "ev" / "results.json").read_text())
    assert set(res["methods"]) == {"zero_shot", "tie", "tie_star", "projection"}
    return z


@pytest.mark.slow  # imports open_clip (and through it transformers): ~20 s on 2 cores
def test_open_clip_from_local_weights_file(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    open_clip = pytest.importorskip("open_clip")
    cfg = {"embed_dim": 16, "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
           "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1}}
    (tmp_path / "cfgs").mkdir()
    (tmp_path / "cfgs" / "tie-tiny-test.json").write_text(json.dumps(cfg))
    open_clip.add_model_config(tmp_path / "cfgs")
    model = open_clip.create_model("tie-tiny-test", pretrained=None)
    torch.save(model.state_dict(), tmp_path / "open_clip_pytorch_model.bin")
    with pytest.raises(ValueError, match=f"unknown model 'ViT-Q-99'.*{NO_DOWNLOAD}"):
        load_open_clip("ViT-Q-99", tmp_path / "open_clip_pytorch_model.bin")
    _images(tmp_path)
    z = _embed_and_evaluate(tmp_path, ["--encoder", "open_clip", "--model", "tie-tiny-test", "--pretrained",
                                       str(tmp_path / "open_clip_pytorch_model.bin")], capsys)
    # same numbers as the model itself on one image
    from PIL import Image

    _, _, pre = open_clip.create_model_and_transforms("tie-tiny-test", pretrained=str(tmp_path / "open_clip_pytorch_model.bin"))
    with torch.no_grad():
        ref = model.eval().encode_image(pre(Image.open(tmp_path / "img" / "3.png").convert("RGB"))[None]).numpy()
    np.testing.assert_allclose(z["image_emb"][3], ref[0], atol=1e-5)


@pytest.mark.slow  # imports open_clip: ~20 s on 2 cores
def test_open_clip_from_local_folder(tmp_path, capsys):
    """--model-dir (open_clip's local-dir: schema, e.g. a copy of BiomedCLIP): config + weights in one folder."""
    torch = pytest.importorskip("torch")
    open_clip = pytest.importorskip("open_clip")
    cfg = {"embed_dim": 16, "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
           "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1}}
    d = tmp_path / "tiny-open-clip"
    d.mkdir()
    (d / "open_clip_config.json").write_text(json.dumps({"model_cfg": cfg, "preprocess_cfg": {}}))
    torch.manual_seed(0)
    model = open_clip.create_model(f"local-dir:{d}", pretrained=None)   # random init, no weights yet
    torch.save(model.state_dict(), d / "open_clip_pytorch_model.bin")
    _images(tmp_path)
    z = _embed_and_evaluate(tmp_path, ["--encoder", "open_clip", "--model-dir", str(d)], capsys)
    # the embeddings come from the saved weights, not from a fresh random initialisation
    from PIL import Image

    pre = open_clip.create_model_and_transforms(f"local-dir:{d}")[2]
    with torch.no_grad():
        ref = model.eval().encode_image(pre(Image.open(tmp_path / "img" / "5.png").convert("RGB"))[None]).numpy()
    np.testing.assert_allclose(z["image_emb"][5], ref[0], atol=1e-5)
    # BiomedCLIP-style folder: the text tower is a Hugging Face model named by a hub id that is not cached
    b = tmp_path / "biomed-like"
    b.mkdir()
    hf_cfg = {**cfg, "text_cfg": {"hf_model_name": "tie-test-org/no-such-bert", "hf_tokenizer_name":
                                  "tie-test-org/no-such-bert", "hf_proj_type": "mlp", "hf_pooler_type": "cls_last_hidden_state",
                                  "context_length": 16}}
    (b / "open_clip_config.json").write_text(json.dumps({"model_cfg": hf_cfg, "preprocess_cfg": {}}))
    (b / "open_clip_pytorch_model.bin").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=f"hf_model_name 'tie-test-org/no-such-bert'.*{NO_DOWNLOAD}"):
        load_open_clip(model_dir=b)


@pytest.mark.slow  # imports transformers: ~15 s on 2 cores
def test_hf_clip_from_local_folder(tmp_path, capsys):
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    words = ["[UNK]", "[PAD]", "[EOS]", "a", "photo", "of", "landbird.", "waterbird.", "with", "land", "water",
             "background"]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.post_processor = processors.TemplateProcessing(single="$A [EOS]", special_tokens=[("[EOS]", 2)])
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]",
                                               eos_token="[EOS]")
    cfg = transformers.CLIPConfig(
        text_config={"vocab_size": len(words), "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                     "num_attention_heads": 2, "max_position_embeddings": 16, "eos_token_id": 2, "pad_token_id": 1},
        vision_config={"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 16}, projection_dim=8)
    d = tmp_path / "clip-tiny"
    transformers.CLIPModel(cfg).save_pretrained(d)
    tok.save_pretrained(d)
    transformers.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(d)
    _images(tmp_path)
    z = _embed_and_evaluate(tmp_path, ["--encoder", "hf", "--model-dir", str(d)], capsys)
    assert z["image_emb"].shape[1] == 8
