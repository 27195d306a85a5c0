"""Everything that touches Flower's API (it moves between releases): the strategy, the
``ClientApp`` / ``ServerApp`` pair for ``flwr run``, and the simulation driver.

- :class:`TimeAdaptiveFedAvg`: Flower's message-API ``FedAvg`` whose ``configure_train`` sends the
  round's public rate schedule (each client reads its own ``q_{n,t}``) and whose
  ``aggregate_train`` collects each client's spent ``ε`` and refuses failed rounds.
- ``client_app``: Opacus DP-SGD client; its accountant history lives in Flower's per-node
  ``context.state`` (rebuilt from the public schedule if the node restarts).
- ``server_app``: reads ``[tool.flwr.app.config]`` (``flwr run``) or specs handed over by
  :func:`simulate` and runs them one after the other on the same Grid.
- :func:`simulate`: Flower's simulation engine (``flwr.simulation.run_simulation``, Ray backend).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterable

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from .config import FederationSpec, group_budgets
from .federation import ServerState, client_round, plan

__all__ = ["TimeAdaptiveFedAvg", "client_app", "server_app", "make_server_app", "run_spec", "simulate",
           "spec_from_run_config"]

log = logging.getLogger("iclr25.ta_dpfl")


class TimeAdaptiveFedAvg(FedAvg):
    """FedAvg (weights ``m_n / Σ m``, full participation) with per-client, per-round sampling rates.

    Args:
        state: the run's :class:`~iclr25.ta_dpfl.federation.ServerState` (schedules, budgets).
        progress: a tqdm bar advanced once per round (or ``None``).
    """

    def __init__(self, state: ServerState, progress=None):
        n = state.spec.num_clients
        super().__init__(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n,
                         min_evaluate_nodes=0)
        self.state = state
        self.progress = progress

    def _round(self, server_round: int) -> int:
        return server_round + self.state.start_round

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        t = self._round(server_round)
        cfg = ConfigRecord(dict(config))
        cfg["round"] = t
        cfg["rates-matrix"] = [float(v) for v in self.state.rates.reshape(-1)]
        cfg["num-rounds-total"] = int(self.state.rates.shape[1])
        cfg["budgets"] = [float(e) for e in self.state.spec.epsilons]
        return super().configure_train(server_round, arrays, cfg, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        replies = list(replies)
        errors = [m for m in replies if m.has_error()]
        if errors:
            raise RuntimeError("client failures in round "
                               f"{self._round(server_round)}: {[m.error.reason for m in errors]}")
        eps = {int(m.content["metrics"]["partition-id"]): float(m.content["metrics"]["epsilon-spent"])
               for m in replies}
        self.state.record_clients(self._round(server_round), eps)
        return super().aggregate_train(server_round, replies)


# ---------------------------------------------------------------------------------------- client
client_app = ClientApp()


@client_app.train()
def _train(msg: Message, context: Context) -> Message:
    cfg = dict(msg.content["config"])
    pid = int(context.node_config["partition-id"])
    t = int(cfg["round"])
    n = int(cfg["num_clients"])
    rates = np.asarray(cfg["rates-matrix"], dtype=float).reshape(n, int(cfg["num-rounds-total"]))
    key = f"acct:{cfg['run_key']}"
    booked = list(context.state[key]["rates"]) if key in context.state else None
    res = client_round(partition_id=pid, state_dict=msg.content["arrays"].to_torch_state_dict(), round_=t,
                       rates_matrix=rates, budget=float(cfg["budgets"][pid]), booked_rates=booked, cfg=cfg)
    context.state[key] = ConfigRecord({"rates": res.history})
    metrics = MetricRecord({"num-examples": res.num_examples, "partition-id": pid,
                            "epsilon-spent": res.epsilon_spent, "sample-rate": res.sample_rate,
                            "train-loss": 0.0 if np.isnan(res.loss) else res.loss, "mean-batch": res.mean_batch})
    return Message(content=RecordDict({"arrays": ArrayRecord(res.state_dict), "metrics": metrics}), reply_to=msg)


# ---------------------------------------------------------------------------------------- server
def run_spec(grid: Grid, spec: FederationSpec) -> dict:
    """Run one federation on ``grid`` with Flower's strategy loop; returns ``result.json``'s dict."""
    from tqdm.auto import tqdm

    state = ServerState(spec)
    if state.remaining_rounds <= 0:
        return state.finish()
    bar = tqdm(total=spec.rounds, initial=state.start_round, desc=f"{spec.run_key}", disable=not spec.progress,
               leave=False)
    strategy = TimeAdaptiveFedAvg(state, bar)

    def evaluate_fn(server_round: int, arrays: ArrayRecord):
        if server_round == 0:
            return None
        row = state.end_round(state.start_round + server_round, arrays.to_torch_state_dict())
        bar.update(1)
        bar.set_postfix(acc=f"{row['accuracy']:.4f}")
        return MetricRecord({"accuracy": row["accuracy"], "loss": row["loss"]})

    strategy.start(grid=grid, initial_arrays=ArrayRecord(state.model.state_dict()),
                   num_rounds=state.remaining_rounds, train_config=ConfigRecord(state.client_config()),
                   evaluate_fn=evaluate_fn)
    bar.close()
    return state.finish()


def _floats(v) -> list[float]:
    if isinstance(v, str):
        return [float(x) for x in v.replace(";", ",").split(",") if x.strip()]
    if isinstance(v, (list, tuple)):
        return [float(x) for x in v]
    return [float(v)]


def spec_from_run_config(rc: dict) -> FederationSpec:
    """Build a :class:`FederationSpec` from Flower's run config (``[tool.flwr.app.config]``):
    scalar keys; ``epsilons`` / ``rhos`` are comma-separated group values spread over
    ``num-clients`` clients."""
    n = int(rc.get("num-clients", 12))
    eps = group_budgets(_floats(rc.get("epsilons", "1,2,4")), n)
    rho_groups = _floats(rc.get("rhos", "0.25,0.5,1.0"))
    rhos = group_budgets(rho_groups, n)
    transition = int(rc.get("transition", -1))
    return FederationSpec(
        method=str(rc.get("method", "ta")), epsilons=eps, rhos=rhos, delta=float(rc.get("delta", 1e-5)),
        sigma=float(rc.get("sigma", 1.5)), max_grad_norm=float(rc.get("max-grad-norm", 1.0)),
        rounds=int(rc.get("num-server-rounds", 30)), local_steps=int(rc.get("local-steps", 4)),
        transition=None if transition < 0 else transition, lr=float(rc.get("lr", 2.0)),
        hidden=int(rc.get("hidden", 64)), dataset=str(rc.get("dataset", "adult")),
        csv_path=str(rc.get("csv-path", "")) or None, split_seed=int(rc.get("split-seed", 0)),
        seed=int(rc.get("seed", 0)), grad_sample_mode=str(rc.get("grad-sample-mode", "ghost")),
        out_dir=str(rc.get("out-dir", "runs/ta-dpfl")), run_key=str(rc.get("run-key", "run")),
        resume=bool(rc.get("resume", False)),
    )


def make_server_app(specs: list[FederationSpec] | None = None, sink: dict | None = None) -> ServerApp:
    """A ``ServerApp`` that runs ``specs`` in order (or, when ``None``, the one spec described by the
    run config). Results (or the exception) are put into ``sink`` under ``"results"`` / ``"error"``."""
    app = ServerApp()

    @app.main()
    def _main(grid: Grid, context: Context) -> None:
        todo = specs if specs is not None else [spec_from_run_config(dict(context.run_config))]
        out = []
        try:
            for spec in todo:
                out.append(run_spec(grid, spec))
        except BaseException as e:  # noqa: BLE001 - handed back to the caller of simulate()
            if sink is not None:
                sink["error"] = e
            raise
        finally:
            if sink is not None:
                sink["results"] = out

    return app


server_app = make_server_app()


def _shutdown_ray() -> None:
    """Make sure no Ray actor outlives the simulation (Flower leaves them terminating)."""
    try:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    except Exception:  # noqa: BLE001 - best effort
        pass


def simulate(specs: list[FederationSpec], num_cpus: int = 2, verbose: bool = False) -> list[dict]:
    """Run ``specs`` (same number of clients) in ONE Flower simulation (Ray backend, one ClientApp
    actor per CPU); Ray starts once for all of them.

    Returns:
        One ``result.json`` dict per spec.

    Raises:
        ValueError: specs with different numbers of clients.
        RuntimeError / the server's exception: a run failed (e.g. a client refused to overspend).
    """
    from flwr.simulation import run_simulation

    if len({s.num_clients for s in specs}) != 1:
        raise ValueError("all specs of one simulation must have the same number of clients")
    for s in specs:  # plan first: infeasible budgets fail here, before Ray starts
        plan(s)
    sink: dict = {}
    if not verbose:
        logging.getLogger("flwr").setLevel(logging.ERROR)
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    backend = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
               "init_args": {"num_cpus": int(num_cpus), "include_dashboard": False, "log_to_driver": verbose}}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run_simulation(server_app=make_server_app(specs, sink), client_app=client_app,
                           num_supernodes=specs[0].num_clients, backend_config=backend, verbose_logging=verbose)
    finally:
        _shutdown_ray()
    if "error" in sink:
        raise sink["error"]
    res = sink.get("results", [])
    if len(res) != len(specs):
        raise RuntimeError(f"simulation finished {len(res)} of {len(specs)} runs (see Flower's log above)")
    return res
