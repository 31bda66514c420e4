"""Several streams in one daemon, against real Wyoming upstreams (openWakeWord, pocketsphinx):
two satellites streaming at once through one proxy are both measured, and one person speaking
through a wake-word proxy and a speech-to-text proxy of one daemon has one ledger entry."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from wyoming.asr import Transcribe
from wyoming.wake import Detect

from monitor.audio.file import read_audio
from monitor.daemon.build import build_pipeline
from monitor.ledger.budget import period_start
from monitor.settings.config import load_config
from monitor.store.database import open_store
from tests.daemon.household_daemon import Recorder, household_daemon, paced_talk
from tests.daemon_corpus import DaemonCorpus
from tests.realparts.wyoming_upstreams import serve
from tests.wyoming.wyoming_peers import conversation

pytestmark = [pytest.mark.corpus, pytest.mark.slow]

PACE = 0.016  # seconds after each 64 ms chunk: a satellite streaming at 4 × real time


def pcm(path: Path) -> np.ndarray:
    audio, _ = read_audio(path)
    return (audio * 32767).astype(np.int16)


def ended_streams(caplog: pytest.LogCaptureFixture) -> dict[str, float]:
    """Stream name → seconds of speech, from the daemon's "stream … ended" lines."""
    found = {}
    for record in caplog.records:
        match = re.match(r"stream (\S+) ended: .* ([\d.]+) s of speech", record.getMessage())
        if match:
            found[match.group(1)] = float(match.group(2))
    return found


