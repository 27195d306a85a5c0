"""The paper this package implements (read by ``iclr25 report`` for the page's overview)."""

TITLE = 'Certifying Language Model Robustness with Fuzzed Randomized Smoothing: An Efficient Defense Against Backdoor Attacks'
VENUE = "ICLR 2025"
REFERENCE = 'arXiv 2502.06892'
URL = 'https://arxiv.org/abs/2502.06892'
