"""The paper this package implements (read by ``iclr25 report`` for the page's overview)."""

TITLE = 'Self-Improvement in Language Models: The Sharpening Mechanism'
VENUE = "ICLR 2025"
REFERENCE = 'arXiv 2412.01951'
URL = 'https://arxiv.org/abs/2412.01951'
