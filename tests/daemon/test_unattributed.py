"""Speech the tracker cannot attribute is counted, per source, and given to no one."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.daemon.exporter_events import stats
from tests.daemon.test_exporter_prometheus import make_exporter
from tests.daemon.test_tracker import at_cosine, fitted_tracker, profile, voices, window


def test_unattributed_windows_are_counted_and_go_to_no_track(rng: np.random.Generator) -> None:
    """A mixed window and one near a member but under their threshold: no track, no figure;
    their seconds add up in ``skipped_seconds``."""
    v = voices(rng, 2)
    t = fitted_tracker([profile("home-1", "0001", v[0])])
    mixed, _ = t.process(replace(window(v[1], 0, seconds=3.0), mixed=True))
    near, _ = t.process(window(at_cosine(v[0], v[1], 0.65), 1, seconds=2.5))  # 0.6 ≤ c < 0.7
    assert mixed is None and near is None and t.clusters == {}
    assert t.skipped_seconds == pytest.approx(5.5)


def test_unattributed_seconds_are_a_prometheus_counter() -> None:
    exporter, registry = make_exporter()
    get = registry.get_sample_value
    assert get("voxmeter_unattributed_speech_seconds_total") == 0.0  # before any stats
    exporter.apply(replace(stats(1000, 400, 0.0), unattributed_seconds=4.5))
    exporter.apply(replace(stats(2000, 800, 0.0), unattributed_seconds=7.0))
    assert get("voxmeter_unattributed_speech_seconds_total") == pytest.approx(7.0)
