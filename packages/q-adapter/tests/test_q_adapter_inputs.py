"""Issue 28: checks of every setting, HH-format JSONL in train, model loading errors, fused decoding,
and the README's generate example passing real newlines."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture
def local_base(tmp_path):
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    d = tmp_path / "base"
    tiny_causal_lm(n_embd=32, n_layer=1, n_head=2, n_positions=96).save_pretrained(d)
    byte_tokenizer().save_pretrained(d)
    return d


@pytest.fixture
def pairs_file(tmp_path):
    p = tmp_path / "pairs.jsonl"
    p.write_text("\n".join(json.dumps({"prompt": f"Q{i}:", "chosen": f" yes {i}", "rejected": f" no {i}!"})
                           for i in range(4)) + "\n")
    return p


@pytest.mark.parametrize("flags, message", [
    (["--max-prompt-length", "0"], "--max-prompt-length must be >= 1"),
    (["--max-steps", "-3"], "--max-steps must be >= 0"),
    (["--lr", "0"], "--lr must be a finite number > 0"),
    (["--learning-rate", "nan"], "--lr must be a finite number > 0"),  # the deprecated alias still works
    (["--epochs", "0"], "--epochs must be >= 1"),
    (["--max-length", "500", "--max-prompt-length", "8"], "exceeds the model's context of 96"),
])
def test_unchecked_settings_are_clean_errors(tmp_path, local_base, pairs_file, capsys, flags, message):
    from iclr25.q_adapter.cli import main

    code = main(["train", "--data", str(pairs_file), "--base", str(local_base), "--out", str(tmp_path / "o"),
                 "--quiet", *flags])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err
    if "--learning-rate" in flags:
        assert "--learning-rate is deprecated" in err and "use --lr" in err
    assert not (tmp_path / "o" / "adapter").exists()


def test_missing_model_is_a_clean_error_after_the_data_check(tmp_path, pairs_file, capsys, monkeypatch):
    from iclr25.q_adapter.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code = main(["train", "--data", str(pairs_file), "--base", "no-such-org/no-such-model",
                 "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "no download was attempted" in err and "Traceback" not in err
    # bad data is reported before any model is looked up
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "p", "chosen": "a"}\n')
    code = main(["train", "--data", str(bad), "--base", "no-such-org/no-such-model", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "bad.jsonl:1: missing field(s) ['rejected']" in err


def test_train_accepts_hh_format_jsonl(tmp_path, local_base, capsys):
    from iclr25.q_adapter.cli import main
    from iclr25.q_adapter.data import load_hh_rlhf, load_preference_jsonl

    p = tmp_path / "hh.jsonl"
    rows = [{"chosen": f"\n\nHuman: hi {i}\n\nAssistant: hello friend {i}",
             "rejected": f"\n\nHuman: hi {i}\n\nAssistant: go away{'!' * i}"} for i in range(4)]
    rows.append({"chosen": "\n\nHuman: x\n\nAssistant: same", "rejected": "\n\nHuman: x\n\nAssistant: same"})
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pairs = load_preference_jsonl(p)
    assert pairs == load_hh_rlhf(p) and len(pairs) == 4  # the identical pair is dropped (and counted)
    assert pairs[0].prompt == "\n\nHuman: hi 0\n\nAssistant:" and pairs[0].chosen == " hello friend 0"
    code = main(["train", "--data", str(p), "--base", str(local_base), "--out", str(tmp_path / "o"), "--quiet",
                 "--batch-size", "2", "--epochs", "1", "--max-length", "48", "--max-prompt-length", "16"])
    assert code == 0
    assert "trained q-adapter on 4 pairs" in capsys.readouterr().out


def test_core_loader_options_reach_the_model(tmp_path, local_base, pairs_file):
    from iclr25.q_adapter.base import load_base

    model, _ = load_base(str(local_base), dtype="bfloat16", gradient_checkpointing=True, device="cpu")
    assert next(model.parameters()).dtype == torch.bfloat16
    assert model.is_gradient_checkpointing and model.config.use_cache is False
    with pytest.raises(ValueError, match="not to the tiny embedded base"):
        load_base("embedded", load_in_4bit=True)


def test_fused_decoding_equals_two_caches_and_no_cache(tiny_lm, lora_randomizer):
    from iclr25.q_adapter import QAdapterConfig, QAdapterModel

    model, _ = tiny_lm
    qm = QAdapterModel(model, QAdapterConfig(alpha_tilde=0.7, alpha_0=0.3))
    lora_randomizer(qm)
    ids = torch.randint(0, 250, (3, 7), generator=torch.Generator().manual_seed(0))
    attn = torch.ones_like(ids)
    attn[0, :3] = 0  # left padding
    kw = dict(max_new_tokens=10, eos_token_id=-1)
    fused = qm.generate(ids, attn, fused=True, **kw)
    assert torch.equal(fused, qm.generate(ids, attn, fused=False, **kw))
    assert torch.equal(fused, qm.generate(ids, attn, use_cache=False, **kw))
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    assert torch.equal(qm.generate(ids, attn, do_sample=True, generator=g1, **kw),
                       qm.generate(ids, attn, do_sample=True, fused=False, generator=g2, **kw))


def test_readme_generate_example_passes_real_newlines():
    line = next(x for x in README.read_text().splitlines() if x.startswith("iclr25-q-adapter generate"))
    args = line.split(None, 1)[1]
    # let bash parse the README line exactly as a user's shell would
    r = subprocess.run(["bash", "-c", f"printf '%s\\0' {args}"], capture_output=True, text=True, check=True)
    argv = r.stdout.split("\0")
    prompt = argv[argv.index("--prompt") + 1]
    assert "\n" in prompt and "\\n" not in prompt, prompt
    assert re.match(r"## Human:\n.+\n\n## Assistant:\n$", prompt, re.S)
