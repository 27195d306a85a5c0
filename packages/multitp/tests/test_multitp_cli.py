"""The command line: --help everywhere, the commands on small inputs, clean errors on bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from iclr25.multitp.cli import COMMANDS, main

ALL = [*COMMANDS, "reproduce"]


def _run(*args, **kw):
    env = {**os.environ, **kw.pop("env", {})}
    return subprocess.run([sys.executable, "-m", "iclr25.multitp", *args], capture_output=True, text=True,
                          timeout=300, env=env, **kw)


def test_help_lists_every_command_and_is_light():
    r = _run("--help")
    assert r.returncode == 0 and all(c in r.stdout for c in ALL)
    code = ("import sys, iclr25.multitp.cli as c; c.main(['--help']); "
            "bad = [m for m in ('torch', 'transformers', 'openai', 'sklearn', 'scipy') if m in sys.modules]; "
            "assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("cmd", ALL)
def test_every_subcommand_answers_help(cmd, capsys):
    assert main([cmd, "--help"]) == 0
    assert "--out" in capsys.readouterr().out


def test_version(capsys):
    assert main(["--version"]) == 0 and "iclr25-multitp 0.1.0" in capsys.readouterr().out


def test_generate(tmp_path, capsys):
    assert main(["generate", "--out", str(tmp_path)]) == 0
    lines = (tmp_path / "vignettes.jsonl").read_text().splitlines()
    assert len(lines) == 460 and json.loads(lines[0])["id"] == "Species:5Dog|5Person:p0"
    assert (tmp_path / "dataset_en+google.csv").is_file()
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("generate: 460 vignettes")


def test_bad_language_and_paraphrase(capsys):
    assert main(["generate", "--lang", "zh"]) == 2
    assert "did you mean 'zh-cn'" in capsys.readouterr().err
    assert main(["generate", "--paraphrase", "7"]) == 2
    assert "paraphrase=7 must be an integer in 0..4" in capsys.readouterr().err
    assert main(["query", "--backend", "scripted", "--langs", "de,xx"]) == 2
    assert "'xx' is not one of the 107" in capsys.readouterr().err


def test_scripted_query_parse_evaluate(tmp_path, capsys, mtp_data):
    run = tmp_path / "run"
    q = ["query", "--backend", "scripted", "--langs", "de,fr,en,zu,az", "--translator", "tag", "--limit", "92",
         "--agent-refusal", "0.2", "--out", str(run), "--quiet"]
    assert main(q) == 0
    assert main(["parse", "--run", str(run), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "n_other 0" in out
    ev = tmp_path / "ev"
    assert main(["evaluate", "--run", str(run), "--out", str(ev), "--k", "2", "--quiet"]) == 0
    res = json.loads((ev / "results.json").read_text())
    m = res["models"]["scripted-human"]
    assert set(m["languages"]) == {"de", "fr", "en", "zu", "az"} and m["n_other"] == 0
    assert set(m["misalignment"]) == {"country/renormalised", "country/official", "language/renormalised"}
    assert res["weights"]["approximation"] is True and len(set(m["clusters"].values())) == 2
    assert 10 < m["refusal_rate_mean"] < 30
    assert "| de |" in (ev / "results.md").read_text()
    # resuming a finished run sends nothing
    assert main([*q, "--resume"]) == 0
    assert "(0 new, 460 cached" in capsys.readouterr().out
    # a changed setting is refused, naming it
    assert main(["query", "--backend", "scripted", "--langs", "en", "--translator", "identity", "--out", str(run),
                 "--resume", "--quiet"]) == 2
    assert "changed translator" in capsys.readouterr().err
    assert main(["query", "--backend", "scripted", "--langs", "de", "--translator", "tag", "--out", str(run),
                 "--quiet"]) == 2
    assert "pass --resume" in capsys.readouterr().err


def test_scripted_resume_refuses_another_agent(tmp_path, capsys, mtp_data):
    """The scripted agent (profile, refusal, seed) is the model of a scripted run: a ``--resume`` that adds a
    language with another ``--agent-refusal`` answered it with another agent, mixed silently into the run."""
    run = tmp_path / "run"
    q = ["query", "--backend", "scripted", "--translator", "tag", "--limit", "20", "--agent-refusal", "0.2",
         "--out", str(run), "--quiet"]
    assert main([*q, "--langs", "de"]) == 0
    before = (run / "cache.jsonl").read_text()
    capsys.readouterr()
    for flag, value in (("--agent-refusal", "0.9"), ("--agent-seed", "3"), ("--agent-profile", "random")):
        args = [*q, "--langs", "de,fr", "--resume", flag, value]
        if flag == "--agent-refusal":
            args = [a for a in args if a != "0.2"]
            args.remove("--agent-refusal")
            args += ["--agent-refusal", value]
        assert main(args) == 2, flag
        err = capsys.readouterr().err
        assert "agent" in err and "Traceback" not in err, err
    assert (run / "cache.jsonl").read_text() == before
    assert main([*q, "--langs", "de,fr", "--resume"]) == 0  # the same agent may add a language
    assert "(20 new, 20 cached" in capsys.readouterr().out


def test_evaluate_undefined_misalignment_is_valid_json(tmp_path, capsys, mtp_data):
    """Every answer a refusal: misalignment and the mean refusal had no value and ``results.json`` held bare
    ``NaN`` (not JSON: strict parsers refuse the file) and results.md "nan"; both now say null / undefined."""
    from iclr25.multitp import generate_vignettes

    p = tmp_path / "resp.jsonl"
    p.write_text("".join(json.dumps({"id": v.id, "lang": "de", "response": "Ich kann nicht.",
                                     "response_en": "I cannot choose."}) + "\n" for v in generate_vignettes()[:40]))
    run = tmp_path / "run"
    assert main(["parse", "--responses", str(p), "--out", str(run), "--quiet"]) == 0
    assert main(["evaluate", "--run", str(run), "--out", str(tmp_path / "ev"), "--no-plot", "--quiet"]) == 0

    def no_constant(c):
        raise ValueError(f"results.json holds {c}")

    res = json.loads((tmp_path / "ev" / "results.json").read_text(), parse_constant=no_constant)
    mis = res["models"]["user-model"]["misalignment"]["country/renormalised"]
    assert mis["score"] is None and mis["score_bias_corrected"] is None
    md = (tmp_path / "ev" / "results.md").read_text()
    assert "nan" not in md.lower() and "misalignment country/renormalised: undefined" in md


def test_evaluate_real_parsed_csvs_and_k_too_large(tmp_path, capsys, mtp_data):
    files = [str(mtp_data / "llm_responses" / f"gpt3_default_{lg}_parsed.csv") for lg in ("de", "zh")]
    assert main(["evaluate", "--parsed-csv", *files, "--out", str(tmp_path), "--k", "2", "--no-plot"]) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    g = res["models"]["gpt3"]
    assert g["languages"] == ["de", "zh-cn"]
    assert g["per_language"]["de"]["preferences"]["Age"] == pytest.approx(34.615, abs=1e-3)
    assert g["language_sensitivity"] > 0
    assert main(["evaluate", "--parsed-csv", *files, "--out", str(tmp_path), "--k", "3", "--no-plot"]) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    assert "k=3 is above the number of languages" in res["models"]["gpt3"]["clusters"]


def test_parse_user_responses(tmp_path, capsys, mtp_data):
    p = tmp_path / "resp.jsonl"
    recs = [{"id": "Species:5Dog|5Person:p0", "lang": "en", "response": "Five people."},
            {"id": "Gender:1Girl|1Boy:p0", "lang": "de", "response": "[de] Save the girl.", "response_en": "Save the girl."},
            {"id": "Age:1Girl|1Woman:p0", "lang": "en", "response": "Hmm."}]
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    assert main(["parse", "--responses", str(p), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "'right': 1" in out and "'left': 1" in out and "n_other 1" in out


@pytest.mark.parametrize("content,msg", [
    ("", "the responses file is empty"),
    ('{"lang": "en", "response": "x"}\n', "missing field(s) ['id']"),
    ('{"id": "Species:5Dog|5Person:p0", "lang": "en"}\n', "missing field(s) ['response']"),
    ('{"id": "Nope:1X|1Y:p0", "lang": "en", "response": "x"}\n', ":1: unknown vignette id 'Nope:1X|1Y:p0'"),
    ('{"id": "Species:5Dog|5Person:p0", "lang": "zh", "response": "x"}\n', "did you mean 'zh-cn'"),
    # wrong types of the optional fields were dropped silently (a German answer then parsed as English)
    ('{"id": "Species:5Dog|5Person:p0", "lang": "de", "response": "fünf Hunde", "response_en": 7}\n',
     ":1: 'response_en' must be a string"),
    ('{"id": "Species:5Dog|5Person:p0", "lang": "en", "response": "x", "model": 3}\n',
     ":1: 'model' must be a non-empty string"),
    ('{"id": "Species:5Dog|5Person:p0", "lang": "en", "response": "x", "model": ""}\n',
     ":1: 'model' must be a non-empty string"),
])
def test_parse_bad_responses(tmp_path, capsys, content, msg):
    p = tmp_path / "resp.jsonl"
    p.write_text(content)
    assert main(["parse", "--responses", str(p), "--out", str(tmp_path / "run")]) == 2
    assert msg in capsys.readouterr().err


def test_parse_resume_refuses_changed_answers(tmp_path, capsys, mtp_data):
    """``parse --responses --resume`` with another answer for an item already in the run kept the cached answer
    and its label silently ("0 new, 1 cached"); it is refused (exit 2, naming the line), while the same answers
    and new items are accepted."""
    run = tmp_path / "run"
    p = tmp_path / "resp.jsonl"
    p.write_text(json.dumps({"id": "Species:5Dog|5Person:p0", "lang": "en", "response": "Five people."}) + "\n")
    assert main(["parse", "--responses", str(p), "--out", str(run), "--quiet"]) == 0
    assert main(["parse", "--responses", str(p), "--out", str(run), "--quiet", "--resume"]) == 0
    capsys.readouterr()
    q = tmp_path / "resp2.jsonl"
    q.write_text(json.dumps({"id": "Age:1Girl|1Woman:p0", "lang": "en", "response": "The girl."}) + "\n"
                 + json.dumps({"id": "Species:5Dog|5Person:p0", "lang": "en", "response": "Neither."}) + "\n")
    before = (run / "cache.jsonl").read_text()
    assert main(["parse", "--responses", str(q), "--out", str(run), "--quiet", "--resume"]) == 2
    err = capsys.readouterr().err
    assert f"{q}:2: " in err and "another response" in err and "Traceback" not in err, err
    assert (run / "cache.jsonl").read_text() == before


def test_human(tmp_path, capsys, mtp_data):
    assert main(["human", "--lang", "af", "--country", "DEU", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| lang | af | 79.37 |" in out and "approximation" in out
    assert main(["human", "--country", "XYZ", "--out", str(tmp_path)]) == 2
    assert "'XYZ' is not an ISO3 code of country_amce.csv" in capsys.readouterr().err
    w = tmp_path / "w.csv"
    w.write_text("ISO3,language,share,population\nDEU,de,95,83000000\nAUT,de,90,9000000\n")
    assert main(["human", "--lang", "de", "--weights", str(w), "--out", str(tmp_path)]) == 0
    assert "weights: " in capsys.readouterr().out
    w.write_text("ISO3,language,share,population\nDEU,de,95,-3\n")
    assert main(["human", "--weights", str(w), "--out", str(tmp_path)]) == 2
    assert "population -3.0 must be >= 0" in capsys.readouterr().err


def test_missing_data_path(tmp_path, capsys):
    assert main(["evaluate", "--run", str(tmp_path / "nothing"), "--out", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_unreachable_base_url_counts_failures_and_exits_1(tmp_path):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    args = ["query", "--model", "m", "--base-url", f"http://127.0.0.1:{port}/v1", "--langs", "en",
            "--out", str(tmp_path / "run"), "--max-retries", "0", "--timeout-s", "2", "--max-failures", "5", "--limit", "20",
            "--concurrency", "2", "--quiet"]
    r = _run(*args)
    assert r.returncode == 1, r.stderr
    assert "20 failed" in r.stdout and "--resume" in r.stdout
    r = _run(*args, "--resume")
    assert r.returncode == 1 and "0 cached" in r.stdout  # still resumable, nothing was cached


def test_hf_backend_from_a_local_folder(tmp_path, capsys):
    pytest.importorskip("torch")
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    d = tmp_path / "tiny"
    tiny_causal_lm(n_positions=512, seed=0).save_pretrained(d)
    byte_tokenizer().save_pretrained(d)
    assert main(["query", "--backend", "hf", "--model", str(d), "--langs", "en", "--max-tokens", "4", "--limit", "8",
                 "--out", str(tmp_path / "run"), "--device", "cpu", "--quiet", "--batch-size", "8"]) == 0
    assert main(["parse", "--run", str(tmp_path / "run"), "--quiet"]) == 0
    assert "n_other" in capsys.readouterr().out
    assert main(["query", "--backend", "hf", "--model", str(tmp_path / "missing"), "--langs", "en",
                 "--out", str(tmp_path / "run2"), "--device", "cpu"]) == 2
    assert "missing" in capsys.readouterr().err



def test_trial_query_summary_names_the_backtranslate_stage_once(tmp_path, capsys):
    # the summary line read "back-backtranslate: 0/0 done"
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    assert main(["query", "--model", "m", "--base-url", f"http://127.0.0.1:{port}/v1", "--langs", "en", "--limit", "1",
                 "--max-retries", "0", "--timeout-s", "2", "--out", str(tmp_path / "r"), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "backtranslate:" in out and "back-backtranslate" not in out
