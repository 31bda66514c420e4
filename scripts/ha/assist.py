"""Speech through Home Assistant's voice pipeline over its WebSocket API, as a satellite sends it.

Runs with Home Assistant's own venv (it has aiohttp; ours has no WebSocket client):
``.venv-ha/bin/python scripts/ha/assist.py URL TOKEN STT_ENTITY PCM_FILE [WAKE_ENTITY WAKE_WORD]``
creates a pipeline whose speech-to-text is ``STT_ENTITY``, runs it from the ``stt`` stage to the
``stt`` stage with the 16 kHz mono s16le audio of ``PCM_FILE`` sent in 20 ms binary frames, and
prints every pipeline event as one JSON line. With ``WAKE_ENTITY``, the pipeline's wake-word
detection is that entity (with the first of its wake words whose id holds ``WAKE_WORD``), and
the run is its ``wake_word`` stage alone, the audio sent in real time (Home Assistant wants a
speech-to-text engine in a pipeline that starts there, even when the run ends there). (Home
Assistant's REST STT API reads the body line by line, so binary PCM arrives split at arbitrary
bytes: the pipeline is what satellites use.)
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp

FRAME_BYTES = 640  # 20 ms of 16 kHz s16le mono


class Socket:
    """One authenticated WebSocket connection with numbered commands."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.next_id = 1

    async def command(self, message: dict[str, Any]) -> int:
        number = self.next_id
        self.next_id += 1
        await self.ws.send_json({"id": number, **message})
        return number

    async def result(self, number: int) -> Any:
        while True:
            reply = await self.ws.receive_json(timeout=60)
            if reply.get("id") == number and reply.get("type") == "result":
                if not reply["success"]:
                    raise RuntimeError(f"command {number}: {reply['error']}")
                return reply["result"]


async def wake_word_id(socket: Socket, entity: str, wanted: str) -> str:
    """The id of ``entity``'s first wake word whose id holds ``wanted``."""
    info = await socket.result(
        await socket.command({"type": "wake_word/info", "entity_id": entity})
    )
    return str(next(w["id"] for w in info["wake_words"] if wanted in w["id"]))


async def run(
    url: str, token: str, stt: str, pcm: bytes, wake_entity: str = "", wanted: str = ""
) -> None:
    async with aiohttp.ClientSession() as session:
        ws_url = url.replace("http", "ws", 1) + "/api/websocket"
        async with session.ws_connect(ws_url) as ws:
            assert (await ws.receive_json())["type"] == "auth_required"
            await ws.send_json({"type": "auth", "access_token": token})
            assert (await ws.receive_json())["type"] == "auth_ok"
            socket = Socket(ws)
            wake = await wake_word_id(socket, wake_entity, wanted) if wake_entity else None
            stage = "wake_word" if wake else "stt"
            pipeline = await socket.result(
                await socket.command(
                    {
                        "type": "assist_pipeline/pipeline/create",
                        "name": "through voxmeter",
                        "language": "en",
                        "conversation_engine": "conversation.home_assistant",
                        "conversation_language": "en",
                        "stt_engine": stt,
                        "stt_language": "en",
                        "tts_engine": None,
                        "tts_language": None,
                        "tts_voice": None,
                        "wake_word_entity": wake_entity or None,
                        "wake_word_id": wake,
                    }
                )
            )
            number = await socket.command(
                {
                    "type": "assist_pipeline/run",
                    "pipeline": pipeline["id"],
                    "start_stage": stage,
                    "end_stage": stage,
                    "input": {"sample_rate": 16000, **({"timeout": 10} if wake else {})},
                }
            )
            await socket.result(number)
            while True:  # events of this run until it ends
                reply = await ws.receive_json(timeout=120)
                if reply.get("type") != "event" or reply.get("id") != number:
                    continue
                event = reply["event"]
                print(json.dumps(event), flush=True)
                if event["type"] == "run-start":
                    handler = event["data"]["runner_data"]["stt_binary_handler_id"]
                    prefix = bytes([handler])
                    for start in range(0, len(pcm), FRAME_BYTES):
                        await ws.send_bytes(prefix + pcm[start : start + FRAME_BYTES])
                        if wake:  # a room's audio comes in real time: the stage ends with it
                            await asyncio.sleep(FRAME_BYTES / 32000)
                    await ws.send_bytes(prefix)  # the end of the audio
                if event["type"] in ("run-end", "error"):
                    return


if __name__ == "__main__":
    base, access_token, entity, path = sys.argv[1:5]
    asyncio.run(run(base, access_token, entity, Path(path).read_bytes(), *sys.argv[5:7]))
