"""Speech the tracker cannot attribute is counted, per source, and given to no one."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from monitor.audio.frames import StreamKey
from monitor.events.messages import SourceCounts
from tests.exporters.exporter_events import stats
from tests.exporters.test_exporter_prometheus import make_exporter
from tests.tracking.test_tracker import at_cosine, fitted_tracker, profile, voices, window


def test_unattributed_windows_are_counted_per_source_and_go_to_no_track(
    rng: np.random.Generator,
) -> None:
    """A mixed window and one near a member but under their threshold: no track, no figure;
    their seconds add up in ``skipped_seconds``, and per source in ``skipped_by_source``."""
    v = voices(rng, 2)
    t = fitted_tracker([profile("home-1", "0001", v[0])])
    kitchen, hall = StreamKey("kitchen"), StreamKey("hall", 2)
    mixed, _ = t.process(replace(window(v[1], 0, seconds=3.0), mixed=True, stream=kitchen))
    near = replace(window(at_cosine(v[0], v[1], 0.65), 1, seconds=2.5), stream=hall)
    assert mixed is None and t.process(near)[0] is None and t.clusters == {}  # 0.6 ≤ c < 0.7
    assert t.skipped_seconds == pytest.approx(5.5)
    assert t.skipped_by_source == pytest.approx({"kitchen": 3.0, "hall": 2.5})


def test_unattributed_seconds_are_a_prometheus_counter_per_source() -> None:
    exporter, registry = make_exporter()
    get = registry.get_sample_value
    name = "voxmeter_source_unattributed_seconds_total"
    exporter.apply(replace(stats(1000, 400, 0.0), sources={"kitchen": SourceCounts()}))
    assert get(name, {"source": "kitchen"}) == 0.0
    exporter.apply(
        replace(stats(1000, 400, 0.0), sources={"kitchen": SourceCounts(unattributed_seconds=4.5)})
    )
    exporter.apply(
        replace(stats(2000, 800, 0.0), sources={"kitchen": SourceCounts(unattributed_seconds=7.0)})
    )
    assert get(name, {"source": "kitchen"}) == pytest.approx(7.0)
