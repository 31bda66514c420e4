"""The one retry delay every source, relay and channel waits (numpy-free: the relay process
imports it too)."""

from __future__ import annotations

import random


def backoff_seconds(rng: random.Random, attempt: int, initial: float, cap: float) -> float:
    """Random delay before retry ``attempt`` (1-based): jitter over the upper half of a
    doubling capped at ``cap``, so that devices lost together do not return in step."""
    ceiling = min(cap, initial * 2 ** (attempt - 1))
    return rng.uniform(ceiling / 2, ceiling)
