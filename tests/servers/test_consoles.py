"""Remote consoles end to end: a console URL from the Compute API leads through the noVNC proxy
to the guest's VNC server (the fake hypervisor's), where an RFB handshake completes; tokens that
are unknown, expired or whose console went are refused at the websocket upgrade. A spice-direct
console's token shows an admin where the guest's SPICE server is, and a SPICE link handshake
completes there."""

from __future__ import annotations

import asyncio
import struct
import time
from urllib.parse import parse_qs, urlparse

import httpx
import jsonschema
import pytest
from sqlalchemy import update

from nefos.control.compute.rest import response_schemas
from nefos.db.models import ConsoleAuthToken
from nefos.http_client import verified_tls
from tests.clouds import ADMIN, member, start_cloud, stop_cloud

websockets = pytest.importorskip("websockets")
from websockets.asyncio.client import connect  # noqa: E402
from websockets.exceptions import InvalidStatus  # noqa: E402

OTHER = member(project="b" * 32, user="v" * 32)


def _h(version: str, headers: dict | None = None) -> dict:
    return {**(headers or member()), "OpenStack-API-Version": f"compute {version}"}


async def _server(cloud) -> str:
    net = await cloud.make_network(headers=member())
    sid = (await cloud.boot(networks=[{"uuid": net["id"]}], headers=member()))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE")
    return sid


async def _vnc_url(cloud, sid: str, headers=None) -> str:
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", json={"os-getVNCConsole": {"type": "novnc"}},
                                 headers=headers or member())
    assert r.status_code == 200, r.text
    assert r.json()["console"]["type"] == "novnc"
    return r.json()["console"]["url"]


def _websocket_url(console_url: str, token: str | None = None) -> str:
    """Where noVNC opens its websocket: the console URL's host, the path its ``path`` parameter names."""
    parts = urlparse(console_url)
    path = parse_qs(parts.query)["path"][0]
    if token is not None:
        path = f"?token={token}"
    return f"ws://{parts.netloc}/{path}"


def _token(console_url: str) -> str:
    return parse_qs(urlparse(parse_qs(urlparse(console_url).query)["path"][0]).query)["token"][0]


async def _handshake(ws) -> bytes:
    """An RFB 3.8 client's handshake (RFC 6143 7.1-7.3): the ServerInit message."""
    assert await ws.recv() == b"RFB 003.008\n"
    await ws.send(b"RFB 003.008\n")
    types = await ws.recv()
    assert types[0] >= 1 and 1 in types[1:1 + types[0]]  # the security type None is offered
    await ws.send(bytes((1,)))
    assert await ws.recv() == b"\x00\x00\x00\x00"  # SecurityResult: OK
    await ws.send(bytes((1,)))  # ClientInit: shared
    return await ws.recv()


async def _refused(url: str) -> int:
    with pytest.raises(InvalidStatus) as refused:
        async with connect(url, subprotocols=["binary"], open_timeout=10):
            pass
    return refused.value.response.status_code


async def test_a_console_url_leads_to_the_guests_vnc_server(cloud):
    sid = await _server(cloud)
    url = await _vnc_url(cloud, sid)
    base = f"http://127.0.0.1:{cloud.rt.cfg.novncproxy_port}/vnc_auto.html"
    assert url.startswith(f"{base}?path=%3Ftoken%3D")
    async with httpx.AsyncClient(verify=verified_tls()) as http:  # the page the browser loads first
        page = await http.get(url)
    assert page.status_code == 200 and "noVNC" in page.text and "<script" in page.text

    async with connect(_websocket_url(url), subprotocols=["binary"], open_timeout=10) as ws:
        assert ws.subprotocol == "binary"
        init = await _handshake(ws)
        width, height = struct.unpack(">HH", init[:4])
        name_length, = struct.unpack(">I", init[20:24])
        guest = cloud.driver((await cloud.server(sid))["OS-EXT-SRV-ATTR:host"]).guests[sid]
        assert len(init) == 24 + name_length and init[24:].decode() == guest.name
        bits_per_pixel = init[4]
        # FramebufferUpdateRequest (not incremental) for the whole screen: one Raw rectangle back.
        await ws.send(struct.pack(">BBHHHH", 3, 0, 0, 0, width, height))
        update_ = b""
        expected = 4 + 12 + width * height * bits_per_pixel // 8
        while len(update_) < expected:
            update_ += await ws.recv()
        assert update_[:4] == b"\x00\x00\x00\x01" and len(update_) == expected

    # From 2.6 the same console through os-remote-consoles; its token is shown to an admin at 2.31.
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/remote-consoles", headers=_h("2.6"),
                                 json={"remote_console": {"protocol": "vnc", "type": "novnc"}})
    assert r.status_code == 200, r.text
    jsonschema.validate(r.json(), response_schemas.REMOTE_CONSOLE)  # as documented (past 2.1)
    remote = r.json()["remote_console"]
    assert remote["protocol"] == "vnc" and remote["type"] == "novnc" and remote["url"].startswith(base)
    r = await cloud.compute.get(f"/v2.1/os-console-auth-tokens/{_token(remote['url'])}", headers=_h("2.31", ADMIN))
    assert r.status_code == 200, r.text
    jsonschema.validate(r.json(), response_schemas.CONSOLE_AUTH_TOKEN)
    shown = r.json()["console"]
    assert shown["instance_uuid"] == sid and shown["host"] == "127.0.0.1"
    assert shown["port"] == guest_port(cloud, sid) and shown["internal_access_path"] is None
    async with connect(_websocket_url(remote["url"]), open_timeout=10) as ws:
        assert len(await _handshake(ws)) > 24


