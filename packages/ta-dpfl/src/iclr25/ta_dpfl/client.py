"""The client side of a federation, Flower-independent: what a node owns, what it reports, one round.

A client (a hospital, a bank branch) owns its privacy budget ``(ε_n, δ)``, its saving factor ``ρ_n``,
its data partition and its randomness. They live in the node's configuration (Flower's SuperNode
``--node-config``), never in the server's messages. The server sends only public hyperparameters
(``σ, C, T, K, τ, η``, the method) and the round number; each client

1. answers a *query* with what the server's schedule needs (:func:`client_report`): its sample
   count ``m_n`` and its budget group ``(ε_n, δ, ρ_n)``;
2. solves its own schedule from its own configuration (:func:`client_schedule`), and before each
   round checks with its own accountant that the round keeps it within ``ε_n``
   (:func:`client_train`); after missed rounds it re-solves the rest of its schedule
   (:func:`~iclr25.ta_dpfl.schedule.rate_for_round`);
3. draws its Poisson sample and noise from the OS CSPRNG (:mod:`iclr25.ta_dpfl.noise`) unless the
   node opts in to a deterministic ``insecure-seed``;
4. replies with the noisy model, ``m_n``, the ``ε`` it has spent, the rate it used and whether its
   noise was secure — no loss, no batch size, nothing computed from its records without noise.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from .accounting import epsilon_spent
from .schedule import ORDERS, Schedule, check_min_batch, make_schedule, rate_for_round

__all__ = [
    "NodeConfig",
    "PublicConfig",
    "ClientState",
    "ClientUnavailable",
    "client_report",
    "client_schedule",
    "client_train",
    "booked_epsilon",
    "EPS_TOL",
]

log = logging.getLogger("iclr25.ta_dpfl")

#: tolerance of the budget checks (rates are solved to ~1e-12 below the budget)
EPS_TOL = 1e-9

_warned_insecure = False


class ClientUnavailable(RuntimeError):
    """The client does not take part in this round (a node's ``skip-rounds``: fault injection)."""


def _finite(name: str, v: Any, lo: float, hi: float, *, lo_open: bool = True, hi_open: bool = False) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={v!r} is not a number") from None
    ok = math.isfinite(x) and (x > lo if lo_open else x >= lo) and (x < hi if hi_open else x <= hi)
    if not ok:
        lo_b, hi_b = "(" if lo_open else "[", ")" if hi_open else "]"
        raise ValueError(f"{name}={v!r} must lie in {lo_b}{lo:g}, {hi:g}{hi_b}")
    return x


@dataclass(frozen=True)
class NodeConfig:
    """What a node owns (Flower ``node_config`` keys in brackets).

    Args:
        partition_id, num_partitions: its data partition (``partition-id``, ``num-partitions``).
        epsilon, delta: its budget ``(ε_n, δ)`` (``epsilon``, ``delta``).
        saving_factor: ``ρ_n ∈ (0, 1]`` (``saving-factor``; 1 = no saving).
        dataset, csv_path, split_seed, val_fraction: which data the partition is cut from
            (``dataset``, ``csv-path``, ``split-seed``, ``val-fraction``).
        insecure_seed: opt-in deterministic noise (``insecure-seed``); ``None`` = OS CSPRNG.
        device: where it trains (``device``).
        state_dir: a folder where the node keeps its accountant between restarts (``state-dir``).
        skip_rounds: rounds it does not take part in (``skip-rounds="2,3"``; fault injection for tests).
    """

    partition_id: int
    num_partitions: int
    epsilon: float
    delta: float = 1e-5
    saving_factor: float = 1.0
    dataset: str = "adult"
    csv_path: str | None = None
    split_seed: int = 0
    val_fraction: float = 0.1
    insecure_seed: int | None = None
    device: str = "cpu"
    state_dir: str | None = None
    skip_rounds: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not (0 <= self.partition_id < self.num_partitions):
            raise ValueError(f"node config: partition-id={self.partition_id} must lie in [0, num-partitions="
                             f"{self.num_partitions})")
        _finite("node config epsilon", self.epsilon, 0.0, math.inf, hi_open=True)
        _finite("node config delta", self.delta, 0.0, 1.0, hi_open=True)
        _finite("node config saving-factor", self.saving_factor, 0.0, 1.0)
        _finite("node config val-fraction", self.val_fraction, 0.0, 0.5, lo_open=False)
        if self.insecure_seed is not None and not (0 <= int(self.insecure_seed) < 2**63):
            raise ValueError(f"node config insecure-seed={self.insecure_seed} must lie in [0, 2**63)")

    @classmethod
    def from_mapping(cls, cfg: dict) -> NodeConfig:
        """Parse Flower's ``node_config`` (dash-separated keys).

        Raises:
            ValueError: a missing ``epsilon`` / ``partition-id`` / ``num-partitions``, an unknown
                key, or a value out of range (naming the key).
        """
        keys = {"partition-id", "num-partitions", "epsilon", "delta", "saving-factor", "dataset", "csv-path",
                "split-seed", "val-fraction", "insecure-seed", "device", "state-dir", "skip-rounds"}
        unknown = sorted(set(cfg) - keys)
        if unknown:
            raise ValueError(f"node config: unknown key(s) {unknown}; valid keys: {sorted(keys)}")
        for k in ("partition-id", "num-partitions", "epsilon"):
            if k not in cfg:
                raise ValueError(f"node config needs {k!r} (flower-supernode --node-config \"partition-id=0 "
                                 "num-partitions=3 epsilon=1.0 delta=1e-5 saving-factor=0.5\")")
        skip = cfg.get("skip-rounds", "")
        skip_t = tuple(int(x) for x in str(skip).replace(";", ",").split(",") if str(x).strip()) if skip != "" else ()
        seed = cfg.get("insecure-seed")
        return cls(
            partition_id=int(cfg["partition-id"]), num_partitions=int(cfg["num-partitions"]),
            epsilon=float(cfg["epsilon"]), delta=float(cfg.get("delta", 1e-5)),
            saving_factor=float(cfg.get("saving-factor", 1.0)), dataset=str(cfg.get("dataset", "adult")),
            csv_path=str(cfg.get("csv-path", "")) or None, split_seed=int(cfg.get("split-seed", 0)),
            val_fraction=float(cfg.get("val-fraction", 0.1)),
            insecure_seed=None if seed in (None, "", -1) else int(seed), device=str(cfg.get("device", "cpu")),
            state_dir=str(cfg.get("state-dir", "")) or None, skip_rounds=skip_t)

    def to_mapping(self) -> dict:
        """The inverse of :meth:`from_mapping` (only the keys that differ from ``None``/empty)."""
        out = {"partition-id": self.partition_id, "num-partitions": self.num_partitions, "epsilon": self.epsilon,
               "delta": self.delta, "saving-factor": self.saving_factor, "dataset": self.dataset,
               "split-seed": self.split_seed, "val-fraction": self.val_fraction, "device": self.device}
        if self.csv_path:
            out["csv-path"] = self.csv_path
        if self.insecure_seed is not None:
            out["insecure-seed"] = int(self.insecure_seed)
        if self.state_dir:
            out["state-dir"] = self.state_dir
        if self.skip_rounds:
            out["skip-rounds"] = ",".join(map(str, self.skip_rounds))
        return out


@dataclass(frozen=True)
class PublicConfig:
    """The run's public hyperparameters, sent by the server with every message.

    Args:
        method: ``dpfedavg`` (every client at ``epsilon_cap``, uniform), ``idp`` (own ``ε_n``,
            uniform), ``ta`` (own ``ε_n`` and own saving factor).
        order: ``save-first`` (the paper) or ``spend-first`` (mechanism probe).
        sigma, max_grad_norm, rounds, local_steps, transition (``-1``: ``T/2``), lr: ``σ, C, T, K, τ, η``.
        epsilon_cap: ``min_n ε_n`` for ``dpfedavg`` (0: none). A cap can only lower what a client spends.
        hidden: MLP width (0: logistic regression); dataset: the model's input format.
        min_expected_batch: the ``q·m_n`` guard.
        grad_sample_mode: ``ghost`` | ``hooks``.
        run_key: names the run (the client's accountant is kept per run key).
        round: ``t`` (1-based).
    """

    method: str = "ta"
    order: str = "save-first"
    sigma: float = 1.5
    max_grad_norm: float = 1.0
    rounds: int = 30
    local_steps: int = 4
    transition: int = -1
    lr: float = 2.0
    epsilon_cap: float = 0.0
    hidden: int = 64
    dataset: str = "adult"
    min_expected_batch: float = 20.0
    grad_sample_mode: str = "ghost"
    run_key: str = "run"
    round: int = 0

    def __post_init__(self) -> None:
        if self.method not in ("dpfedavg", "idp", "ta"):
            raise ValueError(f"public config: method={self.method!r} must be dpfedavg, idp or ta")
        if self.order not in ORDERS:
            raise ValueError(f"public config: order={self.order!r} must be one of {ORDERS}")
        _finite("sigma", self.sigma, 0.0, 1e6)
        _finite("max-grad-norm", self.max_grad_norm, 0.0, 1e6)
        _finite("lr", self.lr, 0.0, 1e6)
        _finite("epsilon-cap", self.epsilon_cap, 0.0, math.inf, lo_open=False, hi_open=True)
        _finite("min-expected-batch", self.min_expected_batch, 0.0, math.inf, lo_open=False, hi_open=True)
        if self.rounds < 1 or self.local_steps < 1:
            raise ValueError(f"public config: rounds={self.rounds} and local-steps={self.local_steps} must be >= 1")
        if self.grad_sample_mode not in ("ghost", "hooks"):
            raise ValueError(f"grad-sample-mode={self.grad_sample_mode!r} must be ghost or hooks")

    _KEYS = ("method", "order", "sigma", "max_grad_norm", "rounds", "local_steps", "transition", "lr",
             "epsilon_cap", "hidden", "dataset", "min_expected_batch", "grad_sample_mode", "run_key", "round")

    def to_record(self) -> dict:
        """Flat scalar dict with dash keys (a Flower ``ConfigRecord``)."""
        return {k.replace("_", "-"): getattr(self, k) for k in self._KEYS}

    @classmethod
    def from_record(cls, rec: dict) -> PublicConfig:
        kw = {}
        for k in cls._KEYS:
            d = k.replace("_", "-")
            if d in rec:
                kw[k] = rec[d]
        types = {"sigma": float, "max_grad_norm": float, "lr": float, "epsilon_cap": float,
                 "min_expected_batch": float, "rounds": int, "local_steps": int, "transition": int, "hidden": int,
                 "round": int}
        kw = {k: types.get(k, str)(v) for k, v in kw.items()}
        return cls(**kw)


@dataclass
class ClientState:
    """A client's accountant for one run: the rounds it trained in and the rate it booked in each
    (``K`` steps at ``(σ, q)`` per round). Kept in Flower's ``context.state``, and in
    ``state-dir/<run-key>.json`` when the node has one."""

    rounds: list[int] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)

    def history(self, sigma: float, local_steps: int) -> list[tuple[float, float, int]]:
        return [(sigma, float(q), local_steps) for q in self.rates]

    def save(self, node: NodeConfig, run_key: str) -> None:
        if node.state_dir:
            p = Path(node.state_dir) / f"{_safe(run_key)}.json"
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_suffix(".tmp")
            tmp.write_text(json.dumps({"rounds": self.rounds, "rates": self.rates}))
            tmp.replace(p)

    @classmethod
    def load(cls, node: NodeConfig, run_key: str) -> ClientState | None:
        if not node.state_dir:
            return None
        p = Path(node.state_dir) / f"{_safe(run_key)}.json"
        if not p.is_file():
            return None
        d = json.loads(p.read_text())
        return cls([int(r) for r in d["rounds"]], [float(q) for q in d["rates"]])


