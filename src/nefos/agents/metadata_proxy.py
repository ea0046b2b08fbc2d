"""The isolated-metadata proxy (Neutron's ``enable_isolated_metadata``): guests reach the metadata
service at ``169.254.169.254`` on networks without a router.

The DHCP agent runs one proxy per network it serves, in its own process: the network's DHCP
namespace (``qdhcp-<network>``) holds ``169.254.169.254/32`` on the DHCP port's interface, and a
socket bound to ``169.254.169.254:80`` inside that namespace. The socket is made by a short-lived
thread of its own that enters the namespace (``setns``), binds and listens, and leaves (a socket
keeps the namespace it was created in); asyncio then serves on it from the agent's event loop. The
agent's other sockets (the bus, the database, the forward to the metadata service) stay in the
host's namespace.

A request is answered for the instance whose port on that network has the request's source
address as a fixed IP (asked of the network service, as Neutron's proxy asks its server): the
port's ``device_id`` is the instance, its project the tenant. The proxy forwards the request
(``GET`` or ``HEAD``, its path and query; ``POST`` with its body too, for the guest's encrypted
password, as Neutron's proxy forwards it) to the metadata service (``metadata_host``,
``metadata_listen_port``) with ``X-Instance-ID``, ``X-Tenant-ID``, ``X-Instance-ID-Signature``
(``nefos.clients.metadata.sign``) and ``X-Forwarded-For``. Whatever identification headers
the guest sent are dropped, never forwarded. An address that is no instance's port is 404; a
request that is not HTTP (or too large) is 400 (431 / 413), another method 405; an unreachable
service 502, a slow one 504. One request per connection.

One guest cannot delay another's metadata (``Limits``, counted by ``nefos.admission`` as every API
listener's connections are). A connection is admitted only while its source address holds fewer than ``metadata_proxy_maxconn_per_source`` (else 429 at once) and the
network fewer than ``metadata_proxy_maxconn`` (else 503 at once: haproxy's ``maxconn``); its
request head must arrive whole within ``metadata_proxy_http_request_timeout`` (haproxy's ``timeout
http-request``; 408), however it trickles in, and costs nothing but a socket meanwhile. Only a
complete request takes a slot toward the network service and the metadata service: at most
``UPSTREAM_SLOTS`` per network, ``UPSTREAM_SLOTS_PER_SOURCE`` of them for one address, so the
others' requests always find one free.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ipaddress
import logging
import os
import re
import socket
import threading
from dataclasses import dataclass
from typing import Awaitable, Callable

import httpx

from nefos import admission
from nefos.config import Config
from nefos.clients import metadata as identification
from nefos.http_client import verified_tls

LOG = logging.getLogger(__name__)

METADATA_ADDRESS = "169.254.169.254"
METADATA_CIDR = f"{METADATA_ADDRESS}/32"
METADATA_PORT = 80

MAX_HEAD_BYTES = 8192  # request line and headers
MAX_HEADERS = 64
MAX_BODY_BYTES = 4096  # a POST's (a password: at most 1020 bytes); a GET/HEAD's is read and dropped
MAX_RESPONSE_BYTES = 4 * 1024 * 1024  # what the service answers (user data is at most 64 KiB)
UPSTREAM_TIMEOUT = 15.0  # seconds the service has to answer (identification included)
# Requests of a network forwarded at once (the instance's lookup and the service's answer); more
# wait for a slot, up to UPSTREAM_TIMEOUT (then 503), each address for one of its own first.
UPSTREAM_SLOTS = 64
UPSTREAM_SLOTS_PER_SOURCE = 4
CLONE_NEWNET = 0x40000000

# Headers a guest may not send on (identification is the proxy's alone), and hop-by-hop ones.
_DROPPED = ("x-instance-id", "x-tenant-id", "x-forwarded-for", "x-neutron-", "x-nefos-")
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer",
               "transfer-encoding", "upgrade", "host", "content-length", "expect"}
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(rb"/[A-Za-z0-9\-._~:/?\[\]@!$&'()*+,;=%]*")
_FIELD_VALUE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")
_REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 413: "Content Too Large", 429: "Too Many Requests",
            431: "Request Header Fields Too Large", 502: "Bad Gateway", 503: "Service Unavailable",
            504: "Gateway Timeout"}

Lookup = Callable[[str, str], Awaitable["tuple[str, str] | None"]]


class BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


# The listening socket, inside a namespace ---------------------------------------------------------
def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def _listen_in(netns: str, address: str, port: int) -> socket.socket:
    """In the calling thread: enter ``/run/netns/<netns>``, make the listening socket, come back."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(f"/run/netns/{netns}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(target)
            try:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind((address, port))
                    sock.listen(128)
                    sock.setblocking(False)
                except BaseException:
                    sock.close()
                    raise
            finally:
                _setns(own)  # if this failed the thread still ends here, taking the namespace with it
        finally:
            os.close(target)
    finally:
        os.close(own)
    return sock


