"""Enrolment from speech heard live (Home Assistant's *Enrol the next voice*, or an
unrecognised voice named a member): the same :class:`~monitor.store.templates.Enrolment` that
``voxmeter enroll --local`` writes — one template per feature, the feature's own pool of the
observations, a local profile under the same alias — from the daemon's per-window observations
instead of files. Audio never reaches this module: the windows' features are all it sees.

No narrow-band or far-field copy is made (those are the same files transformed, and there are
no files): the tracker matches the member's narrow-band windows against the wide-band profile,
as it does for any database without copies; the profile was heard in the room already.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from monitor.features.base import Observation, get_feature
from monitor.store.templates import LOCAL_PROFILE_FEATURE, Enrolment

LIVE_METADATA = {"enrolled": "live speech"}
"""What the database records of where a live-enrolled member's templates came from."""


def pool_kept(feature: str, observations: Sequence[Observation]) -> Observation:
    """The feature's pool over the observations that carry evidence for it (all of them if
    none do: an empty template scores as no evidence)."""
    kept = [o for o in observations if np.any(o.values != 0)] or list(observations)
    return get_feature(feature).pool(kept)


def live_enrolment(
    alias: str, observations: Mapping[str, Sequence[Observation]], *, seconds: float
) -> Enrolment:
    """``alias``'s templates pooled from ``observations`` (feature → the windows' observations,
    or one track's pooled observation), with a local profile of the same alias.

    ValueError (a sentence a household can read) when the speech is no evidence: no window,
    no embedding, or nothing but silence in every feature.
    """
    if LOCAL_PROFILE_FEATURE not in observations or not observations[LOCAL_PROFILE_FEATURE]:
        raise ValueError("no speech was kept")
    templates = {name: pool_kept(name, list(kept)) for name, kept in observations.items() if kept}
    if not np.any(templates[LOCAL_PROFILE_FEATURE].values != 0):
        raise ValueError("the speech gives no evidence of a voice")
    metadata = {**LIVE_METADATA, "speech_seconds": round(float(seconds), 1)}
    return Enrolment(alias, templates, metadata, local_profile=alias)
