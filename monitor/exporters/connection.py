"""The daemon's one MQTT connection, shared by every MQTT exporter (alerts and speaker states,
Home Assistant discovery, the protection switch, enrolment).

:class:`MqttConnection` owns the aiomqtt client: it connects with the configured broker,
credentials and TLS under one client id (``mqtt.client_id``, default ``voxmeter-<device_id>``),
sets the last will (the availability topic a user names with :meth:`MqttConnection.availability`,
``offline`` when the daemon vanishes) and publishes the same ``offline`` itself on a clean stop.
Its users never see the client:

- each registers a *session* (:meth:`MqttConnection.use`), a coroutine started on every
  connection and cancelled when it drops: it subscribes (:meth:`MqttConnection.subscribe`, a
  topic filter and the handler its messages are routed to) and publishes
  (:meth:`MqttConnection.publish`, awaited until the broker's PUBACK, so an alert leaves the
  store's outbox only once delivered) what it holds in memory; a new connection runs it afresh,
  so a restarted broker gets every retained message again;
- a message that must not wait for a session (an alert raised while an exporter handles an
  event) is handed to :meth:`MqttConnection.post`: a bounded queue, sent in order once
  connected; when full, the oldest is dropped and counted, so an absent broker never makes the
  daemon grow without bound, and ``handle`` never waits on the network.

Subscriptions are per connection (a clean session): the users' sessions make them again after
each reconnect, before they publish, so retained messages from before this run are seen first.

The connection is kept by :class:`~monitor.exporters.reconnect.Reconnect` (module
``reconnect``): the one reconnect policy.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, NoReturn

import aiomqtt

from monitor.errors import ConfigError
from monitor.exporters.reconnect import Reconnect, error_reason
from monitor.settings.sections import MqttSettings

logger = logging.getLogger(__name__)

PUBLISH_TIMEOUT_SECONDS = 10.0
"""Longest wait for a PUBACK before the connection is considered dead and retried."""


def tls_context(settings: MqttSettings) -> ssl.SSLContext | None:
    """The TLS context of ``mqtt.tls`` (None without TLS); a file that cannot be used raises
    ConfigError naming its key, at start rather than at every reconnect."""
    if not settings.tls:
        return None
    try:
        context = ssl.create_default_context(cafile=settings.cafile or None)
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(
            "mqtt.cafile", f"cannot use {settings.cafile}: {error_reason(error)}"
        ) from error
    context.check_hostname = settings.verify_hostname
    if settings.certfile:
        try:
            context.load_cert_chain(settings.certfile, settings.keyfile or None)
        except (OSError, ssl.SSLError) as error:
            key = "mqtt.keyfile" if settings.keyfile else "mqtt.certfile"
            raise ConfigError(
                key,
                f"cannot use {settings.certfile} / {settings.keyfile or '(same file)'}: "
                f"{error_reason(error)}",
            ) from error
    return context


def client_options(settings: MqttSettings, context: ssl.SSLContext | None) -> dict[str, Any]:
    """Keyword arguments of ``aiomqtt.Client`` for the configured broker: address,
    credentials, keepalive and TLS (the daemon's connection, and its start-up problem report)."""
    return {
        "hostname": settings.host,
        "port": settings.port,
        "username": settings.username or None,
        "password": settings.password or None,
        "keepalive": settings.keepalive_seconds,
        "timeout": PUBLISH_TIMEOUT_SECONDS,
        "tls_context": context,
    }


async def publish(
    client: aiomqtt.Client,
    topic: str,
    payload: bytes,
    *,
    qos: int,
    retain: bool = False,
    timeout_seconds: float = PUBLISH_TIMEOUT_SECONDS,
) -> None:
    """``client.publish`` under our own deadline (MqttError when no PUBACK comes in time).

    aiomqtt's ``timeout=`` runs through ``asyncio.wait_for``, which on Python 3.11 swallows a
    cancellation that arrives in the same loop turn as the PUBACK (cpython gh-86296): the
    publisher then went back to waiting for work, the pipeline's TaskGroup waited for it for
    ever, and ``voxmeter run`` hung at end of input (about one run in ten). ``asyncio.timeout``
    keeps the cancellation.
    """
    try:
        async with asyncio.timeout(timeout_seconds):
            await client.publish(topic, payload, qos=qos, retain=retain, timeout=math.inf)
    except TimeoutError as exc:
        raise aiomqtt.MqttError(f"no acknowledgement within {timeout_seconds:g} s") from exc


OFFLINE_TIMEOUT_SECONDS = 1.0
"""Longest wait for the ``offline`` status on a clean stop (SIGTERM must end us within 2 s)."""

POSTED_LIMIT = 256
"""Most messages :meth:`MqttConnection.post` holds while the broker is away; the oldest go."""

Session = Callable[[], Coroutine[Any, Any, None]]
"""A user's life on one connection: subscribes, then publishes until cancelled."""

Handler = Callable[[aiomqtt.Message], Awaitable[None]]
"""Where the messages of one subscription are routed (awaited in arrival order)."""

Payload = bytes | Callable[[], bytes]
"""A posted payload, or what makes it at the moment it is sent (an alert's ``sent`` time)."""


class MqttConnection:
    """The one broker connection of the daemon; see the module docstring.

    ``rng`` and ``sleep`` (the reconnect's) are arguments so tests control the backoff.
    """

    def __init__(
        self,
        settings: MqttSettings,
        *,
        device_id: str,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_connection: Callable[[bool], None] | None = None,
    ) -> None:
        self.settings = settings
        self.client_id = settings.client_id or f"voxmeter-{device_id}"
        self._tls = tls_context(settings)
        self._sessions: list[tuple[str, Session]] = []
        self._urgent: list[Callable[[], bool]] = []
        self._listeners = [on_connection] if on_connection is not None else []
        self._routes: list[tuple[str, Handler]] = []  # this connection's subscriptions
        self._client: aiomqtt.Client | None = None
        self._tasks: asyncio.TaskGroup | None = None  # this connection's, while it lasts
        self._will: tuple[str, Callable[[], bytes]] | None = None
        self._posted: deque[tuple[str, Payload, int, bool]] = deque(maxlen=POSTED_LIMIT)
        self._dropped = 0  # posted messages dropped since the last connection
        self._post_wake = asyncio.Event()
        self._reconnect = Reconnect(
            settings,
            logger=logger,
            rng=rng,
            sleep=sleep,
            urgent=lambda: any(urgent() for urgent in self._urgent),
            on_connection=self._set_connected,
        )
        self.connected = False

    # ---- what users register (no network) ---------------------------------------------------

    def use(self, name: str, session: Session, *, urgent: Callable[[], bool] | None = None) -> None:
        """Run ``session()`` on every connection (task ``voxmeter.mqtt.<name>``); ``urgent()``
        true ends a reconnect wait within a second."""
        self._sessions.append((name, session))
        if urgent is not None:
            self._urgent.append(urgent)
        if self._tasks is not None:  # registered while connected: it starts now
            self._tasks.create_task(session(), name=f"voxmeter.mqtt.{name}")

    def availability(self, topic: str, offline: Callable[[], bytes]) -> None:
        """``offline()`` on ``topic`` (retained) is the last will, and what a clean stop says."""
        self._will = (topic, offline)

    def on_connection(self, listener: Callable[[bool], None]) -> None:
        """``listener(connected)`` at every change of the connection's state."""
        self._listeners.append(listener)

    def post(self, topic: str, payload: Payload, *, qos: int, retain: bool = False) -> None:
        """Send when connected, in order, without waiting (the queue is bounded: module
        docstring); a callable payload is made as it is sent."""
        if len(self._posted) == self._posted.maxlen:
            self._dropped += 1
            if self._dropped == 1:
                logger.warning(
                    "MQTT broker %s:%d away: %d messages waiting, dropping the oldest",
                    self.settings.host,
                    self.settings.port,
                    POSTED_LIMIT,
                )
        self._posted.append((topic, payload, qos, retain))
        self._post_wake.set()

    # ---- what users do in their sessions ------------------------------------------------------

    async def subscribe(self, topic_filter: str, handler: Handler, *, qos: int = 1) -> None:
        """Subscribe on this connection; its messages go to ``handler``."""
        self._routes.append((topic_filter, handler))  # before: retained ones follow the SUBACK
        await self._connected_client().subscribe(topic_filter, qos=qos)

    async def publish(self, topic: str, payload: bytes, *, qos: int, retain: bool = False) -> None:
        """Publish and wait for the PUBACK (MqttError when not connected or none comes in
        :data:`PUBLISH_TIMEOUT_SECONDS`)."""
        await publish(self._connected_client(), topic, payload, qos=qos, retain=retain)

    def _connected_client(self) -> aiomqtt.Client:
        if self._client is None:
            raise aiomqtt.MqttError("not connected")
        return self._client

    # ---- the connection ----------------------------------------------------------------------

    async def run(self) -> NoReturn:
        """Connect, run the users' sessions, reconnect (:class:`Reconnect`) until cancelled."""
        await self._reconnect.run(self._new_client, self._session)

    def _new_client(self) -> aiomqtt.Client:
        will = None
        if self._will is not None:
            topic, offline = self._will
            will = aiomqtt.Will(topic, offline(), qos=1, retain=True)
        return aiomqtt.Client(
            **client_options(self.settings, self._tls), identifier=self.client_id, will=will
        )

    def _set_connected(self, connected: bool) -> None:
        if connected == self.connected:
            return
        self.connected = connected
        for listener in self._listeners:
            listener(connected)

    async def _session(self, client: aiomqtt.Client) -> None:
        """One connection's life: the router, the posted messages and every user's session."""
        self._client, self._routes = client, []
        if self._dropped:
            logger.warning("dropped %d MQTT messages while the broker was away", self._dropped)
            self._dropped = 0
        try:
            async with asyncio.TaskGroup() as tasks:
                self._tasks = tasks
                tasks.create_task(self._route(client), name="voxmeter.mqtt.route")
                tasks.create_task(self._send_posted(), name="voxmeter.mqtt.posted")
                for name, session in self._sessions:
                    tasks.create_task(session(), name=f"voxmeter.mqtt.{name}")
        except asyncio.CancelledError:
            await self._say_offline()
            raise
        except ExceptionGroup as group:  # the first failure decides: broker, store, or a bug
            raise _first(group) from group
        finally:
            self._client, self._routes, self._tasks = None, [], None

    async def _route(self, client: aiomqtt.Client) -> NoReturn:
        """Hand each message to the handler of every subscription it matches; raise MqttError
        when the connection drops (the end of aiomqtt's message stream is its public signal)."""
        async for message in client.messages:
            for topic_filter, handler in list(self._routes):
                if message.topic.matches(topic_filter):
                    await handler(message)
        raise aiomqtt.MqttError("message stream ended")

    async def _send_posted(self) -> NoReturn:
        while True:
            self._post_wake.clear()
            while self._posted:
                entry = self._posted[0]
                topic, payload, qos, retain = entry
                body = payload() if callable(payload) else payload
                await self.publish(topic, body, qos=qos, retain=retain)
                if self._posted and self._posted[0] is entry:
                    self._posted.popleft()  # unless dropped (the queue full) meanwhile
            await self._post_wake.wait()

    async def _say_offline(self) -> None:
        """On a clean stop the broker sends no will: publish ``offline`` ourselves."""
        if self._will is None or self._client is None:
            return
        topic, offline = self._will
        try:
            await publish(
                self._client,
                topic,
                offline(),
                qos=1,
                retain=True,
                timeout_seconds=OFFLINE_TIMEOUT_SECONDS,
            )
        except aiomqtt.MqttError as error:
            logger.info("could not publish offline status: %s", error)


def _first(group: BaseExceptionGroup[Exception]) -> Exception:
    """The first leaf error of a (possibly nested) exception group."""
    error = group.exceptions[0]
    return _first(error) if isinstance(error, BaseExceptionGroup) else error


class ConnectionUser:
    """What every MQTT exporter shares: its session on a connection (the one it is handed, or
    one of its own that it then runs), whether that connection is up, and retained states
    republished as they change."""

    connection: MqttConnection
    _owned: bool

    def attach(
        self,
        connection: MqttConnection | None,
        settings: MqttSettings,
        session: tuple[str, Session],
        *,
        device_id: str,
        urgent: Callable[[], bool] | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """Register ``session`` (its name, its coroutine) on ``connection``, or on a new one."""
        self._owned = connection is None
        self.connection = connection or MqttConnection(
            settings, device_id=device_id, rng=rng, sleep=sleep
        )
        self.connection.use(*session, urgent=urgent)

    @property
    def connected(self) -> bool:
        return self.connection.connected

    async def run(self) -> None:
        """Keep the connection when this exporter made it; else its maker does."""
        if self._owned:
            await self.connection.run()

    async def keep_state(
        self, topic: str, state: Callable[[], bytes], wake: asyncio.Event, *, qos: int
    ) -> NoReturn:
        """Publish ``state()`` retained on ``topic`` now and whenever it differs after a
        ``wake``: a new connection starts with nothing published."""
        published = b""
        while True:
            wake.clear()
            if (payload := state()) != published:
                await self.connection.publish(topic, payload, qos=qos, retain=True)
                published = payload
            await wake.wait()
