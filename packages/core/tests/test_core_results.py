import json
import math

import pytest

from iclr25.core.results import Claim, Report, claims_table, read_report, write_report


@pytest.mark.parametrize(
    "kw, expected",
    [
        (dict(ours=0.9, baseline=0.5), True),
        (dict(ours=0.5, baseline=0.5), True),  # margin 0: at least as good
        (dict(ours=0.5, baseline=0.5, margin=0.01), False),
        (dict(ours=0.75, baseline=0.5, margin=0.25), True),  # exact in binary floating point
        (dict(ours=0.1, baseline=0.5, higher_is_better=False, margin=0.3), True),
        (dict(ours=0.3, baseline=0.5, higher_is_better=False, margin=0.3), False),
        (dict(ours=0.95, threshold=0.9), True),
        (dict(ours=0.85, threshold=0.9), False),
        (dict(ours=0.02, threshold=0.05, higher_is_better=False), True),
        (dict(ours=0.06, threshold=0.05, higher_is_better=False), False),
        (dict(ours=0.95, baseline=0.5, threshold=0.99), False),  # both must pass
        (dict(ours=0.995, baseline=0.5, threshold=0.99), True),
        (dict(ours=float("nan"), threshold=0.0), False),
        (dict(ours=1.0, baseline=float("nan")), False),
        # a censored measurement (inf) never holds, even where the comparison would say yes
        (dict(ours=float("inf"), threshold=1.0), False),
        (dict(ours=float("-inf"), threshold=1.0, higher_is_better=False), False),
        (dict(ours=1.0, baseline=float("-inf")), False),
    ],
)
def test_holds_is_computed(kw, expected):
    assert Claim("g/c", "m", **kw).holds is expected


def test_claim_needs_a_comparison_and_valid_margin():
    with pytest.raises(ValueError, match="baseline or a threshold"):
        Claim("g/c", "m", ours=1.0)
    with pytest.raises(ValueError, match="margin"):
        Claim("g/c", "m", ours=1.0, baseline=0.0, margin=-1)


def test_holds_cannot_be_typed_in():
    with pytest.raises(TypeError):
        Claim("g/c", "m", ours=1.0, threshold=0.0, holds=False)  # type: ignore[call-arg]
    d = Claim("g/c", "m", ours=0.1, threshold=0.5).to_dict()
    assert d["holds"] is False
    d["holds"] = True  # a hand-edited results.json
    with pytest.raises(ValueError, match="disagrees"):
        Claim.from_dict(d)


def test_numpy_scalars_are_normalised():
    np = pytest.importorskip("numpy")
    c = Claim("g/c", "m", ours=np.float32(0.5), baseline=np.int64(0), higher_is_better=np.bool_(True))
    assert type(c.ours) is float and type(c.baseline) is float and c.holds
    json.dumps(c.to_dict())


def test_report_roundtrip(tmp_path):
    claims = [
        Claim("a/x", "TPR (%)", ours=97.0, baseline=16.0, margin=10, paper="90.06", note="CPU scale"),
        Claim("a/y", "FPR (%)", ours=3.0, threshold=2.0, higher_is_better=False),
        Claim("a/z", "AUROC", ours=float("nan"), threshold=0.5),
    ]
    r = Report("agpd", "0.1.0", quick=True, seconds=1.5, claims=claims, extra={"seed": 0})
    p = write_report(r, tmp_path / "agpd")
    data = json.loads(p.read_text())
    assert [c["holds"] for c in data["claims"]] == [True, False, False]
    assert data["claims"][2]["ours"] is None  # NaN is written as null, JSON stays valid
    assert set(data["claims"][0]) == {"name", "metric", "ours", "baseline", "threshold", "higher_is_better",
                                      "margin", "paper", "note", "holds", "kind", "paper_value", "paper_ref",
                                      "spread", "n_seeds", "within_spread", "plot"}
    back = read_report(tmp_path / "agpd")
    assert back.to_dict() == r.to_dict() or back.claims[:2] == r.claims[:2]
    assert math.isnan(back.claims[2].ours)
    assert back.method == "agpd" and back.extra == {"seed": 0} and back.quick is True
    md = (tmp_path / "agpd" / "results.md").read_text()
    assert "| a/x |" in md and "**no**" in md and "1/3 claims hold" in md
    assert "| 97 | 16 | 10 |" in md  # ours, baseline, margin


