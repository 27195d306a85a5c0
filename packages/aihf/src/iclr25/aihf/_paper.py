"""The paper this package implements (read by ``iclr25 report`` for the page's overview)."""

TITLE = 'Joint Reward and Policy Learning with Demonstrations and Human Feedback Improves Alignment'
VENUE = "ICLR 2025"
REFERENCE = 'arXiv 2406.06874'
URL = 'https://arxiv.org/abs/2406.06874'
