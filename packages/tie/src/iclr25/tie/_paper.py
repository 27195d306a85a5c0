"""The paper this package implements (read by ``iclr25 report`` for the page's overview)."""

TITLE = 'Mitigating Spurious Correlations in Zero-Shot Multimodal Models'
VENUE = "ICLR 2025"
REFERENCE = 'OpenReview UsRKFYR4lM'
URL = 'https://openreview.net/forum?id=UsRKFYR4lM'