def _safe(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in key)


@lru_cache(maxsize=256)
def _schedule_cached(eps, delta, sigma, rounds, k, tau, rho, order) -> Schedule:
    return make_schedule(eps, delta, sigma, rounds, k, tau, rho, order=order)


def client_schedule(node: NodeConfig, public: PublicConfig, num_examples: int) -> Schedule:
    """The client's own schedule: ``ε = min(ε_n, cap)``, ``ρ = ρ_n`` for ``ta`` (else 1), and the
    public ``σ, T, K, τ``; checked against the ``q·m_n`` guard.

    Raises:
        BudgetInfeasibleError: the budget cannot be met at the guard (names a feasible ``σ`` / ``T``).
    """
    eps = min(node.epsilon, public.epsilon_cap) if public.epsilon_cap > 0 else node.epsilon
    rho = node.saving_factor if public.method == "ta" else 1.0
    tau = None if public.transition < 0 else public.transition
    s = _schedule_cached(float(eps), float(node.delta), float(public.sigma), int(public.rounds),
                         int(public.local_steps), tau, float(rho), public.order)
    check_min_batch(s, num_examples, public.min_expected_batch)
    return s


def _partition(node: NodeConfig):
    from .data import load_federated

    data = load_federated(node.dataset, node.num_partitions, node.split_seed, node.csv_path, node.val_fraction)
    x, y = data.clients[node.partition_id]
    return x, y, data.num_features, data.num_classes


