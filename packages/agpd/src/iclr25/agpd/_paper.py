"""The paper this package implements (read by ``iclr25 report`` for the page's overview)."""

TITLE = 'Activation Gradient based Poisoned Sample Detection Against Backdoor Attacks'
VENUE = "ICLR 2025"
REFERENCE = 'arXiv 2312.06230'
URL = 'https://arxiv.org/abs/2312.06230'