async def listen_in_namespace(netns: str, address: str = METADATA_ADDRESS, port: int = METADATA_PORT) -> socket.socket:
    """A listening socket bound to ``address:port`` in network namespace ``netns``, made by a thread
    of its own (``setns`` changes the calling thread's namespace: never a pool's or the loop's)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    def run() -> None:
        try:
            result = _listen_in(netns, address, port)
        except BaseException as exc:  # handed to the loop
            loop.call_soon_threadsafe(lambda: done.done() or done.set_exception(exc))
            return

        def hand_over() -> None:
            if done.done():  # the caller went away: nobody will close it
                result.close()
            else:
                done.set_result(result)
        loop.call_soon_threadsafe(hand_over)

    threading.Thread(target=run, name=f"netns-listen-{netns}", daemon=True).start()
    return await done


# Who asks -----------------------------------------------------------------------------------------
def port_lookup(rt) -> Lookup:
    """(instance id, project) of the instance port on ``network_id`` with fixed IP ``ip``, through
    the network service (``get_instance_port`` on ``q-metadata``); None when no instance has that
    address there."""
    from nefos.clients.network_agents import MetadataPluginAPI
    plugin = MetadataPluginAPI(rt.bus, rt.cfg.host)

    async def lookup(network_id: str, ip: str) -> tuple[str, str] | None:
        found = {tuple(p) for p in await plugin.get_instance_port(network_id, ip)}
        if len(found) != 1:
            return None  # none, or (never expected) several instances at one address
        ((instance_id, project_id),) = found
        return (instance_id, project_id) if project_id else None
    return lookup


# HTTP ---------------------------------------------------------------------------------------------
@dataclass
class Request:
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes = b""


async def read_request(reader: asyncio.StreamReader) -> Request:
    """One request's head and (small) body; raises ``BadRequest``."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise BadRequest(431, "request head too large")
    except asyncio.IncompleteReadError:
        raise BadRequest(400, "incomplete request")
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or parts[2] not in (b"HTTP/1.0", b"HTTP/1.1"):
        raise BadRequest(400, "malformed request line")
    method, target = parts[0].decode("ascii"), parts[1]
    if not _TARGET.fullmatch(target):
        raise BadRequest(400, "malformed request target")
    if len(lines) - 1 > MAX_HEADERS:
        raise BadRequest(431, "too many headers")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            raise BadRequest(400, "malformed header")
        value = value.strip(b" \t")
        if not _FIELD_VALUE.fullmatch(value):
            raise BadRequest(400, "malformed header value")
        headers.append((name.decode("ascii"), value.decode("latin-1")))
    lowered = {n.lower() for n, _ in headers}
    if "transfer-encoding" in lowered:
        raise BadRequest(400, "chunked requests are not accepted")
    lengths = {v for n, v in headers if n.lower() == "content-length"}
    body = b""
    if lengths:
        if len(lengths) != 1 or not next(iter(lengths)).isdigit():
            raise BadRequest(400, "malformed Content-Length")
        length = int(next(iter(lengths)))
        if length > MAX_BODY_BYTES:
            raise BadRequest(413, "request body too large")
        try:
            body = await reader.readexactly(length)  # forwarded with a POST only
        except asyncio.IncompleteReadError:
            raise BadRequest(400, "incomplete request body")
    return Request(method, target.decode("ascii"), headers, body)


def _response(status: int, body: bytes = b"", content_type: str | None = "text/plain; charset=utf-8",
              head_only: bool = False, extra: list[tuple[str, str]] = ()) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}"]
    if content_type:
        lines.append(f"Content-Type: {content_type}")
    lines += [f"{n}: {v}" for n, v in extra]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + (b"" if head_only else body)


def _error(status: int, message: str, head_only: bool = False) -> bytes:
    return _response(status, (message + "\n").encode(), head_only=head_only)


@dataclass(frozen=True)
class Limits:
    """What one network's proxy admits (the options of the same names, ``metadata_proxy_*``)."""
    http_request_timeout: float  # seconds for the whole request head (and small body); as long to read the answer
    maxconn: int  # connections open at once on the network
    maxconn_per_source: int  # of them, from one source address

    @classmethod
    def of(cls, cfg) -> "Limits":
        return cls(cfg.metadata_proxy_http_request_timeout, cfg.metadata_proxy_maxconn,
                   cfg.metadata_proxy_maxconn_per_source)


