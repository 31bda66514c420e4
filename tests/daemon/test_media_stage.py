"""The tracker stage keeps a programme's windows from the scorer: a television's speech is
counted, never scored nor written to the ledger as anyone's."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from monitor.daemon.stages import PipelineStages
from monitor.events.messages import TrackedWindow
from tests.tracking.test_media import SECONDS, Clock, Room, tracker, window


def test_the_tracker_stage_passes_no_media_window_to_the_scorer(
    rng: np.random.Generator,
) -> None:
    room, clock = Room(rng), Clock()
    stages = PipelineStages.__new__(PipelineStages)  # the stage body over the state it reads
    stages.tracker = tracker(room, clock)
    voices = [room.tv() for _ in range(150)] + [room.noisy(room.members[0]) for _ in range(3)]

    async def scenario() -> list[Any]:
        stages.queues = {"features": asyncio.Queue(), "tracked": asyncio.Queue()}
        for k, vector in enumerate(voices):
            await stages.queues["features"].put(window(vector, k))
        await stages.queues["features"].put(None)
        clock.now = len(voices) * SECONDS
        await stages._tracker_stage()
        out = []
        while (item := stages.queues["tracked"].get_nowait()) is not None:
            out.append(item)
        return out

    passed = [i for i in asyncio.run(scenario()) if isinstance(i, TrackedWindow)]
    assert stages.tracker.media.seconds_by_source["living-room"] >= 60 * SECONDS
    assert not [i for i in passed if i.kind == "media"]
    assert [i.track for i in passed][-3:] == ["member-1"] * 3
