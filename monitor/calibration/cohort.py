"""Cosines normalised against a cohort: adaptive symmetric normalisation (AS-norm).

A room moves every cosine at once: reverberation, a television or a narrow band pull a
window's cosine to its own speaker's profile down, and its cosines to everyone else with it.
A fixed cosine threshold then refuses the member. AS-norm measures how a window scores against
a cohort of other voices and how the profile does, and expresses the window–profile cosine in
those units:

    z = ½ · ((s − μ_w) / σ_w + (s − μ_p) / σ_p)

where μ_w, σ_w are the mean and spread of the window's ``top`` highest cosines to the cohort
and μ_p, σ_p those of the profile's (its own identity left out). The cohort is free: the N
reference templates the scorer already holds. The tracker's thresholds on ``z`` are read off
the calibration's normalised statistics, computed here the same way on the dev corpus with
its own templates as the cohort (:func:`normalised_trials`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

COHORT_TOP = 40
"""Highest cohort cosines kept per side (of the N templates; all but one when N is smaller)."""
MIN_COHORT = 20
"""Fewer templates than this: no cohort, the raw cosines are used."""
SPREAD_FLOOR = 1e-3
"""The smallest spread divided by (a cohort of identical cosines)."""

Floats = npt.NDArray[np.float64]


def top_statistics(cosines: Floats, top: int) -> tuple[Floats, Floats]:
    """Mean and spread of the ``top`` highest values along the last axis of ``cosines``
    (``-inf`` entries, e.g. a profile's own identity, are never among them when enough
    others exist)."""
    k = max(1, min(top, cosines.shape[-1] - 1))
    best = np.partition(cosines, -k, axis=-1)[..., -k:]
    return best.mean(axis=-1), np.maximum(best.std(axis=-1), SPREAD_FLOOR)


def snorm(
    cosines: Floats,
    window: tuple[Floats, Floats],
    profile: tuple[Floats, Floats],
) -> Floats:
    """AS-norm of ``cosines`` given the window's and the profile's cohort statistics, both
    broadcast against it."""
    (mw, sw), (mp, sp) = window, profile
    out: Floats = 0.5 * ((cosines - mw) / sw + (cosines - mp) / sp)
    return out


def profile_statistics(
    profiles: Floats, cohort: Floats, own: npt.NDArray[np.int64], top: int
) -> tuple[Floats, Floats]:
    """(P,) cohort statistics of unit ``profiles`` (P, D) against the unit ``cohort`` (N, D);
    ``own[p]`` is the cohort row of profile p's own identity, left out (−1: none)."""
    cosines = profiles @ cohort.T
    rows = np.flatnonzero(own >= 0)
    cosines[rows, own[rows]] = -np.inf
    return top_statistics(cosines, top)


def normalised_trials(scores: Floats, templates: Floats, N: int, top: int = COHORT_TOP) -> Floats:
    """AS-norm of calibration trials: ``scores`` (T, N) cosines of each test against the N
    templates of its start (rows ``s·N ..``: start s), ``templates`` (K·N, D) unit rows of
    every start. The cohort is the start's own N templates: a test is normalised against
    all of them, its speaker's too, a template against the others (as a profile is, its
    identity left out). A live window's speaker is often in no template (a visitor): the
    tracker puts a stand-in for it in the window's cohort (:meth:`Cohort.normalise`)."""
    out = np.empty_like(scores)
    window = top_statistics(scores, top)
    for s in range(scores.shape[0] // N):
        block = templates[s * N : (s + 1) * N]
        rows = slice(s * N, (s + 1) * N)
        among = block @ block.T
        np.fill_diagonal(among, -np.inf)
        mp, sp = top_statistics(among, top)
        out[rows] = snorm(
            scores[rows], (window[0][rows, None], window[1][rows, None]), (mp[None], sp[None])
        )
    return out


class Cohort:
    """The unit cohort rows (N, D) and, for one set of profiles, their cohort statistics."""

    def __init__(
        self, cohort: Floats, profiles: Floats, own: npt.NDArray[np.int64], top: int
    ) -> None:
        self.unit = cohort
        self.top = top
        self.listed = own >= 0  # (P,) whether profile p's identity is among the templates
        self.profile = profile_statistics(profiles, cohort, own, top)

    def normalise(
        self,
        vector: Floats,
        cosines: Floats,
        voices: Floats | None = None,
        own: float | None = None,
    ) -> Floats:
        """(P,) AS-norm of the unit window ``vector``'s ``cosines`` to the profiles.

        The thresholds are calibrated with every test's own voice in its cohort (a template of
        its speaker, :func:`normalised_trials`). Live, a stranger's voice is in no template:
        the window meets a cohort of other voices only, its top cohort cosines fall and every
        score of it rises: a stranger over a member's threshold (about twice the calibrated
        rate on the corpus's held-out speakers, and more for a stranger of a member's gender
        and age). So the window's cohort holds what the calibration's did: ``voices`` (E, D),
        unit rows of the household's voices that are no template (members enrolled locally
        only, the open unknown tracks), and, when nothing in it is as near the window as a
        voice's own template usually is, that usual cosine ``own`` in place of the own
        template missing."""
        among = self.unit @ vector
        if voices is not None and voices.shape[0]:
            among = np.concatenate([among, voices @ vector])
        if own is not None and float(among.max()) < own:
            among = np.append(among, own)
        return snorm(cosines, top_statistics(among, self.top), self.profile)


def cohort_for(
    aliases: tuple[str, ...],
    matrix: Floats,
    profiles: Floats,
    identities: tuple[str, ...],
    top: int,
) -> Cohort | None:
    """The cohort of the N templates ``matrix`` (rows named ``aliases``) for unit ``profiles``
    of the given identities, or None when there is no normalisation (``top`` 0: the
    calibration has no normalised statistics) or too few templates to learn from."""
    if top <= 0 or len(aliases) < MIN_COHORT or profiles.shape[0] == 0:
        return None
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit = np.asarray(matrix, dtype=np.float64) / np.where(norms > 0, norms, 1.0)
    index = {alias: i for i, alias in enumerate(aliases)}
    own = np.array([index.get(i, -1) for i in identities], dtype=np.int64)
    return Cohort(unit, profiles, own, top)
