import os

import pytest
import torch

# Small models on shared CPUs: one intra-op thread avoids OpenMP spinning (measured 25x slower with 2).
torch.set_num_threads(1)

MIRROR = os.path.join(os.environ.get("ICLR25_DATA", ""), "cifar10-subset", "cifar10_subset.npz")


@pytest.fixture
def need_mirror():
    if not os.environ.get("ICLR25_DATA") or not os.path.isfile(MIRROR):
        pytest.skip(f"needs the mirror file cifar10-subset/cifar10_subset.npz under ICLR25_DATA (looked for {MIRROR})")
