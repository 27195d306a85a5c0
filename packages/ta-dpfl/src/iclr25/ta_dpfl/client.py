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
from .feasibility import check_min_batch
from .schedule import ORDERS, Schedule, make_schedule, rate_for_round

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
    "PINNED_KEYS",
    "UntrustedRound",
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
        dataset, csv_path, label_column, split_seed, val_fraction: which data the partition is cut from
            (``dataset``: ``adult`` | ``digits`` | ``csv`` — your own CSV at ``csv-path`` with its label in
            ``label-column``; ``split-seed``, ``val-fraction``).
        model_factory: your own model, ``"package.module:function"`` called as ``function(num_features,
            num_classes)`` (``model-factory``; empty: the package's MLP). The node's own setting: a client
            never imports a path the server names.
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
    label_column: str = "label"
    model_factory: str | None = None
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
                "label-column", "model-factory", "split-seed", "val-fraction", "insecure-seed", "device", "state-dir", "skip-rounds"}
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
            csv_path=str(cfg.get("csv-path", "")) or None, label_column=str(cfg.get("label-column", "label")),
            model_factory=str(cfg.get("model-factory", "")) or None, split_seed=int(cfg.get("split-seed", 0)),
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
        if self.label_column != "label":
            out["label-column"] = self.label_column
        if self.model_factory:
            out["model-factory"] = self.model_factory
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


#: the public values a client's schedule depends on; fixed at its first trained round of a run and
#: never taken from the server again (a change would re-price rounds already released). ``run_key``
#: too: the accountant is kept per run key, so a server that changed it would get a fresh budget
PINNED_KEYS = ("method", "order", "sigma", "rounds", "local_steps", "transition", "epsilon_cap", "run_key")


class UntrustedRound(RuntimeError):
    """The server's message for a round contradicts what the client has booked (other ``σ``, ``K``,
    ``T``, ... than its schedule, a round index it has already run or outside ``1..T``); it refuses."""


@dataclass
class ClientState:
    """A client's accountant for one run, kept by the client, never re-priced from a server message.

    Every trained round is booked as released — ``(round, σ, q, K)`` — like Opacus' accountant
    history, and ``pinned`` holds the public values its schedule was solved from (set at its first
    round, :data:`PINNED_KEYS`). Kept in Flower's ``context.state``, and in
    ``state-dir/<run-key>.json`` when the node has one."""

    rounds: list[int] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    sigmas: list[float] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    pinned: dict | None = None

    def __post_init__(self) -> None:
        n = len(self.rounds)
        if not (len(self.rates) == len(self.sigmas) == len(self.steps) == n):
            raise ValueError(f"client state: {n} rounds but {len(self.rates)} rates, {len(self.sigmas)} sigmas and "
                             f"{len(self.steps)} step counts booked (each round books (sigma, q, K))")

    def history(self) -> list[tuple[float, float, int]]:
        """Opacus-style history ``[(σ, q, K), ...]`` of the rounds as released."""
        return [(float(s), float(q), int(k)) for s, q, k in zip(self.sigmas, self.rates, self.steps)]

    def book(self, round_: int, sigma: float, q: float, steps: int, pinned: dict) -> ClientState:
        """A new state with round ``round_`` booked at ``(σ, q, K)``."""
        return ClientState([*self.rounds, int(round_)], [*self.rates, float(q)], [*self.sigmas, float(sigma)],
                           [*self.steps, int(steps)], dict(self.pinned or pinned))

    def to_json(self) -> str:
        return json.dumps({"rounds": self.rounds, "rates": self.rates, "sigmas": self.sigmas, "steps": self.steps,
                           "pinned": self.pinned})

    @classmethod
    def from_json(cls, text: str, where: str = "client state") -> ClientState:
        """Parse :meth:`to_json`.

        Raises:
            ValueError: a state without the ``(σ, K)`` of every round (written by iclr25-ta-dpfl <= 0.1.0,
                which re-priced past rounds with the server's current values): it cannot be trusted.
        """
        d = json.loads(text)
        if "sigmas" not in d or "steps" not in d:
            raise ValueError(f"{where}: booked rounds lack their (sigma, K) (written by an older version that "
                             "re-priced them with the server's values); finish that run with the old version or "
                             "start a new run key / state-dir")
        return cls([int(r) for r in d["rounds"]], [float(q) for q in d["rates"]], [float(s) for s in d["sigmas"]],
                   [int(k) for k in d["steps"]], d.get("pinned"))

    def save(self, node: NodeConfig, run_key: str) -> None:
        if node.state_dir:
            p = Path(node.state_dir) / f"{_safe(run_key)}.json"
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_suffix(".tmp")
            tmp.write_text(self.to_json())
            tmp.replace(p)

    @classmethod
    def load(cls, node: NodeConfig, run_key: str) -> ClientState | None:
        if not node.state_dir:
            return None
        p = Path(node.state_dir) / f"{_safe(run_key)}.json"
        if not p.is_file():
            return None
        st = cls.from_json(p.read_text(), str(p))
        if st.pinned is not None and "run_key" not in st.pinned:  # written before run_key was pinned
            st.pinned["run_key"] = run_key
        return st


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

    data = load_federated(node.dataset, node.num_partitions, node.split_seed, node.csv_path, node.val_fraction,
                          node.label_column)
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


def _pinned(public: PublicConfig) -> dict:
    return {k: getattr(public, k) for k in PINNED_KEYS}


def _refuse(exc: type[Exception], node: NodeConfig, msg: str) -> Exception:
    log.warning("client %d refuses: %s", node.partition_id, msg)
    return exc(f"client {node.partition_id}: {msg}")


