"""A real guest's console in a browser's place: the console URL leads through the noVNC proxy to
QEMU's VNC display of the guest, where an RFB handshake completes; once the guest is stopped its
display is gone and the token with it."""

from __future__ import annotations

import struct
from urllib.parse import parse_qs, urlparse

import pytest

from tests.libvirt.conftest import make_network

websockets = pytest.importorskip("websockets")
from websockets.asyncio.client import connect  # noqa: E402
from websockets.exceptions import InvalidStatus  # noqa: E402

pytestmark = pytest.mark.libvirt


def _websocket_url(console_url: str) -> str:
    parts = urlparse(console_url)
    return f"ws://{parts.netloc}/{parse_qs(parts.query)['path'][0]}"


async def _vnc_url(cloud, sid: str, expect: int = 200) -> str:
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", json={"os-getVNCConsole": {"type": "novnc"}})
    assert r.status_code == expect, r.text
    return r.json()["console"]["url"] if expect == 200 else ""


async def test_the_console_of_a_real_guest(lvcloud):
    cloud = lvcloud
    net = await make_network(cloud)
    sid = (await cloud.boot(name="vnc-1", flavor="42", networks=[{"uuid": net["id"]}]))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE", timeout=120)
    url = await _vnc_url(cloud, sid)
    async with connect(_websocket_url(url), subprotocols=["binary"], open_timeout=20) as ws:
        data = b""
        while len(data) < 12:
            data += await ws.recv()
        assert data[:4] == b"RFB " and data[4:11] in (b"003.008", b"003.007", b"003.003")
        await ws.send(b"RFB 003.008\n")
        types = await ws.recv()
        assert 1 in types[1:1 + types[0]], types  # QEMU without a password: the type None
        await ws.send(b"\x01")
        assert await ws.recv() == b"\x00\x00\x00\x00"
        await ws.send(b"\x01")
        init = await ws.recv()
        width, height = struct.unpack(">HH", init[:4])
        name_length, = struct.unpack(">I", init[20:24])
        assert width > 0 and height > 0 and len(init) == 24 + name_length
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", json={"os-stop": None})
    assert r.status_code == 202, r.text
    await cloud.wait_status(sid, "SHUTOFF", timeout=60)
    with pytest.raises(InvalidStatus):  # no QEMU process, no display: the token leads nowhere
        async with connect(_websocket_url(url), open_timeout=20):
            pass
    await _vnc_url(cloud, sid, expect=409)
