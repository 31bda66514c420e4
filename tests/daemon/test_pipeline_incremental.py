"""The event loop stays free: speech is fed to the feature streams on the feeder thread as it
arrives, and a window's end only finishes them (whole-window decoding only for the windows the
feeder could not stream, and never on the loop thread)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from threadpoolctl import threadpool_info

from monitor.calibration.buckets import default_path
from monitor.daemon.build import build_pipeline
from monitor.settings.config import load_config
from monitor.store.database import open_store

pytestmark = pytest.mark.corpus


def test_windows_are_streamed_off_the_loop_thread(daemon_corpus: Any, daemon_db: Path) -> None:
    config = load_config(
        None,
        [
            f"daemon.source=file:{daemon_corpus.known_stream}",
            "audio.pace=fast",
            f"daemon.db={daemon_db}",
            "prometheus.enabled=false",
            # the shipped calibration: its tracking statistics switch the turn splitter on
            f"scorer.calibration={default_path()}",
        ],
    )
    feeding: set[str] = set()
    blas_before, blas_during = blas_threads(), set()
    whole: list[str] = []
    with open_store(daemon_db) as store:
        pipeline = build_pipeline(config, store=store, exporters=[])
        pipeline.window_features.warm_up()  # models load (observe once) before we watch
        made: list[Any] = []  # every stream's incremental features (one file: one stream)
        parts = pipeline.streams.parts

        def recording_parts() -> Any:
            vad, windower, incremental = parts()
            feed = incremental.feed

            def recording_feed(samples: Any) -> None:
                feeding.add(threading.current_thread().name)
                if not blas_during:
                    blas_during.update(blas_threads())
                feed(samples)

            incremental.feed = recording_feed  # type: ignore[method-assign]
            made.append(incremental)
            return vad, windower, incremental

        pipeline.streams.parts = recording_parts
        phone = pipeline.features["phone"]
        observe = type(phone).observe

        def recording_observe(audio: Any, rate: int) -> Any:
            whole.append(threading.current_thread().name)
            return observe(phone, audio, rate)

        phone.observe = recording_observe  # type: ignore[method-assign]
        embed = pipeline.turns.embed
        embedding_parts: list[str] = []

        def recording_embed(samples: Any) -> Any:
            embedding_parts.append(threading.current_thread().name)
            return embed(samples)

        pipeline.turns.embed = recording_embed
        try:
            summary = asyncio.run(pipeline.run())
        finally:
            del phone.observe  # the registry's instance outlives this test
    assert summary.windows >= 2
    # BLAS on one thread while the pipeline runs (a second one only spins), restored after
    assert blas_during == {1} and blas_threads() == blas_before
    assert feeding and all(name.startswith("voxmeter-feed") for name in feeding)
    # most windows were streamed; a window after speech the windower dropped (a turn's end
    # under min_window_seconds) is extracted whole, off the loop thread as well
    (incremental,) = [i for i in made if i.streamed or i.fallbacks]  # the file's stream
    assert incremental.streamed >= summary.windows / 2
    assert len(whole) == incremental.fallbacks
    assert all(name.startswith("voxmeter-work") for name in whole)
    # the turn splitter: scored on the feeder, on the embedding stream's own filterbank frames,
    # parts embedded (on the feeder) only where the score was uncertain
    assert pipeline.turns.active and incremental.turns is pipeline.turns
    assert pipeline.turns.scored >= 1
    assert len(embedding_parts) == pipeline.turns.embedded
    assert all(name.startswith("voxmeter-feed") for name in embedding_parts)


def blas_threads() -> set[int]:
    return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
