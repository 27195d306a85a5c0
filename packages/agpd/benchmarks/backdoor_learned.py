"""Was the backdoor learned? Reads the trained models of a ``reproduce`` run and separates the
attack success rate from the target-class prior.

For every ``checkpoints/<attack>[-seed<s>].pt`` of a run folder it rebuilds that experiment's
poisoned training set and evaluation split (same seed, same code as ``run_experiment``) and prints:

- ``fit_poison``: share of the *poisoned training samples* the model assigns to the target;
- ``fit_clean``: training accuracy on the clean samples;
- ``target_rate_no_trigger``: share of non-target evaluation images predicted as the target
  *without* the trigger (the prior the ASR must be read against);
- ``asr``: the same with the trigger (the recorded ASR).

``asr - target_rate_no_trigger`` is what the trigger adds. Usage (one torch thread)::

    ICLR25_DATA=/path/to/data python packages/agpd/benchmarks/backdoor_learned.py results/agpd-full
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import torch

from iclr25.agpd.data import load_data, split_clean_set
from iclr25.agpd.gradients import predict
from iclr25.agpd.pipeline import build_model, poison_dataset
from iclr25.agpd.reproduce import SETTINGS
from iclr25.agpd.train import load_checkpoint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a reproduce --out folder")
    ap.add_argument("--quick", action="store_true", help="the run was --quick (digits)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    s = SETTINGS[args.quick]
    rows = []
    for ck in sorted((args.run / "checkpoints").glob("*.pt")):
        m = re.fullmatch(r"(badnets|blended)_seed(\d+)", ck.stem)  # reproduce's job names (attack_seed<s>)
        if not m:
            continue
        attack, seed = m[1], int(m[2])
        st = load_checkpoint(ck)
        if st["epoch"] != s["epochs"]:
            print(f"{ck.name}: epoch {st['epoch']} of {s['epochs']} (unfinished), skipped")
            continue
        data = load_data(s["data"], seed)
        _, _, x_eval, y_eval = split_clean_set(data.x_test, data.y_test, 10, seed)
        x_bd, y_bd, mask, trig, tgt = poison_dataset(data, attack, 0.1, 0, seed=seed)
        net = build_model(s["model"], data.num_classes, data.image_shape[0])
        net.load_state_dict(st["model"])
        p = predict(net, x_bd)
        keep = y_eval != tgt
        r = {"attack": attack, "seed": seed,
             "fit_poison": float((p[mask] == tgt).float().mean()),
             "fit_clean": float((p[~mask] == y_bd[~mask]).float().mean()),
             "target_rate_no_trigger": float((predict(net, x_eval[keep]) == tgt).float().mean()),
             "asr": float((predict(net, trig(x_eval[keep])) == tgt).float().mean())}
        rows.append(r)
        print(json.dumps(r), flush=True)
    (args.run / "backdoor_learned.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
