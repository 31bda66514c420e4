"""Daemon settings loaded and validated once: ``config.toml`` and ``--set`` overrides
into the frozen records of :mod:`monitor.settings.sections`.

``config.toml`` at the repository root documents every key with its default; the settings are
the authority (a test checks that the two agree). ``--set section.key=value`` overrides use TOML
value syntax (``--set budget.bits=6``, ``--set daemon.source='"file:x.flac"'``); a value that is
not valid TOML is taken as a bare string (``--set daemon.source=file:x.flac``). Any unknown key,
wrong type or bad value raises :class:`~monitor.errors.ConfigError` naming the key.
"""

from __future__ import annotations

import ipaddress
import tomllib
import typing
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from monitor.errors import ConfigError, InputError
from monitor.settings.checks import Check
from monitor.settings.sections import SECTIONS, Config, MqttSettings
from monitor.settings.tracker import TRACKER_THRESHOLDS, TrackerSettings
from monitor.sources.spec import SourceSpec, parse_sources
from monitor.userfiles import MAX_CONFIG_BYTES, read_bytes


def _type_name(kind: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        kind, "a list of strings"
    )


def _coerce(key: str, kind: Any, value: Any, *, secret: bool = False) -> Any:
    """``value`` as ``kind`` (ints accepted for floats; bools never pass as numbers)."""
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if typing.get_origin(kind) is tuple:
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            return tuple(value)
    elif isinstance(value, kind) and not (kind is not bool and isinstance(value, bool)):
        return value
    got = f"got {_toml_type(value)}" if secret else f"got {value!r}"
    raise ConfigError(key, f"must be {_type_name(kind)}, {got}")


def _toml_type(value: Any) -> str:
    """What a secret's wrong value is, without showing it."""
    kinds = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    return kinds.get(type(value), "a list" if isinstance(value, list) else "a table")


def _apply(section_name: str, current: Any, values: Mapping[str, Any]) -> Any:
    hints = typing.get_type_hints(type(current))
    known = {f.name: f for f in fields(current)}
    changes: dict[str, Any] = {}
    for name, raw in values.items():
        key = f"{section_name}.{name}"
        if name not in known:
            raise ConfigError(key, "unknown key")
        secret = known[name].metadata.get("secret", False)
        value = _coerce(key, hints[name], raw, secret=secret)
        check: Check | None = known[name].metadata.get("check")
        problem = check(value) if check else None
        if problem:
            raise ConfigError(key, problem if secret else f"{problem}, got {value!r}")
        changes[name] = value
    return replace(current, **changes)


def _parse_override(item: str) -> tuple[str, str, Any]:
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(item, "expected --set section.key=value")
    section, dot, name = key.partition(".")
    if not dot or not name:
        raise ConfigError(key, "expected section.key (e.g. budget.bits)")
    try:
        value = tomllib.loads(f"v = {text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = text.strip()
    return section, name, value


def load_config(path: Path | None = None, overrides: Sequence[str] = ()) -> Config:
    """Settings from ``path`` (a config.toml; None = defaults) then ``--set`` overrides."""
    tables: dict[str, dict[str, Any]] = {}
    if path is not None:
        try:  # a regular file of at most 1 MiB: /dev/zero or a FIFO is refused, not read
            document = tomllib.loads(read_bytes(path, max_bytes=MAX_CONFIG_BYTES).decode())
        except RecursionError:
            raise InputError(str(path), "not valid TOML: nested too deeply") from None
        except tomllib.TOMLDecodeError as exc:
            raise InputError(str(path), f"not valid TOML: {exc}") from exc
        except UnicodeDecodeError as exc:  # TOML is UTF-8 only
            line = _line_of(path, exc.start)
            raise InputError(
                str(path), f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x})", line=line
            ) from exc
        for section, table in document.items():
            if section not in SECTIONS:
                raise ConfigError(section, "unknown section")
            if not isinstance(table, dict):
                raise ConfigError(section, "must be a table ([section])")
            tables.setdefault(section, {}).update(table)
    for item in overrides:
        section, name, value = _parse_override(item)
        if section not in SECTIONS:
            raise ConfigError(f"{section}.{name}", "unknown section")
        tables.setdefault(section, {})[name] = value
    config = Config()
    for section, values in tables.items():
        config = replace(config, **{section: _apply(section, getattr(config, section), values)})
    _check_together(config)
    return config


