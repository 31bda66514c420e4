"""McAdams-coefficient anonymisation: the VoicePrivacy Challenge's signal-processing baseline B2
(Patino et al. 2020; B2 in 2020, 2022 and 2024).

Each 20 ms frame (10 ms hop, square-root Hann window scaled so that the analysis and synthesis
windows overlap-add to one) is modelled by linear prediction of order 20; the complex poles of
the all-pole model are moved along the unit circle, angle φ → sign(φ)·|φ|^α (radians, clipped to
[0, π] in magnitude; real poles stay), the frame's LPC residual is filtered through the modified
all-pole filter and the frames are overlap-added. α < 1 raises the low formants and compresses
the high ones: the spectral envelope, which carries most of who speaks, changes while the
excitation (pitch, timing, words) stays.

Checked against the challenge's scripts (2022 ``anonymise_dir_mcadams.py``, 2024
``anonymise_dir_mcadams_rand_seed.py`` ``anonym_v2``) on corpus utterances; what differs:

- **Level**: the scripts divide the whole output by its peak; a stream cannot know the peak, so
  nothing is normalised here and the level is the model's, clipped when turned back into int16.
  At α 0.7 that output is about 4× louder than the input in RMS and 1.5 % of its samples (up
  to 7 %) clip. Measured on 30 corpus prompts at α 0.7, pocketsphinx's WER: 107.6 % clipped
  as here, 110.5 % peak-normalised as the scripts do, 117.4 % when each frame was given its
  input's energy (tried and dropped: it also lowered the ignorant EER in the α sweep, see
  bench/results/protect-alphas-framelevel.json); no WER cost of the clipping was measurable.
- LPC by the autocorrelation method (Levinson-Durbin) instead of Burg's (``librosa.lpc``); both
  give minimum-phase, stable filters, and on the corpus the mean pole radius differs by 0.001
  and the outputs by about as much as any two framings (measured, negligible).
- Periodic Hann (``np.hanning`` in the scripts is the symmetric one): the products of the two
  windows then sum to exactly one; the scripts' sum ripples by about 0.3 %.
- Frame 0 and the zero-padded last frames are processed too (the 2022 script skips frame 0, both
  drop the incomplete end): the first and last 10 ms are not silenced.
- Pole selection is the same: the 2022 script moves each complex pole with positive angle and
  sets its neighbour (its conjugate, as LAPACK orders them) to the mirrored angle; 2024 moves
  positive and negative angles alike, as here. The clip to [0, π] never acts for α ≤ 1.

Everything is vectorised over frames: autocorrelations by one batched FFT, Levinson-Durbin over
the order, the poles as eigenvalues of stacked companion matrices (``np.linalg.eigvals``), the
new polynomials by multiplying out the roots over the order, the residual as a batched FIR; only
the all-pole synthesis is one ``scipy.signal.lfilter`` call per frame (see :func:`_all_pole`).

:func:`anonymise` processes a whole utterance; :class:`McAdamsStream` the same frames as chunks
of any size arrive, keeping the overlap between calls, so the concatenated output of a stream
equals the whole-utterance output (the same frames, the same arithmetic).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

LPC_ORDER = 20
FRAME_SECONDS = 0.020
HOP_SECONDS = 0.010
ALPHA_RANGE_2024 = (0.5, 0.9)
"""The 2024 challenge's per-utterance draw of α."""
_EPS = float(np.finfo(np.float32).eps)
_ONE = np.ones(1)


@dataclass(frozen=True)
class Alpha:
    """How α is chosen per utterance: fixed (``low == high``) or drawn from U[low, high]."""

    low: float
    high: float

    def __post_init__(self) -> None:
        if not (0.0 < self.low <= self.high <= 1.0):
            raise ValueError(f"McAdams α must lie in (0, 1] with low <= high, got {self!r}")

    @classmethod
    def fixed(cls, alpha: float) -> Alpha:
        return cls(alpha, alpha)

    def draw(self, rng: random.Random) -> float:
        """One utterance's α (the fixed value without touching ``rng``)."""
        if self.low == self.high:
            return self.low
        return rng.uniform(self.low, self.high)

    def __str__(self) -> str:
        return f"{self.low:g}" if self.low == self.high else f"U[{self.low:g}, {self.high:g}]"


def frame_geometry(rate_hz: int) -> tuple[int, int]:
    """(frame length, hop) in samples at ``rate_hz``; the frame is two hops."""
    if rate_hz < 1000:
        raise ValueError(f"sample rate {rate_hz} Hz is too low for 20 ms LPC frames")
    hop = math.floor(HOP_SECONDS * rate_hz)
    return 2 * hop, hop


def _windows(length: int, hop: int) -> np.ndarray:
    """The square-root Hann analysis = synthesis window, scaled so that the product of both,
    overlap-added at ``hop``, sums to one (periodic Hann at 50 % overlap)."""
    hann = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(length) / length)
    window: np.ndarray = np.sqrt(hann * hop / hann.sum())
    return window


