"""A real Home Assistant (2025.4.x) on a free loopback port, driven over its REST API.

Home Assistant needs Python ≥ 3.13, so it lives in its own venv (``.venv-ha``, made by
``scripts/ha/install.sh`` through ``make ha``), with the requirements of every integration the
tests load installed at set-up time; it runs with ``--skip-pip``, so nothing is downloaded at
run time. Each test gets a fresh config folder: a minimal ``configuration.yaml``, onboarding done
through the onboarding API (``/api/onboarding/users``, then the auth code exchanged for a token at
``/auth/token``) — the way the frontend does it for a new user.

Use the ``home_assistant`` fixture (marker ``homeassistant``). Where the venv is missing (no
Python ≥ 3.13 on the machine, or ``make ha`` not run) it skips with the reason the installer
wrote, which ``pytest -ra`` prints: never a silent pass.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.realparts import stop_process

REPO = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("VOXMETER_HA_VENV", REPO / ".venv-ha"))
ASSIST = REPO / "scripts" / "ha" / "assist.py"
COMMANDS = REPO / "scripts" / "ha" / "commands.py"
UNAVAILABLE = VENV / "UNAVAILABLE"  # the installer's one-line reason when it could not install
START_TIMEOUT_SECONDS = 180.0
T = TypeVar("T")

CONFIGURATION = """\
homeassistant:
  name: voxmeter test
  latitude: 0
  longitude: 0
  elevation: 0
  unit_system: metric
  time_zone: UTC
  country: GB
  language: en
http:
  server_host: 127.0.0.1
  server_port: {port}
api:
config:
onboarding:
websocket_api:
logger:
  default: warning
"""
FRONTEND = """\
frontend:
recorder:
  db_url: sqlite:///{directory}/home-assistant.db
  commit_interval: 1
history:
logbook:
"""
"""What a person's browser needs on top: the frontend, and the history and logbook it shows."""


class HomeAssistantError(RuntimeError):
    """Home Assistant answered a request with an HTTP error."""


def unavailable_reason() -> str | None:
    """Why the real Home Assistant cannot run here, or None when it can."""
    if UNAVAILABLE.is_file():
        return UNAVAILABLE.read_text().strip()
    if not (VENV / "bin" / "hass").is_file():
        return f"Home Assistant venv {VENV} not installed (run `make ha`)"
    return None


