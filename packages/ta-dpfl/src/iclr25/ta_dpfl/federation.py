"""The server side of a federation, Flower-independent, and an in-process driver.

:class:`ServerState` is what the aggregator knows and does: the run's public hyperparameters, the
clients' *reports* (sample count and budget group, :func:`~iclr25.ta_dpfl.client.client_report`),
the schedules it solves from them, FedAvg weights, evaluation on its own validation and test
splits, per-round checkpoints, ``metrics.jsonl`` and ``result.json``. It never reads a client's
budget from the run configuration. A client that misses a round (no reply, an error, a refusal) is
recorded and the round goes on with the others.

:func:`simulated_nodes` turns a :class:`~iclr25.ta_dpfl.config.FederationSpec` into the nodes'
own configurations (what each SuperNode's ``node_config`` holds in a deployment), and
:func:`run_inprocess` runs a federation in this process with the same client and server logic as
the Flower apps (:mod:`iclr25.ta_dpfl.flower_app`) — the spec's "in-process driver" for CPU runs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from pathlib import Path

import numpy as np
import torch

from iclr25.core.config import changed_settings
from iclr25.core.jsonl import append_jsonl, read_jsonl

from .client import (
    EPS_TOL,
    ClientState,
    ClientUnavailable,
    NodeConfig,
    PublicConfig,
    UntrustedRound,
    booked_epsilon,
    client_report,
    client_train,
)
from .config import FederationSpec
from .data import load_federated
from .dp_sgd import PrivacyBudgetExceeded, build_model, evaluate
from .planning import plan_federation
from .schedule import BudgetInfeasibleError, ClientBudget, Schedule

__all__ = [
    "ServerState",
    "simulated_nodes",
    "plan",
    "solve_schedules",
    "fedavg_weights",
    "fedavg",
    "latest_checkpoint",
    "run_inprocess",
]

log = logging.getLogger("iclr25.ta_dpfl")


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:7], "little")


def simulated_nodes(spec: FederationSpec) -> list[NodeConfig]:
    """The ``node_config`` of every simulated SuperNode: its budget, saving factor (assigned per
    ``spec.method``), data partition, noise choice and a state folder under ``spec.out_dir``."""
    rhos = spec.node_rhos()
    skip = spec.skip_rounds or {}
    return [
        NodeConfig(partition_id=n, num_partitions=spec.num_clients, epsilon=float(e), delta=spec.delta,
                   saving_factor=float(r), dataset=spec.dataset, csv_path=spec.csv_path,
                   label_column=spec.label_column, model_factory=spec.model_factory, split_seed=spec.split_seed,
                   val_fraction=spec.val_fraction, insecure_seed=spec.seed if spec.insecure_seed else None,
                   device=spec.device, state_dir=str(Path(spec.out_dir) / "nodes" / f"node-{n}"),
                   skip_rounds=tuple(int(t) for t in skip.get(n, ())))
        for n, (e, r) in enumerate(zip(spec.epsilons, rhos))
    ]


def fedavg_weights(num_examples: list[int]) -> np.ndarray:
    """FedAvg weights ``w_n = m_n / Σ_j m_j`` (Algorithm 2, step 2c)."""
    m = np.asarray(num_examples, dtype=float)
    if m.ndim != 1 or len(m) == 0 or (m <= 0).any():
        raise ValueError(f"num_examples must be positive, got {num_examples}")
    return m / m.sum()


def fedavg(state_dicts: list[dict], num_examples: list[int]) -> dict:
    """``Σ_n w_n θ_n`` over the replies received (weights :func:`fedavg_weights`)."""
    w = fedavg_weights(num_examples)
    return {k: sum(float(wi) * sd[k].double() for wi, sd in zip(w, state_dicts)).to(state_dicts[0][k].dtype)
            for k in state_dicts[0]}


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The newest ``checkpoints/round_XXX.pt`` in ``out_dir`` (None if there is none)."""
    ck = sorted(Path(out_dir).glob("checkpoints/round_*.pt"))
    return ck[-1] if ck else None


