"""Training and applying the semi-informed attacker (:mod:`monitor.protect.backend`).

Training: the corpus's *train* speakers (``speakers.tsv``'s ``original_split``, disjoint from
the audited test speakers) anonymised exactly as protected speech is (method, α drawn per
utterance from the same range), their embeddings extracted by the unchanged network, and LDA
fitted on them with the speakers as labels. The LDA dimension is chosen on the training
speakers alone: two folds of speakers, each fitted on one half and scored on the other (EER
of single utterances against one-utterance templates), the dimension of the lower mean EER.

Applying: the attacker's trials are the lazy-informed attacker's (anonymised templates,
anonymised tests), each pooled embedding mapped by the back-end before the cosine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from monitor.calibration.protocol import PooledTrials, SpeakerUtterances
from monitor.protect.backend import Backend, fit_lda
from monitor.protect.mcadams import Alpha

FEATURE = "embedding"
DIMENSIONS = (16, 32, 48, 60, 96, 120)
TRAIN_SEED = 20241
"""Seed of the training copy's α draws (the audit draws with ``DEFAULT_SEED``)."""


def labelled(speakers: Sequence[SpeakerUtterances]) -> tuple[np.ndarray, list[str]]:
    """(n, D) utterance embeddings with evidence and their speakers."""
    rows: list[np.ndarray] = []
    labels: list[str] = []
    for speaker in speakers:
        values = np.asarray(speaker.values[FEATURE], dtype=np.float64)
        live = values[np.linalg.norm(values, axis=1) > 0]
        rows.append(live)
        labels += [speaker.alias] * len(live)
    return np.concatenate(rows), labels


def pair_eer(vectors: np.ndarray, labels: Sequence[str]) -> float:
    """EER of every pair of distinct utterances (cosine of unit rows), same speaker or not."""
    from monitor.disclosure.baselines import eer_sweep

    names = np.asarray(labels)
    scores = vectors @ vectors.T
    upper = np.triu_indices(len(names), k=1)
    mated = names[upper[0]] == names[upper[1]]
    return float(eer_sweep(scores[upper][mated], scores[upper][~mated]))


def choose_dimension(
    vectors: np.ndarray, labels: Sequence[str], dimensions: Sequence[int] = DIMENSIONS
) -> tuple[int, dict[int, float]]:
    """The LDA dimension of the lower two-fold EER over the training speakers, and each
    dimension's EER (those a half cannot hold are replaced by the most it can)."""
    names = np.unique(np.asarray(labels))
    halves = (set(names[0::2]), set(names[1::2]))
    label_array = np.asarray(labels)
    cap = min(len(h) for h in halves) - 1  # the most a half's LDA can hold
    figures: dict[int, float] = {}
    for dimension in sorted({d for d in dimensions if d <= cap} | {cap}):
        eers = []
        for fit_on, test_on in (halves, halves[::-1]):
            fit_rows = np.isin(label_array, list(fit_on))
            test_rows = np.isin(label_array, list(test_on))
            backend = fit_lda(vectors[fit_rows], label_array[fit_rows], dimension)
            eers.append(pair_eer(backend.apply(vectors[test_rows]), label_array[test_rows]))
        figures[dimension] = float(np.mean(eers))
    best = min(figures, key=figures.__getitem__)
    return best, figures


def fit_chosen(
    vectors: np.ndarray, labels: Sequence[str], *, alpha: Alpha, seed: int, embedding: str
) -> tuple[Backend, dict[str, Any]]:
    """Choose the dimension on the training speakers, then fit on all of them."""
    dimension, validation = choose_dimension(vectors, labels)
    facts: dict[str, object] = {
        "method": "mcadams",
        "alpha": str(alpha),
        "seed": seed,
        "embedding": embedding,
        "speakers": sorted(set(labels)),
        "utterances": len(labels),
    }
    backend = fit_lda(vectors, labels, dimension, facts=facts)
    figures = {
        "dimension": dimension,
        "validation_eer": {str(k): v for k, v in validation.items()},
        "speakers": len(set(labels)),
        "utterances": len(labels),
    }
    return backend, figures


def semi_informed_trials(protected: PooledTrials, backend: Backend) -> PooledTrials:
    """The lazy-informed attacker's trials with every pooled embedding mapped by the
    back-end (the cosine of the mapped vectors is the attacker's score)."""
    return dataclasses.replace(
        protected,
        tests={**protected.tests, FEATURE: backend.apply(protected.tests[FEATURE])},
        templates={**protected.templates, FEATURE: backend.apply(protected.templates[FEATURE])},
    )
