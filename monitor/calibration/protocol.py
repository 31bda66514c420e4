"""The trial protocol of paper 000 eq. 6, on utterances grouped by speech seconds.

Each speaker has K utterances in a fixed order, used circularly. For a start S the test block is
T consecutive utterances from S and the template block is D consecutive utterances starting
Δ = floor((K − T − D) / 2) after the test block, so the two never overlap and are as far apart
as possible. Every start S = 0..K−1 gives one trial per speaker; pooling them gives N·K rank
observations (K-fold).

Lengths are asked for in seconds of speech (a length bucket L): T is the smallest number
of consecutive utterances from S whose speech reaches L, and D likewise for the template
length. Observations pool by addition (histograms) or a seconds-weighted mean (embeddings), so
longer segments are built from per-utterance observations without extracting audio again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from scipy import sparse

from monitor.corpus.speakers import SpeakerUtterances
from monitor.features.base import TemplateBatch, get_feature

logger = logging.getLogger(__name__)

MEAN_POOLED: frozenset[str] = frozenset({"embedding"})
"""Features whose observations pool by a seconds-weighted mean then L2 normalisation; the
others (histograms of counts) pool by addition."""


class NotEnoughSpeakersError(ValueError):
    """A length setting that fewer than 2 speakers of the corpus can supply."""


def protocol_splits(K: int, T: int, D: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Eq. 6 with Δ = floor((K−T−D)/2): for S = 0..K−1, (test indices (T,), template (D,))."""
    if K < 2 or T < 1 or D < 1 or T + D > K:
        raise ValueError(f"eq. 6 needs K >= 2, T >= 1, D >= 1 and T + D <= K; got {K=}, {T=}, {D=}")
    return [_split(K, start, T, D) for start in range(K)]


