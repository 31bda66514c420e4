"""*Enrol Unrecognised voice K as the new member*, with real parts: ``voxmeter run`` (the real
entry point, a process of its own) on a first-start database, a real mosquitto and a Wyoming
source. A test-split corpus speaker (the shipped population never heard them) speaks until their
unrecognised track holds the speech an enrolment needs; an alias written to the text's command
topic and that track's claim button pressed (its config's ``payload_press`` to its
``command_topic``, as Home Assistant does) make the voice a member: the member's entities are
published, the unrecognised voice's go, and the speaker's later windows are the member's. The
later speech comes through a second room, so what that room heard last is a window of it (not
the first stream's tail)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from monitor.exporters.discovery import STRANGER_BUTTON, safe_id
from monitor.tracking.enrolment import NEEDED_SECONDS
from tests.daemon.enrol_daemon import (
    PREFIX,
    config_topic,
    daemon_process,
    newcomers,
    progress_of,
    run_command,
    speech_of,
)
from tests.exporters.test_exporter_mqtt import Subscriber, subscribed
from tests.realparts.mosquitto import MosquittoBroker, free_port
from tests.wyoming.wyoming_peers import stream_to

pytestmark = [pytest.mark.slow, pytest.mark.corpus, pytest.mark.mosquitto]

SPEAKERS = f"{PREFIX}/speakers/"
ALIAS = "guest"


def strangers(sub: Subscriber) -> dict[str, dict[str, Any]]:
    """Each unrecognised track's latest retained state (cleared ones left out)."""
    latest: dict[str, dict[str, Any]] = {}
    for message in sub.messages:
        topic = message.topic.value
        if topic.startswith(f"{SPEAKERS}unknown-") and topic.endswith("/state"):
            track = topic.removeprefix(SPEAKERS).removesuffix("/state")
            if message.payload:
                latest[track] = json.loads(message.payload)
            else:
                latest.pop(track, None)
    return latest


def fullest(sub: Subscriber) -> tuple[str, float]:
    """The unrecognised track holding the most speech, and how much."""
    held = {track: float(state["speech_seconds"]) for track, state in strangers(sub).items()}
    track = max(held, key=held.__getitem__, default="")
    return track, held.get(track, 0.0)


def test_an_unrecognised_voice_claimed_from_home_assistant_becomes_the_member(
    mosquitto: MosquittoBroker,
    corpus_root: Path,
    corpus_speakers: list[dict[str, str]],
    tmp_path: Path,
) -> None:
    tests_split = [r for r in corpus_speakers if r["original_split"] == "test"]
    speaker = newcomers(corpus_root, tests_split, ())[0]
    # about 50 s of audio: the first 20 s of speech it holds (NEEDED_SECONDS) come with margin
    heard = speech_of(corpus_root, speaker, 0, 6, tmp_path / "heard.wav")
    later = speech_of(corpus_root, speaker, 7, 3, tmp_path / "later.wav")
    port, later_port = free_port(), free_port()
    rooms = [
        f"desk=wyoming-listen://127.0.0.1:{port}",
        f"hall=wyoming-listen://127.0.0.1:{later_port}",
    ]
    command = run_command(mosquitto, tmp_path / "voxmeter.db", f"audio.sources={rooms!r}")
    hall = f"{PREFIX}/sources/hall/state"

    async def scenario() -> None:
        async with subscribed(mosquitto, "#") as sub:

            def progress() -> dict[str, Any]:
                return progress_of(sub)

            def latest(topic: str) -> Any:
                found = sub.on(topic)
                return found[-1] if found else None

            with daemon_process(command, tmp_path / "run.log"):
                await sub.wait(lambda: bool(progress()), 60)
                await stream_to("127.0.0.1", port, heard, timeout_seconds=120)
                await sub.wait(lambda: fullest(sub)[1] >= NEEDED_SECONDS, 300)
                track, _ = fullest(sub)
                button = config_topic("button", f"{safe_id(track)}_{STRANGER_BUTTON}")
                await sub.wait(lambda: bool(latest(button)), 30)
                assert latest(config_topic("sensor", f"{safe_id(ALIAS)}_disclosure")) is None
                await sub.client.publish(f"{PREFIX}/enrolment/alias/set", ALIAS.encode(), qos=1)
                await sub.wait(lambda: progress().get("alias") == ALIAS, 30)
                press = latest(button)
                await sub.client.publish(press["command_topic"], press["payload_press"], qos=1)
                await sub.wait(lambda: progress().get("phase") in ("done", "refused"), 60)
                assert progress()["status"] == f"Done: {ALIAS} enrolled", progress()
                # the member's entities appear; the unrecognised voice's go
                disclosure = config_topic("sensor", f"{safe_id(ALIAS)}_disclosure")
                forget = config_topic("button", f"{safe_id(ALIAS)}_forget")
                await sub.wait(lambda: bool(latest(disclosure) and latest(forget)), 30)
                await sub.wait(lambda: latest(button) is None, 30)
                # the speaker's later speech, in the hall, is the member's
                assert latest(hall)["last_voice"] == "nobody yet", latest(hall)
                await stream_to("127.0.0.1", later_port, later, timeout_seconds=120)
                await sub.wait(lambda: latest(hall)["last_voice"] != "nobody yet", 120)
                assert latest(hall)["last_voice"] == ALIAS, latest(hall)

    asyncio.run(scenario())
