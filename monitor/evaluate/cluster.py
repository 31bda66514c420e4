"""The audit's score matrices in row blocks on Dask workers (``evaluate --jobs``, ``--scheduler``).

This process pools the tests and templates of a setting (:func:`pool_trials`: T·D values, not
T·N scores) and scatters them to every worker once. Each task then scores one block of test rows
against its start's templates (:func:`similarity_rows`, the very blocks the single-process run
uses, so the scores are the same bits), fuses ``combined`` when asked, and returns only what
merges exactly: mated scores, rank counts, counts per block of the sorted core, LID per trial
(:mod:`monitor.disclosure.matrix_scan`). No (T, N) matrix is ever whole in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from monitor.calibration.fit import COMBINED, fuse_scores
from monitor.calibration.protocol import PooledTrials, Trials, similarity_rows
from monitor.cluster import DaskRows
from monitor.features.base import embedding_backend, set_embedding_backend

if TYPE_CHECKING:
    from distributed import Client

#: progress(done, total, what) of the row blocks of one pass.
BlockProgress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class TrialLoader:
    """Picklable loader of one feature's score rows on a worker (a :class:`DaskRows` load).

    Called as ``loader(r0, r1, truth, tests_f, templates_f, ...)`` with the pooled observations
    of ``features`` in order (scattered once); ``name`` is one of them or ``combined``, the
    fused score of all of them with ``fusion`` weights.
    """

    name: str
    features: tuple[str, ...]
    N: int
    backend: str
    fusion: Mapping[str, float] = field(default_factory=dict)

    def __call__(
        self, r0: int, r1: int, truth: np.ndarray, *pooled: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        if "embedding" in self.features:
            set_embedding_backend(self.backend)  # a worker does not share the caller's env
        arrays = dict(zip(self.features, zip(pooled[::2], pooled[1::2], strict=True), strict=True))
        wanted = self.features if self.name == COMBINED else (self.name,)
        scores = {f: similarity_rows(f, *arrays[f], self.N, r0, r1) for f in wanted}
        S = fuse_scores(scores, self.fusion) if self.name == COMBINED else scores[self.name]
        return S, truth[r0:r1]


def trial_rows(
    client: Client,
    pooled: PooledTrials,
    names: Sequence[str],
    *,
    fusion: Mapping[str, float] | None = None,
    progress: BlockProgress | None = None,
) -> dict[str, DaskRows]:
    """One row source per name (features, and ``combined`` with ``fusion``) over the setting's
    blocks; the pooled observations go to every worker once, shared by all of them."""
    features = tuple(pooled.tests)
    arrays = [pooled.truth, *(a for f in features for a in (pooled.tests[f], pooled.templates[f]))]
    shared = list(client.scatter(arrays, broadcast=True, hash=False))  # see cluster._scattered
    backend = embedding_backend()

    def ticks(name: str) -> Callable[[int, int], None] | None:
        if progress is None:
            return None
        return lambda done, total: progress(done, total, name)

    return {
        name: DaskRows(
            client,
            TrialLoader(name, features, pooled.N, backend, dict(fusion or {})),
            (pooled.T, pooled.N),
            blocks=pooled.blocks(),
            shared=shared,
            progress=ticks(name),
        )
        for name in names
    }


def _rows_scores(S: np.ndarray, m: np.ndarray, row0: int) -> np.ndarray:
    """Row function: the block's scores themselves."""
    return S


def gathered_trials(client: Client, pooled: PooledTrials) -> Trials:
    """:class:`Trials` whose matrices are scored on the workers and brought here whole: what
    cross-fitting the LID weights needs (the fit sees every dev score at once)."""
    rows = trial_rows(client, pooled, tuple(pooled.tests))
    return Trials(
        scores={name: np.concatenate(source.map(_rows_scores)) for name, source in rows.items()},
        truth=pooled.truth,
        aliases=pooled.aliases,
        start=pooled.start,
        test_seconds=pooled.test_seconds,
        template_seconds=pooled.template_seconds,
        dropped=pooled.dropped,
    )