def _line_of(path: Path, offset: int) -> int:
    """1-based line of byte ``offset`` in ``path`` (to name where a bad byte is)."""
    with open(path, "rb") as handle:
        return handle.read(offset).count(b"\n") + 1


def source_specs(config: Config) -> tuple[SourceSpec, ...]:
    """The daemon's sources: ``audio.sources``, else ``daemon.source`` (both checked at load)."""
    return parse_sources(config.audio.sources or (config.daemon.source,))


def _check_together(config: Config) -> None:
    """Constraints between keys, each reported on the key that must change."""
    sources = len(config.audio.sources)
    if sources > config.audio.max_streams:
        raise ConfigError(
            "audio.max_streams", f"must be >= the number of audio.sources ({sources})"
        )
    if config.audio.retry_max_seconds < config.audio.retry_min_seconds:
        raise ConfigError("audio.retry_max_seconds", "must be >= audio.retry_min_seconds")
    if config.mqtt.reconnect_max_seconds < config.mqtt.reconnect_min_seconds:
        raise ConfigError("mqtt.reconnect_max_seconds", "must be >= mqtt.reconnect_min_seconds")
    if config.budget.hysteresis_bits >= config.budget.bits * config.budget.warn_fraction:
        raise ConfigError("budget.hysteresis_bits", "must be below the warning threshold")
    if config.homeassistant.discovery and not config.mqtt.enabled:
        raise ConfigError("homeassistant.discovery", "needs mqtt.enabled = true (same broker)")
    _check_mqtt_tls(config.mqtt)
    relaying = [s for s in source_specs(config) if s.kind == "wyoming-proxy"]
    if config.protect.mode != "off" and not relaying:
        named = ", ".join(repr(s.text) for s in source_specs(config))
        raise ConfigError(
            "protect.mode",
            f"{config.protect.mode!r} needs a source that relays audio to an assistant "
            f"(wyoming-proxy://...), not {named}",
        )


def _check_mqtt_tls(mqtt: MqttSettings) -> None:
    """TLS files only with TLS; a password crosses the network in clear text only when asked."""
    for key in ("cafile", "certfile", "keyfile"):
        if getattr(mqtt, key) and not mqtt.tls:
            raise ConfigError(f"mqtt.{key}", "needs mqtt.tls = true")
    if mqtt.keyfile and not mqtt.certfile:
        raise ConfigError("mqtt.keyfile", "needs mqtt.certfile (the certificate of that key)")
    if (
        mqtt.enabled
        and mqtt.password
        and not mqtt.tls
        and not is_loopback(mqtt.host)
        and not mqtt.allow_plaintext_password
        and not mqtt.internal_network
    ):
        raise ConfigError(
            "mqtt.password",
            f"would cross the network in clear text to {mqtt.host}: set mqtt.tls = true "
            "(or mqtt.allow_plaintext_password = true to accept that)",
        )


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only (``localhost`` or a loopback address; any other
    name or address, ``0.0.0.0`` and ``::`` included, is reachable from outside)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def documented_defaults() -> dict[str, dict[str, tuple[Any, str]]]:
    """section → key → (default, doc): what config.toml must document."""
    return {
        section: {f.name: (getattr(kind(), f.name), f.metadata["doc"]) for f in fields(kind)}
        for section, kind in SECTIONS.items()
    }


def tracker_settings(config: Config) -> TrackerSettings:
    """The tracker's settings with each threshold left at 0 replaced by the configured
    embedding backend's (:data:`TRACKER_THRESHOLDS`)."""
    profile, cluster = TRACKER_THRESHOLDS[config.features.embedding]
    tracker = config.tracker
    return replace(
        tracker,
        profile_threshold=tracker.profile_threshold or profile,
        cluster_threshold=tracker.cluster_threshold or cluster,
    )
