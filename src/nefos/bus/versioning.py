"""Versioned RPC interfaces (oslo.messaging's ``Target`` versions, as Nova's RPC APIs use them).

Each served topic has one declared ``RPCInterface``: its current version ("major.minor"), each
method with the version it was added in, and each argument added after its method with the version
it was added in. Every message carries the version its sender chose; a server runs a message
only when

* the method is declared (an undeclared method is refused with ``NoSuchMethod``, never run), and
* the message's major version is the interface's and its minor is not newer than the server's
  (else ``UnsupportedVersion``), nor older than the method (a method added in 1.3 sent as 1.1).

A message without a version is version 1.0 (what every message of a sender from before
versioning is, Nova's behaviour for the base version of an interface).

A client (``RPCClient``) may be pinned to an older version (``[upgrade_levels]``, see
``VersionCaps``): it then sends the older form of a method, leaving out the arguments added after
the pin, and refuses to send a method the pinned servers do not have. ``can_send_version``
lets a client method adapt what it sends by hand, as Nova's do.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from nefos import exceptions, metrics

LOG = logging.getLogger(__name__)

BASE_VERSION = "1.0"
AUTO = "auto"


class UnsupportedVersion(exceptions.Error):
    """oslo.messaging's: the server does not serve the version a message asked for."""
    code = 500
    message = "Endpoint does not support RPC version %(version)s. Attempted method: %(method)s"


class NoSuchMethod(exceptions.Error):
    """oslo.messaging's: the method is not part of the served interface; nothing was run."""
    code = 500
    message = "Endpoint does not support RPC method %(method)s"


def parse(version: str) -> tuple[int, int]:
    """``"1.10"`` -> ``(1, 10)``; ValueError for anything else."""
    major, _, minor = str(version).partition(".")
    if not major.isdigit() or not minor.isdigit():
        raise ValueError(f"{version!r} is not an RPC version (major.minor)")
    return int(major), int(minor)


@dataclass(frozen=True, eq=False)
class RPCInterface:
    """One topic's declared interface. ``methods``: method -> the version it was added in;
    ``args``: method -> {argument -> the version it was added in} for arguments added later than
    their method (a pinned client leaves them out). ``binary``: the services rows whose versions
    the ``auto`` pin reads (None: the servers keep no services rows). ``payloads``: each typed
    payload (``nefos.bus.payloads``) the interface carries, by name -> {the interface version from
    which on it carries a payload version -> that payload version}; ``typed_args``: the arguments,
    by name in every method, that are a payload (its class): a client sends them as it, a server
    receives them as it."""

    topic: str
    version: str
    methods: dict[str, str]
    args: dict[str, dict[str, str]] = field(default_factory=dict)
    binary: str | None = None
    payloads: dict[str, dict[str, str]] = field(default_factory=dict)
    typed_args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        current = parse(self.version)
        for method, added in self.methods.items():
            if not (parse(added)[0] == current[0] and parse(added) <= current):
                raise ValueError(f"{self.topic}.{method}: added in {added}, after {self.version}")
        for method, added_args in self.args.items():
            if method not in self.methods:
                raise ValueError(f"{self.topic}: arguments declared for undeclared method {method}")
            for arg, added in added_args.items():
                if not parse(self.methods[method]) < parse(added) <= current:
                    raise ValueError(f"{self.topic}.{method}({arg}): added in {added}, outside "
                                     f"({self.methods[method]}, {self.version}]")
        for name, carried in self.payloads.items():
            for since in carried:
                if not (parse(since)[0] == current[0] and parse(since) <= current):
                    raise ValueError(f"{self.topic}: {name} carried from {since}, after {self.version}")
        for arg, payload in self.typed_args.items():
            if payload.NAME not in self.payloads:
                raise ValueError(f"{self.topic}: argument {arg} is a {payload.NAME}, a payload it does not carry")

    def typed(self, args: dict) -> dict:
        """``args`` with each typed argument as its payload (a client's: refused with
        ``PayloadFieldError`` when it holds what the payload does not declare)."""
        if not self.typed_args:
            return args
        return {name: (self.typed_args[name](value) if name in self.typed_args and isinstance(value, dict)
                       and not hasattr(value, "to_primitive") else value)
                for name, value in args.items()}

    def received(self, args: dict) -> dict:
        """A message's ``args`` with each typed argument read as its payload (a server's)."""
        if not self.typed_args:
            return args
        return {name: (self.typed_args[name].from_primitive(value) if name in self.typed_args else value)
                for name, value in args.items()}

    def payload_version(self, name: str, version: str | None) -> str:
        """The version of payload ``name`` a message of this interface sent as ``version`` carries
        (TypeError when the interface does not carry it then: a payload travels only where declared)."""
        carried = self.payloads.get(name, {})
        sent = parse(version or BASE_VERSION)
        eligible = [since for since in carried if parse(since) <= sent]
        if not eligible:
            raise TypeError(f"{self.topic} {version or BASE_VERSION} carries no {name} payload")
        return carried[max(eligible, key=parse)]

    def check(self, method: str, version: str | None) -> None:
        """Raise unless a server of this interface may run ``method`` sent as ``version``."""
        if method not in self.methods:
            raise NoSuchMethod(method=method)
        try:
            sent = parse(version or BASE_VERSION)
        except ValueError:
            raise UnsupportedVersion(version=version, method=method) from None
        served = parse(self.version)
        if sent[0] != served[0] or sent > served or sent < parse(self.methods[method]):
            raise UnsupportedVersion(version=version, method=method)

    def check_endpoint(self, endpoint: Any) -> None:
        """Every declared method is a coroutine of ``endpoint`` (checked when it is served)."""
        missing = [m for m in self.methods
                   if not asyncio.iscoroutinefunction(getattr(endpoint, m, None))]
        if missing:
            raise TypeError(f"{type(endpoint).__name__} serves {self.topic} {self.version} but has "
                            f"no coroutine {', '.join(sorted(missing))}")