@dataclass
class HomeAssistant:
    """One ``hass`` process with its own config folder and an owner's access token."""

    directory: Path
    port: int
    process: subprocess.Popen[bytes]
    token: str = ""
    refresh_token: str = ""  # the frontend's (a browser signed in keeps both)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "home-assistant.log"

    def request(self, method: str, path: str, body: Any = None, *, form: bool = False) -> Any:
        """``method path`` with the token; JSON (or form) body in, decoded JSON out."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        data = None
        if body is not None:
            if form:
                data = urllib.parse.urlencode(body).encode()
                headers["Content-Type"] = "application/x-www-form-urlencoded"
            else:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
        req = urllib.request.Request(f"{self.url}{path}", data, headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=60) as reply:
                text = reply.read().decode()
        except urllib.error.HTTPError as error:
            raise HomeAssistantError(
                f"{method} {path}: HTTP {error.code} {error.read().decode()[:500]}"
            ) from error
        return json.loads(text) if text else None

    def onboard(self) -> None:
        """Create the owner through the onboarding API and keep an access token."""
        client_id = f"{self.url}/"
        created = self.request(
            "POST",
            "/api/onboarding/users",
            {
                "client_id": client_id,
                "name": "Test Owner",
                "username": "owner",
                "password": "voxmeter-test-password",
                "language": "en",
            },
        )
        granted = self.request(
            "POST",
            "/auth/token",
            {
                "grant_type": "authorization_code",
                "code": created["auth_code"],
                "client_id": client_id,
            },
            form=True,
        )
        self.token = granted["access_token"]
        self.refresh_token = granted.get("refresh_token", "")

    def finish_onboarding(self) -> None:
        """The onboarding steps after the owner (location, analytics, integrations), as the
        frontend's wizard sends them: until then the frontend shows the wizard, not the pages."""
        client = {"client_id": f"{self.url}/", "redirect_uri": f"{self.url}/?auth_callback=1"}
        self.request("POST", "/api/onboarding/core_config", {})
        self.request("POST", "/api/onboarding/analytics", {})
        self.request("POST", "/api/onboarding/integration", client)

    # ---- what the tests ask ------------------------------------------------------------------

    def config_flow(self, handler: str, *steps: dict[str, Any]) -> dict[str, Any]:
        """Start a config flow and answer its forms with ``steps``; the last result."""
        result: dict[str, Any] = self.request(
            "POST", "/api/config/config_entries/flow", {"handler": handler}
        )
        for user_input in steps:
            if result.get("type") != "form":
                break
            result = self.request(
                "POST", f"/api/config/config_entries/flow/{result['flow_id']}", user_input
            )
        return result

    def states(self) -> dict[str, dict[str, Any]]:
        """entity_id → state object, every entity."""
        return {s["entity_id"]: s for s in self.request("GET", "/api/states")}

    def commands(self, *commands: dict[str, Any]) -> list[Any]:
        """WebSocket commands (registries, dashboards) in order, their results
        (scripts/ha/commands.py, in Home Assistant's venv)."""
        result = subprocess.run(
            [str(VENV / "bin" / "python"), str(COMMANDS), self.url, self.token],
            input=json.dumps(list(commands)),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise HomeAssistantError(f"WebSocket commands failed: {result.stderr[-2000:]}")
        return list(json.loads(result.stdout))

    def assist(
        self, stt_entity: str, pcm: bytes, wake: tuple[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Run the voice pipeline's speech-to-text stage (or, with ``wake`` = (wake-word
        entity, word), its wake-word stage) on 16 kHz s16le ``pcm`` over the WebSocket API
        (scripts/ha/assist.py, in Home Assistant's venv); its events in order."""
        audio = self.directory / "assist.pcm"
        audio.write_bytes(pcm)
        result = subprocess.run(
            [
                str(VENV / "bin" / "python"),
                str(ASSIST),
                self.url,
                self.token,
                stt_entity,
                str(audio),
                *(wake or ()),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if result.returncode != 0:
            raise HomeAssistantError(f"assist pipeline run failed: {result.stderr[-2000:]}")
        return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]

    def log_lines(self) -> list[str]:
        """The log's first lines of every record (records start with a timestamp)."""
        if not self.log_path.is_file():
            return []
        stamp = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
        return [line for line in self.log_path.read_text().splitlines() if stamp.match(line)]

    def problems(self, *words: str) -> list[str]:
        """WARNING and ERROR records that mention any of ``words`` (case-sensitive)."""
        return [
            line
            for line in self.log_lines()
            if (" WARNING " in line or " ERROR " in line or " CRITICAL " in line)
            and any(word in line for word in words)
        ]


def wait_until(probe: Callable[[], T | None], timeout_seconds: float, what: str) -> T:
    """Poll ``probe`` every 0.2 s until it gives something truthy (TimeoutError names ``what``)."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_seconds:g} s")
        time.sleep(0.2)


def start_home_assistant(directory: Path, *, frontend: bool = False) -> HomeAssistant:
    """Write a fresh config folder, start ``hass`` on a free port and onboard: running on return.
    ``frontend``: with the web frontend, recorder, history and logbook (:data:`FRONTEND`)."""
    from tests.realparts.mosquitto import free_port  # imported late: pytest registers it after us

    port = free_port()
    extra = FRONTEND.format(directory=directory) if frontend else ""
    (directory / "configuration.yaml").write_text(CONFIGURATION.format(port=port) + extra)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    process = subprocess.Popen(
        [
            str(VENV / "bin" / "hass"),
            "--config",
            str(directory),
            "--skip-pip",
            "--log-no-color",
            "--log-file",
            str(directory / "home-assistant.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    ha = HomeAssistant(directory, port, process)

    def onboarding_open() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"hass exited with {process.returncode}; see {ha.log_path}")
        try:
            return bool(ha.request("GET", "/api/onboarding"))
        except (HomeAssistantError, OSError):
            return False

    try:
        wait_until(onboarding_open, START_TIMEOUT_SECONDS, "Home Assistant's HTTP API")
        ha.onboard()
        if frontend:
            ha.finish_onboarding()
        wait_until(
            lambda: ha.request("GET", "/api/config").get("state") == "RUNNING",
            START_TIMEOUT_SECONDS,
            "Home Assistant running",
        )
    except BaseException:
        stop_process(process, grace_seconds=30)
        raise
    return ha


def _running(factory: pytest.TempPathFactory, *, frontend: bool) -> Iterator[HomeAssistant]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"real Home Assistant unavailable: {reason}")
    ha = start_home_assistant(factory.mktemp("homeassistant"), frontend=frontend)
    try:
        yield ha
    finally:
        stop_process(ha.process, grace_seconds=30)


@pytest.fixture
def home_assistant(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HomeAssistant]:
    """A running, onboarded Home Assistant, stopped after the test; skips with the reason where
    it cannot run (no Python ≥ 3.13, venv not installed)."""
    yield from _running(tmp_path_factory, frontend=False)


@pytest.fixture
def home_assistant_frontend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HomeAssistant]:
    """:func:`home_assistant` with the web frontend, history and logbook a person uses."""
    yield from _running(tmp_path_factory, frontend=True)
