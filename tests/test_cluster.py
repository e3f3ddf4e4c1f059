"""The cluster path, really run: sweeps on a dask.distributed LocalCluster of worker processes, a scheduler address
on the command line, workers that die mid-sweep, and Ctrl-C. `.ci/run` installs the `cluster` extra, so these run
there; elsewhere the dask tests skip when dask is absent (the process-pool ones always run)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsdsim.errors import DsdsimError
from dsdsim.serve.sweep import Simulation, map_jobs, sweep

SMALL = ("--requests", "16", "--input-len", "128", "--output-len", "32")


@pytest.fixture(scope="module")
def setup():
    from dsdsim.specs.setup import resolve

    return resolve("llama-3.1-8b", "h100-sxm", None, "eagle3", "vllm")


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("dask.distributed")

    # dask's default retries: a task whose workers died more than 3 times (distributed.scheduler.allowed-failures)
    # fails with KilledWorker; fewer deaths and it runs again on another worker
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, protocol="tcp",
                                  dashboard_address=None, silence_logs=40) as c:
        yield c


def _base(setup, policies="none,dsd") -> Simulation:
    return Simulation(setup, "closed:4", policies, requests=20, input_len="128", output_len="40", seed=1)


def test_a_sweep_on_two_worker_processes_gives_the_process_pools_numbers(setup, cluster):
    base = _base(setup)
    address = cluster.scheduler_address.split("://", 1)[1]
    remote = sweep(base, "closed:2,6", executor=f"dask://{address}")
    assert remote.to_dict() == sweep(base, "closed:2,6", executor="processes").to_dict()


def test_the_command_line_takes_the_schedulers_own_address(cli, cluster, tmp_path):
    out = tmp_path / "remote.json"
    code, _, err = cli("simulate", *SMALL, "--sweep", "closed:2,4", "--executor", cluster.scheduler_address,
                       "--format", "json", "-o", out)
    assert code == 0, err
    code, local, err = cli("simulate", *SMALL, "--sweep", "closed:2,4", "--executor", "local", "--format", "json")
    assert code == 0, err
    assert json.loads(out.read_text()) == json.loads(local)


def _die_once(marker: str, progress=None):
    """Kill the worker process running this the first time (a marker file says it happened), then succeed."""
    path = Path(marker)
    if not path.exists():
        path.write_text("died")
        os._exit(1)
    return path.name


def _always_die(x, progress=None):
    os._exit(1)


def test_a_worker_that_dies_mid_sweep_has_its_job_rerun(cluster, tmp_path):
    markers = [str(tmp_path / f"job{i}") for i in range(3)]
    address = cluster.scheduler_address
    assert map_jobs(_die_once, markers, executor=address) == ["job0", "job1", "job2"]
    assert all(Path(m).read_text() == "died" for m in markers)     # each job really lost a worker once


def test_a_job_that_kills_every_worker_it_meets_is_named(cluster):
    with pytest.raises(DsdsimError, match=r"a worker died .* did not finish: 7"):
        map_jobs(_always_die, [7], executor=cluster.scheduler_address)


def test_a_dead_process_pool_worker_names_the_lost_jobs_and_nothing_is_written():
    with pytest.raises(DsdsimError, match=r"a worker died .*did not finish.*nothing was written"):
        map_jobs(_always_die, [1, 2, 3], executor="processes")


def _sweep_in_its_own_group(executor: str, out: Path) -> subprocess.Popen:
    """A long `dsdsim simulate --sweep` in its own process group, SIGINT at its default (bash `&` ignores it)."""
    return subprocess.Popen([sys.executable, "-m", "dsdsim", "simulate", "--requests", "20000", "--sweep",
                             "closed:8,16,32,64", "--executor", executor, "--format", "json", "-o", str(out)],
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _ctrl_c(p: subprocess.Popen, out: Path, tmp_path: Path, within_s: float) -> None:
    """Ctrl-C to the whole group: exit 130 within ``within_s``, no traceback, nothing written."""
    os.killpg(p.pid, signal.SIGINT)
    start = time.monotonic()
    _, err = p.communicate(timeout=30)
    assert time.monotonic() - start < within_s
    assert p.returncode == 130, err.decode()[-800:]
    assert not out.exists() and list(tmp_path.iterdir()) == []
    assert b"Traceback" not in err


@pytest.mark.skipif(sys.platform == "win32", reason="process groups and SIGINT are POSIX")
def test_ctrl_c_stops_a_sweep_at_once_exits_130_and_writes_nothing(tmp_path):
    """Ctrl-C sends SIGINT to the whole foreground process group: dsdsim and its worker processes."""
    out = tmp_path / "sweep.json"
    p = _sweep_in_its_own_group("processes", out)
    time.sleep(4)                          # the pool is running its jobs (each takes tens of seconds here)
    assert p.poll() is None, p.communicate()
    _ctrl_c(p, out, tmp_path, 2.0)


@pytest.mark.skipif(sys.platform == "win32", reason="process groups and SIGINT are POSIX")
def test_ctrl_c_stops_a_dask_sweep_cancels_its_tasks_and_writes_nothing(cluster, tmp_path):
    """Ctrl-C on a sweep sent to a Dask cluster: the command exits 130 at once, nothing is written, and the
    cluster is left with no task of the sweep running (its futures were cancelled)."""
    from dask.distributed import Client

    out = tmp_path / "sweep.json"
    p = _sweep_in_its_own_group(cluster.scheduler_address, out)
    with Client(cluster.scheduler_address, timeout=30) as client:
        deadline = time.monotonic() + 40
        while not any(client.processing().values()):       # the sweep's tasks have reached the workers
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.2)
        _ctrl_c(p, out, tmp_path, 3.0)
        deadline = time.monotonic() + 15
        while any(client.processing().values()):            # cancelled, not left running on the cluster
            assert time.monotonic() < deadline, client.processing()
            time.sleep(0.2)
