"""Ledger schema v4: each window's stream position (migrated from v3 ledgers) and track merges."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from monitor.features.base import Observation
from monitor.store import SCHEMA_VERSION, open_store
from monitor.store.database import connect, migrate

PERIOD = 1_800_000_000.0


def pooled(value: float) -> dict[str, Observation]:
    return {"embedding": Observation("embedding", np.full(4, value), 3.0)}


def test_a_v3_ledger_is_migrated_and_its_windows_read_without_a_position(db_path: Path) -> None:
    path, conn = connect(db_path)
    assert migrate(conn, path, target=3) == 3
    conn.execute(
        "INSERT INTO ledger_windows (track, period_start, window_start, window_end, "
        "speech_seconds, window_bits, figures) VALUES ('home-1', ?, 10.0, 13.0, 3.0, 1.5, '{}')",
        (PERIOD,),
    )
    conn.commit()
    conn.close()
    with open_store(db_path) as store:
        assert store.schema_version == SCHEMA_VERSION >= 4
        (old,) = store.windows("home-1", PERIOD)
        assert (old.window_end, old.window_bits) == (13.0, 1.5)
        assert old.stream_start is None and old.stream_end is None
        store.record_window(
            "home-1", period_start=PERIOD, window_start=20.0, window_end=23.0,
            speech_seconds=3.0, pooled=pooled(1.0), stream_start=61.25, stream_end=64.5,
        )  # fmt: skip
        new = store.last_window("home-1", PERIOD)
        assert new is not None and (new.stream_start, new.stream_end) == (61.25, 64.5)


def test_merging_moves_the_windows_and_records_the_merge(db_path: Path) -> None:
    with open_store(db_path) as store:
        for track, value, at in (("unknown-1", 1.0, 0.0), ("unknown-2", 2.0, 5.0)):
            for k in range(2):
                store.record_window(
                    track, period_start=PERIOD, window_start=at + k, window_end=at + k + 1,
                    speech_seconds=3.0, pooled=pooled(value),
                )  # fmt: skip
        store.transition("unknown-2", "warning", 4.0, {"to": "warning"}, "t/alerts")
        assert store.merge_tracks("unknown-2", "unknown-1", PERIOD) == 2
        assert store.tracks(PERIOD) == ["unknown-1"]
        assert len(store.windows("unknown-1", PERIOD)) == 4
        assert store.pooled("unknown-2", PERIOD) == {}
        assert "unknown-2" not in store.budget_states()
        (merge,) = store.merges(PERIOD)
        assert (merge.retired, merge.into, merge.windows) == ("unknown-2", "unknown-1", 2)
        with pytest.raises(ValueError, match="two different tracks"):
            store.merge_tracks("unknown-1", "unknown-1", PERIOD)
        store.prune_ledger(PERIOD + 1)
        assert store.merges(PERIOD) == []
