"""The ledger stage's core: one SQLite transaction per window (record, pooled evidence,
budget state and, on a transition, the alert in the outbox), so a restart resumes from it."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from monitor.errors import StoreError
from monitor.events.messages import (
    BOUNDS,
    BudgetState,
    DaemonEvent,
    Figures,
    StateChanged,
    TrackRestored,
    WindowScored,
)
from monitor.jsonsafe import finite_bits
from monitor.ledger.budget import BudgetMachine, Transition, period_start
from monitor.scoring.evidence import ScoredWindow
from monitor.store.database import Store
from monitor.store.ledger import TrackPeriod, WindowRecord
from monitor.vocabulary import FigureKey


class LedgerWriter:
    """Writes windows to the ledger and runs the budget machine (on the loop thread)."""

    def __init__(
        self,
        store: Store,
        budget: BudgetMachine,
        *,
        budget_bits: float,
        measure: FigureKey,
        templates: int,
        alert_topic: str,
        device_id: str,
        ceiling_bits: float | None = None,
        population: float = 0.0,
        keep_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.budget = budget
        self.keep_seconds = keep_seconds
        self.budget_bits = budget_bits
        self.measure = measure
        self.templates = templates
        # log2 N_pop with a population model (``population``), else log2 N of the templates
        self.ceiling_bits = math.log2(templates) if ceiling_bits is None else ceiling_bits
        self.population = population
        self.alert_topic = alert_topic
        self.device_id = device_id
        self.clock = clock
        self.wall_clock = wall_clock
        self.period_start_unix: float | None = None

    def _alert(
        self, change: Transition, figures: Figures | None, window_end_unix: float
    ) -> StateChanged:
        bits = finite_bits(change.bits)
        payload = {
            "alias": change.track,
            "from": change.from_state,
            "to": change.to_state,
            "bits": bits,
            "budget": self.budget_bits,
            "window_end": window_end_unix,
            "device": self.device_id,
            "reason": change.reason,
            **alert_figures(figures),
        }
        seq = self.store.transition(change.track, change.to_state, bits, payload, self.alert_topic)
        return StateChanged(
            track=change.track,
            from_state=change.from_state,
            to_state=change.to_state,
            bits=bits,
            budget_bits=self.budget_bits,
            seq=seq,
            reason=change.reason,  # type: ignore[arg-type]
            window_end_unix=window_end_unix,
            changed_unix=self.wall_clock(),
        )

    def start_period(self, period_start_unix: float) -> list[StateChanged]:
        """Enter a period; everyone not ok steps down to ok with one alert each."""
        self.period_start_unix = period_start_unix
        if self.keep_seconds is not None:  # evidence of periods beyond the kept ones goes
            self.store.prune_ledger(period_start_unix - self.keep_seconds)
        return [self._alert(c, None, self.wall_clock()) for c in self.budget.new_period()]

    def roll_period(self, now_unix: float) -> list[StateChanged]:
        """The period timer fired: enter the period holding ``now_unix`` if it is a new one."""
        budget = self.budget.settings
        period = period_start(now_unix, budget.period_seconds, budget.zone)
        if self.period_start_unix is not None and period <= self.period_start_unix:
            return []  # the timer ran a little early: nothing to do yet
        return self.start_period(period)

    def merge(self, retired: str, into: str) -> None:
        """Two tracks are one voice (the tracker merged them): the ledger moves ``retired``'s
        windows of this period to ``into`` and records the merge; the budget forgets it."""
        if self.period_start_unix is not None:
            self.store.merge_tracks(retired, into, self.period_start_unix)
        self.budget.forget(retired)

    def _figures(self, scored: ScoredWindow, state: BudgetState, window_end_unix: float) -> Figures:
        """The record of a window scored: the track, what it disclosed, its budget's state."""
        tracked, score, evidence = scored.tracked, scored.score, scored.evidence
        window = tracked.window
        return Figures(
            track=tracked.track,
            kind=tracked.kind,
            identity=tracked.identity,
            subject=score.subject,
            window_index=window.index,
            windows=evidence.windows,
            pooled_speech_seconds=evidence.speech_seconds,
            disclosures=score.disclosures,
            bounds=score.bounds,
            ceiling_bits=self.ceiling_bits,
            templates=self.templates,
            budget_bits=self.budget_bits,
            budget_measure=str(self.measure),
            state=state,
            information_gain_bits=score.information_gain_bits,
            top_candidate=score.top_candidate,
            top_candidate_bits=score.top_candidate_bits,
            extrapolated=score.extrapolated,
            period_start_unix=scored.period_start_unix,
            window_end_unix=window_end_unix,
            received=scored.received,
            population=self.population,
            at_least=score.at_least,
        )

    def process(self, scored: ScoredWindow) -> list[DaemonEvent]:
        events: list[DaemonEvent] = []
        current = self.period_start_unix
        if current is None or scored.period_start_unix > current:
            events.extend(self.start_period(scored.period_start_unix))
        # a window that closed just before the boundary, scored after the timer reset the
        # budgets: recorded in its own period, but it does not move this period's state
        stale = current is not None and scored.period_start_unix < current
        started = self.clock()
        tracked, score, evidence = scored.tracked, scored.score, scored.evidence
        window = tracked.window
        figure = next(d.cumulative_bits for d in score.disclosures if d.key == str(self.measure))
        if scored.received is not None:  # what the upstream received decides (the stronger)
            figure = scored.received.bits(self.measure)
        previous = self.budget.state(tracked.track)
        change = None if stale else self.budget.process(tracked.track, figure)
        state = self.budget.state(tracked.track)
        window_end_unix = window.closed_unix
        window_start_unix = window_end_unix - (window.end_seconds - window.start_seconds)
        figures = self._figures(scored, state, window_end_unix)
        self.store.record_window(
            tracked.track,
            period_start=scored.period_start_unix,
            window_start=window_start_unix,
            window_end=window_end_unix,
            speech_seconds=window.speech_seconds,
            pooled=evidence.pooled,
            figures=figures.to_json(),
            window_bits=finite_bits(score.window_bits),
            stream_start=window.start_seconds,
            stream_end=window.end_seconds,
        )
        if change is not None:
            events.append(self._alert(change, figures, window_end_unix))
        elif previous == state and not stale:
            self.store.update_budget(tracked.track, state, finite_bits(figure))
        scored_unix = self.wall_clock()
        ledger_seconds = self.clock() - started
        events.insert(
            0,
            WindowScored(
                figures=figures,
                window_start_seconds=window.start_seconds,
                window_end_seconds=window.end_seconds,
                window_speech_seconds=window.speech_seconds,
                window_closed_monotonic=window.closed_monotonic,
                scored_unix=scored_unix,
                latency_seconds=self.clock() - window.closed_monotonic,
                stage_seconds={
                    "features": window.feature_seconds,
                    "scorer": scored.scorer_seconds,
                    "ledger": ledger_seconds,
                },
                stream=window.stream,
            ),
        )
        return events


