"""Frame rendering of the offline pair: the spurious attribute (a coloured border) and its per-image draw."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from .cifar import superclass

__all__ = ['COLOURS', 'TRAINED_COLOURS', 'CONTROL_PAIRS', 'render_frames', 'draw_colours']

log = logging.getLogger("iclr25.tie")


#: frame colours (RGB uint8); green and blue are trained, the others are controls never seen in training
COLOURS: dict[str, tuple[int, int, int]] = {
    "green": (0, 200, 0), "blue": (0, 0, 230), "red": (220, 0, 0), "yellow": (230, 230, 0),
    "purple": (150, 0, 150), "orange": (255, 140, 0), "white": (255, 255, 255), "black": (0, 0, 0),
}
TRAINED_COLOURS = ("green", "blue")
CONTROL_PAIRS = (("red", "yellow"), ("purple", "orange"), ("white", "black"))


def render_frames(images: np.ndarray, colours: Sequence[str] | np.ndarray, frame: int = 3) -> np.ndarray:
    """Draw a ``frame``-pixel border of the given colour on each image.

    Args:
        images: ``[N, H, W, 3]`` uint8.
        colours: ``N`` colour names from :data:`COLOURS` (or one name for all).
        frame: border width in pixels.

    Returns:
        A new ``[N, H, W, 3]`` uint8 array; only the border pixels differ from ``images``.

    Raises:
        ValueError: wrong shape/dtype, unknown colour.
    """
    x = np.asarray(images)
    if x.ndim != 4 or x.shape[-1] != 3 or x.dtype != np.uint8:
        raise ValueError(f"images: expected uint8 [N, H, W, 3], got {x.dtype} {x.shape}")
    if isinstance(colours, str):
        colours = [colours] * x.shape[0]
    names = list(colours)
    if len(names) != x.shape[0]:
        raise ValueError(f"colours: {len(names)} names for {x.shape[0]} images")
    unknown = sorted(set(names) - set(COLOURS))
    if unknown:
        raise ValueError(f"colours: unknown colour(s) {unknown}; known: {sorted(COLOURS)}")
    rgb = np.array([COLOURS[c] for c in names], dtype=np.uint8)[:, None, None, :]
    out = x.copy()
    f = frame
    out[:, :f] = rgb
    out[:, -f:] = rgb
    out[:, :, :f] = rgb
    out[:, :, -f:] = rgb
    return out


def draw_colours(y: np.ndarray, rho: float, rng: np.random.Generator) -> np.ndarray:
    """Frame colour per image: the superclass's colour (animal → green, vehicle → blue) with
    probability ``rho``, the other one otherwise. Returns ``[N]`` int64, 0 = green, 1 = blue."""
    sup = superclass(y)
    flip = rng.random(sup.size) >= rho
    return np.where(flip, 1 - sup, sup).astype(np.int64)
