"""The paper this package implements (read by ``iclr25 report`` for the page's overview)."""

TITLE = 'CREAM: Consistency Regularized Self-Rewarding Language Models'
VENUE = "ICLR 2025"
REFERENCE = 'arXiv 2410.12735'
URL = 'https://arxiv.org/abs/2410.12735'
