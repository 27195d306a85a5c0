"""The paper this package implements (read by ``iclr25 report`` for the page's overview)."""

TITLE = 'SEAL: Safety-enhanced Aligned LLM Fine-tuning via Bilevel Data Selection'
VENUE = "ICLR 2025"
REFERENCE = 'arXiv 2410.07471'
URL = 'https://arxiv.org/abs/2410.07471'
