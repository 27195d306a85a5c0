"""The paper this package implements (read by ``iclr25 report`` for the page's overview)."""

TITLE = 'Circuit Representation Learning with Masked Gate Modeling and Verilog-AIG Alignment'
VENUE = "ICLR 2025"
REFERENCE = 'arXiv 2502.12732'
URL = 'https://arxiv.org/abs/2502.12732'
