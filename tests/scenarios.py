"""Scenarios several test modules play the same way, each written once.

:func:`assist_through_proxy`: a real Home Assistant adds voxmeter's Wyoming proxy (its config
flow, given the proxy's address) and runs its voice pipeline on speech through it, as a
satellite would; the scenario returns once the measuring side has measured all of that speech.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np

from tests.daemon.proxy_daemon import ProxiedDaemon
from tests.realparts.homeassistant import HomeAssistant


async def blocking(function: Any, *args: Any) -> Any:
    """Home Assistant's REST calls off the loop: the proxy and the upstream run on it."""
    return await asyncio.get_running_loop().run_in_executor(None, function, *args)


def new_entity(ha: HomeAssistant, prefix: str) -> str:
    """An entity of ``prefix`` (a domain and its dot) once one exists (waits for it)."""
    from tests.realparts.homeassistant import wait_until

    def found() -> str | None:
        names = [e for e in ha.states() if e.startswith(prefix)]
        return names[0] if names else None

    return wait_until(found, 60, f"a {prefix} entity")


@dataclass
class Assisted:
    """What one run of Home Assistant's pipeline through the proxy gave."""

    flow: dict[str, Any]  # the Wyoming config flow's result (``create_entry`` when added)
    stt: str  # the speech-to-text entity the proxy became
    events: list[Any]  # the pipeline run's events, ``run-start`` to ``run-end``
    measured: float  # seconds of audio the measuring side had measured, once it had all


async def assist_through_proxy(
    ha: HomeAssistant, daemon: ProxiedDaemon, audio: np.ndarray
) -> Assisted:
    """Home Assistant adds ``daemon``'s proxy as its speech-to-text service and transcribes
    ``audio`` (16 kHz int16) through it; returns once the daemon measured all of it."""
    pipeline = daemon.pipeline
    flow = await blocking(ha.config_flow, "wyoming", {"host": "127.0.0.1", "port": daemon.port})
    stt = await blocking(new_entity, ha, "stt.")
    events = await blocking(ha.assist, stt, audio.astype("<i2").tobytes())
    async with asyncio.timeout(120):  # the measuring side saw the audio pass
        while pipeline.audio_seconds < audio.shape[0] / 16000 - 0.1:
            await asyncio.sleep(0.1)
    return Assisted(flow, stt, events, pipeline.audio_seconds)