def test_infinite_values_write_valid_json(tmp_path):
    """±inf (e.g. a censored sample count) is written as null like NaN, and the JSON recomputes the
    same holds; before, json.dumps(allow_nan=False) raised after the whole run had finished."""
    claims = [Claim("c/n", "required N", ours=float("inf"), threshold=64.0, higher_is_better=False,
                    note="censored: best-of-N never reached 90 % in 64 draws"),
              Claim("c/b", "gap", ours=1.0, baseline=float("-inf"))]
    p = write_report(Report("x", "0.1.0", quick=True, seconds=1.0, claims=claims), tmp_path / "x")
    data = json.loads(p.read_text())
    assert [(c["ours"], c["baseline"], c["holds"]) for c in data["claims"]] == [(None, None, False), (1.0, None, False)]
    back = read_report(tmp_path / "x")
    assert [c.holds for c in back.claims] == [False, False]
    assert "| inf |" in (tmp_path / "x" / "results.md").read_text()


def test_claims_table_has_one_row_per_claim():
    t = claims_table([Claim("a", "m", 1, threshold=0), Claim("b", "m", 0, threshold=1)], slug="s")
    lines = t.splitlines()
    assert len(lines) == 4 and lines[0].startswith("| method |")


def test_claims_table_escapes_pipes_and_newlines():
    t = claims_table([Claim("a|b", "x | y", 1, threshold=0, paper="p\nq")])
    row = t.splitlines()[2]
    assert row.count(" | ") == 10 and "a\\|b" in row and "p q" in row


def test_claim_structured_fields_kind_spread_and_paper_value():
    from iclr25.core.results import CLAIM_KINDS

    c = Claim("mechanism/x", "acc", 0.80, baseline=0.75, margin=0.0, paper_value=0.9, paper_ref="Table 2",
              spread=0.03, n_seeds=3)
    assert c.kind == "mechanism" and Claim("tpr_gt", "m", 1, threshold=0).kind == "headline"
    assert Claim("invariant/frozen", "m", 1, threshold=0).kind == "sanity"
    assert abs(c.gap - 0.05) < 1e-12 and c.within_spread is False  # gap 0.05 beyond sd 0.03
    lower = Claim("err", "m", 0.20, baseline=0.22, higher_is_better=False, spread=0.05, n_seeds=2)
    assert abs(lower.gap - 0.02) < 1e-12 and lower.within_spread is True  # inside: seeds could flip it
    assert Claim("t", "m", 0.5, threshold=0.4, spread=0.2).within_spread is True
    assert Claim("t", "m", 0.5, threshold=0.4).within_spread is None  # one seed: no spread to compare
    assert Claim("t", "m", float("nan"), threshold=0.4, spread=0.1).within_spread is None
    d = c.to_dict()
    assert d["within_spread"] is False and d["paper_value"] == 0.9 and d["kind"] == "mechanism"
    assert Claim.from_dict(d) == c
    for bad in (dict(kind="claim"), dict(spread=-0.1), dict(spread=float("nan")), dict(n_seeds=0),
                dict(n_seeds=1.5)):
        with pytest.raises(ValueError):
            Claim("a", "m", 1, threshold=0, **bad)
    assert set(CLAIM_KINDS) == {"headline", "mechanism", "sanity", "engineering"}
    row = claims_table([c]).splitlines()[2]
    assert "0.9 (Table 2)" in row and "±0.03 (3 seeds), gap beyond" in row


def test_claim_without_paper_number_says_direction_only():
    c = Claim("a", "m", 1, threshold=0, paper_ref="Fig. 3, direction only")
    assert "Fig. 3, direction only" in claims_table([c])