def guest_port(cloud, sid: str) -> int:
    for host in cloud.hosts:
        server = cloud.driver(host).consoles.get(sid)
        if server is not None:
            return server.port
    raise AssertionError(f"no VNC server for {sid}")


async def test_unknown_expired_and_stale_tokens_are_refused(cloud):
    sid = await _server(cloud)
    url = await _vnc_url(cloud, sid)
    token = _token(url)
    assert await _refused(_websocket_url(url, token="bad" + token)) == 403
    assert await _refused(_websocket_url(url, token="")) == 403
    # The token is in the cookie noVNC before 1.1 sent it in: as good as in the path.
    proxy = f"ws://127.0.0.1:{cloud.rt.cfg.novncproxy_port}/websockify"
    async with connect(proxy, additional_headers={"Cookie": f"token={token}"}, open_timeout=10) as ws:
        assert await ws.recv() == b"RFB 003.008\n"
    # A browser on another site may not use it (Nova's Origin check).
    with pytest.raises(InvalidStatus):
        async with connect(_websocket_url(url), origin="http://evil.example", open_timeout=10):
            pass

    async with cloud.rt.db.transaction() as s:  # token_ttl has passed
        await s.execute(update(ConsoleAuthToken).where(ConsoleAuthToken.instance_uuid == sid)
                        .values(expires=int(time.time()) - 1))
    assert await _refused(_websocket_url(url)) == 403
    r = await cloud.compute.get(f"/v2.1/os-console-auth-tokens/{token}", headers=_h("2.31", ADMIN))
    assert r.status_code == 404 and r.json()["itemNotFound"]["message"] == "Token not found"

    # The guest stops: its display goes, and with it what a fresh token pointed at.
    url = await _vnc_url(cloud, sid)
    await cloud.action(sid, {"os-stop": None}, headers=member())
    await cloud.wait_status(sid, "SHUTOFF")
    assert await _refused(_websocket_url(url)) == 403
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", json={"os-getVNCConsole": {"type": "novnc"}},
                                 headers=member())
    assert r.status_code == 409 and r.json()["conflictingRequest"]["message"] == (
        f"Cannot 'get_vnc_console' instance {sid} while it is in vm_state stopped")

    # Deleted: its tokens go with it.
    await cloud.action(sid, {"os-start": None}, headers=member())
    await cloud.wait_status(sid, "ACTIVE")
    url = await _vnc_url(cloud, sid)
    r = await cloud.compute.delete(f"/v2.1/servers/{sid}", headers=member())
    assert r.status_code == 204, r.text
    await cloud.wait_gone(sid)
    assert await _refused(_websocket_url(url)) == 403
    r = await cloud.compute.get(f"/v2.1/os-console-auth-tokens/{_token(url)}", headers=_h("2.31", ADMIN))
    assert r.status_code == 404


async def test_another_projects_server_and_other_console_types(cloud):
    sid = await _server(cloud)
    for headers in (OTHER, _h("2.6", OTHER)):
        if "OpenStack-API-Version" in headers:
            r = await cloud.compute.post(f"/v2.1/servers/{sid}/remote-consoles", headers=headers,
                                         json={"remote_console": {"protocol": "vnc", "type": "novnc"}})
        else:
            r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", headers=headers,
                                         json={"os-getVNCConsole": {"type": "novnc"}})
        assert r.status_code == 404 and "itemNotFound" in r.json(), r.text
    cases = [
        ("2.1", {"os-getVNCConsole": {"type": "xvpvnc"}}, "Invalid console type xvpvnc"),
        ("2.1", {"os-getSPICEConsole": {"type": "spice-html5"}}, "Unavailable console type spice-html5."),
        ("2.1", {"os-getSerialConsole": {"type": "serial"}}, "Unavailable console type serial."),
        ("2.1", {"os-getRDPConsole": {"type": "rdp-html5"}}, None),
    ]
    for mv, body, message in cases:
        r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", json=body, headers=_h(mv))
        assert r.status_code == 400, r.text
        if message:
            assert r.json()["badRequest"]["message"] == message
    for protocol, type_, mv, message in [
            ("vnc", "xvpvnc", "2.6", "Invalid console type xvpvnc"),
            ("vnc", "serial", "2.6", "Invalid console type serial"),
            ("spice", "spice-html5", "2.6", "Unavailable console type spice-html5."),
            ("serial", "serial", "2.6", "Unavailable console type serial."),
            ("rdp", "rdp-html5", "2.6", "Unavailable console type rdp."),
            ("mks", "webmks", "2.8", "Unavailable console type webmks."),
            # SPICE off (the default, as Nova's): any SPICE type is unavailable, before its name is checked
            ("spice", "novnc", "2.99", "Unavailable console type novnc.")]:
        r = await cloud.compute.post(f"/v2.1/servers/{sid}/remote-consoles", headers=_h(mv),
                                     json={"remote_console": {"protocol": protocol, "type": type_}})
        assert r.status_code == 400 and r.json()["badRequest"]["message"] == message, (protocol, r.text)


