"""Every PromQL expression shipped in deploy/ (dashboard panels and alert rules), ready to run.

Shared by the deploy tests (syntax through promtool) and the end-to-end test (each expression
against a real Prometheus that scraped a running daemon).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "voxmeter.json"
RULES = DEPLOY / "prometheus" / "rules.yml"
HOUSEHOLD_RULES = DEPLOY / "prometheus" / "household.yml"

# Dashboard variables → what "All" / the default selects.
VARIABLES = {"$instance": ".*", "$speaker": ".*", "$measure": "lid"}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


PROTECTED_PANELS = frozenset(
    {
        "What the assistant received (protected speech)",
        "Protection: speech the assistant received anonymised, per person",
        "Protection: the last protected window as the assistant received it",
    }
)
"""Panels with series only while ``[protect]`` anonymises someone's speech: the end-to-end test
of a protecting daemon checks them (tests/daemon/test_received_view.py), the plain one not."""


def dashboard_expressions(*, protected: bool | None = None) -> dict[str, str]:
    """``"<panel title> / <refId>"`` → expression with the dashboard variables substituted;
    ``protected``: only the :data:`PROTECTED_PANELS` (True), all but them (False), all (None)."""
    found: dict[str, str] = {}
    for panel in dashboard()["panels"]:
        if protected is not None and (panel.get("title") in PROTECTED_PANELS) != protected:
            continue
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            found[f"{panel['title']} / {target['refId']}"] = expr
    return found


def rule_expressions(path: Path = RULES, *, kind: str = "alert") -> dict[str, str]:
    """Alert (or ``kind="record"``: recording rule) name → ``expr`` from a rule file of ours
    (a deliberately small reader: our own files' layout)."""
    text = path.read_text()
    found: dict[str, str] = {}
    pattern = re.compile(
        rf"- {kind}: ([\w:]+)\n\s+expr: (?:>-\n((?:\s{{10,}}.*\n)+)|(.*)\n)", re.MULTILINE
    )
    for match in pattern.finditer(text):
        folded = match.group(2)
        expr = " ".join(line.strip() for line in folded.splitlines()) if folded else match.group(3)
        found[match.group(1)] = expr.strip()
    return found


def without_threshold(expr: str) -> str:
    """The operand an alert compares: ``A > 6`` → ``A`` (the last comparison outside (), {})."""
    depth = 0
    cut = None
    i = 0
    while i < len(expr):
        c = expr[i]
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif depth == 0 and expr.startswith(("==", "!=", ">=", "<="), i):
            cut = i
            i += 1
        elif depth == 0 and c in "<>":
            cut = i
        i += 1
    if cut is None:
        raise ValueError(f"no comparison at the top level of {expr!r}")
    return expr[:cut].strip()
