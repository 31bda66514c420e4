"""Real Dask clusters on 127.0.0.1: a LocalCluster of 2 worker processes (``local_cluster``), and
a ``dask scheduler`` with two ``dask worker`` processes started from the command line, as on a
real cluster (``dask_processes``, marker ``slow``).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realparts import stop_process

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def local_cluster() -> Iterator[Any]:
    """2 single-threaded worker processes, no dashboard: what ``--jobs 2`` starts. Stopped when
    the module that uses it ends (its tests stay on one xdist worker, tests/conftest.py): a
    cluster left running for the rest of a session kept its threads and processes alive in a
    worker whose later tests start thread pools of their own."""
    distributed = pytest.importorskip("distributed")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Port .* is already in use", UserWarning)
        cluster = distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )
    with cluster:
        yield cluster


@pytest.fixture
def cluster_client(local_cluster: Any) -> Iterator[Any]:
    """A client of :func:`local_cluster`."""
    import distributed

    with distributed.Client(local_cluster) as client:
        yield client


def _dask_command(*args: str) -> list[str]:
    """The ``dask`` command of this venv (its console script next to the interpreter)."""
    return [str(Path(sys.executable).with_name("dask")), *args]


@pytest.fixture
def dask_processes(tmp_path: Path) -> Iterator[str]:
    """``dask scheduler`` and two ``dask worker`` processes on free loopback ports; yields the
    scheduler address once both workers have joined. Workers import this checkout's package."""
    import distributed

    from tests.realparts.mosquitto import free_port, wait_for_port

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    common: dict[str, Any] = {"env": env, "cwd": tmp_path, "stdout": subprocess.DEVNULL}
    log = open(tmp_path / "dask.log", "w")  # noqa: SIM115 - closed below
    processes = [
        subprocess.Popen(
            _dask_command(
                "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"
            ),
            stderr=log,
            **common,
        )
    ]
    try:
        wait_for_port(port, timeout_seconds=30)
        for _ in range(2):
            processes.append(
                subprocess.Popen(
                    _dask_command(
                        "worker",
                        address,
                        "--nthreads",
                        "1",
                        "--host",
                        "127.0.0.1",
                        "--no-dashboard",
                        "--local-directory",
                        str(tmp_path),
                    ),
                    stderr=log,
                    **common,
                )
            )
        with distributed.Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)
        yield address
    finally:
        for process in reversed(processes):
            stop_process(process)
        log.close()