def _rps(times: list[float]) -> float:
    return float((len(times) - 1) / (times[-1] - times[0])) if len(times) > 1 and times[-1] > times[0] else math.nan


def _server_method(method: str) -> str:
    return method if method in ("dpfedavg", "idp") else "ta"


def solve_schedules(labels: list[str], budgets: list[ClientBudget], rhos: list[float], spec: FederationSpec
                    ) -> tuple[dict[str, Schedule], dict[str, str]]:
    """Every client's schedule, one client at a time: a client whose budget fails the ``q·m_n``
    guard (or cannot be spent) is *excluded* — named with the reason — instead of stopping the
    federation. For ``dpfedavg`` the common budget is ``min_n ε_n`` over all reporting clients.

    Returns:
        ``(schedules by label, reasons by excluded label)``.

    Raises:
        BudgetInfeasibleError: no client at all can meet its budget (the reasons of each).
    """
    method = _server_method(spec.method)
    plan_method = "ta-uniform" if method == "ta" else method
    cap = min(b.epsilon for b in budgets) if method == "dpfedavg" and budgets else None
    scheds: dict[str, Schedule] = {}
    excluded: dict[str, str] = {}
    for lab, b, r in zip(labels, budgets, rhos):
        bb = ClientBudget(cap, b.delta, b.num_examples) if cap is not None else b
        try:
            scheds[lab] = plan_federation([bb], plan_method, spec.sigma, spec.rounds, spec.local_steps,
                                          spec.transition, [float(r)], spec.min_expected_batch, order=spec.order)[0]
        except BudgetInfeasibleError as e:
            excluded[lab] = f"BudgetInfeasibleError: {e}"
    if not scheds and excluded:
        raise BudgetInfeasibleError("no client can take part: " + "; ".join(f"client {k}: {v}"
                                                                            for k, v in excluded.items()))
    return scheds, excluded


