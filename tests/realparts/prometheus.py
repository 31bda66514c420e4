"""A real Prometheus scraping given targets on loopback, with a ``query(promql)`` helper.

Use the ``prometheus_server`` fixture (marker ``prometheus``): it is a factory,
``prometheus_server(["127.0.0.1:PORT"], rule_files=[...])``, because the target is known only
once the test has started its exporter. Scrape and rule evaluation every second.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.realparts import stop_process
from tests.realparts.mosquitto import free_port


class PrometheusQueryError(RuntimeError):
    """Prometheus answered a query with an error (bad PromQL, for instance)."""


@dataclass
class PrometheusServer:
    """One prometheus process with its own temporary TSDB."""

    directory: Path
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path> and return ``data``; raises PrometheusQueryError on an error."""
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as reply:
                body = json.load(reply)
        except urllib.error.HTTPError as error:
            body = json.load(error)
        if body.get("status") != "success":
            raise PrometheusQueryError(f"{path} {params}: {body.get('error', body)}")
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Instant query: the list of ``{"metric": labels, "value": [time, "value"]}``."""
        data = self.api("query", query=promql)
        result = data["result"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": result}]
        return list(result)

    def wait_for(
        self,
        promql: str,
        predicate: Callable[[list[dict[str, Any]]], bool] = bool,
        *,
        timeout_seconds: float = 30.0,
    ) -> list[dict[str, Any]]:
        """Poll ``query(promql)`` until ``predicate(result)``; on timeout, show the last result."""
        deadline = time.monotonic() + timeout_seconds
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(promql)
            if predicate(result):
                return result
            time.sleep(0.25)
        raise TimeoutError(f"{promql!r} still {result!r} after {timeout_seconds} s")

    def wait_ready(self, *, timeout_seconds: float = 30.0) -> None:
        """Block until /-/ready answers 200 (the TSDB is open and queries work)."""
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.directory / "prometheus.log").read_text(errors="replace")
                raise RuntimeError(f"prometheus exited: {log[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"prometheus on {self.url} not ready after {timeout_seconds} s")

    def targets_up(self) -> bool:
        """True once every active target has been scraped successfully."""
        active = self.api("targets")["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)

    def stop(self) -> None:
        stop_process(self.process)


def write_config(
    directory: Path,
    targets: Sequence[str],
    *,
    rule_files: Sequence[Path] = (),
    job: str = "voxmeter",
    interval_seconds: float = 1.0,
) -> Path:
    """A prometheus.yml scraping ``targets`` (host:port) every ``interval_seconds``."""
    config = {
        "global": {
            "scrape_interval": f"{interval_seconds:g}s",
            "evaluation_interval": f"{interval_seconds:g}s",
        },
        "rule_files": [str(Path(f).resolve()) for f in rule_files],
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(targets)}]}],
    }
    path = directory / "prometheus.yml"
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    return path


@pytest.fixture
def prometheus_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., PrometheusServer]]:
    """Factory: start a Prometheus scraping the given targets; all are stopped after the test."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    started: list[PrometheusServer] = []

    def start(
        targets: Sequence[str], *, rule_files: Sequence[Path] = (), job: str = "voxmeter"
    ) -> PrometheusServer:
        directory = tmp_path_factory.mktemp("prometheus")
        config = write_config(directory, targets, rule_files=rule_files, job=job)
        port = free_port()
        with open(directory / "prometheus.log", "wb") as log:  # the child keeps its own copy
            process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={directory / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        server = PrometheusServer(directory, port, process)
        started.append(server)
        server.wait_ready()
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()
