"""TIE and TIE* — test-time translation of image embeddings (numpy only).

The five steps of the method as the official notebooks implement them (spec "Algorithm"):

1. :func:`spurious_vectors` — ``s_a = φ_T(prompt_a) / ‖·‖`` (one unit row per attribute value);
2. :func:`infer_spurious_labels` — TIE* only: ``â(x) = argmax_a cos(φ_I(x), s_a)``;
3. :func:`estimate_scales` — ``λ_a = mean_{x: a(x)=a} ⟨h(x), s_a⟩`` on an unlabeled pool of images,
   ``h = φ_I(x)/‖φ_I(x)‖``;
4. :func:`translate` — ``h'(x) = h(x) − λ_{a(x)} s_{a(x)}``;
5. :func:`zero_shot_predict` — ``ŷ = argmax_y cos(h', φ_T(t_y))``.

:class:`TIE` bundles them (``mode="true"``: TIE with the true attribute labels; ``"inferred"``: TIE*).
:func:`project_out` is the RoboShot-style projection baseline and :func:`group_metrics` the
per-group evaluation (worst-group and average accuracy).

Attribute labels passed to these functions are *indices* into the rows of the spurious text
embeddings (``0 .. A-1``); ``-1`` marks a sample whose attribute value has no prompt (FMoW's
"Other"), which is left untranslated. :mod:`iclr25.tie.embeddings` maps users' attribute values to
these indices through an explicit ``{attribute_value: prompt}`` mapping.

Arrays may be float32 or float64; computations keep the input's floating dtype (float64 for
integer input). Embeddings need not be normalised on input.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

__all__ = [
    "ZeroVectorWarning",
    "check_embeddings",
    "normalize_rows",
    "spurious_vectors",
    "infer_spurious_labels",
    "estimate_scales",
    "translate",
    "zero_shot_scores",
    "zero_shot_predict",
    "projection_directions",
    "project_out",
    "group_metrics",
    "TIE",
]


class ZeroVectorWarning(UserWarning):
    """Some embeddings are (numerically) zero: their cosine with every prompt ties, class 0 is predicted."""


def _float(x: Any, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiu" and arr.dtype != bool:
        raise ValueError(f"{name}: expected a numeric array, got dtype {arr.dtype}")
    if arr.dtype.kind != "f":
        arr = arr.astype(np.float64)
    return arr


def check_embeddings(x: Any, name: str, *, dim: int | None = None, allow_zero: bool = False) -> np.ndarray:
    """Validate a 2-D embedding matrix and return it as a floating array.

    Args:
        x: ``[N, D]`` numeric array.
        name: the field name used in error messages (e.g. ``"image_emb"``).
        dim: expected ``D`` (e.g. the text embedding width), or ``None``.
        allow_zero: accept rows of zero norm.

    Raises:
        ValueError: not 2-D, empty, NaN/inf rows or zero-norm rows (the first indices are named),
            or a width different from ``dim``.
    """
    return _checked(x, name, dim=dim, allow_zero=allow_zero)[0]


def _checked(x: Any, name: str, *, dim: int | None = None, allow_zero: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """:func:`check_embeddings` plus the row norms ``[N]`` (one pass over the data, no copy)."""
    arr = _float(x, name)
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D array [N, D], got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name}: no rows (shape {arr.shape})")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"{name}: embedding dimension {arr.shape[1]} differs from {dim}")
    n2 = np.einsum("ij,ij->i", arr, arr)
    suspect = ~np.isfinite(n2)                       # NaN/inf rows, or finite rows whose square overflowed
    if suspect.any():
        rows = np.flatnonzero(suspect)
        bad = rows[~np.isfinite(arr[rows]).all(axis=1)]
        if bad.size:
            raise ValueError(f"{name}: {bad.size} row(s) contain NaN/inf, first indices {bad[:5].tolist()}")
    norms = _robust_norms(arr, n2)
    if not np.isfinite(norms).all():
        idx = np.flatnonzero(~np.isfinite(norms))
        raise ValueError(f"{name}: {idx.size} row(s) have a norm that overflows float64, first indices "
                         f"{idx[:5].tolist()}; rescale the embeddings")
    if not allow_zero:
        zero = norms == 0
        if zero.any():
            idx = np.flatnonzero(zero)
            raise ValueError(f"{name}: {idx.size} row(s) have zero norm, first indices {idx[:5].tolist()}")
    return arr, norms


def _check_pair(img: np.ndarray, img_name: str, txt: np.ndarray, txt_name: str) -> None:
    if img.shape[1] != txt.shape[1]:
        raise ValueError(f"image and text embedding dimensions differ: {img_name} has shape {img.shape}, "
                         f"{txt_name} has shape {txt.shape}")


def _robust_norms(x: np.ndarray, n2: np.ndarray | None = None) -> np.ndarray:
    """Row norms ``[N]`` (``x``'s dtype) from the squared norms ``n2``; rows whose square overflowed
    or underflowed (entries beyond ~1e154 / below ~1e-154 in float64, ~1e19 / ~1e-19 in float32)
    are recomputed in float64 after scaling by their largest entry (``inf`` only if the norm itself
    overflows float64)."""
    if n2 is None:
        n2 = np.einsum("ij,ij->i", x, x)
    tiny = np.finfo(x.dtype).tiny if x.dtype.kind == "f" else np.finfo(np.float64).tiny
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.sqrt(n2)
        rows = np.flatnonzero(~np.isfinite(n2) | (n2 < tiny / np.finfo(x.dtype).eps))
        if rows.size:
            r = x[rows].astype(np.float64)
            big = np.abs(r).max(axis=1, keepdims=True)
            ok = (big[:, 0] > 0) & np.isfinite(big[:, 0])
            exact = np.zeros(rows.size)
            exact[ok] = big[ok, 0] * np.sqrt(np.einsum("ij,ij->i", r[ok] / big[ok], r[ok] / big[ok]))
            exact[~np.isfinite(big[:, 0])] = np.inf
            norms = norms.astype(np.float64)
            norms[rows] = exact
    return norms


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """``x / ‖x‖`` row-wise (``[N, D]`` → ``[N, D]``, same dtype); zero rows stay zero. Rows too
    large or too small for squaring in ``x``'s dtype are normalised correctly (in float64)."""
    n = _robust_norms(x)
    if n.dtype == x.dtype and np.isfinite(n).all() and (n.min(initial=1.0) >= np.finfo(x.dtype).tiny or not n.size):
        return x / np.where(n > 0, n, 1)[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        return (x.astype(np.float64) / np.where(n > 0, n, 1)[:, None]).astype(x.dtype)


def _labels(a: Any, n: int, name: str, n_values: int, *, allow_untranslated: bool = False) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name}: expected {n} labels (one per embedding), got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"{name}: expected integer attribute indices, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    lo = -1 if allow_untranslated else 0
    bad = (arr < lo) | (arr >= n_values)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        hint = "" if allow_untranslated else " (-1, untranslated, is only allowed with untranslated='keep')"
        raise ValueError(f"{name}: index {arr[i]} at position {i} is outside 0..{n_values - 1}{hint}")
    return arr


def spurious_vectors(text_emb_spurious: Any) -> np.ndarray:
    """Step 1: unit spurious vectors ``s_a = φ_T(prompt_a) / ‖φ_T(prompt_a)‖``.

    Args:
        text_emb_spurious: ``[A, D]`` float text embeddings of the attribute prompts, row ``a`` for
            attribute index ``a``.

    Returns:
        ``[A, D]`` rows of unit L2 norm (same floating dtype).

    Raises:
        ValueError: not 2-D, NaN/inf or zero-norm rows.
    """
    return normalize_rows(check_embeddings(text_emb_spurious, "text_emb_spurious"))


def infer_spurious_labels(image_emb: Any, S: Any) -> np.ndarray:
    """Step 2 (TIE*): zero-shot attribute labels ``â(x) = argmax_a cos(φ_I(x), s_a)``.

    Args:
        image_emb: ``[N, D]`` image embeddings (any positive scale per row).
        S: ``[A, D]`` spurious vectors (normalised here).

    Returns:
        ``[N]`` int64 attribute indices in ``0 .. A-1``.

    Raises:
        ValueError: bad shapes, NaN/inf or zero-norm rows, dimension mismatch.
    """
    x = check_embeddings(image_emb, "image_emb")
    s = spurious_vectors(S)
    _check_pair(x, "image_emb", s, "text_emb_spurious")
    return np.argmax(x @ s.T.astype(x.dtype, copy=False), axis=1).astype(np.int64)


def estimate_scales(pool_emb: Any, pool_a: Any, S: Any, *,
                    empty_group: Literal["error", "zero"] = "error",
                    attribute_values: Sequence[Any] | None = None) -> np.ndarray:
    """Step 3: translation scales ``λ_a = mean_{x in pool: a(x)=a} ⟨h(x), s_a⟩``.

    The pool is unlabeled with respect to the class (the official code uses the training split's
    images; TIE uses their true attribute labels, TIE* the inferred ones).

    Args:
        pool_emb: ``[M, D]`` image embeddings of the pool (normalised here).
        pool_a: ``[M]`` attribute indices in ``0 .. A-1`` (``-1``: no prompt, ignored).
        S: ``[A, D]`` spurious text embeddings (normalised here).
        empty_group: ``"error"`` (default) raises when an attribute value has no pool image;
            ``"zero"`` sets its λ to 0 (those test images are then not translated).
        attribute_values: names of the attribute indices, used in error messages.

    Returns:
        ``[A]`` float64 scales.

    Raises:
        ValueError: an attribute index with no pool image (the index is named; ``empty_group='zero'``
            opts in), bad shapes or values, NaN/inf or zero-norm rows.
    """
    x, nx = _checked(pool_emb, "pool_emb")
    s = spurious_vectors(S)
    _check_pair(x, "pool_emb", s, "text_emb_spurious")
    a = _labels(pool_a, x.shape[0], "pool_a", s.shape[0], allow_untranslated=True)
    if empty_group not in ("error", "zero"):
        raise ValueError(f"empty_group must be 'error' or 'zero', got {empty_group!r}")
    xs = x @ s.T.astype(x.dtype, copy=False)                                      # [M, A]
    return _scales(xs, nx, a, empty_group, attribute_values)


def _scales(xs: np.ndarray, nx: np.ndarray, a: np.ndarray, empty_group: str,
            attribute_values: Sequence[Any] | None, *, inferred: bool = False) -> np.ndarray:
    """λ from the pool's products ``xs = x @ S.T`` ``[M, A]``, row norms ``nx`` and labels ``a``."""
    A = xs.shape[1]
    keep = a >= 0
    proj = np.take_along_axis(xs, np.maximum(a, 0)[:, None], axis=1)[:, 0].astype(np.float64) / nx  # <h, s_a(x)>
    proj, a = proj[keep], a[keep]
    counts = np.bincount(a, minlength=A)
    sums = np.bincount(a, weights=proj, minlength=A)
    empty = np.flatnonzero(counts == 0)
    if empty.size and empty_group == "error":
        what = (f"attribute value(s) {[attribute_values[i] for i in empty]}" if attribute_values is not None
                else f"attribute index {empty.tolist()}")
        how = (" inferred (TIE*: â = argmax_a cos(h, s_a) picked no pool image for it; are the attribute prompts "
               "distinguishable?)" if inferred else "")
        raise ValueError(f"pool: no image with {what}{how}; λ cannot be estimated "
                         "(give a pool that contains every attribute value, or opt in with empty_group='zero' "
                         "/ --empty-group zero to leave those images untranslated)")
    return np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)


