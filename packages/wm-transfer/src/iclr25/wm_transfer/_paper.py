"""The paper this package implements (read by ``iclr25 report`` for the page's overview)."""

TITLE = 'A Transfer Attack to Image Watermarks'
VENUE = "ICLR 2025"
REFERENCE = 'arXiv 2403.15365'
URL = 'https://arxiv.org/abs/2403.15365'
