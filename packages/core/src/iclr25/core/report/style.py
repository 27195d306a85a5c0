"""The page's inline CSS and script, and their Content-Security-Policy hashes.

Part of :mod:`iclr25.core.report` (see its docstring)."""

from __future__ import annotations

import base64
import hashlib

_CSS = """
:root { --ok: #1a7f37; --bad: #c62828; --warn: #9a6700; --line: #d0d7de; --muted: #57606a; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 auto;
  max-width: 1400px; padding: 1rem 1.5rem 4rem; color: #1f2328; background: #fff; }
h1 { font-size: 1.6rem; margin: 0.5rem 0; }
h2 { font-size: 1.25rem; margin: 2.5rem 0 0.5rem; padding-top: 0.5rem; border-top: 2px solid var(--line); }
h3 { font-size: 1.05rem; margin: 1.2rem 0 0.4rem; }
.muted, .meta { color: var(--muted); }
table { border-collapse: collapse; width: 100%; margin: 0.5rem 0 1rem; }
th, td { border: 1px solid var(--line); padding: 0.3rem 0.5rem; text-align: left; vertical-align: top; }
td.note, td.paper, td.metric { overflow-wrap: anywhere; }
th { background: #f6f8fa; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.note, div.note { white-space: pre-wrap; max-width: 36rem; }
td.note { min-width: 16rem; }
td.name { min-width: 13rem; max-width: 18rem; overflow-wrap: normal; word-break: normal; hyphens: none; }
td.holds .why { font-weight: 400; color: #1f2328; font-size: 0.9em; }
.inside { color: var(--warn); font-size: 0.85em; } .beyond { color: var(--ok); font-size: 0.85em; }
td.note details summary { cursor: pointer; }
.wide { overflow-x: auto; }
code, .name { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.92em; }
.yes { color: var(--ok); font-weight: 600; }
.no { color: var(--bad); font-weight: 600; }
tr.claim.fails td.holds { background: #ffebe9; }
tr.claim.holds td.holds { background: #dafbe1; }
tr.changed td:first-child { border-left: 5px solid var(--warn); }
tr.changed td.change { background: #fff8c5; }
.flip { color: var(--bad); font-weight: 600; }
.moved { color: var(--warn); }
.sd { color: var(--muted); }
.seeds { color: var(--muted); font-size: 0.85em; white-space: normal; }
.plots { display: flex; flex-wrap: wrap; gap: 1rem; }
figure { margin: 0; border: 1px solid var(--line); padding: 0.5rem; flex: 0 1 640px; max-width: 100%; }
figure img { max-width: 100%; height: auto; display: block; }
tr.plotrow td { background: #fafbfc; }
figure .close { display: none; }
figure:target { position: fixed; inset: 2vh 2vw; z-index: 10; background: #fff; overflow: auto; max-width: none;
  box-shadow: 0 0 0 100vmax rgba(0, 0, 0, 0.5); }
figure:target img { max-width: none; }
figure:target .close { display: block; text-align: right; }
tr.plotrow figure { flex: 0 1 900px; }
figure.broken { border-color: var(--bad); }
figcaption { color: var(--muted); font-size: 0.85em; margin-top: 0.3rem; }
.banner { padding: 0.5rem 0.8rem; border: 1px solid var(--bad); background: #ffebe9; margin: 0.5rem 0; }
.controls { margin: 0.8rem 0; display: flex; gap: 1.5rem; }
dl.env { display: grid; grid-template-columns: max-content 1fr; gap: 0.1rem 1rem; margin: 0.3rem 0; }
dl.env dt { color: var(--muted); }
dl.env dd { margin: 0; font-family: ui-monospace, monospace; font-size: 0.9em; word-break: break-all; }
.only-failing tr.claim.holds, .only-failing tr.plotrow.holds, .only-failing tr.pkg-row.all-hold, .only-failing section.pkg.all-hold,
.only-changed tr.claim:not(.changed), .only-changed tr.plotrow, .only-changed section.pkg:not(.has-changes) { display: none; }
""".strip()

_JS = """
(function () {
  var body = document.body;
  var controls = document.getElementById("controls");
  if (controls) { controls.hidden = false; }
  [["only-failing", "only-failing"], ["only-changed", "only-changed"]].forEach(function (p) {
    var box = document.getElementById(p[0]);
    if (box) { box.addEventListener("change", function () { body.classList.toggle(p[1], box.checked); }); }
  });
  window.addEventListener("load", function () {
    var imgs = Array.prototype.slice.call(document.querySelectorAll("img.plot"));
    Promise.all(imgs.map(function (img) {
      var ok = img.complete && img.naturalWidth > 0;
      var check = ok && img.decode ? img.decode().then(function () { return true; }, function () { return false; })
                                   : Promise.resolve(ok);
      return check.then(function (good) {
        img.setAttribute("data-decoded", good ? "1" : "0");
        img.setAttribute("data-natural-size", img.naturalWidth + "x" + img.naturalHeight);
        if (!good) { img.parentNode.classList.add("broken"); }
        return good;
      });
    })).then(function (res) {
      var bad = res.filter(function (g) { return !g; }).length;
      body.setAttribute("data-images-decoded", (imgs.length - bad) + "/" + imgs.length);
      if (bad) {
        var w = document.getElementById("image-warning");
        w.textContent = bad + " plot(s) on this page could not be decoded by this browser.";
        w.hidden = false;
      }
    });
  });
})();
""".strip()


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