def translate(image_emb: Any, a: Any, S: Any, lam: Any) -> np.ndarray:
    """Step 4: ``h'(x) = h(x) − λ_{a(x)} s_{a(x)}`` with ``h = φ_I(x)/‖φ_I(x)‖``.

    Args:
        image_emb: ``[N, D]`` image embeddings (normalised here).
        a: ``[N]`` attribute indices (true for TIE, inferred for TIE*); ``-1`` leaves a row
            untranslated (attribute value without a prompt).
        S: ``[A, D]`` spurious text embeddings (normalised here).
        lam: ``[A]`` scales from :func:`estimate_scales` (finite).

    Returns:
        ``[N, D]`` translated embeddings (not re-normalised; the prediction uses cosines).

    Raises:
        ValueError: bad shapes/values, non-finite λ.
    """
    x = normalize_rows(check_embeddings(image_emb, "image_emb"))
    s = spurious_vectors(S).astype(x.dtype, copy=False)
    _check_pair(x, "image_emb", s, "text_emb_spurious")
    lam = _lam(lam, s.shape[0])
    idx = _labels(a, x.shape[0], "a", s.shape[0], allow_untranslated=True)
    shift = np.vstack([lam[:, None].astype(x.dtype) * s, np.zeros((1, s.shape[1]), x.dtype)])
    return x - shift[idx]          # index -1 picks the zero row


