"""The received view: what a protected upstream received, measured live.

The relay's transform marks a protected utterance's ``audio-start`` with its McAdams α
(:data:`~monitor.vocabulary.PROTECT_KEY`, read into :attr:`AudioFrame.protect_alpha`). McAdams
is deterministic given α, so the measuring side reproduces exactly what the upstream received:

- :class:`~monitor.protect.received_audio.ReceivedAudio` (one per stream) reproduces it: McAdams
  with that α over the utterance's original frames, each speech chunk given its counterpart,
  which the windower and the turn splitter carry with the window.
- :func:`received_embedding`: in the features stage, the speaker embedding of a window's
  received audio — only the embedding: it carries most of who speaks and is what McAdams
  changes; F0 is the excitation, which McAdams keeps, and phones are read from the original
  (an upper bound on what they give from anonymised audio, whose decoding is worse).
- :class:`ReceivedTrackScorer`: each track also pools what the upstream received this period
  (protected windows anonymised, clear ones as they were; from the track's first protected
  window on) and scores it against the clean templates (the *ignorant* attacker) and, when
  the database holds ``embedding+mcadams`` templates (``voxmeter enroll --protect mcadams``),
  against those (the *lazy*-informed attacker), and, with those templates and a back-end
  shipped for the embedding network (:mod:`monitor.protect.backend`), both mapped by it
  (the *semi*-informed attacker, the VoicePrivacy Challenge's). All read the clean
  calibration (see the README: the offline audit does the same). The budget then compares
  the strongest attacker's figure (:attr:`Figures.budget_figure_bits`), whose name
  :meth:`ReceivedFigures.strongest` gives.

Only protected speech costs anything here: a clear window of a track protected earlier in the
period is pooled and scored by each attacker once more; any other clear window costs nothing.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import time
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from monitor.audio.frames import RATE_HZ
from monitor.enrolment.lazy import lazy_name
from monitor.errors import StoreError
from monitor.events.figures import Disclosure, ReceivedFigures
from monitor.events.messages import FeatureWindow, TrackedWindow
from monitor.features.base import Feature, Observation, TemplateBatch
from monitor.protect.backend import Backend, shipped_backend
from monitor.scoring.evidence import ScoredWindow, TrackScorer
from monitor.scoring.scorer import PreparedTemplates, Scorer, score_track
from monitor.store.database import Store
from monitor.vocabulary import TRACKING_FEATURE, FigureKey

logger = logging.getLogger(__name__)

EMBEDDING = TRACKING_FEATURE
SEMI = "semi"
"""The semi-informed attacker's name in :attr:`ReceivedFigures.attackers` (and Prometheus)."""


def received_embedding(
    features: Mapping[str, Feature], received: npt.NDArray[np.float32] | None
) -> Observation | None:
    """The embedding of a window's received audio; None for a clear window (runs in the
    executor, beside the original features' last steps)."""
    if received is None or EMBEDDING not in features:
        return None
    return features[EMBEDDING].observe(received, RATE_HZ)


@dataclasses.dataclass
class _View:
    """One track's received evidence in the current period."""

    pooled: dict[str, Observation]
    windows: int
    speech_seconds: float
    protected_windows: int = 0
    protected_seconds: float = 0.0
    max_window_bits: dict[str, float] = dataclasses.field(default_factory=dict)


class ReceivedTrackScorer(TrackScorer):
    """A :class:`TrackScorer` that also scores what the upstream received (module docstring)."""

    def __init__(
        self,
        scorer: Scorer,
        features: Mapping[str, Feature],
        measure: FigureKey,
        lazy: Scorer | None = None,
        narrow: Scorer | None = None,
        semi: tuple[Scorer, Backend] | None = None,
    ) -> None:
        super().__init__(scorer, features, measure, narrow)
        self.attackers = {"ignorant": scorer, **({"lazy": lazy} if lazy is not None else {})}
        self.backends: dict[str, Backend] = {}
        if semi is not None:
            self.attackers[SEMI] = semi[0]
            self.backends[SEMI] = semi[1]
        self.views: dict[str, _View] = {}

    def process(self, tracked: TrackedWindow, period_start_unix: float) -> ScoredWindow:
        if period_start_unix != self.period_start_unix:
            self.views.clear()
        before = self.tracks.get(tracked.track)
        scored = super().process(tracked, period_start_unix)
        window = tracked.window
        embedding = window.received_embedding
        view = self.views.get(tracked.track)
        if embedding is None and view is None:
            return scored  # clear, and never protected this period: the original is received
        started = time.perf_counter()  # the scorer stage's busy time, as TrackScorer's
        if view is None:  # its first protected window: the clear ones before it, as they were
            view = (
                _View(dict(before.pooled), before.windows, before.speech_seconds)
                if before is not None
                else _View({}, 0, 0.0)
            )
        observations = self._pool(view, window)
        self.views[tracked.track] = view
        attackers: dict[str, tuple[Disclosure, ...]] = {}
        narrow = self.narrow if window.band == "narrow" else None
        for name, scorer in self.attackers.items():
            if narrow is not None and name == "ignorant":  # as the original view's scoring
                scorer = narrow
            backend = self.backends.get(name)
            score = score_track(
                scorer,
                identity=tracked.identity,
                pooled=mapped(view.pooled, backend),
                pooled_seconds=view.speech_seconds,
                window=mapped(observations, backend),
                window_seconds=window.speech_seconds,
                windows=view.windows,
                max_window_bits=view.max_window_bits.get(name, -math.inf),
                measure=self.measure,
            )
            view.max_window_bits[name] = max(
                view.max_window_bits.get(name, -math.inf), score.window_bits
            )
            attackers[name] = score.disclosures
        received = ReceivedFigures(
            attackers=attackers,
            protected_windows=view.protected_windows,
            protected_seconds=view.protected_seconds,
            window_protected=embedding is not None,
        )
        spent = time.perf_counter() - started
        return dataclasses.replace(
            scored, received=received, scorer_seconds=scored.scorer_seconds + spent
        )

    def _pool(self, view: _View, window: FeatureWindow) -> dict[str, Observation]:
        """The window's observations as the upstream received them (the protected embedding
        where there was one), pooled into the view; returns them."""
        embedding = window.received_embedding
        observations = dict(window.observations)
        if embedding is not None:
            observations[EMBEDDING] = embedding
            view.protected_windows += 1
            view.protected_seconds += window.speech_seconds
        view.pooled = {
            name: feature.pool([view.pooled[name], observations[name]])
            if name in view.pooled
            else observations[name]
            for name, feature in self.features.items()
        }
        view.windows += 1
        view.speech_seconds += window.speech_seconds
        return observations

    def expire(self, track: str) -> None:
        super().expire(track)
        self.views.pop(track, None)

    def merge(self, retired: str, into: str) -> None:
        """The survivor keeps its own received view (a retired track's protected windows are
        dropped from it: the merge is rare and the view restarts with the next window)."""
        super().merge(retired, into)
        self.views.pop(retired, None)

    def reset(self) -> None:
        super().reset()
        self.views.clear()