def client_report(node: NodeConfig, public: PublicConfig) -> dict:
    """Reply to the server's query: what its schedule needs, nothing else.

    Returns:
        ``{"num-examples": m_n, "epsilon": ε_n, "delta": δ, "saving-factor": ρ_n,
        "partition-id": n}`` (``partition-id`` labels the client in the server's records).

    Raises:
        BudgetInfeasibleError: the client's own schedule fails the guard (it will not take part).
    """
    x, y, _, _ = _partition(node)
    client_schedule(node, public, len(y))  # fail here, before any training, if infeasible
    return {"num-examples": int(len(y)), "epsilon": float(node.epsilon), "delta": float(node.delta),
            "saving-factor": float(node.saving_factor), "partition-id": int(node.partition_id)}


def _noise_source(node: NodeConfig, public: PublicConfig, device):
    from .noise import SecureRandom, SeededRandom, derive_insecure_seed

    global _warned_insecure
    if node.insecure_seed is None:
        return SecureRandom()
    if not _warned_insecure:
        log.warning("client %d: noise and sampling are seeded with insecure-seed=%d: anyone who knows the seed can "
                    "replay them and subtract the noise (simulations and tests only)", node.partition_id,
                    node.insecure_seed)
        _warned_insecure = True
    return SeededRandom(derive_insecure_seed(node.insecure_seed, public.run_key, node.partition_id, public.round),
                        device=device)


