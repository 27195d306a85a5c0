"""Offline data: the Pang & Lee sentence-polarity movie-review snippets (mirrored, sha256-checked).

Used three ways (see the data set's PROVENANCE.md): pre-training corpus of the tiny reference LM,
labelled data for the TF-IDF sentiment reward, and source of prompts (first words of held-out
snippets). The split is a seeded, stratified 90/10 split.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from iclr25.core.data import DatasetSpec, RemoteFile

__all__ = ["RT_POLARITY", "PolarityData", "load_polarity", "read_prompts", "make_prompts"]

_SRC = "https://github.com/dennybritz/cnn-text-classification-tf/tree/18762b459e21d9c70e5c242f8d43fc4e6db37a0d/data/rt-polaritydata"

RT_POLARITY = DatasetSpec(
    "vbon",
    files=(
        RemoteFile("rt-polarity.pos", url=f"{_SRC}/rt-polarity.pos",
                   sha256="4134882974a28d0c7b5151256f0e33a6169984ee7372c279e673f1114f475d58", direct=False),
        RemoteFile("rt-polarity.neg", url=f"{_SRC}/rt-polarity.neg",
                   sha256="2d11cfbc790f1cd96d78339f41ce53ced1efa83cd22d37d6788fa3fe3d17e2fd", direct=False),
    ),
    description="Pang & Lee (2005) sentence polarity v1.0, 5,331 positive + 5,331 negative snippets",
)


@dataclass(frozen=True)
class PolarityData:
    """The seeded stratified split. Texts are lower-cased, space-tokenised snippets; labels 1 = positive."""

    train_texts: list[str]
    train_labels: list[int]
    test_texts: list[str]
    test_labels: list[int]
    sha: str


def _read_lines(path: Path) -> list[str]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            t = " ".join(line.split())
            if t:
                out.append(t)
    return out


def load_polarity(seed: int = 0, test_size: float = 0.1) -> PolarityData:
    """Load both files from the mirror (``ICLR25_DATA``) and split them 90/10, stratified by label.

    Raises:
        iclr25.core.data.DataNotFoundError: a file is missing (the message says where it was looked for).
    """
    from sklearn.model_selection import train_test_split

    pos = _read_lines(RT_POLARITY.path("rt-polarity.pos"))
    neg = _read_lines(RT_POLARITY.path("rt-polarity.neg"))
    texts = pos + neg
    labels = [1] * len(pos) + [0] * len(neg)
    tr_x, te_x, tr_y, te_y = train_test_split(texts, labels, test_size=test_size, random_state=seed,
                                              stratify=labels)
    sha = RT_POLARITY.file("rt-polarity.pos").sha256[:8] + RT_POLARITY.file("rt-polarity.neg").sha256[:8]
    return PolarityData(list(tr_x), list(tr_y), list(te_x), list(te_y), sha)


def make_prompts(texts: list[str], n: int, words: int = 3, offset: int = 0) -> list[str]:
    """The first ``words`` whitespace tokens of snippets, de-duplicated, in order, skipping the first
    ``offset`` distinct prompts. Raises ``ValueError`` when fewer than ``n`` are available."""
    seen: dict[str, None] = {}
    for t in texts:
        toks = t.split()
        if len(toks) <= words:
            continue
        seen.setdefault(" ".join(toks[:words]), None)
    out = list(seen)[offset:offset + n]
    if len(out) < n:
        raise ValueError(f"only {len(out)} distinct {words}-word prompts available, {n} requested")
    return out


def read_prompts(path: str | Path) -> list[str]:
    """Prompts from a file: ``.jsonl`` (objects with a ``"prompt"`` field) or plain text (one per line).

    Raises:
        ValueError: naming the line of a malformed record, a non-string or blank ``"prompt"``, or an
            empty prompt set.
    """
    import json

    p = Path(path)
    if p.suffix == ".json":
        raise ValueError(f"{p}: a .json prompts file is not read (it would be taken as text lines); write .jsonl "
                         "(one {\"prompt\": ...} object per line) or .txt (one prompt per line)")
    out: list[str] = []
    try:
        lines = [ln.removesuffix("\r") for ln in p.read_text(encoding="utf-8").split("\n")]
    except UnicodeDecodeError as e:
        raise ValueError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start}); save the prompts as UTF-8") from None
    for ln, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if p.suffix == ".jsonl":
            try:
                prompt = json.loads(line)["prompt"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f"{p}:{ln}: expected a JSON object with a 'prompt' field ({e})") from e
            if not isinstance(prompt, str):
                raise ValueError(f"{p}:{ln}: 'prompt' must be a string, got {type(prompt).__name__}")
            if not prompt.strip():
                raise ValueError(f"{p}:{ln}: empty 'prompt' (the policy needs at least one prompt token); "
                                 "remove the line")
            out.append(prompt)
        else:
            out.append(line)
    if not out:
        raise ValueError(f"{p}: the prompt set is empty")
    return out
