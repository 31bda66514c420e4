"""A synthetic score matrix made block by block, the same wherever a block is made (tests and
benchmarks of block work)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SyntheticMatrix:
    """A reproducible synthetic (T, N) float32 score matrix made row by row: row i draws, from a
    generator seeded by (seed, i), its true identity, the mated score (normal, raised by
    ``separation``) and then N standard normal scores, the mated one put in place. Any block
    of rows is the same wherever and however it is made."""

    T: int
    N: int
    seed: int = 0
    separation: float = 3.0

    def __call__(self, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray]:
        S = np.empty((r1 - r0, self.N), dtype=np.float32)
        m = np.empty(r1 - r0, dtype=np.int64)
        for i in range(r0, r1):
            rng = np.random.default_rng([self.seed, i])
            m[i - r0] = rng.integers(self.N)
            mated = np.float32(rng.standard_normal(dtype=np.float32) + self.separation)
            S[i - r0] = rng.standard_normal(self.N, dtype=np.float32)
            S[i - r0, m[i - r0]] = mated
        return S, m
