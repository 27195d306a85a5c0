"""Unit tests: the parser never stops a run, agents, translation, query, errors on bad input."""

from __future__ import annotations

import io
import json
import sys
from dataclasses import replace

import pytest

from iclr25.multitp import spec
from iclr25.multitp.agents import ScriptedAgent, random_chooser
from iclr25.multitp.aggregation import aggregate, choice_records
from iclr25.multitp.parser import LLMParser, normalise_llm_label, parse_choice, rule_based_choice
from iclr25.multitp.spec import CATEGORIES
from iclr25.multitp.vignettes import generate_vignettes


class _Fixed:
    name = "fixed"

    def __init__(self, outs):
        self.outs = list(outs)
        self.calls = 0

    def generate(self, prompts, config=None):
        self.calls += 1
        return [self.outs.pop(0) for _ in prompts]


def test_unexpected_llm_labels_never_stop_the_run(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the parser entered a debugger")

    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    sys.stdin.close()
    monkeypatch.setattr(sys, "breakpointhook", boom)
    import pdb

    monkeypatch.setattr(pdb, "set_trace", boom)
    outs = ["Left or Right", "", "maybe", "LEFT!!", "left.", None, "L e f t", "Left: the first group"]
    p = LLMParser(_Fixed(outs))
    res = p.parse([("q", "a")] * len(outs))
    assert [lab for lab, _ in res] == ["other", "other", "other", "left", "left", "other", "other", "other"]
    assert [raw for _, raw in res][:3] == ["Left or Right", "", "maybe"]  # raw output kept


def test_other_is_excluded_from_p_and_refusal_and_counted():
    v = [x for x in generate_vignettes() if x.category == "Species"][:4]
    recs = choice_records(v, ["other", "neither", "left", "right"])
    a = aggregate(recs)
    assert a.n_other == 1 and a.counts["Species"]["other"] == 1
    assert a.refusal["Species"] == pytest.approx(100 / 3)  # 1 of the 3 non-other vignettes
    assert a.to_dict()["n_other_by_category"]["Species"] == 1


def test_all_refused_category_is_undefined():
    v = [x for x in generate_vignettes() if x.category in ("Species", "Age")]
    labs = ["neither" if x.category == "Species" else "left" for x in v]
    a = aggregate(choice_records(v, labs))
    assert a.preferences["Species"] is None and a.preferences["Age"] == 50.0
    assert a.preferences["Gender"] is None and a.refusal["Gender"] is None


def test_rule_parser_edge_cases():
    assert rule_based_choice("", "a boy", "a girl") is None
    assert rule_based_choice(None, "a boy", "a girl") is None  # type: ignore[arg-type]
    assert rule_based_choice("a manager", "a man", "a woman") is None  # word boundary
    assert rule_based_choice("I’m sorry, but no.", "a man", "a woman") == "neither"  # curly apostrophe
    assert rule_based_choice("**Save the woman.**", "a man", "a woman") == "right"
    assert rule_based_choice("3 people. Because", "three dogs", "three people") == "right"
    assert normalise_llm_label("ＬＥＦＴ") == "left"  # full-width (NFKC)


@pytest.mark.parametrize("seed", [0, 1])
def test_scripted_agent_is_deterministic_and_order_independent(seed):
    v = generate_vignettes()
    a = ScriptedAgent({c: 70.0 for c in CATEGORIES}, refusal=0.3, either=0.1, seed=seed)
    assert a.labels(v, "de") == a.labels(v, "de")
    assert a.labels(v[::-1], "de") == a.labels(v, "de")[::-1]
    assert a.labels(v, "de") != a.labels(v, "fr")
    be = a("de", "sys")
    ans = be.generate([x.prompt for x in v[:50]])
    assert [parse_choice(t, x.left, x.right) for t, x in zip(ans, v[:50])] == a.labels(v[:50], "de")


def test_scripted_agent_rates_and_bias():
    v = generate_vignettes()
    a = ScriptedAgent({c: 50.0 for c in CATEGORIES}, refusal=0.5, seed=0)
    labs = [a.decide(x, lang) for lang in ("en", "de", "fr", "zu") for x in v]
    assert abs(labs.count("neither") / len(labs) - 0.5) < 0.03
    b = ScriptedAgent({c: 50.0 for c in CATEGORIES}, left_bias=0.4, seed=0)
    agg = aggregate(choice_records([replace(x, lang="en") for x in v], b.labels(v, "en")))
    assert abs(agg.choosing_the_first - 70.0) < 5


def test_scripted_agent_validation():
    with pytest.raises(ValueError, match="lacks categories"):
        ScriptedAgent({"Species": 50.0})
    with pytest.raises(ValueError, match="> 1"):
        ScriptedAgent({c: 50.0 for c in CATEGORIES}, refusal=0.7, either=0.5)
    with pytest.raises(ValueError, match="left_bias/2"):
        ScriptedAgent({c: 90.0 for c in CATEGORIES}, left_bias=0.3)
    with pytest.raises(ValueError, match=r"must be in \[0, 100\]"):
        ScriptedAgent({c: float("nan") for c in CATEGORIES})
    with pytest.raises(ValueError, match="107 language codes"):
        ScriptedAgent({"xx": {c: 50.0 for c in CATEGORIES}})


def test_language_and_paraphrase_errors():
    with pytest.raises(ValueError, match="did you mean 'zh-cn'"):
        spec.check_lang("zh")
    with pytest.raises(ValueError, match="not one of the 107"):
        generate_vignettes("xx")
    with pytest.raises(ValueError, match="paraphrase=5 must be an integer in 0..4"):
        generate_vignettes("en", paraphrase=5)
    assert spec.check_langs("all") == list(spec.LANGUAGES)
    assert spec.check_langs("de, fr,de") == ["de", "fr"]


def test_paraphrases_change_only_the_scenario_sentence():
    a, b = generate_vignettes(paraphrase=0), generate_vignettes(paraphrase=3)
    assert [x.id.rsplit(":", 1)[0] for x in a] == [x.id.rsplit(":", 1)[0] for x in b]
    assert b[0].prompt.startswith(spec.SCENARIO_STARTS[3])


def test_query_model_sets_per_language_system_prompts():
    from iclr25.multitp.query import query_model

    seen = {}

    class Echo:
        name = "echo"
        system_prompt = None

        def generate(self, prompts, config=None):
            seen.setdefault(self.system_prompt, 0)
            seen[self.system_prompt] += len(prompts)
            assert config.temperature == 0 and config.max_new_tokens == 1024
            return ["Save the " + p[-10:] for p in prompts]

    v = generate_vignettes()[:6]
    vs = [replace(x, lang="de") for x in v] + [replace(x, lang="fr") for x in v]
    out = query_model(vs, Echo(), system_prompts={"de": "SYS-DE", "fr": "SYS-FR"}, batch_size=4)
    assert len(out) == 12 and seen == {"SYS-DE": 6, "SYS-FR": 6}


def test_with_system_prompt_prefix_fallback():
    from iclr25.multitp.query import with_system_prompt

    class Plain:
        name = "plain"

        def generate(self, prompts, config=None):
            return list(prompts)

    g = with_system_prompt(Plain(), "SYS")
    assert g.generate(["hello"]) == ["SYS\n\nhello"]


def test_translate_cache_and_callables(tmp_path):
    from iclr25.multitp.translation import (
        CachedTranslator,
        back_translate,
        translate,
        translate_system_prompt,
    )

    calls = []

    def fake(text, tgt):
        calls.append(text)
        return f"<{tgt}>{text}"

    v = generate_vignettes()[:5]
    t1 = translate(v, "de", fake, cache_dir=tmp_path)
    assert t1[0].prompt == "<de>" + v[0].prompt_en and t1[0].lang == "de" and t1[0].left == v[0].left
    n = len(calls)
    translate(v, "de", fake, cache_dir=tmp_path)  # cached: no new call
    assert len(calls) == n
    c = CachedTranslator(fake, tmp_path)  # a new object reads the disk cache
    assert c(v[0].prompt_en, "de") == t1[0].prompt and len(calls) == n
    assert translate_system_prompt("fr", fake).startswith("<fr>You are a normal citizen")
    assert back_translate(["", "hallo"], "de", fake) == ["", "<en>hallo"]
    with pytest.raises(ValueError, match="role='nobody'"):
        translate_system_prompt("fr", fake, role="nobody")


def test_csv_translator_round_trip(tmp_path):
    from iclr25.multitp.translation import CsvTranslator, translate
    from iclr25.multitp.vignettes import read_dataset_csv, write_dataset_csv

    v = generate_vignettes()
    de = [replace(x, lang="de", prompt="DE " + x.prompt_en) for x in v]
    write_dataset_csv(de, tmp_path / "dataset_de+google.csv")
    back = read_dataset_csv(tmp_path / "dataset_de+google.csv")
    assert [x.id for x in back] == [x.id for x in v] and back[3].prompt == "DE " + v[3].prompt_en
    tr = CsvTranslator(tmp_path, system_prompts={"de": "Du bist ein normaler Bürger."})
    out = translate(v[:3], "de", tr)
    assert out[0].prompt == "DE " + v[0].prompt_en
    assert tr(spec.SYSTEM_PROMPTS["normal"], "de") == "Du bist ein normaler Bürger."
    with pytest.raises(FileNotFoundError, match="dataset_fr"):
        tr("x", "fr")


def test_dataset_csv_errors(tmp_path):
    from iclr25.multitp.vignettes import read_dataset_csv

    p = tmp_path / "dataset_de+google.csv"
    p.write_text("Prompt,prompt_en\nx,y\n")
    with pytest.raises(ValueError, match="missing column 'phenomenon_category'"):
        read_dataset_csv(p)
    p.write_text("Prompt,prompt_en,phenomenon_category\nx,y,Species\n")
    with pytest.raises(ValueError, match="row 2: matches no MultiTP vignette"):
        read_dataset_csv(p)
    p.write_text("Prompt,prompt_en,phenomenon_category\nx,y,Religion\n")
    with pytest.raises(ValueError, match="row 2: unknown category 'Religion'"):
        read_dataset_csv(p)
    with pytest.raises(FileNotFoundError):
        read_dataset_csv(tmp_path / "nope.csv")


def test_parsed_csv_errors(tmp_path, mtp_data):
    from iclr25.multitp.aggregation import read_parsed_csv

    src = (mtp_data / "llm_responses" / "gpt3_default_de_parsed.csv").read_text().splitlines()
    head = src[0].split(",")
    p = tmp_path / "x_de_parsed.csv"
    p.write_text(src[0].replace("this_saving_prob", "prob") + "\n" + "\n".join(src[1:]))
    with pytest.raises(ValueError, match=r"missing column\(s\) \['this_saving_prob'\]"):
        read_parsed_csv(p)
    import csv as _csv

    rows = list(_csv.DictReader(open(mtp_data / "llm_responses" / "gpt3_default_de_parsed.csv")))
    rows[4]["this_saving_prob"] = "0.7"
    with open(p, "w", newline="") as fh:
        w = _csv.DictWriter(fh, fieldnames=head)
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(ValueError, match=r"row 6: this_saving_prob=0.7 is not a MultiTP code"):
        read_parsed_csv(p)
    rows[4]["this_saving_prob"] = rows[5]["this_saving_prob"]
    rows[7]["phenomenon_category"] = "Religion"
    with open(p, "w", newline="") as fh:
        w = _csv.DictWriter(fh, fieldnames=head)
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(ValueError, match="row 9: unknown category 'Religion'"):
        read_parsed_csv(p)


def test_weights_errors(tmp_path, mtp_data):
    from iclr25.multitp.human import load_weights

    p = tmp_path / "w.csv"
    p.write_text("ISO3,language,share,population\nDEU,de,90,83000000\nXXX,de,10,5\n")
    with pytest.raises(ValueError, match="row 3: ISO3 'XXX' is not in country_amce.csv"):
        load_weights(p)
    p.write_text("ISO3,language,share,population\nDEU,de,90,-1\n")
    with pytest.raises(ValueError, match="row 2: population -1.0 must be >= 0"):
        load_weights(p)
    p.write_text("ISO3,language,share,population\nCHE,de,70,8\nCHE,fr,40,8\n")
    with pytest.raises(ValueError, match="CHE add up to 110 %"):
        load_weights(p)
    p.write_text("ISO3,lang,population\nCHE,de,8\n")
    with pytest.raises(ValueError, match="missing column 'share'"):
        load_weights(p)
    p.write_text("ISO3,language,share %,Value\nCHE,de,62,8600000\nCHE,fr,23,8600000\nDEU,de,95,83000000\n")
    w = load_weights(p)
    assert w.share[("CHE", "fr")] == 23 and not w.approximation


def test_kmeans_k_too_large():
    from iclr25.multitp.metrics import cluster_languages

    prefs = {"de": {c: 50.0 for c in CATEGORIES}, "fr": {c: 60.0 for c in CATEGORIES},
             "en": {**{c: 60.0 for c in CATEGORIES}, "Gender": None}}
    with pytest.raises(ValueError, match="k=4 is above the number of languages with all six dimensions defined \\(2\\)"):
        cluster_languages(prefs, k=4)


def test_misalignment_argument_errors():
    from iclr25.multitp.metrics import misalignment

    with pytest.raises(ValueError, match="level="):
        misalignment({"de": {c: 50.0 for c in CATEGORIES}}, level="planet")
    with pytest.raises(ValueError, match="outside \\[0, 100\\]"):
        misalignment({"de": {c: 150.0 for c in CATEGORIES}})


def test_missing_data_path_names_the_file(monkeypatch, tmp_path):
    from iclr25.core.data import DataNotFoundError
    from iclr25.multitp.data import data_path

    monkeypatch.setenv("ICLR25_DATA", str(tmp_path))
    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DataNotFoundError, match="multitp/human/country_amce.csv"):
        data_path("human/country_amce.csv")


def test_random_chooser_pooled_close_to_fifty():
    v = generate_vignettes()
    r = random_chooser(seed=0)
    recs = []
    for lang in ("en", "de", "fr", "zu"):
        vs = [replace(x, lang=lang) for x in v]
        recs += choice_records(vs, r.labels(vs, lang))
    a = aggregate(recs)
    assert all(abs(a.preferences[c] - 50) < 12 for c in CATEGORIES)


def test_json_serialisable_aggregate():
    v = generate_vignettes()
    a = aggregate(choice_records(v, random_chooser().labels(v, "en")))
    json.dumps(a.to_dict())


def test_public_names_resolve_and_are_not_modules():
    import types

    import iclr25.multitp as m
    import iclr25.multitp.runner  # noqa: F401 - imports the submodules, which must not shadow names

    for name in m.__all__:
        obj = getattr(m, name)
        assert not isinstance(obj, types.ModuleType), name
    assert callable(m.translate) and callable(m.aggregate)
