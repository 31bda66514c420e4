"""The add-on's options (``/data/options.json``, as the Supervisor validated them against
config.yaml's schema) as a voxmeter ``config.toml``; run by run.sh before the daemon starts.

Standard library only (it runs before anything else is known to work). Every value is written as
a TOML literal the daemon's own loader then checks again, so a bad option is one line at start.

Usage: options_to_config.py OPTIONS_JSON CONFIG_TOML [--mqtt-host H --mqtt-port P
       --mqtt-username U --mqtt-password W]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

PROXY_PORT = 10555  # config.yaml's ports: the container side of the Wyoming proxy
RELAY_SOCKET = "/run/voxmeter/relay.sock"  # run.sh's relay ↔ measuring process channel


def toml_value(value: Any) -> str:
    """One TOML literal (strings as basic strings: JSON's escapes are valid TOML escapes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)


def config_sections(
    options: dict[str, Any], mqtt: dict[str, Any] | None
) -> dict[str, dict[str, Any]]:
    """config.toml's sections and keys for these options (see config.toml for each key)."""
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
        },
        "protect": {"mode": options.get("protection", "off")},
        "logging": {"level": options["log_level"]},
        "prometheus": {"enabled": True, "host": "0.0.0.0", "port": 39217},
        "mqtt": {"enabled": mqtt is not None},
        "homeassistant": {"discovery": bool(options["mqtt_discovery"]) and mqtt is not None},
    }
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
    args = parser.parse_args(argv)
    options = json.loads(args.options.read_text())
    mqtt = None
    if args.mqtt_host:
        mqtt = {
            "host": args.mqtt_host,
            "port": args.mqtt_port or 1883,
            "username": args.mqtt_username,
            "password": args.mqtt_password,
            # The Mosquitto add-on is reached on the Supervisor's own network; without TLS its
            # password crosses only that (the daemon still warns about it at start).
            "tls": args.mqtt_ssl == "true",
            "allow_plaintext_password": args.mqtt_ssl != "true",
        }
    args.config.write_text(render(config_sections(options, mqtt)))
    args.config.chmod(0o600)  # it may hold the broker's password
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