class ServerState:
    """The aggregator's bookkeeping of one run.

    Args:
        spec: the run; the server reads only its public fields (never ``epsilons``/``rhos``).
    """

    def __init__(self, spec: FederationSpec):
        from iclr25.core.seed import choose_device

        self.spec = spec
        self.out = Path(spec.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.device = torch.device(choose_device(spec.device))
        data = load_federated(spec.dataset, max(spec.num_clients, 1), spec.split_seed, spec.csv_path,
                              spec.val_fraction, spec.label_column)
        self.x_val = torch.from_numpy(np.ascontiguousarray(data.x_val)).to(self.device)
        self.y_val = torch.from_numpy(np.ascontiguousarray(data.y_val)).to(self.device)
        self.x_test = torch.from_numpy(np.ascontiguousarray(data.x_test)).to(self.device)
        self.y_test = torch.from_numpy(np.ascontiguousarray(data.y_test)).to(self.device)
        self.num_features, self.num_classes = data.num_features, data.num_classes
        self.start_round = 0
        self.history: list[dict] = []
        self.reports: dict[str, dict] = {}
        self.schedules: dict[str, Schedule] = {}
        self.epsilon_cap = 0.0
        self.client_eps: dict[str, float] = {}
        self.noise: dict[str, str] = {}
        self.missed: dict[str, list[int]] = {}
        self.miss_reasons: dict[str, dict[int, str]] = {}
        self.excluded: dict[str, str] = {}
        torch.manual_seed(_seed(spec.seed, "init"))
        self.model = build_model(spec.dataset, self.num_features, self.num_classes, spec.hidden,
                                 spec.model_factory).to(self.device)
        public = {k: v for k, v in spec.to_dict().items() if k not in ("epsilons", "rhos", "delta", "skip_rounds")}
        if spec.resume and (self.out / "config.json").is_file():
            # a resumed run must be the run that was stopped: other rounds/lr/σ/... would silently change the
            # schedule (e.g. more rounds after the budget is spent) while the record claims the old one
            old = json.loads((self.out / "config.json").read_text())
            what = changed_settings(old, {k: v for k, v in public.items() if k in old},
                                    ignore=("resume", "progress", "device", "out_dir"))
            if what:
                raise ValueError(f"--resume: {self.out / 'config.json'} was written with other settings ({what}); "
                                 "resume with the same settings, or start a new run with another --out")
        (self.out / "config.json").write_text(json.dumps(public, indent=2) + "\n")
        if spec.resume:
            ck = latest_checkpoint(self.out)
            if ck is not None:
                blob = torch.load(ck, weights_only=True, map_location=self.device)
                self.model.load_state_dict(blob["state_dict"])
                self.start_round = int(blob["round"])
                rows = read_jsonl(self.out / "metrics.jsonl", required=("round", "accuracy"), torn_tail="drop")
                self.history = [r for r in rows if r["round"] <= self.start_round]
                for h in self.history:
                    self.client_eps.update(h.get("client_epsilon", {}))
                    for lab, r in h.get("missed", {}).items():
                        self.missed.setdefault(lab, []).append(int(h["round"]))
                        self.miss_reasons.setdefault(lab, {})[int(h["round"])] = r
                self._rewrite_metrics()
                for later in self.out.glob("checkpoints/round_*.pt"):
                    if int(later.stem.split("_")[1]) > self.start_round:
                        later.unlink()
                log.info("resuming %s from round %d (%s)", spec.run_key, self.start_round, ck)
        if not spec.resume or self.start_round == 0:
            (self.out / "metrics.jsonl").write_text("")
            for old in self.out.glob("checkpoints/round_*.pt"):
                old.unlink()

    def _rewrite_metrics(self) -> None:
        (self.out / "metrics.jsonl").write_text("".join(json.dumps(h) + "\n" for h in self.history))

    @property
    def remaining_rounds(self) -> int:
        return self.spec.rounds - self.start_round

    def public_config(self, round_: int = 0) -> PublicConfig:
        """The public hyperparameters sent with round ``round_``'s messages (0: the query)."""
        s = self.spec
        return PublicConfig(method=_server_method(s.method), order=s.order, sigma=s.sigma,
                            max_grad_norm=s.max_grad_norm, rounds=s.rounds, local_steps=s.local_steps,
                            transition=-1 if s.transition is None else int(s.transition), lr=s.lr,
                            epsilon_cap=self.epsilon_cap, hidden=s.hidden, dataset=s.dataset,
                            min_expected_batch=s.min_expected_batch, grad_sample_mode=s.grad_sample_mode,
                            run_key=s.run_key, round=int(round_))

    def register(self, reports: dict[str, dict], refused: dict[str, str] | None = None) -> dict[str, Schedule]:
        """Solve every client's schedule from what it reported (``num-examples``, ``epsilon``,
        ``delta``, ``saving-factor``) and fix the ``dpfedavg`` cap ``min_n ε_n``.

        A client that refused the query (``refused``: label -> reason, e.g. its own guard check
        failed) or whose reported budget fails the ``q·m_n`` guard here is *excluded*: recorded in
        :attr:`excluded`, ``schedule.json`` and ``result.json``, logged, and not asked to train; the
        others go on.

        Raises:
            BudgetInfeasibleError: every client is excluded (before any training).
            ValueError: no reports and no refusals, or a malformed report; on ``resume``, a client
                whose reported budget, δ, saving factor or sample count differs from the run's
                ``schedule.json``.
        """
        refused = dict(refused or {})
        if not reports and not refused:
            raise ValueError("no client answered the query")
        for lab, r in reports.items():
            for k in ("num-examples", "epsilon", "delta", "saving-factor"):
                if k not in r:
                    raise ValueError(f"client {lab}: report lacks {k!r}")
        saved = self.out / "schedule.json"
        if self.spec.resume and self.start_round > 0 and saved.is_file():
            # a client whose budget, δ, saving factor or data changed mid-run would be re-planned against
            # rounds it already spent under the old plan (and its record would compare spend to the new budget)
            before = json.loads(saved.read_text()).get("clients", {})
            for lab, r in reports.items():
                if lab in before:
                    old = before[lab].get("report", {})
                    keys = [k for k in ("num-examples", "epsilon", "delta", "saving-factor") if k in old]
                    what = changed_settings({k: float(old[k]) for k in keys}, {k: float(r[k]) for k in keys})
                    if what:
                        raise ValueError(f"--resume: client {lab} reports other settings than the run it resumes "
                                         f"({what}); a budget cannot change mid-run — resume with the same "
                                         "budgets, or start a new run with another --out")
        labels = sorted(reports, key=lambda x: (len(x), x))
        budgets = [ClientBudget(float(reports[x]["epsilon"]), float(reports[x]["delta"]),
                                int(reports[x]["num-examples"])) for x in labels]
        if not labels:
            raise BudgetInfeasibleError("no client can take part: " + "; ".join(f"client {k}: {v}"
                                                                                for k, v in refused.items()))
        scheds, guard = solve_schedules(labels, budgets, [float(reports[x]["saving-factor"]) for x in labels],
                                        self.spec)
        self.excluded = {**refused, **guard}
        for lab, why in self.excluded.items():
            log.warning("%s: client %s is excluded from the federation (%s)", self.spec.run_key, lab, why)
        self.reports = {x: dict(reports[x]) for x in labels if x in scheds}
        self.schedules = {x: scheds[x] for x in labels if x in scheds}
        self.epsilon_cap = min(b.epsilon for b in budgets) if _server_method(self.spec.method) == "dpfedavg" else 0.0
        (self.out / "schedule.json").write_text(json.dumps(
            {"clients": {x: {"report": self.reports[x], **s.to_dict()} for x, s in self.schedules.items()},
             "excluded": self.excluded}) + "\n")
        return self.schedules

    def record_round(self, round_: int, replies: dict[str, dict], missing: dict[str, str],
                     booked: dict[str, float] | None = None) -> None:
        """Store what each client reported after ``round_`` and who missed it.

        ``booked``: the ε a client that missed the round says its accountant has booked (sent with
        its refusal, e.g. a round it already ran before a crash); it replaces that client's record,
        which would otherwise be its last successful reply and under-report what it spent.

        Raises:
            RuntimeError: a client reports more than its budget.
        """
        for lab, e in [*((lab, float(m["epsilon-spent"])) for lab, m in replies.items()),
                       *((lab, float(e)) for lab, e in (booked or {}).items())]:
            budget = float(self.reports.get(lab, {}).get("epsilon", math.inf))
            if e > budget + EPS_TOL:
                raise RuntimeError(f"client {lab} reports eps={e} > its budget {budget}")
            self.client_eps[lab] = e
        for lab, met in replies.items():
            self.noise[lab] = "secure" if int(met.get("noise-secure", 1)) else "insecure-seed"
        for lab, why in missing.items():
            self.missed.setdefault(lab, []).append(int(round_))
            self.miss_reasons.setdefault(lab, {})[int(round_)] = why
            log.warning("round %d: client %s missed the round (%s)", round_, lab, why)
        self._round_replies = {lab: float(m["epsilon-spent"]) for lab, m in replies.items()}
        self._round_missing = dict(missing)

    def end_round(self, round_: int, state_dict: dict) -> dict:
        """Evaluate ``θ^t`` on the validation and test splits, checkpoint it, append ``metrics.jsonl``."""
        self.model.load_state_dict(state_dict)
        ev = evaluate(self.model, self.x_test, self.y_test)
        va = evaluate(self.model, self.x_val, self.y_val) if len(self.y_val) else {"accuracy": math.nan}
        row = {"round": round_, "accuracy": ev["accuracy"], "loss": ev["loss"], "val_accuracy": va["accuracy"],
               "time": time.time(), "client_epsilon": dict(sorted(getattr(self, "_round_replies", {}).items())),
               "missed": dict(sorted(getattr(self, "_round_missing", {}).items()))}
        self._round_replies, self._round_missing = {}, {}
        self.history.append(row)
        ck = self.out / "checkpoints" / f"round_{round_:03d}.pt"
        ck.parent.mkdir(exist_ok=True)
        torch.save({"state_dict": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
                    "round": round_}, ck)
        append_jsonl(self.out / "metrics.jsonl", [row], fsync=False)
        return row

    def finish(self) -> dict:
        """Write and return ``result.json``."""
        last = self.history[-1] if self.history else {"accuracy": math.nan, "val_accuracy": math.nan}
        labels = list(self.schedules) or sorted(self.client_eps, key=lambda x: (len(x), x))
        insecure = sorted(lab for lab, k in self.noise.items() if k != "secure")
        warnings = []
        if self.excluded:
            warnings.append(f"clients {sorted(self.excluded)} were excluded (see 'excluded' for the reasons)")
        if self.missed:
            warnings.append("clients missed rounds (no update, no ε booked for a skipped round): " + "; ".join(
                f"{lab}: {len(self.missed[lab])} round(s) {sorted(self.missed[lab])}" for lab in sorted(self.missed))
                + " (see 'missed_rounds' and 'miss_reasons')")
        under = {lab: (float(self.schedules[lab].epsilon_per_round()[-1]), float(self.reports[lab]["epsilon"]))
                 for lab in labels if lab in self.schedules and lab in self.reports}
        under = {lab: pb for lab, pb in under.items() if pb[0] < pb[1] * (1 - 1e-6)}
        if under:
            warnings.append("clients under-spend their budget (their rate is capped at q=1, which is safe): " + "; ".join(
                f"{lab}: plans eps {p:.4f} of {b:g}" for lab, (p, b) in under.items())
                + " (lower sigma, add rounds or save less to spend it)")
        if insecure:
            warnings.append(f"clients {insecure} used insecure-seed noise: anyone who knows the seed can replay their "
                            "noise (simulations and tests only)")
        res = {
            "method": self.spec.method, "seed": self.spec.seed, "run_key": self.spec.run_key, "lr": self.spec.lr,
            "dataset": self.spec.dataset, "rounds": self.spec.rounds,
            "final_accuracy": last["accuracy"], "final_val_accuracy": last.get("val_accuracy", math.nan),
            "accuracy_per_round": [h["accuracy"] for h in self.history],
            "val_accuracy_per_round": [h.get("val_accuracy", math.nan) for h in self.history],
            "clients": labels,
            "epsilon_spent": [self.client_eps.get(lab, 0.0) for lab in labels],
            "epsilon_budget": [float(self.reports[lab]["epsilon"]) if lab in self.reports else math.nan
                               for lab in labels],
            "epsilon_planned": [float(self.schedules[lab].epsilon_per_round()[-1]) if lab in self.schedules
                                else math.nan for lab in labels],
            "rates": [self.schedules[lab].rates.tolist() for lab in labels if lab in self.schedules],
            "transition": [self.schedules[lab].transition for lab in labels if lab in self.schedules],
            "excluded": dict(self.excluded),
            "missed_rounds": {lab: self.missed[lab] for lab in labels if lab in self.missed},
            "miss_reasons": {lab: {str(t): r for t, r in self.miss_reasons[lab].items()} for lab in labels
                             if lab in self.miss_reasons},
            "noise": {lab: self.noise.get(lab, "?") for lab in labels},
            "insecure_seed": bool(insecure),
            "warnings": warnings,
            "rounds_per_second": _rps([h["time"] for h in self.history if "time" in h]),
        }
        (self.out / "result.json").write_text(json.dumps(res, indent=2) + "\n")
        for w in warnings:
            log.warning("%s: %s", self.spec.run_key, w)
        return res


def plan(spec: FederationSpec) -> list[Schedule]:
    """Solve every client's schedule of a *simulated* federation before anything starts (its nodes'
    reports, computed here), so a federation no client can take part in fails before Flower/Ray
    start. Clients that would be excluded (:func:`solve_schedules`) are logged.

    Returns:
        the schedules of the clients that take part (in partition order).

    Raises:
        BudgetInfeasibleError: no node's budget passes the ``q·m_n`` guard.
    """
    nodes = simulated_nodes(spec)
    data = load_federated(spec.dataset, spec.num_clients, spec.split_seed, spec.csv_path, spec.val_fraction,
                          spec.label_column)
    budgets = [ClientBudget(n.epsilon, n.delta, m) for n, m in zip(nodes, data.sizes)]
    scheds, excluded = solve_schedules([str(n.partition_id) for n in nodes], budgets,
                                       [n.saving_factor for n in nodes], spec)
    for lab, why in excluded.items():
        log.warning("%s: client %s will be excluded (%s)", spec.run_key, lab, why)
    return list(scheds.values())


def run_inprocess(spec: FederationSpec) -> dict:
    """Run one simulated federation in this process: query, ``T`` rounds of client training and
    FedAvg, with the same client (:mod:`~iclr25.ta_dpfl.client`) and server (:class:`ServerState`)
    logic as the Flower apps. Missed rounds (``skip_rounds``, refusals) are recorded and tolerated; a
    client that fails its guard at the query is excluded and recorded (``result["excluded"]``).

    Returns:
        ``result.json``'s dict.

    Raises:
        BudgetInfeasibleError: before training, when no client can take part.
    """
    from iclr25.core.progress import progress

    nodes = simulated_nodes(spec)
    state = ServerState(spec)
    reports, refused = {}, {}
    for n in nodes:
        try:
            reports[str(n.partition_id)] = client_report(n, state.public_config(0))
        except BudgetInfeasibleError as e:  # the client's own guard check: it does not take part
            refused[str(n.partition_id)] = f"{type(e).__name__}: {e}"
    state.register(reports, refused)
    nodes = [n for n in nodes if str(n.partition_id) in state.schedules]
    labels = [str(n.partition_id) for n in nodes]
    if state.remaining_rounds <= 0:
        return state.finish()
    # a fresh simulated run starts the simulated clients' ledgers afresh, as the server starts its own state
    # (a stale ledger would make every client refuse the "replayed" rounds: an untrained model, silently)
    cstate = {lab: (ClientState.load(n, spec.run_key) if spec.resume else None) or ClientState()
              for lab, n in zip(labels, nodes)}
    global_sd = {k: v.detach().cpu() for k, v in state.model.state_dict().items()}
    bar = progress(range(state.start_round + 1, spec.rounds + 1), desc=spec.run_key, unit="round",
                   quiet=None if spec.progress else True)
    for t in bar:
        pub = state.public_config(t)
        sds, ms, replies, missing, booked = [], [], {}, {}, {}
        for lab, node in zip(labels, nodes):
            try:
                sd, met, cstate[lab] = client_train(node, pub, cstate[lab], global_sd)
            except (ClientUnavailable, PrivacyBudgetExceeded, BudgetInfeasibleError, UntrustedRound) as e:
                missing[lab] = f"{type(e).__name__}: {e}"
                b = booked_epsilon(node, cstate[lab])
                if b is not None:
                    booked[lab] = b
                continue
            sds.append(sd)
            ms.append(int(met["num-examples"]))
            replies[lab] = met
        state.record_round(t, replies, missing, booked)
        if sds:
            global_sd = fedavg(sds, ms)
        row = state.end_round(t, global_sd)
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(acc=f"{row['accuracy']:.4f}")
    return state.finish()
