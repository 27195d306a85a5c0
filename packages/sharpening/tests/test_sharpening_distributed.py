"""`accelerate launch` with 2 CPU processes: data sharded, gradients averaged, the same result as 1 process.

Slow (two interpreters import torch and transformers): ``pytest -m slow packages/sharpening -k distributed``.
"""

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent('''
    import json, sys, torch
    torch.set_num_threads(1)
    from iclr25.core.lm import tiny_causal_lm
    from iclr25.sharpening.sft import collate_examples, sft_loss
    from iclr25.sharpening.training import PolicyTrainer, TrainConfig

    out, accel = sys.argv[1], sys.argv[2] == "1"
    ex = [{"prompt_ids": list(f"{a}+{b}=".encode()), "response_ids": list(f"{a + b:02d}".encode()) + [256]}
          for a, b in [(10, 11), (12, 13), (20, 21), (30, 31), (14, 15), (16, 17), (40, 41), (22, 23)]]
    seen = []

    def loss_fn(m, idx):
        seen.append(idx.tolist())
        return sft_loss(m, *collate_examples([ex[i] for i in idx.tolist()], 257)), {}

    model = tiny_causal_lm(n_embd=32, n_layer=1, n_head=2, n_positions=32, seed=0)
    cfg = TrainConfig(epochs=2, lr=1e-2, batch_size=4, lora_r=0, max_grad_norm=10.0, seed=0)
    t = PolicyTrainer(model, loss_fn, len(ex), cfg, accelerate=accel)
    t.fit(progress=False)
    w = torch.cat([p.detach().flatten() for p in t.unwrapped.parameters()])
    with open(f"{out}/rank{t.rank}.json", "w") as fh:
        json.dump({"rank": t.rank, "world": t.world, "seen": seen, "w": w[:64].tolist(), "sum": float(w.sum())}, fh)
''')


@pytest.mark.slow
def test_accelerate_two_cpu_processes_shard_data_and_sync_gradients(tmp_path):
    if shutil.which("accelerate") is None and not (sys.prefix and shutil.which("accelerate", path=sys.prefix + "/bin")):
        pytest.skip("accelerate is not installed (extra [full])")
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    single, multi = tmp_path / "single", tmp_path / "multi"
    single.mkdir()
    multi.mkdir()
    r = subprocess.run([sys.executable, str(script), str(single), "0"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    exe = shutil.which("accelerate", path=sys.prefix + "/bin") or "accelerate"
    # the torchrun-based launcher (the one GPUs use); the processes join a gloo group on CPU
    r = subprocess.run([exe, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                        "--mixed_precision", "no", "--dynamo_backend", "no", str(script), str(multi), "1"],
                       capture_output=True, text=True, timeout=900, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    ranks = [json.loads((multi / f"rank{i}.json").read_text()) for i in (0, 1)]
    one = json.loads((single / "rank0.json").read_text())
    assert [x["world"] for x in ranks] == [2, 2]
    for s0, s1, s in zip(ranks[0]["seen"], ranks[1]["seen"], one["seen"]):
        assert not set(s0) & set(s1) and sorted(s0 + s1) == sorted(s)          # each rank half of the global batch
    assert ranks[0]["w"] == pytest.approx(ranks[1]["w"], abs=1e-6)            # gradients synchronised
    assert ranks[0]["w"] == pytest.approx(one["w"], abs=2e-4)                 # = one process on the whole batch
