"""The evidence ledger: window records and pooled evidence that survive a restart."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from monitor.features.base import Observation
from monitor.store import Store, open_store

PERIOD = 1_790_000_000.0  # a budget period start, POSIX seconds


def _pooled(counts: np.ndarray, embedding: np.ndarray, seconds: float) -> dict[str, Observation]:
    unit = embedding / np.linalg.norm(embedding)
    return {
        "f0": Observation("f0", counts.copy(), seconds),
        "embedding": Observation("embedding", unit, seconds),
    }


def test_pooled_evidence_survives_reopening(db_path: Path, rng: np.random.Generator) -> None:
    counts = np.zeros(107)
    embedding = np.zeros(256)
    seconds = 0.0
    with open_store(db_path) as store:
        for window in range(5):
            window_counts = rng.integers(0, 9, 107).astype(float)
            window_embedding = rng.standard_normal(256)
            counts += window_counts
            embedding += 3.0 * window_embedding
            seconds += 3.0
            store.record_window(
                "spk1",
                period_start=PERIOD,
                window_start=PERIOD + 10 * window,
                window_end=PERIOD + 10 * window + 4,
                speech_seconds=3.0,
                pooled=_pooled(counts, embedding, seconds),
                figures={"embedding": {"srd": 1.5 + window, "lid": 0.5}},
                window_bits=0.5 + window % 3,
            )
        store.record_window(
            "unknown-1",
            period_start=PERIOD,
            window_start=PERIOD,
            window_end=PERIOD + 3,
            speech_seconds=3.0,
            pooled=_pooled(np.ones(107), np.ones(256), 3.0),
        )
    with open_store(db_path) as store:  # a restart
        assert store.tracks(PERIOD) == ["spk1", "unknown-1"]
        resumed = store.track_period("spk1", PERIOD)
        assert resumed.windows == 5 and resumed.speech_seconds == 15.0
        assert resumed.max_window_bits == 2.5 and resumed.last_window_end == PERIOD + 44
        np.testing.assert_array_equal(resumed.pooled["f0"].values, counts)
        np.testing.assert_allclose(
            resumed.pooled["embedding"].values, embedding / np.linalg.norm(embedding)
        )
        assert resumed.pooled["embedding"].seconds == 15.0
        assert store.pooled("spk1", PERIOD).keys() == {"f0", "embedding"}
        windows = store.windows("spk1", PERIOD)
        assert [w.figures["embedding"]["srd"] for w in windows] == [1.5, 2.5, 3.5, 4.5, 5.5]
        pooled_windows = store._conn.execute(
            "SELECT windows FROM ledger_pooled WHERE track = 'spk1'"
        ).fetchall()
        assert pooled_windows == [(5,), (5,)]
        # A new period starts empty.
        assert store.pooled("spk1", PERIOD + 86400) == {}
        assert store.track_period("spk1", PERIOD + 86400).windows == 0


def test_window_and_pooled_are_one_transaction(store: Store) -> None:
    good = {"f0": Observation("f0", np.ones(107), 3.0)}
    store.record_window(
        "spk1", period_start=PERIOD, window_start=0, window_end=3, speech_seconds=3, pooled=good
    )
    broken = {"f0": Observation("f0", 2 * np.ones(107), 6.0), "phone": good["f0"]}
    with pytest.raises(ValueError, match="observation is for feature 'f0'"):
        store.record_window(
            "spk1",
            period_start=PERIOD,
            window_start=3,
            window_end=6,
            speech_seconds=3,
            pooled=broken,
        )
    with pytest.raises(ValueError, match="CHECK constraint"):  # window_end < window_start
        store.record_window(
            "spk1",
            period_start=PERIOD,
            window_start=9,
            window_end=6,
            speech_seconds=3,
            pooled={"f0": Observation("f0", 5 * np.ones(107), 9.0)},
        )
    assert store.track_period("spk1", PERIOD).windows == 1
    np.testing.assert_array_equal(store.pooled("spk1", PERIOD)["f0"].values, np.ones(107))


def test_prune_old_periods(store: Store) -> None:
    pooled = {"f0": Observation("f0", np.ones(3), 3.0)}
    for period in (PERIOD, PERIOD + 86400):
        store.record_window(
            "spk1",
            period_start=period,
            window_start=period,
            window_end=period + 3,
            speech_seconds=3.0,
            pooled=pooled,
        )
    assert store.prune_ledger(PERIOD + 86400) == 1
    assert store.pooled("spk1", PERIOD) == {}
    assert store.track_period("spk1", PERIOD + 86400).windows == 1
