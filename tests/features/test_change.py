"""The change score (cumulative sums) against a slow, obvious reference: for each candidate,
the Gaussian log-likelihood of the frames under two means against one, the covariance known;
and the discriminant projection's whitening."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.features.change import cepstra, fit_projection, mean_shift_scores, segment_means


def reference(z: np.ndarray, *, min_side: int, per_second: int) -> tuple[list[int], list]:
    """max log-likelihood with a mean each side − with one mean, frames i.i.d. with covariance
    ``per_second`` · I (so a 1 s mean has the identity), one candidate at a time."""
    z = np.asarray(z, dtype=np.float64)

    def loglik(*segments: np.ndarray) -> float:
        return sum(-0.5 * float(np.sum((s - s.mean(axis=0)) ** 2)) / per_second for s in segments)

    frames, scores = [], []
    for t in range(min_side, z.shape[0] - min_side + 1):
        frames.append(t)
        scores.append(loglik(z[:t], z[t:]) - loglik(z))
    return frames, scores


@pytest.mark.parametrize(("min_side", "per_second"), [(50, 100), (1, 100), (30, 7)])
def test_glr_equals_the_slow_reference(
    rng: np.random.Generator, min_side: int, per_second: int
) -> None:
    # two "voices": means 3 units apart, a change at frame 130 of 230
    z = np.concatenate([rng.normal(0.0, 10.0, (130, 6)), rng.normal(3.0, 10.0, (100, 6))]) + 40.0
    got = mean_shift_scores(z, min_side=min_side, per_second=per_second)
    frames, scores = reference(z, min_side=min_side, per_second=per_second)
    assert got.frames.tolist() == frames
    np.testing.assert_allclose(got.scores, scores, rtol=1e-9, atol=1e-9 * max(scores))
    assert abs(got.best()[0] - 130) <= 10


def test_one_speaker_scores_about_half_a_chi_square(rng: np.random.Generator) -> None:
    """Frames whose 1 s means have identity covariance: GLR at a fixed point ≈ ½ χ²ₖ (mean k/2)."""
    k = 8
    at_middle = [mean_shift_scores(rng.normal(0.0, 10.0, (300, k))).scores[100] for _ in range(400)]
    assert np.mean(at_middle) == pytest.approx(k / 2, rel=0.15)


def test_the_projection_whitens_one_speakers_seconds(rng: np.random.Generator) -> None:
    speakers = np.repeat(np.arange(30), 20)
    centres = rng.normal(0.0, 3.0, (30, 5)) * [1.0, 1.0, 0.01, 0.01, 0.01]  # speakers differ in 2
    means = centres[speakers] + rng.normal(0.0, 1.0, (600, 5)) @ rng.normal(size=(5, 5))
    projection = fit_projection(means, speakers, 2)
    within = (means - centres[speakers]) @ projection
    np.testing.assert_allclose(np.cov(within, rowvar=False), np.eye(2), atol=0.2)
    # the two discriminant directions carry the speakers' differences: their projected
    # centres spread far more than one speaker's own seconds
    assert np.var(centres @ projection, axis=0).min() > 5.0


def test_cepstra_are_the_dct_of_the_bands() -> None:
    bands = np.random.default_rng(1).normal(size=(7, 80))
    k = np.arange(1, 21)
    slow = np.array(
        [[np.sum(row * np.cos(np.pi * j * (np.arange(80) + 0.5) / 80)) for j in k] for row in bands]
    )
    np.testing.assert_allclose(cepstra(bands, 20), slow, rtol=1e-9, atol=1e-9)
    # c0 (the frame's loudness) is not among them: a louder frame has the same cepstra
    np.testing.assert_allclose(cepstra(bands + 12.0, 20), cepstra(bands, 20), atol=1e-8)


def test_segment_means_and_bad_arguments() -> None:
    x = np.arange(10.0)[:, None]
    np.testing.assert_array_equal(segment_means(x, 4), [[1.5], [5.5]])
    assert mean_shift_scores(np.zeros((60, 3)), min_side=50).best() == (-1, 0.0)
    with pytest.raises(ValueError, match="min_side"):
        mean_shift_scores(np.zeros((60, 3)), min_side=0)
    with pytest.raises(ValueError, match="projected"):
        mean_shift_scores(np.zeros(60))
    with pytest.raises(ValueError, match="count"):
        cepstra(np.zeros((5, 80)), 80)
    with pytest.raises(ValueError, match="two speakers"):
        fit_projection(np.zeros((4, 3)), [1, 1, 1, 1], 2)
