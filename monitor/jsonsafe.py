"""The one rule for numbers that JSON cannot hold (NaN, ±inf) and numpy values.

Reports and files: :func:`jsonable` — NaN becomes ``null``, ±inf the strings ``"inf"`` and
``"-inf"`` (a reader tells "no figure" from "unbounded"; the calibration file reads them back),
numpy scalars and arrays Python numbers and lists. ``inf="null"`` writes ±inf as ``null`` too,
for output read as plain numbers (``voxmeter score``/``compose --json``). The daemon's figures
(ledger, alerts, MQTT): :func:`finite_bits` — a number must stay a number for gauges and
dashboards, so ±inf is clamped to ±1e9 bits, far beyond any real figure (log2 of the number
of templates).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

FINITE_BITS_LIMIT = 1e9

InfPolicy = Literal["string", "null"]
"""How :func:`jsonable` writes ±inf: the strings "inf"/"-inf", or null like NaN."""


def jsonable(value: Any, *, inf: InfPolicy = "string") -> Any:
    """A copy of ``value`` that ``json.dumps(..., allow_nan=False)`` accepts (see module)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, inf=inf) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v, inf=inf) for v in value]
    if isinstance(value, np.ndarray):
        return [jsonable(v, inf=inf) for v in value.tolist()]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        if math.isnan(value) or inf == "null":
            return None
        return "inf" if value > 0 else "-inf"
    return value


def finite_bits(bits: float) -> float:
    """A daemon figure as a finite float: ±inf clamped to ±1e9 bits (see module)."""
    return float(np.clip(bits, -FINITE_BITS_LIMIT, FINITE_BITS_LIMIT))
