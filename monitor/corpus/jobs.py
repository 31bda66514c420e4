"""How a corpus command runs its work, apart from what it measures: one object the commands
(``enroll``, ``calibrate``, ``evaluate``) build once from their shared options and hand down to
every step that extracts files, instead of the same five values passed along by hand.

It stays light to import (no numpy, no extractor, no Dask): the extractor and the cluster are
reached through it only when a step runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from monitor.blocks.workers import Client
    from monitor.features.extract import FeatureCache

MIN_SPEECH_SECONDS = 0.3
"""Default minimum speech per utterance (after VAD); the corpus commands take --min-speech (a
corpus of single spoken words may need less)."""

FileProgress = Callable[[int, int, str], None]
"""progress(done, total, path) after each file, cached or extracted, failed or not."""

StepProgress = Callable[[str], None]
"""steps(text) as each longer step starts (fitting a feature, the attackers, the report)."""


@dataclass(frozen=True)
class CorpusJob:
    """Where and how a corpus command extracts and computes, and whom it tells how far it got.

    The defaults are the library's: no cache, this process only, the default minimum speech,
    nobody told. A command passes one of these down, so adding a shared option changes one
    class and the command, not every function on the way.
    """

    cache: FeatureCache | None = None
    """The feature cache read and written by this process alone (workers never touch it);
    None: extract every file (``--no-cache``, temporary copies)."""
    jobs: int = 1
    """Dask worker processes on this machine (``--jobs``; 1: none, the work stays here)."""
    scheduler: str | None = None
    """A running Dask cluster's address (``--scheduler``), or that of the LocalCluster one
    step started for the next ones (:meth:`on_one_cluster`); None: none yet."""
    min_speech_seconds: float = MIN_SPEECH_SECONDS
    """Files with less speech than this (seconds, after VAD) are skipped (``--min-speech``)."""
    progress: FileProgress | None = None
    """Told after each file is extracted or read from the cache (a progress bar)."""
    steps: StepProgress | None = None
    """Told as each longer step after the extraction starts."""

    @property
    def cache_dir(self) -> Path | None:
        """The cache's folder (crops are cached under it too), None without a cache."""
        return None if self.cache is None else self.cache.directory

    def tell(self, step: str) -> None:
        if self.steps is not None:
            self.steps(step)

    @contextlib.contextmanager
    def on_one_cluster(self) -> Iterator[CorpusJob]:
        """This job with every following step on one cluster: a LocalCluster of ``jobs``
        workers started once (enrolment rounds, both corpora of an audit), the given
        scheduler, or none at all (``jobs`` 1, no scheduler: this process)."""
        from monitor.blocks.workers import shared_scheduler

        with shared_scheduler(self.jobs, self.scheduler) as address:
            yield dataclasses.replace(self, scheduler=address)

    @contextlib.contextmanager
    def client(self) -> Iterator[Client | None]:
        """A Dask client of this job's cluster, None when the work stays in this process
        (call inside :meth:`on_one_cluster`, so the client joins the cluster started there)."""
        from monitor.blocks.workers import dask_client, uses_cluster

        if not uses_cluster(self.jobs, self.scheduler):
            yield None
            return
        with dask_client(self.jobs, self.scheduler) as client:
            yield client


DEFAULT_JOB = CorpusJob()
"""The library's default (no cache, this process only, the default minimum speech, nobody
told): what a benchmark or test that calls a corpus step without options gets."""
