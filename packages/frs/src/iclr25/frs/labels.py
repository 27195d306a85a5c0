"""Label alignment of an evaluation file with a model's class names (``evaluate`` / ``certify``).

A test file's labels are mapped by *name* onto the model's classes (saved at training time); an unknown
label, an out-of-range class index, or ``--labels`` contradicting the model's order is a one-line error,
never a silent remap.
"""

from __future__ import annotations

__all__ = ["align_labels"]


def align_labels(ds, model, *, declared: bool, source: str = "the data"):
    """Map an evaluation file's labels with the model's class names (saved at training time): a test file
    holding only some classes (e.g. only "pos") must not be renumbered from 0. Declared ``--labels`` and
    non-negative integer class indices are kept as they are.

    Raises:
        ValueError: a label that is not one of the model's class names (it would otherwise be mapped in
            sorted order, silently); the message names the unknown labels and the fix.
    """
    names = [str(x) for x in getattr(model, "label_names", None) or []]
    if declared and names:  # --labels naming the model's classes in another order would flip them silently
        clash = [f"{n!r} is class {i} in --labels but class {names.index(n)} of the model"
                 for i, n in enumerate(ds.label_names) if n in names and names.index(n) != i]
        if clash:
            raise ValueError(f"{source}: --labels {' '.join(ds.label_names)} contradicts the model's class names "
                             f"{names}: {'; '.join(clash)}; give them in the model's order (or drop --labels)")
    if declared or not names or ds.label_names == names[:len(ds.label_names)]:
        return ds
    if ds.label_names == [str(i) for i in range(len(ds.label_names))] and not set(ds.label_names) <= set(names):
        if len(ds.label_names) <= len(names):
            return ds  # integer class indices
        bad = sorted({y for y in ds.labels if y >= len(names)})
        raise ValueError(f"{source}: class index(es) {', '.join(map(str, bad))} outside the model's {len(names)} "
                         f"classes 0..{len(names) - 1} ({names})")
    unknown = sorted(set(ds.label_names[y] for y in ds.labels) - set(names))
    if unknown:
        raise ValueError(f"{source}: label(s) {', '.join(map(repr, unknown))} are not among the model's class names "
                         f"{names}; relabel the file with those names (or class indices 0..{len(names) - 1}), or "
                         f"pass the file's label names in the model's class order with --labels NAME0 NAME1 ...")
    idx = {n: i for i, n in enumerate(names)}
    ds.labels = [idx[ds.label_names[y]] for y in ds.labels]
    ds.label_names = list(names)
    return ds
