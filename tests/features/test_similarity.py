"""Similarities: JS divergence properties, a slow reference, chunking, cosine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from monitor.features import similarity
from monitor.features.similarity import cosine, js_divergence, neg_js_divergence


def slow_js(p: np.ndarray, q: np.ndarray) -> float:
    """Textbook JS divergence in bits, one pair at a time."""
    p = p / p.sum()
    q = q / q.sum()
    m = (p + q) / 2

    def kl(a: np.ndarray, b: np.ndarray) -> float:
        keep = a > 0
        return float(np.sum(a[keep] * np.log2(a[keep] / b[keep])))

    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


counts = arrays(np.float64, (4, 9), elements=st.integers(0, 30).map(float))


def test_identical_histograms_diverge_by_zero(rng: np.random.Generator) -> None:
    P = rng.integers(0, 20, (5, 107)).astype(float) + 1
    assert np.allclose(np.diag(js_divergence(P, P)), 0.0, atol=1e-12)
    # counts and their normalised distribution are the same histogram
    assert np.allclose(np.diag(js_divergence(P, 3 * P)), 0.0, atol=1e-12)


def test_disjoint_histograms_diverge_by_one_bit() -> None:
    P = np.array([[3.0, 1.0, 0.0, 0.0]])
    Q = np.array([[0.0, 0.0, 5.0, 2.0]])
    assert js_divergence(P, Q)[0, 0] == pytest.approx(1.0)
    assert neg_js_divergence(P, Q)[0, 0] == pytest.approx(-1.0)


@settings(max_examples=60, deadline=None)
@given(counts, counts)
def test_symmetric_bounded_and_matches_reference(P: np.ndarray, Q: np.ndarray) -> None:
    P[:, 0] += 1  # the empty-row convention is tested separately
    Q[:, 0] += 1
    J = js_divergence(P, Q)
    assert J.shape == (4, 4)
    assert np.allclose(J, js_divergence(Q, P).T, atol=1e-12)
    assert np.all((J >= 0) & (J <= 1))
    reference = np.array([[slow_js(p, q) for q in Q] for p in P])
    assert np.allclose(J, reference, atol=1e-10)


def test_chunked_computation_equals_one_block(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    P = rng.integers(0, 9, (37, 39)).astype(float)
    Q = rng.integers(0, 9, (11, 39)).astype(float)
    whole = js_divergence(P, Q)
    monkeypatch.setattr(similarity, "_CHUNK_ELEMENTS", 39 * 11 * 3)  # 3 tests per chunk
    assert np.array_equal(js_divergence(P, Q), whole)


def test_empty_histogram_ties_with_every_template() -> None:
    P = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
    Q = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    J = js_divergence(P, Q)
    assert np.all(J[0] == 1.0)  # no evidence: every identity scores the same
    assert np.all(J[:, 2] == 1.0)  # an empty template matches nothing
    assert J[1, 1] < 1.0


def test_bad_inputs_are_named() -> None:
    with pytest.raises(ValueError, match="negative"):
        js_divergence(np.array([[1.0, -1.0]]), np.array([[1.0, 1.0]]))
    with pytest.raises(ValueError, match="dimension"):
        js_divergence(np.ones((2, 3)), np.ones((2, 4)))
    with pytest.raises(ValueError, match="NaN"):
        cosine(np.array([[np.nan, 1.0]]), np.ones((1, 2)))


def test_cosine_against_reference(rng: np.random.Generator) -> None:
    A = rng.standard_normal((6, 256))
    B = rng.standard_normal((4, 256))
    reference = np.array([[a @ b / np.linalg.norm(a) / np.linalg.norm(b) for b in B] for a in A])
    assert np.allclose(cosine(A, B), reference)
    assert np.allclose(np.diag(cosine(A, A)), 1.0)
    assert np.all(cosine(np.zeros((1, 256)), B) == 0.0)
