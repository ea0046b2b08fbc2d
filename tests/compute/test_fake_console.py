"""The fake hypervisor's VNC server speaks RFB as RFC 6143 says, for each version it offers, and
goes with the guest's display."""

from __future__ import annotations

import asyncio
import struct

import pytest

from nefos.host.virt.fake_console import HEIGHT, WIDTH, RFBServer


@pytest.fixture
async def server():
    rfb = RFBServer("instance-0000002a")
    await rfb.start("127.0.0.1")
    yield rfb
    rfb.close()


async def _open(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    assert await reader.readexactly(12) == b"RFB 003.008\n"
    return reader, writer


async def _server_init(reader, writer) -> bytes:
    writer.write(b"\x01")  # ClientInit: shared
    head = await reader.readexactly(24)
    name_length, = struct.unpack(">I", head[20:24])
    return head + await reader.readexactly(name_length)


@pytest.mark.parametrize("version", [b"RFB 003.008\n", b"RFB 003.007\n", b"RFB 003.003\n"])
async def test_handshake_at_each_version(server, version):
    reader, writer = await _open(server)
    writer.write(version)
    if version == b"RFB 003.003\n":
        assert await reader.readexactly(4) == b"\x00\x00\x00\x01"  # the server chose None
    else:
        assert await reader.readexactly(2) == b"\x01\x01"  # one type offered: None
        writer.write(b"\x01")
        if version == b"RFB 003.008\n":
            assert await reader.readexactly(4) == b"\x00\x00\x00\x00"
    init = await _server_init(reader, writer)
    assert struct.unpack(">HH", init[:4]) == (WIDTH, HEIGHT) and init[24:] == b"instance-0000002a"
    bpp = init[4]
    # 16 bits per pixel from now on, then a whole-screen update: one Raw rectangle of that depth.
    writer.write(b"\x00\x00\x00\x00" + struct.pack(">BBBBHHHBBB3x", 16, 16, 0, 1, 31, 63, 31, 11, 5, 0))
    writer.write(struct.pack(">BxHi", 2, 1, 0))  # SetEncodings: Raw
    writer.write(struct.pack(">BBHHHH", 4, 1, 0, 0, 0, 0)[:8])  # KeyEvent
    writer.write(struct.pack(">BBHH", 5, 0, 1, 1))  # PointerEvent
    writer.write(struct.pack(">B3xI", 6, 2) + b"hi")  # ClientCutText
    writer.write(struct.pack(">BBHHHH", 3, 1, 0, 0, WIDTH, HEIGHT))  # incremental: nothing changed
    writer.write(struct.pack(">BBHHHH", 3, 0, 0, 0, WIDTH, HEIGHT))
    header = await reader.readexactly(16)
    assert header == struct.pack(">BxHHHHHi", 0, 1, 0, 0, WIDTH, HEIGHT, 0) and bpp == 32
    assert await reader.readexactly(WIDTH * HEIGHT * 2) == bytes(WIDTH * HEIGHT * 2)
    writer.close()


async def test_refusals_and_the_display_going(server):
    reader, writer = await _open(server)
    writer.write(b"RFB 004.000\n")  # no such version: the connection is closed
    assert await reader.read() == b""
    reader, writer = await _open(server)
    writer.write(b"RFB 003.008\n")
    await reader.readexactly(2)
    writer.write(b"\x02")  # VNC authentication was not offered: a failed SecurityResult with a reason
    result, length = struct.unpack(">II", await reader.readexactly(8))
    assert result == 1 and (await reader.readexactly(length)) == b"security type not offered"
    assert await reader.read() == b""
    # A client connected when the guest's display goes is disconnected, and nobody else gets in.
    reader, writer = await _open(server)
    server.close()
    assert await reader.read() == b""
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", server.port)
