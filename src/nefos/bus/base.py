"""What every bus transport shares: the interface, dispatch and error transport."""

from __future__ import annotations

import abc
import asyncio
import json
import datetime as dt
import logging
import sys
import traceback
import uuid
from typing import Any, Awaitable, Callable

from nefos import exceptions, metrics
from nefos.context import RequestContext, current_context
from nefos.bus.versioning import (NO_PINS, RPCInterface, VersionCaps, check_message, check_notification_payload,
                                  primitive)

LOG = logging.getLogger(__name__)

NotificationCallback = Callable[[dict], Awaitable[None]]


class Endpoint:
    """Base for objects served on a topic: ``rpc_interface`` (``nefos.bus.interfaces``) declares
    which of their coroutines the bus may run, and at which versions.

    A method is called as ``await endpoint.method(ctx, **kwargs)``.
    """

    rpc_interface: RPCInterface | None = None
    # Set while the endpoint's service listens but has not started (a compute host recovering its
    # instances): its casts wait for the event, queued rather than refused; its calls are refused.
    rpc_ready: asyncio.Event | None = None


class RemoteError(exceptions.Error):
    code = 500
    message = "Remote error: %(exc_type)s %(value)s"


def encode(obj: Any) -> bytes:
    return json.dumps(obj, default=_default, separators=(",", ":")).encode()


def decode(data: bytes | str) -> Any:
    return json.loads(data)


def _default(obj):
    if isinstance(obj, dt.datetime):
        return obj.isoformat()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not serialisable over the bus")


def error_payload(exc: BaseException) -> dict:
    """``exc`` for the caller of a remote method. A lost database or one too contended goes as
    its 503 error (``transient_error``), which the caller re-raises by class, not as an unknown
    driver error (a RemoteError, 500); the traceback stays the original's."""
    sent = _transient_error(exc) or exc
    return {
        "class": type(sent).__name__,
        "message": str(sent),
        "kwargs": getattr(sent, "kwargs", {}) if isinstance(getattr(sent, "kwargs", None), dict) else {},
        "traceback": "".join(traceback.format_exception(exc)),
    }


def _transient_error(exc: BaseException):
    """The database's ``transient_error`` where this process has a database; a process without
    one (a network agent) never imports it, and none of its errors can be the database's."""
    retry = sys.modules.get("nefos.db.retry")
    return retry.transient_error(exc) if retry is not None else None


def raise_remote(err: dict) -> None:
    cls = exceptions.error_class(err.get("class", ""))
    if cls is not None:
        exc = cls(err.get("message"))
        exc.kwargs = err.get("kwargs") or {}
        exc.remote_traceback = err.get("traceback")
        raise exc
    raise RemoteError(exc_type=err.get("class"), value=err.get("message"))


async def dispatch(endpoint: Endpoint, message: dict, *, answered: bool = False) -> Any:
    """Run ``message`` against ``endpoint`` under the message's context, when the endpoint's
    declared interface serves the message's method at the message's version. A message that
    arrives while the endpoint's service starts waits for it, unless it is a call (``answered``):
    its caller waits only so long, and one run late would be done after the caller was told it
    failed, so it is refused at once, run by no one, as when nothing listened."""
    check_message(endpoint, message)
    kind = "call" if answered else "cast"
    metrics.BUS_MESSAGES.labels("received", endpoint.rpc_interface.topic, kind).inc()
    ready = getattr(endpoint, "rpc_ready", None)
    if ready is not None and not ready.is_set():
        if answered:
            raise exceptions.NoServerListening(target=f"{endpoint.rpc_interface.topic} (starting)")
        await ready.wait()
    method = message["method"]
    fn = getattr(endpoint, method, None)
    context = message.get("context")
    if not isinstance(context, dict) or not context:
        # Every sender names whose authority a message carries (a service's own work sends an
        # admin context built on purpose): a message without one would otherwise act as someone.
        raise exceptions.NotAuthorized(f"{endpoint.rpc_interface.topic}.{method}: a message without a "
                                       f"request context is refused")
    ctx = RequestContext.from_dict(context)
    token = current_context.set(ctx)
    try:
        # Under the sender's request ids: with --debug, one grep for a global request id lists
        # every call and cast each service ran for it.
        LOG.debug("%s.%s %s received (version %s)", endpoint.rpc_interface.topic, method, kind,
                  message.get("version"))
        # The answer's typed payloads as this server's interface version carries them: a caller
        # reads a newer payload without the fields it does not know (``Payload.from_primitive``).
        interface = endpoint.rpc_interface
        return primitive(await fn(ctx, **interface.received(message.get("args", {}))), interface, interface.version)
    finally:
        current_context.reset(token)


