"""config.toml, the configuration, command-line and metrics references are generated from the
code that declares them; a stale one fails here."""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

from monitor.settings.config import load_config
from monitor.settings.reference import config_toml, configuration_page, toml_value
from monitor.settings.sections import SECTIONS, Config

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import render_reference  # noqa: E402  (scripts/ is not a package)


def test_the_generated_files_are_current() -> None:
    assert render_reference.stale() == []


def test_a_file_edited_by_hand_is_stale(tmp_path: Path) -> None:
    for path in render_reference.outputs():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp_path / path)
    assert render_reference.stale(tmp_path) == []
    config = tmp_path / "config.toml"
    config.write_text(config.read_text().replace("bits = 12.0", "bits = 6.0"))
    (tmp_path / "docs/reference/cli.md").unlink()
    assert render_reference.stale(tmp_path) == ["config.toml", "docs/reference/cli.md"]


def test_the_generated_config_toml_loads_as_the_defaults() -> None:
    assert load_config(ROOT / "config.toml") == Config()
    document = tomllib.loads(config_toml())
    assert list(document) == list(SECTIONS)


def test_every_setting_is_on_the_configuration_page() -> None:
    page = configuration_page()
    for section, kind in SECTIONS.items():
        assert f"## `[{section}]`" in page
        for name in kind.__dataclass_fields__:
            assert f"| `{name}` |" in page, f"{section}.{name}"


def test_toml_values_read_back_as_written() -> None:
    for value in (True, 0, 1e-05, 86400.0, "mic", 'a "quoted" α', ("f0", "phone"), ()):
        read = tomllib.loads(f"key = {toml_value(value)}")["key"]
        assert (tuple(read) if isinstance(read, list) else read) == value


def test_every_command_and_option_is_on_the_cli_page() -> None:
    import typer

    from monitor.cli import app

    page = render_reference.cli_page()
    for command, context in render_reference._commands(typer.main.get_command(app), ["voxmeter"]):
        assert f"`{context.command_path}`" in page
        for param in command.params:
            assert param.get_help_record(context)[0] in page, (context.command_path, param.name)


def test_every_metric_and_topic_is_on_the_metrics_page() -> None:
    from prometheus_client import CollectorRegistry

    from monitor.exporters.prometheus_received import ReceivedMetrics
    from monitor.exporters.topics import TOPICS

    page = render_reference.metrics_page()
    registry = CollectorRegistry()
    ReceivedMetrics(registry)
    for family in registry.collect():
        assert f"`{family.name}" in page
    assert "`voxmeter_disclosure_bits`" in page and "`voxmeter_alerts_pending`" in page
    for decl in TOPICS.values():
        assert f"`{decl.pattern}`" in page
