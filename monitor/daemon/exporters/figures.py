"""Figures both exporters publish in the same shape, so Prometheus and MQTT always agree."""

from __future__ import annotations

from monitor.daemon.events import BOUNDS, CompositionBounds


def bounds_bits(bounds: CompositionBounds) -> dict[str, float]:
    """Composition bounds in bits keyed by :data:`BOUNDS` (basic, advanced, optimal)."""
    values = (bounds.basic_bits, bounds.advanced_bits, bounds.optimal_bits)
    return dict(zip(BOUNDS, values, strict=True))
