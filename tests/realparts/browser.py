"""A real headless Chromium (Debian's ``chromium`` and ``chromium-driver``) driven by selenium.

Use the ``chromium`` fixture (marker ``browser``): a fresh profile in a temporary folder, no
network beyond what the page asks for (no sync, no component updates, no QUIC), stopped after
the test. Where Chromium, its driver or selenium is missing it skips with the reason, which
``pytest -ra`` prints: never a silent pass. :meth:`Browser.home_assistant` signs in to a real
Home Assistant by handing the frontend the owner's tokens (``hassTokens`` in local storage, as
the frontend keeps them after its own login form).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WINDOW = (1280, 1150)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    f"--window-size={WINDOW[0]},{WINDOW[1]}",
)
# Every text of the page, shadow roots included (Home Assistant's frontend is web components).
DEEP_TEXT = """
const parts = [];
function walk(node) {
  if (node.shadowRoot) walk(node.shadowRoot);
  for (const child of node.childNodes) {
    if (child.nodeType === Node.TEXT_NODE) parts.push(child.textContent);
    else if (!['STYLE', 'SCRIPT', 'TEMPLATE'].includes(child.nodeName)) walk(child);
  }
}
walk(document.documentElement);
return parts.join(' ').replace(/\\s+/g, ' ');
"""


def unavailable_reason() -> str | None:
    """Why the browser cannot run here, or None when it can."""
    for program in (CHROMIUM, CHROMEDRIVER):
        if not program.is_file():
            return (
                f"{program} missing (scripts/install-system.sh installs chromium chromium-driver)"
            )
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium not installed (pip install -e '.[dev]')"
    return None


@dataclass
class Browser:
    """One Chromium session."""

    driver: Any  # selenium.webdriver.Chrome

    def home_assistant(self, url: str, token: str, refresh_token: str) -> None:
        """Signed in to Home Assistant at ``url`` as the owner of ``token``."""
        self.driver.get(f"{url}/auth/authorize?response_type=code&client_id={url}/")
        tokens = {
            "access_token": token,
            "refresh_token": refresh_token,
            "token_type": "Bearer",
            "expires_in": 1800,
            "expires": int(time.time() * 1000) + 1_800_000,
            "hassUrl": url,
            "clientId": f"{url}/",
        }
        self.driver.execute_script(
            "window.localStorage.setItem('hassTokens', arguments[0]);", json.dumps(tokens)
        )

    def open(self, url: str) -> None:
        self.driver.get(url)

    def text(self) -> str:
        """The page's text, shadow roots included."""
        return str(self.driver.execute_script(DEEP_TEXT))

    def wait_for_text(self, *words: str, timeout_seconds: float = 60.0) -> str:
        """The page's text once every one of ``words`` is in it (TimeoutError names the missing)."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            text = self.text()
            missing = [w for w in words if w not in text]
            if not missing:
                return text
            if time.monotonic() > deadline:
                raise TimeoutError(f"page {self.driver.current_url} lacks {missing}: {text[:1500]}")
            time.sleep(0.5)

    def screenshot(self, path: Path, *, settle_seconds: float = 2.0) -> Path:
        """A PNG of the window, reduced to 256 colours (small enough to commit)."""
        from PIL import Image

        time.sleep(settle_seconds)  # the frontend's animations end
        path.parent.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(path))
        with Image.open(path) as image:
            reduced = image.convert("RGB").quantize(colors=256)
        reduced.save(path, optimize=True)
        return path


@pytest.fixture
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """A headless Chromium, stopped after the test; skips with the reason where it cannot run."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"headless Chromium unavailable: {reason}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tmp_path_factory.mktemp("chromium-profile")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield Browser(driver)
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
