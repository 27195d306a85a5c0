"""Everything that touches Flower's API (it moves between releases): the ``ClientApp`` /
``ServerApp`` pair for ``flwr run`` (simulation or the deployment engine) and the simulation driver.

- ``client_app``: a SuperNode's client. Its budget ``(ε_n, δ)``, saving factor and data partition
  come from the node's own ``node_config`` (``flower-supernode --node-config "partition-id=0
  num-partitions=3 epsilon=1 delta=1e-5 saving-factor=0.25"``); it answers the server's *query*
  with its sample count and budget group (:func:`~iclr25.ta_dpfl.client.client_report`) and trains
  with :func:`~iclr25.ta_dpfl.client.client_train`. Its accountant lives in Flower's per-node
  ``context.state`` (and in ``state-dir`` when the node config has one).
- ``server_app``: queries the connected nodes, solves the schedules from their reports
  (:class:`~iclr25.ta_dpfl.federation.ServerState`), runs ``T`` rounds of FedAvg over the replies
  it gets (a node that errs, refuses or times out is recorded as missing the round), writes
  ``metrics.jsonl`` / checkpoints / ``result.json``.
Flower's simulation engine and the management of its Ray processes are in :mod:`.simulation`
(``pip install "iclr25-ta-dpfl[simulation]"``); a deployed SuperNode or ServerApp needs only this module and
the base install (``flwr`` without Ray).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from .client import (
    ClientState,
    ClientUnavailable,
    NodeConfig,
    PublicConfig,
    UntrustedRound,
    booked_epsilon,
    client_report,
    client_train,
)
from .config import FLWR_APP_CONFIG, FederationSpec, group_budgets
from .dp_sgd import PrivacyBudgetExceeded
from .federation import ServerState, fedavg
from .schedule import BudgetInfeasibleError

__all__ = ["client_app", "server_app", "make_client_app", "make_server_app", "run_spec", "spec_from_run_config"]

log = logging.getLogger("iclr25.ta_dpfl")


# ---------------------------------------------------------------------------------------- client
def _state_key(run_key: str) -> str:
    return f"acct:{run_key}"


def _load_state(context: Context, node: NodeConfig, run_key: str, one_run: bool = True) -> ClientState:
    """The node's accountant for this Flower run. A SuperNode's context holds one run's accountant
    (``one_run``): a message with another run key gets the booked one (whose pinned ``run_key``
    differs, so the round is refused), never a fresh budget. In a simulation of several specs
    (``one_run=False``) each run key is another simulated node with its own configuration."""
    key: str | None = _state_key(run_key)
    if key not in context.state:
        booked = sorted(str(k) for k in context.state.keys() if str(k).startswith("acct:")) if one_run else []
        key = booked[0] if booked else None
    if key is not None:
        st = ClientState.from_json(str(context.state[key]["json"]), f"context.state[{key!r}]")
        if st.pinned is not None and "run_key" not in st.pinned:
            st.pinned["run_key"] = key[len("acct:"):]
        return st
    st = ClientState.load(node, run_key)
    if st is None and one_run and node.state_dir:
        # a restarted SuperNode (empty context) asked for a run key its state folder has not seen: the node's
        # data already released noise under another run, so it gets that run's accountant (whose pinned
        # run_key differs: the round is refused), never a fresh budget
        for p in sorted(Path(node.state_dir).glob("*.json")):
            other = ClientState.from_json(p.read_text(), str(p))
            if other.rounds:
                if other.pinned is not None and "run_key" not in other.pinned:
                    other.pinned["run_key"] = p.stem
                return other
    return st or ClientState()


def _refusal(msg: Message, e: Exception, epsilon_spent: float | None = None, partition_id: int | None = None
             ) -> Message:
    rec: dict = {"error": f"{type(e).__name__}: {e}"}
    if partition_id is not None:  # the server labels clients by partition, not by Flower node id
        rec["partition-id"] = int(partition_id)
    if epsilon_spent is not None:  # what this node's accountant has booked (as every reply says)
        rec["epsilon-spent"] = float(epsilon_spent)
    return Message(content=RecordDict({"status": ConfigRecord(rec)}), reply_to=msg)


def make_client_app(nodes: dict[str, dict[int, NodeConfig]] | None = None) -> ClientApp:
    """A ``ClientApp`` whose node configuration is the SuperNode's ``node_config`` (deployment) or,
    for a simulation, ``nodes[run_key][partition-id]`` (the simulated SuperNodes' own
    configurations; a simulation may run several methods, whose saving factors differ)."""
    app = ClientApp()

    def node_of(context: Context, public: PublicConfig) -> NodeConfig:
        if nodes is not None:
            return nodes[public.run_key][int(context.node_config["partition-id"])]
        return NodeConfig.from_mapping(dict(context.node_config))

    @app.query()
    def _query(msg: Message, context: Context) -> Message:
        public = PublicConfig.from_record(dict(msg.content["config"]))
        node = node_of(context, public)
        try:
            rep = client_report(node, public)
        except BudgetInfeasibleError as e:
            return _refusal(msg, e, partition_id=node.partition_id)
        return Message(content=RecordDict({"report": MetricRecord(rep)}), reply_to=msg)

    @app.train()
    def _train(msg: Message, context: Context) -> Message:
        public = PublicConfig.from_record(dict(msg.content["config"]))
        node = node_of(context, public)
        state = _load_state(context, node, public.run_key, one_run=nodes is None)
        try:
            sd, met, new = client_train(node, public, state, msg.content["arrays"].to_torch_state_dict())
        except (ClientUnavailable, PrivacyBudgetExceeded, BudgetInfeasibleError, UntrustedRound) as e:
            return _refusal(msg, e, booked_epsilon(node, state), node.partition_id)
        context.state[_state_key(public.run_key)] = ConfigRecord({"json": new.to_json()})
        return Message(content=RecordDict({"arrays": ArrayRecord(sd), "metrics": MetricRecord(met)}), reply_to=msg)

    return app


client_app = make_client_app()


# ---------------------------------------------------------------------------------------- server
def _exchange(grid: Grid, node_ids: list[int], message_type: str, content_of, timeout: float,
              partitions: dict[int, str] | None = None
              ) -> tuple[dict[int, RecordDict], dict[int, str], dict[int, float]]:
    """Send one message to each node; ``(replies, reasons of the nodes that missed it, the ε a
    refusing node says it has booked)``. A refusal that names its ``partition-id`` is recorded in
    ``partitions`` (node id -> partition label)."""
    msgs = [Message(content=content_of(nid), dst_node_id=nid, message_type=message_type) for nid in node_ids]
    replies = list(grid.send_and_receive(msgs, timeout=timeout))
    ok, bad, booked = {}, {}, {}
    for m in replies:
        src = m.metadata.src_node_id
        if m.has_error():
            bad[src] = f"error: {m.error.reason}"
        elif "status" in m.content:
            st = m.content["status"]
            bad[src] = str(st["error"])
            if partitions is not None and "partition-id" in st:
                partitions[src] = str(int(st["partition-id"]))
            if "epsilon-spent" in st:
                booked[src] = float(st["epsilon-spent"])
        else:
            ok[src] = m.content
    for nid in node_ids:
        if nid not in ok and nid not in bad:
            bad[nid] = f"no reply within {timeout:g} s"
    return ok, bad, booked


def _wait_for_nodes(grid: Grid, n: int, timeout: float) -> list[int]:
    t0 = time.monotonic()
    while True:
        ids = sorted(grid.get_node_ids())
        if len(ids) >= n:
            return ids
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"only {len(ids)} of {n} SuperNodes connected within {timeout:g} s")
        time.sleep(0.5)


def run_spec(grid: Grid, spec: FederationSpec, *, min_nodes: int | None = None, round_timeout: float = 600.0
             ) -> dict:
    """Run one federation on ``grid``: query the nodes, solve their schedules from the reports,
    ``T`` rounds of training and FedAvg over the replies. Returns ``result.json``'s dict.

    Args:
        spec: the run's public hyperparameters (its budget fields are not read: nodes report theirs).
        min_nodes: wait until this many nodes are connected (default ``spec.num_clients``).
        round_timeout: seconds a round waits for replies; a node that does not answer misses it.

    Raises:
        RuntimeError: too few nodes connected.
        BudgetInfeasibleError: no node can take part (before any training). A node that refuses the
            query or whose reported budget fails the ``q·m_n`` guard is excluded and recorded in
            ``result["excluded"]``; the others go on.
    """
    from iclr25.core.progress import progress

    state = ServerState(spec)
    node_ids = _wait_for_nodes(grid, spec.num_clients if min_nodes is None else min_nodes, round_timeout)
    pub0 = state.public_config(0)
    refused_parts: dict[int, str] = {}
    ok, bad, _ = _exchange(grid, node_ids, "query", lambda _: RecordDict({"config": ConfigRecord(pub0.to_record())}),
                           round_timeout, refused_parts)
    if bad:
        log.warning("query: nodes did not report: %s", bad)
    reports = {str(int(c["report"]["partition-id"])): dict(c["report"]) for c in ok.values()}
    label_of = {nid: str(int(c["report"]["partition-id"])) for nid, c in ok.items()}
    # a node that refused names its partition; one that never answered is known only by its node id
    state.register(reports, {refused_parts.get(nid, f"node-{nid}"): why for nid, why in bad.items()})
    label_of = {nid: lab for nid, lab in label_of.items() if lab in state.schedules}  # excluded: never asked
    if state.remaining_rounds <= 0:
        return state.finish()
    arrays = ArrayRecord(state.model.state_dict())
    bar = progress(range(state.start_round + 1, spec.rounds + 1), desc=spec.run_key, unit="round",
                   quiet=None if spec.progress else True)
    for t in bar:
        rec = ConfigRecord(state.public_config(t).to_record())
        ok, bad, booked = _exchange(grid, list(label_of), "train",
                            lambda _, a=arrays, c=rec: RecordDict({"arrays": a, "config": c}), round_timeout)
        replies = {label_of[nid]: dict(c["metrics"]) for nid, c in ok.items()}
        state.record_round(t, replies, {label_of[nid]: why for nid, why in bad.items()},
                           {label_of[nid]: e for nid, e in booked.items()})
        if ok:
            sds = [c["arrays"].to_torch_state_dict() for c in ok.values()]
            arrays = ArrayRecord(fedavg(sds, [int(c["metrics"]["num-examples"]) for c in ok.values()]))
        row = state.end_round(t, arrays.to_torch_state_dict())
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(acc=f"{row['accuracy']:.4f}")
    return state.finish()


def _floats(v) -> list[float]:
    if isinstance(v, str):
        return [float(x) for x in v.replace(";", ",").split(",") if x.strip()]
    if isinstance(v, (list, tuple)):
        return [float(x) for x in v]
    return [float(v)]


def spec_from_run_config(rc: dict) -> FederationSpec:
    """Build a :class:`FederationSpec` from Flower's run config (``[tool.flwr.app.config]``).

    Only public hyperparameters are read; ``num-clients`` is how many nodes the server waits for.
    The spec's budgets are placeholders (``ε = 1`` per node): on the deployment engine each node
    reports its own budget from its ``node_config``.
    """
    n = int(rc.get("num-clients", 3))
    transition = int(rc.get("transition", -1))
    return FederationSpec(
        method=str(rc.get("method", "ta")), epsilons=group_budgets([1.0], n), rhos=group_budgets([1.0], n),
        sigma=float(rc.get("sigma", FLWR_APP_CONFIG["sigma"])), max_grad_norm=float(rc.get("max-grad-norm", 1.0)),
        rounds=int(rc.get("num-server-rounds", 30)), local_steps=int(rc.get("local-steps", 4)),
        transition=None if transition < 0 else transition, lr=float(rc.get("lr", 2.0)),
        hidden=int(rc.get("hidden", 64)), dataset=str(rc.get("dataset", "adult")),
        csv_path=str(rc.get("csv-path", "")) or None, label_column=str(rc.get("label-column", "label")),
        model_factory=str(rc.get("model-factory", "")) or None,
        split_seed=int(rc.get("split-seed", 0)), val_fraction=float(rc.get("val-fraction", 0.1)),
        seed=int(rc.get("seed", 0)), min_expected_batch=float(rc.get("min-expected-batch", 20.0)),
        grad_sample_mode=str(rc.get("grad-sample-mode", "ghost")),
        out_dir=str(rc.get("out-dir", "runs/ta-dpfl/flwr")), run_key=str(rc.get("run-key", "run")),
        resume=bool(rc.get("resume", False)), progress=False,
    )


def make_server_app(specs: list[FederationSpec] | None = None, sink: dict | None = None) -> ServerApp:
    """A ``ServerApp`` that runs ``specs`` in order (or, when ``None``, the one spec described by the
    run config). Results (or the exception) are put into ``sink`` under ``"results"`` / ``"error"``."""
    app = ServerApp()

    @app.main()
    def _main(grid: Grid, context: Context) -> None:
        rc = dict(context.run_config)
        todo = specs if specs is not None else [spec_from_run_config(rc)]
        timeout = float(rc.get("round-timeout", 600.0))
        out = []
        try:
            for spec in todo:
                res = run_spec(grid, spec, round_timeout=timeout)
                log.warning("%s: final accuracy %.4f, eps spent %s of budgets %s", spec.run_key,
                            res["final_accuracy"], res["epsilon_spent"], res["epsilon_budget"])
                out.append(res)
        except BaseException as e:  # noqa: BLE001 - handed back to the caller of simulate()
            if sink is not None:
                sink["error"] = e
            raise
        finally:
            if sink is not None:
                sink["results"] = out

    return app


server_app = make_server_app()
