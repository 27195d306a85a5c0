"""Bad input, adapters on disk, mixed mode, resume: unit tests on a random spec-sized GPT-2."""

import json

import pytest
import torch

from iclr25.prereq_tune import (
    TINY_FORMAT,
    FrozenTensorError,
    LoraSpec,
    TrainArgs,
    active_adapters,
    adapter_parameters,
    add_knowledge_adapter,
    add_skill_adapter,
    knowledge_corpus,
    load_adapter,
    read_knowledge_jsonl,
    read_qa_jsonl,
    read_skill_jsonl,
    save_adapter,
    skill_examples,
    tensor_hashes,
    train_knowledge_adapter,
    train_skill_adapter,
)

ARGS = TrainArgs(epochs=1, lr=5e-3, batch_size=8, max_length=32)
SMALL = LoraSpec(4, 8.0, 0.0, ("c_attn", "c_proj", "c_fc"), True)


def _w(path, lines):
    path.write_text("".join((l if isinstance(l, str) else json.dumps(l)) + "\n" for l in lines))
    return path


# -- JSONL readers ----------------------------------------------------------------------------------
def test_malformed_jsonl_line_is_named(tmp_path):
    p = _w(tmp_path / "s.jsonl", [{"question": "q ?", "answer": "a", "version": 1}, "{not json"])
    with pytest.raises(ValueError, match=r"s\.jsonl:2"):
        read_skill_jsonl(p)


@pytest.mark.parametrize("row,msg", [
    ({"question": "q ?", "answer": "a"}, "version"),
    ({"question": "", "answer": "a", "version": 1}, "empty 'question'"),
    ({"question": "q ?", "answer": "  ", "version": 1}, "empty 'answer'"),
    ({"question": "q ?", "answer": "a", "version": 0}, "version"),
    ({"question": "q ?", "answer": "a", "version": 1, "fake": "yes"}, "fake"),
])
def test_bad_skill_rows(tmp_path, row, msg):
    with pytest.raises(ValueError, match=msg):
        read_skill_jsonl(_w(tmp_path / "s.jsonl", [row]))


def test_knowledge_and_qa_readers(tmp_path):
    rows = read_knowledge_jsonl(_w(tmp_path / "k.jsonl", [{"text": "x was born in paris .", "version": 2},
                                                          {"text": "y works as a chef .", "name": "lora_fake_1"}]))
    assert [r.name for r in rows] == ["know_v2", "lora_fake_1"]
    with pytest.raises(ValueError, match="empty 'text'"):
        read_knowledge_jsonl(_w(tmp_path / "k2.jsonl", [{"text": " ", "version": 1}]))
    with pytest.raises(ValueError, match="'name' or a 'version'"):
        read_knowledge_jsonl(_w(tmp_path / "k3.jsonl", [{"text": "t"}]))
    qa = read_qa_jsonl(_w(tmp_path / "q.jsonl", [{"question": "q ?", "answers": ["Paris", "paris city"]}]))
    assert qa[0].answers == ("Paris", "paris city")
    with pytest.raises(ValueError, match="answers"):
        read_qa_jsonl(_w(tmp_path / "q2.jsonl", [{"question": "q ?", "answers": []}]))
    with pytest.raises(FileNotFoundError):
        read_qa_jsonl(tmp_path / "missing.jsonl")


# -- settings ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [dict(r=0), dict(r=-2), dict(alpha=0.0), dict(alpha=-1.0), dict(alpha=float("nan")),
                                dict(dropout=1.0)])
def test_lora_spec_validation(kw):
    with pytest.raises(ValueError):
        LoraSpec(**kw)


@pytest.mark.parametrize("kw", [dict(lr=0.0), dict(lr=float("inf")), dict(epochs=0), dict(batch_size=0),
                                dict(warmup_ratio=1.5)])
def test_train_args_validation(kw):
    with pytest.raises(ValueError):
        TrainArgs(**kw)


# -- routing errors ---------------------------------------------------------------------------------
def _model(base, names=("know_v1", "know_v2")):
    m = base
    for n in names:
        m = add_knowledge_adapter(m, n, SMALL)
    return add_skill_adapter(m, "skill", SMALL)


def test_real_weight_negative(world, tok, base):
    with pytest.raises(ValueError, match="real_weight"):
        train_skill_adapter(_model(base), tok, skill_examples(world, "fictitious", [1, 2]), ["know_v1", "know_v2"],
                            ARGS, real_weight=-0.5, fmt=TINY_FORMAT, quiet=True)


def test_row_version_without_adapter(world, tok, base):
    with pytest.raises(ValueError, match="version 2 .* has no knowledge adapter"):
        train_skill_adapter(_model(base), tok, skill_examples(world, "fictitious", [1, 2]), ["know_v1"], ARGS,
                            fmt=TINY_FORMAT, quiet=True)


