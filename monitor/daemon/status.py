"""The daemon's state as stored, for ``voxmeter status``: this period's tracks and figures."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from monitor.daemon.budget import period_start
from monitor.store.database import Store


@dataclass(frozen=True)
class TrackStatus:
    """The latest figures of one track in the current period, read from the ledger."""

    track: str
    state: str
    windows: int
    speech_seconds: float
    window_end_unix: float
    figures: dict[str, Any]


def current_status(
    store: Store, period_seconds: float, *, now: float | None = None
) -> list[TrackStatus]:
    """Every track of the current period with its last window's figures (oldest track first)."""
    period = period_start(time.time() if now is None else now, period_seconds)
    states = store.budget_states()
    rows = []
    for track in store.tracks(period):
        windows = store.windows(track, period)
        if not windows:
            continue
        last = windows[-1]
        stored = states.get(track)
        rows.append(
            TrackStatus(
                track=track,
                state=stored.state if stored else last.figures.get("state", "ok"),
                windows=len(windows),
                speech_seconds=sum(w.speech_seconds for w in windows),
                window_end_unix=last.window_end,
                figures=last.figures,
            )
        )
    return rows
