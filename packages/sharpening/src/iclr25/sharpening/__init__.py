"""iclr25-sharpening."""
from ._version import __version__

