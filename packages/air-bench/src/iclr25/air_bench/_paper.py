"""The paper this package implements (read by ``iclr25 report`` for the page's overview)."""

TITLE = 'AIR-Bench 2024: A Safety Benchmark Based on Risk Categories from Regulations and Policies'
VENUE = "ICLR 2025"
REFERENCE = 'arXiv 2407.17436'
URL = 'https://arxiv.org/abs/2407.17436'
