"""Flower-independent pieces of a federated run: planning, client round logic, server evaluation,
checkpoints and results. :mod:`iclr25.ta_dpfl.flower_app` wires them into Flower.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from opacus.accountants import RDPAccountant

from .accounting import epsilon_spent
from .config import FederationSpec
from .data import load_federated
from .dp_sgd import MLP, PrivacyBudgetExceeded, evaluate, local_dp_sgd
from .schedule import ClientBudget, Schedule, plan_federation

__all__ = [
    "plan",
    "ClientRoundResult",
    "client_round",
    "fedavg_weights",
    "ServerState",
    "latest_checkpoint",
]

log = logging.getLogger("iclr25.ta_dpfl")

#: tolerance of the budget check (ε is solved to ~1e-12 below the budget)
EPS_TOL = 1e-9


def plan(spec: FederationSpec) -> list[Schedule]:
    """Solve every client's schedule for ``spec`` (before any training; raises on infeasible budgets).

    Uses the real client sizes ``m_n`` of the data split for the expected-batch check.
    """
    data = load_federated(spec.dataset, spec.num_clients, spec.split_seed, spec.csv_path)
    budgets = [ClientBudget(e, spec.delta, m) for e, m in zip(spec.epsilons, data.sizes)]
    return plan_federation(budgets, spec.method, spec.sigma, spec.rounds, spec.local_steps, spec.transition,
                           spec.rhos, spec.min_expected_batch)


def _compact(history: list[tuple[float, float, int]]) -> list[tuple[float, float, int]]:
    """Merge consecutive entries with equal ``(σ, q)`` (as ``RDPAccountant.step`` does)."""
    out: list[tuple[float, float, int]] = []
    for s, q, k in history:
        if out and out[-1][0] == s and out[-1][1] == q:
            out[-1] = (s, q, out[-1][2] + k)
        else:
            out.append((s, q, k))
    return out


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:7], "little")


@dataclass
class ClientRoundResult:
    """What a client returns after one round."""

    state_dict: dict
    num_examples: int
    epsilon_spent: float
    sample_rate: float
    loss: float
    mean_batch: float
    history: list[float]


def client_round(
    *,
    partition_id: int,
    state_dict: dict,
    round_: int,
    rates_matrix: np.ndarray,
    budget: float,
    booked_rates: list[float] | None,
    cfg: dict,
) -> ClientRoundResult:
    """One client's round (Algorithm 2, step 2b): check the budget, run ``K`` DP-SGD steps at
    ``q_{n,t}``, book them on an Opacus ``RDPAccountant``, report the spent ``ε``.

    Args:
        partition_id: the client's index ``n``.
        state_dict: global model ``θ^{t-1}`` as a torch state dict.
        round_: ``t`` (1-based, counting from the start of the schedule, also after ``--resume``).
        rates_matrix: ``float (N, T)`` public schedule of all clients.
        budget: the client's ``ε_n``.
        booked_rates: rates this client's accountant already booked (``None``: fresh process, e.g.
            after ``--resume``; then rebuilt from rounds ``1..t-1`` of the public schedule).
        cfg: ``sigma, max_grad_norm, local_steps, lr, delta, hidden, dataset, num_clients,
            split_seed, csv_path, seed, run_key, grad_sample_mode``.

    Raises:
        PrivacyBudgetExceeded: this round would take the client above ``ε_n`` (it refuses to train).
    """
    torch.set_num_threads(1)
    sigma, k, delta = float(cfg["sigma"]), int(cfg["local_steps"]), float(cfg["delta"])
    row = rates_matrix[partition_id]
    if booked_rates is None or len(booked_rates) != round_ - 1:
        booked_rates = [float(q) for q in row[: round_ - 1]]
    q = float(row[round_ - 1])
    acc = RDPAccountant()
    acc.history = _compact([(sigma, r, k) for r in booked_rates])
    # same math as RDPAccountant.get_epsilon, with the per-step RDP curves cached (tested equal)
    eps_next = epsilon_spent([*acc.history, (sigma, q, k)], delta)
    if eps_next > budget + EPS_TOL:
        raise PrivacyBudgetExceeded(
            f"client {partition_id}: round {round_} at q={q:.6g} would spend eps={eps_next:.6f} > budget {budget}")
    data = load_federated(cfg["dataset"], int(cfg["num_clients"]), int(cfg["split_seed"]), cfg.get("csv_path") or None)
    x_np, y_np = data.clients[partition_id]
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    model = MLP(data.num_features, data.num_classes, int(cfg["hidden"]))
    model.load_state_dict(state_dict)
    gen = torch.Generator().manual_seed(_seed(cfg["seed"], cfg["run_key"], partition_id, round_))
    stats = local_dp_sgd(model, x, y, sample_rate=q, noise_multiplier=sigma, max_grad_norm=float(cfg["max_grad_norm"]),
                         local_steps=k, lr=float(cfg["lr"]), accountant=acc, generator=gen,
                         grad_sample_mode=str(cfg.get("grad_sample_mode", "ghost")))
    eps = epsilon_spent(acc.history, delta)
    return ClientRoundResult(model.state_dict(), len(y), float(eps), q, stats["loss"], stats["mean_batch"],
                             [*booked_rates, q])


def fedavg_weights(num_examples: list[int]) -> np.ndarray:
    """FedAvg weights ``w_n = m_n / Σ_j m_j`` (Algorithm 2, step 2c)."""
    m = np.asarray(num_examples, dtype=float)
    if m.ndim != 1 or len(m) == 0 or (m <= 0).any():
        raise ValueError(f"num_examples must be positive, got {num_examples}")
    return m / m.sum()


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The newest ``checkpoints/round_XXX.pt`` in ``out_dir`` (None if there is none)."""
    ck = sorted(Path(out_dir).glob("checkpoints/round_*.pt"))
    return ck[-1] if ck else None