def alert_figures(figures: Figures | None) -> dict[str, Any]:
    """The figures part of an alert payload: the record's ``to_json()`` as ``figures`` (None for
    a period reset, which no window caused), and the flat ``features {"feature.measure": bits}``
    and ``bounds`` that alerts carried before the record (renamings of the same JSON)."""
    if figures is None:
        return {"features": {}, "bounds": {}, "figures": None}
    data = figures.to_json()
    return {
        "features": {key: values[0] for key, values in data["disclosures"].items()},
        "bounds": {bound: data["bounds"][bound] for bound in BOUNDS},
        "figures": data,
    }


def stored_figures(record: WindowRecord, *, budget_measure: str, delta: float) -> Figures:
    """A ledger row's figures as the record. Rows written before the record carried every key
    take track, period and window end from the row's columns, and the budget measure and δ from
    the configuration; a row that cannot be read is a StoreError naming it."""
    fallback = {
        "track": record.track,
        "period_start_unix": record.period_start,
        "window_end_unix": record.window_end,
        "budget_measure": budget_measure,
        "bounds": {"delta": delta},
    }
    try:
        return Figures.from_json(record.figures, fallback=fallback)
    except ValueError as exc:
        raise StoreError(f"ledger window {record.id} of track {record.track!r}: {exc}") from exc


def restored_track(
    record: WindowRecord,
    *,
    state: BudgetState,
    budget_bits: float,
    budget_measure: str,
    delta: float,
) -> TrackRestored:
    """The last stored window of a track as a :class:`TrackRestored`: figures as the ledger
    holds them, with the budget state, budget and budget measure of the restarted daemon."""
    figures = stored_figures(record, budget_measure=budget_measure, delta=delta)
    return TrackRestored(
        replace(figures, state=state, budget_bits=budget_bits, budget_measure=budget_measure)
    )


def expired_on_restart(
    unknown: Sequence[TrackPeriod], *, now_unix: float, idle_seconds: float, max_tracks: int
) -> set[str]:
    """The ``unknown-N`` tracks of the ledger a starting daemon must not resume: those silent for
    longer than ``idle_seconds`` (wall clock, the daemon's downtime included) and, of the rest,
    all but the ``max_tracks`` heard last — the tracker would have expired them too, and an
    expired track never comes back (its number is never reused)."""
    heard = sorted(
        (t for t in unknown if t.last_window_end is not None),
        key=lambda t: (t.last_window_end, t.track),
        reverse=True,
    )
    live = [t for t in heard if now_unix - float(t.last_window_end or 0.0) <= idle_seconds]
    keep = {t.track for t in live[:max_tracks]}
    return {t.track for t in unknown} - keep
