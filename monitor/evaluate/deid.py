"""Paper 002: how much a protection (voice conversion, anonymisation) hides speakers, from
speaker similarity matrices of original and protected versions of the same utterances."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from monitor.calibration.protocol import (
    SpeakerUtterances,
)
from monitor.errors import InputError
from monitor.evaluate.results import ProtectedAudit

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)


def protected_audit(
    original: Sequence[SpeakerUtterances],
    protected: Sequence[SpeakerUtterances],
    *,
    corpus: str,
    feature: str = "embedding",
) -> ProtectedAudit:
    """M_OO, M_OP, M_PP, DeID and GVD on utterances present in both corpora (same speaker
    folder and file stem); segment = utterance, oracle (PAV) calibration per matrix, pairs of
    the same utterance left out of all three."""
    from monitor.disclosure.similarity_matrices import (
        deid,
        diagonal_dominance,
        gvd,
        oracle_pair_llr,
        speaker_similarity_matrix,
    )
    from monitor.features.base import TemplateBatch, get_feature

    rows_o, rows_p, speaker_of = _shared_utterances(original, protected, feature)
    aliases = tuple(dict.fromkeys(speaker_of))
    if len(aliases) < 2:
        raise InputError(
            corpus,
            "fewer than 2 speakers share 2 or more utterances (same folder and file name) "
            "with the evaluation corpus",
        )
    X_o, X_p = np.concatenate(rows_o), np.concatenate(rows_p)
    labels = np.array(speaker_of)
    extractor = get_feature(feature)

    def matrix(A: np.ndarray, B: np.ndarray) -> np.ndarray:
        scores = extractor.similarities(A, TemplateBatch(feature, B))
        return speaker_similarity_matrix(oracle_pair_llr(scores, labels), labels)

    M_OO, M_OP, M_PP = matrix(X_o, X_o), matrix(X_o, X_p), matrix(X_p, X_p)
    return ProtectedAudit(
        corpus=corpus,
        feature=feature,
        aliases=tuple(sorted(aliases)),  # the matrices' order (np.unique)
        segments=int(labels.size),
        M_OO=M_OO,
        M_OP=M_OP,
        M_PP=M_PP,
        D_diag_OO=diagonal_dominance(M_OO),
        D_diag_OP=diagonal_dominance(M_OP),
        D_diag_PP=diagonal_dominance(M_PP),
        DeID=deid(M_OO, M_OP),
        GVD_dB=gvd(M_OO, M_PP),
    )


def _shared_utterances(
    original: Sequence[SpeakerUtterances], protected: Sequence[SpeakerUtterances], feature: str
) -> tuple[list[np.ndarray], list[np.ndarray], list[str]]:
    """The ``feature`` rows of the utterances both corpora hold (same speaker folder and file
    stem), original and protected side by side, and whose each is: only a speaker with 2 or
    more of them can be compared to itself."""
    by_alias = {s.alias: s for s in protected}
    rows_o: list[np.ndarray] = []
    rows_p: list[np.ndarray] = []
    speaker_of: list[str] = []
    for speaker in original:
        other = by_alias.get(speaker.alias)
        if other is None:
            continue
        index = {u: i for i, u in enumerate(other.utterances)}
        common = [(i, index[u]) for i, u in enumerate(speaker.utterances) if u in index]
        if len(common) < 2:
            continue
        mine, theirs = (np.array(c) for c in zip(*common, strict=True))
        rows_o.append(np.asarray(speaker.values[feature])[mine])
        rows_p.append(np.asarray(other.values[feature])[theirs])
        speaker_of += [speaker.alias] * len(common)
    return rows_o, rows_p, speaker_of
