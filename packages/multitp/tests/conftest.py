from __future__ import annotations

import os
from pathlib import Path

import pytest

_DEFAULT = Path(__file__).resolve().parents[4] / "shared" / "data"


def _data_root() -> Path | None:
    for root in [*(p for p in os.environ.get("ICLR25_DATA", "").split(os.pathsep) if p), str(_DEFAULT)]:
        if (Path(root) / "multitp" / "human" / "country_amce.csv").is_file():
            return Path(root)
    return None


@pytest.fixture(scope="session")
def mtp_data() -> Path:
    """The mirrored multitp folder; skips (naming the file) when it is absent."""
    root = _data_root()
    if root is None:
        pytest.skip("mirrored data multitp/human/country_amce.csv not found under ICLR25_DATA")
    os.environ["ICLR25_DATA"] = str(root)
    return root / "multitp"
