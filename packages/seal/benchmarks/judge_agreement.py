"""Agreement of the judge-verdict parser (``parse_verdict``) with hand-labelled judge replies.

Two sets in tests/data: ``seal_judge_hand_labelled.jsonl`` (45 replies, labelled before the parser was
written; the LLM-free rule was tuned on it) and ``seal_judge_heldout.jsonl`` (20 replies, labelled after
the rule was frozen). Prints each set's confusion matrix (rows: the labeller's reading, "unclear" = no
verdict; columns: the parsed verdict, "unparsed" = no vote) and the agreement numbers quoted in the README.

    python packages/seal/benchmarks/judge_agreement.py
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from iclr25.seal.metrics import parse_verdict_detailed

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
KEYS = ("a", "b", "tie", "unparsed")


def report(name: str) -> None:
    recs = [json.loads(x) for x in (DATA / name).read_text(encoding="utf-8").splitlines() if x.strip()]
    cm: Counter = Counter()
    how: Counter = Counter()
    for r in recs:
        v, m = parse_verdict_detailed(r["output"])
        cm[(r["label"] if r["label"] != "unclear" else "unparsed", v or "unparsed")] += 1
        how[m] += 1
    print(f"\n{name}\n\n| hand \\ parsed | " + " | ".join(KEYS) + " | total |")
    print("|---" * (len(KEYS) + 2) + "|")
    for h in KEYS:
        print(f"| {'unclear' if h == 'unparsed' else h} | " + " | ".join(str(cm[(h, c)]) for c in KEYS)
              + f" | {sum(cm[(h, c)] for c in KEYS)} |")
    agree = sum(v for (h, g), v in cm.items() if h == g)
    wrong = sum(v for (h, g), v in cm.items() if g != "unparsed" and g != h)
    missed = sum(v for (h, g), v in cm.items() if g == "unparsed" and h != "unparsed")
    print(f"\n{len(recs)} replies: {agree} agree ({agree / len(recs):.1%}); {wrong} wrong votes; {missed} verdicts "
          f"left unparsed; read by {dict(how)}")


if __name__ == "__main__":
    for n in ("seal_judge_hand_labelled.jsonl", "seal_judge_heldout.jsonl"):
        report(n)
