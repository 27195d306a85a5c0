"""The paper this package implements (read by ``iclr25 report`` for the page's overview)."""

TITLE = 'Fair Clustering in the Sliding Window Model'
VENUE = "ICLR 2025"
REFERENCE = 'arXiv 2503.05173'
URL = 'https://arxiv.org/abs/2503.05173'
