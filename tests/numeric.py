"""Comparing floats computed by different kernels (AVX-512, AVX2, torch's ``default``, another
BLAS): relative to the magnitude of what is compared, never an absolute tolerance on large
values. Float32 networks measured on AVX-512, AVX2 and ``default`` kernels differ by < 2e-6
relative (ECAPA, norm ~320: max |diff| up to 1.5e-4); a wrong port differs by > 1e-2."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

#: Float32 network outputs on any x86 kernel: 50× the largest relative difference measured.
FLOAT32_NETWORK_RTOL = 1e-4


def relative_error(ours: ArrayLike, reference: ArrayLike) -> np.ndarray:
    """Per row: ‖ours − reference‖ / ‖reference‖ (rows are the last axis's vectors)."""
    a, b = np.asarray(ours, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    return np.linalg.norm(a - b, axis=-1) / np.maximum(np.linalg.norm(b, axis=-1), 1e-300)


def assert_relatively_close(ours: ArrayLike, reference: ArrayLike, rtol: float) -> None:
    """Every row of ``ours`` within ``rtol`` of ``reference`` in relative L2 norm."""
    error = relative_error(ours, reference)
    assert np.all(error <= rtol), f"relative L2 error {np.max(error):.3g} > {rtol:g}"
