"""The evidence ledger: what the daemon has measured, per track and budget period.

Per window, one row of disclosure figures (never audio). Per track, feature and period, the
running *pooled* observation — what an attacker who recorded everything would hold
— replaced in the same transaction as the window row, so a restart resumes exactly where the
daemon stopped: the pooled evidence and the window count always agree.

Times are POSIX seconds (float), as the daemon's clock gives them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from monitor.features.base import Observation
from monitor.store.base import Database, blob_vector, dumps, utc_now, vector_blob

__all__ = ["LedgerMixin", "MergeRecord", "TrackPeriod", "WindowRecord"]


@dataclass(frozen=True)
class WindowRecord:
    """One closed window of one track: its times and the figures the scorer computed."""

    id: int
    track: str
    period_start: float  # POSIX seconds
    window_start: float
    window_end: float
    speech_seconds: float
    window_bits: float | None  # the window's own disclosure (composition uses the max)
    figures: dict[str, Any]
    stream_start: float | None = None  # seconds into the file or stream (None: older rows)
    stream_end: float | None = None


_COLUMNS = (
    "id, track, period_start, window_start, window_end, speech_seconds, window_bits, figures, "
    "stream_start, stream_end"
)


def _record(row: tuple[Any, ...]) -> WindowRecord:
    """A ``ledger_windows`` row (:data:`_COLUMNS`) as a record."""
    id_, track, period_start, window_start, window_end, speech, bits, figures, s0, s1 = row
    return WindowRecord(
        id_, track, period_start, window_start, window_end, speech, bits, json.loads(figures),
        s0, s1,
    )  # fmt: skip


@dataclass(frozen=True)
class MergeRecord:
    """Two tracks found to be one voice: ``retired``'s windows now belong to ``into``."""

    period_start: float
    retired: str
    into: str
    windows: int  # windows moved
    merged: str  # ISO time


@dataclass(frozen=True)
class TrackPeriod:
    """Everything the daemon needs to resume one track in one period after a restart."""

    track: str
    period_start: float
    windows: int
    speech_seconds: float  # L, the total behind the pooled evidence
    max_window_bits: float | None
    last_window_end: float | None
    pooled: dict[str, Observation] = field(default_factory=dict)


