"""Where a client's DP randomness comes from: the Poisson sample and the Gaussian noise.

The record-level guarantee of DP-SGD holds against the aggregator only if the aggregator cannot
recompute the noise it would otherwise subtract from an update. So by default every random draw a
client makes comes from the operating system's cryptographically secure generator
(:func:`os.urandom`, i.e. ``getrandom(2)``), fresh for every draw, never seeded, never stored and
never sent: :class:`SecureRandom`.

Gaussians are made from those uniform draws by the Box–Muller transform in float64, and, as in
Opacus' ``secure_mode``, each noise coordinate is the scaled sum of 4 Gaussians, which defeats the
floating-point attacks on naive Gaussian samplers (Mironov 2012; Jin et al. 2021, "Are we there yet?
Timing and floating-point attacks on DP-SGD", arXiv 2112.05307, Sec. 5.1 of Holohan & Braghin 2021,
arXiv 2107.10138).

:class:`SeededRandom` is the deterministic opt-in for simulations and tests (``--insecure-seed``):
anyone who knows the seed can replay the noise, so the guarantee is void against whoever holds the
run configuration. It is never the default, it logs a warning, and runs record it in ``result.json``.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os

import numpy as np
import torch

__all__ = ["RandomSource", "SecureRandom", "SeededRandom", "derive_insecure_seed", "poisson_indices"]

log = logging.getLogger("iclr25.ta_dpfl")

_TWO53 = float(2**53)


class RandomSource:
    """Interface of a client's randomness: uniforms for Poisson sampling, Gaussians for the noise."""

    #: ``True`` when the draws cannot be replayed by anyone else
    secure: bool = False
    #: short name recorded in results (``"secure"`` / ``"insecure-seed"``)
    kind: str = "?"

    def uniform(self, n: int) -> np.ndarray:
        """``n`` i.i.d. uniforms in ``(0, 1]``, ``float64 (n,)``."""
        raise NotImplementedError

    def normal(self, std: float, reference: torch.Tensor) -> torch.Tensor:
        """Gaussian noise ``N(0, std²)`` of ``reference``'s shape, dtype and device."""
        raise NotImplementedError


class SecureRandom(RandomSource):
    """Draws from the OS CSPRNG (:func:`os.urandom`); nothing to seed, store or send.

    Uniforms: 53 random bits per draw, ``(k + 1) / 2**53`` for ``k`` uniform on ``[0, 2**53)``.
    Gaussians: Box–Muller on pairs of uniforms (float64), each output coordinate the sum of 4
    independent Gaussians divided by 2 (Opacus ``secure_mode``; same variance ``std²``).
    """

    secure = True
    kind = "secure"

    def uniform(self, n: int) -> np.ndarray:
        n = int(n)
        if n <= 0:
            return np.zeros(0)
        k = np.frombuffer(os.urandom(8 * n), dtype=np.uint64) >> np.uint64(11)
        return (k.astype(np.float64) + 1.0) / _TWO53

    def _std_normal(self, n: int) -> np.ndarray:
        m = (n + 1) // 2
        u1, u2 = self.uniform(m), self.uniform(m)
        r = np.sqrt(-2.0 * np.log(u1))
        z = np.concatenate([r * np.cos(2 * math.pi * u2), r * np.sin(2 * math.pi * u2)])
        return z[:n]

    def normal(self, std: float, reference: torch.Tensor) -> torch.Tensor:
        n = reference.numel()
        if std == 0 or n == 0:
            return torch.zeros_like(reference)
        z = self._std_normal(4 * n).reshape(4, n).sum(0) / 2.0  # variance 1, as Opacus' secure_mode
        return torch.from_numpy(z * float(std)).to(device=reference.device, dtype=reference.dtype).view_as(reference)


class SeededRandom(RandomSource):
    """Deterministic draws from a ``torch.Generator`` seeded with ``seed`` (opt-in, replayable).

    Args:
        seed: 0 <= seed < 2**63.
        device: device of the generator (the noise is drawn there).
    """

    secure = False
    kind = "insecure-seed"

    def __init__(self, seed: int, device: str | torch.device = "cpu"):
        self.generator = torch.Generator(device=device).manual_seed(int(seed))
        self.device = torch.device(device)

    def uniform(self, n: int) -> np.ndarray:
        if n <= 0:
            return np.zeros(0)
        return torch.rand(int(n), generator=self.generator, dtype=torch.float64, device=self.device).cpu().numpy()

    def normal(self, std: float, reference: torch.Tensor) -> torch.Tensor:
        if std == 0:
            return torch.zeros_like(reference)
        z = torch.normal(0.0, float(std), size=tuple(reference.shape), generator=self.generator,
                         device=self.device, dtype=torch.float32 if reference.dtype == torch.float32 else torch.float64)
        return z.to(device=reference.device, dtype=reference.dtype)


def derive_insecure_seed(*parts) -> int:
    """A 63-bit seed from public parts (seed, run key, partition id, round): the insecure opt-in.
    Everyone who knows the parts can recompute it — that is what makes it insecure."""
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:8], "little") >> 1


def poisson_indices(source: RandomSource, num_samples: int, sample_rate: float) -> np.ndarray:
    """Poisson subsampling: every index of ``range(num_samples)`` independently with probability
    ``sample_rate`` (the sampling DP-SGD's RDP analysis assumes). Returns sorted ``int64`` indices
    (possibly empty)."""
    if not (0.0 <= sample_rate <= 1.0):
        raise ValueError(f"sample_rate must lie in [0, 1], got {sample_rate}")
    return np.flatnonzero(source.uniform(num_samples) < sample_rate).astype(np.int64)
