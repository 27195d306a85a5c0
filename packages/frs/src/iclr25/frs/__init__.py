"""iclr25-frs: Fuzzed Randomized Smoothing (FRS, ICLR 2025) — certify a text classifier against
pre-training backdoors.

The pieces (each named after the paper's concept):

* :mod:`.distance` — Damerau–Levenshtein distance, trigger insertion;
* :mod:`.bmps` — biphased model parameter smoothing: noisy clipped fine-tuning (Eq. 4) and K
  top-H parameter copies (Eq. 5);
* :mod:`.mcts` — the MCTS fuzzer that finds the vulnerable area T(x') (Sec. 4.3);
* :mod:`.randomize` — fuzzed (targeted) and uniform text randomisation (Eq. 11);
* :mod:`.smoothing` — :class:`FRSClassifier`, the vote, and the five arms;
* :mod:`.bounds` / :mod:`.certification` — Clopper–Pearson bounds, the certified radius with
  abstentions, the empirical radius;
* :mod:`.metrics` — CA, PA, ASR, trigger hit rate;
* :mod:`.models` / :mod:`.hf` — the tiny encoder, any ``predict_proba`` callable, Hugging Face
  sequence classifiers and MiniLM + head;
* :mod:`.data` — SST-2 / AG News mirrors and users' TSV / CSV / JSONL / lists.

Imports are lazy (PEP 562) so that ``iclr25-frs --help`` does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

_LAZY = {
    "damerau_levenshtein": "distance",
    "insert_trigger": "distance",
    "trigger_tokens": "distance",
    "clopper_pearson_lower": "bounds",
    "clopper_pearson_upper": "bounds",
    "certified_radius": "bounds",
    "certified_edits": "bounds",
    "segment_radius_tokens": "bounds",
    "radius_ratio": "bounds",
    "check_num_votes": "bounds",
    "min_votes_one_dissent": "bounds",
    "min_votes_unanimous": "bounds",
    "FewVotesWarning": "bounds",
    "NoCertificatePossibleWarning": "bounds",
    "FuzzRates": "randomize",
    "fuzz_rates": "randomize",
    "targeted_randomize": "randomize",
    "uniform_randomize": "randomize",
    "MCTSFuzzer": "mcts",
    "SearchTrace": "mcts",
    "kl_divergence": "mcts",
    "BMPSConfig": "bmps",
    "ParameterCopies": "bmps",
    "bmps_finetune": "bmps",
    "sample_parameter_copies": "bmps",
    "train_classifier": "bmps",
    "ARMS": "smoothing",
    "FRSClassifier": "smoothing",
    "Vote": "smoothing",
    "make_arm": "smoothing",
    "Certificate": "certification",
    "certify": "certification",
    "summarize_certificates": "certification",
    "empirical_radius": "certification",
    "clean_accuracy": "metrics",
    "poisoned_accuracy": "metrics",
    "attack_success_rate": "metrics",
    "trigger_hit_rate": "metrics",
    "Vocab": "models",
    "TinyEncoder": "models",
    "TinyClassifier": "models",
    "TorchTextClassifier": "models",
    "CallableClassifier": "models",
    "check_proba": "models",
    "load_classifier": "loading",
    "HFClassifier": "hf",
    "MiniLMClassifier": "hf",
    "TextDataset": "data",
    "load_dataset": "data",
    "load_table": "data",
    "load_jsonl": "data",
    "from_list": "data",
    "tokenize": "data",
    "poison_dataset": "data",
    "triggered_set": "data",
    "evaluate_arm": "evaluate",
}

if TYPE_CHECKING:  # pragma: no cover
    from .bmps import BMPSConfig, ParameterCopies, bmps_finetune, sample_parameter_copies, train_classifier  # noqa: F401
    from .bounds import (  # noqa: F401
        FewVotesWarning,
        NoCertificatePossibleWarning,
        certified_edits,
        certified_radius,
        check_num_votes,
        clopper_pearson_lower,
        clopper_pearson_upper,
        min_votes_one_dissent,
        min_votes_unanimous,
        radius_ratio,
    )
    from .certification import Certificate, certify, empirical_radius, summarize_certificates  # noqa: F401
    from .data import (  # noqa: F401
        TextDataset,
        from_list,
        load_dataset,
        load_jsonl,
        load_table,
        poison_dataset,
        tokenize,
        triggered_set,
    )
    from .distance import damerau_levenshtein, insert_trigger, trigger_tokens  # noqa: F401
    from .evaluate import evaluate_arm  # noqa: F401
    from .hf import HFClassifier, MiniLMClassifier  # noqa: F401
    from .loading import load_classifier  # noqa: F401
    from .mcts import MCTSFuzzer, SearchTrace, kl_divergence  # noqa: F401
    from .metrics import attack_success_rate, clean_accuracy, poisoned_accuracy, trigger_hit_rate  # noqa: F401
    from .models import (  # noqa: F401
        CallableClassifier,
        TinyClassifier,
        TinyEncoder,
        TorchTextClassifier,
        Vocab,
        check_proba,
    )
    from .randomize import FuzzRates, fuzz_rates, targeted_randomize, uniform_randomize  # noqa: F401
    from .smoothing import ARMS, FRSClassifier, Vote, make_arm  # noqa: F401


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["__version__", *_LAZY]
