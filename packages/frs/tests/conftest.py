import os
from pathlib import Path

import pytest
import torch

# one intra-op thread: faster on small shared CPUs; results do not depend on it
torch.set_num_threads(1)


def _mirror(rel: str) -> Path:
    """Path of a mirrored data file under ICLR25_DATA/frs, or skip naming it."""
    for root in os.environ.get("ICLR25_DATA", "").split(os.pathsep):
        if root and (Path(root) / "frs" / rel).is_file():
            return Path(root) / "frs" / rel
    pytest.skip(f"mirror file frs/{rel} not found under ICLR25_DATA")


@pytest.fixture
def mirror():
    return _mirror


@pytest.fixture
def tiny_tsv(tmp_path):
    """A small SST-2-like TSV with header (positive/negative words), 240 rows."""
    import numpy as np

    rng = np.random.default_rng(0)
    pos, neg = ["good", "great", "fine", "lovely", "superb"], ["bad", "awful", "dull", "poor", "boring"]
    filler = ["the", "movie", "is", "a", "film", "story", "and", "it", "was", "very"]
    lines = ["sentence\tlabel"]
    for i in range(240):
        y = i % 2
        words = list(rng.choice(filler, size=6)) + list(rng.choice(pos if y else neg, size=2))
        rng.shuffle(words)
        lines.append(" ".join(words) + " \t" + str(y))
    p = tmp_path / "tiny.tsv"
    p.write_text("\n".join(lines) + "\n")
    return p
