"""The add-on's options (``/data/options.json``, as the Supervisor validated them against
config.yaml's schema) as a voxmeter ``config.toml``; run by run.sh before the daemon starts.

Standard library only (it runs before anything else is known to work). Every value is written as
a TOML literal the daemon's own loader then checks again, so a bad option is one line at start.

Usage: options_to_config.py OPTIONS_JSON CONFIG_TOML [--mqtt-host H --mqtt-port P
       --mqtt-username U --mqtt-password W --mqtt-ssl true|false] [--addon-slug SLUG]
       [--metrics-host-port PORT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

PROXY_PORT = 10555  # config.yaml's ports: the container side of the Wyoming proxy
RELAY_SOCKET = "/run/voxmeter/relay.sock"  # run.sh's relay ↔ measuring process channel
METRICS_PORT = 39217  # config.yaml's ports: the container side of /metrics


def toml_value(value: Any) -> str:
    """One TOML literal (strings as basic strings: JSON's escapes are valid TOML escapes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)


def config_sections(
    options: dict[str, Any],
    mqtt: dict[str, Any] | None,
    *,
    addon_slug: str = "",
    metrics_published: bool = False,
) -> dict[str, dict[str, Any]]:
    """config.toml's sections and keys for these options (see config.toml for each key).

    Metrics are served only when the user published their port in the Network tab (listening
    on every interface, which the daemon then warns about, as the user chose it); the devices'
    Visit link opens this add-on's page in Home Assistant."""
    upstream = options["upstream"]
    sections: dict[str, dict[str, Any]] = {
        "daemon": {
            "source": f"wyoming-proxy://0.0.0.0:{PROXY_PORT}?upstream={upstream}",
            "db": options["database"],
            "device_id": options["device_id"],
            "exit_at_end": False,
        },
        "relay": {"socket": RELAY_SOCKET},
        "budget": {
            "bits": float(options["budget_bits"]),
            "period_seconds": float(options["period_hours"]) * 3600.0,
            # empty: the TZ the Supervisor sets in every add-on, Home Assistant's time zone
            "timezone": options.get("timezone", ""),
        },
        "features": {"embedding": options.get("embedding", "campplus-int8")},
        "protect": {"mode": options.get("protection", "off")},
        "logging": {"level": options["log_level"]},
        "prometheus": {"enabled": metrics_published, "host": "0.0.0.0", "port": METRICS_PORT},
        "mqtt": {"enabled": mqtt is not None},
        "homeassistant": {"discovery": bool(options["mqtt_discovery"]) and mqtt is not None},
    }
    if addon_slug:
        sections["homeassistant"]["configuration_url"] = (
            f"homeassistant://hassio/addon/{addon_slug}"
        )
    if mqtt is not None:
        sections["mqtt"].update(mqtt)
    return sections


def render(sections: dict[str, dict[str, Any]]) -> str:
    lines = ["# Written by the add-on's run.sh from /data/options.json: edit the options instead."]
    for name, keys in sections.items():
        lines.append(f"\n[{name}]")
        lines += [f"{key} = {toml_value(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("options", type=Path)
    parser.add_argument("config", type=Path)
    parser.add_argument("--mqtt-host")
    parser.add_argument("--mqtt-port", type=int)
    parser.add_argument("--mqtt-username", default="")
    parser.add_argument("--mqtt-password", default="")
    parser.add_argument("--mqtt-ssl", default="false")
    parser.add_argument("--addon-slug", default="", help="this add-on's slug (its page in HA)")
    parser.add_argument(
        "--metrics-host-port", default="", help="host port the user set for /metrics, if any"
    )
    args = parser.parse_args(argv)
    options = json.loads(args.options.read_text())
    mqtt = None
    if args.mqtt_host:
        mqtt = {
            "host": args.mqtt_host,
            "port": args.mqtt_port or 1883,
            "username": args.mqtt_username,
            "password": args.mqtt_password,
            # The Mosquitto add-on is reached on the Supervisor's internal network; without TLS
            # its password crosses only that, which the user did not choose: no warning.
            "tls": args.mqtt_ssl == "true",
            "internal_network": True,
        }
    published = args.metrics_host_port.strip() not in ("", "null", "0")
    sections = config_sections(
        options, mqtt, addon_slug=args.addon_slug, metrics_published=published
    )
    args.config.write_text(render(sections))
    args.config.chmod(0o600)  # it may hold the broker's password
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
