"""The daemon fed by a real Wyoming client (the ``wyoming`` package) records exactly the ledger
figures it records from the same audio read as a file, at 16 kHz mono and 44.1 kHz stereo."""

from __future__ import annotations

import asyncio
import math
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
import soxr
from wyoming.asr import Transcribe

from monitor.audio.file import read_audio
from monitor.daemon.build import build_pipeline
from monitor.daemon.pipeline import Pipeline
from monitor.ledger.budget import period_start
from monitor.settings.config import load_config
from monitor.store.database import open_store
from monitor.wyoming.source import WyomingSource
from tests.daemon.proxy_daemon import proxied_daemon
from tests.daemon_corpus import DaemonCorpus
from tests.realparts.mosquitto import free_port
from tests.realparts.wyoming_upstreams import serve
from tests.wyoming.wyoming_peers import conversation, stream_to, talk

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
            "load.shed_lag_seconds=0",  # the same figures as a file: nothing shed under load
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
    got = ledger(dbs["wyoming"])
    assert close(got, expected), (got, expected)


def close(got: Any, want: Any, rel: float = 1e-6) -> bool:
    """Equal structure, strings and integers; floats within ``rel`` of their magnitude. The two
    sources hand the streaming features their audio in different chunks, so sums run in another
    order: on some CPUs a figure differs in its ninth digit (1.9977349055 against 1.9977349080)."""
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(close(got[k], want[k], rel) for k in want)
    if isinstance(got, list | tuple) and isinstance(want, list | tuple):
        return len(got) == len(want) and all(
            close(g, w, rel) for g, w in zip(got, want, strict=True)
        )
    if isinstance(want, float) and isinstance(got, float):
        return math.isclose(got, want, rel_tol=rel, abs_tol=1e-12)
    return bool(got == want)


def test_through_the_proxy_each_command_ends_its_window_at_audio_stop(
    daemon_corpus: DaemonCorpus, daemon_db: Path
) -> None:
    """Two assistant commands relayed to a real speech-to-text service: the 2.4 s one becomes
    one short window at its audio-stop (≥ 1 s of speech), the 0.6 s one counts in speech
    seconds only; both transcripts come back through the proxy."""
    audio, _ = read_audio(daemon_corpus.known_stream)
    pcm = (audio * 32767).astype(np.int16)
    commands = [pcm[: round(2.4 * 16000)], pcm[round(3.0 * 16000) : round(3.6 * 16000)]]

    async def main() -> tuple[Any, list[str]]:
        server, upstream_port = await serve("asr")
        async with proxied_daemon(daemon_db, upstream_port) as daemon:
            texts = []
            for command in commands:
                (reply,) = await talk(daemon.port, conversation(command, Transcribe().event()))
                texts.append(reply.data["text"])
            sent = sum(c.shape[0] for c in commands) / 16000
            pipeline = daemon.pipeline
            async with asyncio.timeout(300):
                while pipeline.streams.frames_total * 0.03 < sent - 0.03 or pipeline._windows < 1:
                    await asyncio.sleep(0.1)
        await server.stop()
        return daemon.summary, texts

    summary, texts = asyncio.run(main())
    assert summary.windows == 1
    (windows,) = ledger(daemon_db).values()
    (_span, speech_seconds, _figures) = windows[0]
    assert 1.0 <= speech_seconds < 3.0  # a short window: its turn ended before 3 s of speech
    assert summary.frames_speech * 0.03 > speech_seconds  # the short command counted too
    assert len(texts) == 2 and all(isinstance(t, str) for t in texts)


def test_a_failing_measuring_side_restarts_and_the_relay_never_notices(
    daemon_corpus: DaemonCorpus, daemon_db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The tracker fails on the first window of a proxied conversation (a bug, injected): the
    daemon logs it with its traceback, restarts the measuring stages and keeps relaying — every
    command reaches the real speech-to-text service byte for byte as it does directly, its
    transcript comes back, and the commands after the restart are measured again."""
    audio, _ = read_audio(daemon_corpus.known_stream)
    pcm = (audio * 32767).astype(np.int16)
    commands = [pcm[round(s * 16000) : round((s + 2.4) * 16000)] for s in (0.0, 3.0, 6.0, 9.0)]
    conversations = [conversation(c, Transcribe().event()) for c in commands]
    failures: list[Any] = []

    def fail_once(pipeline: Pipeline) -> None:
        pipeline.measuring.initial_seconds = 0.05
        process = pipeline.tracker.process

        def failing(window: Any) -> Any:
            if not failures:
                failures.append(window)
                raise RuntimeError("tracker bug")
            return process(window)

        pipeline.tracker.process = failing  # type: ignore[method-assign]

    async def main() -> tuple[Any, ...]:
        direct_records: list[bytearray] = []
        server, port = await serve("asr", records=direct_records)
        direct = [await talk(port, events) for events in conversations]
        await server.stop()
        proxied_records: list[bytearray] = []
        server, upstream_port = await serve("asr", records=proxied_records)
        async with proxied_daemon(daemon_db, upstream_port, fail_once) as daemon:
            pipeline = daemon.pipeline
            proxied = []
            for events in conversations:
                proxied.append(await talk(daemon.port, events))
                if not failures:  # the first window fails before the next command is sent
                    async with asyncio.timeout(120):
                        while not failures or pipeline.measuring.restarts < 1:
                            await asyncio.sleep(0.05)
            async with asyncio.timeout(300):
                while pipeline._windows < 1:  # a command after the restart is scored
                    await asyncio.sleep(0.1)
            stats = pipeline.stats()
        await server.stop()
        return daemon.summary, direct, proxied, direct_records, proxied_records, stats

    with caplog.at_level("ERROR", logger="monitor.daemon.measuring"):
        summary, direct, proxied, direct_records, proxied_records, stats = asyncio.run(main())
    assert proxied == direct
    assert all(reply[0].type == "transcript" for reply in proxied)
    assert [bytes(r) for r in proxied_records] == [bytes(r) for r in direct_records]
    assert summary.stop_reason == "test over"  # still relaying and measuring until stopped
    assert 1 <= summary.windows <= len(commands) - 1  # the failed one is lost, later ones count
    assert stats.measuring_restarts == 1
    (failure,) = [r for r in caplog.records if "measuring failed" in r.getMessage()]
    assert "in the tracker stage" in failure.getMessage()
    assert "the relay goes on" in failure.getMessage()
    assert failure.exc_info is not None  # a bug: its traceback is in the log


def test_without_a_relay_a_failing_measuring_side_ends_the_daemon(
    daemon_corpus: DaemonCorpus, daemon_db: Path
) -> None:
    """A file source has no one to keep talking to: the failure ends the run (systemd restarts
    a daemon), and nothing is restarted in-process."""
    config = load_config(
        None,
        [
            f"daemon.source=file:{daemon_corpus.known_stream}",
            "audio.pace=fast",
            f"daemon.db={daemon_db}",
            "prometheus.enabled=false",
            "daemon.exit_at_end=true",
            "load.shed_lag_seconds=0",  # the same figures as a file: nothing shed under load
        ],
    )

    async def main() -> None:
        with open_store(daemon_db) as store:
            pipeline = build_pipeline(config, store=store, exporters=[])

            def fail(window: Any) -> Any:
                raise RuntimeError("tracker bug")

            pipeline.tracker.process = fail  # type: ignore[method-assign]
            try:
                await pipeline.run()
            finally:
                assert pipeline.measuring.restarts == 0

    with pytest.raises(BaseExceptionGroup) as raised:
        asyncio.run(main())
    assert raised.group_contains(RuntimeError, match="tracker bug")