def _lpc(frames: np.ndarray, order: int) -> np.ndarray:
    """LPC polynomials (F, order+1), a[:, 0] = 1, by autocorrelation and Levinson-Durbin."""
    F, L = frames.shape
    n_fft = 1 << (2 * L - 1).bit_length()
    spectrum = np.fft.rfft(frames, n_fft, axis=1)
    r = np.fft.irfft(spectrum.real**2 + spectrum.imag**2, n_fft, axis=1)[:, : order + 1]
    r[:, 0] = r[:, 0] * (1.0 + 1e-9) + _EPS  # white-noise floor: silence stays well posed
    a = np.zeros((F, order + 1))
    a[:, 0] = 1.0
    error = r[:, 0].copy()
    for i in range(1, order + 1):
        k = -(a[:, :i] * r[:, i:0:-1]).sum(axis=1) / error
        a[:, 1 : i + 1] += k[:, None] * a[:, i - 1 :: -1][:, :i]
        error *= 1.0 - k * k
    return a


def _roots(a: np.ndarray) -> np.ndarray:
    """Roots (F, p) of the monic polynomials a (F, p+1): eigenvalues of companion matrices."""
    F, p1 = a.shape
    p = p1 - 1
    companion = np.zeros((F, p, p))
    companion[:, 0, :] = -a[:, 1:]
    companion[:, np.arange(1, p), np.arange(p - 1)] = 1.0
    return np.linalg.eigvals(companion)


def _poly(roots: np.ndarray) -> np.ndarray:
    """Monic real polynomials (F, p+1) with the given roots (conjugate pairs), as np.poly."""
    F, p = roots.shape
    c = np.zeros((F, p + 1), dtype=complex)
    c[:, 0] = 1.0
    for j in range(p):
        c[:, 1 : j + 2] -= roots[:, j : j + 1] * c[:, : j + 1]
    return c.real


def _warp(a: np.ndarray, alpha: float) -> np.ndarray:
    """The McAdams polynomials: complex pole angles φ → sign(φ)|φ|^α, magnitudes kept."""
    poles = _roots(a)
    angle = np.angle(poles)
    complex_pole = poles.imag != 0.0  # LAPACK returns real eigenvalues with imag exactly 0
    warped = np.sign(angle) * np.minimum(np.abs(angle) ** alpha, np.pi)
    moved = np.where(complex_pole, np.abs(poles) * np.exp(1j * warped), poles)
    return _poly(moved)


def _fir(frames: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Each frame filtered by its own FIR a (F, p+1), zero initial state (lfilter(a, 1, x))."""
    F = frames.shape[0]
    p = a.shape[1] - 1
    padded = np.concatenate([np.zeros((F, p)), frames], axis=1)
    taps = np.lib.stride_tricks.sliding_window_view(padded, p + 1, axis=1)  # (F, L, p+1)
    filtered: np.ndarray = np.einsum("flk,fk->fl", taps, a[:, ::-1])
    return filtered


def _all_pole(residual: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Each frame through its own all-pole filter 1/a (``lfilter(1, a, x)``, zero initial
    state). ``lfilter`` takes one set of coefficients per call, so this is one call per frame:
    about 10 µs of C each, where a recursion over the frame's samples vectorised across frames
    costs 320 numpy calls per batch whatever its size (10× the CPU for 10 ms chunks)."""
    from scipy.signal import lfilter

    out = np.empty_like(residual)
    for f in range(residual.shape[0]):
        out[f] = lfilter(_ONE, a[f], residual[f])
    return out


def anonymise_frames(frames: np.ndarray, alpha: float, *, order: int = LPC_ORDER) -> np.ndarray:
    """The McAdams frames (F, L) of windowed analysis frames (F, L), before the synthesis
    window and overlap-add."""
    if frames.shape[0] == 0:
        return np.zeros_like(frames, dtype=float)
    frames = np.asarray(frames, dtype=float) + _EPS
    a = _lpc(frames, order)
    residual = _fir(frames, a)
    return _all_pole(residual, _warp(a, alpha))


def _check(samples: np.ndarray, alpha: float) -> np.ndarray:
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"McAdams α must lie in (0, 1], got {alpha}")
    x = np.asarray(samples, dtype=float)
    if x.ndim != 1:
        raise ValueError(f"expected mono samples (n,), got shape {x.shape}")
    return x


