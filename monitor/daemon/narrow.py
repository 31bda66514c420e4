"""The narrow-band copies a narrow-band stream is tracked and scored against (issue 29).

``voxmeter enroll`` stores beside each identity's embedding template the template of the same
files band-limited as an 8 kHz device delivers them (``embedding+narrow``,
:mod:`monitor.store.variants`). A window from a source of at most 8 kHz
(:attr:`~monitor.daemon.events.FeatureWindow.band`) is then compared with those: the members'
narrow profiles (their identity's narrow template) in the tracker, the N narrow templates in the
scorer, and the tracker's thresholds come from the calibration's statistics on band-limited
crops (``tracking_narrow``). This is a choice of vectors at run time, no extra inference.

A database enrolled before (or with ``--no-narrow``) keeps working on the wide-band copies,
with one warning, at the first narrow-band window, saying how to add them.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from monitor.calibration.tracking import TrackerThresholds
from monitor.daemon.scorer import PreparedTemplates, Scorer
from monitor.errors import StoreError
from monitor.features.base import Feature, Observation
from monitor.store.database import Store
from monitor.store.templates import LOCAL_PROFILE_FEATURE, LocalProfile
from monitor.store.variants import narrow_model, narrow_name

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


def load_narrow(
    store: Store,
    scorer: Scorer,
    features: Mapping[str, Feature],
    thresholds: TrackerThresholds | None,
) -> NarrowCopies:
    """The store's narrow-band copies for this daemon (the embedding's model must have made
    them), the narrow scorer when every one of the N identities has one, and the thresholds."""
    copies = NarrowCopies(thresholds=thresholds)
    if thresholds is None:
        copies.missing.append("the calibration's tracker statistics")
    embedding = features.get(LOCAL_PROFILE_FEATURE)
    if embedding is None:
        return copies
    name, name_wide = narrow_name(), LOCAL_PROFILE_FEATURE
    model = store.template_model(name)
    if model and model != narrow_model(embedding.version):
        copies.missing.append(f"the templates (their narrow copies were made by {model})")
        return copies
    try:
        aliases, batch = store.template_batch(name)
    except StoreError:
        copies.missing.append("the templates")
        return copies
    copies.templates = {
        alias: Observation(LOCAL_PROFILE_FEATURE, row, 0.0)
        for alias, row in zip(aliases, batch.matrix, strict=True)
    }
    if aliases != scorer.aliases or name_wide not in scorer.prepared:
        copies.missing.append(f"{scorer.n - len(set(aliases) & set(scorer.aliases))} templates")
        return copies
    narrow = copy.copy(scorer)  # the other features' prepared templates are shared
    prepared = PreparedTemplates(embedding, batch, dtype=scorer.prepared[name_wide].dtype.type)
    narrow.prepared = {**scorer.prepared, name_wide: prepared}
    copies.scorer = narrow
    return copies
