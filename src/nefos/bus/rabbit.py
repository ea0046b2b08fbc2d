"""The RabbitMQ transport (aio-pika), with the same semantics as the in-process bus.

Topology, per served topic:

* ``topic``: a shared queue; every server of the topic consumes it, so the
  broker hands each message to one of them in turn (competing consumers).
* ``topic.host``: a queue for one server (``call``/``cast`` with ``host=``).
* ``topic_fanout``: a fanout exchange; each server binds its own exclusive
  queue to it, so ``fanout`` reaches every server.

Server queues are auto-delete: when the last server of a queue goes away the
queue goes with it, and a ``mandatory`` publish to it comes back from the
broker, which ``call``/``cast`` turn into ``ServiceUnavailable`` at once
(as the in-process bus does) instead of waiting for a timeout.

``call`` waits on a per-bus exclusive reply queue, matching replies by
correlation id; the request expires in the broker with the call's timeout.
Notifications go to the topic exchange ``nefos_notifications`` (under the
control exchange, like every name here) with the
routing key ``notifications.<priority>``; each ``listen_notifications``
callback gets its own exclusive queue, so every listener sees every
notification (as on the in-process bus).

Each delivered message is handled in its own task; a message is acked when
its handler finishes, so the channel's prefetch (64 per consumer) bounds how
many handlers of one queue run at once. The connection is ``connect_robust``:
after a broker restart or a network cut it reconnects and re-declares queues,
bindings and consumers by itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractQueue, AbstractRobustConnection

from nefos import exceptions
from nefos.bus.base import (
    Bus, Endpoint, NotificationCallback, decode, dispatch, encode, error_payload, make_message,
    check_served, notification_envelope, raise_remote, target,
)
from nefos.bus.rabbit_delivery import Delivery, DeliveryConnection, properties_of

LOG = logging.getLogger(__name__)

NOTIFICATION_EXCHANGE = "nefos_notifications"
PREFETCH = 64
CONNECT_TIMEOUT = 10.0
RECONNECT_INTERVAL = 1.0  # seconds between reconnection attempts (URL ?reconnect_interval= wins)
CONTENT_TYPE = "application/json"
TRANSIENT = 1  # delivery mode: the queues are not durable either
Properties = aiormq.spec.Basic.Properties

# Errors that mean "the connection or channel is not usable right now".
_LINK_ERRORS = (
    aiormq.exceptions.ChannelInvalidStateError,
    aiormq.exceptions.ConnectionClosed,
    aiormq.exceptions.ChannelClosed,
    aiormq.exceptions.AMQPConnectionError,
    ConnectionError,
    RuntimeError,
)


def fanout_exchange(topic: str) -> str:
    return f"{topic}_fanout"


class RabbitBus(Bus):
    def __init__(self, url: str, *, prefetch: int = PREFETCH, control_exchange: str = ""):
        self.url = url
        # Every queue and exchange of one cloud is named under its control exchange, so two
        # clouds on one broker (or vhost) never take each other's messages.
        self.control_exchange = control_exchange
        self.notification_exchange = self._scoped(NOTIFICATION_EXCHANGE)
        self.prefetch = prefetch
        self._connection: AbstractRobustConnection | None = None
        self._pub: AbstractChannel | None = None       # confirms + returns: requests, notifications
        self._reply_pub: AbstractChannel | None = None  # no confirms: replies (fire and forget)
        self._consume: AbstractChannel | None = None    # every consumer, with the prefetch
        self._reply_queue: AbstractQueue | None = None
        self._reply_name = f"nefos.reply.{uuid.uuid4().hex}"
        self._pending: dict[str, asyncio.Future] = {}
        self._sent: set[str] = set()  # the calls of _pending whose request the broker has taken
        self._exchanges: dict[str, AbstractExchange] = {}
        self._consumers: list[tuple[AbstractQueue, str]] = []
        self._endpoint_consumers: dict[int, list[tuple[AbstractQueue, str]]] = {}
        self._tasks: set[asyncio.Task] = set()
        self._start_lock = asyncio.Lock()
        # Shown by the broker (in the client_properties of rabbitmqctl list_connections).
        self.connection_name = f"nefos-{uuid.uuid4().hex[:12]}"
        self._running = False
        self._closing = False

    # Lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        async with self._start_lock:
            if self._running:
                return
            self._closing = False
            options: dict = {}
            if "reconnect_interval" not in urlsplit(self.url).query:
                options["reconnect_interval"] = RECONNECT_INTERVAL
            try:
                self._connection = await aio_pika.connect_robust(
                    self.url, timeout=CONNECT_TIMEOUT,
                    client_properties={"connection_name": self.connection_name},
                    connection_class=DeliveryConnection, **options)
            except Exception as exc:
                raise exceptions.ServiceUnavailable(
                    f"cannot connect to the message bus at {_redact(self.url)}: {exc}") from exc
            try:
                await self._open_channels()
            except BaseException:
                connection, self._connection = self._connection, None
                await connection.close()
                raise
            self._connection.close_callbacks.add(self._connection_lost)
            self._running = True

    def _connection_lost(self, _connection, exc: BaseException | None) -> None:
        """The connection to the broker closed (it reconnects by itself): the answers to the requests
        already sent can no longer come, as the reply queue went with the connection (and a broker
        restart drops the requests too). Those calls fail now, not at the end of their timeout; a call
        still sending its request waits for the connection within its timeout, as before."""
        for corr, fut in self._pending.items():
            if corr in self._sent and not fut.done():
                fut.set_exception(exceptions.ServiceUnavailable(
                    f"the connection to the message bus was lost before the answer came ({exc})"))

    async def _open_channels(self) -> None:
        self._pub = await self._connection.channel(publisher_confirms=True, on_return_raises=True)
        self._reply_pub = await self._connection.channel(publisher_confirms=False)
        self._consume = await self._connection.channel(publisher_confirms=False)
        await self._consume.set_qos(prefetch_count=self.prefetch)
        self._reply_queue = await self._consume.declare_queue(
            self._reply_name, exclusive=True, auto_delete=True, durable=False)
        tag = await self._reply_queue.consume(self._on_reply, no_ack=True)
        self._consumers.append((self._reply_queue, tag))
        self._exchanges[self.notification_exchange] = await self._pub.declare_exchange(
            self.notification_exchange, aio_pika.ExchangeType.TOPIC, durable=True)

    async def stop(self) -> None:
        if self._connection is None:
            return
        self._closing = True
        self._running = False
        # Stop taking messages, then end the handlers still running.
        for queue, tag in self._consumers:
            try:
                await asyncio.wait_for(queue.cancel(tag), 5)
            except Exception:  # the channel may be gone already
                pass
        self._consumers.clear()
        self._endpoint_consumers.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(exceptions.ServiceUnavailable("the message bus was stopped"))
        self._pending.clear()
        connection, self._connection = self._connection, None
        try:
            await asyncio.wait_for(connection.close(), 10)
        except Exception:
            LOG.debug("error closing the bus connection", exc_info=True)
        self._pub = self._reply_pub = self._consume = self._reply_queue = None
        self._exchanges.clear()

    async def _ready(self) -> None:
        if not self._running:
            if self._closing:
                raise exceptions.ServiceUnavailable("the message bus was stopped")
            await self.start()

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # Serving --------------------------------------------------------------------

    def _scoped(self, topic: str) -> str:
        return f"{self.control_exchange}.{topic}" if self.control_exchange else topic

    async def serve(self, topic: str, endpoint: Endpoint, host: str | None = None) -> None:
        check_served(topic, endpoint)
        topic = self._scoped(topic)
        await self._ready()
        ch = self._consume

        async def on_message(message: Delivery) -> None:
            # Return at once: the handler runs in a task of its own, so a slow one blocks
            # nothing, and one that runs when the connection drops (aiormq then cancels the
            # delivery's task) finishes; the broker redelivers what it could not ack.
            self._spawn(self._handle(endpoint, message))

        names = [topic] + ([target(topic, host)] if host else [])
        mine = self._endpoint_consumers.setdefault(id(endpoint), [])
        for name in names:
            queue = await ch.declare_queue(name, durable=False, auto_delete=True)
            tag = await queue.consume(on_message)
            self._consumers.append((queue, tag))
            mine.append((queue, tag))
        exchange = await self._exchange(fanout_exchange(topic), aio_pika.ExchangeType.FANOUT)
        fq = await ch.declare_queue(f"{fanout_exchange(topic)}.{uuid.uuid4().hex}",
                                    exclusive=True, auto_delete=True, durable=False)
        await fq.bind(exchange)
        tag = await fq.consume(on_message)
        self._consumers.append((fq, tag))
        mine.append((fq, tag))

    async def unserve(self, endpoint: Endpoint) -> None:
        for queue, tag in self._endpoint_consumers.pop(id(endpoint), []):
            try:
                await asyncio.wait_for(queue.cancel(tag), 5)
            except Exception:  # the channel may be gone already
                pass
            if (queue, tag) in self._consumers:
                self._consumers.remove((queue, tag))

    async def _exchange(self, name: str, kind: aio_pika.ExchangeType) -> AbstractExchange:
        exchange = self._exchanges.get(name)
        if exchange is None:
            exchange = await self._pub.declare_exchange(name, kind, durable=False, auto_delete=False)
            self._exchanges[name] = exchange
        return exchange

    async def _handle(self, endpoint: Endpoint, message: Delivery) -> None:
        try:
            request = decode(message.body)
        except ValueError:
            LOG.error("dropping a message that is not JSON: %r", message.body[:200])
            await self._ack(message)
            return
        properties = properties_of(message)
        try:
            reply = {"result": await dispatch(endpoint, request, answered=bool(properties.reply_to))}
        except asyncio.CancelledError:
            # Stopping: leave it unacked, so the broker hands it to another server.
            raise
        except Exception as exc:  # every error goes back to the caller
            reply = {"error": error_payload(exc)}
        if properties.reply_to:
            await self._send_reply(properties, reply)
        elif "error" in reply:
            LOG.error("cast %s.%s failed: %s", message.routing_key or message.exchange,
                      request.get("method"), reply["error"]["traceback"])
        await self._ack(message)

    @staticmethod
    async def _ack(message: Delivery) -> None:
        try:
            # Not waiting for the socket's drain: the frame is queued behind the reply.
            await message.channel.basic_ack(message.delivery_tag, wait=False)
        except Exception:  # the channel closed meanwhile; the broker redelivers
            LOG.debug("could not ack message", exc_info=True)

    async def _send_reply(self, request: Properties, reply: dict) -> None:
        try:
            body = encode(reply)
        except TypeError as exc:
            body = encode({"error": error_payload(exc)})
        try:
            channel = await _current(self._reply_pub)
            await channel.basic_publish(
                body, routing_key=request.reply_to, wait=False,
                properties=Properties(content_type=CONTENT_TYPE, delivery_mode=TRANSIENT,
                                      correlation_id=request.correlation_id,
                                      message_id=request.correlation_id))
        except Exception:
            LOG.warning("could not send the reply to %s", request.reply_to, exc_info=True)

    async def _on_reply(self, message: Delivery) -> None:
        fut = self._pending.get(properties_of(message).correlation_id or "")
        if fut is not None and not fut.done():
            fut.set_result(message.body)

    # Sending --------------------------------------------------------------------

    async def _publish(self, exchange: str, body: bytes, properties: Properties, routing_key: str,
                       *, mandatory: bool, deadline: float, what: str) -> None:
        """Publish with the broker's confirmation; ServiceUnavailable when unroutable or unreachable.

        Straight through aiormq with pamqp's properties (an aio_pika.Message costs more than
        the rest of the publish); the robust channel hands out its current aiormq channel,
        the one it re-created after a reconnect."""
        while True:
            try:
                # asyncio.timeout, not wait_for: no swallowed cancellation on 3.11 (nefos.waiting)
                async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                    channel = await _current(self._pub)
                    # wait=False: the confirmation comes after the frame is written anyway.
                    await channel.basic_publish(body, exchange=exchange, routing_key=routing_key,
                                                properties=properties, mandatory=mandatory, wait=False)
                return
            except aiormq.exceptions.PublishError as exc:
                raise exceptions.NoServerListening(target=what) from exc
            except TimeoutError as exc:
                raise exceptions.ServiceUnavailable(f"timed out sending to {what}") from exc
            except _LINK_ERRORS as exc:
                # The robust connection is re-establishing itself: wait for it, within the deadline.
                if self._closing or time.monotonic() >= deadline:
                    raise exceptions.ServiceUnavailable(
                        f"message bus unavailable sending to {what}: {exc}") from exc
                await asyncio.sleep(min(0.5, max(deadline - time.monotonic(), 0)))

    async def call(self, ctx, topic, method, *, host=None, timeout=None, version=None, **kwargs) -> Any:
        topic = self._scoped(topic)
        await self._ready()
        timeout = timeout or self.default_timeout
        deadline = time.monotonic() + timeout
        name = target(topic, host)
        request = make_message(ctx, method, kwargs, version)
        corr = request["id"]
        fut = asyncio.get_running_loop().create_future()
        self._pending[corr] = fut
        try:
            await self._publish(
                "", encode(request),
                Properties(content_type=CONTENT_TYPE, delivery_mode=TRANSIENT, correlation_id=corr,
                           reply_to=self._reply_name, expiration=str(int(timeout * 1000)),
                           message_id=corr),
                name, mandatory=True, deadline=deadline, what=name)
            self._sent.add(corr)
            try:
                async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                    body = await fut
            except TimeoutError:
                raise exceptions.ServiceUnavailable(
                    f"timed out waiting for {method} on {name}") from None
        finally:
            self._pending.pop(corr, None)
            self._sent.discard(corr)
        reply = decode(body)
        if "error" in reply:
            raise_remote(reply["error"])
        return reply.get("result")

    async def cast(self, ctx, topic, method, *, host=None, version=None, **kwargs) -> None:
        message = make_message(ctx, method, kwargs, version)
        body = encode(message)
        topic = self._scoped(topic)
        await self._ready()
        name = target(topic, host)
        await self._publish(
            "", body, _properties(message["id"]),
            name, mandatory=True, deadline=time.monotonic() + self.default_timeout, what=name)

    async def fanout(self, ctx, topic, method, *, version=None, **kwargs) -> None:
        message = make_message(ctx, method, kwargs, version)
        body = encode(message)
        topic = self._scoped(topic)
        await self._ready()
        exchange = await self._exchange(fanout_exchange(topic), aio_pika.ExchangeType.FANOUT)
        await self._publish(
            exchange.name, body, _properties(message["id"]),
            "", mandatory=False, deadline=time.monotonic() + self.default_timeout,
            what=f"{topic}(fanout)")

    # Notifications --------------------------------------------------------------

    async def notify(self, ctx, event_type, payload, *, publisher_id, priority="INFO") -> None:
        await self._ready()
        envelope = notification_envelope(ctx, event_type, payload, publisher_id, priority)
        await self._publish(
            self.notification_exchange, encode(envelope), _properties(envelope["message_id"]),
            f"notifications.{priority.lower()}", mandatory=False,
            deadline=time.monotonic() + self.default_timeout, what="notifications")

    async def listen_notifications(self, callback: NotificationCallback) -> None:
        await self._ready()
        queue = await self._consume.declare_queue(
            f"nefos.notifications.{uuid.uuid4().hex}", exclusive=True, auto_delete=True,
            durable=False)
        await queue.bind(self._exchanges[self.notification_exchange], routing_key="notifications.*")

        async def on_message(message: Delivery) -> None:
            self._spawn(self._deliver(callback, message))

        tag = await queue.consume(on_message)
        self._consumers.append((queue, tag))

    async def _deliver(self, callback: NotificationCallback, message: Delivery) -> None:
        try:
            await callback(decode(message.body))
        except asyncio.CancelledError:
            raise
        except Exception:
            LOG.exception("notification listener failed")
        await self._ack(message)


async def _current(channel: AbstractChannel) -> aiormq.abc.AbstractChannel:
    """The robust channel's aiormq channel of the moment (re-created after a reconnect)."""
    if channel.is_closed:  # reconnecting: the caller retries or gives up
        raise aiormq.exceptions.ChannelInvalidStateError("the channel is closed")
    return await channel.get_underlay_channel()


def _properties(message_id: str) -> Properties:
    return Properties(content_type=CONTENT_TYPE, delivery_mode=TRANSIENT, message_id=message_id)


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url
