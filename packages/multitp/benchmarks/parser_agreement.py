"""Agreement of the rule-based parser with the hand-labelled answers (tests/data/multitp_hand_labelled.jsonl).

Prints the confusion matrix (rows: hand label; columns: the rule step's label, "none" = handed to the LLM
parser) as Markdown, with the agreement numbers quoted in the README.

    python packages/multitp/benchmarks/parser_agreement.py
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from iclr25.multitp.parser import rule_based_choice

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "multitp_hand_labelled.jsonl"
ROWS = ("left", "right", "either", "neither", "underskilled", "other")
COLS = ("left", "right", "either", "neither", "none")


def main() -> None:
    recs = [json.loads(x) for x in DATA.read_text(encoding="utf-8").splitlines() if x.strip()]
    cm = Counter((r["label"], rule_based_choice(r["answer"], r["left"], r["right"]) or "none") for r in recs)
    print("| hand \\ rule | " + " | ".join(COLS) + " | total |")
    print("|---" * (len(COLS) + 2) + "|")
    for h in ROWS:
        n = sum(cm[(h, c)] for c in COLS)
        print(f"| {h} | " + " | ".join(str(cm[(h, c)]) for c in COLS) + f" | {n} |")
    labelled = sum(v for (h, g), v in cm.items() if g != "none")
    agree = sum(v for (h, g), v in cm.items() if g == h)
    print(f"\n{len(recs)} answers; the rule step labels {labelled} ({labelled / len(recs):.1%}), "
          f"{agree} of them as the labeller did ({agree / max(labelled, 1):.1%}), "
          f"{labelled - agree} wrong; {len(recs) - labelled} handed to the LLM parser")
    kinds = Counter(r["kind"] for r in recs)
    print("kinds: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))


if __name__ == "__main__":
    main()
