"""The paper this package implements (read by ``iclr25 report`` for the page's overview)."""

TITLE = 'An Effective Theory of Bias Amplification'
VENUE = "ICLR 2025"
REFERENCE = 'arXiv 2410.17263'
URL = 'https://arxiv.org/abs/2410.17263'
