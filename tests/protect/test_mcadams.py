"""The McAdams anonymiser against a slow per-frame reference (np.roots, np.poly, lfilter), its
streaming form against the whole utterance, and what α does to a resonance."""

from __future__ import annotations

import random

import numpy as np
import pytest
from scipy.signal import lfilter

from monitor.protect import mcadams
from monitor.protect.mcadams import Alpha, McAdamsStream, anonymise, anonymise_frames
from tests.numeric import assert_relatively_close

RATE = 16000


def voiced(seconds: float, *, seed: int = 0, formant_hz: float = 500.0) -> np.ndarray:
    """A buzz at a wandering pitch through two resonances, plus a little noise: speech-like
    enough that every frame has complex poles."""
    rng = np.random.default_rng(seed)
    n = int(seconds * RATE)
    f0 = 120 + 20 * np.sin(2 * np.pi * 0.7 * np.arange(n) / RATE)
    phase = np.cumsum(f0 / RATE)
    pulses = (np.diff(np.floor(phase), prepend=0.0) > 0).astype(float)
    x = pulses + 0.01 * rng.standard_normal(n)
    for hz, r in ((formant_hz, 0.97), (1500.0, 0.95)):
        theta = 2 * np.pi * hz / RATE
        x = lfilter([1.0], [1.0, -2 * r * np.cos(theta), r * r], x)
    return 3000.0 * x / np.abs(x).max()


def reference_frames(frames: np.ndarray, alpha: float) -> np.ndarray:
    """The challenge script's steps, one frame at a time (LPC by scipy's Toeplitz solver)."""
    from scipy.linalg import solve_toeplitz

    out = []
    for frame in frames + mcadams._EPS:
        r = np.correlate(frame, frame, "full")[frame.size - 1 : frame.size + 20]
        r[0] = r[0] * (1 + 1e-9) + mcadams._EPS
        a = np.concatenate([[1.0], solve_toeplitz(r[:20], -r[1:21])])
        poles = np.roots(a)
        angle = np.angle(poles)
        moved = np.where(
            poles.imag != 0,
            np.abs(poles) * np.exp(1j * np.sign(angle) * np.minimum(np.abs(angle) ** alpha, np.pi)),
            poles,
        )
        out.append(lfilter([1.0], np.real(np.poly(moved)), lfilter(a, [1.0], frame)))
    return np.array(out)


def test_frames_match_the_slow_reference() -> None:
    length, hop = mcadams.frame_geometry(RATE)
    x = voiced(0.5)
    frames = np.lib.stride_tricks.sliding_window_view(x, length)[::hop] * mcadams._windows(
        length, hop
    )
    assert_relatively_close(anonymise_frames(frames, 0.8), reference_frames(frames, 0.8), 1e-7)


@pytest.mark.parametrize("chunk", [1, 7, 160, 333, 1024, 4800, "random"])
def test_stream_equals_whole_utterance(chunk: int | str) -> None:
    """REQUIRED: the streamed output equals the whole-utterance output within 1e-4
    relative away from the first and last frame, for any chunking, over two utterances."""
    _, hop = mcadams.frame_geometry(RATE)
    rng = np.random.default_rng(1)
    stream = McAdamsStream(RATE, 0.7)
    for seed, alpha in ((2, 0.7), (3, 0.55)):
        x = voiced(1.3 + 0.01 * seed, seed=seed)
        stream.reset(alpha)
        sizes = rng.integers(1, 2000, size=x.size) if chunk == "random" else None
        outs, start = [], 0
        for i in range(x.size):
            if start >= x.size:
                break
            size = int(sizes[i]) if sizes is not None else int(chunk)
            outs.append(stream.process(x[start : start + size]))
            start += size
            assert 0 <= stream.held_samples < 2 * hop  # never more than one frame held back
        outs.append(stream.flush())
        streamed, whole = np.concatenate(outs), anonymise(x, RATE, alpha)
        assert streamed.size == x.size
        inner = slice(2 * hop, x.size - 2 * hop)
        assert_relatively_close(streamed[inner], whole[inner], 1e-4)
        assert np.linalg.norm(whole[inner]) > 0.1 * np.linalg.norm(x[inner])


def test_alpha_one_gives_back_the_input() -> None:
    """α = 1 moves no pole: residual and synthesis cancel and the windows add to one."""
    _, hop = mcadams.frame_geometry(RATE)
    x = voiced(0.8)
    inner = slice(2 * hop, x.size - 2 * hop)
    assert_relatively_close(anonymise(x, RATE, 1.0)[inner], x[inner], 1e-6)


def test_alpha_below_one_raises_a_low_resonance() -> None:
    """A resonance at φ = 2π·500/16000 rad moves to about φ^α: 500 Hz → ~650 Hz at α = 0.85."""
    x = voiced(2.0, formant_hz=500.0)
    alpha = 0.85
    phi = 2 * np.pi * 500.0 / RATE
    expected_hz = phi**alpha * RATE / (2 * np.pi)

    def peak_hz(signal: np.ndarray) -> float:
        frames = np.lib.stride_tricks.sliding_window_view(signal, 1024)[::512]
        power = (np.abs(np.fft.rfft(frames * np.hanning(1024), axis=1)) ** 2).mean(axis=0)
        hz = np.fft.rfftfreq(1024, 1 / RATE)
        band = (hz > 300) & (hz < 1000)
        # the envelope's peak: power smoothed over the 120 Hz harmonics
        smooth = np.convolve(power, np.ones(9) / 9, mode="same")
        return float(hz[band][np.argmax(smooth[band])])

    assert abs(peak_hz(x) - 500.0) < 60.0
    assert abs(peak_hz(anonymise(x, RATE, alpha)) - expected_hz) < 80.0


def test_bad_alpha_and_shapes_are_refused() -> None:
    for bad in (0.0, -0.2, 1.01, float("nan")):
        with pytest.raises(ValueError, match="α"):
            anonymise(np.zeros(400), RATE, bad)
        with pytest.raises(ValueError, match="α"):
            McAdamsStream(RATE, bad)
    with pytest.raises(ValueError, match="α"):
        Alpha(0.9, 0.5)
    with pytest.raises(ValueError, match="mono"):
        anonymise(np.zeros((2, 400)), RATE, 0.8)


def test_alpha_draws_are_seeded_and_in_range() -> None:
    draws = [Alpha(0.5, 0.9).draw(random.Random(7)) for _ in range(3)]
    assert draws[0] == draws[1] == draws[2]
    many = np.array([Alpha(0.5, 0.9).draw(rng) for rng in [random.Random(1)] for _ in range(500)])
    assert many.min() >= 0.5 and many.max() <= 0.9 and many.std() > 0.08
    assert Alpha.fixed(0.8).draw(random.Random(1)) == 0.8


def test_empty_and_short_input() -> None:
    assert anonymise(np.zeros(0), RATE, 0.8).size == 0
    assert anonymise(np.ones(50), RATE, 0.8).size == 50
    stream = McAdamsStream(RATE, 0.8)
    assert stream.process(np.zeros(0)).size == 0
    assert stream.flush().size == 0
