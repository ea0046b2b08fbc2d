"""The fake hypervisor's SPICE server answers a client's SpiceLinkMess with a SpiceLinkReply as
spice-server does (protocol 2.2), refuses other versions and bad messages, and goes with the
guest's display."""

from __future__ import annotations

import asyncio
import struct

import pytest

from nefos.host.virt.fake_console import SPICE_COMMON_CAPS, SPICE_TICKET_PUBKEY_BYTES, SpiceServer


@pytest.fixture
async def server():
    spice = SpiceServer("instance-0000002a")
    await spice.start("127.0.0.1")
    yield spice
    spice.close()


def _link_mess(major: int = 2, magic: bytes = b"REDQ", size: int = 26) -> bytes:
    # connection id 0, the main channel (1) id 0, one common and one channel caps word at offset 18
    return struct.pack("<4sIIIIBBIIIII", magic, major, 2, size, 0, 1, 0, 1, 1, 18, 11, 9)


async def _link(server, message: bytes) -> tuple[bytes, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(message)
    try:
        header = await asyncio.wait_for(reader.read(16), 10)
        rest = await asyncio.wait_for(reader.read(), 10)  # then the server closes
    except ConnectionResetError:  # closed with the client's bytes unread: a reset, not a reply
        return b"", b""
    finally:
        writer.close()
    return header, rest


async def test_link_reply(server):
    header, body = await _link(server, _link_mess())
    magic, major, minor, size = struct.unpack("<4sIII", header)
    assert (magic, major, minor, size) == (b"REDQ", 2, 2, len(body))
    error, = struct.unpack_from("<I", body)
    common, channel, offset = struct.unpack_from("<III", body, 4 + SPICE_TICKET_PUBKEY_BYTES)
    assert (error, common, channel) == (0, 1, 0)
    assert struct.unpack_from("<I", body, offset) == (SPICE_COMMON_CAPS,)


async def test_other_versions_and_bad_messages(server):
    header, body = await _link(server, _link_mess(major=1))
    assert struct.unpack("<4sIII", header)[:3] == (b"REDQ", 2, 2)
    assert struct.unpack_from("<I", body) == (6,)  # SPICE_LINK_ERR_VERSION_MISMATCH
    assert await _link(server, _link_mess(magic=b"RFB ")) == (b"", b"")  # closed without a word
    assert await _link(server, _link_mess(size=1 << 20)) == (b"", b"")


async def test_the_display_going(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    server.close()
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", server.port)
