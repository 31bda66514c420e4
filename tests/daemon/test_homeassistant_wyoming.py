"""A real Home Assistant (2025.4) uses voxmeter's Wyoming proxy as its speech-to-text service.

The upstream is a real offline Wyoming ASR server (pocketsphinx, tests/realparts/
wyoming_upstreams.py); the daemon runs with ``wyoming-proxy://…?upstream=tcp://…`` in this
process. Home Assistant's Wyoming config flow, given the proxy's address, ends in
``create_entry``; speech sent through Home Assistant's voice pipeline (WebSocket, as a satellite
sends it) reaches the upstream
through the proxy, the transcript comes back — the one the upstream gives directly — and the
daemon measured the audio that passed."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.proxy_daemon import proxied_daemon
from tests.realparts.homeassistant import HomeAssistant
from tests.scenarios import assist_through_proxy, blocking, new_entity

pytestmark = [pytest.mark.slow, pytest.mark.corpus, pytest.mark.homeassistant]

COMMAND = "turn on the kitchen light"


@pytest.mark.parametrize("relay", [False, True], ids=["in-process", "relay-process"])
def test_home_assistant_transcribes_through_the_proxy(
    home_assistant: HomeAssistant, daemon_db: Path, relay: bool
) -> None:
    """Both layouts: the proxy in ``voxmeter run``, and in ``voxmeter relay`` (its own process,
    as the systemd units and the add-on run it) with the measuring side over the channel."""
    from wyoming.asr import Transcribe

    from tests.realparts.wyoming_upstreams import serve, speech
    from tests.wyoming.wyoming_peers import conversation, talk

    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed (scripts/install-system.sh installs it)")
    ha = home_assistant
    db = daemon_db
    audio = speech(COMMAND)

    after_relay_kill: list[Any] = []  # Home Assistant's run after the relay was SIGKILLed

    async def scenario() -> tuple[dict[str, Any], list[Any], str, list[bytearray], float]:
        nonlocal after_relay_kill
        records: list[bytearray] = []
        server, upstream_port = await serve("asr", records=records)
        (direct,) = await talk(upstream_port, conversation(audio, Transcribe().event()))
        records.clear()  # from here on, only what came through the proxy
        async with proxied_daemon(db, upstream_port, relay=relay) as daemon:
            assisted = await assist_through_proxy(ha, daemon, audio)
            if relay:  # killed, the relay is back at once and Home Assistant uses it again
                await daemon.kill_relay()
                async with asyncio.timeout(60):
                    while not daemon.source.relay_connected:
                        await asyncio.sleep(0.05)
                after_relay_kill = await blocking(
                    ha.assist, assisted.stt, audio.astype("<i2").tobytes()
                )
        await server.stop()
        text = str(direct.data["text"])
        return assisted.flow, assisted.events, text, records, assisted.measured

    flow, events, direct_text, records, measured = asyncio.run(scenario())
    assert flow["type"] == "create_entry", flow
    assert "voxmeter" in flow["title"], flow["title"]  # the user sees it passes through us
    kinds = [e["type"] for e in events]
    assert kinds[0] == "run-start" and kinds[-1] == "run-end" and "error" not in kinds, events
    (done,) = [e for e in events if e["type"] == "stt-end"]
    text = done["data"]["stt_output"]["text"]
    assert text == direct_text and direct_text.strip(), (text, direct_text)
    if relay:
        (again,) = [e for e in after_relay_kill if e["type"] == "stt-end"]
        assert again["data"]["stt_output"]["text"] == direct_text, after_relay_kill
    # the upstream's only utterance since the direct one came through the proxy, all of it
    assert any(b"audio-stop" in r and len(r) > audio.nbytes for r in records), len(records)
    assert measured == pytest.approx(audio.shape[0] / 16000, abs=0.1)
    assert ha.problems("wyoming", "voxmeter", "stt") == []


def test_home_assistant_detects_a_wake_word_through_the_proxy(
    home_assistant: HomeAssistant, daemon_db: Path
) -> None:
    """With wake-word detection on the server the whole room's audio goes to it. Home
    Assistant's Wyoming config flow, given a proxy in front of a real openWakeWord service,
    ends in ``create_entry`` named as passing through voxmeter; a pipeline run from its
    wake-word stage hears "hey jarvis" through the proxy — the service's detection comes back —
    and the daemon measured the audio that passed; no error line in Home Assistant's log. The
    proxy runs in ``voxmeter relay``, a process of its own (the deployed layout)."""
    from tests.realparts.wyoming_upstreams import serve, speech

    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed (scripts/install-system.sh installs it)")
    ha = home_assistant
    db = daemon_db
    audio = speech("hey jarvis", pad_seconds=1.0)

    async def scenario() -> tuple[dict[str, Any], list[Any], list[bytearray], float]:
        records: list[bytearray] = []
        server, upstream_port = await serve("wake", records=records)
        # a pipeline that starts at wake-word detection needs speech-to-text too (unused here)
        asr, asr_port = await serve("asr")
        await blocking(ha.config_flow, "wyoming", {"host": "127.0.0.1", "port": asr_port})
        stt = await blocking(new_entity, ha, "stt.")
        async with proxied_daemon(db, upstream_port, relay=True) as daemon:
            pipeline = daemon.pipeline
            flow = await blocking(
                ha.config_flow, "wyoming", {"host": "127.0.0.1", "port": daemon.port}
            )
            entity = await blocking(new_entity, ha, "wake_word.")
            pcm = audio.astype("<i2").tobytes()
            events = await blocking(ha.assist, stt, pcm, (entity, "jarvis"))
            async with asyncio.timeout(60):  # the measuring side saw speech pass
                while pipeline.streams.frames_speech == 0:
                    await asyncio.sleep(0.1)
            measured = pipeline.audio_seconds
        await server.stop()
        await asr.stop()
        return flow, events, records, measured

    flow, events, records, measured = asyncio.run(scenario())
    assert flow["type"] == "create_entry", flow
    assert "voxmeter" in flow["title"], flow["title"]
    kinds = [e["type"] for e in events]
    assert "error" not in kinds, events
    (done,) = [e for e in events if e["type"] == "wake_word-end"]
    assert "jarvis" in done["data"]["wake_word_output"].get("wake_word_id", ""), events
    assert any(b"audio-chunk" in r and b"detect" in r for r in records), len(records)
    assert 0.5 < measured <= audio.shape[0] / 16000 + 0.1  # relayed until the detection
    assert ha.problems("wyoming", "voxmeter", "wake") == []
