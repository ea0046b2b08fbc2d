"""A robust aio-pika connection whose consumers get aiormq's deliveries as they come.

aio-pika wraps each delivery in an ``IncomingMessage`` (a score of locked attribute sets)
and runs the consumer in one more task, on top of the task aiormq already runs each
delivery in: together more CPU than the rest of handling a small message. Here a queue's
consumer is registered with aiormq directly, and recorded the way ``RobustQueue`` records
its own, so the robust channel restores it after a reconnect like any other.

On one path (a consumer the broker cancelled, restored without a reconnect) aio-pika
registers the recorded consumer through its own ``Queue.consume``, which hands the
callback an ``IncomingMessage``: consumers read a delivery through ``properties_of``,
``body``, ``channel``, ``delivery_tag``, ``routing_key`` and ``exchange``, which both have.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Union

import aio_pika
import aiormq
from aio_pika.abc import AbstractIncomingMessage

Delivery = Union[aiormq.abc.DeliveredMessage, AbstractIncomingMessage]
Consumer = Callable[[Delivery], Awaitable[Any]]


def properties_of(message: Delivery) -> aiormq.spec.Basic.Properties:
    if isinstance(message, aiormq.abc.DeliveredMessage):
        return message.header.properties
    return message.properties


class DeliveryQueue(aio_pika.RobustQueue):
    async def consume(self, callback: Consumer, no_ack: bool = False, exclusive: bool = False,
                      arguments=None, consumer_tag=None, timeout=None, robust: bool = True) -> str:
        channel = await self.channel.get_underlay_channel()
        ok = await channel.basic_consume(
            queue=self.name, consumer_callback=callback, no_ack=no_ack, exclusive=exclusive,
            arguments=arguments, consumer_tag=consumer_tag, timeout=timeout)
        if ok.consumer_tag is None:
            raise RuntimeError("the broker gave the consumer no tag")
        if robust:
            self._consumers[ok.consumer_tag] = dict(
                callback=callback, no_ack=no_ack, exclusive=exclusive, arguments=arguments)
        return ok.consumer_tag


class DeliveryChannel(aio_pika.RobustChannel):
    QUEUE_CLASS = DeliveryQueue


class DeliveryConnection(aio_pika.RobustConnection):
    CHANNEL_CLASS = DeliveryChannel
