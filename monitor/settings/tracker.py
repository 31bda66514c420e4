"""The tracker's settings (who is speaking), apart from the other subsystems' because they are
the most numerous: :mod:`monitor.settings.sections` re-exports them into the one ``Config``."""

from __future__ import annotations

from dataclasses import dataclass

from monitor.settings import checks as check
from monitor.settings.checks import setting

__all__ = ["TRACKER_THRESHOLDS", "TrackerSettings"]

TRACKER_THRESHOLDS: dict[str, tuple[float, float]] = {
    "ecapa": (0.60, 0.50),
    "campplus": (0.60, 0.55),
    "ge2e": (0.75, 0.70),
    "ecapa-int8": (0.60, 0.50),
    "campplus-int8": (0.60, 0.55),
}
"""(profile, cluster) cosine thresholds per embedding backend: cosines of different models live
on different scales. Measured on 3 s windows of 12 corpus speakers (8 adults, 4 children)
against six-utterance profiles: ECAPA same speaker p5 0.62, other speakers p99 0.66 (window to
window: same median 0.61, others p99 0.51); GE2E's other speakers reach 0.82."""


@dataclass(frozen=True)
class TrackerSettings:
    """Who is speaking: local profiles, else online clustering into unknown-N tracks."""

    profile_threshold: float = setting(
        0.0,
        "cosine to a local profile's embedding to follow it; 0 = fitted per window length from "
        "the calibration's cosines (false_member_rate), else the backend's (ecapa 0.60, "
        "campplus 0.60, ge2e 0.75)",
        check.cosine,
        unit="cosine",
    )
    cluster_threshold: float = setting(
        0.0,
        "cosine to an unknown-N track's centroid to join it; 0 = fitted per window length from "
        "the calibration's cosines (false_join_rate), else the backend's (ecapa 0.50, "
        "campplus 0.55, ge2e 0.70)",
        check.cosine,
        unit="cosine",
    )
    false_member_rate: float = setting(
        0.002,
        "share of other voices' windows that pass one profile's threshold, read off the "
        "calibration's cosines at the window's length (when profile_threshold = 0)",
        check.fraction,
    )
    false_join_rate: float = setting(
        0.005,
        "share of other voices' windows close enough to join an unknown-N track, from the "
        "calibration (when cluster_threshold = 0)",
        check.fraction,
    )
    false_change_rate: float = setting(
        0.01,
        "share of one voice's adjacent 1 s parts taken for a change of speaker, from the "
        "calibration",
        check.fraction,
    )
    change_detection: str = setting(
        "pauses",
        "how a change of speaker inside a window is found (the window is cut there and its parts "
        "scored apart, a part under audio.min_window_seconds held back): pauses = where the "
        "loudness dips and the loud frames either side differ more than 99.8 % of one voice's "
        "windows did in the calibration, nothing embedded; band = the best change score "
        "anywhere, two 1 s parts embedded where it is uncertain; off = windows are never cut",
        check.one_of("pauses", "band", "off"),
    )
    false_inconsistent_rate: float = setting(
        0.01,
        "share of one voice's windows (dry or reverberant) whose parts are taken to disagree: "
        "such a window is given to no one, its seconds counted as unattributed; 0 = off",
        check.rare_rate,
    )
    normalise: bool = setting(
        True,
        "decide members on cosines normalised against the N templates (AS-norm) when the "
        "calibration has normalised statistics and there are enough templates; false = raw "
        "cosines",
    )
    sticky: bool = setting(
        True,
        "with normalised decisions, a window continuing a member's turn that may be theirs "
        "(over the ambiguous threshold) stays theirs; false = every window decided alone",
    )
    media: bool = setting(
        False,
        "a source that talks on in many voices (a television, a radio) gets one media track: "
        "the windows no member claims that match its sound are counted there, never as "
        "strangers nor scored (off by default: with ECAPA it took members' windows in the "
        "rooms benchmark); false = they open unknown-N tracks",
    )
    merge_seconds: float = setting(
        6.0, "unknown-N tracks merge only when each holds this much speech", check.positive
    )
    min_open_seconds: float = setting(
        2.0,
        "a window with less speech may join a track but never opens one (too short to know "
        "a new voice from a known one)",
        check.non_negative,
    )
    track_idle_seconds: float = setting(
        300.0, "an unknown-N track with no window for this long expires", check.positive
    )
    max_unknown_tracks: int = setting(
        16, "active unknown-N tracks kept (oldest expires)", check.positive
    )
    show_seconds: float = setting(
        6.0,
        "an unknown-N track appears in Home Assistant only once it holds this much speech "
        "(its figures are in the ledger, MQTT and Prometheus from its first window)",
        check.non_negative,
    )
    show_windows: int = setting(
        2, "... and this many windows (merged fragments' included)", check.positive
    )
    adapt_weight: float = setting(
        0.3,
        "most a member's adapted profile may lean on the room's windows (the rest is the "
        "enrolment); 0 = members' profiles never adapt",
        check.share,
    )
    adapt_seconds: float = setting(
        60.0,
        "speech of confident windows at which the room's share is half of adapt_weight",
        check.positive,
    )
    adapt_margin: float = setting(
        0.05,
        "a window teaches a member's adapted profile only this far (cosine) above the member "
        "threshold on the enrolled profile, and above every other profile and unknown track",
        check.non_negative,
        unit="cosine",
    )
    adapt_drift: float = setting(
        0.95,
        "an adapted profile never falls below this cosine to the enrolled one",
        check.cosine,
        unit="cosine",
    )
    domain_weight: float = setting(
        0.0,
        "most of a source's learnt room offset (the mean residual of windows given to a member "
        "beyond doubt, off their enrolled profile) removed from each of its windows before "
        "they are compared (0.5 tried: fewer strangers' windows to members, a few more "
        "members' windows to no one under a television); 0 = off, windows compared as heard",
        check.share,
    )
    domain_seconds: float = setting(
        30.0,
        "speech of confident windows at which a source's offset reaches half of domain_weight",
        check.positive,
    )
