"""Budget state per speaker and the alert outbox.

A budget state change and its alert are written in ONE transaction: after a crash either both
exist or neither, so an alert is never lost nor sent for a state that was not stored. The MQTT
exporter publishes :meth:`OutboxMixin.pending` in ``seq`` order and calls :meth:`ack` once the
broker acknowledges: delivery is at-least-once and in order; ``seq`` lets consumers drop
duplicates.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from monitor.store.base import Database, dumps, utc_now
from monitor.vocabulary import BUDGET_STATES, BudgetState

__all__ = ["BudgetRecord", "OutboxMessage", "OutboxMixin"]


@dataclass(frozen=True)
class BudgetRecord:
    """A speaker's stored budget state (the row, with its bits and time)."""

    alias: str
    state: BudgetState
    bits: float  # the measure the budget compares, at the last update
    updated: str  # ISO 8601 UTC


@dataclass(frozen=True)
class OutboxMessage:
    """One alert waiting for the broker's acknowledgement."""

    seq: int  # increasing, never reused
    topic: str
    payload: dict[str, Any]
    created: str


def _check(alias: str, state: str, bits: float) -> None:
    if not alias:
        raise ValueError("alias: must be a non-empty string")
    if state not in BUDGET_STATES:
        raise ValueError(f"budget state {state!r}: must be one of {', '.join(BUDGET_STATES)}")
    if not np.isfinite(bits):
        raise ValueError(f"alias {alias!r}: bits must be finite, got {bits}")


_UPSERT_STATE = (
    "INSERT INTO budget_state (alias, state, bits, updated) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (alias) DO UPDATE SET state = excluded.state, bits = excluded.bits, "
    "updated = excluded.updated"
)


class OutboxMixin(Database):
    """Budget states and the outbox (see module docstring)."""

    def budget_state(self, alias: str) -> BudgetRecord | None:
        """The stored state of one speaker; None before their first update."""
        with self._read() as conn:
            row = conn.execute(
                "SELECT alias, state, bits, updated FROM budget_state WHERE alias = ?", (alias,)
            ).fetchone()
        return None if row is None else BudgetRecord(*row)

    def budget_states(self) -> dict[str, BudgetRecord]:
        """Every stored budget state, by alias (the daemon restores these at start)."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT alias, state, bits, updated FROM budget_state ORDER BY alias"
            ).fetchall()
        return {row[0]: BudgetRecord(*row) for row in rows}

    def update_budget(self, alias: str, state: str, bits: float) -> None:
        """Store the current bits (and state) without an alert: no transition happened."""
        _check(alias, state, bits)
        with self._transaction() as conn:
            conn.execute(_UPSERT_STATE, (alias, state, float(bits), utc_now()))

    def transition(
        self,
        alias: str,
        to_state: str,
        bits: float,
        alert_payload: Mapping[str, Any],
        topic: str,
    ) -> int:
        """Store ``alias``'s new state and enqueue its alert in one transaction; returns seq."""
        _check(alias, to_state, bits)
        if not topic:
            raise ValueError("topic: must be a non-empty string")
        payload = dumps(dict(alert_payload))
        now = utc_now()
        with self._transaction() as conn:
            conn.execute(_UPSERT_STATE, (alias, to_state, float(bits), now))
            cursor = conn.execute(
                "INSERT INTO outbox (topic, payload, created) VALUES (?, ?, ?)",
                (topic, payload, now),
            )
            return int(cursor.lastrowid or 0)

    def pending(self, limit: int = 100) -> list[OutboxMessage]:
        """The oldest ``limit`` unacknowledged alerts, in ``seq`` order."""
        if limit < 1:
            raise ValueError(f"limit: must be ≥ 1, got {limit}")
        with self._read() as conn:
            rows = conn.execute(
                "SELECT seq, topic, payload, created FROM outbox ORDER BY seq LIMIT ?", (limit,)
            ).fetchall()
        return [
            OutboxMessage(seq, topic, json.loads(p), created) for seq, topic, p, created in rows
        ]

    def ack(self, seq: int) -> bool:
        """Delete an acknowledged alert; False if it was already gone (a duplicate ack)."""
        with self._transaction() as conn:
            return conn.execute("DELETE FROM outbox WHERE seq = ?", (int(seq),)).rowcount > 0

    def pending_count(self) -> int:
        """Alerts not yet acknowledged (the ``voxmeter_alerts_pending`` gauge)."""
        with self._read() as conn:
            return int(conn.execute("SELECT count(*) FROM outbox").fetchone()[0])