SHIPPED_LIMITS = Limits.of(Config())
# Once answered (or refused), a client may still be sending: its bytes are read and dropped for up
# to LINGER_TIMEOUT before the close (closing on unread bytes resets the connection, and the client
# may lose the answer), by at most ``admission.MAX_LINGERING`` connections of a network at once
# (more close at once).
LINGER_TIMEOUT = 1.0
# The proxy's own words for the refusals ``admission.ConnectionCounts.admit`` decides.
_REFUSALS = {429: "too many connections from this address", 503: "too many connections on this network"}


class _SlotsBusy(Exception):
    """No slot toward the services came free within UPSTREAM_TIMEOUT."""


class NetworkProxy:
    """The proxy of one network: serves a listening socket, forwards to the metadata service."""

    def __init__(self, network_id: str, upstream: httpx.AsyncClient, secret: str, lookup: Lookup,
                 limits: Limits = SHIPPED_LIMITS):
        self.network_id = network_id
        self.upstream = upstream
        self.secret = secret
        self.lookup = lookup
        self.limits = limits
        self.server: asyncio.base_events.Server | None = None
        self._slots = asyncio.Semaphore(UPSTREAM_SLOTS)
        self._connections = admission.ConnectionCounts(limits.maxconn, limits.maxconn_per_source, LOG,
                                                       f"metadata proxy of network {network_id}: ")
        self._source_slots: dict[str, asyncio.Semaphore] = {}  # an address's, while it has connections

    def open_connections(self, source: str | None = None) -> int:
        """Admitted connections still open: the network's, or one source address's."""
        return self._connections.open_total if source is None else self._connections.open[source]

    async def serve(self, sock: socket.socket) -> None:
        self.server = await asyncio.start_server(self._connection, sock=sock, limit=MAX_HEAD_BYTES)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            # (connections in progress end on their own timeouts)
            self.server = None

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        source = peer[0] if peer else ""
        refusal = self._admit(source)
        if refusal is not None:
            writer.write(refusal)  # a few bytes into a new socket's buffer: no waiting
            await self._close(reader, writer)
            return
        try:
            answer = await self._answer(reader, source)
            writer.write(answer)
            async with asyncio.timeout(self.limits.http_request_timeout):
                await writer.drain()
        except (ConnectionError, TimeoutError):
            pass
        except Exception:  # never the client's 500: it gets nothing, the log gets why
            LOG.exception("metadata proxy of network %s: request failed", self.network_id)
        finally:
            self._leave(source)
            await self._close(reader, writer)

    def _admit(self, source: str) -> bytes | None:
        """None when a connection from ``source`` may be served, else the answer refusing it."""
        refusal = self._connections.admit(source)
        if refusal is not None:
            return _error(refusal.code, _REFUSALS[refusal.code])
        if source not in self._source_slots:
            self._source_slots[source] = asyncio.Semaphore(UPSTREAM_SLOTS_PER_SOURCE)
        return None

    def _leave(self, source: str) -> None:
        self._connections.leave(source)
        if source not in self._connections.open:
            del self._source_slots[source]

    async def _close(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Close after the answer: at once for a client that does not read it, else lingering."""
        if writer.transport.get_write_buffer_size():
            writer.transport.abort()  # a client that does not read its answer keeps nothing open
            return
        with contextlib.suppress(Exception):
            writer.write_eof()
            if self._connections.start_lingering():
                try:
                    async with asyncio.timeout(LINGER_TIMEOUT):
                        while await reader.read(MAX_HEAD_BYTES):
                            pass
                finally:
                    self._connections.end_lingering()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()

    @contextlib.asynccontextmanager
    async def _upstream_slot(self, source: str):
        """One of the network's slots toward the services, after one of ``source``'s own."""
        own = self._source_slots[source]
        try:
            async with asyncio.timeout(UPSTREAM_TIMEOUT):
                await own.acquire()
                try:
                    await self._slots.acquire()
                except BaseException:
                    own.release()
                    raise
        except TimeoutError:
            raise _SlotsBusy from None
        try:
            yield
        finally:
            self._slots.release()
            own.release()

    async def _answer(self, reader: asyncio.StreamReader, source: str) -> bytes:
        try:
            async with asyncio.timeout(self.limits.http_request_timeout):
                request = await read_request(reader)  # before any slot: a slow client holds none
        except BadRequest as exc:
            return _error(exc.status, str(exc))
        except TimeoutError:
            return _error(408, "request timeout")
        head_only = request.method == "HEAD"
        if request.method not in ("GET", "HEAD", "POST"):
            return _response(405, b"only GET, HEAD and POST\n", extra=[("Allow", "GET, HEAD, POST")])
        try:
            ipaddress.IPv4Address(source)
        except ValueError:
            return _error(404, "Not Found", head_only)
        try:
            async with self._upstream_slot(source):
                return await self._identify_and_forward(request, source)
        except _SlotsBusy:
            LOG.warning("metadata proxy of network %s: no slot toward the metadata service for %s within %.0f s",
                        self.network_id, source, UPSTREAM_TIMEOUT)
            return _error(503, "too many requests in progress on this network", head_only)

    async def _identify_and_forward(self, request: Request, source: str) -> bytes:
        head_only = request.method == "HEAD"
        try:
            found = await asyncio.wait_for(self.lookup(self.network_id, source), UPSTREAM_TIMEOUT)
        except asyncio.TimeoutError:
            return _error(504, "the network service did not answer in time", head_only)
        except Exception as exc:
            LOG.warning("metadata proxy of network %s: cannot look up %s: %s", self.network_id, source, exc)
            return _error(502, "cannot look up the instance", head_only)
        if found is None:
            LOG.info("metadata proxy of network %s: %s is no instance's address", self.network_id, source)
            return _error(404, "Not Found", head_only)
        instance_id, project_id = found
        return await self._forward(request, source, instance_id, project_id)

    async def _forward(self, request: Request, source: str, instance_id: str, project_id: str) -> bytes:
        head_only = request.method == "HEAD"
        headers = [(n, v) for n, v in request.headers
                   if not n.lower().startswith(_DROPPED) and n.lower() not in _HOP_BY_HOP]
        headers += [("X-Forwarded-For", source), ("X-Instance-ID", instance_id), ("X-Tenant-ID", project_id),
                    ("X-Instance-ID-Signature", identification.sign(self.secret, instance_id))]
        url = self.upstream.base_url.copy_with(raw_path=request.target.encode("ascii"))
        try:
            content = request.body if request.method == "POST" else None
            async with self.upstream.stream(request.method, url, headers=headers, content=content) as r:
                body = bytearray()
                async for chunk in r.aiter_raw():
                    body += chunk
                    if len(body) > MAX_RESPONSE_BYTES:
                        return _error(502, "the metadata service's answer is too large", head_only)
        except httpx.TimeoutException:
            return _error(504, "the metadata service did not answer in time", head_only)
        except httpx.HTTPError as exc:
            LOG.warning("metadata proxy of network %s: metadata service unreachable: %s", self.network_id, exc)
            return _error(502, "the metadata service is unreachable", head_only)
        extra = [(n, v) for n, v in r.headers.items() if n.lower() in ("content-encoding",)]
        return _response(r.status_code, bytes(body), r.headers.get("content-type"), head_only, extra)


def upstream_url(cfg) -> str:
    """The metadata service as the proxy reaches it: ``metadata_host``, else the address it listens
    on (loopback when that is every address)."""
    host = cfg.metadata_host or cfg.metadata_listen or cfg.bind_host
    if not host or host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{cfg.metadata_listen_port}"


class MetadataProxies:
    """The DHCP agent's proxies, one per network. The shared secret is read when they are made (at
    the agent's start): a file that cannot serve is refused there (``ConfigError``)."""

    def __init__(self, rt, lookup: Lookup | None = None, upstream: httpx.AsyncClient | None = None):
        self.rt = rt
        self.lookup = lookup or port_lookup(rt)
        self._upstream = upstream
        self.secret = identification.shared_secret(rt.cfg)
        self.proxies: dict[str, NetworkProxy] = {}

    def _client(self) -> httpx.AsyncClient:
        if self._upstream is None:
            self._upstream = httpx.AsyncClient(base_url=upstream_url(self.rt.cfg), timeout=UPSTREAM_TIMEOUT,
                                               trust_env=False, follow_redirects=False, verify=verified_tls())
        return self._upstream

    async def ensure(self, network_id: str, netns: str) -> None:
        """Network ``network_id``'s proxy, listening in ``netns`` (whose interface already holds
        ``169.254.169.254``)."""
        if network_id in self.proxies:
            return
        proxy = NetworkProxy(network_id, self._client(), self.secret, self.lookup, Limits.of(self.rt.cfg))
        sock = await listen_in_namespace(netns)
        try:
            await proxy.serve(sock)
        except BaseException:
            sock.close()
            raise
        self.proxies[network_id] = proxy
        LOG.info("metadata proxy for network %s on %s:%d in %s", network_id, METADATA_ADDRESS, METADATA_PORT, netns)

    async def remove(self, network_id: str) -> None:
        proxy = self.proxies.pop(network_id, None)
        if proxy is not None:
            await proxy.close()

    async def close(self) -> None:
        for network_id in list(self.proxies):
            await self.remove(network_id)
        if self._upstream is not None:
            await self._upstream.aclose()
            self._upstream = None