def mapped(
    observations: Mapping[str, Observation], backend: Backend | None
) -> Mapping[str, Observation]:
    """``observations`` with the embedding mapped by the semi-informed ``backend`` (as is
    without one): the cosine of mapped vectors is that attacker's score."""
    if backend is None or EMBEDDING not in observations:
        return observations
    embedding = observations[EMBEDDING]
    values = backend.apply(embedding.values)[0]
    return {**observations, EMBEDDING: dataclasses.replace(embedding, values=values)}


def semi_scorer(
    lazy: Scorer | None, features: Mapping[str, Feature]
) -> tuple[Scorer, Backend] | None:
    """The semi-informed attacker: the lazy-informed scorer's templates mapped by the
    back-end shipped for the daemon's embedding network (tests are mapped as they are scored,
    :func:`mapped`); None without lazy-informed templates or a back-end for this network.
    It reads the clean calibration, as the other attackers do."""
    network = getattr(features.get(EMBEDDING), "backend", None)
    backend = shipped_backend(network) if lazy is not None and network else None
    if lazy is None or backend is None:
        logger.info(
            "no semi-informed attacker in the received view (needs %s templates and "
            "a back-end shipped for %s)",
            lazy_name(),
            network,
        )
        return None
    lazy_templates = lazy.prepared[EMBEDDING]
    if backend.mean.shape[0] != lazy_templates.unit.shape[1]:
        logger.warning("the semi-informed back-end does not fit the %s embedding", network)
        return None
    matrix = backend.apply(lazy_templates.unit.astype(np.float64))
    semi = copy.copy(lazy)
    semi.prepared = {
        **lazy.prepared,
        EMBEDDING: PreparedTemplates(
            features[EMBEDDING],
            TemplateBatch(EMBEDDING, matrix),
            dtype=lazy_templates.dtype.type,
        ),
    }
    return semi, backend


def lazy_scorer(store: Store, scorer: Scorer, features: Mapping[str, Feature]) -> Scorer | None:
    """The clean scorer with its embedding templates replaced by the lazy-informed ones
    (``embedding+mcadams``; an identity without one keeps its clean template, said once in
    the log); None when the database has none or they do not fit the embedding."""
    try:
        names, batch = store.template_batch(lazy_name())
    except StoreError:
        logger.info("no %s templates: the received view has no lazy attacker", lazy_name())
        return None
    clean = scorer.prepared[EMBEDDING]
    if batch.matrix.shape[1] != clean.unit.shape[1]:
        logger.warning(
            "%s templates are of another embedding (%d values, not %d): no lazy attacker",
            lazy_name(),
            batch.matrix.shape[1],
            clean.unit.shape[1],
        )
        return None
    row = {alias: i for i, alias in enumerate(names)}
    rows = np.array([row.get(alias, -1) for alias in scorer.aliases])
    missing = int(np.count_nonzero(rows < 0))
    if missing:
        logger.warning(
            "%d identities lack a %s template: scored by their clean one", missing, lazy_name()
        )
    matrix = np.where(
        (rows >= 0)[:, None], batch.matrix[np.maximum(rows, 0)], clean.unit.astype(np.float64)
    )
    lazy = copy.copy(scorer)
    if scorer.population is not None:  # the figures against N_pop: templates of one kind
        lazy.population = scorer.population.restricted(np.flatnonzero(rows >= 0))
    lazy.prepared = {
        **scorer.prepared,
        EMBEDDING: PreparedTemplates(
            features[EMBEDDING], TemplateBatch(EMBEDDING, matrix), dtype=clean.dtype.type
        ),
    }
    return lazy


def track_scorer_for(
    protecting: bool,
    store: Store,
    scorer: Scorer,
    features: Mapping[str, Feature],
    measure: FigureKey,
    narrow: Scorer | None = None,
) -> TrackScorer:
    """The scorer stage's core: with protection on, one that also scores the received view;
    ``narrow`` scores windows from narrow-band sources (the N narrow-band templates)."""
    if not protecting or EMBEDDING not in features:
        return TrackScorer(scorer, features, measure, narrow)
    lazy = lazy_scorer(store, scorer, features)
    semi = semi_scorer(lazy, features)
    return ReceivedTrackScorer(scorer, features, measure, lazy, narrow, semi)
