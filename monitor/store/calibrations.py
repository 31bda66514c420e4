"""Stored calibrations: JSON documents with their provenance, newest per name wins.

A calibration fitted on the user's own corpus (``voxmeter calibrate --db``) travels with the
templates it was fitted for; the daemon prefers it to the shipped one (see daemon/build.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from monitor.store.base import Database, dumps, utc_now

if TYPE_CHECKING:
    from monitor.calibration.buckets import CalibrationSet

__all__ = ["CalibrationRecord", "CalibrationsMixin"]


@dataclass(frozen=True)
class CalibrationRecord:
    """A stored calibration document (JSON text) and where it came from."""

    id: int
    name: str
    document: str
    corpus: str | None
    protocol: str | None
    fitted: str | None  # date of the fit, as the calibration states it
    saved: str


class CalibrationsMixin(Database):
    """Save and load calibration documents (see module docstring)."""

    def save_calibration_document(
        self,
        document: str | Mapping[str, Any],
        *,
        name: str = "default",
        corpus: str | None = None,
        protocol: str | None = None,
        fitted: str | None = None,
    ) -> int:
        """Store a calibration JSON document with its provenance; returns its id."""
        text = document if isinstance(document, str) else dumps(dict(document))
        json.loads(text)  # refuse text that is not JSON here, with Python's message
        with self._transaction() as conn:
            cursor = conn.execute(
                "INSERT INTO calibrations (name, document, corpus, protocol, fitted, saved) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (name, text, corpus, protocol, fitted, utc_now()),
            )
            return int(cursor.lastrowid or 0)

    def save_calibration(self, calibration: CalibrationSet, *, name: str = "default") -> int:
        """Store a :class:`~monitor.calibration.buckets.CalibrationSet` (its ``to_json()``) with
        ``corpus``, ``protocol`` and the fit date (``date`` or ``created``) from its metadata."""
        metadata = calibration.metadata

        def text(*keys: str) -> str | None:
            for key in keys:
                value = metadata.get(key)
                if value is not None:
                    return value if isinstance(value, str) else dumps(value)
            return None

        return self.save_calibration_document(
            calibration.to_json(),
            name=name,
            corpus=text("corpus"),
            protocol=text("protocol"),
            fitted=text("date", "created"),
        )

    def calibration_record(self, name: str = "default") -> CalibrationRecord | None:
        """The most recently saved calibration called ``name``; None when there is none."""
        with self._read() as conn:
            row = conn.execute(
                "SELECT id, name, document, corpus, protocol, fitted, saved FROM calibrations "
                "WHERE name = ? ORDER BY id DESC LIMIT 1",
                (name,),
            ).fetchone()
        return None if row is None else CalibrationRecord(*row)

    def load_calibration(self, name: str = "default") -> CalibrationSet | None:
        """The latest stored calibration as a CalibrationSet; None when none is stored (the
        daemon then falls back to ``CalibrationSet.load_default()``)."""
        # the store sits below calibration (which reads features and templates): a top-level
        # import would be upward; only loading a stored calibration needs it
        from monitor.calibration.buckets import CalibrationSet

        record = self.calibration_record(name)
        if record is None:
            return None
        return CalibrationSet.from_json(
            record.document, source=f"{self.path}: calibration {name!r}"
        )
