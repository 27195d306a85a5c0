"""iclr25-wm-transfer (placeholder)."""
from ._version import __version__