def _rps(times: list[float]) -> float:
    return float((len(times) - 1) / (times[-1] - times[0])) if len(times) > 1 and times[-1] > times[0] else math.nan


class ServerState:
    """Server-side bookkeeping of one run: schedules, test evaluation, per-round checkpoints,
    ``metrics.jsonl`` and ``result.json``.

    Args:
        spec: the run.
    """

    def __init__(self, spec: FederationSpec):
        self.spec = spec
        self.out = Path(spec.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.schedules = plan(spec)
        self.rates = np.stack([s.rates for s in self.schedules])  # (N, T)
        data = load_federated(spec.dataset, spec.num_clients, spec.split_seed, spec.csv_path)
        self.x_test = torch.from_numpy(data.x_test)
        self.y_test = torch.from_numpy(data.y_test)
        self.num_features, self.num_classes = data.num_features, data.num_classes
        self.sizes = data.sizes
        self.start_round = 0
        self.history: list[dict] = []
        self.client_eps: dict[int, dict[int, float]] = {}  # round -> pid -> eps
        torch.manual_seed(_seed(spec.seed, "init"))
        self.model = MLP(self.num_features, self.num_classes, spec.hidden)
        (self.out / "config.json").write_text(json.dumps(spec.to_dict(), indent=2) + "\n")
        (self.out / "schedule.json").write_text(json.dumps([s.to_dict() for s in self.schedules]) + "\n")
        if spec.resume:
            ck = latest_checkpoint(self.out)
            if ck is not None:
                blob = torch.load(ck, weights_only=True)
                self.model.load_state_dict(blob["state_dict"])
                self.start_round = int(blob["round"])
                self.history = [json.loads(line) for line in (self.out / "metrics.jsonl").read_text().splitlines()
                                if line.strip()][: self.start_round]
                for h in self.history:
                    self.client_eps[h["round"]] = {int(k): v for k, v in h["client_epsilon"].items()}
                # drop rows (and checkpoints) of rounds after the one we resume from
                (self.out / "metrics.jsonl").write_text("".join(json.dumps(h) + "\n" for h in self.history))
                for later in self.out.glob("checkpoints/round_*.pt"):
                    if int(later.stem.split("_")[1]) > self.start_round:
                        later.unlink()
                log.info("resuming %s from round %d (%s)", spec.run_key, self.start_round, ck)
        if not spec.resume or self.start_round == 0:
            (self.out / "metrics.jsonl").write_text("")
            for old in self.out.glob("checkpoints/round_*.pt"):
                old.unlink()

    @property
    def remaining_rounds(self) -> int:
        return self.spec.rounds - self.start_round

    def client_config(self) -> dict:
        """Static per-run config sent to every client each round (scalars only, Flower ConfigRecord)."""
        s = self.spec
        return {
            "sigma": s.sigma, "max_grad_norm": s.max_grad_norm, "local_steps": s.local_steps, "lr": s.lr,
            "delta": s.delta, "hidden": s.hidden, "dataset": s.dataset, "num_clients": s.num_clients,
            "split_seed": s.split_seed, "csv_path": s.csv_path or "", "seed": s.seed, "run_key": s.run_key,
            "grad_sample_mode": s.grad_sample_mode,
        }

    def record_clients(self, round_: int, eps_by_pid: dict[int, float]) -> None:
        """Store the ε each client reported after ``round_`` and check it against the budgets.

        Raises:
            RuntimeError: a client is missing or reported more than its budget.
        """
        missing = set(range(self.spec.num_clients)) - set(eps_by_pid)
        if missing:
            raise RuntimeError(f"round {round_}: no reply from clients {sorted(missing)}")
        for pid, e in eps_by_pid.items():
            if e > self.spec.epsilons[pid] + EPS_TOL:
                raise RuntimeError(f"client {pid} reports eps={e} > budget {self.spec.epsilons[pid]}")
        self.client_eps[round_] = dict(eps_by_pid)

    def end_round(self, round_: int, state_dict: dict) -> dict:
        """Evaluate ``θ^t`` on the test set, checkpoint it, append to ``metrics.jsonl``."""
        self.model.load_state_dict(state_dict)
        ev = evaluate(self.model, self.x_test, self.y_test)
        row = {"round": round_, "accuracy": ev["accuracy"], "loss": ev["loss"], "time": time.time(),
               "client_epsilon": {str(k): v for k, v in sorted(self.client_eps.get(round_, {}).items())}}
        self.history.append(row)
        ck = self.out / "checkpoints" / f"round_{round_:03d}.pt"
        ck.parent.mkdir(exist_ok=True)
        torch.save({"state_dict": self.model.state_dict(), "round": round_}, ck)
        with open(self.out / "metrics.jsonl", "a") as fh:
            fh.write(json.dumps(row) + "\n")
        return row

    def finish(self) -> dict:
        """Write and return ``result.json``: final accuracy, per-client spent ε, budgets."""
        last = self.history[-1] if self.history else {"accuracy": math.nan, "client_epsilon": {}}
        eps = [last["client_epsilon"].get(str(i), math.nan) for i in range(self.spec.num_clients)]
        res = {
            "method": self.spec.method, "seed": self.spec.seed, "run_key": self.spec.run_key,
            "final_accuracy": last["accuracy"], "accuracy_per_round": [h["accuracy"] for h in self.history],
            "epsilon_spent": eps, "epsilon_budget": list(self.spec.epsilons),
            "epsilon_planned": [float(s.epsilon_per_round()[-1]) for s in self.schedules],
            "rates": self.rates.tolist(),
            "rounds_per_second": _rps([h["time"] for h in self.history if "time" in h]),
        }
        (self.out / "result.json").write_text(json.dumps(res, indent=2) + "\n")
        return res