def test_two_satellites_streaming_at_once_through_one_proxy_are_both_measured(
    daemon_corpus: DaemonCorpus, daemon_db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The enrolled speaker and a stranger stream to a real wake-word service at the same time
    through one proxy: each connection gets its own VAD and windows, both are measured with
    nothing dropped, and their windows go to their own tracks. A third satellite beyond
    ``audio.max_streams`` = 2 is relayed all the same, and counted as refused."""
    known = conversation(pcm(daemon_corpus.known_stream), Detect().event())
    stranger = conversation(pcm(daemon_corpus.stranger_stream), Detect().event())
    third_audio = pcm(daemon_corpus.stranger_stream)[: 3 * 16000]
    third = conversation(third_audio, Detect().event())

    async def late(port: int) -> Any:
        await asyncio.sleep(1.0)  # the other two are streaming by then
        return await paced_talk(port, third, chunk_pause_seconds=PACE)

    async def main() -> tuple[Any, ...]:
        server, upstream = await serve("wake")
        limit = "audio.max_streams=2"
        async with household_daemon(daemon_db, {"kitchen": upstream}, limit) as daemon:
            port = daemon.port("kitchen")
            replies = await asyncio.gather(
                paced_talk(port, known, chunk_pause_seconds=PACE),
                paced_talk(port, stranger, chunk_pause_seconds=PACE),
                late(port),
            )
            await daemon.settled()
            stats = daemon.pipeline.stats()
        await server.stop()
        return daemon, replies, stats

    with caplog.at_level(logging.INFO, logger="monitor.daemon.streams"):
        daemon, replies, stats = asyncio.run(main())
    # the third was not measured, and still relayed: its answer came back too
    assert [r[0].type for r in replies] == ["not-detected"] * 3
    speech = ended_streams(caplog)
    assert set(speech) == {"kitchen#1", "kitchen#2"}  # both connections, each its own stream
    assert all(seconds > 5 for seconds in speech.values())
    assert stats.dropped_seconds == 0  # nothing lost because the other one was speaking
    counts = stats.sources["kitchen"]
    assert counts.speech_seconds == pytest.approx(sum(speech.values()), abs=0.1)  # 0.1 s: logged
    assert counts.refused_streams == 1 and counts.streams == 0  # all ended
    assert counts.refused_seconds == pytest.approx(third_audio.shape[0] / 16000, abs=0.07)
    scored = daemon.recorder.scored()
    by_stream: dict[int, set[str]] = {}
    for event in scored:
        assert event.stream.source == "kitchen"
        by_stream.setdefault(event.stream.connection, set()).add(event.figures.track)
    assert set(by_stream) == {1, 2}  # windows of both satellites scored
    assert "home-1" in set().union(*by_stream.values())  # the enrolled speaker: their profile
    assert daemon.summary.windows == len(scored)


def test_one_person_through_a_wake_word_and_a_speech_to_text_proxy_has_one_ledger_entry(
    daemon_corpus: DaemonCorpus, daemon_db: Path
) -> None:
    """The enrolled speaker streams to a wake-word proxy and sends commands through a
    speech-to-text proxy of the same daemon: one tracker, one ledger — their windows from both
    sources pool into one track and one disclosure figure."""
    audio = pcm(daemon_corpus.known_stream)
    half = audio.shape[0] // 2
    wake = conversation(audio[:half], Detect().event())
    commands = [
        conversation(audio[start : start + round(3.2 * 16000)], Transcribe().event())
        for start in range(half, audio.shape[0] - 16000, round(3.4 * 16000))
    ]

    async def main() -> Any:
        wake_server, wake_port = await serve("wake")
        asr_server, asr_port = await serve("asr")
        upstreams = {"wake": wake_port, "stt": asr_port}
        async with household_daemon(daemon_db, upstreams) as daemon:

            async def commanding() -> list[Any]:
                port = daemon.port("stt")
                return [await paced_talk(port, c, chunk_pause_seconds=PACE) for c in commands]

            streamed, said = await asyncio.gather(
                paced_talk(daemon.port("wake"), wake, chunk_pause_seconds=PACE), commanding()
            )
            await daemon.settled()
            stats = daemon.pipeline.stats()
        await wake_server.stop()
        await asr_server.stop()
        return daemon, streamed, said, stats

    daemon, streamed, said, stats = asyncio.run(main())
    assert streamed[0].type == "not-detected"
    assert [r[0].type for r in said] == ["transcript"] * len(commands)
    assert stats.dropped_seconds == 0
    assert set(stats.sources) == {"wake", "stt"}
    assert all(stats.sources[s].speech_seconds > 3 for s in ("wake", "stt"))
    mine = [e for e in daemon.recorder.scored() if e.figures.track == "home-1"]
    assert {e.stream.source for e in mine} == {"wake", "stt"}  # heard through both
    last = mine[-1].figures
    assert last.windows == len(mine)  # one figure pooling every window of both sources
    period = period_start(time.time(), 86400.0)
    with open_store(daemon_db) as store:
        assert store.tracks(period).count("home-1") == 1  # one ledger entry
        rows = store.windows("home-1", period)
        assert len(rows) == len(mine)
        assert rows[-1].figures["windows"] == len(mine)
        assert rows[-1].figures["pooled_speech_seconds"] == pytest.approx(
            sum(e.window_speech_seconds for e in mine), rel=1e-6
        )


def test_two_files_in_one_daemon_both_measured_until_both_end(
    daemon_corpus: DaemonCorpus, daemon_db: Path
) -> None:
    """Sources of any kind mix: two files read at once, each a named stream of its own, the run
    ends when both have (``exit_at_end``), per-source speech counted and in the summary."""
    known, stranger = daemon_corpus.known_stream, daemon_corpus.stranger_stream
    config = load_config(
        None,
        [
            f'audio.sources=["kitchen=file:{known}", "hall=file:{stranger}"]',
            "audio.pace=fast",
            f"daemon.db={daemon_db}",
            "prometheus.enabled=false",
            "daemon.exit_at_end=true",
        ],
    )

    async def main() -> Any:
        with open_store(daemon_db) as store:
            recorder = Recorder()
            pipeline = build_pipeline(config, store=store, exporters=[recorder])
            summary = await pipeline.run()
            return summary, pipeline.stats(), recorder

    summary, stats, recorder = asyncio.run(main())
    assert summary.stop_reason == "end of input"
    assert set(stats.sources) == {"kitchen", "hall"}
    assert all(stats.sources[name].speech_seconds > 8 for name in ("kitchen", "hall"))
    assert stats.dropped_seconds == 0
    heard = {e.stream.source for e in recorder.scored()}
    assert heard == {"kitchen", "hall"}
    kitchen = [e.figures.track for e in recorder.scored() if e.stream.source == "kitchen"]
    assert "home-1" in kitchen  # the enrolled speaker's file: their profile
