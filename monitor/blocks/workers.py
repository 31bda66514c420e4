"""The one module that talks to Dask: independent blocks run on workers, results merged here in
block order, so the figures are those of the same blocks run in this process.

The commands (``enroll``, ``calibrate``, ``evaluate``, ``score --matrix``) say what a block is
and how results add; they hand this module picklable per-block functions and never see a
worker. Two shapes of work:

- :func:`map_batches`: a pure function over batches of independent items (files to extract,
  speakers to fit), results handed back per batch as they finish;
- :class:`DaskRows`: the row blocks of a (T, N) score matrix made on the workers (a
  :class:`monitor.disclosure.matrix_scan.RowSource`, as :class:`InMemoryRows` is in this
  process), each pass's per-block results in row order; :func:`regrouped_rows` keeps rows
  made in one set of blocks on the workers in another (a fit's row groups).

``--jobs 1`` without ``--scheduler`` stays in this process (no cluster: small runs and tests stay
fast). ``--jobs N`` starts a LocalCluster of N single-threaded worker processes on the loopback
interface, without a dashboard; ``--scheduler tcp://host:8786`` uses a running cluster
(``dask scheduler`` + ``dask worker tcp://host:8786`` on each machine; every worker needs the same
venv and the corpus at the same path). Results come back to this process, which alone reads and
writes the feature cache; so the cache is that of the machine the command runs on.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from monitor.errors import InputError

if TYPE_CHECKING:
    from distributed import Client as Client

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
    with warnings.catch_warnings():
        # With 8787 taken (another cluster), the HTTP endpoint moves to a free loopback port.
        warnings.filterwarnings("ignore", "Port .* is already in use", UserWarning)
        cluster = LocalCluster(
            n_workers=jobs,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )
    with cluster, Client(cluster) as client:
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


def _run_rows(
    load: Callable[..., tuple[np.ndarray, np.ndarray]],
    function: Callable[..., _R],
    r0: int,
    r1: int,
    n_shared: int,
    *args: Any,
) -> _R:
    """A Dask task: load (or generate) rows [r0, r1) on the worker, from the first ``n_shared``
    arguments (data scattered once to every worker), and apply a row function to them."""
    S, m = load(r0, r1, *args[:n_shared])
    return function(S, m, r0, *args[n_shared:])


def load_rows(
    load: Callable[..., tuple[Any, np.ndarray]], r0: int, r1: int, *shared: Any
) -> tuple[Any, np.ndarray]:
    """A Dask task: rows [r0, r1) loaded (or generated) on a worker, to be kept there."""
    return load(r0, r1, *shared)


def _apply_rows(
    rows: tuple[Any, np.ndarray], function: Callable[..., _R], r0: int, *args: Any
) -> _R:
    """A Dask task: a row function applied to rows kept on the worker."""
    return function(rows[0], rows[1], r0, *args)


class DaskRows:
    """A (T, N) score matrix whose row blocks are loaded or generated by Dask workers
    (a :class:`monitor.disclosure.matrix_scan.RowSource`): the matrix is never whole anywhere.

    ``load(r0, r1, *shared)`` must be picklable and return (S rows (r1 − r0, N), truth
    (r1 − r0,)); ``shared`` holds what every block needs (arrays such as templates), scattered
    to every worker once instead of travelling with each task. The blocks are ``blocks`` [r0, r1)
    if given, else runs of ``rows_per_task`` rows. ``progress(done, total)`` is called here as
    each block of a pass finishes (in completion order, so a progress bar moves).

    With ``keep`` the blocks are loaded once, at the first pass, and kept in the workers'
    memory (spilled to their disks by Dask beyond its limit) until :meth:`release`: for fits
    that make many passes over costly scores (``calibrate``). Without it each pass loads them
    again and a worker holds one block at a time. ``kept`` gives the blocks' futures when they
    are already on the workers (made by other tasks); it implies ``keep``.
    """

    def __init__(
        self,
        client: Client,
        load: Callable[..., tuple[np.ndarray, np.ndarray]],
        shape: tuple[int, int],
        *,
        rows_per_task: int | None = None,
        blocks: Sequence[tuple[int, int]] | None = None,
        shared: Sequence[Any] = (),
        progress: Callable[[int, int], None] | None = None,
        keep: bool = False,
        kept: Sequence[Any] = (),
    ) -> None:
        self.client = client
        self.load = load
        self.shape = shape
        if blocks is None:
            step = max(1, rows_per_task or shape[0])
            blocks = [(r0, min(r0 + step, shape[0])) for r0 in range(0, shape[0], step)]
        self.blocks = list(blocks)
        self.shared = [_scattered(client, value) for value in shared]
        self.progress = progress
        self.keep = keep or bool(kept)
        self.kept: list[Any] = list(kept)

    def release(self) -> None:
        """Drop the kept blocks (the workers free them)."""
        self.kept = []

    def _kept_blocks(self) -> list[Any]:
        if not self.kept:
            self.kept = [
                self.client.submit(load_rows, self.load, r0, r1, *self.shared, pure=False)
                for r0, r1 in self.blocks
            ]
        return self.kept

    def map(self, function: Callable[..., _R], *args: Any) -> list[_R]:
        """``function(S_rows, m_rows, row0, *args)`` on the workers, results in row order."""
        extra = [_scattered(self.client, value) for value in args]
        if self.keep:
            futures = {
                self.client.submit(_apply_rows, rows, function, r0, *extra, pure=False): index
                for index, (rows, (r0, _)) in enumerate(
                    zip(self._kept_blocks(), self.blocks, strict=True)
                )
            }
            return self._gathered(futures)
        futures = {
            self.client.submit(
                _run_rows,
                self.load,
                function,
                r0,
                r1,
                len(self.shared),
                *self.shared,
                *extra,
                pure=False,
            ): index
            for index, (r0, r1) in enumerate(self.blocks)
        }
        return self._gathered(futures)

    def _gathered(self, futures: dict[Any, int]) -> list[Any]:
        """The futures' results in block order, ``progress`` called as each one finishes."""
        from distributed import as_completed

        results: list[Any] = [None] * len(futures)
        for done, future in enumerate(as_completed(futures), start=1):
            results[futures[future]] = future.result()
            if self.progress is not None:
                self.progress(done, len(futures))
        return results


