"""Configuration dataclasses (CLI flags are generated from them with tyro).

Paper values for ``σ, C, η, K, T, τ, ρ`` could not be read from the paper's body; the defaults are
the spec's CPU-scale reconstruction ([design]) for the Adult experiment: 12 clients in 3 privacy
groups ``ε ∈ {1, 2, 4}``, ``δ = 1e-5`` (paper setting, Sec. 5), ``σ = 1.5``, ``C = 1``, ``T = 30``,
``K = 4``, ``τ = T/2``, ``ρ = (0.25, 0.5, 1.0)`` for ``ε = (1, 2, 4)``, SGD ``η = 2.0`` (chosen so that IDP-FedAvg converges within T; the spec's 0.1 leaves the model at the majority class).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from iclr25.core.config import CommonOptions, ReproduceOptions, SeedsOption

__all__ = ["FederationSpec", "FlwrAppConfig", "ScheduleConfig", "TrainConfig", "TaReproduceOptions", "group_budgets",
           "check_groups", "ADULT_SIGMA", "FLWR_APP_CONFIG"]

#: The one source of truth for the Adult setting's noise multiplier: the smallest σ (rounded up) at which every
#: client of the default Adult setting (12 clients, ε = 1/2/4, ρ = 0.25/0.5/1, T = 30, K = 4) meets the spec's
#: guard q·m_n ≥ 20 (the spec's σ = 1.5 gives the ε = 1, ρ = 0.25 clients q·m ≈ 12, refused before training).
#: ``train``'s default, the Flower app's config (:data:`FLWR_APP_CONFIG`, this package's pyproject.toml, the
#: ``flwr-app`` folder) and the reproduction's Adult setting use it. ``schedule`` keeps the spec's σ = 1.5:
#: it prints schedules (and names the clients below the guard), it does not train.
ADULT_SIGMA = 2.2

#: ``[tool.flwr.app.config]`` of the Flower app: this package's own ``pyproject.toml`` (``flwr run
#: packages/ta-dpfl``) and the folder ``iclr25-ta-dpfl flwr-app`` writes (tested equal). Public hyperparameters only.
FLWR_APP_CONFIG = {
    "method": "ta", "num-clients": 3, "sigma": ADULT_SIGMA, "max-grad-norm": 1.0, "num-server-rounds": 30,
    "local-steps": 4, "transition": -1, "lr": 2.0, "hidden": 64, "dataset": "adult", "csv-path": "",
    "label-column": "label", "model-factory": "", "split-seed": 0, "val-fraction": 0.1, "seed": 0,
    "min-expected-batch": 20.0, "grad-sample-mode": "ghost", "out-dir": "runs/ta-dpfl/flwr", "run-key": "run",
    "resume": False, "round-timeout": 600.0,
}

Method = Literal["dpfedavg", "idp", "ta", "ta-reverse", "ta-uniform", "ta-spend-first"]


def check_groups(epsilons, rhos) -> None:
    """One saving factor per privacy group.

    Raises:
        ValueError: ``--rhos`` and ``--epsilons`` have different lengths (they used to be broadcast
            silently, so ``--rhos 0.5`` gave every group 0.5).
    """
    if len(rhos) != len(epsilons):
        raise ValueError(f"--rhos has {len(rhos)} value(s) {list(rhos)} for {len(epsilons)} --epsilons group(s) "
                         f"{list(epsilons)}: give one saving factor per group (e.g. --rhos "
                         f"{' '.join(['0.5'] * len(epsilons))})")


def group_budgets(epsilons: tuple[float, ...] | list[float], num_clients: int) -> list[float]:
    """Spread privacy groups over clients: client ``n`` gets ``epsilons[n * G // N]`` (contiguous,
    equal-size groups; 12 clients and ``(1, 2, 4)`` give 4 clients per group)."""
    g = len(epsilons)
    if g == 0 or num_clients < g:
        raise ValueError(f"need at least one client per privacy group: {num_clients} clients, {g} groups")
    return [float(epsilons[n * g // num_clients]) for n in range(num_clients)]


@dataclass
class FederationSpec:
    """One federated run of a simulation (Flower-independent; serialisable to a JSON dict).

    The fields split in two. **Node-owned** (what each simulated SuperNode's ``node_config`` gets;
    the server never reads them): ``epsilons``, ``rhos`` (assigned per ``method``), ``delta``,
    ``insecure_seed``, ``skip_rounds``. **Public** (the server's run config): everything else.

    Args:
        method: ``dpfedavg`` | ``idp`` | ``ta`` | ``ta-reverse`` | ``ta-uniform`` | ``ta-spend-first``.
        epsilons: per-client budgets ``ε_n`` (length ``N``).
        rhos: saving factors: a multiset assigned by the permutation rule for ``ta`` / ``ta-spend-first``,
            reversed for ``ta-reverse``, used as given (aligned with ``epsilons``) for ``ta-uniform``.
        insecure_seed: derive every client's noise and sampling from ``seed`` (replayable; simulations
            and tests only). Default: the OS CSPRNG.
        skip_rounds: ``{client: rounds}`` the client does not take part in (fault injection).
        val_fraction: share of the training part held out as the server's validation split.
        out_dir: where checkpoints, ``metrics.jsonl``, ``result.json`` and the nodes' state go.
        csv_path, label_column: your own tabular CSV (``dataset="csv"``) and its label column.
        model_factory: your own model, ``"module:function"`` -> ``function(num_features, num_classes)``
            (server and simulated nodes; a deployed node sets its own in its node config).
    """

    method: str
    epsilons: list[float]
    rhos: list[float]
    delta: float = 1e-5
    sigma: float = 1.5
    max_grad_norm: float = 1.0
    rounds: int = 30
    local_steps: int = 4
    transition: int | None = None
    lr: float = 2.0
    hidden: int = 64
    dataset: str = "adult"
    csv_path: str | None = None
    label_column: str = "label"
    model_factory: str | None = None
    split_seed: int = 0
    val_fraction: float = 0.1
    seed: int = 0
    insecure_seed: bool = False
    min_expected_batch: float = 20.0
    grad_sample_mode: str = "ghost"
    out_dir: str = "runs/ta-dpfl"
    run_key: str = "run"
    resume: bool = False
    progress: bool = True
    device: str = "cpu"
    skip_rounds: dict[int, list[int]] | None = None

    def __post_init__(self) -> None:
        from .schedule import METHODS

        if self.method not in METHODS:
            raise ValueError(f"method={self.method!r}; choose from {METHODS}")
        if len(self.epsilons) != len(self.rhos):
            raise ValueError(f"{len(self.epsilons)} epsilons but {len(self.rhos)} rhos")
        if self.csv_path and self.dataset not in ("adult", "csv"):
            raise ValueError(f"csv_path={self.csv_path!r} is read only for datasets 'adult' and 'csv', not "
                             f"{self.dataset!r} (drop --csv-path, or use --dataset csv)")
        if self.dataset == "csv" and not self.csv_path:
            raise ValueError("dataset 'csv' needs csv_path (--csv-path) naming your CSV file")
        for name in ("delta", "sigma", "max_grad_norm", "lr", "val_fraction", "min_expected_batch"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{name}={v!r} must be a finite number >= 0")
        for name in ("sigma", "max_grad_norm", "lr", "delta"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)!r} must be > 0")

    @property
    def num_clients(self) -> int:
        return len(self.epsilons)

    @property
    def server_method(self) -> str:
        """What the server runs: ``dpfedavg`` | ``idp`` | ``ta`` (the ``ta-*`` variants differ only in
        the nodes' saving factors or the public ``order``)."""
        return self.method if self.method in ("dpfedavg", "idp") else "ta"

    @property
    def order(self) -> str:
        return "spend-first" if self.method == "ta-spend-first" else "save-first"

    def node_rhos(self) -> list[float]:
        """Each node's saving factor under this method (the permutation rule, its reverse, or as given)."""
        from .schedule import assign_saving_factors

        if self.method == "ta-uniform":
            return [float(r) for r in self.rhos]
        return assign_saving_factors(self.epsilons, self.rhos, reverse=(self.method == "ta-reverse"))

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(kw_only=True)
class ScheduleConfig(CommonOptions):
    """Print each client's saving/spending rates and the ε it will have spent after every round."""

    epsilons: tuple[float, ...] = (1.0, 2.0, 4.0)
    """Privacy groups' budgets ε (paper: heterogeneous budgets, Sec. 5; spec Adult setting)."""
    num_clients: int = 12
    """Clients N (spread evenly over the groups)."""
    method: Method = "ta"
    """dpfedavg (all at min ε) | idp (uniform) | ta (strict clients save most) | ta-reverse | ta-uniform | ta-spend-first."""
    rhos: tuple[float, ...] = (0.25, 0.5, 1.0)
    """Saving factors, one per group (ρ=1: no saving) [design]."""
    delta: float = 1e-5
    """δ of every client (paper)."""
    sigma: float = 1.5
    """Noise multiplier σ [design]."""
    rounds: int = 30
    """Rounds T [design]."""
    local_steps: int = 4
    """DP-SGD steps per round K [design]."""
    transition: int | None = None
    """Number of saving rounds τ (default T/2) [design]."""
    client_size: int | None = 2170
    """m_n for the expected batch column and the δ >= 1/m_n warning (None: unknown)."""
    per_round: bool = True
    """Also print the per-round ε table."""
    min_expected_batch: float = 20.0
    """The guard ``q·m_n >= this`` that ``train`` applies (spec: 20): clients below it are named (0: off)."""


@dataclass(kw_only=True)
class FlwrAppConfig(CommonOptions):
    """Write a Flower app folder (its ``pyproject.toml``) that runs the installed package: ``flwr run OUT ...``.
    Flower names the app after the folder: letters, digits and hyphens (``--out ta-dpfl-app``)."""


@dataclass(kw_only=True)
class TrainConfig(CommonOptions, SeedsOption):
    """Train one method: Flower's simulation engine (Ray) or the in-process driver, Opacus DP-SGD clients."""

    method: Method = "ta"
    """dpfedavg | idp | ta | ta-reverse | ta-uniform | ta-spend-first."""
    engine: Literal["flower", "inprocess"] = "flower"
    """flower (Flower simulation engine, Ray backend) or inprocess (same client/server logic, no Ray)."""
    dataset: Literal["adult", "digits", "csv"] = "adult"
    """adult (mirrored UCI Adult, ICLR25_DATA), digits (scikit-learn) or csv (your own CSV, --csv-path)."""
    csv_path: Path | None = None
    """With --dataset csv: your tabular CSV (header line, label in --label-column); with adult: an Adult-format CSV."""
    label_column: str = "label"
    """The label column of --dataset csv."""
    model_factory: str | None = None
    """Your own model: 'package.module:function', called as function(num_features, num_classes) (default: the MLP)."""
    epsilons: tuple[float, ...] = (1.0, 2.0, 4.0)
    """Privacy groups' budgets ε (the simulated nodes' own budgets)."""
    num_clients: int = 12
    """Clients N (= simulated SuperNodes)."""
    rhos: tuple[float, ...] = (0.25, 0.5, 1.0)
    """Saving factors, one per group [design]."""
    delta: float = 1e-5
    sigma: float = ADULT_SIGMA
    """Noise multiplier σ (2.2: the smallest meeting q·m >= 20 for the default Adult setting; ADULT_SIGMA)."""
    max_grad_norm: float = 1.0
    """Clip norm C [design]."""
    rounds: int = 30
    local_steps: int = 4
    transition: int | None = None
    lr: float = 2.0
    """SGD step size η (reproduce tunes it per method on validation)."""
    hidden: int = 64
    """MLP hidden width (0: logistic regression)."""
    split_seed: int = 0
    val_fraction: float = 0.1
    """Share of the training part held out as the server's validation split."""
    min_expected_batch: float = 20.0
    """Error before training when some q·m_n is below this (spec: 20)."""
    insecure_seed: bool = False
    """Derive the clients' noise from the seed (replayable by anyone who knows it; simulations and tests only)."""
    grad_sample_mode: Literal["ghost", "hooks"] = "ghost"
    """Opacus per-sample clipping: ghost (fast gradient clipping) or hooks (GradSampleModule)."""
    resume: bool = False
    """Continue from the last per-round checkpoint in --out."""
    num_cpus: int = 2
    """CPUs given to Ray (one per ClientApp actor)."""


@dataclass(kw_only=True)
class TaReproduceOptions(ReproduceOptions):
    """Reproduce the paper's claims at CPU scale (Adult and digits); write results.json / results.md."""

    resume: bool = False
    """Keep the jobs an interrupted run finished (OUT/records; refused if settings changed) and continue an
    unfinished federation from its last round checkpoint (without it, OUT/runs is deleted and run again)."""
    workers: int | None = None
    """Worker processes of the core's runner, one thread each (default: from the cores; 1: in this process)."""

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"--workers={self.workers} must be >= 1")
