"""The paper this package implements (read by ``iclr25 report`` for the page's overview)."""

TITLE = 'LOTOS: Layer-wise Orthogonalization for Training Robust Ensembles'
VENUE = "ICLR 2025"
REFERENCE = 'arXiv 2410.05136'
URL = 'https://arxiv.org/abs/2410.05136'