def make_message(ctx: RequestContext | None, method: str, kwargs: dict, version: str | None) -> dict:
    """The message of one call, cast or fanout; ``version``: the version of the topic's interface
    the sender chose (``nefos.bus.versioning.RPCClient``)."""
    if version is None:
        raise ValueError(f"{method}: every message carries its interface version (send it with an RPCClient)")
    return {"id": uuid.uuid4().hex, "method": method, "version": version,
            "context": ctx.to_dict() if ctx else None, "args": kwargs}


def target(topic: str, host: str | None) -> str:
    return f"{topic}.{host}" if host else topic


class Bus(abc.ABC):
    default_timeout: float = 60.0
    # This process's [upgrade_levels] pins, which RPCClients send within (set by the Runtime).
    version_caps: VersionCaps = NO_PINS

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def stop(self) -> None: ...

    @abc.abstractmethod
    async def serve(self, topic: str, endpoint: Endpoint, host: str | None = None) -> None:
        """Serve ``endpoint`` on ``topic`` (shared), ``topic.host`` (direct) and the topic's fanout.
        Transports call ``check_served`` first."""

    @abc.abstractmethod
    async def unserve(self, endpoint: Endpoint) -> None:
        """Stop delivering anything to ``endpoint`` (a stopping service)."""

    @abc.abstractmethod
    async def call(self, ctx: RequestContext | None, topic: str, method: str, *,
                   host: str | None = None, timeout: float | None = None, version: str | None = None,
                   **kwargs) -> Any: ...

    @abc.abstractmethod
    async def cast(self, ctx: RequestContext | None, topic: str, method: str, *,
                   host: str | None = None, version: str | None = None, **kwargs) -> None: ...

    @abc.abstractmethod
    async def fanout(self, ctx: RequestContext | None, topic: str, method: str, *,
                     version: str | None = None, **kwargs) -> None: ...

    @abc.abstractmethod
    async def notify(self, ctx: RequestContext | None, event_type: str, payload: dict, *,
                     publisher_id: str, priority: str = "INFO") -> None: ...

    @abc.abstractmethod
    async def listen_notifications(self, callback: NotificationCallback) -> None: ...


def check_served(topic: str, endpoint: Endpoint) -> None:
    """``endpoint`` declares the interface of ``topic`` and has each of its methods."""
    interface = endpoint.rpc_interface
    if interface is None or interface.topic != topic:
        raise TypeError(f"{type(endpoint).__name__} declares no RPC interface for topic {topic}")
    interface.check_endpoint(endpoint)


def notification_envelope(ctx: RequestContext | None, event_type: str, payload: dict,
                          publisher_id: str, priority: str) -> dict:
    check_notification_payload(payload)
    return {
        "message_id": str(uuid.uuid4()),
        "event_type": event_type,
        "publisher_id": publisher_id,
        "priority": priority.upper(),
        "timestamp": dt.datetime.now(dt.timezone.utc).replace(tzinfo=None).isoformat(),
        "request_id": ctx.request_id if ctx else None,
        "global_request_id": ctx.global_request_id if ctx else None,
        "payload": payload,
    }
