"""`iclr25 report`: the self-contained HTML page, its comparison mode, and a real-browser check."""

import base64
import hashlib
import json
import os
import re
import shutil
import socketserver
import struct
import subprocess
import sys
import threading
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from iclr25.core import registry
from iclr25.core import report as rp
from iclr25.core.results import Claim, Report, write_report

HOSTILE = '<script>document.title="pwned"</script><b id="injected">x</b> & done'


# --- fixtures -------------------------------------------------------------------------------


def _png(w, h, rgb=(200, 30, 30)):
    """A valid RGB PNG written with zlib/struct (independent of the code under test)."""

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + bytes(rgb) * w for _ in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def _broken_png():
    """A PNG cut off after its IHDR chunk, as a run killed mid-write leaves it: undecodable."""
    return _png(8, 8)[:40]


ALPHA = [
    Claim("headline/ours_gt_base", "acc (%)", ours=91.5, baseline=80.25, margin=5, paper="93.1"),
    Claim("mechanism/gap", "gap (nats)", ours=0.4, threshold=0.1, paper_ref="Sec. 4, direction only"),
    Claim("headline/fpr", "FPR <b>bold</b> (%)", ours=3.0, threshold=2.0, higher_is_better=False,
          paper="1.2", note=HOSTILE),
    Claim("headline/margin_short", "acc (%)", ours=81.0, baseline=80.5, margin=1.0, note="line one\nline two",
          paper_value=82.0, paper_ref="Table 3", spread=0.8, n_seeds=3),
]
BETA = [
    Claim("b/not_measured", "AUROC", ours=float("nan"), threshold=0.5, note="crashed mid-way"),
    Claim("b/ok", "AUROC", ours=0.9, threshold=0.5),
]
ALPHA_ENV = {"python": "3.11.7", "platform": "Linux-6.1-x86_64", "cpu": "Test CPU @ 2 cores", "gpu": None,
             "torch": "2.4.0", "git_commit": "abc1234", "libraries": {"numpy": "2.0.1"}}


def _write(folder, slug, claims, *, top=None, claim_extra=None, seconds=12.5, quick=True):
    write_report(Report(slug, "0.1.0", quick=quick, seconds=seconds, claims=claims), folder)
    p = folder / "results.json"
    d = json.loads(p.read_text())
    d.update(top or {})
    for c in d["claims"]:
        c.update((claim_extra or {}).get(c["name"], {}))
    p.write_text(json.dumps(d, indent=2))
    return p


@pytest.fixture
def results(tmp_path):
    root = tmp_path / "results"
    a = root / "alpha"
    _write(a, "alpha", ALPHA, top={"cpu_seconds": 30.25, "env": ALPHA_ENV, "seeds": [0, 1]},
           claim_extra={"headline/ours_gt_base": {"spread": {"ours": 0.75, "baseline": 1.5},
                                                  "seeds": [90.75, 92.25]}})
    (a / "good.png").write_bytes(_png(40, 30))
    (a / "sub").mkdir()
    (a / "sub" / "curve.png").write_bytes(_png(20, 10, (20, 90, 200)))
    (a / "broken.png").write_bytes(_broken_png())
    (a / "notpng.png").write_text("not an image")
    _write(root / "beta", "beta", BETA)  # written by today's core: no cpu_seconds / env / seeds
    return root


