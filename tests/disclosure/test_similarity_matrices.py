"""Voice similarity matrices, DeID and GVD (DESIGN §4) against §7.7 and a slow reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.disclosure.similarity_matrices import (
    deid,
    diagonal_dominance,
    gvd,
    oracle_pair_llr,
    speaker_similarity_matrix,
)


def slow_similarity(llr, speaker_of, exclude_same=True):
    speakers = sorted(set(speaker_of))
    M = np.zeros((len(speakers), len(speakers)))
    for a, i in enumerate(speakers):
        for b, j in enumerate(speakers):
            values = [
                llr[k, m]
                for k in range(len(speaker_of))
                for m in range(len(speaker_of))
                if speaker_of[k] == i and speaker_of[m] == j and not (exclude_same and k == m)
            ]
            M[a, b] = 1 / (1 + math.exp(-sum(values) / len(values)))
    return M


def test_diagonal_dominance_reference_cases():
    assert diagonal_dominance(np.eye(5)) == 1.0
    assert diagonal_dominance(np.full((5, 5), 0.3)) == pytest.approx(0.0, abs=1e-15)
    assert diagonal_dominance(np.ones((5, 5)) - np.eye(5)) == 1.0
    with pytest.raises(ValueError, match="N >= 2"):
        diagonal_dominance(np.ones((1, 1)))


def test_deid_and_gvd_synthetic():
    M_oo = np.eye(4)
    M_op = 0.5 * np.ones((4, 4))
    M_pp = 0.5 * np.eye(4) + 0.25
    assert deid(M_oo, M_op) == pytest.approx(1.0)
    assert gvd(M_oo, M_pp) == pytest.approx(-3.0103, abs=1e-4)


def test_nothing_changed_gives_zero():
    rng = np.random.default_rng(3)
    M = rng.uniform(0.1, 0.4, (6, 6)) + 0.5 * np.eye(6)
    assert deid(M, M) == pytest.approx(0.0, abs=1e-12)
    assert gvd(M, M) == pytest.approx(0.0, abs=1e-12)


def test_undefined_and_negative_cases_warn():
    flat = np.full((3, 3), 0.3)
    with pytest.warns(RuntimeWarning, match="undefined"):
        assert math.isnan(deid(flat, np.eye(3)))
    with pytest.warns(RuntimeWarning, match="undefined"):
        assert math.isnan(gvd(flat, np.eye(3)))
    assert gvd(np.eye(3), flat) == -math.inf
    with pytest.warns(RuntimeWarning, match="< 0"):
        assert deid(0.5 * np.eye(3), np.eye(3)) == pytest.approx(-1.0)


def test_speaker_matrix_matches_slow_reference(rng):
    speaker_of = np.repeat(np.array(["b", "a", "c", "d"]), [3, 4, 2, 5])
    n = speaker_of.size
    llr = rng.normal(0.0, 2.0, (n, n))
    for exclude in (True, False):
        fast = speaker_similarity_matrix(llr, speaker_of, exclude_same=exclude)
        slow = slow_similarity(llr, speaker_of.tolist(), exclude_same=exclude)
        np.testing.assert_allclose(fast, slow, rtol=1e-12)


def test_speaker_matrix_handles_infinite_llrs():
    speaker_of = np.array([0, 0, 1, 1])
    llr = np.zeros((4, 4))
    llr[0, 1] = np.inf
    llr[2, 0] = -np.inf
    M = speaker_similarity_matrix(llr, speaker_of)
    assert M[0, 0] == 1.0
    assert M[1, 0] == 0.0
    assert M[1, 1] == 0.5
    llr[3, 1] = np.inf
    with pytest.raises(ValueError, match="mixes"):
        speaker_similarity_matrix(llr, speaker_of)


def test_single_segment_speaker_is_rejected_when_excluding_same():
    with pytest.raises(ValueError, match="no segment pair"):
        speaker_similarity_matrix(np.zeros((3, 3)), np.array([0, 0, 1]))


def test_oracle_pipeline_separates_speakers(rng):
    speaker_of = np.repeat(np.arange(6), 5)
    same = speaker_of[:, None] == speaker_of[None, :]
    scores = rng.normal(0.0, 1.0, same.shape) + 2.5 * same
    llr = oracle_pair_llr(scores, speaker_of)
    assert np.all(np.isnan(np.diag(llr)))
    M_oo = speaker_similarity_matrix(llr, speaker_of)
    assert M_oo.shape == (6, 6)
    assert np.all(np.diag(M_oo) > 0.5)
    assert diagonal_dominance(M_oo) > 0.3
    # A "pseudonymiser" that destroys identity: scores independent of the speaker.
    llr_op = oracle_pair_llr(rng.normal(0.0, 1.0, same.shape), speaker_of)
    M_op = speaker_similarity_matrix(llr_op, speaker_of)
    assert deid(M_oo, M_op) > 0.8
