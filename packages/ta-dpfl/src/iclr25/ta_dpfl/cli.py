"""``iclr25-ta-dpfl``: schedule / train / reproduce."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from iclr25.core.config import Command, reproduce_command, run_cli

from ._version import __version__
from .config import (
    FLWR_APP_CONFIG,
    FederationSpec,
    FlwrAppConfig,
    ScheduleConfig,
    TaReproduceOptions,
    TrainConfig,
    check_groups,
    group_budgets,
)

__all__ = ["main", "schedule_table", "specs_from_train_config", "write_flwr_app", "FLWR_APP_CONFIG"]

log = logging.getLogger("iclr25.ta_dpfl")


def schedule_table(cfg: ScheduleConfig) -> tuple[str, list[dict]]:
    """Text tables (per client, and ε per round) and the JSON-ready schedules for ``cfg``.

    Raises:
        BudgetInfeasibleError: a budget cannot be met (message names the smallest feasible σ /
            largest feasible rounds).
    """
    import warnings

    from .feasibility import check_min_batch
    from .planning import plan_federation
    from .schedule import BudgetInfeasibleError, ClientBudget

    check_groups(cfg.epsilons, cfg.rhos)
    eps = group_budgets(cfg.epsilons, cfg.num_clients)
    rhos = group_budgets(cfg.rhos, cfg.num_clients)
    budgets = [ClientBudget(e, cfg.delta, cfg.client_size) for e in eps]
    with warnings.catch_warnings(record=True) as caught:  # under-spending clients: printed below
        warnings.simplefilter("always")
        scheds = plan_federation(budgets, cfg.method, cfg.sigma, cfg.rounds, cfg.local_steps, cfg.transition, rhos,
                                 min_expected_batch=0.0)
    notes = sorted({str(w.message) for w in caught})
    lines = [f"method={cfg.method}  sigma={cfg.sigma}  T={cfg.rounds}  K={cfg.local_steps}  delta={cfg.delta:g}",
             "",
             "client  eps_n  rho   tau  q_saving   q_spending  q_uniform  batch(sav/spe)  eps_spent(T)"]
    per_round = []
    for n, s in enumerate(scheds):
        er = s.epsilon_per_round()
        per_round.append(er)
        m = cfg.client_size or 0
        lines.append(f"{n:>6}  {eps[n]:>5g}  {s.rho:<4g}  {s.transition:>3}  {s.rates[0]:<9.6f}  {s.rates[-1]:<10.6f}  "
                     f"{s.q_uniform:<9.6f}  {s.rates[0] * m:>6.1f}/{s.rates[-1] * m:<6.1f}  {er[-1]:.6f}")
    guard = []
    if cfg.client_size and cfg.min_expected_batch > 0:
        for n, s in enumerate(scheds):
            try:
                check_min_batch(s, cfg.client_size, cfg.min_expected_batch)
            except BudgetInfeasibleError as e:
                guard.append(f"  client {n} (eps={eps[n]:g}, rho={s.rho:g}): smallest q*m = "
                             f"{float(s.rates.min()) * cfg.client_size:.1f} < {cfg.min_expected_batch:g}: `train` "
                             f"excludes it ({e})")
    if guard:
        lines += ["", f"guard q*m_n >= {cfg.min_expected_batch:g} (m_n={cfg.client_size}) changes this plan: "
                  f"{len(guard)} of {len(scheds)} client(s) fail it and would not take part:", *guard]
    if notes:
        lines += ["", "note: " + "\nnote: ".join(notes)]
    if cfg.per_round:
        lines += ["", "epsilon spent after each round (one column per client)", "round  " + "  ".join(
            f"c{n:<5}" for n in range(len(scheds)))]
        for t in range(cfg.rounds):
            lines.append(f"{t + 1:>5}  " + "  ".join(f"{er[t]:<6.4f}" for er in per_round))
    data = [{"client": n, **s.to_dict(), "epsilon_per_round": per_round[n].tolist()} for n, s in enumerate(scheds)]
    return "\n".join(lines), data


def _schedule(cfg: ScheduleConfig) -> int:
    text, data = schedule_table(cfg)  # BudgetInfeasibleError is a ValueError: run_cli prints it
    print(text)
    path = Path(cfg.out) / "schedule.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"{len(data)} client schedules; written to {path}")
    return 0


def specs_from_train_config(cfg: TrainConfig) -> list[FederationSpec]:
    """One :class:`FederationSpec` per seed."""
    check_groups(cfg.epsilons, cfg.rhos)
    eps = group_budgets(cfg.epsilons, cfg.num_clients)
    rhos = group_budgets(cfg.rhos, cfg.num_clients)
    return [
        FederationSpec(
            method=cfg.method, epsilons=eps, rhos=rhos, delta=cfg.delta, sigma=cfg.sigma,
            max_grad_norm=cfg.max_grad_norm, rounds=cfg.rounds, local_steps=cfg.local_steps, transition=cfg.transition,
            lr=cfg.lr, hidden=cfg.hidden, dataset=cfg.dataset, csv_path=str(cfg.csv_path) if cfg.csv_path else None,
            label_column=cfg.label_column, model_factory=cfg.model_factory,
            split_seed=cfg.split_seed, seed=s, min_expected_batch=cfg.min_expected_batch,
            val_fraction=cfg.val_fraction, insecure_seed=cfg.insecure_seed,
            grad_sample_mode=cfg.grad_sample_mode, out_dir=str(Path(cfg.out) / f"{cfg.method}-seed{s}"),
            run_key=f"{cfg.method}-seed{s}", resume=cfg.resume, progress=not cfg.quiet,
            device="cpu" if cfg.device == "auto" else cfg.device)
        for s in cfg.seeds
    ]


def _train(cfg: TrainConfig) -> int:
    from .federation import plan

    specs = specs_from_train_config(cfg)
    for s in specs:  # infeasible budgets / bad data fail here (a ValueError), before Flower and Ray start
        plan(s)
    if cfg.engine == "inprocess":
        from .federation import run_inprocess

        results = [run_inprocess(s) for s in specs]
    else:
        from .simulation import RayStartupError, simulate

        try:
            results = simulate(specs, num_cpus=cfg.num_cpus)
        except RayStartupError as e:  # bounded and cleaned up; the message names the way out
            print(f"error: {e}", file=sys.stderr)
            return 3
    accs = [r["final_accuracy"] for r in results]
    summary = {"method": cfg.method, "seeds": list(cfg.seeds), "final_accuracy": accs,
               "epsilon_spent_max_over_budget": max(
                   e / b for r in results for e, b in zip(r["epsilon_spent"], r["epsilon_budget"]))}
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    (Path(cfg.out) / f"summary-{cfg.method}.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{cfg.method}: final accuracy {', '.join(f'{a:.4f}' for a in accs)} "
          f"(max eps_spent/eps_n = {summary['epsilon_spent_max_over_budget']:.6f}); results in {cfg.out}")
    return 0


def _toml(v) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else json.dumps(v)


def write_flwr_app(folder: Path) -> Path:
    """Write a Flower app folder for ``flwr run FOLDER ...`` that runs the *installed* package (no
    checkout needed): a ``pyproject.toml`` whose components are this package's ``server_app`` /
    ``client_app`` and whose ``[tool.flwr.app.config]`` is :data:`FLWR_APP_CONFIG`.

    Raises:
        ValueError: the folder name is not a valid Flower app name (letters, digits, hyphens; starts
            with a letter).
    """
    import re

    folder = Path(folder)
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*", folder.name):
        raise ValueError(f"--out {folder}: Flower takes the app's name from the folder name, which must start with a "
                         "letter and hold only letters, digits and hyphens (e.g. --out ta-dpfl-app)")
    folder.mkdir(parents=True, exist_ok=True)
    conf = "\n".join(f"{k} = {_toml(v)}" for k, v in FLWR_APP_CONFIG.items())
    (folder / "pyproject.toml").write_text(f"""# written by `iclr25-ta-dpfl flwr-app` {__version__}: runs the installed package
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{folder.name.lower()}"
version = "{__version__}"
description = "Flower app running iclr25-ta-dpfl (time-adaptive DP federated learning)"
license = "MIT"
dependencies = ["iclr25-ta-dpfl=={__version__}"]

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "iclr25"

