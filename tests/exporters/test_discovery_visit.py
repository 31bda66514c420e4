"""Every device's Visit link in Home Assistant leads to a page a household can read: this
add-on's page under the add-on (homeassistant.configuration_url, set by its run.sh), the
documentation otherwise, whether or not Prometheus serves metrics."""

from __future__ import annotations

import pytest

from monitor.errors import ConfigError
from monitor.exporters.discovery import DOCUMENTATION_URL, Discovery
from monitor.exporters.mqtt import topics_for
from monitor.settings.config import load_config


def visit_links(*overrides: str) -> set[str]:
    config = load_config(None, ["mqtt.enabled=true", "homeassistant.discovery=true", *overrides])
    discovery = Discovery(
        config.homeassistant,
        topics_for(config.mqtt, "hall"),
        "hall",
        sources={"kitchen": "wyoming-proxy"},
    )
    devices = [entity.config["device"] for entity in discovery.device_entities()]
    return {device["configuration_url"] for device in devices}


def test_the_visit_link_is_the_documentation_by_default() -> None:
    assert visit_links() == {DOCUMENTATION_URL}
    assert visit_links("prometheus.enabled=false") == {DOCUMENTATION_URL}
    assert DOCUMENTATION_URL.endswith("/docs/home-assistant.md")


def test_under_the_addon_the_visit_link_opens_its_page() -> None:
    page = "homeassistant://hassio/addon/5c53de3b_voxmeter"
    assert visit_links(f'homeassistant.configuration_url="{page}"') == {page}


def test_a_link_home_assistant_cannot_open_is_one_config_error() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(None, ['homeassistant.configuration_url="ftp://x"'])
    assert raised.value.key == "homeassistant.configuration_url"
