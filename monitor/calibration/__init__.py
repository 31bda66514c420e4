"""Trial protocol (paper 000 eq. 6) and calibrations per feature and evidence length.

The package hands on its public names lazily (PEP 562): importing one module (the LID fit for
``voxmeter score --matrix``) does not import the protocol, the corpus and the extractors.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from monitor.calibration.buckets import (
        COMBINED,
        BucketCalibration,
        CalibrationSet,
        load_default,
    )
    from monitor.calibration.fusion import fuse_scores
    from monitor.calibration.protocol import (
        SpeakerUtterances,
        Trials,
        protocol_splits,
        score_trials,
    )

_SOURCES = {
    "COMBINED": "buckets",
    "BucketCalibration": "buckets",
    "CalibrationSet": "buckets",
    "load_default": "buckets",
    "fuse_scores": "fusion",
    "SpeakerUtterances": "protocol",
    "Trials": "protocol",
    "protocol_splits": "protocol",
    "score_trials": "protocol",
}

__all__ = [
    "COMBINED",
    "BucketCalibration",
    "CalibrationSet",
    "SpeakerUtterances",
    "Trials",
    "fuse_scores",
    "load_default",
    "protocol_splits",
    "score_trials",
]


def __getattr__(name: str) -> Any:
    if name not in _SOURCES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_SOURCES[name]}"), name)
