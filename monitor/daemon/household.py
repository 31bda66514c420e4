"""The household changed while the daemon runs: a member enrolled or forgotten from Home
Assistant (:mod:`monitor.tracking.enrolment`, :mod:`monitor.exporters.enrolment`).

:class:`LiveHousehold` is the enrolment's :class:`~monitor.tracking.enrolment.Household`: it
writes a new member as ``voxmeter enroll --local`` does (one transaction:
:func:`monitor.enrolment.live.live_enrolment`, ``bulk_replace_templates``), removes a forgotten
one (``remove_identity``: templates and profile), then reloads what the measuring side holds of
the household — the scorer's N templates, the narrow-band copies, the tracker's profiles
(unknown tracks, rooms and turns carry on) — and tells the exporters (``HouseholdChanged``).
All of it on the event loop between two windows: the features were extracted already by the
feature stage, so the work here is pooling and a few small SQLite transactions.

:func:`enrolment_for` wires it when Home Assistant discovery is on: the enrolment, its MQTT
exporter and the enrolment entities on the device.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from monitor.enrolment.live import live_enrolment
from monitor.errors import StoreError
from monitor.events.messages import Exporter, HouseholdChanged
from monitor.exporters.enrolment import EnrolmentMqtt, enrolment_entities
from monitor.exporters.homeassistant import HomeAssistantExporter
from monitor.features.base import Observation
from monitor.scoring.scorer import Scorer
from monitor.settings.sections import Config
from monitor.store.database import Store
from monitor.tracking.enrolment import EnrolmentSession
from monitor.tracking.narrow import NarrowCopies, cohort_of

logger = logging.getLogger(__name__)

ScorerLoader = Callable[[], Scorer]
"""The scorer of the store's templates now (with the shipped population, as at start)."""
NarrowLoader = Callable[[Scorer], NarrowCopies]
"""The narrow-band copies for that scorer."""


class LiveHousehold:
    """The pipeline's household, changed in place (module docstring)."""

    def __init__(self, pipeline: Any, load_scorer: ScorerLoader, load_narrow: NarrowLoader) -> None:
        self.pipeline = pipeline  # a monitor.daemon.pipeline.Pipeline
        self.load_scorer = load_scorer
        self.load_narrow = load_narrow
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def store(self) -> Store:
        return self.pipeline.store  # type: ignore[no-any-return]

    def members(self) -> list[str]:
        return list(self.pipeline.tracker.profile_aliases)

    def taken(self, alias: str) -> bool:
        """Whether a member or an identity (a voice of the reference set) has this alias."""
        if alias in self.members():
            return True
        try:
            self.store.identity(alias)
        except StoreError:
            return False
        return True

    def pooled(self, track: str) -> tuple[Mapping[str, Observation], float] | None:
        """An unknown track's pooled observations and speech this period (None: no such)."""
        evidence = self.pipeline.track_scorer.tracks.get(track)
        if evidence is None or evidence.kind != "unknown":
            return None
        return evidence.pooled, float(evidence.speech_seconds)

    def enrol(
        self,
        alias: str,
        observations: Mapping[str, Sequence[Observation]],
        seconds: float,
        claimed: str | None = None,
    ) -> None:
        """Write the new member and measure with them from the next window on; ValueError
        (the reason) when the speech is no evidence or the store refuses it."""
        missing = sorted(set(self.pipeline.features) - {k for k, v in observations.items() if v})
        if missing:  # shed under load in every window: a template of each feature is needed
            raise ValueError(f"no {'/'.join(missing)} evidence was kept (the daemon was behind)")
        enrolment = live_enrolment(alias, observations, seconds=seconds)
        try:
            self.store.bulk_replace_templates([enrolment])
        except (StoreError, ValueError) as error:
            raise ValueError(str(error)) from error
        try:
            self._reload(added=(alias,), removed=(), claimed=claimed)
        except (StoreError, ValueError) as error:  # measured as before, the member not kept
            self.store.remove_identity(alias)
            raise ValueError(str(error)) from error

    def forget(self, alias: str) -> None:
        self.store.remove_identity(alias)
        self._reload(added=(), removed=(alias,), claimed=None)

    def _reload(
        self, *, added: tuple[str, ...], removed: tuple[str, ...], claimed: str | None
    ) -> None:
        """The measuring side's view of the household, made anew from the store."""
        p = self.pipeline
        scorer = self.load_scorer()
        narrow = self.load_narrow(scorer)
        profiles = [q for q in self.store.local_profiles() if q.identity_alias in scorer.index]
        p.scorer = scorer
        scoring = p.track_scorer
        scoring.scorer, scoring.narrow = scorer, narrow.scorer
        attackers = getattr(scoring, "attackers", None)
        if attackers is not None:  # protection on: the ignorant attacker is the clean scorer
            attackers["ignorant"] = scorer
        p.ledger.templates = scorer.n
        for alias in removed:  # no window goes to a forgotten member again
            scoring.tracks.pop(alias, None)
        p.tracker = p.tracker.with_profiles(profiles, narrow=narrow, cohort=cohort_of(scorer))
        gone = p.tracker.unknown.retire([claimed], float("inf")) if claimed else []
        events = [*gone, HouseholdChanged(added, removed, scorer.n, p.wall_clock(), claimed)]
        logger.info(
            "household changed",
            extra={
                "fields": {"added": list(added), "removed": list(removed), "templates": scorer.n}
            },
        )
        for event in events:  # the named voice's track ends; exporters hear of the change
            queue = p.queues["tracked" if event is not events[-1] else "events"]
            task = asyncio.get_running_loop().create_task(queue.put(event))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


def enrolment_for(
    config: Config,
    pipeline: Any,
    exporters: Sequence[Exporter],
    load_scorer: ScorerLoader,
    load_narrow: NarrowLoader,
) -> list[Exporter]:
    """With Home Assistant discovery: the enrolment session in the tracker stage, its entities
    on the device and its MQTT exporter; otherwise nothing."""
    ha = [e for e in exporters if isinstance(e, HomeAssistantExporter)]
    if not ha:
        return []
    household = LiveHousehold(pipeline, load_scorer, load_narrow)
    session = EnrolmentSession(household, thresholds=lambda: pipeline.tracker.thresholds)
    pipeline.enrolment = session
    for exporter in ha:
        exporter.extra_entities.append(enrolment_entities)
        exporter.enrolment_buttons = True
    connection = ha[0].connection  # the daemon's one MQTT connection
    return [
        EnrolmentMqtt(session, config.mqtt, device_id=pipeline.device_id, connection=connection)
    ]
