"""Construction: a :class:`~monitor.daemon.pipeline.Pipeline` and its parts from the config.

``voxmeter run`` calls :func:`run_daemon`; tests and benchmarks call :func:`build_pipeline`
with their own source or exporters. What the built pipeline does is in pipeline.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from monitor.audio.frames import AudioSource
from monitor.audio.microphone import MicrophoneSource
from monitor.calibration.buckets import CalibrationSet, default_path, load_default
from monitor.daemon.household import enrolment_for
from monitor.daemon.lock import DaemonLock
from monitor.daemon.pipeline import EXIT_DEADLINE_SECONDS, ExitWatchdog, Pipeline, RunSummary
from monitor.daemon.policy_feed import protection_for
from monitor.daemon.problem import held
from monitor.errors import ConfigError, StoreError, VoxmeterError
from monitor.events.messages import Exporter
from monitor.exporters import build_exporters
from monitor.exporters.log import LogExporter
from monitor.features.base import (
    Feature,
    TemplateBatch,
    get_feature,
    set_embedding_backend,
    set_embedding_runtime,
    set_phone_backend,
)
from monitor.logs import configure_logging
from monitor.population.shipped import ALIAS_PREFIX, ShippedPopulation, join, load_shipped
from monitor.scoring.population import PopulationView
from monitor.scoring.scorer import Scorer
from monitor.settings.config import source_specs
from monitor.settings.sections import Config
from monitor.sources.spec import Retry, open_sources
from monitor.store.database import Store, open_store
from monitor.store.templates import model_name
from monitor.tracking.narrow import NarrowCopies, load_narrow
from monitor.tracking.thresholds import tracker_thresholds_for
from monitor.userfiles import socket_problem

logger = logging.getLogger("monitor.daemon.pipeline")  # the name operators' log filters know


def make_source(config: Config) -> AudioSource:
    """The configured source, or sources (``audio.sources``: several read as one, each frame
    tagged with its source's name); file pacing and device retry delays come from ``[audio]``."""
    audio = config.audio
    channel = Path(config.relay.socket) if config.relay.socket else None
    if channel is not None and (problem := socket_problem(channel, listening=False)):
        raise ConfigError("relay.socket", problem)  # the rule voxmeter relay applies
    retry = Retry(audio.retry_min_seconds, audio.retry_max_seconds, audio.wait_for_device)
    return open_sources(
        source_specs(config),
        fast=audio.pace == "fast",
        retry=retry,
        zeroconf=config.wyoming.zeroconf,
        channel=channel,
    )


def calibration_in_use(config: Config, store: Store) -> tuple[CalibrationSet, str]:
    """``scorer.calibration`` if set, else the store's, else the shipped one of the backend;
    with where it came from (for errors)."""
    backend = config.features.embedding
    if config.scorer.calibration:
        loaded = CalibrationSet.load(config.scorer.calibration)
        loaded.check_embedding_backend(config.scorer.calibration, backend)
        return loaded, config.scorer.calibration
    stored = store.load_calibration()
    source = f"{store.path}: stored calibration"
    if stored is not None:
        stored.check_embedding_backend(source, backend)
        return stored, source
    return load_default(backend), str(default_path(backend))


def load_calibration(config: Config, store: Store) -> CalibrationSet:
    """The calibration of :func:`calibration_in_use`."""
    return calibration_in_use(config, store)[0]


def select_phone_backend(config: Config, store: Store) -> str:
    """Run the phone backend the calibration in use was fitted with (``features.phone =
    "auto"``); an explicit other one is a ``ConfigError`` at start, before any audio."""
    calibration, source = calibration_in_use(config, store)
    backend = calibration.resolve_phone_backend(source, config.features.phone)
    set_phone_backend(backend)
    return backend


def check_template_model(store: Store, name: str, feature: Feature) -> None:
    """The stored templates of ``name`` must come from the model this daemon extracts with;
    for the embedding, a mismatch names the config key to change."""
    stored = store.template_model(name)
    if not stored or stored == feature.version:
        return
    if name == "embedding":
        raise ConfigError(
            "features.embedding",
            f"{store.path} was enrolled with the {model_name(stored)} backend, not "
            f'{model_name(feature.version)}: set features.embedding = "{model_name(stored)}" '
            "or re-enrol into a new database",
        )
    raise StoreError(
        f"{store.path}: {name!r} templates were made by {stored}, this voxmeter extracts "
        f"{feature.version}: re-enrol"
    )


def shipped_population(config: Config) -> ShippedPopulation | None:
    """The reference population shipped for the configured backend (``[population] shipped``),
    checked: a missing or damaged file stops the start with one line."""
    return load_shipped(config.features.embedding) if config.population.shipped else None


def population_view(
    config: Config, shipped: ShippedPopulation | None, aliases: Sequence[str]
) -> PopulationView | None:
    """The figures against ``[population] size`` through the shipped population's model (none
    without the shipped population: the figures are then against the templates present), the
    shipped speakers among ``aliases`` marked as the population's sample. A size below the
    templates present is a config error naming the key and the value."""
    if shipped is None or shipped.model is None:
        return None
    templates = len(aliases)
    size = config.population.size
    if size < templates:
        raise ConfigError(
            "population.size",
            f"{size:g} is below the {templates} identities scored against (the household, "
            "the reference speakers and the shipped population): the population they live in "
            f"holds at least as many; set it to {templates} or more",
        )
    sample = np.array([alias.startswith(ALIAS_PREFIX) for alias in aliases], dtype=bool)
    return PopulationView(shipped.model, size, sample=sample)


def _stored_batch(store: Store, name: str) -> tuple[tuple[str, ...], TemplateBatch | None]:
    """The database's ``name`` templates; none at all (an empty database) is not an error here:
    the shipped population is the reference set then."""
    if not store.template_counts().get(name):
        return (), None
    return store.template_batch(name)


def load_scorer(
    config: Config,
    store: Store,
    features: Mapping[str, Feature],
    shipped: ShippedPopulation | None = None,
) -> Scorer:
    """All templates of the enabled features (same identities for each): the database's, then
    the ``shipped`` population's, and the calibration."""
    for name, feature in features.items():
        check_template_model(store, name, feature)
    aliases: tuple[str, ...] | None = None
    batches = {}
    for name in features:
        stored, batch = _stored_batch(store, name)
        if aliases is not None and stored != aliases:
            missing = sorted(set(aliases) ^ set(stored))[:5]
            raise StoreError(
                f"{store.path}: identities differ between features (e.g. {', '.join(missing)}): "
                "every identity needs a template of every enabled feature"
            )
        aliases = stored
        if batch is None and shipped is None:
            raise StoreError(
                f"{store.path}: no {name!r} templates, and [population] shipped is off: enrol "
                "speakers with `voxmeter enroll`, or set population.shipped = true"
            )
        batches[name] = join(stored, batch, shipped, name)
    assert aliases is not None
    try:
        names = {joined for joined, _ in batches.values()}
        (every,) = names
        return Scorer(
            every,
            {name: batch for name, (_, batch) in batches.items()},
            load_calibration(config, store),
            features,
            delta=config.scorer.delta,
            population=population_view(config, shipped, every),
        )
    except ValueError as error:
        raise StoreError(f"{store.path}: {error}") from error


def daemon_exporters(config: Config, store: Store, device_id: str) -> list[Exporter]:
    """The log exporter, then Prometheus, MQTT and Home Assistant as configured."""
    return [
        LogExporter(),
        *build_exporters(config, store=store, db_path=Path(store.path), device_id=device_id),
    ]


def build_pipeline(
    config: Config,
    *,
    store: Store,
    source: AudioSource | None = None,
    exporters: Sequence[Exporter] | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
) -> Pipeline:
    """A pipeline as ``voxmeter run`` builds it (tests pass their own source or exporters)."""
    device_id = config.daemon.device_id or socket.gethostname()
    set_embedding_backend(config.features.embedding)
    set_embedding_runtime(config.features.runtime)
    select_phone_backend(config, store)
    source = source if source is not None else make_source(config)
    features = {name: get_feature(name) for name in config.features.enabled}
    shipped = shipped_population(config)
    scorer = load_scorer(config, store, features, shipped)
    profiles = [p for p in store.local_profiles() if p.identity_alias in scorer.index]

    def narrow_for(scorer: Scorer) -> NarrowCopies:
        thresholds = tracker_thresholds_for(config, scorer.calibration, "narrow")
        return load_narrow(store, scorer, features, thresholds, shipped)

    narrow = narrow_for(scorer)
    if exporters is None:
        exporters = daemon_exporters(config, store, device_id)
    exporters = [*exporters, *protection_for(config, source, exporters, device_id)]
    pipeline = Pipeline(
        config,
        store=store,
        source=source,
        scorer=scorer,
        features=features,
        profiles=profiles,
        narrow=narrow,
        exporters=exporters,
        device_id=device_id,
        clock=clock,
        wall_clock=wall_clock,
    )
    pipeline.exporters += enrolment_for(
        config,
        pipeline,
        exporters,
        lambda: load_scorer(config, store, features, shipped),
        narrow_for,
    )
    return pipeline


def run_daemon(config: Config) -> RunSummary:
    """``voxmeter run``: lock the database, open it, build the pipeline, run it to the end.

    A database that does not exist yet is created first (mode 0600, its folder too): the
    shipped reference population is then the reference set, and a refused start removes it
    again. The lock (``flock`` on the database file, see lock.py) comes next and is released
    last: a second daemon on the same file, by whatever path, is refused with one line before
    it logs, opens a source, restores a track, binds a port or connects to the broker.
    """
    db = Path(config.daemon.db)
    created = not os.path.lexists(db)
    if created:
        open_store(db).close()
    with DaemonLock(db):
        started_unix = time.time()
        try:
            configure_logging(config.logging)
            pipeline, store = _started(config)
        except BaseException as error:
            if created:  # a refused start leaves no database behind
                _remove_database(db)
            if isinstance(error, VoxmeterError):  # shown in Home Assistant until a restart
                held(config, error, started_unix)
            raise
        try:
            summary = asyncio.run(pipeline.run())
        finally:
            store.close()
    logger.info(
        "stopped",
        extra={"fields": {"reason": summary.stop_reason, "windows": summary.windows}},
    )
    return summary


def _started(config: Config) -> tuple[Pipeline, Store]:
    """The source checked (a bad file or a missing device: one line before anything else), the
    store open and the pipeline built; the store is closed again if building fails."""
    source = make_source(config)
    for each in getattr(source, "named", {"": source}).values():
        if isinstance(each, MicrophoneSource) and not each.wait_for_device:
            each.probe()
    store = open_store(config.daemon.db)
    try:
        pipeline = build_pipeline(config, store=store, source=source)
    except BaseException:
        store.close()
        raise
    pipeline.watchdog = ExitWatchdog(EXIT_DEADLINE_SECONDS)
    return pipeline, store


def _remove_database(db: Path) -> None:
    """Remove a database this run created and never used, with its SQLite side files."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(OSError):
            db.with_name(db.name + suffix).unlink()
