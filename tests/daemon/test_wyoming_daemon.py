"""The daemon fed by a real Wyoming client (the ``wyoming`` package) records exactly the ledger
figures it records from the same audio read as a file, at 16 kHz mono and 44.1 kHz stereo."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
import soxr

from monitor.audio.file import read_audio
from monitor.audio.wyoming import WyomingSource
from monitor.daemon.budget import period_start
from monitor.daemon.build import build_pipeline
from monitor.daemon.config import load_config
from monitor.store.database import open_store
from tests.audio.wyoming_peers import stream_to
from tests.daemon.conftest import DaemonCorpus
from tests.realparts.mosquitto import free_port

pytestmark = [pytest.mark.corpus, pytest.mark.slow]


def ledger(db: Path) -> dict[str, list[tuple[float, float, dict[str, Any]]]]:
    """Every track's windows of this period: span, speech seconds and figures (the start and
    end, in the row and in the figures, are wall-clock times, which differ between two runs)."""
    period = period_start(time.time(), 86400.0)
    with open_store(db) as store:
        return {
            track: [
                (
                    round(w.window_end - w.window_start, 6),
                    w.speech_seconds,
                    {k: v for k, v in w.figures.items() if k != "window_end_unix"},
                )
                for w in store.windows(track, period)
            ]
            for track in store.tracks(period)
        }


def run_daemon(db: Path, source: str, stream: Path | None = None) -> Any:
    config = load_config(
        None,
        [
            f"daemon.source={source}",
            "audio.pace=fast",
            f"daemon.db={db}",
            "prometheus.enabled=false",
            "daemon.exit_at_end=true",
        ],
    )

    async def main() -> Any:
        with open_store(db) as store:
            pipeline = build_pipeline(config, store=store, exporters=[])
            if stream is None:
                return await pipeline.run()
            assert isinstance(pipeline.source, WyomingSource)
            endpoint = pipeline.source.endpoint
            summary, _ = await asyncio.gather(
                pipeline.run(),
                stream_to(endpoint.host, endpoint.port, stream, timeout_seconds=300),
            )
            return summary

    return asyncio.run(main())


@pytest.mark.parametrize("variant", ["16k-mono", "44k1-stereo"])
def test_wyoming_figures_equal_the_file_sources(
    daemon_corpus: DaemonCorpus, tmp_path: Path, variant: str
) -> None:
    stream = daemon_corpus.known_stream
    if variant == "44k1-stereo":
        mono, _ = read_audio(stream)
        wide = soxr.resample(mono, 16000, 44100, quality="HQ")
        stereo = np.clip(np.stack([wide, 0.8 * wide], axis=1), -1, 1)
        stream = tmp_path / "stereo.wav"
        sf.write(stream, stereo, 44100, subtype="PCM_16")
    dbs = {name: tmp_path / f"{name}.db" for name in ("file", "wyoming")}
    for db in dbs.values():
        shutil.copy(daemon_corpus.db, db)
        db.chmod(0o600)

    by_file = run_daemon(dbs["file"], f"file:{stream}")
    port = free_port()
    by_wyoming = run_daemon(dbs["wyoming"], f"wyoming-listen://127.0.0.1:{port}?once", stream)

    assert by_file.stop_reason == by_wyoming.stop_reason == "end of input"
    assert by_wyoming.audio_seconds == pytest.approx(by_file.audio_seconds, abs=1e-9)
    assert by_wyoming.frames_speech == by_file.frames_speech > 0
    expected = ledger(dbs["file"])
    assert expected.get("home-1"), "the enrolled speaker's windows reach the ledger"
    assert ledger(dbs["wyoming"]) == expected
