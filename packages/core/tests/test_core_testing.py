"""iclr25.core.testing: the two-process launcher the packages' data-parallel tests use."""

import socket

import pytest

from iclr25.core.testing import free_port, run_torchrun, single_thread_env

_WORKER = '''
import os, sys
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
assert os.environ["OMP_NUM_THREADS"] == "1" and os.environ["CUDA_VISIBLE_DEVICES"] == ""
print(f"rank {dist.get_rank()} of {dist.get_world_size()} sum {t.item():g}")
dist.destroy_process_group()
sys.exit(int(sys.argv[1]))
'''


def test_free_port_is_bindable_and_env_is_single_thread():
    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # really free
    env = single_thread_env({"X_EXTRA": "1"})
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1" and env["X_EXTRA"] == "1"


def test_run_torchrun_two_processes_all_reduce_and_failure(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    r = run_torchrun([script, 0], timeout=300)
    assert "rank 0 of 2 sum 3" in r.stdout and "rank 1 of 2 sum 3" in r.stdout  # a real gloo all-reduce
    with pytest.raises(AssertionError, match="torchrun exited"):
        run_torchrun([script, 3], nproc=1, timeout=300)
    with pytest.raises(ValueError, match="nproc"):
        run_torchrun([script, 0], nproc=0)
