"""``voxmeter relay``: the Wyoming proxies in a small process of their own.

The measuring side (``voxmeter run``: numpy, ONNX Runtime, pocketsphinx, ~450 MB) can be
SIGKILLed, segfault in native code or be OOM-killed; the assistant must not hear of it. So with
``relay.socket`` set, the proxies run here — the servers, the upstream connections, the zeroconf
announcement (:mod:`monitor.wyoming.relay`) — and every audio event they pass upstream is
handed to the measuring process over the one local channel (:mod:`monitor.wyoming.channel`),
never waited for: when the measuring process is behind or gone, the copy is dropped and its
seconds counted, and the measuring process, once back (systemd or the add-on restarts it),
subscribes again, learns the count and resumes from its ledger.

This process imports no numpy, ONNX Runtime, torch or pocketsphinx (tests/daemon/
test_relay_process.py checks ``sys.modules``), keeps the default priority and holds ~30 MB.
It reads its few keys of config.toml itself — ``audio.sources`` or else ``daemon.source`` (the
``wyoming-proxy://`` ones; the other sources are the measuring process's), ``[relay]``,
``wyoming.zeroconf``, ``audio.retry_min_seconds`` / ``retry_max_seconds`` (upstream probes),
``[protect]`` and ``[logging]`` — since the daemon's loader checks every key with the measuring
modules; ``voxmeter run`` checks the whole file.

With ``[protect] mode`` other than ``off`` this process anonymises what it sends upstream
(:mod:`monitor.protect.relay_process`: the same transform as in-process, each utterance decided
here from the verdict the measuring process last sent over the channel) and only then imports
numpy and scipy (the anonymiser's); with ``off`` it imports neither.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monitor.errors import ConfigError, InputError, VoxmeterError
from monitor.logs import configure_logging
from monitor.protect import METHODS, MODES
from monitor.protect.messages import PROTECT
from monitor.userfiles import read_bytes, socket_path_problem
from monitor.wyoming.channel import CAPACITY_BYTES, ChannelServer
from monitor.wyoming.relay import SCHEME, ProxyEndpoint, ProxyServer, parse_proxy

logger = logging.getLogger(__name__)

MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class RelayConfig:
    """What ``voxmeter relay`` needs of config.toml (see the module docstring)."""

    proxies: tuple[ProxyEndpoint, ...]
    socket: Path
    channel_bytes: int = CAPACITY_BYTES
    zeroconf: bool = True
    retry_min_seconds: float = 0.5
    retry_max_seconds: float = 30.0
    level: str = "info"
    format: str = "keyvalue"
    protect_mode: str = "off"
    protect_alpha: str = "0.5,0.9"


_KEYS: dict[str, tuple[type, ...]] = {
    "daemon.source": (str,),
    "audio.sources": (list,),
    "relay.socket": (str,),
    "relay.channel_bytes": (int,),
    "wyoming.zeroconf": (bool,),
    "audio.retry_min_seconds": (int, float),
    "audio.retry_max_seconds": (int, float),
    "logging.level": (str,),
    "logging.format": (str,),
    "protect.mode": (str,),
    "protect.method": (str,),
    "protect.alpha": (str,),
}


def _override(item: str) -> tuple[str, Any]:
    key, sep, text = item.partition("=")
    if not sep or "." not in key.strip():
        raise ConfigError(item, "expected --set section.key=value")
    try:
        value = tomllib.loads(f"v = {text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = text.strip()
    return key.strip(), value


def _without_name(spec: str) -> str:
    """``kitchen=wyoming-proxy://…`` → ``wyoming-proxy://…`` (names are the measuring side's:
    the channel knows a source by its spec, monitor/sources/spec.py by its name)."""
    head, equals, rest = spec.partition("=")
    return rest if equals and not any(c in head for c in ":/") else spec


def load_relay_config(path: Path | None = None, overrides: Sequence[str] = ()) -> RelayConfig:
    """The relay's keys from ``path`` then ``--set`` overrides; a bad value is one
    :class:`ConfigError` naming its key."""
    values: dict[str, Any] = {}
    if path is not None:
        try:
            document = tomllib.loads(read_bytes(path, max_bytes=MAX_CONFIG_BYTES).decode())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise InputError(str(path), f"not valid TOML: {exc}") from None
        for section, table in document.items():
            if isinstance(table, dict):
                values.update({f"{section}.{k}": v for k, v in table.items()})
    values.update(_override(item) for item in overrides)
    for key, kinds in _KEYS.items():
        value = values.get(key)
        if value is not None and (
            isinstance(value, bool) != (bool in kinds) or not isinstance(value, kinds)
        ):
            raise ConfigError(
                key, f"must be {' or '.join(k.__name__ for k in kinds)}, got {value!r}"
            )
    socket = str(values.get("relay.socket", ""))
    if not socket:
        raise ConfigError("relay.socket", "must be set (an absolute path) for voxmeter relay")
    if (problem := socket_path_problem(socket)) is not None:  # as voxmeter run checks it
        raise ConfigError("relay.socket", problem)
    sources = values.get("audio.sources") or [values.get("daemon.source", "")]
    key = "audio.sources" if values.get("audio.sources") else "daemon.source"
    specs = [_without_name(str(spec)) for spec in sources]
    try:
        proxies = tuple(parse_proxy(spec) for spec in specs if spec.startswith(f"{SCHEME}://"))
    except InputError as error:
        raise ConfigError(key, error.problem) from None
    if not proxies:
        raise ConfigError(key, f"voxmeter relay relays {SCHEME}:// sources, got {sources!r}")
    config = RelayConfig(
        proxies,
        Path(socket),
        channel_bytes=int(values.get("relay.channel_bytes", CAPACITY_BYTES)),
        zeroconf=bool(values.get("wyoming.zeroconf", True)),
        retry_min_seconds=float(values.get("audio.retry_min_seconds", 0.5)),
        retry_max_seconds=float(values.get("audio.retry_max_seconds", 30.0)),
        level=str(values.get("logging.level", "info")),
        format=str(values.get("logging.format", "keyvalue")),
        protect_mode=str(values.get("protect.mode", "off")),
        protect_alpha=str(values.get("protect.alpha", "0.5,0.9")),
    )
    if config.channel_bytes <= 0:
        raise ConfigError("relay.channel_bytes", f"must be > 0, got {config.channel_bytes}")
    if config.level not in ("debug", "info", "warning", "error"):
        raise ConfigError("logging.level", "must be one of debug, info, warning, error")
    if config.format not in ("keyvalue", "json"):
        raise ConfigError("logging.format", "must be one of keyvalue, json")
    _check_protect(config, str(values.get("protect.method", METHODS[0])))
    return config


def _check_protect(config: RelayConfig, method: str) -> None:
    """``[protect]`` as ``voxmeter run`` checks it; α only when protecting (it needs numpy)."""
    if config.protect_mode not in MODES:
        raise ConfigError("protect.mode", f"must be one of {', '.join(MODES)}")
    if method not in METHODS:
        raise ConfigError("protect.method", f"must be one of {', '.join(METHODS)}")
    if config.protect_mode != "off":
        from monitor.protect.mcadams import parse_alpha

        try:
            parse_alpha(config.protect_alpha)
        except ValueError as error:
            raise ConfigError("protect.alpha", str(error).split(": ", 1)[1]) from None


class RelayProcess:
    """The channel and every proxy, from :meth:`run` until :meth:`stop` (or a signal)."""

    def __init__(self, config: RelayConfig) -> None:
        self.config = config
        self.channel = ChannelServer(config.socket, config.channel_bytes)
        self.channel.on_message = _ignore_verdicts()
        protection = None
        if config.protect_mode != "off":  # only then numpy and scipy: the anonymiser's
            from monitor.protect.relay_process import relay_protection

            protection = relay_protection(config.protect_mode, config.protect_alpha)
            self.channel.on_message = protection.on_message
        self.protection = protection
        self.proxies = [
            ProxyServer(
                endpoint,
                self.channel.tap(str(endpoint)),
                backoff_initial_seconds=config.retry_min_seconds,
                backoff_max_seconds=config.retry_max_seconds,
                zeroconf=config.zeroconf,
                transform=protection.transform(str(endpoint)) if protection else None,
            )
            for endpoint in config.proxies
        ]
        self.serving = asyncio.Event()  # set once every proxy listens
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signum, self.stop)
        await self.channel.start()
        try:
            async with contextlib.AsyncExitStack() as stack:
                for proxy in self.proxies:
                    await stack.enter_async_context(proxy.serving())
                self.serving.set()
                await self._stop.wait()
        finally:
            await self.channel.stop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.remove_signal_handler(signum)
        unmeasured = sum(self.channel.unmeasured.values())
        logger.info("relay stopped; %.1f s of audio were relayed unmeasured", unmeasured)


def _ignore_verdicts() -> Callable[[str, dict[str, Any]], None]:
    """A relay without protection: a verdict to protect is not followed; one warning."""
    warned = False

    def on_message(source: str, header: dict[str, Any]) -> None:
        nonlocal warned
        if header.get("kind") == PROTECT and header.get("protect") is True and not warned:
            warned = True
            logger.warning(
                "the measuring process protects %s, but this relay's protect.mode is off: "
                "its audio passes clear; start voxmeter relay with the same config.toml",
                source,
            )

    return on_message


def run_relay(config: RelayConfig) -> None:
    """``voxmeter relay``: until SIGTERM/SIGINT."""

    configure_logging(config)
    asyncio.run(RelayProcess(config).run())


def main(argv: Sequence[str] | None = None) -> int:
    """``voxmeter relay [--config PATH] [--set SECTION.KEY=VALUE ...]`` (and ``python -m
    monitor.relay.process``): parsed with argparse, not typer, whose pydantic would add 10 MB to
    this process. A user error is one line and exit 2, as every command's."""
    parser = argparse.ArgumentParser(
        prog="voxmeter relay",
        description="Relay the Wyoming proxies in a small process of their own; "
        "voxmeter run (relay.socket set) measures what they relay.",
    )
    parser.add_argument("--config", type=Path, help="config.toml (the daemon's, relay.socket set)")
    parser.add_argument(
        "--set", action="append", default=[], dest="overrides", metavar="SECTION.KEY=VALUE",
        help="override one key (repeatable)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    try:
        run_relay(load_relay_config(args.config, args.overrides))
    except VoxmeterError as error:
        print(f"voxmeter: error: {error}", file=sys.stderr)
        return error.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
