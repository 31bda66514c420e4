"""``voxmeter relay`` with every audio event's trip through the protection transform timed, for
``python -m bench wyoming_proxy --layout relay --protect`` (not a benchmark itself: no ``bench_``
prefix).

The relay process runs as ``voxmeter relay`` does, its anonymiser wrapped: each ``audio-chunk``
(and ``audio-stop``, whose flush sends the last frames) is timed in wall seconds
(``perf_counter``) and in the CPU seconds of the relay's one thread (``thread_time``: what the
anonymiser costs whatever the machine's load; the wall figure adds the time the process waited
for a core). At exit (SIGTERM) the figures go to the file named by
``VOXMETER_BENCH_CHUNK_TIMINGS`` as JSON.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from pathlib import Path

from wyoming.event import Event

from monitor.protect import relay_process as relay_protect
from monitor.relay import process as relay
from monitor.wyoming.relay import ChunkTransform, TransformFactory

timings: dict[str, dict[str, list[float]]] = {
    kind: {"wall": [], "cpu": []} for kind in ("audio-chunk", "audio-stop")
}
_transform = relay_protect.RelayProtection.transform


def _timed(self: relay_protect.RelayProtection, source: str) -> TransformFactory:
    factory = _transform(self, source)

    def connection() -> ChunkTransform:
        inner = factory()

        def timed(event: Event, raw: bytes) -> bytes:
            kind = timings.get(event.type)
            if kind is None:
                return inner(event, raw)
            wall, cpu = time.perf_counter(), time.thread_time()
            out = inner(event, raw)
            kind["cpu"].append(time.thread_time() - cpu)
            kind["wall"].append(time.perf_counter() - wall)
            return out

        return timed

    return connection


def _dump() -> None:
    Path(os.environ["VOXMETER_BENCH_CHUNK_TIMINGS"]).write_text(json.dumps(timings))


relay_protect.RelayProtection.transform = _timed  # type: ignore[method-assign]
atexit.register(_dump)

if __name__ == "__main__":
    sys.exit(relay.main(sys.argv[1:]))
