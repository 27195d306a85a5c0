import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)


def _mirror() -> Path | None:
    for root in os.environ.get("ICLR25_DATA", "").split(os.pathsep):
        if root and (Path(root) / "mgvga" / "epfl").is_dir():
            return Path(root) / "mgvga"
    return None


@pytest.fixture
def mirror() -> Path:
    d = _mirror()
    if d is None:
        pytest.skip("needs the mirrored data $ICLR25_DATA/mgvga (e.g. export ICLR25_DATA=/path/to/data)")
    return d
