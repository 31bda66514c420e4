"""Print the PyPI requirements of Home Assistant integrations and of everything they depend on.

Runs inside Home Assistant's own venv (``scripts/ha/install.sh``): Home Assistant would install
these from PyPI when it first loads an integration; installing them at set-up time lets the tests
run Home Assistant with ``--skip-pip``, so nothing is downloaded at run time.

Usage: python requirements.py DOMAIN...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import homeassistant.bootstrap as bootstrap
import homeassistant.components as components

ROOT = Path(components.__file__).parent


def closure(domains: list[str]) -> tuple[list[str], list[str]]:
    """(integrations reached through dependencies and after_dependencies, their requirements)."""
    seen: list[str] = []
    todo = list(domains)
    requirements: list[str] = []
    while todo:
        domain = todo.pop(0)
        manifest_path = ROOT / domain / "manifest.json"
        if domain in seen or not manifest_path.is_file():
            continue
        seen.append(domain)
        manifest = json.loads(manifest_path.read_text())
        requirements += [r for r in manifest.get("requirements", []) if r not in requirements]
        todo += manifest.get("dependencies", []) + manifest.get("after_dependencies", [])
    return seen, requirements


def always_loaded() -> list[str]:
    """What Home Assistant sets up whatever the configuration says (the frontend among them: without
    it Home Assistant starts in recovery mode)."""
    return sorted(
        bootstrap.DEFAULT_INTEGRATIONS
        | bootstrap.LOGGING_AND_HTTP_DEPS_INTEGRATIONS
        | bootstrap.FRONTEND_INTEGRATIONS
    )


if __name__ == "__main__":
    reached, needed = closure(always_loaded() + sys.argv[1:])
    print(f"# integrations: {' '.join(reached)}", file=sys.stderr)
    print("\n".join(needed))