def _scattered(client: Client, value: Any) -> Any:
    """An array sent once to every worker (its future stands in for it in tasks); else as is.
    Each scatter gets its own key (``hash=False``): equal arrays scattered by two passes would
    share a content key, and releasing the first pass's future loses the second one's data."""
    if isinstance(value, np.ndarray):
        return client.scatter(value, broadcast=True, hash=False)
    return value


Rows = Any
"""A block's rows: an array (r1 − r0, N), or {name: array} for several matrices at once."""


def _cut(rows: Rows, part: slice) -> Rows:
    return (
        {name: array[part] for name, array in rows.items()}
        if isinstance(rows, dict)
        else rows[part]
    )


def _join(parts: list[Rows]) -> Rows:
    if isinstance(parts[0], dict):
        return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
    return np.concatenate(parts)


def _joined_rows(
    r0: int, r1: int, bounds: tuple[tuple[int, int], ...], *parts: tuple[Rows, np.ndarray]
) -> tuple[Rows, np.ndarray]:
    """A Dask task: rows [r0, r1), with their truth, cut from the blocks ``bounds`` (their
    ``parts``, made by other tasks) that cover them."""
    cut = [
        (slice(max(r0, b0) - b0, min(r1, b1) - b0), rows, truth)
        for (b0, b1), (rows, truth) in zip(bounds, parts, strict=True)
    ]
    joined = _join([_cut(rows, part) for part, rows, _ in cut])
    return joined, np.concatenate([truth[part] for part, _, truth in cut])


def regrouped_rows(
    client: Client,
    load: Callable[..., tuple[Rows, np.ndarray]],
    shape: tuple[int, int],
    *,
    blocks: Sequence[tuple[int, int]],
    groups: Sequence[tuple[int, int]],
    shared: Sequence[Any] = (),
) -> DaskRows:
    """Rows made in ``blocks`` (one task each, so the workers share the making), then cut and
    joined into ``groups`` and kept on the workers until :meth:`DaskRows.release`: a fit that
    passes many times over row groups other than the blocks its rows are made in."""
    scattered = [_scattered(client, value) for value in shared]
    starts = [b0 for b0, _ in blocks]
    made = [client.submit(load_rows, load, b0, b1, *scattered, pure=False) for b0, b1 in blocks]
    kept = []
    for g0, g1 in groups:
        first, stop = bisect.bisect_right(starts, g0) - 1, bisect.bisect_left(starts, g1)
        bounds = tuple(blocks[first:stop])
        kept.append(client.submit(_joined_rows, g0, g1, bounds, *made[first:stop], pure=False))
    return DaskRows(client, load, shape, blocks=groups, kept=kept)
