"""Remote consoles' microversion limits and the admin's console auth token view (the whole path,
through the proxy to a guest's VNC server, is tests/servers/test_consoles.py)."""

from __future__ import annotations

import time

from sqlalchemy import update

from nefos.db.models import ConsoleAuthToken
from nefos.objects import console_auth_tokens
from tests.api.conftest import member, version

SERVER = "/v2.1/servers/00000000-0000-0000-0000-000000000001"
INSTANCE = "9a4e7a5d-6ac1-4a2f-9ad2-0d4c5e1b2f3a"


async def _grant(rt, ttl: int = 600) -> str:
    return await console_auth_tokens.authorize(
        rt.db, console_type="novnc", host="127.0.0.1", port=5901, instance_uuid=INSTANCE,
        access_url_base="http://127.0.0.1:6080/vnc_auto.html", ttl=ttl)


async def test_console_auth_tokens_from_2_31_for_admins(client, rt):
    token = await _grant(rt)
    r = await client.get(f"/v2.1/os-console-auth-tokens/{token}", headers=version("2.30"))
    assert r.status_code == 400 and r.json() == {"badRequest": {"code": 400, "message": (
        "The server could not comply with the request since it is either malformed or otherwise incorrect.")}}
    r = await client.get(f"/v2.1/os-console-auth-tokens/{token}", headers=version("2.31"))
    assert r.status_code == 200, r.text
    assert r.json() == {"console": {"instance_uuid": INSTANCE, "host": "127.0.0.1", "port": 5901,
                                    "internal_access_path": None}}
    r = await client.get(f"/v2.1/os-console-auth-tokens/{token}", headers=version("2.31", member()))
    assert r.status_code == 403 and "forbidden" in r.json()
    # Unknown query parameters are ignored until 2.99.
    r = await client.get(f"/v2.1/os-console-auth-tokens/{token}?x=1", headers=version("2.98"))
    assert r.status_code == 200, r.text
    r = await client.get(f"/v2.1/os-console-auth-tokens/{token}?x=1", headers=version("2.99"))
    assert r.status_code == 400, r.text


async def test_unknown_and_expired_tokens_are_not_found(client, rt):
    token = await _grant(rt)
    for unknown in ("bad" + token, "x", token[:-1]):
        r = await client.get(f"/v2.1/os-console-auth-tokens/{unknown}", headers=version("2.31"))
        assert r.status_code == 404 and r.json() == {"itemNotFound": {"code": 404, "message": "Token not found"}}
    async with rt.db.transaction() as s:
        await s.execute(update(ConsoleAuthToken).values(expires=int(time.time()) - 1))
    r = await client.get(f"/v2.1/os-console-auth-tokens/{token}", headers=version("2.31"))
    assert r.status_code == 404, r.text


async def test_tokens_are_stored_hashed_and_expired_ones_are_dropped(rt):
    old = await _grant(rt, ttl=-1)  # expired at once
    token = await _grant(rt)
    async with rt.db.reader() as s:
        rows = [dict(row._mapping) for row in (await s.execute(ConsoleAuthToken.__table__.select())).all()]
    assert [r["token_hash"] for r in rows] == [console_auth_tokens.token_hash(token)]  # the old one went
    assert token not in str(rows) and old not in str(rows)
    assert (await console_auth_tokens.validate(rt.db, token))["port"] == 5901


async def test_each_console_api_within_its_microversions(client):
    body = {"remote_console": {"protocol": "vnc", "type": "novnc"}}
    r = await client.post(f"{SERVER}/remote-consoles", json=body, headers=version("2.5"))
    assert r.status_code == 404 and r.json()["itemNotFound"]["message"] == "The resource could not be found."
    for action in ("os-getVNCConsole", "os-getSPICEConsole", "os-getSerialConsole", "os-getRDPConsole"):
        r = await client.post(f"{SERVER}/action", json={action: {"type": "novnc"}}, headers=version("2.6"))
        assert r.status_code == 404, (action, r.text)
    # RDP went with Hyper-V: a bare 400 whatever the body.
    r = await client.post(f"{SERVER}/action", json={"os-getRDPConsole": None}, headers=version("2.5"))
    assert r.status_code == 400 and "badRequest" in r.json()


async def test_a_spice_direct_tokens_tls_port_is_shown_from_2_99(client, rt):
    spice = await console_auth_tokens.authorize(
        rt.db, console_type="spice-direct", host="192.0.2.5", port=5900, tls_port=5901,
        instance_uuid=INSTANCE, access_url_base="http://127.0.0.1:13002/nova", ttl=600)
    vnc = await _grant(rt)
    r = await client.get(f"/v2.1/os-console-auth-tokens/{spice}", headers=version("2.99"))
    assert r.status_code == 200, r.text
    assert r.json() == {"console": {"instance_uuid": INSTANCE, "host": "192.0.2.5", "port": 5900,
                                    "tls_port": 5901, "internal_access_path": None}}
    r = await client.get(f"/v2.1/os-console-auth-tokens/{spice}", headers=version("2.98"))
    assert r.status_code == 200 and "tls_port" not in r.json()["console"], r.text
    # As Nova's: only spice-direct tokens carry a TLS port.
    r = await client.get(f"/v2.1/os-console-auth-tokens/{vnc}", headers=version("2.99"))
    assert r.status_code == 200 and "tls_port" not in r.json()["console"], r.text
    r = await client.get(f"/v2.1/os-console-auth-tokens/{spice}", headers=version("2.99", member()))
    assert r.status_code == 403, r.text


async def test_spice_direct_is_2_99s_and_checked_before_the_server_is_looked_up(client):
    body = {"remote_console": {"protocol": "spice", "type": "spice-direct"}}
    for mv in ("2.6", "2.8", "2.98"):
        r = await client.post(f"{SERVER}/remote-consoles", json=body, headers=version(mv))
        assert r.status_code == 400 and "field/attribute type" in r.json()["badRequest"]["message"], r.text
