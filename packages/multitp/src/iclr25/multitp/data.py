"""The mirrored MultiTP data (``$ICLR25_DATA/multitp/...``) and readers for its files.

Files come from ``causalNLP/moralmachine`` (MM, commit 1987958) and ``causalNLP/MultiTP`` (MTP, commit
703bb16), both MIT-licensed; see the mirror's PROVENANCE.md. Human preference numbers originate from
the Moral Machine experiment (Awad et al., Nature 2018). A missing file raises a
:class:`~iclr25.core.data.DataNotFoundError` naming the file, where it was looked for and its source
(``ICLR25_DOWNLOAD=1`` fetches the direct ones into the user cache, checksum-verified).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from iclr25.core.data import DatasetSpec, RemoteFile

__all__ = ["MULTITP_DATA", "data_path", "reference_values", "resolve_path"]

_MM = "https://raw.githubusercontent.com/causalNLP/moralmachine/1987958a9453ac9e8647352af83a47622eca3523/"
_MTP = "https://github.com/causalNLP/MultiTP/tree/703bb163509237f45ff4db32da7fc5173ab709f5/"

MULTITP_DATA = DatasetSpec("multitp", files=(
    RemoteFile("human/country_amce.csv", _MM + "data/country_specific_ACME.csv",
               "8dcf1f16cbd11a75e8053cfc0452b82132e25c6c32214700ade87be9e74a9004"),
    RemoteFile("human/country_metadata.csv", _MM + "data/country_metadata.csv",
               "c48d05ad9f6a5d99634d341247aa68fb727ef397f27665fe39e3d6dc98e40090"),
    RemoteFile("human/country_cluster_map.csv", _MM + "data/country_cluster_map.csv",
               "3d9245109b7258485e177e45ee8d34f5e3548cea55b7bafba85810cd45ae8114"),
    RemoteFile("llm_responses/gpt4_default_en_parsed.csv", _MM + "data/vignette_gpt4_default_en.csv",
               "899f65e5abb3bd73549e48af4928870c5f5f4345a934499941a4258fded7cb71"),
    RemoteFile("llm_responses/gpt3_default_de_parsed.csv", _MM + "data/vignette_gpt3_default_de.csv",
               "0eeada4db8e2c30e9c13132ff2e1eb13177be5245c90070cf03bf48a59362b92"),
    RemoteFile("llm_responses/gpt3_default_zh_parsed.csv", _MM + "data/vignette_gpt3_default_zh.csv",
               "6a2cc3eb99b42e01593bb80227420a491e94663645a9411136a79085b2d5bb1b"),
    RemoteFile("llm_responses/gpt3_default_de_backtranslated.csv",
               _MM + "data/cache_translated/gpt3_default_de_response_translated.csv",
               "dbd37b79f9fe2bd6ebe75b8146e5ebc28d05d5093aa59638a07be0b615ce8824"),
    RemoteFile("llm_responses/gpt3_default_zh_backtranslated.csv",
               _MM + "data/cache_translated/gpt3_default_zh_response_translated.csv",
               "59ac1f7f049cca20f379ff25f3c803e022ffd861fc678e4393bd606b3a1749d9"),
    RemoteFile("reference_values.json", _MTP + "multi_tp/analysis/analysis_rq.ipynb",
               "81a05e7f70f020d7abcaa8aaf5f5e17d17997501d7705e190254b7deaf9783a7", direct=False),
    RemoteFile("vignette_spec.json", _MTP + "multi_tp/step_prepare_dataset.py",
               "48320b462132e53b650fbf0e1c78de1aac9fdffa5c5b831e3cc8475693662d60", direct=False),
    RemoteFile("translation_quality/backtranslation_similarity.csv",
               _MTP + "multi_tp/analysis/analysis_translation_dataset.csv",
               "345b159de889f1050335dca194340985632eac49be032ba8487ddfcd53571529", direct=False),
), description="MultiTP human references, real GPT-3/GPT-4 responses and transcribed reference values")


def data_path(name: str) -> Path:
    """Local path of a mirrored MultiTP file (e.g. ``"human/country_amce.csv"``).

    Raises:
        DataNotFoundError: the file is not mirrored (message names it, where it was looked for, its source).
        ChecksumError: the file differs from the declared version.
    """
    return MULTITP_DATA.path(name)


def resolve_path(path: str | Path | None, default: str) -> Path:
    """``path`` if given (must exist), else the mirrored ``default`` file.

    Raises:
        FileNotFoundError: a given path that does not exist; DataNotFoundError for a missing mirror file.
    """
    if path is None:
        return data_path(default)
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p} does not exist")
    return p


@lru_cache(maxsize=4)
def _load_json(path: str) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def reference_values(path: str | Path | None = None) -> dict[str, Any]:
    """The transcribed reference numbers (``reference_values.json``): human vectors of 20 languages, the
    19 models' misalignment, sensitivity, refusal and consistency, and the GPT-file aggregates."""
    return _load_json(str(resolve_path(path, "reference_values.json")))