def _lam(lam: Any, A: int) -> np.ndarray:
    arr = np.asarray(lam, dtype=np.float64)
    if arr.shape != (A,):
        raise ValueError(f"lam: expected shape ({A},) (one scale per attribute), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"lam: non-finite scale(s) {arr.tolist()}")
    return arr


def zero_shot_scores(image_emb: Any, text_emb_class: Any) -> np.ndarray:
    """Cosine similarities ``cos(h, t_y)``: ``[N, D] × [C, D] → [N, C]`` (zero rows give 0).

    Raises:
        ValueError: bad shapes, NaN/inf, zero-norm class rows, dimension mismatch, fewer than 2 classes.
    """
    x, n = _checked(image_emb, "image_emb", allow_zero=True)
    return _scores(x, n, text_emb_class)


def _scores(x: np.ndarray, n: np.ndarray, text_emb_class: Any) -> np.ndarray:
    t = _class_text(text_emb_class)
    _check_pair(x, "image_emb", t, "text_emb_class")
    sc = x @ t.T.astype(x.dtype, copy=False)
    sc /= np.where(n > 0, n, 1).astype(x.dtype)[:, None]
    return sc


def _class_text(text_emb_class: Any) -> np.ndarray:
    t = check_embeddings(text_emb_class, "text_emb_class")
    if t.shape[0] < 2:
        raise ValueError(f"text_emb_class: zero-shot classification needs at least 2 classes, got {t.shape[0]}")
    return normalize_rows(t)


def _zero_tol(dtype: np.dtype) -> float:
    """Norm below which a (unit-scale) translated embedding counts as the zero vector: 1e-3 in
    float32, 1e-6 in float64 (a few orders above the rounding error of ``h − λ s``)."""
    return 1e-3 if np.dtype(dtype).itemsize <= 4 else 1e-6


def _argmax_warn(scores: np.ndarray, zero: np.ndarray) -> np.ndarray:
    pred = np.argmax(scores, axis=1).astype(np.int64)
    if zero.any():
        pred[zero] = 0
        idx = np.flatnonzero(zero)
        warnings.warn(f"{idx.size} embedding(s) are zero vectors (first indices {idx[:5].tolist()}): their "
                      "cosine with every class prompt ties; class 0 is predicted", ZeroVectorWarning, stacklevel=3)
    return pred


def zero_shot_predict(image_emb: Any, text_emb_class: Any) -> np.ndarray:
    """Step 5 / the zero-shot baseline: ``ŷ = argmax_y cos(h, t_y)``.

    Args:
        image_emb: ``[N, D]`` (translated or raw) image embeddings.
        text_emb_class: ``[C, D]`` class-prompt embeddings, ``C >= 2``.

    Returns:
        ``[N]`` int64 class indices. A zero row (e.g. an image equal to ``λ_a s_a`` after
        translation) ties on every class: class 0 is predicted and a :class:`ZeroVectorWarning` is
        issued.

    Raises:
        ValueError: see :func:`zero_shot_scores`.
    """
    x, n = _checked(image_emb, "image_emb", allow_zero=True)
    zero = n <= _zero_tol(x.dtype) * max(1.0, float(n.max(initial=0.0)))
    return _argmax_warn(_scores(x, n, text_emb_class), zero)


def projection_directions(S: Any) -> np.ndarray:
    """Orthonormal spurious directions rejected by :func:`project_out`: ``[K, D]``.

    For two attribute values this is ``normalize(s_1 − s_0)`` (RoboShot-style rejection of the
    spurious "insight"); for ``A > 2`` the orthonormal basis (QR) of ``s_a − s_0``, ``a = 1..A-1``
    ([design] generalisation).
    """
    s = spurious_vectors(S).astype(np.float64)
    if s.shape[0] < 2:
        raise ValueError("project_out needs at least 2 spurious prompts (a difference direction)")
    diffs = (s[1:] - s[0]).T                                  # [D, A-1]
    q, r = np.linalg.qr(diffs)
    keep = np.abs(np.diag(r)) > 1e-10
    if not keep.any():
        raise ValueError("text_emb_spurious: the spurious prompts are identical; no direction to project out")
    return q[:, keep].T


def project_out(image_emb: Any, S: Any) -> np.ndarray:
    """Projection baseline (RoboShot-style): ``h − Σ_k ⟨h, v_k⟩ v_k`` with ``h`` normalised and
    ``v`` = :func:`projection_directions` (``normalize(s_1 − s_0)`` for two values).

    Args:
        image_emb: ``[N, D]``.
        S: ``[A, D]`` spurious text embeddings.

    Returns:
        ``[N, D]`` projected embeddings (same dtype).
    """
    x = normalize_rows(check_embeddings(image_emb, "image_emb"))
    v = projection_directions(S).astype(x.dtype)
    _check_pair(x, "image_emb", v, "text_emb_spurious")
    return x - (x @ v.T) @ v


def group_metrics(y_pred: Any, y: Any, a: Any, *, classes: Sequence[Any] | None = None,
                  attributes: Sequence[Any] | None = None) -> dict[str, Any]:
    """Per-group accuracy, worst-group accuracy (WGA) and average accuracy.

    Group = ``(y, a)``; WGA = min over non-empty groups; average = overall accuracy (weighted by the
    group sizes, as ``accuracy_score`` in the official code). Groups of the grid ``classes ×
    attributes`` with no test sample are listed under ``"empty_groups"`` and left out of WGA
    (never NaN).

    Args:
        y_pred, y: ``[N]`` predicted and true labels.
        a: ``[N]`` attribute values (any hashable values; not necessarily indices).
        classes, attributes: the full grid (default: the values that occur).

    Returns:
        ``{"worst_group": float, "worst_group_key": (y, a), "average": float, "n": int,
        "per_group": {(y, a): acc}, "sizes": {(y, a): n}, "correct": {(y, a): k},
        "empty_groups": [(y, a), ...]}``.

    Raises:
        ValueError: lengths differ, or no sample.
    """
    yp, yt, aa = np.asarray(y_pred), np.asarray(y), np.asarray(a)
    if not (yp.ndim == yt.ndim == aa.ndim == 1) or not (yp.shape == yt.shape == aa.shape):
        raise ValueError(f"group_metrics: y_pred {yp.shape}, y {yt.shape} and a {aa.shape} must be 1-D of equal length")
    if yp.size == 0:
        raise ValueError("group_metrics: no samples")
    classes = list(np.unique(yt)) if classes is None else list(classes)
    attributes = list(np.unique(aa)) if attributes is None else list(attributes)
    ok = yp == yt
    per, sizes, correct, empty = {}, {}, {}, []
    for c in classes:
        mc = yt == c
        for v in attributes:
            m = mc & (aa == v)
            key = (_py(c), _py(v))
            n = int(m.sum())
            sizes[key] = n
            if n == 0:
                empty.append(key)
                continue
            correct[key] = int(ok[m].sum())
            per[key] = correct[key] / n
    if not per:
        raise ValueError("group_metrics: every group is empty")
    worst = min(per, key=per.get)
    return {"worst_group": per[worst], "worst_group_key": worst, "average": float(ok.mean()), "n": int(yp.size),
            "per_group": per, "sizes": sizes, "correct": correct, "empty_groups": empty}


def _py(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


class TIE:
    """TIE (``mode="true"``) / TIE* (``mode="inferred"``) on precomputed embeddings.

    Example::

        tie = TIE(text_emb_spurious, mode="inferred").fit(pool_emb)
        y_hat = tie.predict(test_emb, text_emb_class)

    Args:
        text_emb_spurious: ``[A, D]`` attribute-prompt embeddings (row = attribute index).
        mode: ``"true"`` uses given attribute labels (TIE); ``"inferred"`` infers them zero-shot
            with :func:`infer_spurious_labels` on the pool and on the test set (TIE*).
        empty_group: see :func:`estimate_scales`.
        attribute_values: names of the attribute indices (error messages only).

    Attributes (after ``fit``):
        S_: ``[A, D]`` unit spurious vectors; lam_: ``[A]`` scales λ_a.
    """

    def __init__(self, text_emb_spurious: Any, mode: Literal["true", "inferred"] = "true", *,
                 empty_group: Literal["error", "zero"] = "error",
                 attribute_values: Sequence[Any] | None = None) -> None:
        if mode not in ("true", "inferred"):
            raise ValueError(f"mode must be 'true' (TIE) or 'inferred' (TIE*), got {mode!r}")
        self.mode = mode
        self.empty_group = empty_group
        self.S_ = spurious_vectors(text_emb_spurious)
        self.attribute_values = None if attribute_values is None else list(attribute_values)
        self.lam_: np.ndarray | None = None

    def _attr(self, emb: np.ndarray, a: Any, name: str) -> np.ndarray:
        if self.mode == "inferred":          # emb is already checked: one [N, A] matmul
            return np.argmax(emb @ self.S_.T.astype(emb.dtype, copy=False), axis=1).astype(np.int64)
        if a is None:
            raise ValueError(f"mode='true' (TIE) needs the attribute labels {name}; give them, or use "
                             "mode='inferred' (TIE*, --mode inferred) to infer them zero-shot")
        return _labels(a, emb.shape[0], name, self.S_.shape[0], allow_untranslated=True)

    def fit(self, pool_emb: Any, pool_a: Any = None) -> TIE:
        """Estimate λ on the pool (``[M, D]``; ``pool_a [M]`` needed for ``mode='true'``)."""
        if self.empty_group not in ("error", "zero"):
            raise ValueError(f"empty_group must be 'error' or 'zero', got {self.empty_group!r}")
        x, nx = _checked(pool_emb, "pool_emb")
        _check_pair(x, "pool_emb", self.S_, "text_emb_spurious")
        xs = x @ self.S_.T.astype(x.dtype, copy=False)                    # [M, A], shared by â and λ
        if self.mode == "inferred":
            a = np.argmax(xs, axis=1).astype(np.int64)
        else:
            a = self._attr(x, pool_a, "pool_a")
        self.lam_ = _scales(xs, nx, a, self.empty_group, self.attribute_values, inferred=self.mode == "inferred")
        return self

    def attributes(self, emb: Any, a: Any = None) -> np.ndarray:
        """The attribute indices used to translate ``emb``: ``a`` (TIE) or inferred (TIE*)."""
        x = check_embeddings(emb, "image_emb")
        return self._attr(x, a, "a")

    def transform(self, emb: Any, a: Any = None) -> np.ndarray:
        """Translated embeddings ``[N, D]`` (:func:`translate`)."""
        if self.lam_ is None:
            raise ValueError("TIE: call fit(pool_emb, pool_a) before transform/predict")
        x = check_embeddings(emb, "image_emb")
        return translate(x, self._attr(x, a, "a"), self.S_, self.lam_)

    def predict(self, test_emb: Any, text_emb_class: Any, test_a: Any = None) -> np.ndarray:
        """Class predictions ``[N]`` int64 of the translated test embeddings.

        Computed without materialising ``h'``: ``⟨h', t_y⟩ = ⟨h, t_y⟩ − λ_a ⟨s_a, t_y⟩`` (the
        common factor ``1/‖h'‖`` does not change the argmax); rows whose ``‖h'‖`` is numerically
        zero predict class 0 with a :class:`ZeroVectorWarning`, as :func:`zero_shot_predict` does.
        Equal to ``zero_shot_predict(self.transform(test_emb, test_a), text_emb_class)``.
        """
        if self.lam_ is None:
            raise ValueError("TIE: call fit(pool_emb, pool_a) before transform/predict")
        x, nx = _checked(test_emb, "image_emb")
        t = _class_text(text_emb_class).astype(x.dtype, copy=False)
        _check_pair(x, "image_emb", t, "text_emb_class")
        _check_pair(x, "image_emb", self.S_, "text_emb_spurious")
        s = self.S_.astype(x.dtype, copy=False)
        inv = (1.0 / nx).astype(x.dtype)
        C = t.shape[0]
        both = x @ np.vstack([t, s]).T                # one [N, C+A] product (a skinny [N, A] one is as slow)
        scores, xs = both[:, :C], both[:, C:]
        if self.mode == "inferred":
            a = np.argmax(xs, axis=1)                                      # â, from the same product
        else:
            a = self._attr(x, test_a, "test_a")
        lam = np.append(self.lam_, 0.0).astype(x.dtype)[a]               # a = -1 -> 0
        st = np.vstack([s @ t.T, np.zeros((1, C), x.dtype)])              # [A+1, C]: <s_a, t_y>
        scores *= inv[:, None]
        scores -= lam[:, None] * st[a]                                    # <h - λ_a s_a, t_y>
        hs = np.where(a >= 0, np.take_along_axis(xs, np.maximum(a, 0)[:, None], axis=1)[:, 0] * inv, 0)
        norm2 = 1.0 - 2.0 * lam * hs + lam * lam                          # ‖h − λ s‖² with ‖h‖ = ‖s‖ = 1
        zero = norm2 <= _zero_tol(x.dtype) ** 2
        return _argmax_warn(scores, zero)
