"""The world-size-1 collective smoke test: gloo on this CPU runs the same path NCCL takes on a GPU (init,
all-reduce small and 64 MiB, barrier, destroy), and a failure is reported in the result, never raised."""
import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from dsdsim.bench import distributed  # noqa: E402
from dsdsim.bench.distributed import free_port, nccl_smoke, smoke_device  # noqa: E402


def _clean_env(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)


def test_gloo_world_size_one(monkeypatch):
    _clean_env(monkeypatch)
    res = nccl_smoke("cpu", backend="gloo", large_bytes=1 << 20, repeats=3)
    assert res.ok is True and res.error is None and res.correct is True, res
    assert (res.rank, res.world_size, res.device, res.init) == (0, 1, "cpu", "TCPStore 127.0.0.1")
    assert set(res.times_s) == {"init", "all_reduce_small", "all_reduce_large", "barrier", "destroy"}
    assert all(t > 0 for t in res.times_s.values()) and res.large_bytes_per_s > 0
    assert res.device_id_passed is False                          # device_id binds a GPU; not passed for a CPU
    assert not dist.is_initialized()                              # destroyed: the smoke can run again
    data = res.to_json()
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert list(data) == ["ok", "backend", "device", "rank", "world_size", "init", "device_id_passed", "times_s",
                          "large_bytes", "large_bytes_per_s", "correct", "torch_version", "nccl_version", "error",
                          "traceback", "wall_s"]                  # comm_check.json keeps its keys and order


def test_under_torchrun_env(monkeypatch):
    _clean_env(monkeypatch)
    for key, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(free_port())}.items():
        monkeypatch.setenv(key, value)
    res = nccl_smoke("cpu", backend="gloo", large_bytes=4096, repeats=2)
    assert res.ok and res.init == "env://", res


def test_local_rank_picks_the_gpu(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert smoke_device("cuda") == "cuda:3"
    assert smoke_device("cuda:1") == "cuda:1" and smoke_device("cpu") == "cpu"
    monkeypatch.delenv("LOCAL_RANK")
    assert smoke_device("cuda") == "cuda:0"


def test_nccl_without_a_gpu_fails_soft(monkeypatch):
    _clean_env(monkeypatch)
    res = nccl_smoke("cuda", backend="nccl", repeats=1)
    assert res.ok is False and res.error and res.traceback
    assert res.device == "cuda:0" and res.wall_s >= 0
    assert not dist.is_initialized()


def test_device_id_is_supported_by_this_torch():
    assert distributed._accepts_device_id()                        # torch >= 2.3


def test_smoke_cli(tmp_path):
    out = tmp_path / "smoke.json"
    proc = subprocess.run([sys.executable, "-m", "dsdsim", "comm-check", "--backend", "gloo", "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["ok"] is True


def test_comm_check_refuses_nccl_without_a_gpu(cli):
    code, out, err = cli("comm-check", "--backend", "nccl", "--device", "cpu")
    assert code == 2 and "needs --device cuda" in err


def test_comm_check_sweeps_two_gloo_ranks(cli, tmp_path):
    out = tmp_path / "sweep.json"
    code, _, err = cli("comm-check", "--backend", "gloo", "--world-size", "2", "-o", out)
    assert code == 0, err
    data = json.loads(out.read_text())
    assert data["world_size"] == 2 and data["sweep"]