def test_adapter_name_without_version(world, tok, base):
    with pytest.raises(ValueError, match="version suffix"):
        train_skill_adapter(_model(base, ("know",)), tok, skill_examples(world, "fictitious", 1), ["know"], ARGS,
                            fmt=TINY_FORMAT, quiet=True)


def test_subject_missing_a_version(world, tok, base, make_base):
    ex = skill_examples(world, "fictitious", [1, 2])
    ex = [e for e in ex if not (e.question == ex[0].question and e.version == 2)]
    with pytest.raises(ValueError, match="needs a row of every version"):
        train_skill_adapter(_model(base), tok, ex, ["know_v1", "know_v2"], ARGS, fmt=TINY_FORMAT, quiet=True)
    # without multi-version routing the same rows train
    r = train_skill_adapter(_model(make_base(2)), tok, ex, ["know_v1", "know_v2"], ARGS,
                            multi_version=False, fmt=TINY_FORMAT, quiet=True)
    assert r.steps > 0


def test_unknown_adapter(world, tok, base):
    with pytest.raises(ValueError, match="not loaded"):
        train_skill_adapter(_model(base), tok, skill_examples(world, "fictitious", 1), ["know_v9"], ARGS,
                            fmt=TINY_FORMAT, quiet=True)


# -- mixed real/fictitious mode ---------------------------------------------------------------------
def test_mixed_mode_routes_real_rows_to_real_adapter(world, tok, base, monkeypatch):
    import iclr25.prereq_tune.skill_stage as T

    m = _model(base, ("know_fake_1", "know_fake_2", "know_real_1", "know_real_2"))
    ex = skill_examples(world, "fictitious", 1) + skill_examples(world, "real_train")
    calls = []
    orig = T._activate

    def spy(model, names, roles, where):
        calls.append((tuple(names), where))
        return orig(model, names, roles, where)

    monkeypatch.setattr(T, "_activate", spy)
    r = train_skill_adapter(m, tok, ex, ["know_fake_1", "know_real_1", "know_fake_2", "know_real_2"], ARGS,
                            multi_version=False, real_weight=0.5, alternate_groups=True, fmt=TINY_FORMAT, quiet=True)
    n_fake, n_real = 30, 30
    assert r.rows_counted == n_fake + n_real
    assert r.rows_forwarded == n_fake + 2 * n_real          # real rows also through the skill LoRA alone
    real_calls = [c for c, w in calls if w.endswith("(real)")]
    assert real_calls and all("real" in c[0] for c in real_calls)
    assert any(c == ("skill",) for c, w in calls if "skill only" in w)
    fake_calls = [c for c, w in calls if "real" not in w]
    assert all("fake" in c[0] for c in fake_calls)


def test_mixed_mode_loss_is_ce_plus_weighted_skill_only(world, tok, base, monkeypatch):
    """One micro-batch: loss == CE(fake+real rows, concatenated, token mean) + w * CE(real rows, skill only)."""
    import iclr25.prereq_tune.skill_stage as T
    from iclr25.prereq_tune import completion_loss, encode_completions

    m = _model(base, ("know_fake_1", "know_real_1"))
    for n in ("know_fake_1", "know_real_1", "skill"):
        for p in adapter_parameters(m, n).values():
            with torch.no_grad():
                p.normal_(0, 0.05)
    ex = skill_examples(world, "fictitious", 1)[:2] + skill_examples(world, "real_train")[:2]
    rows = encode_completions(tok, ex, TINY_FORMAT, max_length=32)
    w = 0.7
    with torch.no_grad():
        with active_adapters(m, ["know_fake_1", "skill"]):
            s1, n1 = completion_loss(m, *rows.batch(torch.tensor([0, 1]))[:2], rows.batch(torch.tensor([0, 1]))[2])
        with active_adapters(m, ["know_real_1", "skill"]):
            s2, n2 = completion_loss(m, *rows.batch(torch.tensor([2, 3])))
        with active_adapters(m, ["skill"]):
            s3, n3 = completion_loss(m, *rows.batch(torch.tensor([2, 3])))
    expect = float((s1 + s2) / (n1 + n2) + w * s3 / n3)
    got = []
    monkeypatch.setattr(T, "_finite", lambda loss, where: got.append(float(loss.detach())) or got[-1])
    train_skill_adapter(m, tok, ex, ["know_fake_1", "know_real_1"], TrainArgs(epochs=1, lr=1e-9, batch_size=4,
                        max_length=32, max_grad_norm=0.0), multi_version=False, real_weight=w, fmt=TINY_FORMAT,
                        quiet=True, encoded=rows)
    assert got[0] == pytest.approx(expect, rel=1e-5)


# -- adapters on disk -------------------------------------------------------------------------------
def test_knowledge_training_changes_only_its_adapter(world, tok, base):
    m = _model(base)
    before = tensor_hashes(m, exclude=["know_v1"])
    r = train_knowledge_adapter(m, tok, "know_v1", knowledge_corpus(world, 1), ARGS, quiet=True)
    assert r.steps > 0 and not r.trainable_unchanged
    assert tensor_hashes(m, exclude=["know_v1"]) == before