def client_train(node: NodeConfig, public: PublicConfig, state: ClientState, state_dict: dict
                 ) -> tuple[dict, dict, ClientState]:
    """One round of one client (Algorithm 2, step 2b): own rate, own budget check, ``K`` Opacus
    DP-SGD steps, book them.

    Args:
        node: the client's own configuration.
        public: the run's public hyperparameters and the round ``t``.
        state: the client's accountant for this run (rounds and rates booked so far).
        state_dict: the global model ``θ^{t-1}`` (torch state dict).

    Returns:
        ``(θ_n^t state dict, metrics, new state)`` with metrics ``num-examples``, ``epsilon-spent``,
        ``sample-rate``, ``noise-secure`` (1/0), ``partition-id``.

    Raises:
        ClientUnavailable: the node skips this round (``skip-rounds``); nothing is booked.
        PrivacyBudgetExceeded: the round would take the client above its budget; it refuses.
        BudgetInfeasibleError: the schedule fails the guard.
    """
    import torch
    from opacus.accountants import RDPAccountant

    from .dp_sgd import PrivacyBudgetExceeded, build_model, local_dp_sgd

    t = public.round
    if t in node.skip_rounds:
        raise ClientUnavailable(f"client {node.partition_id} skips round {t} (skip-rounds)")
    if state.rounds and t <= state.rounds[-1]:
        raise PrivacyBudgetExceeded(f"client {node.partition_id}: round {t} was already run (booked rounds up to "
                                    f"{state.rounds[-1]}); refusing to train it again")
    x_np, y_np, d, c = _partition(node)
    sched = client_schedule(node, public, len(y_np))
    q = rate_for_round(sched, state.rounds, state.rates, t)
    sigma, k = sched.sigma, sched.local_steps
    hist = state.history(sigma, k)
    eps_next = epsilon_spent([*hist, (sigma, q, k)], node.delta)
    if q <= 0 or eps_next > sched.epsilon + EPS_TOL:
        raise PrivacyBudgetExceeded(
            f"client {node.partition_id}: round {t} at q={q:.6g} would spend eps={eps_next:.6f} > its budget "
            f"{sched.epsilon}" if q > 0 else f"client {node.partition_id}: no budget left for round {t}")
    device = torch.device(node.device)
    torch.set_num_threads(1)
    x, y = torch.from_numpy(x_np).to(device), torch.from_numpy(y_np).to(device)
    model = build_model(public.dataset, d, c, public.hidden).to(device)
    model.load_state_dict(state_dict)
    acc = RDPAccountant()
    acc.history = [(sigma, float(r), k) for r in state.rates]
    stats = local_dp_sgd(model, x, y, sample_rate=q, noise_multiplier=sigma, max_grad_norm=public.max_grad_norm,
                         local_steps=k, lr=public.lr, accountant=acc,
                         noise_source=_noise_source(node, public, device), grad_sample_mode=public.grad_sample_mode)
    log.debug("client %d round %d: q=%.6g local loss %.4f (kept on the client)", node.partition_id, t, q, stats["loss"])
    new = ClientState([*state.rounds, t], [*state.rates, q])
    new.save(node, public.run_key)
    eps = epsilon_spent(new.history(sigma, k), node.delta)
    if eps > sched.epsilon + EPS_TOL:  # cannot happen: checked above
        raise PrivacyBudgetExceeded(f"client {node.partition_id}: spent {eps} > {sched.epsilon}")
    metrics = {"num-examples": int(len(y_np)), "epsilon-spent": float(eps), "sample-rate": float(q),
               "noise-secure": int(node.insecure_seed is None), "partition-id": int(node.partition_id)}
    sd = {kk: v.detach().cpu() for kk, v in model.state_dict().items()}
    return sd, metrics, new


def booked_epsilon(node: NodeConfig, public: PublicConfig, state: ClientState) -> float | None:
    """The ε the client's own accountant has booked for this run (RDP over the rounds in ``state``
    at the client's ``(σ, K)``), or None before its first round.

    A client that refuses a round (it already ran it before a crash, or its budget is used up)
    sends this with the refusal, so the server's record shows what the client spent rather than
    its last successful reply; it is the same figure every successful reply carries
    (``epsilon-spent``), so the server learns nothing new.
    """
    if not state.rounds:
        return None
    _, y_np, _, _ = _partition(node)
    sched = client_schedule(node, public, len(y_np))
    return float(epsilon_spent(state.history(sched.sigma, sched.local_steps), node.delta))
