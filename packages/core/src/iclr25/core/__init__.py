"""iclr25-core: the minimal shared core of the iclr25 packages.

Torch-free at its base: ``results`` (claims and reports), ``reproduction`` (run one method's
``reproduce`` and write its report), ``registry`` (method discovery and the ``iclr25`` command), ``report``
(the HTML page), ``runner`` (the experiment runner), ``data`` (mirror / cache resolution with checksums), ``seed``, ``config``
(dataclass configs from YAML/JSON files and flags, the shared CLI conventions), ``threads``,
``jsonl``, ``progress``, ``runinfo``, ``checkpoint`` (atomic checkpoint folders, every RNG state,
log trimming for an exact ``--resume``). Causal-LM helpers live in
``iclr25.core.lm`` (extra ``iclr25-core[lm]``).
"""

from ._version import __version__
from .data import ChecksumError, DataNotFoundError, DatasetSpec, RemoteFile, resolve
from .results import Claim, Report, read_report, write_report
from .seed import choose_device, seed_everything

__all__ = [
    "__version__",
    "Claim",
    "Report",
    "write_report",
    "read_report",
    "DatasetSpec",
    "RemoteFile",
    "resolve",
    "DataNotFoundError",
    "ChecksumError",
    "seed_everything",
    "choose_device",
]
