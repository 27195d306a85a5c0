"""The work behind the CLI subcommands (imported lazily by :mod:`.cli`)."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ._version import __version__
from .config import CompareConfig, LowerBoundConfig, StreamConfig

log = logging.getLogger("iclr25.sw_fair_clustering")

SLUG = "sw-fair-clustering"


def _jsonable(o):
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, np.ndarray):
        return _jsonable(o.tolist())
    if isinstance(o, (np.floating, float)):
        return float(o) if math.isfinite(o) else None
    if isinstance(o, np.integer):
        return int(o)
    return o


def _write_json(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_jsonable(obj), indent=1, allow_nan=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def _append_jsonl(path: Path, rec: dict) -> None:
    from iclr25.core.jsonl import append_jsonl

    append_jsonl(path, [_jsonable(rec)])


def _cfg_dict(cfg) -> dict:
    return _jsonable(dataclasses.asdict(cfg))


# ----------------------------------------------------------------------------------------------- sources


class _Source:
    """A stream as chunks ``(X, colors, timestamps | None)``, restartable at an offset."""

    def __init__(self, cfg):
        from .data import iter_csv_chunks, load_stream

        self.cfg = cfg
        self.csv = cfg.data is not None and Path(cfg.data).suffix.lower() != ".npz"
        if cfg.data is not None and not Path(cfg.data).exists():
            raise FileNotFoundError(f"data file {cfg.data} does not exist")
        if not self.csv:
            self.sd = load_stream(dataset=cfg.dataset, attr=cfg.attr, data=cfg.data,
                                  colors=list(cfg.colors) or None, standardize_features=cfg.standardize,
                                  max_rows=cfg.max_rows)
            self.names = list(self.sd.color_names)
            self.stats = self.sd.standardization
            self.n = len(self.sd)
            if self.n == 0:
                raise ValueError(f"{cfg.data or cfg.dataset}: no data points")
            self.feature_names = self.sd.feature_names
            return
        # CSV: a first pass fixes the colour set and the whole-file mean / sd (never two copies in memory)
        cmap: dict[str, int] = {}
        s1 = s2 = None
        n = 0
        for X, _, _ in iter_csv_chunks(cfg.data, **self._csv_kw(), color_map=cmap):
            if cfg.max_rows is not None:
                X = X[: cfg.max_rows - n]
            s1 = X.sum(0) if s1 is None else s1 + X.sum(0)
            s2 = (X * X).sum(0) if s2 is None else s2 + (X * X).sum(0)
            n += len(X)
            if cfg.max_rows is not None and n >= cfg.max_rows:
                break
        if n == 0:
            raise ValueError(f"{cfg.data}: no data rows")
        self.names = [None] * len(cmap)
        for v, i in cmap.items():
            self.names[i] = v
        self.n = n
        self.stats = None
        if cfg.standardize:
            mu = s1 / n
            sd = np.sqrt(np.maximum(s2 / n - mu * mu, 0.0))
            sd = np.where(sd > 0, sd, 1.0)
            self.stats = {"mean": mu.tolist(), "std": sd.tolist()}
        self.feature_names = list(cfg.features)

    def _csv_kw(self) -> dict:
        c = self.cfg
        return dict(features=list(c.features) or None, color_column=c.color_column, delimiter=c.delimiter,
                    header=c.header, colors=list(c.colors) or None, timestamp_column=c.timestamp_column,
                    chunk_rows=getattr(c, "chunk_rows", 100_000))

    @property
    def n_colors(self) -> int:
        return len(self.names)

    def chunks(self, skip: int = 0) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        from .data import iter_csv_chunks

        if not self.csv:
            step = getattr(self.cfg, "chunk_rows", 100_000)
            ts = self.sd.timestamps
            for i in range(skip, self.n, step):
                yield self.sd.X[i:i + step], self.sd.colors[i:i + step], None if ts is None else ts[i:i + step]
            return
        cmap = {v: i for i, v in enumerate(self.names)}
        n = skip
        kw = self._csv_kw()
        kw["colors"] = self.names
        for X, c, ts in iter_csv_chunks(self.cfg.data, **kw, color_map=cmap, skip_rows=skip):
            if n + len(X) > self.n:
                X, c = X[: self.n - n], c[: self.n - n]
                ts = None if ts is None else ts[: self.n - n]
            if self.stats is not None:
                X = (X - np.asarray(self.stats["mean"])) / np.asarray(self.stats["std"])
            n += len(X)
            yield X, c, ts
            if n >= self.n:
                return


class _Ring:
    """The exact last ``W`` points (only for ``stream --evaluate``: linear memory by design)."""

    def __init__(self, W: int):
        self.W = W
        self.X: np.ndarray | None = None
        self.c = np.zeros(W, np.int64)
        self.n = 0

    def add(self, X: np.ndarray, c: np.ndarray) -> None:
        if self.X is None:
            self.X = np.zeros((self.W, X.shape[1]))
        X, c = X[-self.W:], c[-self.W:]
        idx = (self.n + np.arange(len(X))) % self.W
        self.X[idx], self.c[idx] = X, c
        self.n += len(X)

    def window(self, n_colors: int):
        from .weighted_set import WeightedSet

        m = min(self.n, self.W)
        order = (self.n - m + np.arange(m)) % self.W
        return WeightedSet(self.X[order], np.ones(m), self.c[order], np.arange(self.n - m + 1, self.n + 1, dtype=float),
                           n_colors)


# ----------------------------------------------------------------------------------------------- stream


_RESUME_KEYS = ("dataset", "attr", "data", "features", "color_column", "delimiter", "header", "colors",
                "timestamp_column", "standardize", "max_rows", "window", "k", "z", "eps", "eta", "coreset_size",
                "block_size", "horizon", "seed",
                # what every query record depends on (a resumed run must equal an uninterrupted one)
                "query_every", "relaxed", "lower", "upper", "n_init", "evaluate")


def _query_record(sw, cfg: StreamConfig, names: list[str], qi: int, ring: _Ring | None) -> dict:
    from .clustering import fair_kclustering
    from .fairness import FairnessSpec, color_weight_error
    from .lp import fair_assignment_lp

    t0 = time.perf_counter()
    S = sw.query()
    if cfg.lower:
        if len(cfg.lower) != sw.n_colors:
            raise ValueError(f"--lower/--upper give {len(cfg.lower)} bounds but the stream has {sw.n_colors} "
                             f"colours {names}")
        spec = FairnessSpec(np.asarray(cfg.lower), np.asarray(cfg.upper), tuple(names))
    else:
        spec = FairnessSpec.proportional(S.colors, cfg.eta, n_colors=sw.n_colors, weights=S.weights,
                                         color_names=names)
    fit_spec = spec.relaxed(cfg.relaxed) if cfg.relaxed else spec
    res = fair_kclustering(S, cfg.k, cfg.z, fit_spec, seed=cfg.seed + qi, n_init=cfg.n_init,
                           time_limit=cfg.time_limit)
    st = sw.stats()
    rec = {"t": sw.t, "query": qi, "stored_points": st["stored_points"], "stored_over_W": st["stored_points"] / sw.window,
           "buckets": st["buckets"], "summary_points": len(S), "summary_color_weights": S.color_weights(),
           "bounds": fit_spec.to_dict(), "relaxed": cfg.relaxed, "status": res.status,
           "cost_on_summary": res.cost if res.assignment.optimal else None, "message": res.assignment.message,
           "violations": res.assignment.violations, "n_fractional": res.assignment.n_fractional,
           "centers": res.centers, "seconds": None}
    if ring is not None:
        win = ring.window(sw.n_colors)
        wspec = spec if cfg.lower else FairnessSpec.proportional(win.colors, cfg.eta, n_colors=sw.n_colors,
                                                                 color_names=names)
        ev = fair_assignment_lp(win, res.centers, wspec, cfg.z, time_limit=cfg.time_limit)
        rec["window_eval"] = {"status": ev.status, "fair_cost": ev.cost if ev.optimal else None,
                              "color_weight_error": color_weight_error(S.color_weights(), win.color_weights()),
                              "violations": ev.violations}
    rec["seconds"] = time.perf_counter() - t0
    return rec


def run_stream(cfg: StreamConfig) -> int:
    from .sliding_window import SlidingWindowCoreset

    out = Path(cfg.out)
    summ_p, prog_p, q_p = out / "summary.npz", out / "progress.json", out / "queries.jsonl"
    src = _Source(cfg)  # validates the input first: a bad flag leaves no empty output folder behind
    if cfg.window > src.n:
        raise ValueError(f"--window {cfg.window} is longer than the stream ({src.n} points"
                         f"{' after --max-rows' if cfg.max_rows is not None else ''}): the first query comes "
                         f"when a window is full, so none would run; use --window <= {src.n}")
    out.mkdir(parents=True, exist_ok=True)
    names = src.names
    qe = cfg.query_every or max(1, cfg.window // 5)
    if cfg.resume:
        if not summ_p.is_file() or not prog_p.is_file():
            raise FileNotFoundError(f"--resume: no checkpoint in {out} (summary.npz and progress.json); "
                                    "run without --resume first")
        prog = json.loads(prog_p.read_text())
        old = prog["config"]
        now = _cfg_dict(cfg)
        diff = [key for key in _RESUME_KEYS if old.get(key) != now.get(key)]
        if diff:
            raise ValueError(f"--resume: the options {diff} differ from the interrupted run in {out}; "
                             "resume with the same options")
        sw = SlidingWindowCoreset.load(summ_p)
        next_q, qi = prog["next_query"], prog["queries"]
        if q_p.is_file():  # drop records written after the checkpoint (a torn tail or a crash in between)
            from iclr25.core.jsonl import read_jsonl, write_jsonl

            write_jsonl(q_p, [r for r in read_jsonl(q_p, required=("t",), torn_tail="drop") if r["t"] <= sw.t])
        log.info("resuming at stream offset %d (query %d)", sw.t, qi)
    else:
        if summ_p.exists() or q_p.exists():
            raise ValueError(f"{out} already holds a stream run (summary.npz / queries.jsonl); pass --resume to "
                             "continue it or choose another --out")
        sw = SlidingWindowCoreset(cfg.window, cfg.k, cfg.z, cfg.eps, n_colors=src.n_colors,
                                  coreset_size=cfg.coreset_size, block_size=cfg.block_size, horizon=cfg.horizon,
                                  seed=cfg.seed)
        next_q, qi = cfg.window, 0
    from iclr25.core.runinfo import write_run_files

    run_cfg = {"command": "stream", "version": __version__, "config": _cfg_dict(cfg), "colors": names,
               "standardization": src.stats, "n_points": src.n, "query_every": qe, "block_size": sw.block_size,
               "summary": sw.config()}
    write_run_files(out, config=run_cfg)
    _write_json(out / "colors.json", {str(i): v for i, v in enumerate(names)})
    ring = _Ring(cfg.window) if cfg.evaluate else None
    if ring is not None and sw.t:
        pos = max(0, sw.t - cfg.window)
        for X, c, _ in src.chunks(pos):  # refill the exact window for --evaluate: the points up to the checkpoint
            X, c = X[: sw.t - pos], c[: sw.t - pos]
            ring.add(X, c)
            pos += len(X)
            if pos >= sw.t:
                break
    from iclr25.core.progress import progress

    statuses: dict[str, int] = {}
    if cfg.resume and q_p.is_file():  # the kept records' statuses count in results.json too
        from iclr25.core.jsonl import read_jsonl

        for r in read_jsonl(q_p, required=("t",), torn_tail="drop"):
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    t0 = time.perf_counter()
    inserted0 = sw.t
    bar = progress(total=src.n, desc="stream", unit="pt", initial=sw.t, quiet=cfg.quiet)

    def checkpoint():
        sw.save(summ_p)
        _write_json(prog_p, {"t": sw.t, "next_query": next_q, "queries": qi, "config": _cfg_dict(cfg)})

    for X, c, ts in src.chunks(sw.t):
        i = 0
        while i < len(X):
            take = min(len(X) - i, next_q - sw.t) if next_q > sw.t else len(X) - i
            sw.insert_many(X[i:i + take], c[i:i + take], None if ts is None else ts[i:i + take])
            if ring is not None:
                ring.add(X[i:i + take], c[i:i + take])
            bar.update(take)
            i += take
            if sw.t == next_q:
                rec = _query_record(sw, cfg, names, qi, ring)
                _append_jsonl(q_p, rec)
                statuses[rec["status"]] = statuses.get(rec["status"], 0) + 1
                if not cfg.quiet:
                    extra = ""
                    if rec["status"] != "optimal":
                        extra = f": {'; '.join(rec['violations']) or rec['message']}"
                    cost = f" cost {rec['cost_on_summary']:.6g}" if rec["cost_on_summary"] is not None else ""
                    ev = ""
                    if "window_eval" in rec and rec["window_eval"]["fair_cost"] is not None:
                        ev = f" | window fair cost {rec['window_eval']['fair_cost']:.6g}"
                    print(f"t={sw.t} stored={rec['stored_points']} ({100 * rec['stored_over_W']:.1f}% of W) "
                          f"summary={rec['summary_points']} status={rec['status']}{extra}{cost}{ev} "
                          f"({rec['seconds']:.2f} s)", flush=True)
                qi += 1
                next_q += qe
                checkpoint()
    checkpoint()
    bar.close()
    secs = time.perf_counter() - t0
    rate = (sw.t - inserted0) / secs if secs > 0 else math.inf
    st = sw.stats()
    write_run_files(out, config=run_cfg, results={"points": sw.t, "queries": qi, "statuses": statuses,
                                                  "summary": st, "seconds": secs}, started=t0)
    print(f"stream: {sw.t} points ({rate:.0f} points/s), {qi} queries {statuses or '{}'}; stored "
          f"{st['stored_points']} points ({100 * st['stored_points'] / cfg.window:.1f}% of W = {cfg.window}); "
          f"wrote {q_p}")
    return 0


# ----------------------------------------------------------------------------------------------- compare


def run_compare(cfg: CompareConfig) -> int:
    from .evaluation import StatusCounter
    from .experiments import run_config

    out = Path(cfg.out)
    src = _Source(cfg)  # validates the input first: a bad file leaves no empty output folder behind
    sd = src.sd if not src.csv else _materialise(src)
    out.mkdir(parents=True, exist_ok=True)
    status = StatusCounter()
    records: list = []
    rows_md = ["| t | arm | points | fit LP | window LP | cost ratio | coreset error | colour error |",
               "|---|---|---|---|---|---|---|---|"]

    def show(size, seed, row):
        for arm, r in row["arms"].items():
            ratio = "" if r["ratio"] is None else f"{r['ratio']:.4f}"
            ce = "" if r.get("coreset_error_mean") is None else f"{r['coreset_error_mean']:.4f}"
            cw = "" if r.get("color_error") is None else f"{r['color_error']:.4f}"
            line = (f"| {row['t']} | {arm} | {r['size']} | {r['fit_status']} | {r['eval_status']} | {ratio} | {ce} "
                    f"| {cw} |")
            rows_md.append(line)
            if not cfg.quiet:
                print(line, flush=True)

    if not cfg.quiet:
        print("\n".join(rows_md))
    runs = run_config(sd, cfg.window, cfg.k, (cfg.coreset_size,), (cfg.seed,), n_queries=cfg.n_queries,
                      n_center_sets=cfg.n_center_sets, start=cfg.start, insertion=cfg.insertion, status=status,
                      records=records, tag=sd.name, z=cfg.z, eps=cfg.eps, eta=cfg.eta, relaxed=cfg.relaxed,
                      block_size=cfg.block_size, n_init=cfg.n_init, query_every=cfg.query_every, progress=show)
    rows = runs[cfg.coreset_size][cfg.seed]
    arms = list(rows[0]["arms"])
    summary = {}
    for arm in arms:
        rat = [r["arms"][arm]["ratio"] for r in rows if r["arms"][arm]["ratio"] is not None]
        ce = [r["arms"][arm]["coreset_error_mean"] for r in rows if r["arms"][arm].get("coreset_error_mean") is not None]
        summary[arm] = {"mean_ratio": float(np.mean(rat)) if rat else None,
                        "mean_coreset_error": float(np.mean(ce)) if ce else None,
                        "mean_points": float(np.mean([r["arms"][arm]["size"] for r in rows]))}
    sol = status.table()
    from iclr25.core.runinfo import write_run_files

    _write_json(out / "compare.json", {"config": _cfg_dict(cfg), "colors": src.names, "summary": summary,
                                       "solver_status": sol, "queries": rows})
    write_run_files(out, config={"command": "compare", "version": __version__, "config": _cfg_dict(cfg),
                                 "colors": src.names, "standardization": src.stats},
                    results={"summary": summary, "solver_status": sol})
    with open(out / "queries.jsonl", "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(_jsonable(r), allow_nan=False) + "\n")
    (out / "compare.md").write_text("\n".join(rows_md) + "\n", encoding="utf-8")
    bad = {a: {k: v for k, v in s.items() if k != "optimal"} for a, s in sol.items()}
    bad = {a: s for a, s in bad.items() if s}
    parts = [f"{a} {s['mean_ratio']:.4f}" for a, s in summary.items() if s["mean_ratio"] is not None]
    print(f"compare: mean cost ratio vs offline: {', '.join(parts)}; non-optimal solves: {bad or 'none'}; "
          f"wrote {out / 'compare.json'}")
    return 0


def _materialise(src: _Source):
    from .data import StreamData

    Xs, cs, tss = [], [], []
    for X, c, ts in src.chunks(0):
        Xs.append(X)
        cs.append(c)
        tss.append(ts)
    ts = None if any(t is None for t in tss) else np.concatenate(tss)
    return StreamData(np.concatenate(Xs), np.concatenate(cs), src.names, ts, str(src.cfg.data))


# ----------------------------------------------------------------------------------------------- lower bound


def run_lower_bound_demo(cfg: LowerBoundConfig) -> int:
    from .fairness import FairnessSpec, exact_fair_feasible
    from .lp import fair_assignment_lp
    from .sliding_window import SlidingWindowCoreset
    from .weighted_set import WeightedSet

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    exact = FairnessSpec.exact([0.5, 0.5], color_names=("R", "B"))
    # part 1: the spec's stream, W = 4
    stream = [0, 1, 0, 1, 1, 0, 0]
    part1 = []
    print("Exact 1:1 balance, window W = 4, stream R B R B B R R")
    print("| t | window | #R | #B | exactly fair clustering exists | HiGHS status (centre at 0) |")
    print("|---|---|---|---|---|---|")
    for t in range(4, 8):
        win = np.array(stream[t - 4:t])
        feas = exact_fair_feasible(win, exact)
        S = WeightedSet.from_arrays(np.zeros((4, 1)), win, n_colors=2)
        stt = fair_assignment_lp(S, np.zeros((1, 1)), exact, 1).status
        part1.append({"t": t, "window": "".join("RB"[c] for c in win), "R": int((win == 0).sum()),
                      "B": int((win == 1).sum()), "feasible": feas, "lp_status": stt})
        print(f"| {t} | {part1[-1]['window']} | {part1[-1]['R']} | {part1[-1]['B']} | {feas} | {stt} |")
    # part 2: W = 2m; windows alternate between m:m and (m-1):(m+1) as single points expire
    W = cfg.window
    rng = np.random.default_rng(cfg.seed)
    half = W // 2
    base = np.array([0] * half + [1] * half)
    rng.shuffle(base)
    seq = [int(c) for c in base]
    while len(seq) < cfg.length:  # each new point repeats the colour that expires, or flips it now and then
        nxt = seq[-W] if rng.random() < 0.7 else 1 - seq[-W]
        seq.append(nxt)
    seq = np.array(seq)
    X = rng.normal(size=(len(seq), 2))
    # the coreset's own colour weights (no colour counters: for W this small they would hold every point)
    sw = SlidingWindowCoreset(W, 2, 1, cfg.eps, n_colors=2, coreset_size=cfg.coreset_size, seed=cfg.seed,
                              color_counts=False)
    part2 = []
    for t in range(1, len(seq) + 1):
        sw.insert(X[t - 1], int(seq[t - 1]))
        if t < W:
            continue
        win = seq[t - W:t]
        truth = exact_fair_feasible(win, exact)
        S = sw.query()
        summary_says = exact_fair_feasible(S.colors, exact, S.weights)
        cw = S.color_weights()
        relaxed_ok = exact_fair_feasible(S.colors, exact.relaxed(cfg.eps), S.weights)
        part2.append({"t": t, "R": int((win == 0).sum()), "B": int((win == 1).sum()), "truth": truth,
                      "summary_exact": summary_says, "summary_R": float(cw[0]), "summary_B": float(cw[1]),
                      "summary_relaxed_feasible": relaxed_ok, "stored": sw.stored_points})
    n = len(part2)
    flips = sum(part2[i]["truth"] != part2[i - 1]["truth"] for i in range(1, n))
    wrong = sum(r["truth"] != r["summary_exact"] for r in part2)
    rel = sum(r["summary_relaxed_feasible"] for r in part2)
    rel_true = sum(r["summary_relaxed_feasible"] for r in part2 if r["truth"])
    n_true = sum(r["truth"] for r in part2)
    stored = max(r["stored"] for r in part2)
    dev = max(max(abs(r["summary_R"] - r["R"]) / r["R"], abs(r["summary_B"] - r["B"]) / r["B"]) for r in part2)
    print(f"\nW = {W}, {n} windows, stream of {len(seq)}: exact feasibility flips {flips} times when one point "
          f"expires; a summary storing at most {stored} points, colour weights within {100 * dev:.0f}% "
          f"(exactly fair iff its colour weights are 1:1), "
          f"answers wrong at {wrong}/{n} windows; its (1 + {cfg.eps})-relaxed LP is feasible at {rel}/{n} "
          f"windows ({rel_true}/{n_true} of the exactly-fair ones).")
    _write_json(out / "lower_bound_demo.json", {"config": _cfg_dict(cfg), "part1": part1, "part2": part2,
                                                "flips": flips, "summary_wrong": wrong, "relaxed_feasible": rel,
                                                "max_color_weight_error": dev,
                                                "windows": n})
    print(f"lower-bound-demo: t=4..7 feasible {[r['feasible'] for r in part1]}; summary wrong at {wrong}/{n} "
          f"windows of W = {W}; wrote {out / 'lower_bound_demo.json'}")
    return 0
