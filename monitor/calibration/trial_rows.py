"""A setting's score matrices in row blocks made on workers, from its pooled trials.

This process pools the tests and templates of a setting (:func:`pool_trials`: T·D values, not
T·N scores); they go to every worker once. Each block of test rows is scored against its
start's templates by :class:`TrialLoader` (:func:`similarity_rows`, the very blocks the
single-process run uses, so the scores are the same bits), every feature once and
``combined`` fused from them. ``calibrate`` and ``evaluate`` pass over these rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from monitor.blocks.workers import DaskRows
from monitor.calibration.buckets import COMBINED
from monitor.calibration.fusion import fuse_scores
from monitor.calibration.protocol import PooledTrials, Trials, similarity_rows
from monitor.features.base import embedding_backend, set_embedding_backend

if TYPE_CHECKING:
    from monitor.blocks.workers import Client

#: progress(done, total, "pass k") as the row blocks of each pass over the matrices finish.
BlockProgress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class TrialLoader:
    """Picklable loader of a block's score rows on a worker (a :class:`DaskRows` load).

    Called as ``loader(r0, r1, truth, tests_f, templates_f, ...)`` with the pooled observations
    of ``features`` in order (scattered once); returns ({name: S rows (r1 − r0, N)} for each of
    ``names``, truth rows). Every feature is scored once; ``combined`` is their fused score
    with the ``fusion`` weights.
    """

    names: tuple[str, ...]
    features: tuple[str, ...]
    N: int
    backend: str
    fusion: Mapping[str, float] = field(default_factory=dict)

    def __call__(
        self, r0: int, r1: int, truth: np.ndarray, *pooled: np.ndarray
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        if "embedding" in self.features:
            set_embedding_backend(self.backend)  # a worker does not share the caller's env
        arrays = dict(zip(self.features, zip(pooled[::2], pooled[1::2], strict=True), strict=True))
        wanted = self.features if COMBINED in self.names else self.names
        scores = {f: similarity_rows(f, *arrays[f], self.N, r0, r1) for f in wanted}
        if COMBINED in self.names:
            scores[COMBINED] = fuse_scores({f: scores[f] for f in self.features}, self.fusion)
        return {name: scores[name] for name in self.names}, truth[r0:r1]


def pooled_arrays(pooled: PooledTrials) -> list[np.ndarray]:
    """What every block needs, in :class:`TrialLoader` order: the truth, then the tests and
    templates of each feature."""
    features = pooled.tests
    return [pooled.truth, *(a for f in features for a in (pooled.tests[f], pooled.templates[f]))]


def trial_rows(
    client: Client,
    pooled: PooledTrials,
    names: Sequence[str],
    *,
    fusion: Mapping[str, float] | None = None,
    progress: BlockProgress | None = None,
) -> DaskRows:
    """The setting's score matrices of ``names`` (features, and ``combined`` with ``fusion``)
    in row blocks of ``{name: S rows}``, made on the workers from the pooled observations,
    which go to every worker once."""
    features = tuple(pooled.tests)
    loader = TrialLoader(tuple(names), features, pooled.N, embedding_backend(), dict(fusion or {}))
    return DaskRows(
        client,
        loader,
        (pooled.T, pooled.N),
        blocks=pooled.blocks(),
        shared=pooled_arrays(pooled),
        progress=_PassTicks(progress) if progress is not None else None,
    )


class _PassTicks:
    """DaskRows progress → ``progress(done, total, "pass k")``, counting the passes."""

    def __init__(self, progress: BlockProgress) -> None:
        self.progress = progress
        self.passes = 0

    def __call__(self, done: int, total: int) -> None:
        self.passes += done == 1
        self.progress(done, total, f"pass {self.passes}")


def _rows_scores(scores: dict[str, np.ndarray], m: np.ndarray, row0: int) -> dict[str, np.ndarray]:
    """Row function: the block's scores themselves."""
    return scores


def gathered_trials(client: Client, pooled: PooledTrials) -> Trials:
    """:class:`Trials` whose matrices are scored on the workers and brought here whole: what
    cross-fitting the LID weights needs (the fit sees every dev score at once)."""
    names = tuple(pooled.tests)
    blocks = trial_rows(client, pooled, names).map(_rows_scores)
    return pooled.with_scores(
        {name: np.concatenate([block[name] for block in blocks]) for name in names}
    )