def client_train(node: NodeConfig, public: PublicConfig, state: ClientState, state_dict: dict
                 ) -> tuple[dict, dict, ClientState]:
    """One round of one client (Algorithm 2, step 2b): own rate, own budget check, ``K`` Opacus
    DP-SGD steps, book them as released.

    The client trusts nothing the server could change: its schedule is solved from the public
    values of its *first* round (``state.pinned``), a later message with other values
    (:data:`PINNED_KEYS`) is refused, every booked round is priced with the ``(σ, q, K)`` it was
    actually run with, and a round index already run or outside ``1..T`` is refused. Each refusal is
    logged (warning) and raised.

    Args:
        node: the client's own configuration.
        public: the run's public hyperparameters and the round ``t``.
        state: the client's accountant for this run (rounds booked so far, as released).
        state_dict: the global model ``θ^{t-1}`` (torch state dict).

    Returns:
        ``(θ_n^t state dict, metrics, new state)`` with metrics ``num-examples``, ``epsilon-spent``,
        ``sample-rate``, ``noise-secure`` (1/0), ``partition-id``.

    Raises:
        ClientUnavailable: the node skips this round (``skip-rounds``); nothing is booked.
        UntrustedRound: the message contradicts the client's booked run (other σ/K/T/method/order/τ/cap,
            a replayed or out-of-range round index); nothing is trained or booked.
        PrivacyBudgetExceeded: the round would take the client above its budget; it refuses.
        BudgetInfeasibleError: the schedule fails the guard.
    """
    import torch
    from opacus.accountants import RDPAccountant

    from .dp_sgd import PrivacyBudgetExceeded, build_model, local_dp_sgd

    t = public.round
    if t in node.skip_rounds:
        raise ClientUnavailable(f"client {node.partition_id} skips round {t} (skip-rounds)")
    pinned = _pinned(public)
    if state.pinned is not None and pinned != state.pinned:
        diff = ", ".join(f"{k}: {state.pinned.get(k)!r} -> {pinned[k]!r}" for k in PINNED_KEYS
                         if state.pinned.get(k) != pinned[k])
        raise _refuse(UntrustedRound, node, f"round {t}: the server changed values this client's schedule was "
                      f"solved from at its first round ({diff}); refusing (its booked rounds keep their own price)")
    if not (1 <= t <= public.rounds):
        raise _refuse(UntrustedRound, node, f"round index {t} is outside 1..{public.rounds}; refusing")
    if state.rounds and t <= state.rounds[-1]:
        raise _refuse(UntrustedRound, node, f"round {t} was already run (booked rounds up to {state.rounds[-1]}); "
                      "refusing to train it again")
    x_np, y_np, d, c = _partition(node)
    sched = client_schedule(node, public, len(y_np))
    sigma, k = sched.sigma, sched.local_steps
    if any(s != sigma or kk != k for s, kk in zip(state.sigmas, state.steps)):  # cannot happen once pinned
        raise _refuse(UntrustedRound, node, f"round {t}: booked rounds used other (sigma, K) than ({sigma}, {k})")
    q = rate_for_round(sched, state.rounds, state.rates, t)
    hist = state.history()
    eps_next = epsilon_spent([*hist, (sigma, q, k)], node.delta)
    if q <= 0 or eps_next > sched.epsilon + EPS_TOL:
        raise _refuse(PrivacyBudgetExceeded, node,
                      f"round {t} at q={q:.6g} would spend eps={eps_next:.6f} > its budget {sched.epsilon}"
                      if q > 0 else f"no budget left for round {t}")
    device = torch.device(node.device)
    torch.set_num_threads(1)
    x, y = torch.from_numpy(x_np).to(device), torch.from_numpy(y_np).to(device)
    model = build_model(public.dataset, d, c, public.hidden, node.model_factory).to(device)
    model.load_state_dict(state_dict)
    acc = RDPAccountant()
    acc.history = list(hist)
    stats = local_dp_sgd(model, x, y, sample_rate=q, noise_multiplier=sigma, max_grad_norm=public.max_grad_norm,
                         local_steps=k, lr=public.lr, accountant=acc,
                         noise_source=_noise_source(node, public, device), grad_sample_mode=public.grad_sample_mode)
    log.debug("client %d round %d: q=%.6g local loss %.4f (kept on the client)", node.partition_id, t, q, stats["loss"])
    new = state.book(t, sigma, q, k, pinned)
    new.save(node, public.run_key)
    eps = epsilon_spent(new.history(), node.delta)
    if eps > sched.epsilon + EPS_TOL:  # cannot happen: checked above
        raise PrivacyBudgetExceeded(f"client {node.partition_id}: spent {eps} > {sched.epsilon}")
    metrics = {"num-examples": int(len(y_np)), "epsilon-spent": float(eps), "sample-rate": float(q),
               "noise-secure": int(node.insecure_seed is None), "partition-id": int(node.partition_id)}
    sd = {kk: v.detach().cpu() for kk, v in model.state_dict().items()}
    return sd, metrics, new


def booked_epsilon(node: NodeConfig, state: ClientState) -> float | None:
    """The ε the client's own accountant has booked for this run (RDP over the rounds in ``state``,
    each at the ``(σ, q, K)`` it was released with), or None before its first round.

    A client that refuses a round (it already ran it before a crash, its budget is used up, the
    server's message contradicts its booked run) sends this with the refusal, so the server's
    record shows what the client spent rather than its last successful reply; it is the same
    figure every successful reply carries (``epsilon-spent``), so the server learns nothing new.
    Nothing in it comes from a server message.
    """
    if not state.rounds:
        return None
    return float(epsilon_spent(state.history(), node.delta))