def anonymise(
    samples: np.ndarray, rate_hz: int, alpha: float, *, order: int = LPC_ORDER
) -> np.ndarray:
    """The whole utterance (n,) anonymised, float64 in the input's scale, the same length.

    Frames start at 0, hop, 2·hop, ... until one covers the last sample (zeros past the end);
    the first and last hop are faded in and out by the window (no frame before 0 or after the
    end overlaps them)."""
    x = _check(samples, alpha)
    length, hop = frame_geometry(rate_hz)
    n = x.size
    if n == 0:
        return np.zeros(0)
    frames_count = max(1, -(-(n - hop) // hop))  # frames until one ends at or past n
    padded = np.zeros((frames_count + 1) * hop)
    padded[:n] = x
    window = _windows(length, hop)
    frames = np.lib.stride_tricks.sliding_window_view(padded, length)[::hop][:frames_count]
    out = anonymise_frames(frames * window, alpha, order=order) * window
    y = np.zeros(padded.size)
    y[: frames_count * hop] += out[:, :hop].reshape(-1)
    y[hop : (frames_count + 1) * hop] += out[:, hop:].reshape(-1)
    return y[:n]


class McAdamsStream:
    """:func:`anonymise` for audio arriving in chunks of any size: ``process(chunk)`` returns the
    samples that no later frame overlaps any more (one hop behind, plus what waits for a whole
    frame), ``flush()`` the rest at the end of the utterance. The concatenated outputs equal
    ``anonymise`` of the concatenated input: the same frames, the same arithmetic.

    ``reset(alpha)`` starts a new utterance (a Wyoming ``audio-start``)."""

    def __init__(self, rate_hz: int, alpha: float, *, order: int = LPC_ORDER) -> None:
        self.rate_hz = rate_hz
        self.order = order
        self.length, self.hop = frame_geometry(rate_hz)
        self._window = _windows(self.length, self.hop)
        self.reset(alpha)

    def reset(self, alpha: float) -> None:
        _check(np.zeros(0), alpha)
        self.alpha = alpha
        self._pending = np.zeros(0)  # input from the next frame's start on
        self._tail = np.zeros(self.hop)  # the last frame's second half, to overlap-add
        self._seen = 0  # input samples so far
        self._emitted = 0  # output samples so far

    @property
    def held_samples(self) -> int:
        """Input received but not yet given back: the delay the anonymiser adds, in samples."""
        return self._seen - self._emitted

    def process(self, chunk: np.ndarray) -> np.ndarray:
        """The anonymised samples that became final with ``chunk`` (float64; may be empty)."""
        x = _check(chunk, self.alpha)
        self._seen += x.size
        self._pending = np.concatenate([self._pending, x])
        count = max(0, (self._pending.size - self.length) // self.hop + 1)
        return self._frames(count)

    def flush(self) -> np.ndarray:
        """The rest of the utterance: frames until one covers the last sample, zero-padded;
        the stream is then at the start of a new utterance with the same α."""
        left = self._seen - self._emitted
        out = np.zeros(0)
        if left > 0 and self._seen > 0:
            # whole-utterance frames that start before the end of input, as anonymise makes them
            starts_needed = max(1, -(-(self._seen - self.hop) // self.hop))
            done = self._emitted // self.hop  # frames already processed
            count = starts_needed - done
            need = (count - 1) * self.hop + self.length
            self._pending = np.concatenate(
                [self._pending, np.zeros(max(0, need - self._pending.size))]
            )
            out = self._frames(count)
            out = np.concatenate([out, self._tail])[:left]
        self.reset(self.alpha)
        return out

    def _frames(self, count: int) -> np.ndarray:
        if count <= 0:
            return np.zeros(0)
        length, hop = self.length, self.hop
        frames = np.lib.stride_tricks.sliding_window_view(self._pending, length)[::hop][:count]
        out = anonymise_frames(frames * self._window, self.alpha, order=self.order)
        out *= self._window
        y = np.zeros((count + 1) * hop)
        y[:hop] = self._tail
        y[: count * hop] += out[:, :hop].reshape(-1)
        y[hop:] += out[:, hop:].reshape(-1)
        self._tail = y[count * hop :].copy()
        self._pending = self._pending[count * hop :]
        final = y[: count * hop]
        self._emitted += final.size
        return final


def parse_alpha(value: object) -> Alpha:
    """α as a user writes it: one number (fixed), or two (a range drawn per utterance), as
    ``0.8``, ``"0.8"``, ``"0.5,0.9"`` or ``[0.5, 0.9]``; ValueError saying what is accepted."""
    accepted = "a number in (0, 1] or a range LOW,HIGH with 0 < LOW <= HIGH <= 1"
    if isinstance(value, str):
        parts: list[object] = [p.strip() for p in value.split(",")]
    elif isinstance(value, list | tuple):
        parts = list(value)
    else:
        parts = [value]
    try:
        if len(parts) not in (1, 2) or any(isinstance(p, bool) for p in parts):
            raise ValueError
        numbers = [float(p) for p in parts]  # type: ignore[arg-type]
        return Alpha(numbers[0], numbers[-1])
    except (TypeError, ValueError):
        raise ValueError(f"{value!r}: expected {accepted}") from None
