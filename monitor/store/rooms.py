"""What each source has learnt of its room (:mod:`monitor.tracking.domain`), kept across
restarts: per source a seconds-weighted sum of embedding residuals and its seconds, tagged with
the model that made them so another embedding backend starts afresh. No audio, no window."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.store.base import Database, blob_vector, utc_now, vector_blob

__all__ = ["RoomsMixin", "SourceRoom"]


@dataclass(frozen=True)
class SourceRoom:
    """One source's room: the seconds-weighted sum of its residuals (D,) and the speech
    seconds behind it."""

    source: str  # the source's name ("" the daemon's only source)
    residuals: npt.NDArray[np.float64]
    seconds: float


class RoomsMixin(Database):
    """Sources' rooms: replaced as a whole, read back for one model."""

    def save_rooms(self, rooms: Sequence[SourceRoom], model: str) -> None:
        """Keep exactly ``rooms`` (made by ``model``), in one transaction."""
        rows = []
        now = utc_now()
        for room in rooms:
            if not (np.isfinite(room.seconds) and room.seconds >= 0.0):
                raise ValueError(f"source {room.source!r}: seconds must be ≥ 0, got {room.seconds}")
            blob, dimension = vector_blob(room.residuals, f"source {room.source!r}")
            rows.append((room.source, model, dimension, blob, float(room.seconds), now))
        with self._transaction() as conn:
            conn.execute("DELETE FROM source_rooms")
            conn.executemany(
                "INSERT INTO source_rooms (source, model, dimension, residuals, seconds, updated) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )

    def rooms(self, model: str) -> list[SourceRoom]:
        """The rooms ``model`` made, least recently updated first."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT source, residuals, seconds FROM source_rooms WHERE model = ? "
                "ORDER BY updated, rowid",
                (model,),
            ).fetchall()
        return [SourceRoom(source, blob_vector(blob), float(s)) for source, blob, s in rows]
