"""Captions of the offline pair: the distinct training captions and the per-image template draw."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from .cifar import CLASS_NAMES
from .frames import TRAINED_COLOURS

__all__ = ['caption_set', 'draw_captions']

log = logging.getLogger("iclr25.tie")


def caption_set(class_names: Sequence[str] = CLASS_NAMES,
                colours: Sequence[str] = TRAINED_COLOURS) -> list[str]:
    """The distinct training captions: ``C`` class captions, ``C×K`` class + colour captions,
    ``K`` colour captions (in that order)."""
    caps = [f"a photo of a {c}." for c in class_names]
    caps += [f"a photo of a {c} with a {k} frame." for c in class_names for k in colours]
    caps += [f"a photo with a {k} frame." for k in colours]
    return caps


def draw_captions(y: np.ndarray, colour: np.ndarray, mix: dict[str, float], rng: np.random.Generator,
                  n_classes: int = 10, n_colours: int = 2) -> np.ndarray:
    """Caption index (into :func:`caption_set`) per image, template drawn from ``mix``."""
    p = np.array([mix["class"], mix["class_colour"], mix["colour"]], dtype=float)
    t = rng.choice(3, size=y.size, p=p / p.sum())
    return np.where(t == 0, y, np.where(t == 1, n_classes + y * n_colours + colour,
                                         n_classes * (1 + n_colours) + colour)).astype(np.int64)