def primitive(value: Any, interface: RPCInterface, version: str | None) -> Any:
    """``value`` (a method's arguments or answer) with each typed payload in it as its primitive, in
    the payload version ``interface`` sent as ``version`` carries."""
    if not interface.payloads:
        return value
    return _primitive(value, interface, version)


def _primitive(value: Any, interface: RPCInterface, version: str | None) -> Any:
    to_primitive = getattr(value, "to_primitive", None)
    if to_primitive is not None:
        return to_primitive(interface.payload_version(value.NAME, version))
    if isinstance(value, dict):
        return {key: _primitive(item, interface, version) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_primitive(item, interface, version) for item in value]
    return value


def interface_of(endpoint: Any) -> RPCInterface | None:
    return getattr(endpoint, "rpc_interface", None)


def check_message(endpoint: Any, message: dict) -> None:
    """Refuse ``message`` unless ``endpoint``'s declared interface serves it (``dispatch``)."""
    interface = interface_of(endpoint)
    method = message.get("method")
    if interface is None or not isinstance(method, str):
        raise NoSuchMethod(method=method)
    interface.check(method, message.get("version"))


class VersionCaps:
    """The ``[upgrade_levels]`` pins of one process: topic -> a version, a release name
    (``RELEASES``) or ``auto`` (the lowest version the running services of the topic's binary
    reported in their services rows; no pin while none runs). An ``auto`` pin found is kept for
    the life of the process, as Nova's is: restart the services once every host is upgraded to
    lift it (or remove the pin)."""

    def __init__(self, levels: dict[str, str] | None = None, *, db=None, service_down_time: float = 60.0,
                 releases: dict[str, dict[str, str]] | None = None):
        self.levels = dict(levels or {})
        self.db = db
        self.service_down_time = service_down_time
        self.releases = releases or {}
        self._auto: dict[str, str] = {}

    async def cap(self, interface: RPCInterface) -> str | None:
        level = (self.levels.get(interface.topic) or "").strip()
        if not level:
            return None
        if level == AUTO:
            return await self._auto_cap(interface)
        if level in self.releases:
            return self.releases[level].get(interface.topic, BASE_VERSION)
        parse(level)
        return level

    async def _auto_cap(self, interface: RPCInterface) -> str | None:
        if interface.topic in self._auto:
            return self._auto[interface.topic]
        if self.db is None or interface.binary is None:
            return None
        found = await minimum_service_version(self.db, interface.binary, self.service_down_time)
        if found is None:
            return None
        LOG.info("%s RPC pinned to %s by [upgrade_levels] %s = auto (the oldest running %s)",
                 interface.topic, found, interface.topic, interface.binary)
        self._auto[interface.topic] = found
        return found


