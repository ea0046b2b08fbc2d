"""The fake hypervisor's graphical consoles: a small VNC server (RFB 3.8, RFC 6143) per guest, and
beside it, when SPICE is enabled, the first step of a SPICE server (the link handshake).

A real hypervisor (QEMU) serves each guest's display over VNC on its compute host; the fake one
serves a blank framebuffer the same way, on ``vnc_server_listen``, so a console URL leads through
the websocket proxy to a real RFB handshake. It speaks protocol versions 3.3, 3.7 and 3.8, offers
the security type None only, sends ServerInit with a small true-colour framebuffer and the guest's
name, and answers non-incremental framebuffer update requests with the whole (black) screen in
the Raw encoding; an incremental request gets no answer, as nothing on the screen ever changes.

The SPICE server (``SpiceServer``, on ``spice_server_listen``, what Nova's ``spice-direct`` console
points at) reads a client's SpiceLinkMess, answers a SpiceLinkReply for protocol 2.2 (error 0, the
capabilities QEMU's server offers on the main channel: auth selection, SPICE auth, mini header)
and closes: the fake guest's display has no channels beyond the handshake. A version other than
2 is answered with SPICE_LINK_ERR_VERSION_MISMATCH, a bad magic or size closes the connection, as
spice-server does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct

LOG = logging.getLogger(__name__)

WIDTH, HEIGHT = 64, 48
SECURITY_NONE = 1
VERSIONS = {b"RFB 003.003\n": (3, 3), b"RFB 003.007\n": (3, 7), b"RFB 003.008\n": (3, 8)}
# 32 bits per pixel, depth 24, little-endian, true colour, 8 bits each of red, green and blue.
PIXEL_FORMAT = struct.pack(">BBBBHHHBBB3x", 32, 24, 0, 1, 255, 255, 255, 16, 8, 0)


SPICE_MAGIC = b"REDQ"
SPICE_VERSION = (2, 2)
SPICE_LINK_ERR_OK = 0
SPICE_LINK_ERR_VERSION_MISMATCH = 6
SPICE_TICKET_PUBKEY_BYTES = 162  # an RSA-1024 key in DER SubjectPublicKeyInfo
SPICE_MAX_LINK_SIZE = 4096  # spice-server refuses larger SpiceLinkMess bodies
# Common capabilities: SPICE_COMMON_CAP_PROTOCOL_AUTH_SELECTION, _AUTH_SPICE, _MINI_HEADER.
SPICE_COMMON_CAPS = (1 << 0) | (1 << 1) | (1 << 3)


class ProtocolError(Exception):
    pass


class _GuestServer:
    """One guest's display server; ``start`` binds a free port (``port``), ``close`` ends it and
    every connection to it (the guest's display went away)."""

    protocol = ""

    def __init__(self, name: str):
        self.name = name.encode("utf-8")[:255]
        self.port: int | None = None
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self, host: str) -> None:
        self._server = await asyncio.start_server(self._serve, host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()

    @property
    def serving(self) -> bool:
        return self._server is not None and self._server.is_serving()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            await self._session(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, ProtocolError) as exc:
            LOG.debug("%s client of %s left: %s", self.protocol, self.name, exc or type(exc).__name__)
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _session(self, reader, writer) -> None:
        raise NotImplementedError


class SpiceServer(_GuestServer):
    """One guest's SPICE server: the link handshake of the main channel."""

    protocol = "SPICE"

    async def _session(self, reader, writer) -> None:
        magic, major, minor, size = struct.unpack("<4sIII", await reader.readexactly(16))
        if magic != SPICE_MAGIC:
            raise ProtocolError("bad magic")
        if not 0 < size <= SPICE_MAX_LINK_SIZE:
            raise ProtocolError(f"link message size {size}")
        await reader.readexactly(size)  # connection id, channel, capabilities: one channel only
        if major != SPICE_VERSION[0]:
            self._reply(writer, SPICE_LINK_ERR_VERSION_MISMATCH, ())
        else:
            self._reply(writer, SPICE_LINK_ERR_OK, (SPICE_COMMON_CAPS,))
        await writer.drain()

    @staticmethod
    def _reply(writer, error: int, common_caps: tuple[int, ...]) -> None:
        # SpiceLinkReply: error, the ticket's public key (none: the fake display has no
        # password), the capability counts and their offset from the body's start, the caps.
        body = (struct.pack("<I", error) + bytes(SPICE_TICKET_PUBKEY_BYTES)
                + struct.pack("<III", len(common_caps), 0, 4 + SPICE_TICKET_PUBKEY_BYTES + 12)
                + b"".join(struct.pack("<I", cap) for cap in common_caps))
        writer.write(struct.pack("<4sIII", SPICE_MAGIC, *SPICE_VERSION, len(body)) + body)


class RFBServer(_GuestServer):
    """One guest's VNC server."""

    protocol = "VNC"

    async def _session(self, reader, writer) -> None:
        writer.write(b"RFB 003.008\n")
        await writer.drain()
        version = VERSIONS.get(await reader.readexactly(12))
        if version is None:
            raise ProtocolError("unsupported protocol version")
        if version == (3, 3):
            writer.write(struct.pack(">I", SECURITY_NONE))  # 3.3: the server picks the type
        else:
            writer.write(bytes((1, SECURITY_NONE)))
            await writer.drain()
            chosen = (await reader.readexactly(1))[0]
            if chosen != SECURITY_NONE:
                if version == (3, 8):
                    reason = b"security type not offered"
                    writer.write(struct.pack(">II", 1, len(reason)) + reason)
                    await writer.drain()
                raise ProtocolError(f"client chose security type {chosen}")
            if version == (3, 8):  # 3.7 sends no SecurityResult for the type None
                writer.write(struct.pack(">I", 0))
        await writer.drain()
        await reader.readexactly(1)  # ClientInit: the shared flag (every client shares the screen)
        writer.write(struct.pack(">HH", WIDTH, HEIGHT) + PIXEL_FORMAT
                     + struct.pack(">I", len(self.name)) + self.name)
        await writer.drain()
        await self._messages(reader, writer)

    async def _messages(self, reader, writer) -> None:
        bytes_per_pixel = 4
        while True:
            kind = (await reader.readexactly(1))[0]
            if kind == 0:  # SetPixelFormat
                fmt = await reader.readexactly(19)
                if fmt[3] not in (8, 16, 32):
                    raise ProtocolError(f"bits per pixel {fmt[3]}")
                bytes_per_pixel = fmt[3] // 8
            elif kind == 2:  # SetEncodings: Raw is always available
                count, = struct.unpack(">xH", await reader.readexactly(3))
                await reader.readexactly(4 * count)
            elif kind == 3:  # FramebufferUpdateRequest
                incremental, x, y, w, h = struct.unpack(">BHHHH", await reader.readexactly(9))
                if incremental:
                    continue
                x, y = min(x, WIDTH), min(y, HEIGHT)
                w, h = min(w, WIDTH - x), min(h, HEIGHT - y)
                writer.write(struct.pack(">BxHHHHHi", 0, 1, x, y, w, h, 0) + bytes(w * h * bytes_per_pixel))
                await writer.drain()
            elif kind == 4:  # KeyEvent
                await reader.readexactly(7)
            elif kind == 5:  # PointerEvent
                await reader.readexactly(5)
            elif kind == 6:  # ClientCutText
                length, = struct.unpack(">3xI", await reader.readexactly(7))
                if length > 1 << 20:
                    raise ProtocolError("cut text too long")
                await reader.readexactly(length)
            else:
                raise ProtocolError(f"unknown client message {kind}")
