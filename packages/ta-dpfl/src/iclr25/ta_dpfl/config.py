"""Configuration dataclasses (CLI flags are generated from them with tyro).

Paper values for ``σ, C, η, K, T, τ, ρ`` could not be read from the paper's body; the defaults are
the spec's CPU-scale reconstruction ([design]) for the Adult experiment: 12 clients in 3 privacy
groups ``ε ∈ {1, 2, 4}``, ``δ = 1e-5`` (paper setting, Sec. 5), ``σ = 1.5``, ``C = 1``, ``T = 30``,
``K = 4``, ``τ = T/2``, ``ρ = (0.25, 0.5, 1.0)`` for ``ε = (1, 2, 4)``, SGD ``η = 2.0`` (chosen so that IDP-FedAvg converges within T; the spec's 0.1 leaves the model at the majority class).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

__all__ = ["FederationSpec", "ScheduleConfig", "TrainConfig", "ReproduceConfig", "group_budgets"]

Method = Literal["dpfedavg", "idp", "ta", "ta-reverse", "ta-uniform"]


def group_budgets(epsilons: tuple[float, ...] | list[float], num_clients: int) -> list[float]:
    """Spread privacy groups over clients: client ``n`` gets ``epsilons[n * G // N]`` (contiguous,
    equal-size groups; 12 clients and ``(1, 2, 4)`` give 4 clients per group)."""
    g = len(epsilons)
    if g == 0 or num_clients < g:
        raise ValueError(f"need at least one client per privacy group: {num_clients} clients, {g} groups")
    return [float(epsilons[n * g // num_clients]) for n in range(num_clients)]


@dataclass
class FederationSpec:
    """Everything one federated run needs (Flower-independent; serialisable to a JSON dict).

    Args:
        method: ``dpfedavg`` | ``idp`` | ``ta`` | ``ta-reverse`` | ``ta-uniform``.
        epsilons: per-client budgets ``ε_n`` (length ``N``).
        rhos: per-client saving factors (a multiset assigned by the permutation rule for ``ta`` /
            ``ta-reverse``; used as given for ``ta-uniform``; ignored otherwise).
        out_dir: where checkpoints, ``metrics.jsonl`` and ``result.json`` go.
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
    split_seed: int = 0
    seed: int = 0
    min_expected_batch: float = 5.0
    grad_sample_mode: str = "ghost"
    out_dir: str = "runs/ta-dpfl"
    run_key: str = "run"
    resume: bool = False
    progress: bool = True

    @property
    def num_clients(self) -> int:
        return len(self.epsilons)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ScheduleConfig:
    """Print each client's saving/spending rates and the ε it will have spent after every round."""

    epsilons: tuple[float, ...] = (1.0, 2.0, 4.0)
    """Privacy groups' budgets ε (paper: heterogeneous budgets, Sec. 5; spec Adult setting)."""
    num_clients: int = 12
    """Clients N (spread evenly over the groups)."""
    method: Method = "ta"
    """dpfedavg (all at min ε) | idp (uniform) | ta (strict clients save most) | ta-reverse | ta-uniform."""
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
    """Last saving round τ (default T/2) [design]."""
    client_size: int | None = 2170
    """m_n for the expected batch column and the δ >= 1/m_n warning (None: unknown)."""
    per_round: bool = True
    """Also print the per-round ε table."""
    json_out: Path | None = None
    """Write the schedules as JSON here."""


@dataclass
class TrainConfig:
    """Train one method with Flower's simulation engine (Ray backend), Opacus DP-SGD clients."""

    method: Method = "ta"
    """dpfedavg | idp | ta | ta-reverse | ta-uniform."""
    dataset: Literal["adult", "digits"] = "adult"
    """adult (mirrored UCI Adult, ICLR25_DATA) or digits (scikit-learn, smoke tests)."""
    csv_path: Path | None = None
    """An Adult-format CSV instead of the mirror."""
    epsilons: tuple[float, ...] = (1.0, 2.0, 4.0)
    """Privacy groups' budgets ε."""
    num_clients: int = 12
    """Clients N (= Flower SuperNodes)."""
    rhos: tuple[float, ...] = (0.25, 0.5, 1.0)
    """Saving factors, one per group [design]."""
    delta: float = 1e-5
    sigma: float = 1.5
    """Noise multiplier σ [design]."""
    max_grad_norm: float = 1.0
    """Clip norm C [design]."""
    rounds: int = 30
    local_steps: int = 4
    transition: int | None = None
    lr: float = 2.0
    """SGD step size η [design; tuned on IDP-FedAvg only]."""
    hidden: int = 64
    """MLP hidden width (0: logistic regression)."""
    seeds: tuple[int, ...] = (0,)
    """Training seeds (one run each)."""
    split_seed: int = 0
    min_expected_batch: float = 5.0
    """Error before training when some q·m_n is below this."""
    grad_sample_mode: Literal["ghost", "hooks"] = "ghost"
    """Opacus per-sample clipping: ghost (fast gradient clipping) or hooks (GradSampleModule)."""
    output_dir: Path = Path("runs/ta-dpfl")
    resume: bool = False
    """Continue from the last per-round checkpoint in output_dir."""
    num_cpus: int = 2
    """CPUs given to Ray (one per ClientApp actor)."""
    quick: bool = False
    """CPU-scale preset: 10 rounds."""
    quiet: bool = False


@dataclass
class ReproduceConfig:
    """Run the CPU-scale reproduction and write results.json / results.md."""

    quick: bool = False
    """1 seed, 4 methods (< 3 min on 2 cores); full: 5 seeds, 5 methods."""
    out: Path = Path("results/ta-dpfl")
    """Output folder."""

