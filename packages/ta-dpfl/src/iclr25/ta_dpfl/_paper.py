"""The paper this package implements (read by ``iclr25 report`` for the page's overview)."""

TITLE = 'Differentially Private Federated Learning with Time-Adaptive Privacy Spending'
VENUE = "ICLR 2025"
REFERENCE = 'arXiv 2502.18706'
URL = 'https://arxiv.org/abs/2502.18706'
