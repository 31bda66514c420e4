"""Dask workers for the corpus commands (enroll, calibrate, evaluate) and large score matrices.

``--jobs 1`` without ``--scheduler`` stays in this process (no cluster: small runs and tests stay
fast). ``--jobs N`` starts a LocalCluster of N single-threaded worker processes on the loopback
interface, without a dashboard; ``--scheduler tcp://host:8786`` uses a running cluster
(``dask scheduler`` + ``dask worker tcp://host:8786`` on each machine; every worker needs the same
venv and the corpus at the same path). Results come back to this process, which alone reads and
writes the feature cache; so the cache is that of the machine the command runs on.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from monitor.errors import InputError

if TYPE_CHECKING:
    from distributed import Client

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_R = TypeVar("_R")

#: Seconds to wait for a given scheduler before saying it cannot be reached.
CONNECT_TIMEOUT_SECONDS = 10.0


def uses_cluster(jobs: int, scheduler: str | None) -> bool:
    """Whether work goes to Dask workers (else it runs in this process)."""
    return scheduler is not None or jobs > 1


@contextlib.contextmanager
def dask_client(jobs: int, scheduler: str | None = None) -> Iterator[Client]:
    """A client of the given scheduler, or of a LocalCluster of ``jobs`` processes."""
    from distributed import Client, LocalCluster

    if scheduler is not None:
        try:
            client = Client(scheduler, timeout=CONNECT_TIMEOUT_SECONDS)
        except (OSError, TimeoutError, ValueError) as error:
            raise InputError("--scheduler", f"cannot reach {scheduler}: {error}") from None
        with client:
            yield client
        return
    with (
        LocalCluster(
            n_workers=jobs,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


@contextlib.contextmanager
def shared_scheduler(jobs: int, scheduler: str | None = None) -> Iterator[str | None]:
    """Scheduler address for several steps in a row (enrolment rounds, two corpora): a
    LocalCluster started once, the given scheduler, or None to stay in this process."""
    if not uses_cluster(jobs, scheduler) or scheduler is not None:
        yield scheduler
        return
    with dask_client(jobs) as client:
        yield client.scheduler.address


def batches(items: Sequence[_T], workers: int, *, per_worker: int = 4) -> list[list[_T]]:
    """Split ``items`` into about ``per_worker`` batches per worker (at least one item each)."""
    size = max(1, -(-len(items) // max(1, workers * per_worker)))
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def map_batches(
    client: Client,
    function: Callable[..., list[_R]],
    items: Sequence[_T],
    *args: Any,
    done: Callable[[list[_T], list[_R]], None],
) -> None:
    """Run ``function(batch, *args)`` on the workers, one task per batch, and call
    ``done(batch, results)`` here as each finishes (in completion order: progress bars move)."""
    from distributed import as_completed

    workers = max(1, len(client.scheduler_info().get("workers", {})))
    parts = batches(items, workers)
    futures = {client.submit(function, part, *args, pure=False): i for i, part in enumerate(parts)}
    for future in as_completed(futures):
        done(parts[futures[future]], future.result())
