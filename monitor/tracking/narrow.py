"""The narrow-band copies a narrow-band stream is tracked and scored against.

``voxmeter enroll`` stores beside each identity's embedding template the template of the same
files band-limited as an 8 kHz device delivers them (``embedding+narrow``,
:mod:`monitor.enrolment.variants`). A window from a source of at most 8 kHz
(:attr:`~monitor.events.messages.FeatureWindow.band`) is then compared with those: the members'
narrow profiles (their identity's narrow template) in the tracker, the N narrow templates in the
scorer, and the tracker's thresholds come from the calibration's statistics on band-limited
crops (``tracking_narrow``). This is a choice of vectors at run time, no extra inference.

A database enrolled before (or with ``--no-narrow``) keeps working on the wide-band copies,
with one warning, at the first narrow-band window, saying how to add them.

The far-field copies of members' profiles travel here too (``embedding+room``: the member's
files in synthetic rooms, :mod:`monitor.audio.reverb`): the tracker matches a wide-band window
against the nearest of a member's enrolled, adapted and far-field profiles.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from monitor.enrolment.variants import narrow_model, narrow_name, room_model, room_name
from monitor.errors import StoreError
from monitor.features.base import Feature, Observation, TemplateBatch
from monitor.population.shipped import ShippedPopulation, join
from monitor.scoring.scorer import PreparedTemplates, Scorer
from monitor.store.database import Store
from monitor.store.templates import LOCAL_PROFILE_FEATURE, LocalProfile
from monitor.tracking.thresholds import TrackerThresholds

logger = logging.getLogger("monitor.daemon.pipeline")

HOW_TO_ADD = (
    "re-enrol with `voxmeter enroll` (it makes narrow-band copies unless --no-narrow; --local "
    "for the household's members); a calibration of your own: re-run `voxmeter calibrate`"
)


@dataclass
class NarrowCopies:
    """What a narrow-band window is compared with; empty = the wide-band copies, warned once."""

    templates: Mapping[str, Observation] = field(default_factory=dict)  # identity → narrow
    scorer: Scorer | None = None  # the N templates with the narrow embedding copies
    thresholds: TrackerThresholds | None = None  # read off band-limited crops
    missing: list[str] = field(default_factory=list)  # what falls back to wide band, and why
    warned: bool = False
    rooms: Mapping[str, Observation] = field(default_factory=dict)  # identity → far-field copy

    def cohort(self) -> tuple[tuple[str, ...], npt.NDArray[np.float64]] | None:
        """The narrow scorer's N embedding templates, the narrow band's cohort (or None)."""
        return None if self.scorer is None else cohort_of(self.scorer)

    def rooms_for(self, profiles: Sequence[LocalProfile]) -> list[LocalProfile] | None:
        """Each member's far-field profile (their identity's ``embedding+room`` template; the
        enrolled profile where there is none), or None if no member has one."""
        if not any(p.identity_alias in self.rooms for p in profiles):
            return None
        return [
            dataclasses.replace(p, embedding=self.rooms[p.identity_alias])
            if p.identity_alias in self.rooms
            else p
            for p in profiles
        ]

    def profiles_for(self, profiles: Sequence[LocalProfile]) -> list[LocalProfile] | None:
        """Each member's narrow profile (their identity's narrow template; the wide profile
        where the identity has none, noted in :attr:`missing`), or None if none has one."""
        if not any(p.identity_alias in self.templates for p in profiles):
            if profiles:
                self.missing.append("members' profiles")
            return None
        lacking = [p.alias for p in profiles if p.identity_alias not in self.templates]
        if lacking:
            self.missing.append(f"the profiles of {', '.join(lacking)}")
        return [
            dataclasses.replace(p, embedding=self.templates[p.identity_alias])
            if p.identity_alias in self.templates
            else p
            for p in profiles
        ]

    def warn_once(self, source: str, rate_hz: int) -> None:
        """One warning at the first narrow-band window when something falls back."""
        if self.warned or not self.missing:
            return
        self.warned = True
        logger.warning(
            "source %s delivers %d Hz audio (narrow band), but there is no narrow-band copy of "
            "%s: the wide-band ones are used, which narrow-band windows rarely meet; %s",
            source or "audio",
            rate_hz,
            " and ".join(self.missing),
            HOW_TO_ADD,
        )


def cohort_of(scorer: Scorer) -> tuple[tuple[str, ...], npt.NDArray[np.float64]] | None:
    """The aliases and unit embedding templates the scorer scores every window against: the
    tracker's cohort (:mod:`monitor.calibration.cohort`); None without the embedding."""
    prepared = scorer.prepared.get(LOCAL_PROFILE_FEATURE)
    if prepared is None or prepared.kind != "cosine":
        return None
    return scorer.aliases, np.asarray(prepared.unit, dtype=np.float64)


def _copies(
    store: Store, name: str, model: str
) -> tuple[tuple[str, ...], TemplateBatch | None, str]:
    """The aliases and batch of the ``name`` templates if the daemon's embedding model made
    them, else what is wrong ('' when none are stored)."""
    stored = store.template_model(name)
    if stored and stored != model:
        return (), None, f"the templates (their {name} copies were made by {stored})"
    try:
        aliases, batch = store.template_batch(name)
    except StoreError:
        return (), None, "the templates"
    return aliases, batch, ""


def _stored_identities(store: Store) -> bool:
    """Whether the database holds any embedding template (an empty one has no copies to lack)."""
    return bool(store.template_counts().get(LOCAL_PROFILE_FEATURE))


def _by_identity(aliases: Sequence[str], batch: TemplateBatch | None) -> dict[str, Observation]:
    if batch is None:
        return {}
    return {
        alias: Observation(LOCAL_PROFILE_FEATURE, row, 0.0)
        for alias, row in zip(aliases, batch.matrix, strict=True)
    }


def load_narrow(
    store: Store,
    scorer: Scorer,
    features: Mapping[str, Feature],
    thresholds: TrackerThresholds | None,
    shipped: ShippedPopulation | None = None,
) -> NarrowCopies:
    """The store's narrow-band copies for this daemon (the embedding's model must have made
    them) and the ``shipped`` population's, the narrow scorer when every one of the N
    identities has one, the thresholds, and the members' far-field copies."""
    copies = NarrowCopies(thresholds=thresholds)
    if thresholds is None:
        copies.missing.append("the calibration's tracker statistics")
    embedding = features.get(LOCAL_PROFILE_FEATURE)
    if embedding is None:
        return copies
    rooms = _copies(store, room_name(), room_model(embedding.version))
    copies.rooms = _by_identity(*rooms[:2])
    aliases, batch, problem = _copies(store, narrow_name(), narrow_model(embedding.version))
    copies.templates = _by_identity(aliases, batch)
    if shipped is not None and (batch is not None or not _stored_identities(store)):
        aliases, batch = join(aliases, batch, shipped, narrow_name())
    if batch is None:
        copies.missing.append(problem)
        return copies
    wide = LOCAL_PROFILE_FEATURE
    if aliases != scorer.aliases or wide not in scorer.prepared:
        copies.missing.append(f"{scorer.n - len(set(aliases) & set(scorer.aliases))} templates")
        return copies
    narrow = copy.copy(scorer)  # the other features' prepared templates are shared
    prepared = PreparedTemplates(embedding, batch, dtype=scorer.prepared[wide].dtype.type)
    narrow.prepared = {**scorer.prepared, wide: prepared}
    copies.scorer = narrow
    return copies
