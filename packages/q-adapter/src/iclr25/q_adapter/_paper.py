"""The paper this package implements (read by ``iclr25 report`` for the page's overview)."""

TITLE = 'Q-Adapter: Customizing Pre-trained LLMs to New Preferences with Forgetting Mitigation'
VENUE = "ICLR 2025"
REFERENCE = 'arXiv 2407.03856'
URL = 'https://arxiv.org/abs/2407.03856'
