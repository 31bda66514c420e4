"""Enrolling a household member from Home Assistant's entities, on a real mosquitto, with real
corpus speech streamed by a Wyoming client: the daemon publishes the enrolment entities at
start; an alias written to the text, the button pressed and one corpus speaker's speech give
that alias its own entities, and the speaker's later windows are theirs; every bad input (an
alias with ``/``, ``#``, a newline, 10 kB or already enrolled, a second press, two voices, a
retained press) is one line in the log and a reason on *Enrolment progress*, nothing enrolled;
a member forgotten loses their entities and their identity."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from monitor.store.database import open_store
from tests.daemon.enrol_daemon import (
    EnrolDaemon,
    config_topic,
    enrol_daemon,
    newcomers,
    speech_of,
    two_voices,
    windows_of,
)
from tests.daemon_corpus import PROFILE, DaemonCorpus
from tests.realparts.mosquitto import MosquittoBroker

pytestmark = [pytest.mark.slow, pytest.mark.corpus, pytest.mark.mosquitto]

ENTITIES = (("text", "enrol_alias"), ("button", "enrol_start"), ("button", "enrol_cancel"),
            ("sensor", "enrolment"))  # fmt: skip


async def bad_aliases(daemon: EnrolDaemon, caplog: pytest.LogCaptureFixture) -> None:
    """Each refused with its reason on the progress entity and one log line; the alias kept
    empty."""
    for alias, words in (
        ("a/b", "contains /"),
        ("a#b", "contains /"),
        ("two\nlines", "control character"),
        ("x" * 10_000, "10000 bytes"),
        (PROFILE, "already enrolled"),
    ):
        caplog.clear()
        await daemon.command("alias/set", alias)
        state = await daemon.until_reason(words)
        assert state["alias"] == "" and state["phase"] == "idle", state
        lines = [r for r in caplog.records if r.name.startswith("monitor.") and words in r.message]
        assert len(lines) == 1, [r.message for r in caplog.records]


def test_enrol_the_next_voice_from_home_assistant(
    daemon_corpus: DaemonCorpus,
    daemon_db: Path,
    mosquitto: MosquittoBroker,
    corpus_root: Path,
    corpus_speakers: list[dict[str, str]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="monitor.tracking.enrolment")
    taken = [*daemon_corpus.aliases, daemon_corpus.stranger]
    reader, first, second = newcomers(corpus_root, corpus_speakers, taken)[:3]
    enrolling = speech_of(corpus_root, reader, 0, 9, tmp_path / "reader.wav")
    later = speech_of(corpus_root, reader, 9, 1, tmp_path / "later.wav")
    pair = two_voices(corpus_root, (first, second), tmp_path / "pair.wav")

    async def scenario() -> None:
        left = {"command": b"START"}  # a retained press left on the broker before the start
        async with enrol_daemon(daemon_db, mosquitto, retained=left) as daemon:
            sub = daemon.sub
            # every enrolment entity within 30 s of the start, and the idle progress
            wanted = (*ENTITIES, ("button", f"{PROFILE}_forget"))
            await sub.wait(lambda: all(daemon.config(*e) for e in wanted), 30)
            # the retained press: ignored, cleared from the broker, said
            await daemon.until_reason("retained")
            assert daemon.progress()["phase"] == "idle"
            command = "voxmeter/lounge/enrolment/command"
            await sub.wait(lambda: [m.payload for m in sub.messages if m.topic.value == command]
                           [-1:] == [b""])  # fmt: skip
            await bad_aliases(daemon, caplog)
            await daemon.command("command", "START")  # no alias yet
            await daemon.until_reason("alias first")
            await daemon.command("alias/set", "reader")
            await sub.wait(lambda: daemon.progress().get("alias") == "reader")
            await daemon.command("command", "START")
            await daemon.until("listening")
            await daemon.command("command", "START")  # pressed twice
            await daemon.until_reason("already listening")
            await daemon.speak(enrolling)
            done = await daemon.until("done", 300)
            assert done["status"] == "Done: reader enrolled", done
            for component, object_id in (
                ("sensor", "reader_disclosure"),
                ("button", "reader_forget"),
            ):
                topic = config_topic(component, object_id)
                await sub.wait(lambda t=topic: bool(sub.on(t) and sub.on(t)[-1]), 30)  # type: ignore[misc]
            # later speech of the same speaker is the member's
            before = windows_of(daemon.pipeline, "reader")
            await daemon.speak(later)
            await sub.wait(lambda: windows_of(daemon.pipeline, "reader") > before, 120)
            # two voices: refused, nothing enrolled
            await daemon.command("alias/set", "pair")
            await sub.wait(lambda: daemon.progress().get("alias") == "pair")
            await daemon.command("command", "START")
            await daemon.until("listening")
            await daemon.speak(pair)
            refused = await daemon.until("refused", 300)
            assert "two voices" in refused["reason"], refused
            await daemon.command("command", "CANCEL")
            await daemon.until_reason("no enrolment is running")
            # forgotten: the member's entities go, and the identity with its profile
            await daemon.command("forget", "reader")
            await daemon.until_reason("forgot reader")
            gone = config_topic("sensor", "reader_disclosure")
            await sub.wait(lambda: sub.on(gone)[-1] is None, 30)
            assert "reader" not in daemon.pipeline.tracker.profile_aliases

    asyncio.run(scenario())
    with open_store(daemon_db) as store:
        profiles = {p.alias for p in store.local_profiles()}
        aliases = {i.alias for i in store.identities()}
    assert "reader" not in profiles and "reader" not in aliases  # forgotten
    assert "pair" not in aliases  # never enrolled