NO_PINS = VersionCaps()


async def minimum_service_version(db, binary: str, service_down_time: float) -> str | None:
    """The lowest RPC version among the running (heartbeat within ``service_down_time``) services
    rows of ``binary``; a row without a version is a service from before versioning: 1.0."""
    import datetime as dt

    from sqlalchemy import select

    from nefos.db.models import Service, utcnow
    since = utcnow() - dt.timedelta(seconds=service_down_time)
    async with db.reader() as s:
        rows = (await s.execute(select(Service.version).where(
            Service.binary == binary, Service.deleted == 0, Service.last_seen_up >= since))).all()
    if not rows:
        return None
    return min((version or BASE_VERSION for (version,) in rows), key=parse)


class RPCClient:
    """Sends the methods of one ``RPCInterface`` over ``bus``, stamped with a version, within the
    bus's pin for the topic (``bus.version_caps``)."""

    def __init__(self, bus, interface: RPCInterface):
        self.bus = bus
        self.interface = interface

    async def version_cap(self) -> str | None:
        return await getattr(self.bus, "version_caps", NO_PINS).cap(self.interface)

    async def can_send_version(self, version: str) -> bool:
        cap = await self.version_cap()
        return cap is None or parse(version) <= parse(cap)

    async def _prepare(self, method: str, kwargs: dict) -> tuple[str, dict]:
        """The version to send ``method`` as and the arguments to send, within the pin."""
        interface = self.interface
        if method not in interface.methods:
            raise NoSuchMethod(method=method)
        cap = await self.version_cap()
        added_args = interface.args.get(method, {})
        if cap is None:
            version = max([interface.methods[method], *(added_args[a] for a in kwargs if a in added_args)],
                          key=parse)
            return version, primitive(interface.typed(kwargs), interface, version)
        limit = parse(cap)
        if parse(interface.methods[method]) > limit:
            raise UnsupportedVersion(version=cap, method=method)
        sent, dropped = {}, []
        version = interface.methods[method]
        for name, value in kwargs.items():
            added = added_args.get(name)
            if added is not None and parse(added) > limit:
                dropped.append(name)
                continue
            sent[name] = value
            if added is not None and parse(added) > parse(version):
                version = added
        if dropped:
            LOG.debug("%s.%s sent as %s (pinned): %s left out", interface.topic, method, version,
                      ", ".join(dropped))
        return version, primitive(interface.typed(sent), interface, version)

    async def call(self, ctx, method: str, *, host: str | None = None, timeout: float | None = None,
                   **kwargs) -> Any:
        version, kwargs = await self._prepare(method, kwargs)
        metrics.BUS_MESSAGES.labels("sent", self.interface.topic, "call").inc()
        return await self.bus.call(ctx, self.interface.topic, method, host=host, timeout=timeout,
                                   version=version, **kwargs)

    async def cast(self, ctx, method: str, *, host: str | None = None, **kwargs) -> None:
        version, kwargs = await self._prepare(method, kwargs)
        metrics.BUS_MESSAGES.labels("sent", self.interface.topic, "cast").inc()
        await self.bus.cast(ctx, self.interface.topic, method, host=host, version=version, **kwargs)

    async def fanout(self, ctx, method: str, **kwargs) -> None:
        version, kwargs = await self._prepare(method, kwargs)
        metrics.BUS_MESSAGES.labels("sent", self.interface.topic, "fanout").inc()
        await self.bus.fanout(ctx, self.interface.topic, method, version=version, **kwargs)

    def sender(self, cast: bool) -> Callable:
        """``cast`` or ``call``: for the RPCs Nova sends either way (a call when the caller must
        see the outcome, e.g. ``live_migrate_instance`` before microversion 2.34)."""
        return self.cast if cast else self.call


def check_notification_payload(payload: Any) -> None:
    """A notification's payload names its version (Nova's versioned notifications:
    ``nova_object.name`` / ``nova_object.version``), so a consumer can tell the forms apart."""
    if not (isinstance(payload, dict) and payload.get("nova_object.name")
            and payload.get("nova_object.version")):
        raise ValueError("a notification payload carries nova_object.name and nova_object.version")
    parse(payload["nova_object.version"])


