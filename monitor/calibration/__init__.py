"""Trial protocol (paper 000 eq. 6) and calibrations per feature and evidence length (§13)."""

from monitor.calibration.buckets import COMBINED, BucketCalibration, CalibrationSet, load_default
from monitor.calibration.fusion import fuse_scores
from monitor.calibration.protocol import (
    SpeakerUtterances,
    Trials,
    protocol_splits,
    score_trials,
)

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
