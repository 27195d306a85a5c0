"""Your own data and model: a tabular CSV with a label column (``dataset="csv"``) and a model factory by
import path, in-process and through the Flower run config; the app folder for ``flwr run`` from an
installed package."""

import json
from pathlib import Path

import numpy as np
import pytest

from iclr25.ta_dpfl.config import FederationSpec
from iclr25.ta_dpfl.data import TabularDataError, load_federated

FACTORY = """import torch.nn as nn


def make(num_features, num_classes):
    return nn.Sequential(nn.Linear(num_features, 8), nn.Tanh(), nn.Linear(8, num_classes))


def not_a_module(num_features, num_classes):
    return 42
"""


def _csv(path, n=400, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    c = rng.choice(["a", "b"], size=n)
    y = np.where(x[:, 0] + (c == "a") > 0.5, "pos", "neg")
    path.write_text("f1,f2,cat,target\n" + "".join(f"{a:.3f},{b:.3f},{k},{t}\n" for (a, b), k, t in zip(x, c, y)))
    return x, c, y


def test_csv_loader_infers_columns_maps_labels_and_names_errors(tmp_path):
    p = tmp_path / "d.csv"
    x, c, y = _csv(p)
    d = load_federated("csv", 2, 0, str(p), 0.1, "target")
    assert d.num_classes == 2 and d.num_features == 4  # 2 numeric + one-hot of 2 categories
    assert sum(d.sizes) + len(d.y_val) + len(d.y_test) == len(y)
    # labels: sorted distinct values -> 0..C-1 ('neg' = 0, 'pos' = 1); class counts kept
    ys = np.concatenate([*(yy for _, yy in d.clients), d.y_val, d.y_test])
    assert np.bincount(ys).tolist() == [int((y == "neg").sum()), int((y == "pos").sum())]
    xtr = np.concatenate([xx for xx, _ in d.clients])
    assert np.allclose(xtr[:, :2].mean(0), 0, atol=1e-5) and set(np.unique(xtr[:, 2:])) == {0.0, 1.0}
    with pytest.raises(TabularDataError, match=r"label column 'label' not found; columns are \['f1', 'f2', 'cat'"):
        load_federated("csv", 2, 0, str(p), 0.1, "label")
    one = tmp_path / "one.csv"
    one.write_text("f1,target\n1,a\n2,a\n")
    with pytest.raises(TabularDataError, match="single value"):
        load_federated("csv", 1, 0, str(one), 0.0, "target")
    with pytest.raises(ValueError, match="needs csv_path"):
        FederationSpec(method="idp", epsilons=[1.0], rhos=[1.0], dataset="csv")


def test_user_csv_and_model_factory_run_inprocess(tmp_path, monkeypatch):
    from iclr25.ta_dpfl.federation import run_inprocess

    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "my_model.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    p = tmp_path / "d.csv"
    _csv(p, n=600)
    spec = FederationSpec(method="ta", epsilons=[2.0, 4.0], rhos=[0.5, 1.0], rounds=2, local_steps=2,
                          dataset="csv", csv_path=str(p), label_column="target", model_factory="my_model:make",
                          min_expected_batch=5.0, out_dir=str(tmp_path / "run"), progress=False)
    res = run_inprocess(spec)
    assert res["clients"] == ["0", "1"] and len(res["accuracy_per_round"]) == 2
    for e, b in zip(res["epsilon_spent"], res["epsilon_budget"]):
        assert 0.99 * b < e <= b + 1e-9
    import torch

    sd = torch.load(tmp_path / "run" / "checkpoints" / "round_002.pt", weights_only=True)["state_dict"]
    assert sorted(sd) == ["0.bias", "0.weight", "2.bias", "2.weight"] and tuple(sd["0.weight"].shape) == (8, 4)
    from iclr25.ta_dpfl.dp_sgd import build_model

    with pytest.raises(ValueError, match="returned int, not a torch nn.Module"):
        build_model("csv", 4, 2, factory="my_model:not_a_module")
    with pytest.raises(ValueError, match="cannot be loaded"):
        build_model("csv", 4, 2, factory="no_such_module_xyz:make")


def test_flower_run_config_and_node_config_carry_the_hooks():
    pytest.importorskip("flwr")
    from iclr25.ta_dpfl.client import NodeConfig
    from iclr25.ta_dpfl.flower_app import spec_from_run_config

    spec = spec_from_run_config({"dataset": "csv", "csv-path": "/data/u.csv", "label-column": "y",
                                 "model-factory": "m:f"})
    assert (spec.dataset, spec.csv_path, spec.label_column, spec.model_factory) == ("csv", "/data/u.csv", "y", "m:f")
    node = NodeConfig.from_mapping({"partition-id": 0, "num-partitions": 2, "epsilon": 1.0, "dataset": "csv",
                                    "csv-path": "/data/u.csv", "label-column": "y", "model-factory": "m:f"})
    assert (node.csv_path, node.label_column, node.model_factory) == ("/data/u.csv", "y", "m:f")
    assert NodeConfig.from_mapping(node.to_mapping()) == node


def test_flwr_app_folder_matches_the_package_app_config(tmp_path):
    """The folder `iclr25-ta-dpfl flwr-app` writes holds the same run config as this package's own
    pyproject.toml (so flwr run from an installed wheel behaves like flwr run on the checkout)."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    from iclr25.ta_dpfl.cli import main

    assert main(["flwr-app", "--out", str(tmp_path / "ta-dpfl-app")]) == 0
    app = tomllib.loads((tmp_path / "ta-dpfl-app" / "pyproject.toml").read_text())
    own = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert app["tool"]["flwr"]["app"]["config"] == own["tool"]["flwr"]["app"]["config"]
    assert app["tool"]["flwr"]["app"]["components"] == own["tool"]["flwr"]["app"]["components"]
    assert app["project"]["version"] == own["project"]["version"]
    assert main(["flwr-app", "--out", str(tmp_path / "bad_name")]) == 2
    json.dumps(app)  # plain TOML types only


def test_csv_with_non_finite_numbers_or_empty_labels_is_refused_before_training(tmp_path):
    """`inf`/`nan` parse as numbers: the column was standardised to NaN and the run crashed mid-training
    ("Out of range float values are not JSON compliant"); an empty label silently became a class ''.
    Both are now data errors naming the line and column."""
    rows = [f"{i},{i % 7},c{i % 2}" for i in range(300)]
    inf = tmp_path / "inf.csv"
    inf.write_text("a,b,label\n" + "\n".join(rows[:5] + ["5,inf,c1"] + rows[6:]) + "\n")
    with pytest.raises(TabularDataError, match=r"line 7, column 'b': value 'inf' is not a finite number"):
        load_federated("csv", 2, 0, str(inf), 0.1, "label")
    nan = tmp_path / "nan.csv"
    nan.write_text("a,b,label\n" + "\n".join(["0,nan,c0"] + rows[1:]) + "\n")
    with pytest.raises(TabularDataError, match=r"line 2, column 'b'"):
        load_federated("csv", 2, 0, str(nan), 0.1, "label")
    empty = tmp_path / "empty_label.csv"
    empty.write_text("a,b,label\n" + "\n".join(rows[:3] + ["3,3,"] + rows[4:]) + "\n")
    with pytest.raises(TabularDataError, match=r"'label' is empty on 1 row\(s\) \(line\(s\) 5\)"):
        load_federated("csv", 2, 0, str(empty), 0.1, "label")
