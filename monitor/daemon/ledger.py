"""The ledger stage's core: one SQLite transaction per window (record, pooled evidence,
budget state and, on a transition, the alert in the outbox), so a restart resumes from it."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from monitor.daemon.budget import BudgetMachine, Transition, period_start
from monitor.daemon.events import (
    CompositionBounds,
    DaemonEvent,
    Disclosure,
    StateChanged,
    TrackRestored,
    WindowScored,
)
from monitor.daemon.evidence import ScoredWindow
from monitor.jsonsafe import finite_bits
from monitor.store.database import Store
from monitor.store.ledger import WindowRecord
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
        self.alert_topic = alert_topic
        self.device_id = device_id
        self.clock = clock
        self.wall_clock = wall_clock
        self.period_start_unix: float | None = None

    def _alert(
        self, change: Transition, scored: ScoredWindow | None, window_end_unix: float
    ) -> StateChanged:
        payload: dict[str, Any] = {
            "alias": change.track,
            "from": change.from_state,
            "to": change.to_state,
            "bits": finite_bits(change.bits),
            "budget": self.budget_bits,
            "features": {},
            "bounds": {},
            "window_end": window_end_unix,
            "device": self.device_id,
            "reason": change.reason,
        }
        if scored is not None:
            payload["features"] = {
                d.key: finite_bits(d.cumulative_bits) for d in scored.score.disclosures
            }
            payload["bounds"] = scored.score.bounds.bits()
        bits = finite_bits(change.bits)
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
        period = period_start(now_unix, self.budget.settings.period_seconds)
        if self.period_start_unix is not None and period <= self.period_start_unix:
            return []  # the timer ran a little early: nothing to do yet
        return self.start_period(period)

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
        previous = self.budget.state(tracked.track)
        change = None if stale else self.budget.process(tracked.track, figure)
        state = self.budget.state(tracked.track)
        window_end_unix = window.closed_unix
        window_start_unix = window_end_unix - (window.end_seconds - window.start_seconds)
        scored_event = WindowScored(
            track=tracked.track,
            kind=tracked.kind,
            identity=tracked.identity,
            window_index=window.index,
            window_start_seconds=window.start_seconds,
            window_end_seconds=window.end_seconds,
            window_speech_seconds=window.speech_seconds,
            pooled_speech_seconds=evidence.speech_seconds,
            windows=evidence.windows,
            disclosures=score.disclosures,
            bounds=score.bounds,
            ceiling_bits=math.log2(self.templates),
            templates=self.templates,
            budget_bits=self.budget_bits,
            budget_measure=str(self.measure),
            budget_figure_bits=figure,
            state=state,
            information_gain_bits=score.information_gain_bits,
            top_candidate=score.top_candidate,
            top_candidate_bits=score.top_candidate_bits,
            extrapolated=score.extrapolated,
            period_start_unix=scored.period_start_unix,
            window_closed_unix=window.closed_unix,
            window_closed_monotonic=window.closed_monotonic,
            scored_unix=math.nan,  # set below, once the ledger holds the window
            latency_seconds=math.nan,
        )
        self.store.record_window(
            tracked.track,
            period_start=scored.period_start_unix,
            window_start=window_start_unix,
            window_end=window_end_unix,
            speech_seconds=window.speech_seconds,
            pooled=evidence.pooled,
            figures=ledger_figures(scored_event, subject=score.subject),
            window_bits=finite_bits(score.window_bits),
        )
        if change is not None:
            events.append(self._alert(change, scored, window_end_unix))
        elif previous == state and not stale:
            self.store.update_budget(tracked.track, state, finite_bits(figure))
        scored_unix = self.wall_clock()
        ledger_seconds = self.clock() - started
        events.insert(
            0,
            replace(
                scored_event,
                scored_unix=scored_unix,
                latency_seconds=self.clock() - window.closed_monotonic,
                stage_seconds={
                    "features": window.feature_seconds,
                    "scorer": scored.scorer_seconds,
                    "ledger": ledger_seconds,
                },
            ),
        )
        return events


def ledger_figures(event: WindowScored, *, subject: str) -> dict[str, Any]:
    """The ledger's JSON of a scored window (what ``status`` shows); :func:`restored_window` is
    its inverse. Figures are kept finite (:func:`~monitor.jsonsafe.finite_bits`)."""
    b = event.bounds
    return {
        "kind": event.kind,
        "identity": event.identity,
        "subject": subject,
        "window_index": event.window_index,
        "windows": event.windows,
        "pooled_speech_seconds": event.pooled_speech_seconds,
        "disclosures": {
            d.key: [finite_bits(d.cumulative_bits), finite_bits(d.window_bits)]
            for d in event.disclosures
        },
        "bounds": {**b.bits(), "epsilon_nats": b.epsilon_nats},
        "ceiling_bits": event.ceiling_bits,
        "templates": event.templates,
        "budget_bits": event.budget_bits,
        "budget_figure_bits": finite_bits(event.budget_figure_bits),
        "state": event.state,
        "information_gain_bits": event.information_gain_bits,
        "top_candidate": event.top_candidate,
        "top_candidate_bits": event.top_candidate_bits,
        "extrapolated": event.extrapolated,
    }


def _disclosure(key: FigureKey, values: Sequence[float]) -> Disclosure:
    """A ledger ``disclosures`` entry (``[cumulative, window]`` bits) as a Disclosure."""
    return Disclosure(key.feature, key.measure, float(values[0]), float(values[1]))


def restored_window(
    record: WindowRecord,
    *,
    state: str,
    budget_bits: float,
    budget_measure: str,
    delta: float,
) -> TrackRestored:
    """The last stored window of a track as a :class:`TrackRestored` (see its docstring):
    figures as the ledger holds them, budget state and budget of the restarted daemon."""
    f = record.figures
    bounds = f["bounds"]
    return TrackRestored(
        WindowScored(
            track=record.track,
            kind=f["kind"],
            identity=f.get("identity"),
            window_index=int(f["window_index"]),
            window_start_seconds=0.0,
            window_end_seconds=0.0,
            window_speech_seconds=record.speech_seconds,
            pooled_speech_seconds=float(f["pooled_speech_seconds"]),
            windows=int(f["windows"]),
            disclosures=tuple(
                _disclosure(FigureKey.parse(key), values)
                for key, values in f["disclosures"].items()
            ),
            bounds=CompositionBounds(
                windows=int(f["windows"]),
                epsilon_nats=float(bounds["epsilon_nats"]),
                delta=delta,
                basic_bits=float(bounds["basic"]),
                advanced_bits=float(bounds["advanced"]),
                optimal_bits=float(bounds["optimal"]),
            ),
            ceiling_bits=float(f["ceiling_bits"]),
            templates=int(f["templates"]),
            budget_bits=budget_bits,
            budget_measure=budget_measure,
            budget_figure_bits=float(f["budget_figure_bits"]),
            state=state,  # type: ignore[arg-type]
            information_gain_bits=f.get("information_gain_bits"),
            top_candidate=f.get("top_candidate"),
            top_candidate_bits=f.get("top_candidate_bits"),
            extrapolated=dict(f.get("extrapolated", {})),
            period_start_unix=record.period_start,
            window_closed_unix=record.window_end,
            window_closed_monotonic=math.nan,
            scored_unix=record.window_end,
            latency_seconds=math.nan,
        )
    )
