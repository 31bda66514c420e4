"""Reference inputs the metric tests share (DESIGN §7), and a memory probe."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

#: Paper 003's 4 × 4 matrix (DESIGN §7.4): pooled EER 50 % while every row's maximum is its truth.
S4 = np.array(
    [
        [0.9, 0.8, 0.8, 0.8],
        [0.7, 0.6, 0.6, 0.6],
        [0.4, 0.5, 0.4, 0.4],
        [0.2, 0.2, 0.3, 0.2],
    ]
)
M4 = np.array([0, 0, 1, 2])

#: The small pooled example of DESIGN §7.6: target and non-target scores.
TAR = [0.3, 0.6, 0.8, 0.9]
NON = [0.1, 0.2, 0.4, 0.5, 0.7]


def traced_peak_bytes(function: Callable[[], Any]) -> int:
    """Peak bytes Python allocated while ``function`` ran (numpy buffers included)."""
    tracemalloc.start()
    try:
        function()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak
