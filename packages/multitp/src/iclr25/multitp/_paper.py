"""The paper this package implements (read by ``iclr25 report`` for the page's overview)."""

TITLE = 'Language Model Alignment in Multilingual Trolley Problems'
VENUE = "ICLR 2025"
REFERENCE = 'arXiv 2407.02273'
URL = 'https://arxiv.org/abs/2407.02273'
