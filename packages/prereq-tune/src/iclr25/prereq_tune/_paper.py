"""The paper this package implements (read by ``iclr25 report`` for the page's overview)."""

TITLE = 'Fictitious Synthetic Data Can Improve LLM Factuality via Prerequisite Learning'
VENUE = "ICLR 2025"
REFERENCE = 'arXiv 2410.19290'
URL = 'https://arxiv.org/abs/2410.19290'
