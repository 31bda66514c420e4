"""Render the generated references from the code that declares them:

- config.toml and docs/reference/configuration.md from the settings' declarations
  (:mod:`monitor.settings.reference`);
- docs/reference/cli.md from the ``voxmeter`` command line itself (every command, option,
  default and help);
- docs/reference/metrics.md from a fresh Prometheus registry's collectors and the MQTT topic
  table (:mod:`monitor.exporters.topics`).

``--check`` renders in memory and exits 1 naming every file that differs::

    python scripts/render_reference.py            # rewrite them
    python scripts/render_reference.py --check    # exit 1 when one is stale
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = Path("docs") / "reference"


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


# ---- the command line ------------------------------------------------------------------


def _commands(command: Any, path: list[str], parent: Any = None) -> Iterator[tuple[Any, Any]]:
    """Every (command, context) of the typer app, depth first in ``--help`` order."""
    import typer

    context = typer.Context(command, info_name=path[-1], parent=parent)
    yield command, context
    if hasattr(command, "list_commands"):
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            if sub is not None and not sub.hidden:
                yield from _commands(sub, [*path, name], context)


def _default(param: Any, context: Any) -> str:
    """The default as a reader should read it: blank when the option falls back to config.toml
    (a None default, on/off flags included: their help names the key that decides)."""
    value = param.get_default(context)
    if getattr(param, "is_flag", False) and getattr(param, "secondary_opts", None):
        if value is None:
            return ""
        return param.opts[0] if value else param.secondary_opts[0]
    if value is None or value == () or (getattr(param, "is_flag", False) and value is False):
        return ""
    if isinstance(value, list | tuple):
        value = " ".join(str(v) for v in value)
    return f"`{value}`"


def _option_row(param: Any, context: Any) -> str:
    """One row as ``--help`` shows the option (names, value type, help), the default apart."""
    names, text = param.get_help_record(context)
    text = re.sub(r"\s*\[default: [^]]*\]", "", text)
    return f"| `{names}` | {_default(param, context)} | {_cell(text)} |"


def cli_page() -> str:
    """docs/reference/cli.md: every command of ``voxmeter``, its options and defaults."""
    import typer

    from monitor.cli import app

    root = typer.main.get_command(app)
    lines = [
        "# Command line",
        "",
        "Every command of `voxmeter`, generated from the command line itself "
        "(`voxmeter COMMAND --help` prints the same). A user error is one line on stderr and "
        "a non-zero exit.",
        "",
    ]
    for command, context in _commands(root, ["voxmeter"]):
        name = context.command_path
        params = [p for p in command.params if not getattr(p, "hidden", False)]
        level = "#" * min(2 + name.count(" ") - 1, 4) if name != "voxmeter" else "##"
        lines += [f"{level} `{name}`", ""]
        if command.help:
            lines += [command.help.strip(), ""]
        lines += ["```", " ".join(command.collect_usage_pieces(context)).join(
            [f"{name} ", ""]), "```", ""]  # fmt: skip
        if params:
            lines += ["| option | default | what it does |", "|---|---|---|"]
            lines += [_option_row(p, context) for p in params]
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# ---- metrics and topics ----------------------------------------------------------------


def _families() -> Iterator[tuple[str, str, tuple[str, ...], str]]:
    """(name, type, labels, help) of every metric a fresh exporter's registry holds.
    prometheus_client keeps label names on the instrument only (``_labelnames``)."""
    from monitor.exporters.prometheus import PrometheusExporter
    from monitor.settings.sections import PrometheusSettings

    with tempfile.TemporaryDirectory() as scratch:  # the outbox is read only at scrape time
        exporter = PrometheusExporter(PrometheusSettings(), db_path=Path(scratch) / "none.db")
        collectors = list(exporter.registry._collector_to_names)
    for collector in collectors:
        for family in collector.describe():
            labels = tuple(getattr(collector, "_labelnames", ()))
            yield family.name, family.type, labels, family.documentation


EXPOSED = {"counter": "{}_total", "histogram": "{}_bucket, {}_sum, {}_count"}


def metrics_page() -> str:
    """docs/reference/metrics.md: the Prometheus metrics and the MQTT topics."""
    from monitor.exporters.topics import TOPICS

    lines = [
        "# Metrics and MQTT topics",
        "",
        "Generated from the exporters' declarations: the Prometheus metrics a fresh registry "
        "holds, and the MQTT topic table the exporters build their topics from.",
        "",
        "## Prometheus",
        "",
        "Served on `prometheus.host:prometheus.port` (default `127.0.0.1:39217`) at `/metrics`.",
        "",
        "| metric | type | labels | what it measures |",
        "|---|---|---|---|",
    ]
    for name, kind, labels, doc in _families():
        exposed = EXPOSED.get(kind, "{}").format(name, name, name)
        shown = ", ".join(f"`{n.strip()}`" for n in exposed.split(","))
        label_text = ", ".join(f"`{label}`" for label in labels)
        lines.append(f"| {shown} | {kind} | {label_text} | {_cell(doc)} |")
    lines += [
        "",
        "## MQTT",
        "",
        "`{prefix}` is `mqtt.prefix`, else `voxmeter/<device_id>`; `{alias}` is one "
        "percent-encoded topic level (a speaker's alias). Discovery topics use "
        "`homeassistant.discovery_prefix` and `homeassistant.node_id`.",
        "",
        "| topic | retained | daemon | exporter | message |",
        "|---|---|---|---|---|",
    ]
    verbs = {"publish": "publishes", "subscribe": "subscribes"}  # what the daemon does
    for decl in TOPICS.values():
        retained = "yes" if decl.retained else "no"
        lines.append(
            f"| `{decl.pattern}` | {retained} | {verbs[decl.direction]} | {decl.exporter} | "
            f"{_cell(decl.payload)} |"
        )
    return "\n".join(lines).rstrip() + "\n"


# ---- all of them -----------------------------------------------------------------------


def outputs() -> dict[Path, Callable[[], str]]:
    """Each generated file (relative to the repository) and what renders it."""
    from monitor.settings.reference import config_toml, configuration_page

    return {
        Path("config.toml"): config_toml,
        REFERENCE / "configuration.md": configuration_page,
        REFERENCE / "cli.md": cli_page,
        REFERENCE / "metrics.md": metrics_page,
    }


def stale(root: Path = ROOT) -> list[str]:
    """Generated files under ``root`` that differ from a fresh rendering (or are missing)."""
    return [
        str(path)
        for path, render in outputs().items()
        if not (root / path).is_file() or (root / path).read_text() != render()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a file is stale")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.check:
        problems = stale()
        for problem in problems:
            print(f"{problem}: stale; run python scripts/render_reference.py", file=sys.stderr)
        return 1 if problems else 0
    for path, render in outputs().items():
        (ROOT / path).parent.mkdir(parents=True, exist_ok=True)
        (ROOT / path).write_text(render())
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