[tool.flwr.app.components]
serverapp = "iclr25.ta_dpfl.flower_app:server_app"
clientapp = "iclr25.ta_dpfl.flower_app:client_app"

[tool.flwr.app.config]
# public hyperparameters only; override with flwr run ... --run-config 'key=value ...'.
# Your own data: dataset="csv" csv-path="/path/data.csv" label-column="label" (server's validation/test
# split); your own model: model-factory="package.module:function" (importable where the server runs).
{conf}
""")
    return folder / "pyproject.toml"


def _flwr_app(cfg: FlwrAppConfig) -> int:
    path = write_flwr_app(Path(cfg.out))
    print(f"Flower app written to {path}; run it with: flwr run {Path(cfg.out)} <federation> --run-config '...'")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``iclr25-ta-dpfl``."""
    return run_cli(
        "iclr25-ta-dpfl",
        "Time-adaptive privacy spending for DP federated learning (Kiani et al., ICLR 2025): "
        "per-client saving/spending sampling-rate schedules, Opacus DP-SGD clients, Flower federation.",
        {
            "schedule": Command(ScheduleConfig, _schedule, "print each client's rates and the eps it spends per round"),
            "flwr-app": Command(FlwrAppConfig, _flwr_app, "write a Flower app folder that runs the installed package "
                                "(flwr run FOLDER, no checkout needed)"),
            "train": Command(TrainConfig, _train, "train one method (Flower simulation or in-process)",
                             deprecated={"--output-dir": "--out", "--quick": "--rounds=10"}),
            "reproduce": reproduce_command("ta-dpfl", "iclr25.ta_dpfl.reproduce:reproduce", __version__,
                                           config=TaReproduceOptions,
                                           help="CPU-scale reproduction on Adult and digits (results.json/md)"),
        },
        argv,
        version=__version__,
    )
