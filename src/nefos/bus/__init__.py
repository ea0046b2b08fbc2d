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

from nefos.bus.base import Bus, Endpoint, RemoteError  # noqa: F401


def create_bus(url: str, control_exchange: str = "") -> Bus:
    if url.startswith("local:"):
        from nefos.bus.local import LocalBus
        return LocalBus()
    if url.startswith(("amqp://", "amqps://")):
        from nefos.bus.rabbit import RabbitBus
        return RabbitBus(url, control_exchange=control_exchange)
    raise ValueError(f"unsupported bus URL {url!r} (use local:// or amqp://...)")