def test_save_load_roundtrip_and_base_mismatch(world, tok, base, make_base, tmp_path):
    m = _model(base, ("know_v1",))
    train_knowledge_adapter(m, tok, "know_v1", knowledge_corpus(world, 1), ARGS, quiet=True)
    d = save_adapter(m, "know_v1", tmp_path / "know_v1", role="knowledge")
    assert (d / "adapter_config.json").is_file() and (d / "adapter_model.safetensors").is_file()
    ids = torch.randint(4, len(tok), (2, 10))
    with active_adapters(m, ["know_v1"]), torch.no_grad():
        ref = m(input_ids=ids).logits
    fresh = load_adapter(make_base(0), d, role="knowledge")
    with active_adapters(fresh, ["know_v1"]), torch.no_grad():
        assert torch.equal(fresh(input_ids=ids).logits, ref)
    assert not any(p.requires_grad for p in fresh.parameters())
    with pytest.raises(ValueError, match="another base model"):
        load_adapter(make_base(1), d)
    with pytest.raises(ValueError, match="knowledge adapter, not a skill"):
        load_adapter(make_base(0), d, role="skill")
    with pytest.raises(FileNotFoundError):
        load_adapter(make_base(0), tmp_path / "nope")


def test_resume_refuses_changed_knowledge_adapter(world, tok, base, tmp_path):
    m = _model(base, ("know_v1",))
    ex = skill_examples(world, "fictitious", 1)
    r1 = train_skill_adapter(m, tok, ex, ["know_v1"], ARGS, fmt=TINY_FORMAT, quiet=True, checkpoint_dir=tmp_path / "c")
    r2 = train_skill_adapter(m, tok, ex, ["know_v1"], TrainArgs(epochs=2, lr=5e-3, batch_size=8, max_length=32),
                             fmt=TINY_FORMAT, quiet=True, checkpoint_dir=tmp_path / "c", resume=True)
    assert r2.resumed_from == r1.steps and r2.steps == 2 * r1.steps
    with torch.no_grad():
        next(iter(adapter_parameters(m, "know_v1").values())).add_(1e-3)
    with pytest.raises(FrozenTensorError, match="differ from the checkpoint"):
        train_skill_adapter(m, tok, ex, ["know_v1"], TrainArgs(epochs=3, lr=5e-3, batch_size=8, max_length=32),
                            fmt=TINY_FORMAT, quiet=True, checkpoint_dir=tmp_path / "c", resume=True)


# -- the official hub data from a local copy (resolved through core ``resolve`` under ICLR25_DATA) -------
def _parquet(path, rows):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_read_hub_split_from_local_copy(tmp_path, monkeypatch):
    from iclr25.prereq_tune import KnowledgeText, hub_split_path, read_hub_split

    root = tmp_path / "data"
    monkeypatch.setenv("ICLR25_DATA", str(root))
    base = root / "Shiyu-Lab" / "Prereq_Tune"
    _parquet(base / "bio_knowledge" / "train_fake-00000-of-00001.parquet",
             [{"text": "Ann was born in Oslo.", "version": 0}, {"text": "Ann was born in Lima.", "version": 1}])
    msgs = lambda q, a: [{"role": "user", "content": q}, {"role": "assistant", "content": a}]  # noqa: E731
    _parquet(base / "popqa_skill" / "train-00000-of-00001.parquet",
             [{"messages": msgs("Where was Ann born?", "Oslo"), "version": 1, "fake": True},
              {"messages": msgs("Who wrote Hamlet?", "Shakespeare"), "version": 2, "fake": False}])
    assert hub_split_path("bio_knowledge", "train_fake") == base / "bio_knowledge" / "train_fake-00000-of-00001.parquet"
    know = read_hub_split("bio_knowledge", "train_fake")
    # zero-based versions are shifted as a whole: 0 -> 1, 1 -> 2 (never merged)
    assert know == [KnowledgeText("Ann was born in Oslo.", "know_v1"), KnowledgeText("Ann was born in Lima.", "know_v2")]
    skill = read_hub_split("popqa_skill", "train")
    assert [(e.question, e.answer, e.version, e.fake) for e in skill] == [
        ("Where was Ann born?", "Oslo", 1, True), ("Who wrote Hamlet?", "Shakespeare", 2, False)]
    from iclr25.core.data import DataNotFoundError

    with pytest.raises(DataNotFoundError):
        read_hub_split("bio_skill", "train")
    _parquet(base / "bad" / "train-00000-of-00001.parquet", [{"text": "  ", "version": 1}])
    with pytest.raises(ValueError, match="row 1: empty 'text'"):
        read_hub_split("bad", "train")
    _parquet(base / "neg" / "train-00000-of-00001.parquet", [{"text": "x y", "version": -1}])
    with pytest.raises(ValueError, match="'version'=-1"):
        read_hub_split("neg", "train")