class _Dom(HTMLParser):
    """Elements (tag, attrs, own text) and the text inside each <tr class=claim> / <script>."""

    def __init__(self, text):
        super().__init__()
        self.elements, self.scripts, self.rows, self._stack = [], [], [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        el = {"tag": tag, "attrs": dict(attrs), "text": ""}
        self.elements.append(el)
        if tag not in ("img", "meta", "br", "input", "link"):
            self._stack.append(el)
        if tag == "tr" and "claim" in el["attrs"].get("class", "").split():
            self.rows.append(el)

    def handle_endtag(self, tag):
        while self._stack:
            el = self._stack.pop()
            if el["tag"] == tag:
                if tag == "script":
                    self.scripts.append(el)
                break

    def handle_data(self, data):
        for el in self._stack:
            el["text"] += data

    def find(self, tag=None, **attrs):
        return [e for e in self.elements if (tag is None or e["tag"] == tag)
                and all(e["attrs"].get(k.rstrip("_")) == v for k, v in attrs.items())]


def _page(results, **kw):
    return rp.render_html(rp.load_results(results), **kw)


# --- content ----------------------------------------------------------------------------------


def test_note_with_script_is_shown_as_text(results):
    page = _page(results)
    dom = _Dom(page)
    assert len(dom.scripts) == 1 and "only-failing" in dom.scripts[0]["text"]  # only the page's own
    assert dom.find(id="injected") == []
    row = next(r for r in dom.rows if r["attrs"]["data-claim"] == "headline/fpr")
    assert HOSTILE in row["text"] and "FPR <b>bold</b> (%)" in row["text"]
    assert "&lt;script&gt;document.title=&quot;pwned&quot;&lt;/script&gt;" in page
    assert "<b>bold</b>" not in page


def test_every_claim_row_and_the_overview(results):
    dom = _Dom(_page(results))
    assert [r["attrs"]["data-claim"] for r in dom.rows] == [c.name for c in ALPHA + BETA]
    holds = {r["attrs"]["data-claim"]: "holds" in r["attrs"]["class"].split() for r in dom.rows}
    assert holds == {c.name: c.holds for c in ALPHA + BETA}
    assert sum(holds.values()) == 3
    ov = {e["attrs"]["data-slug"]: e["text"] for e in dom.find("tr") if "pkg-row" in e["attrs"].get("class", "")}
    assert set(ov) == {"alpha", "beta"}
    # alpha: 2/4 hold; headline claims (not mechanism/*) 1/3 hold; quick; wall and CPU time
    assert "2/4" in ov["alpha"] and "no (1/3)" in ov["alpha"] and "quick" in ov["alpha"]
    assert "12.5 s" in ov["alpha"] and "30.2 s" in ov["alpha"]
    assert "1/2" in ov["beta"] and "\u2014" in ov["beta"]  # CPU time unknown
    sec = dom.find("section", id="pkg-alpha")[0]["text"]
    rows = {r["attrs"]["data-claim"]: r["text"] for r in dom.rows}
    # a failing claim appears once: its row says why, computed from the numbers, beside its note
    assert "ours 3 > threshold 2" in rows["headline/fpr"] and "does not hold" in rows["headline/fpr"]
    assert "ours − baseline = 0.5 < margin 1" in rows["headline/margin_short"]
    assert "line one\nline two" in rows["headline/margin_short"]
    assert "does not hold" not in rows["mechanism/gap"] and dom.find("ul", class_="failing") == []
    assert sec.count("headline/fpr") == 1 and "Did not hold" not in sec
    assert "2/4 claims hold" in sec
    assert "not measured (ours is NaN)" in dom.find("section", id="pkg-beta")[0]["text"]


def test_paper_value_rule_gap_and_spread_side_by_side(results):
    dom = _Dom(_page(results))
    rows = {r["attrs"]["data-claim"]: r for r in dom.rows}
    short = rows["headline/margin_short"]["text"]
    assert "82 (Table 3)" in short and "≥ baseline + 1" in short
    assert "0.5 ± 0.8" in short and "inside the seed spread" in short and "3 seeds" in short
    assert "the gap is inside the seed spread" in short  # the verdict says seeds could flip it
    assert "Sec. 4, direction only" in rows["mechanism/gap"]["text"]
    kinds = {n: r["attrs"]["class"].split()[2] for n, r in rows.items()}
    assert kinds["mechanism/gap"] == "kind-mechanism" and kinds["headline/fpr"] == "kind-headline"
    # ids wrap only at / and _ (a <wbr> there), never mid-word
    page = _page(results)
    assert "headline/<wbr>margin_<wbr>short" in page


def test_plots_are_embedded_and_bad_files_listed(results):
    dom = _Dom(_page(results))
    imgs = {e["attrs"]["alt"]: e["attrs"] for e in dom.find("img")}
    assert set(imgs) == {"good.png", "sub/curve.png", "broken.png"}
    data = base64.b64decode(imgs["good.png"]["src"].removeprefix("data:image/png;base64,"))
    assert data == (results / "alpha" / "good.png").read_bytes()
    assert (imgs["good.png"]["width"], imgs["good.png"]["height"]) == ("40", "30")
    caps = [e["text"] for e in dom.find("figcaption")]
    assert any("notpng.png" in c and "not a PNG" in c for c in caps)
    assert "No PNG in this results folder" in dom.find("section", id="pkg-beta")[0]["text"]


def test_no_remote_references_and_a_csp_that_forbids_them(results, tmp_path, monkeypatch):
    _fake_dist(tmp_path / "site", "iclr25-alpha", ["Paper, https://arxiv.org/abs/0000.00001"], monkeypatch)
    page = _page(results)
    dom = _Dom(page)
    refs = [(e["tag"], k, v) for e in dom.elements for k, v in e["attrs"].items() if k in ("src", "href")]
    assert refs
    for tag, k, v in refs:
        assert (v.startswith("data:image/png;base64,") and k == "src") or v.startswith("#") \
            or v == "https://arxiv.org/abs/0000.00001", (tag, k, v[:80])
    csp = dom.find("meta", **{"http-equiv": "Content-Security-Policy"})[0]["attrs"]["content"]
    directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
    assert directives["default-src"] == "'none'" and directives["img-src"] == "data:"

    def sha(text):
        return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"

    style = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    script = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    assert directives["style-src"] == sha(style) and directives["script-src"] == sha(script)
    assert " style=" not in page  # inline style attributes would be blocked by the CSP


def test_optional_metadata_shown_when_present_and_dashes_when_absent(results):
    dom = _Dom(_page(results))

    def env(slug):
        sec = dom.elements.index(dom.find("section", id=f"pkg-{slug}")[0])
        nxt = [i for i, e in enumerate(dom.elements) if e["tag"] == "section" and i > sec]
        end = nxt[0] if nxt else len(dom.elements)
        dl = [e for e in dom.elements[sec:end] if e["tag"] in ("dt", "dd")]
        return {dl[i]["text"]: dl[i + 1]["text"] for i in range(0, len(dl), 2)}

    a, b = env("alpha"), env("beta")
    assert a["Python"] == "3.11.7" and a["torch"] == "2.4.0" and a["git commit"] == "abc1234"
    assert a["CPU"] == "Test CPU @ 2 cores" and a["GPU"] == "\u2014" and a["seeds"] == "0, 1"
    assert a["CPU time"] == "30.2 s" and a["libraries"] == "numpy: 2.0.1"
    assert b["Python"]  # every Report records its Python
    for k in ("CPU", "GPU", "torch", "git commit", "seeds", "CPU time", "platform"):
        assert b[k] == "\u2014", (k, b[k])
    assert b["wall time"] == "12.5 s" and b["mode"] == "quick (CPU scale)"


def test_claim_spread_and_seeds_are_shown(results):
    dom = _Dom(_page(results))
    row = next(r for r in dom.rows if r["attrs"]["data-claim"] == "headline/ours_gt_base")
    assert "91.5 ± 0.75" in row["text"] and "80.25 ± 1.5" in row["text"]
    assert "seeds: 90.75, 92.25" in row["text"]
    other = next(r for r in dom.rows if r["attrs"]["data-claim"] == "mechanism/gap")
    assert "±" not in other["text"]


def test_unreadable_results_json_is_shown_not_hidden(results, tmp_path, capsys):
    p = results / "beta" / "results.json"
    d = json.loads(p.read_text())
    d["claims"][0]["holds"] = True  # hand-edited: disagrees with ours = NaN
    p.write_text(json.dumps(d))
    loaded = {r.slug: r for r in rp.load_results(results)}
    assert loaded["beta"].report is None and "disagrees" in loaded["beta"].error
    out = tmp_path / "page.html"
    assert registry.main(["report", "--results", str(results), "--out", str(out)]) == 1
    io = capsys.readouterr()
    assert "disagrees" in io.err and "2/4 claims hold across 2 package(s); 1 unreadable" in io.out
    text = out.read_text()
    assert "results.json could not be read" in text and "disagrees" in text


# --- comparison -------------------------------------------------------------------------------


def _compare_fixture(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    _write(old / "alpha", "alpha", [
        Claim("a/flip", "m", ours=1.0, threshold=0.5),
        Claim("a/moved_spread", "m", ours=1.0, baseline=0.2),
        Claim("a/within_spread", "m", ours=1.0, baseline=0.2),
        Claim("a/rtol_moved", "m", ours=10.0, baseline=2.0),
        Claim("a/rtol_same", "m", ours=10.0, baseline=2.0),
        Claim("a/removed", "m", ours=1.0, threshold=0.0),
        Claim("a/nan_now", "m", ours=1.0, threshold=0.0),
    ], claim_extra={"a/moved_spread": {"spread": 0.1}, "a/within_spread": {"spread": 0.1}})
    _write(new / "alpha", "alpha", [
        Claim("a/flip", "m", ours=0.4, threshold=0.5),
        Claim("a/moved_spread", "m", ours=1.5, baseline=0.2),
        Claim("a/within_spread", "m", ours=1.05, baseline=0.2),
        Claim("a/rtol_moved", "m", ours=11.0, baseline=2.0),
        Claim("a/rtol_same", "m", ours=10.2, baseline=2.05),
        Claim("a/new", "m", ours=1.0, threshold=0.0),
        Claim("a/nan_now", "m", ours=float("nan"), threshold=0.0),
    ], claim_extra={"a/moved_spread": {"spread": 0.2}, "a/within_spread": {"spread": 0.1}})
    _write(old / "gone", "gone", [Claim("g/x", "m", ours=1.0, threshold=0.0)])
    return old, new


def test_compare_marks_flips_and_moves(tmp_path):
    old, new = _compare_fixture(tmp_path)
    ch = rp.compare_results(rp.load_results(old), rp.load_results(new))["alpha"]
    assert ch["a/flip"].flipped and ch["a/flip"].was_holds is True and ch["a/flip"].status == "changed"
    assert ch["a/flip"].moved and "relative tolerance" in ch["a/flip"].moved[0]  # 1.0 -> 0.4
    assert len(ch["a/moved_spread"].moved) == 1 and "spread 0.2 (seed sd)" in ch["a/moved_spread"].moved[0]
    assert ch["a/within_spread"].status == "same" and not ch["a/within_spread"].moved
    assert ch["a/rtol_moved"].moved[0].startswith("ours 10 → 11") and "5% relative" in ch["a/rtol_moved"].moved[0]
    assert ch["a/rtol_same"].status == "same"  # 2% and 2.5% moves are inside 5%
    assert ch["a/new"].status == "new" and ch["a/removed"].status == "removed"
    assert ch["a/nan_now"].flipped and "measured in one run only" in ch["a/nan_now"].moved[0]
    tight = rp.compare_results(rp.load_results(old), rp.load_results(new), rtol=0.01)["alpha"]
    assert [m.split(":")[0] for m in tight["a/rtol_same"].moved] == ["ours 10 → 10.2", "baseline 2 → 2.05"]
    with pytest.raises(ValueError, match="rtol"):
        rp.compare_results([], [], rtol=float("nan"))


def test_compare_page_and_cli(tmp_path, capsys):
    old, new = _compare_fixture(tmp_path)
    assert registry.main(["report", "--compare", str(old), str(new)]) == 0
    assert "page " + str(new / "compare.html") in capsys.readouterr().out
    dom = _Dom((new / "compare.html").read_text())
    rows = {r["attrs"]["data-claim"]: r for r in dom.rows}
    changed = {n for n, r in rows.items() if "changed" in r["attrs"]["class"].split()}
    assert changed == {"a/flip", "a/moved_spread", "a/rtol_moved", "a/new", "a/nan_now"}
    assert "holds flipped: yes → no" in rows["a/flip"]["text"]
    assert "relative tolerance" in rows["a/rtol_moved"]["text"] and "seed sd" in rows["a/moved_spread"]["text"]
    text = " ".join(e["text"] for e in dom.find("ul", class_="removed"))
    assert "a/removed" in text
    assert any("gone" in e["text"] for e in dom.find("p")) and dom.find("input", id="only-changed")
    ov = next(e for e in dom.find("tr") if e["attrs"].get("data-slug") == "alpha")["text"]
    assert "2 flipped, 4 moved, 1 new, 1 removed" in ov
    assert registry.main(["report", "--results", str(new), "--compare", str(old), str(new)]) == 2


# --- paper links, CLI -------------------------------------------------------------------------


def _fake_dist(site, name, urls, monkeypatch, home=None):
    info = site / f"{name.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", "Version: 0.1.0"]
    lines += [f"Project-URL: {u}" for u in urls] + ([f"Home-page: {home}"] if home else [])
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    monkeypatch.syspath_prepend(str(site))


def test_paper_url_from_distribution_metadata(tmp_path, monkeypatch):
    _fake_dist(tmp_path / "s", "iclr25-p1", ["Source, https://github.com/x/y", "Paper, https://arxiv.org/abs/1"],
               monkeypatch)
    _fake_dist(tmp_path / "s", "iclr25-p2", ["Homepage, https://example.org/p2"], monkeypatch)
    _fake_dist(tmp_path / "s", "iclr25-p3", ["Paper, javascript:alert(1)"], monkeypatch, home="https://h.org")
    _fake_dist(tmp_path / "s", "iclr25-p4", ["Source, https://github.com/x/y"], monkeypatch)
    assert rp.paper_url("p1") == "https://arxiv.org/abs/1"
    assert rp.paper_url("p2") == "https://example.org/p2"
    assert rp.paper_url("p3") == "https://h.org"  # a non-http(s) URL is never linked
    assert rp.paper_url("p4") is None and rp.paper_url("not-installed-anywhere") is None


def test_missing_results_folder_is_a_clean_error(tmp_path, capsys):
    assert registry.main(["report", "--results", str(tmp_path / "nope")]) == 2
    assert "iclr25 reproduce --quick" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no <slug>/results.json"):
        rp.load_results(tmp_path / "empty")


def test_reproduce_report_writes_the_page(tmp_path, monkeypatch, capsys):
    from importlib.metadata import EntryPoint

    def good(quick, out_dir):
        (out_dir / "curve.png").write_bytes(_png(16, 16))
        return [Claim("g/holds", "m", ours=1.0, threshold=0.5), Claim("g/fails", "m", ours=0.0, threshold=0.5)]

    def bad(quick, out_dir):
        raise RuntimeError("boom: data file x.csv not found; looked in:\n  - /cache/x.csv\n<set ICLR25_DATA>")

    mods = {}
    for name, fn in (("fakerep_good", good), ("fakerep_bad", bad)):
        mods[name] = type(sys)(name)
        mods[name].reproduce = fn
        monkeypatch.setitem(sys.modules, name, mods[name])
    eps = [EntryPoint(name=n.split("_")[-1], value=f"{n}:reproduce", group=registry.GROUP) for n in mods]
    monkeypatch.setattr(registry, "entry_points", lambda group: eps if group == registry.GROUP else [])
    assert registry.main(["reproduce", "--quick", "--quiet", "--report", "--out", str(tmp_path)]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert f"page {tmp_path / 'report.html'}" in last and "CRASHED: bad" in last
    dom = _Dom((tmp_path / "report.html").read_text())
    assert [r["attrs"]["data-claim"] for r in dom.rows] == ["g/holds", "g/fails"]
    assert len(dom.find("img", alt="curve.png")) == 1
    assert any("crashed before writing results.json" in e["text"] for e in dom.find("tr"))
    # the page says why it crashed (one line, escaped), not only that it did
    assert any("RuntimeError: boom: data file x.csv not found; looked in: - /cache/x.csv <set ICLR25_DATA>"
               in e["text"] for e in dom.find("tr"))


# --- a real browser -------------------------------------------------------------------------

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars"]
# Chromium's own background traffic (sign-in, network time, search preconnect) that survives the
# flags above; a page's fetch never goes to these in this test, whose only URLs are the fixture's.
CHROMIUM_OWN_HOSTS = {"www.google.com", "accounts.google.com", "clients1.google.com", "clients2.google.com",
                      "update.googleapis.com", "optimizationguide-pa.googleapis.com", "redirector.gvt1.com",
                      "safebrowsingohttpgateway.googleapis.com", "content-autofill.googleapis.com"}


PROBE = """<script>window.addEventListener("load", function () {
  var shown = function (sel) {
    return [].filter.call(document.querySelectorAll(sel), function (r) { return r.offsetParent !== null; });
  };
  // before the filter: each package section's displayed plot images and their natural sizes
  document.body.setAttribute("data-section-plots", [].map.call(document.querySelectorAll("section.pkg"),
    function (sec) {
      return sec.dataset.slug + ":" + [].filter.call(sec.querySelectorAll("img.plot"),
        function (i) { return i.offsetParent !== null; }).map(function (i) {
          return i.alt + "=" + i.naturalWidth + "x" + i.naturalHeight; }).join("|");
    }).join(";"));
  var box = document.getElementById("only-failing");
  box.checked = true; box.dispatchEvent(new Event("change"));
  document.body.setAttribute("data-visible", shown("tr.claim").map(function (r) { return r.dataset.claim; }).join(","));
  document.body.setAttribute("data-visible-plots", shown("tr.plotrow img.plot").map(function (i) {
    return i.alt; }).join(","));
});</script>"""


def _chromium():
    exe = os.environ.get("ICLR25_CHROMIUM") or next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")) if p),
        "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if not exe:
        pytest.skip("Chromium not found (apt-get install chromium; .ci/run installs it): "
                    "the real-browser test of the report page is skipped")
    return exe


class _Recorder(socketserver.ThreadingTCPServer):
    """An HTTP proxy on 127.0.0.1 that records each request line and answers 403."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        self.requests = []
        outer = self

        class H(socketserver.StreamRequestHandler):
            def handle(self):
                line = self.rfile.readline(4096).decode("latin-1").strip()
                if line:
                    outer.requests.append(line)
                self.wfile.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

        super().__init__(("127.0.0.1", 0), H)


def _host(request_line):
    target = request_line.split(" ")[1] if " " in request_line else request_line
    target = re.sub(r"^[a-z]+://", "", target)
    return re.split(r"[:/]", target, maxsplit=1)[0]


def _run_chromium(exe, profile, proxy, *args):
    cmd = [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--proxy-server=http://127.0.0.1:{proxy}",
           "--proxy-bypass-list=<-loopback>", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_page_in_headless_chromium(results, tmp_path, monkeypatch):
    exe = _chromium()
    _fake_dist(tmp_path / "site", "iclr25-alpha", ["Paper, https://arxiv.org/abs/0000.00001"], monkeypatch)
    with _Recorder() as proxy:
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        port = proxy.server_address[1]
        # the hostile note also tries a fetch through the loopback (caught by the recorder if it ran)
        p = results / "alpha" / "results.json"
        p.write_text(p.read_text().replace("& done", f"<img src=\\\"http://127.0.0.1:{port}/leak.png\\\"> & done"))
        # plots named by claims (Claim.plot): one under a failing claim, one under a holding one, and one
        # in the second package, so that every package section has a plot
        _name_plots(results / "alpha", {"headline/margin_short": "good.png", "mechanism/gap": "sub/curve.png"})
        (results / "beta" / "beta.png").write_bytes(_png(24, 16, (30, 160, 60)))
        _name_plots(results / "beta", {"b/ok": "beta.png"})
        page = rp.write_html_report(results, tmp_path / "report.html")
        dom = _Dom(_run_chromium(exe, tmp_path / "profile", port, "--virtual-time-budget=20000", "--dump-dom",
                                 page.as_uri()))
        shot = tmp_path / "report.png"
        _run_chromium(exe, tmp_path / "profile", port, "--window-size=1280,2400", f"--screenshot={shot}",
                      page.as_uri())
        # control: the same recorder does see a page's fetch (so silence above means no fetch)
        control = tmp_path / "control.html"
        control.write_text('<!doctype html><img src="http://fetch-canary.test/x.png">')
        _run_chromium(exe, tmp_path / "profile", port, "--virtual-time-budget=20000", "--dump-dom",
                      control.as_uri())
        # the "not holding only" filter: a copy of the page whose probe script ticks it and lists
        # the claim rows still displayed (the probe is not in the page's CSP, so the copy drops it)
        probe = tmp_path / "probe.html"
        probe.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text())
                         .replace("</body>", PROBE + "</body>"))
        probed = _Dom(_run_chromium(exe, tmp_path / "profile", port, "--virtual-time-budget=20000", "--dump-dom",
                                    probe.as_uri()))
        requests = list(proxy.requests)
        proxy.shutdown()
    hosts = [_host(r) for r in requests]
    assert "fetch-canary.test" in hosts, requests
    page_requests = [r for r, h in zip(requests, hosts) if h not in CHROMIUM_OWN_HOSTS | {"fetch-canary.test"}]
    assert page_requests == [], page_requests

    # every claim row, in order, with its verdict
    assert [r["attrs"]["data-claim"] for r in dom.rows] == [c.name for c in ALPHA + BETA]
    # the note with <script> is text: no script ran from it, nothing was injected
    assert dom.find("title")[0]["text"] == "iclr25 reproduction report"
    assert dom.find(id="injected") == [] and len(dom.find("script")) == 1
    row = next(r for r in dom.rows if r["attrs"]["data-claim"] == "headline/fpr")
    assert '<script>document.title="pwned"</script>' in row["text"]
    # what a reader compares, as the browser shows it: the paper's value, the gap and its seed spread
    short = next(r for r in dom.rows if r["attrs"]["data-claim"] == "headline/margin_short")["text"]
    assert "82 (Table 3)" in short and "0.5 ± 0.8" in short and "inside the seed spread" in short
    # the page's own script ran (its CSP hash matches): filter shown, images checked
    assert "hidden" not in dom.find("div", id="controls")[0]["attrs"]
    decoded = {e["attrs"]["alt"]: e["attrs"].get("data-decoded") for e in dom.find("img")}
    assert decoded == {"good.png": "1", "sub/curve.png": "1", "broken.png": "0", "beta.png": "1"}
    sizes = {e["attrs"]["alt"]: e["attrs"].get("data-natural-size") for e in dom.find("img")}
    assert sizes == {"good.png": "40x30", "sub/curve.png": "20x10", "broken.png": "0x0", "beta.png": "24x16"}
    body = dom.find("body")[0]["attrs"]
    assert body["data-images-decoded"] == "3/4"
    warn = dom.find("p", id="image-warning")[0]
    assert "hidden" not in warn["attrs"] and "1 plot(s)" in warn["text"]
    # every package section shows a plot image that the browser decoded to a non-zero natural size
    per_section = dict(x.split(":", 1) for x in probed.find("body")[0]["attrs"]["data-section-plots"].split(";"))
    assert set(per_section) == {"alpha", "beta"}
    for slug, imgs in per_section.items():
        dims = [tuple(map(int, x.rsplit("=", 1)[1].split("x"))) for x in imgs.split("|") if x]
        assert any(w > 0 and h > 0 for w, h in dims), f"{slug}: no plot with a non-zero natural size ({imgs})"
    assert "beta.png=24x16" in per_section["beta"] and "good.png=40x30" in per_section["alpha"]
    # a plot named by a claim sits in a plot row right under that claim's row
    trs = [e for e in dom.find("tr") if {"claim", "plotrow"} & set(e["attrs"].get("class", "").split())]
    order = [e["attrs"].get("data-claim") or " ".join(e["attrs"]["class"].split()[:2]) for e in trs]
    for claim, plot in (("headline/margin_short", "good.png"), ("mechanism/gap", "sub/curve.png"), ("b/ok", "beta.png")):
        i = order.index(claim)
        assert order[i + 1].startswith("plotrow") and plot in trs[i + 1]["text"], (claim, order)
    # the "not holding only" filter hides holding claims and the plot rows of holding claims
    shown = probed.find("body")[0]["attrs"]["data-visible"].split(",")
    assert shown == [c.name for c in ALPHA + BETA if not c.holds]
    assert probed.find("body")[0]["attrs"]["data-visible-plots"].split(",") == ["good.png"]
    # a screenshot was rendered
    png = shot.read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and struct.unpack(">II", png[16:24]) == (1280, 2400)
    assert len(png) > 20_000  # a rendered page, not a blank canvas
    if os.environ.get("ICLR25_KEEP_SCREENSHOT"):
        shutil.copy(shot, os.environ["ICLR25_KEEP_SCREENSHOT"])


def _name_plots(folder, plots):
    """Set ``plot`` of the named claims in ``folder/results.json``."""
    p = folder / "results.json"
    d = json.loads(p.read_text())
    for c in d["claims"]:
        if c["name"] in plots:
            c["plot"] = plots[c["name"]]
    p.write_text(json.dumps(d, indent=2))


def test_overview_shows_the_papers_title(results):
    p = results / "beta" / "results.json"
    d = json.loads(p.read_text())
    d["extra"] = {"paper_title": "A <Title> of the Paper"}
    p.write_text(json.dumps(d))
    dom = _Dom(_page(results))
    ov = {e["attrs"]["data-slug"]: e["text"] for e in dom.find("tr") if "pkg-row" in e["attrs"].get("class", "")}
    assert "A <Title> of the Paper" in ov["beta"]
    assert "A <Title> of the Paper" in dom.find("section", id="pkg-beta")[0]["text"]
    assert rp.paper_title("frs") is None or "Fuzzed Randomized Smoothing" in rp.paper_title("frs")
    assert rp.paper_title("no-such-method") is None


def test_run_info_names_cpu_gpu_and_the_packages_libraries():
    from iclr25.core.runinfo import package_libraries, run_info

    info = run_info()
    assert info["cpu"].endswith(f"{info['cpu_count']} cores") and info["gpu"]
    libs = package_libraries("iclr25-core")
    assert libs["iclr25-core"] and "numpy" in libs and "tyro" in libs
    assert package_libraries("no-such-distribution") == {}


def test_a_plot_named_by_a_claim_sits_under_that_claim(tmp_path):
    root = tmp_path / "results"
    claims = [Claim("h/a", "acc", ours=1.0, threshold=0.5, plot="curve.png"),
              Claim("h/b", "acc", ours=0.0, threshold=0.5, plot="curve.png"),
              Claim("h/c", "acc", ours=1.0, threshold=0.5, plot="missing.png")]
    _write(root / "gamma", "gamma", claims)
    (root / "gamma" / "curve.png").write_bytes(_png(30, 20))
    (root / "gamma" / "extra.png").write_bytes(_png(10, 10))
    page = _page(root)
    dom = _Dom(page)
    trs = [e for e in dom.find("tr") if {"claim", "plotrow"} & set(e["attrs"].get("class", "").split())]
    kinds = [e["attrs"].get("data-claim") or e["attrs"]["class"] for e in trs]
    # the plot row follows the first claim naming it, once; it fails the filter if any of its claims fails
    assert kinds == ["h/a", "plotrow fails", "h/b", "h/c", "plotrow holds"]
    assert "curve.png" in trs[1]["text"] and "supports h/a, h/b" in trs[1]["text"]
    assert "missing.png" in trs[4]["text"] and "not found" in trs[4]["text"]
    imgs = [e["attrs"]["alt"] for e in dom.find("img")]
    assert imgs.count("curve.png") == 1 and imgs.count("extra.png") == 1  # each embedded once
    sec = dom.find("section", id="pkg-gamma")[0]["text"]
    assert "Other plots" in sec
    assert ".only-failing tr.plotrow.holds" in page
    with pytest.raises(ValueError, match="relative"):
        Claim("h/x", "acc", ours=1.0, threshold=0.5, plot="../x.png")


def test_crash_reason_is_shown_on_a_section_from_an_earlier_run(tmp_path):
    write_report(Report(method="a", version="1", quick=True, seconds=1.0, claims=[Claim("a/x", "m", ours=1.0,
                                                                                        threshold=0.5)]), tmp_path / "a")
    html = rp.render_html(rp.load_results(tmp_path), crashed={"a": "ValueError: bad <input>"})
    assert "ValueError: bad &lt;input&gt;" in html and "crashed in the last run" in html
    assert "crashed in the last run" in rp.render_html(rp.load_results(tmp_path), crashed=["a"])


def test_reproduce_report_writes_a_page_when_every_method_crashed(tmp_path, monkeypatch, capsys):
    """`iclr25 reproduce --quick --report` without the data mirror: every method crashes, and the page
    still says which and why, instead of "no page written; run iclr25 reproduce first"."""
    from importlib.metadata import EntryPoint

    def bad(quick, out_dir):
        raise FileNotFoundError("data file bad/x.csv not found")

    mod = type(sys)("fakecrash_bad")
    mod.reproduce = bad
    monkeypatch.setitem(sys.modules, "fakecrash_bad", mod)
    eps = [EntryPoint(name="bad", value="fakecrash_bad:reproduce", group=registry.GROUP)]
    monkeypatch.setattr(registry, "entry_points", lambda group: eps if group == registry.GROUP else [])
    assert registry.main(["reproduce", "--quick", "--quiet", "--report", "--out", str(tmp_path)]) == 1
    io = capsys.readouterr()
    assert "no report page written" not in io.err and f"page {tmp_path / 'report.html'}" in io.out
    html = (tmp_path / "report.html").read_text()
    assert "crashed before writing results.json" in html and "data file bad/x.csv not found" in html


def test_long_unbroken_text_does_not_widen_the_page_in_chromium(tmp_path):
    """A note, metric or paper cell holding a long token (a hash, a path, a URL) stretched the claim table
    far past the window, so the verdict and note columns scrolled off the right edge."""
    exe = _chromium()
    token = "sha256:" + "0123456789abcdef" * 40
    write_report(Report(method="w", version="1", quick=True, seconds=1.0, claims=[
        Claim("w/long", "m/" + token[:200], ours=1.0, threshold=0.5, paper=token[:300], note=token),
        Claim("mechanism/short", "m", ours=1.0, baseline=0.5, threshold=0.5, paper="0.9")]), tmp_path / "w")
    page = rp.write_html_report(tmp_path, tmp_path / "report.html")
    probe = tmp_path / "probe.html"
    probe.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text()).replace(
        "</body>", '<script>window.addEventListener("load", function () { document.body.setAttribute('
        '"data-width", Math.max.apply(null, [].map.call(document.querySelectorAll("table, .wide, body"), function (e) {'
        ' return e.scrollWidth - e.clientWidth; })) + "/" + document.documentElement.scrollWidth + "/" + '
        'window.innerWidth); var r = document.createRange(); document.body.setAttribute("data-split", '
        '[].filter.call(document.querySelectorAll("td.kind"), function (td) {'
        ' r.selectNodeContents(td.firstChild); return r.getClientRects().length > 1; }).length); });'
        '</script></body>'))
    with _Recorder() as proxy:
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        dom = _Dom(_run_chromium(exe, tmp_path / "profile", proxy.server_address[1], "--window-size=1200,900",
                                 "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()))
        proxy.shutdown()
    over, scroll, inner = map(int, dom.find("body")[0]["attrs"]["data-width"].split("/"))
    assert scroll <= inner, f"page is {scroll} px wide in a {inner} px window"
    assert over <= 1, f"a table scrolls sideways by {over} px"
    # ... and the short cells are not squeezed into broken words ("me/cha/nis/m") instead
    assert dom.find("body")[0]["attrs"]["data-split"] == "0"
