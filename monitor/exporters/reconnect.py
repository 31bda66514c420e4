"""How the daemon's MQTT connection (monitor.exporters.connection) is kept.

After a failed or lost connection, :class:`Reconnect` waits a random delay in
``[reconnect_min_seconds, ceiling]``, the ceiling doubling up to ``reconnect_max_seconds`` (many
devices that lost one broker do not all come back at the same instant), slept in steps of
:data:`RETRY_STEP_SECONDS`. After each step the wait ends early

- when a user has something urgent (the MQTT exporter: an alert waiting in the outbox), or
- when the broker's port, closed as the wait began, accepts a TCP connection again (probed
  after every step, the connection closed at once): a broker that was away is back within
  about a second of its return, whatever the outage grew the backoff to. A broker that is up
  but refuses us (a password, a certificate) has its port open: it is probed once per wait and
  the backoff spaces the attempts out as it should.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
from collections.abc import Awaitable, Callable
from typing import NoReturn

import aiomqtt

from monitor.errors import StoreError
from monitor.settings.sections import MqttSettings

RETRY_STEP_SECONDS = 1.0
"""Longest stretch of a reconnect wait between two looks at the broker's port (and, for the
alert sender, at the outbox): a returning broker is reached within about this long."""

PROBE_TIMEOUT_SECONDS = 0.5
"""Longest wait for the TCP handshake of a port probe (a host that drops packets: closed)."""


def error_reason(error: OSError | ssl.SSLError) -> str:
    """An ssl or file error without its errno prefix or C source line."""
    return str(getattr(error, "reason", None) or error.strerror or error)


def connection_problem(error: aiomqtt.MqttError) -> str:
    """One line for a failed connection; a refused certificate says which and what to check."""
    cause = error.__context__
    if isinstance(cause, ssl.SSLCertVerificationError):
        return (
            f"TLS: the broker's certificate is not accepted ({cause.verify_message.rstrip('.')}); "
            "check mqtt.cafile, mqtt.host and mqtt.verify_hostname"
        )
    if isinstance(cause, ssl.SSLError):
        return f"TLS: {error_reason(cause)}"
    return str(error)


async def port_open(host: str, port: int, timeout_seconds: float = PROBE_TIMEOUT_SECONDS) -> bool:
    """Whether ``host:port`` completes a TCP handshake now (closed again at once, no bytes)."""
    try:
        async with asyncio.timeout(timeout_seconds):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


class Reconnect:
    """Keep one MQTT connection: connect, run the session, and after any broker error wait as
    the module docstring says, then connect again; never returns, ends only by cancellation.

    ``sleep``, ``rng`` and ``probe`` are arguments so tests control time, draws and the port.
    """

    def __init__(
        self,
        settings: MqttSettings,
        *,
        logger: logging.Logger,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        probe: Callable[[str, int], Awaitable[bool]] = port_open,
        urgent: Callable[[], bool] = lambda: False,
        on_connection: Callable[[bool], None] = lambda _connected: None,
    ) -> None:
        if settings.reconnect_max_seconds < settings.reconnect_min_seconds:
            raise ValueError(
                f"mqtt.reconnect_max_seconds {settings.reconnect_max_seconds} < "
                f"mqtt.reconnect_min_seconds {settings.reconnect_min_seconds}"
            )
        self.settings = settings
        self._logger = logger
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._probe = probe
        self._urgent = urgent
        self._on_connection = on_connection

    async def run(
        self,
        client: Callable[[], aiomqtt.Client],
        session: Callable[[aiomqtt.Client], Awaitable[None]],
    ) -> NoReturn:
        """Connect with ``client()``, await ``session(client)`` while connected; retry."""
        s = self.settings
        ceiling = s.reconnect_min_seconds
        while True:
            connected = False
            try:
                async with client() as connection:
                    connected = True
                    self._on_connection(True)
                    self._logger.info("connected to MQTT broker %s:%d", s.host, s.port)
                    ceiling = s.reconnect_min_seconds
                    await session(connection)
            except aiomqtt.MqttError as error:
                # a lost connection or a TLS refusal is news; a broker still away is not
                tls = isinstance(error.__context__, ssl.SSLError)
                self._logger.log(
                    logging.WARNING if connected or tls else logging.INFO,
                    "MQTT broker %s:%d: %s",
                    s.host,
                    s.port,
                    connection_problem(error),
                )
            except StoreError:
                self._logger.exception("cannot read the database; retrying")
            finally:
                if connected:
                    self._on_connection(False)
            delay = self._rng.uniform(s.reconnect_min_seconds, ceiling)
            ceiling = min(s.reconnect_max_seconds, ceiling * 2)
            await self.wait(delay)

    async def wait(self, delay: float) -> None:
        """Sleep ``delay`` in steps of at most :data:`RETRY_STEP_SECONDS`; end early when
        ``urgent()``, or when the broker's port, closed as this wait began, is open again."""
        s = self.settings
        probing = not await self._probe(s.host, s.port)  # open: up, but it refused or dropped us
        while delay > 0:
            step = min(delay, RETRY_STEP_SECONDS)
            await self._sleep(step)
            delay -= step
            if self._urgent():
                return
            if probing and delay > 0 and await self._probe(s.host, s.port):
                return  # the broker is back: connect now, not at the end of the backoff
