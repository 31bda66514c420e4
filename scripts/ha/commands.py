"""Home Assistant WebSocket commands in order, their results as JSON: for the registries and
dashboards the REST API does not reach.

Runs with Home Assistant's own venv (it has aiohttp; ours has no WebSocket client):
``.venv-ha/bin/python scripts/ha/commands.py URL TOKEN < commands.json`` reads a JSON list of
commands (``{"type": "config/entity_registry/list"}``, ...), sends each on one authenticated
connection, and prints the list of their results as one JSON document; a failed command ends
the run with its error on stderr and exit status 1.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import aiohttp
from assist import Socket


async def run(url: str, token: str, commands: list[dict[str, Any]]) -> list[Any]:
    ws_url = url.replace("http", "ws", 1) + "/api/websocket"
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url) as ws:
        assert (await ws.receive_json())["type"] == "auth_required"
        await ws.send_json({"type": "auth", "access_token": token})
        assert (await ws.receive_json())["type"] == "auth_ok"
        socket = Socket(ws)
        return [await socket.result(await socket.command(c)) for c in commands]


if __name__ == "__main__":
    try:
        results = asyncio.run(run(sys.argv[1], sys.argv[2], json.load(sys.stdin)))
    except RuntimeError as error:
        print(f"commands.py: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    print(json.dumps(results))
