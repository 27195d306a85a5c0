"""The paper this package implements (read by ``iclr25 report`` for the page's overview)."""

TITLE = 'Variational Best-of-N Alignment'
VENUE = "ICLR 2025"
REFERENCE = 'arXiv 2407.06057'
URL = 'https://arxiv.org/abs/2407.06057'
