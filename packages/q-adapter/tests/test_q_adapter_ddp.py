"""Data parallelism on CPU: two gloo processes under torchrun vs one process on the concatenated batch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from iclr25.core.testing import run_torchrun, single_thread_env

WORKER = Path(__file__).with_name("q_adapter_ddp_worker.py")


def _run(args: list[str]) -> None:
    r = subprocess.run(args, env=single_thread_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


@pytest.mark.parametrize("method", ["q-adapter", pytest.param("dpo", marks=pytest.mark.slow)])
def test_two_processes_match_one_on_the_concatenated_batch(tmp_path, method):
    steps, b = 3, 2
    run_torchrun([WORKER, tmp_path / "ddp", b, steps, method], timeout=300)
    _run([sys.executable, str(WORKER), str(tmp_path / "single"), str(2 * b), str(steps), method])
    r0, r1 = (torch.load(tmp_path / "ddp" / f"rank{r}.pt", weights_only=True) for r in (0, 1))
    one = torch.load(tmp_path / "single" / "rank0.pt", weights_only=True)
    assert (r0["world"], r1["world"], one["world"]) == (2, 2, 1)
    # ranks see different pairs, and together exactly the single process's batch of each step
    assert len(r0["seen"]) == len(r1["seen"]) == steps
    for a, c, s in zip(r0["seen"], r1["seen"], one["seen"]):
        assert len(a) == len(c) == b and not set(a) & set(c)
        assert a + c == s
    # gradients were synced: identical LoRA weights on both ranks, and they moved
    assert r0["lora"].keys() == r1["lora"].keys() == one["lora"].keys()
    moved = 0.0
    for k in r0["lora"]:
        assert torch.equal(r0["lora"][k], r1["lora"][k]), k
        torch.testing.assert_close(r0["lora"][k], one["lora"][k], rtol=1e-4, atol=1e-5)
        moved = max(moved, float(r0["lora"][k].abs().max()))
    assert moved > 1e-3
    # the logged loss is the global batch's (mean over ranks) = the single process's loss
    torch.testing.assert_close(torch.tensor(r0["loss"]), torch.tensor(one["loss"]), rtol=1e-4, atol=1e-5)
    assert r0["loss"] == r1["loss"]
