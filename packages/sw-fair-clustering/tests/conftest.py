import os

import pytest


def _need(path: str) -> None:
    from iclr25.core.data import DataNotFoundError
    from iclr25.sw_fair_clustering.data import DATA

    try:
        DATA.path(path)
    except DataNotFoundError:
        pytest.skip(f"mirrored file sw-fair-clustering/{path} not found (set ICLR25_DATA to the data mirrors)")


@pytest.fixture(scope="session")
def bank_married():
    _need("bank.csv")
    from iclr25.sw_fair_clustering.data import load_dataset

    return load_dataset("bank", "married")


@pytest.fixture(scope="session")
def adult_sex():
    _need("adult_gender.csv")
    from iclr25.sw_fair_clustering.data import load_dataset

    return load_dataset("adult", "sex")


@pytest.fixture(autouse=True)
def _run_in_tmp_path(tmp_path, monkeypatch):
    """Every test runs with the current directory in its own tmp_path, so a command's default output
    folder (``runs/<slug>/<command>``, ``results/<slug>``) never lands in the checkout; a relative
    ``ICLR25_DATA`` is made absolute first."""
    data = os.environ.get("ICLR25_DATA")
    if data:
        monkeypatch.setenv("ICLR25_DATA", os.pathsep.join(os.path.abspath(x) for x in data.split(os.pathsep) if x))
    monkeypatch.chdir(tmp_path)
    yield


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    yield
