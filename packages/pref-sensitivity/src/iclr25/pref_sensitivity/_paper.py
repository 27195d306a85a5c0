"""The paper this package implements (read by ``iclr25 report`` for the page's overview)."""

TITLE = 'Strong Preferences Affect the Robustness of Preference Models and Value Alignment'
VENUE = "ICLR 2025"
REFERENCE = 'arXiv 2410.02451'
URL = 'https://arxiv.org/abs/2410.02451'