class LedgerMixin(Database):
    """Window records and pooled evidence (see module docstring)."""

    def record_window(
        self,
        track: str,
        *,
        period_start: float,
        window_start: float,
        window_end: float,
        speech_seconds: float,
        pooled: Mapping[str, Observation],
        figures: Mapping[str, Any] | None = None,
        window_bits: float | None = None,
        stream_start: float | None = None,
        stream_end: float | None = None,
    ) -> int:
        """Append one window record and replace the track's pooled evidence, atomically.

        ``pooled`` maps feature → the running pooled observation *after* this window.
        ``figures`` is the window's disclosure figures (JSON); ``stream_start``/``stream_end``
        the window's place in the file or stream (seconds), beside the wall-clock times.
        Returns the window record id.
        """
        _check_window(track, period_start, window_start, window_end, speech_seconds, window_bits)
        rows = _pooled_rows(track, pooled)
        figures_text = dumps(dict(figures or {}))
        now = utc_now()
        with self._transaction() as conn:
            cursor = conn.execute(
                "INSERT INTO ledger_windows (track, period_start, window_start, window_end, "
                "speech_seconds, window_bits, figures, stream_start, stream_end) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    track,
                    float(period_start),
                    float(window_start),
                    float(window_end),
                    float(speech_seconds),
                    None if window_bits is None else float(window_bits),
                    figures_text,
                    None if stream_start is None else float(stream_start),
                    None if stream_end is None else float(stream_end),
                ),
            )
            conn.executemany(
                "INSERT INTO ledger_pooled (track, period_start, feature, dimension, seconds, "
                "vector, windows, updated) VALUES (?, ?, ?, ?, ?, ?, 1, ?) "
                "ON CONFLICT (track, period_start, feature) DO UPDATE SET "
                "dimension = excluded.dimension, seconds = excluded.seconds, "
                "vector = excluded.vector, windows = ledger_pooled.windows + 1, "
                "updated = excluded.updated",
                [(track, float(period_start), *row, now) for row in rows],
            )
            return int(cursor.lastrowid or 0)

    def pooled(self, track: str, period_start: float) -> dict[str, Observation]:
        """The track's pooled evidence per feature in this period ({} when nothing yet)."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT feature, vector, seconds FROM ledger_pooled "
                "WHERE track = ? AND period_start = ? ORDER BY feature",
                (track, float(period_start)),
            ).fetchall()
        return {f: Observation(f, blob_vector(blob), float(s)) for f, blob, s in rows}

    def track_period(self, track: str, period_start: float) -> TrackPeriod:
        """Window count, speech seconds, max window bits and pooled evidence of one track."""
        with self._read() as conn:
            windows, seconds, max_bits, last_end = conn.execute(
                "SELECT count(*), coalesce(sum(speech_seconds), 0), max(window_bits), "
                "max(window_end) FROM ledger_windows WHERE track = ? AND period_start = ?",
                (track, float(period_start)),
            ).fetchone()
        return TrackPeriod(
            track=track,
            period_start=float(period_start),
            windows=int(windows),
            speech_seconds=float(seconds),
            max_window_bits=None if max_bits is None else float(max_bits),
            last_window_end=None if last_end is None else float(last_end),
            pooled=self.pooled(track, period_start),
        )

    def tracks(self, period_start: float) -> list[str]:
        """Tracks with windows in this period, sorted: whom to resume after a restart."""
        with self._read() as conn:
            return [
                r[0]
                for r in conn.execute(
                    "SELECT DISTINCT track FROM ledger_windows WHERE period_start = ? "
                    "ORDER BY track",
                    (float(period_start),),
                )
            ]

    def windows(self, track: str, period_start: float) -> list[WindowRecord]:
        """The track's window records in this period, oldest first."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM ledger_windows WHERE track = ? AND period_start = ? "
                "ORDER BY window_end, id",
                (track, float(period_start)),
            ).fetchall()
        return [_record(row) for row in rows]

    def last_window(self, track: str, period_start: float) -> WindowRecord | None:
        """The track's latest window record in this period (what a restart exports again)."""
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM ledger_windows WHERE track = ? AND period_start = ? "
                "ORDER BY window_end DESC, id DESC LIMIT 1",
                (track, float(period_start)),
            ).fetchone()
        return None if row is None else _record(row)

    def merge_tracks(self, retired: str, into: str, period_start: float) -> int:
        """Record that ``retired`` and ``into`` are one voice: ``retired``'s windows of the
        period move to ``into`` and its pooled evidence goes (the daemon writes ``into``'s
        merged pooled evidence with its next window), in one transaction. Returns windows
        moved."""
        if not retired or not into or retired == into:
            raise ValueError(f"merge needs two different tracks, got {retired!r}, {into!r}")
        period = float(period_start)
        with self._transaction() as conn:
            moved = conn.execute(
                "UPDATE ledger_windows SET track = ? WHERE track = ? AND period_start = ?",
                (into, retired, period),
            ).rowcount
            conn.execute(
                "DELETE FROM ledger_pooled WHERE track = ? AND period_start = ?", (retired, period)
            )
            conn.execute("DELETE FROM budget_state WHERE alias = ?", (retired,))
            conn.execute(
                "INSERT INTO ledger_merges (period_start, retired, into_track, windows, merged) "
                "VALUES (?, ?, ?, ?, ?)",
                (period, retired, into, int(moved), utc_now()),
            )
        return int(moved)

    def merges(self, period_start: float) -> list[MergeRecord]:
        """The merges of a period, oldest first."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT period_start, retired, into_track, windows, merged FROM ledger_merges "
                "WHERE period_start = ? ORDER BY id",
                (float(period_start),),
            ).fetchall()
        return [MergeRecord(float(p), r, i, int(w), m) for p, r, i, w, m in rows]

    def prune_ledger(self, before: float) -> int:
        """Delete ledger periods that started before ``before``; returns windows deleted."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM ledger_pooled WHERE period_start < ?", (float(before),))
            conn.execute("DELETE FROM ledger_merges WHERE period_start < ?", (float(before),))
            cursor = conn.execute(
                "DELETE FROM ledger_windows WHERE period_start < ?", (float(before),)
            )
            return int(cursor.rowcount)


def _check_window(
    track: str,
    period_start: float,
    window_start: float,
    window_end: float,
    speech_seconds: float,
    window_bits: float | None,
) -> None:
    """A window record names its track and holds finite times: refused before any write."""
    if not track:
        raise ValueError("track: must be a non-empty string")
    for name, value in (
        ("period_start", period_start),
        ("window_start", window_start),
        ("window_end", window_end),
        ("speech_seconds", speech_seconds),
    ):
        if not np.isfinite(value):
            raise ValueError(f"track {track!r}: {name} must be finite, got {value}")
    if window_bits is not None and not np.isfinite(window_bits):
        raise ValueError(f"track {track!r}: window_bits must be finite, got {window_bits}")


def _pooled_rows(
    track: str, pooled: Mapping[str, Observation]
) -> list[tuple[str, int, float, bytes]]:
    """(feature, dimension, seconds, vector blob) of each pooled observation, each checked to
    be of the feature it is filed under."""
    rows = []
    for feature, observation in pooled.items():
        what = f"track {track!r}, pooled {feature!r}"
        if observation.feature != feature:
            raise ValueError(f"{what}: observation is for feature {observation.feature!r}")
        blob, dimension = vector_blob(observation.values, what)
        rows.append((feature, dimension, float(observation.seconds), blob))
    return rows
