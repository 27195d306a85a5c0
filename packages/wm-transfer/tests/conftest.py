import os

import pytest
import torch

# Small models on shared CPUs: one intra-op thread avoids OpenMP spinning (measured 25x slower with 2).
torch.set_num_threads(1)

# A relative ICLR25_DATA (e.g. ../shared/data) must survive the chdir below.
if os.environ.get("ICLR25_DATA"):
    os.environ["ICLR25_DATA"] = os.path.abspath(os.environ["ICLR25_DATA"])
MIRROR = os.path.join(os.environ.get("ICLR25_DATA", ""), "cifar10-subset", "cifar10_subset.npz")


@pytest.fixture(autouse=True)
def _cwd_in_tmp(tmp_path, monkeypatch):
    """Every test runs in its own tmp folder, so a command's default output (runs/wm-transfer/<command>,
    results/wm-transfer) never lands in the checkout, whichever folder pytest is started from."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def need_mirror():
    if not os.environ.get("ICLR25_DATA") or not os.path.isfile(MIRROR):
        pytest.skip(f"needs the mirror file cifar10-subset/cifar10_subset.npz under ICLR25_DATA (looked for {MIRROR})")
