"""The message bus: one small interface, two transports.

* ``call``: request/response to one server of a topic (or ``topic.host``), with a timeout.
* ``cast``: fire-and-forget to one server of a topic (or ``topic.host``).
* ``fanout``: to every server of a topic.
* ``notify`` / ``listen_notifications``: versioned notifications.

Arguments and results cross the bus as JSON, on every transport, so a test
on the in-process bus catches what would not survive RabbitMQ. A remote error
whose class is registered in ``nefos.exceptions`` is raised again, by name,
at the caller.
"""

from __future__ import annotations

import logging

from tenacity import retry_if_exception_type

from nefos import exceptions
from nefos.bus.base import Bus, Endpoint, RemoteError  # noqa: F401
from nefos.waiting import until_reachable

LOG = logging.getLogger(__name__)

def create_bus(url: str, control_exchange: str = "") -> Bus:
    if url.startswith("local:"):
        from nefos.bus.local import LocalBus
        return LocalBus()
    if url.startswith(("amqp://", "amqps://")):
        from nefos.bus.rabbit import RabbitBus
        return RabbitBus(url, control_exchange=control_exchange)
    raise ValueError(f"unsupported bus URL {url!r} (use local:// or amqp://...)")


async def connect(bus: Bus) -> None:
    """Start ``bus``, waiting for its broker as long as it takes, as oslo.messaging does for Nova's
    services: a service started before the broker (a host booting, the broker restarting) serves
    once it is there instead of exiting. Cancel it to give up (a SIGTERM while it waits)."""
    async for attempt in until_reachable("message bus", retry_if_exception_type(exceptions.ServiceUnavailable), LOG):
        with attempt:
            await bus.start()
