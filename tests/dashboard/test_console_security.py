"""The web console as an attacker meets it: no page without signing in, no form without its CSRF
token, no way to another site after sign-in, no path of the APIs but a server's own id, names shown
as text, cookies a script cannot read, pages no other site can frame, a session that ends with its
token; and a member reaches only what the APIs give a member."""

from __future__ import annotations

import re

import httpx
import pytest

from nefos.identity.bootstrap import bootstrap
from tests.pipeline.conftest import start_cloud, stop_cloud


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=1, auth_strategy="keystone")
    harness.accounts = await bootstrap(harness.rt)
    harness.console = f"http://127.0.0.1:{harness.rt.cfg.dashboard_port}"
    yield harness
    await stop_cloud(harness)


async def signed_in(cloud, who: str = "demo") -> httpx.AsyncClient:
    account = cloud.accounts[who]
    client = httpx.AsyncClient(base_url=cloud.console, timeout=30)
    r = await client.post("/login", data={"username": account["username"], "password": account["password"]})
    assert r.status_code == 303 and r.headers["location"] == "/servers", r.text
    return client


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


async def test_pages_need_a_session_and_the_cookie_is_the_servers_alone(cloud):
    async with httpx.AsyncClient(base_url=cloud.console) as anonymous:
        for path in ("/servers", "/hosts", "/networks", "/events", "/servers/" + "0" * 8 + "-0000-0000-0000-" + "0" * 12):
            r = await anonymous.get(path)
            assert r.status_code == 303 and r.headers["location"].startswith("/login"), path
        r = await anonymous.get("/healthcheck")  # a load balancer's check needs no session
        assert (r.status_code, r.text) == (200, "OK")
        r = await anonymous.get("/servers", cookies={"nefos_session": "forged"})
        assert r.status_code == 303
        r = await anonymous.post("/login", data={"username": "demo", "password": "wrong"})
        assert r.status_code == 401 and "wrong" in r.text and "nefos_session" not in r.headers.get("set-cookie", "")
    client = await signed_in(cloud)
    cookie = client.cookies.jar
    [session_cookie] = [c for c in cookie if c.name == "nefos_session"]
    assert session_cookie.has_nonstandard_attr("HttpOnly") and session_cookie.get_nonstandard_attr("SameSite") == "strict"
    r = await client.get("/servers")
    assert r.status_code == 200
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"
    assert cloud.accounts["demo"]["password"] not in r.text
    await client.aclose()


async def test_forms_need_their_csrf_token(cloud):
    client = await signed_in(cloud)
    page = (await client.get("/servers")).text
    token = csrf_of(page)
    image = re.search(r'<option value="([0-9a-f-]{36})">', page).group(1)
    for csrf in (None, "", "x" * len(token)):
        data = {"name": "csrf-less", "image": image, "flavor": "42"}
        if csrf is not None:
            data["csrf"] = csrf
        r = await client.post("/servers", data=data)
        assert r.status_code == 400 and "expired" in r.text
    r = await client.post("/logout", data={})
    assert r.status_code == 400  # a page of another site cannot sign the user out either
    r = await client.post("/servers", content=b'{"name": "json"}', headers={"content-type": "application/json"})
    assert r.status_code == 400
    r = await client.post("/servers", data={"csrf": token, "name": "x" * 70000})
    assert r.status_code == 400
    await client.aclose()


async def test_sign_in_never_sends_the_user_to_another_site(cloud):
    account = cloud.accounts["demo"]
    async with httpx.AsyncClient(base_url=cloud.console) as client:
        for target in ("https://evil.example/", "//evil.example/x", "/\\evil.example", "javascript:alert(1)",
                       "servers"):
            r = await client.post("/login", data={"username": account["username"], "password": account["password"],
                                                  "next": target})
            assert r.status_code == 303 and r.headers["location"] == "/servers", target
        r = await client.get("/login", params={"next": '"><script>alert(1)</script>'})
        assert "<script>alert(1)" not in r.text


async def test_ids_are_only_ids_and_names_are_text(cloud):
    client = await signed_in(cloud)
    for path in ("/servers/..%2F..%2Fos-hypervisors", "/servers/os-hypervisors", "/servers/detail/row",
                 "/servers/%2e%2e/summary", "/servers/x/console"):
        r = await client.get(path)
        assert r.status_code in (404, 405), (path, r.status_code)
        assert "hypervisor" not in r.text.lower()
    page = (await client.get("/servers")).text
    image = re.search(r'<option value="([0-9a-f-]{36})">', page).group(1)
    r = await client.post("/servers", data={"csrf": csrf_of(page), "name": "<img src=x onerror=alert(1)>",
                                            "image": image, "flavor": "42"})
    assert r.status_code == 303
    page = (await client.get("/servers")).text
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    # An API's refusal is said as text, in the page's own error line.
    r = await client.post("/servers", data={"csrf": csrf_of(page), "name": "bad", "image": image, "flavor": "nope"})
    assert r.status_code == 303 and "error=" in r.headers["location"]
    await client.aclose()


async def test_a_member_sees_only_its_project_and_no_hosts(cloud):
    admin = await signed_in(cloud, "admin")
    page = (await admin.get("/servers")).text
    image = re.search(r'<option value="([0-9a-f-]{36})">', page).group(1)
    r = await admin.post("/servers", data={"csrf": csrf_of(page), "name": "admins-own", "image": image, "flavor": "42"})
    assert r.status_code == 303
    admin_page = (await admin.get("/servers")).text
    server_id = re.search(r'id="server-([0-9a-f-]{36})"', admin_page).group(1)
    member = await signed_in(cloud, "demo")
    assert "admins-own" not in (await member.get("/servers")).text
    for path in (f"/servers/{server_id}", f"/servers/{server_id}/summary", f"/servers/{server_id}/console"):
        r = await member.get(path)
        assert r.status_code == 404, path
    assert (await member.get(f"/servers/{server_id}/row")).status_code == 404
    r = await member.post(f"/servers/{server_id}/action", data={"csrf": csrf_of((await member.get("/servers")).text),
                                                                 "action": "delete"})
    assert r.status_code == 303 and "error=" in r.headers["location"]
    assert "Only an administrator" in (await member.get("/hosts")).text
    assert "host-1" in (await admin.get("/hosts")).text
    # The live stream a member's page opens: its project's servers, whatever it asks for.
    async with member.stream("GET", "/events", params={"of": "hosts"}) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.startswith("data:"):
                assert "host-1" not in line
                break
    for client in (admin, member):
        await client.aclose()


async def test_the_session_ends_with_sign_out(cloud):
    client = await signed_in(cloud)
    token = csrf_of((await client.get("/servers")).text)
    cookie = client.cookies["nefos_session"]
    r = await client.post("/logout", data={"csrf": token})
    assert r.status_code == 303
    async with httpx.AsyncClient(base_url=cloud.console) as replay:
        r = await replay.get("/servers", cookies={"nefos_session": cookie})
        assert r.status_code == 303 and r.headers["location"].startswith("/login")
    await client.aclose()