async def _spice_link(host: str, port: int, major: int = 2) -> tuple:
    """A SPICE client's SpiceLinkMess for the main channel: the SpiceLinkReply's header and error,
    and whether the server then closed the connection."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        # magic, version, size, connection id, channel type (main) and id, caps counts and offset, caps
        writer.write(struct.pack("<4sIIIIBBIIIII", b"REDQ", major, 2, 26, 0, 1, 0, 1, 1, 18, 11, 9))
        await writer.drain()
        magic, rmajor, rminor, size = struct.unpack("<4sIII", await asyncio.wait_for(reader.readexactly(16), 10))
        body = await asyncio.wait_for(reader.readexactly(size), 10)
        closed = await asyncio.wait_for(reader.read(1), 10) == b""
    finally:
        writer.close()
    return magic, rmajor, rminor, struct.unpack_from("<I", body)[0], len(body), closed


@pytest.fixture
async def spice_cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=1, spice_enabled=True)
    yield harness
    await stop_cloud(harness)


async def test_spice_consoles_are_off_by_default(cloud):
    """As Nova's ``[spice] enabled``: off unless the operator turns it on."""
    sid = await _server(cloud)
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/remote-consoles", headers=_h("2.99"),
                                 json={"remote_console": {"protocol": "spice", "type": "spice-direct"}})
    assert r.status_code == 400 and r.json()["badRequest"]["message"] == "Unavailable console type spice-direct.", r.text


async def test_a_spice_direct_token_leads_to_the_guests_spice_server(spice_cloud):
    cloud = spice_cloud
    sid = await _server(cloud)
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/remote-consoles", headers=_h("2.99"),
                                 json={"remote_console": {"protocol": "spice", "type": "novnc"}})
    assert r.status_code == 400 and r.json()["badRequest"]["message"] == "Invalid console type novnc", r.text
    body = {"remote_console": {"protocol": "spice", "type": "spice-direct"}}
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/remote-consoles", json=body, headers=_h("2.98"))
    assert r.status_code == 400 and "badRequest" in r.json(), r.text  # spice-direct is 2.99's
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/remote-consoles", json=body, headers=_h("2.99"))
    assert r.status_code == 200, r.text
    jsonschema.validate(r.json(), response_schemas.REMOTE_CONSOLE)
    console = r.json()["remote_console"]
    assert (console["protocol"], console["type"]) == ("spice", "spice-direct")
    tokens = parse_qs(urlparse(console["url"]).query)["token"]
    assert len(tokens) == 1 and tokens[0]
    token = tokens[0]
    # Only an admin sees where the hypervisor's SPICE server is.
    r = await cloud.compute.get(f"/v2.1/os-console-auth-tokens/{token}", headers=_h("2.99"))
    assert r.status_code == 403, r.text
    r = await cloud.compute.get(f"/v2.1/os-console-auth-tokens/{token}", headers=_h("2.99", ADMIN))
    assert r.status_code == 200, r.text
    jsonschema.validate(r.json(), response_schemas.CONSOLE_AUTH_TOKEN)
    shown = r.json()["console"]
    assert shown["instance_uuid"] == sid and shown["internal_access_path"] is None
    assert "tls_port" in shown and shown["tls_port"] is None  # the fake display has no TLS
    r = await cloud.compute.get(f"/v2.1/os-console-auth-tokens/{token}", headers=_h("2.98", ADMIN))
    assert r.status_code == 200 and "tls_port" not in r.json()["console"], r.text
    magic, major, minor, error, size, closed = await _spice_link(shown["host"], shown["port"])
    assert (magic, major, minor, error) == (b"REDQ", 2, 2, 0)
    assert size >= 4 + 162 + 12 and closed
    # Another major version is refused with SPICE_LINK_ERR_VERSION_MISMATCH.
    assert (await _spice_link(shown["host"], shown["port"], major=1))[3] == 6
    # The guest's SPICE server goes with its display.
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", json={"os-stop": None}, headers=member())
    assert r.status_code == 202, r.text
    await cloud.wait_status(sid, "SHUTOFF")
    with pytest.raises(OSError):
        await _spice_link(shown["host"], shown["port"])
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/remote-consoles", json=body, headers=_h("2.99"))
    assert r.status_code == 409 and "conflictingRequest" in r.json(), r.text
