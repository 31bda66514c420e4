"""``features.runtime = "auto"``: torch or ONNX Runtime for a float network, by measurement.

Which runtime is cheaper depends on the CPU: on an AMD EPYC ONNX Runtime took ~30 % less CPU
than torch for ECAPA, on an Intel AVX-512 Xeon it took more. So ``auto`` does not
guess: the first time a float backend (``ecapa``, ``campplus``) is used on a CPU model, a child
process times a 3 s window through each runtime on one thread (3 warm runs, then the median of
5; the thread's CPU time, so other load barely moves it) and the cheaper one is kept in
``runtime-probe.json`` in the feature cache folder, keyed by CPU model, backend and library
versions. Later starts read it (no torch import, no timing). A child, because importing torch
would stay in the daemon's memory (~200 MB) for nothing when ONNX wins. If the probe fails, ONNX
Runtime is used (the graph is present) and the reason logged. The int8 backends need no probe:
they run only on ONNX Runtime.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

PROBE_FILE = "runtime-probe.json"
WINDOW_FRAMES = 300  # 3 s of 10 ms filterbank frames, the daemon's window


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def _key(backend: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    def _v(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "absent"

    return f"{cpu_model()} | {backend} | onnxruntime {_v('onnxruntime')} | torch {_v('torch')}"


def probe_path() -> Path:
    from monitor.features.extract import default_cache_dir

    return default_cache_dir() / PROBE_FILE


def measure(backend: str, runs: int = 5) -> dict[str, float]:
    """CPU ms of one 3 s window through ``backend``'s ONNX graph and its torch port, each on
    this thread (median of ``runs`` after 3 warm runs). Imports torch: run it in a child."""
    import time

    import numpy as np

    from monitor.features.embedding_onnx import GRAPHS, OnnxNetwork, _torch_network, graph_path
    from monitor.features.weights import weights_path

    feats = np.random.default_rng(0).standard_normal((WINDOW_FRAMES, 80)).astype(np.float32)
    network = OnnxNetwork(graph_path(backend))

    import torch

    torch.set_num_threads(1)
    reference = _torch_network(backend, weights_path(GRAPHS[backend][0]))
    batch = torch.from_numpy(feats)[None]

    def torch_run() -> Any:
        with torch.inference_mode():
            return reference(batch)

    out = {}
    for name, run in (("onnx", lambda: network(feats)), ("torch", torch_run)):
        for _ in range(3):
            run()
        spent = []
        for _ in range(runs):
            started = time.thread_time()
            run()
            spent.append(time.thread_time() - started)
        out[f"{name}_ms"] = round(1e3 * float(np.median(spent)), 2)
    return out


def _read(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
        return document if isinstance(document, dict) else {}
    except (OSError, ValueError):
        return {}


def choose(backend: str) -> str:
    """``onnx`` or ``torch`` for a float ``backend`` whose ONNX graph is present: the cached
    measurement for this CPU model, else a new one in a child process (then cached)."""
    path, key = probe_path(), _key(backend)
    cached = _read(path).get(key)
    if isinstance(cached, dict) and cached.get("runtime") in ("onnx", "torch"):
        return str(cached["runtime"])
    command = [
        sys.executable,
        "-c",
        f"import json; from monitor.features.runtime_probe import measure; "
        f"print(json.dumps(measure({backend!r})))",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    try:
        timings = json.loads(done.stdout.strip().splitlines()[-1])
        runtime = "torch" if timings["torch_ms"] < timings["onnx_ms"] else "onnx"
    except (IndexError, ValueError, KeyError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        log.warning("embedding runtime probe of %s failed (%s); using ONNX Runtime", backend, last)
        return "onnx"
    log.info("embedding runtime probe, %s: %s -> %s", backend, timings, runtime)
    document = _read(path)
    document[key] = {**timings, "runtime": runtime}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(handle, "w") as stream:
            json.dump(document, stream, indent=1)
        os.replace(temporary, path)
    except OSError as error:  # a read-only cache: measure again next start
        log.warning("cannot cache the runtime probe in %s (%s)", path, error.strerror)
    return runtime