def length_split(
    seconds: np.ndarray, start: int, test_seconds: float, template_seconds: float | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """Eq. 6 split at ``start`` for lengths in speech seconds; ``None`` when K is too short.

    ``seconds`` (K,) is the speech behind each utterance. T is the fewest utterances from
    ``start`` reaching ``test_seconds``; D the fewest reaching ``template_seconds`` in the block
    Δ = floor((K−T−D)/2) after the test (``None``: every remaining utterance, D = K − T).
    """
    seconds = np.asarray(seconds, dtype=np.float64)
    K = seconds.size
    if K < 2:
        return None
    order = (start + np.arange(K)) % K
    reach = np.cumsum(seconds[order])
    T = int(np.searchsorted(reach, test_seconds - 1e-9)) + 1
    if T >= K:
        return None
    if template_seconds is None:
        D = K - T
    else:
        # Block of d utterances starting at T + floor((K-T-d)/2): its speech for every d.
        d = np.arange(1, K - T + 1)
        first = T + (K - T - d) // 2
        doubled = np.concatenate([[0.0], np.cumsum(np.concatenate([seconds[order]] * 2))])
        block = doubled[first + d] - doubled[first]
        enough = np.flatnonzero(block >= template_seconds - 1e-9)
        if enough.size == 0:
            return None
        D = int(d[enough[0]])
    return _split(K, start, T, D)


def _split(K: int, start: int, T: int, D: int) -> tuple[np.ndarray, np.ndarray]:
    """Test and template indices of eq. 6 at ``start`` (Δ = floor((K−T−D)/2))."""
    delta = (K - T - D) // 2
    return (start + np.arange(T)) % K, (start + T + delta + np.arange(D)) % K


@dataclass(frozen=True, kw_only=True)
class TrialFacts:
    """What every closed-set trial of one (test length, template length) setting is, scores aside.

    ``truth`` (T,) true identity index; ``aliases`` (N,) identity order; ``start`` (T,) eq. 6
    start; ``test_seconds``/``template_seconds`` (T,) speech behind the test and behind its true
    template. ``dropped`` lists speakers too short for this setting.
    """

    truth: np.ndarray
    aliases: tuple[str, ...]
    start: np.ndarray
    test_seconds: np.ndarray
    template_seconds: np.ndarray
    dropped: tuple[str, ...] = ()

    @property
    def N(self) -> int:
        return len(self.aliases)

    @property
    def T(self) -> int:
        return int(self.truth.size)

    def facts(self) -> dict[str, Any]:
        """The shared fields, to build the other kind of trials from these."""
        return {f.name: getattr(self, f.name) for f in fields(TrialFacts)}


@dataclass(frozen=True, kw_only=True)
class Trials(TrialFacts):
    """The trials with ``scores[f]`` (T, N): similarities of each test to the N templates (rows
    of one start S share templates)."""

    scores: Mapping[str, np.ndarray]


def pool_groups(
    feature: str, values: np.ndarray, weights: np.ndarray, groups: np.ndarray | sparse.csr_array
) -> np.ndarray:
    """Pool utterance observations (U, D) into groups: (G, U) 0/1 membership -> (G, D).

    Histograms add; embeddings average weighted by seconds and are re-normalised (the same
    arithmetic as ``Feature.pool``, as one matrix product). ``groups`` may be sparse: a group
    holds a few utterances of one speaker, so at corpus scale (G = K·N rows, U utterances) a
    dense membership matrix would hold K·N·U numbers, nearly all zero.
    """
    groups = sparse.csr_array(groups, dtype=np.float64)
    if feature in MEAN_POOLED:
        pooled = np.asarray(groups.multiply(np.asarray(weights, dtype=np.float64)) @ values)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return np.divide(pooled, norms, out=np.zeros_like(pooled), where=norms > 0)
    return np.asarray(groups @ values)


def _membership(rows: list[np.ndarray], columns: list[np.ndarray], shape: tuple[int, int]) -> Any:
    """A sparse 0/1 matrix with ones at (rows[k], columns[k])."""
    row = np.concatenate(rows)
    column = np.concatenate(columns)
    ones = np.ones(row.size, dtype=np.float64)
    return sparse.csr_array((ones, (row, column)), shape=shape)


def speech_listing(speakers: Sequence[SpeakerUtterances], limit: int = 20) -> str:
    """'alias 3.1 s (4 utt.), ...' for the speakers with least speech first (at most ``limit``)."""
    ordered = sorted(speakers, key=lambda s: s.total_seconds)
    shown = ", ".join(
        f"{s.alias} {s.total_seconds:.1f} s ({len(s.utterances)} utt.)" for s in ordered[:limit]
    )
    return shown + (f", ... ({len(ordered) - limit} more)" if len(ordered) > limit else "")


def describe_template(template_seconds: float | None) -> str:
    return "all-remaining-speech" if template_seconds is None else f"{template_seconds:g} s"


def plan_splits(
    speakers: Sequence[SpeakerUtterances], test_seconds: float, template_seconds: float | None
) -> tuple[list[SpeakerUtterances], list[list[tuple[np.ndarray, np.ndarray]]], list[str]]:
    """Speakers with an eq. 6 split at every start, their splits, and the aliases dropped."""
    usable: list[SpeakerUtterances] = []
    splits: list[list[tuple[np.ndarray, np.ndarray]]] = []
    dropped: list[str] = []
    for speaker in speakers:
        K = len(speaker.utterances)
        per_start = [
            length_split(speaker.speech_seconds, s, test_seconds, template_seconds)
            for s in range(K)
        ]
        if K < 2 or any(split is None for split in per_start):
            dropped.append(speaker.alias)
            continue
        usable.append(speaker)
        splits.append([split for split in per_start if split is not None])
    return usable, splits, dropped


@dataclass(frozen=True, kw_only=True)
class PooledTrials(TrialFacts):
    """The observations behind the trials of one setting, before any score is computed.

    ``tests[f]`` (T, D_f) pooled test observations, row ``s·N + i`` being speaker i's test at
    start s; ``templates[f]`` (K·N, D_f) the templates, rows ``s·N .. (s+1)·N`` being those the
    tests of start s are scored against.
    """

    tests: Mapping[str, np.ndarray]
    templates: Mapping[str, np.ndarray]

    def with_scores(self, scores: Mapping[str, np.ndarray]) -> Trials:
        """These trials with their (T, N) score matrices."""
        return Trials(scores=scores, **self.facts())

    def blocks(self) -> list[tuple[int, int]]:
        """Row blocks [r0, r1) of the score matrices: each within one start, of at most
        :func:`~monitor.disclosure.ranks.chunk_rows` rows. Scores are always computed in these
        blocks, in this process or on Dask workers, so both give the same bits."""
        from monitor.disclosure.ranks import chunk_rows

        N = self.N
        step = min(N, chunk_rows(N))
        return [
            (r0, min(r0 + step, s + N)) for s in range(0, self.T, N) for r0 in range(s, s + N, step)
        ]


def similarity_rows(
    name: str, tests: np.ndarray, templates: np.ndarray, N: int, r0: int, r1: int
) -> np.ndarray:
    """Scores (r1 − r0, N) of feature ``name``: pooled test rows [r0, r1) (all of one start)
    against that start's N templates (``tests``, ``templates`` as in :class:`PooledTrials`).
    On one BLAS thread, as on a Dask worker: a matrix product split over threads may round
    differently (the embedding's cosines differed in the last bit at N = 300)."""
    from monitor.disclosure.ranks import single_threaded_blas

    s = r0 // N
    batch = TemplateBatch(name, templates[s * N : (s + 1) * N])
    with single_threaded_blas():
        return get_feature(name).similarities(tests[r0:r1], batch)


def pool_trials(
    speakers: Sequence[SpeakerUtterances],
    *,
    test_seconds: float,
    template_seconds: float | None,
    features: Sequence[str],
) -> PooledTrials:
    """The pooled tests and templates of eq. 6 for every start S (see :func:`score_trials`)."""
    usable, splits, dropped = plan_splits(speakers, test_seconds, template_seconds)
    if len(usable) < 2:
        raise NotEnoughSpeakersError(
            f"only {len(usable)} speaker(s) have enough speech for {test_seconds:g} s tests "
            f"and {describe_template(template_seconds)} templates"
        )
    if dropped:
        logger.info("%d speaker(s) too short for this setting: %s", len(dropped), dropped)

    N = len(usable)
    K_max = max(len(s.utterances) for s in usable)
    offsets = np.cumsum([0] + [len(s.utterances) for s in usable])
    U = int(offsets[-1])
    # Sparse membership over all utterances of all speakers: row s·N + i is speaker i at start s.
    test_rows: list[np.ndarray] = []
    test_columns: list[np.ndarray] = []
    template_rows: list[np.ndarray] = []
    template_columns: list[np.ndarray] = []
    for i, per_start in enumerate(splits):
        K = len(per_start)
        for s in range(K_max):
            test_idx, template_idx = per_start[s % K]
            test_rows.append(np.full(test_idx.size, s * N + i))
            test_columns.append(offsets[i] + test_idx)
            template_rows.append(np.full(template_idx.size, s * N + i))
            template_columns.append(offsets[i] + template_idx)
    test_groups = _membership(test_rows, test_columns, (K_max * N, U))
    template_groups = _membership(template_rows, template_columns, (K_max * N, U))
    seconds = np.concatenate([s.speech_seconds for s in usable])

    tests: dict[str, np.ndarray] = {}
    templates: dict[str, np.ndarray] = {}
    for name in features:
        values = np.concatenate([np.asarray(s.values[name], dtype=np.float64) for s in usable])
        weights = np.concatenate([np.asarray(s.weights[name], dtype=np.float64) for s in usable])
        tests[name] = pool_groups(name, values, weights, test_groups)
        templates[name] = pool_groups(name, values, weights, template_groups)
    return PooledTrials(
        tests=tests,
        templates=templates,
        truth=np.tile(np.arange(N), K_max),
        aliases=tuple(s.alias for s in usable),
        start=np.repeat(np.arange(K_max), N),
        test_seconds=np.asarray(test_groups @ seconds),
        template_seconds=np.asarray(template_groups @ seconds),
        dropped=tuple(dropped),
    )


def score_trials(
    speakers: Sequence[SpeakerUtterances],
    *,
    test_seconds: float,
    template_seconds: float | None,
    features: Sequence[str],
) -> Trials:
    """Trials of eq. 6 for every start S, pooled (K-fold), as (T, N) scores per feature.

    Speakers who cannot give a test of ``test_seconds`` and a disjoint template of
    ``template_seconds`` at every start are dropped (listed in ``Trials.dropped``). Starts run
    over 0..max K − 1, a speaker with fewer utterances using S mod K.
    """
    pooled = pool_trials(
        speakers, test_seconds=test_seconds, template_seconds=template_seconds, features=features
    )
    return scored_trials(pooled)


def scored_trials(pooled: PooledTrials) -> Trials:
    """The trials of ``pooled`` with their (T, N) scores, computed here block by block."""
    scores = {
        name: np.concatenate(
            [
                similarity_rows(name, tests, pooled.templates[name], pooled.N, *rows)
                for rows in pooled.blocks()
            ]
        )
        for name, tests in pooled.tests.items()
    }
    return pooled.with_scores(scores)
