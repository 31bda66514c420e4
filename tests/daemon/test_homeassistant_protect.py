"""A real Home Assistant (2025.4) transcribes through voxmeter's proxy with ``[protect] mode =
always``: the pocketsphinx upstream receives anonymised audio (none of the original chunks), a
transcript comes back through the voice pipeline, and the measuring side still measured the
original audio — with the proxy in the daemon's process, and in ``voxmeter relay``
(``relay.socket``: the relay process anonymises, the daemon measures over the channel)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.daemon.proxy_daemon import proxied_daemon
from tests.realparts.homeassistant import HomeAssistant
from tests.scenarios import assist_through_proxy

pytestmark = [pytest.mark.slow, pytest.mark.corpus, pytest.mark.homeassistant]

COMMAND = "turn on the kitchen light"


@pytest.mark.parametrize("relay", [False, True], ids=["in-process", "relay-process"])
def test_home_assistant_transcribes_through_the_protecting_proxy(
    home_assistant: HomeAssistant, daemon_db: Path, relay: bool
) -> None:
    from tests.realparts.wyoming_upstreams import serve, speech, upstream_audio

    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed (scripts/install-system.sh installs it)")
    ha = home_assistant
    audio = speech(COMMAND)

    async def scenario() -> tuple[dict[str, Any], list[Any], list[bytes], float]:
        records: list[bytearray] = []
        server, upstream_port = await serve("asr", records=records)
        async with proxied_daemon(
            daemon_db,
            upstream_port,
            overrides=["protect.mode=always", "protect.alpha='0.8'"],
            relay=relay,
        ) as daemon:
            assisted = await assist_through_proxy(ha, daemon, audio)
        await server.stop()
        sent = [await upstream_audio(r) for r in records if b"audio-stop" in r]
        return assisted.flow, assisted.events, sent, assisted.measured

    flow, events, sent, measured = asyncio.run(scenario())
    assert flow["type"] == "create_entry", flow
    kinds = [e["type"] for e in events]
    assert kinds[0] == "run-start" and kinds[-1] == "run-end" and "error" not in kinds, events
    (done,) = [e for e in events if e["type"] == "stt-end"]
    text = done["data"]["stt_output"]["text"]
    print(f"transcript through the protecting proxy: {text!r}")
    assert text.strip(), done  # a transcript came back
    (upstream,) = sent  # the upstream heard one utterance, through the proxy, all of it
    got = np.frombuffer(upstream, dtype="<i2").astype(float)
    assert abs(got.size - audio.size) <= 16000  # Home Assistant may trim or pad silence
    original = audio.astype("<i2").tobytes()
    # anonymised: no 64 ms of the original's speech reaches the upstream unchanged
    loud = int(np.argmax(np.abs(audio))) // 1024 * 1024
    assert original[2 * loud : 2 * loud + 2048] not in upstream
    assert measured == pytest.approx(audio.shape[0] / 16000, abs=0.1)  # measured the original
    assert ha.problems("wyoming", "voxmeter", "stt") == []
