"""The web console as an attacker meets it: no page without signing in, no form without its CSRF
token, the sign-in form included, and no form posted from another site; no way to another site
after sign-in, no path of the APIs but a server's own id, names shown as text, no message taken
from the query string, cookies a script cannot read, pages no other site can frame, a session that
ends with its token, and sessions no other user's sign-ins can push out; and a member reaches only
what the APIs give a member."""

from __future__ import annotations

import re

import httpx
import pytest

from nefos.config import Config
from nefos.http_client import verified_tls
from tests.dashboard.console import client_of, console_cloud, csrf_of, second_member, sign_in, signed_in
from tests.clouds import stop_cloud


@pytest.fixture
async def cloud(tmp_path):
    harness = await console_cloud(tmp_path)
    yield harness
    await stop_cloud(harness)


async def test_pages_need_a_session_and_the_cookie_is_the_servers_alone(cloud):
    async with client_of(cloud) as anonymous:
        for path in ("/servers", "/hosts", "/networks", "/events", "/servers/" + "0" * 8 + "-0000-0000-0000-" + "0" * 12):
            r = await anonymous.get(path)
            assert r.status_code == 303 and r.headers["location"].startswith("/login"), path
        r = await anonymous.get("/healthcheck")  # a load balancer's check needs no session
        assert (r.status_code, r.text) == (200, "OK")
        r = await anonymous.get("/servers", cookies={"nefos_session": "forged"})
        assert r.status_code == 303
        r = await sign_in(anonymous, {"username": "demo", "password": "wrong"})
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
    async with client_of(cloud) as client:
        for target in ("https://evil.example/", "//evil.example/x", "/\\evil.example", "javascript:alert(1)",
                       "servers"):
            token = csrf_of((await client.get("/login")).text)
            r = await client.post("/login", data={"username": account["username"], "password": account["password"],
                                                  "next": target, "csrf": token})
            assert r.status_code == 303 and r.headers["location"] == "/servers", target
        r = await client.get("/login", params={"next": '"><script>alert(1)</script>'})
        assert "<script>alert(1)" not in r.text


async def test_sign_in_needs_the_forms_token_and_this_sites_origin(cloud):
    """Login CSRF: a page of another site posting the attacker's credentials from the victim's
    browser would sign the victim in to the attacker's project."""
    attacker_account = cloud.accounts["demo"]
    credentials = {"username": attacker_account["username"], "password": attacker_account["password"]}
    async with client_of(cloud) as attacker:
        attackers_token = csrf_of((await attacker.get("/login")).text)
    async with httpx.AsyncClient(verify=verified_tls(), base_url=cloud.console, timeout=30) as victim:
        for data, origin in ((credentials, "https://evil.example"),  # another site's form, as it is
                             (credentials, None),  # no Origin (an older browser): still no token
                             (credentials, cloud.console),  # a token-less post claiming this origin
                             ({**credentials, "csrf": attackers_token}, cloud.console),  # not this browser's
                             ({**credentials, "csrf": ""}, cloud.console)):
            r = await victim.post("/login", data=data, headers={"Origin": origin} if origin else {})
            assert r.status_code in (400, 403), (data.keys(), origin, r.status_code)
            assert "nefos_session" not in r.headers.get("set-cookie", ""), origin
        # The victim's own form, posted from another site (or a sandboxed frame, Origin "null"): 403.
        token = csrf_of((await victim.get("/login")).text)
        for headers in ({"Origin": "https://evil.example"}, {"Origin": "null"},
                        {"Referer": "https://evil.example/login"}):
            r = await victim.post("/login", data={**credentials, "csrf": token}, headers=headers)
            assert r.status_code == 403, headers
            assert "nefos_session" not in r.headers.get("set-cookie", "")
        # The same form from this site's own page signs in.
        r = await victim.post("/login", data={**credentials, "csrf": token},
                              headers={"Origin": cloud.console, "Referer": cloud.console + "/login"})
        assert r.status_code == 303 and "nefos_session" in r.headers["set-cookie"]
        # Signed in, every form is refused from another site too, its session token given or not.
        page = (await victim.get("/servers")).text
        r = await victim.post("/logout", data={"csrf": csrf_of(page)}, headers={"Origin": "https://evil.example"})
        assert r.status_code == 403
        assert (await victim.get("/servers")).status_code == 200


async def test_no_message_is_taken_from_the_query_string(cloud):
    """A link to the console carrying a message of the attacker's (call this number, sign in
    there) shows nothing of it: the messages a page shows are the console's own."""
    client = await signed_in(cloud)
    page = (await client.get("/servers")).text
    image = re.search(r'<option value="([0-9a-f-]{36})">', page).group(1)
    r = await client.post("/servers", data={"csrf": csrf_of(page), "name": "mine", "image": image, "flavor": "42"})
    assert r.status_code == 303
    server_id = re.search(r'id="server-([0-9a-f-]{36})"', (await client.get("/servers")).text).group(1)
    lure = "Your session has expired: sign in again at evil.example"
    for path in ("/servers", f"/servers/{server_id}", f"/servers/{server_id}/summary"):
        r = await client.get(path, params={"error": lure})
        assert r.status_code == 200 and "evil.example" not in r.text, path
    # An API's refusal is still said, once, though the address names it only by a key of the console's.
    r = await client.post("/servers", data={"csrf": csrf_of(page), "name": "bad", "image": image, "flavor": "nope"})
    assert r.status_code == 303
    location = r.headers["location"]
    assert "nope" not in location and "flavor" not in location.lower()
    shown = (await client.get(location)).text
    flash = re.search(r'<p id="flash"[^>]*>([^<]*)</p>', shown).group(1)
    assert "nope" in flash
    again = (await client.get(location)).text
    assert re.search(r'<p id="flash"[^>]*>([^<]*)</p>', again).group(1) == ""
    # Another session cannot read it either.
    other = await signed_in(cloud)
    assert "nope" not in (await other.get(location)).text
    for c in (client, other):
        await c.aclose()


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
    async with httpx.AsyncClient(verify=verified_tls(), base_url=cloud.console) as replay:
        r = await replay.get("/servers", cookies={"nefos_session": cookie})
        assert r.status_code == 303 and r.headers["location"].startswith("/login")
    await client.aclose()


async def _sessions_after_sign_ins(cloud, account: dict, times: int) -> list[httpx.AsyncClient]:
    clients = []
    for _ in range(times):
        clients.append(await signed_in(cloud, account))
    return clients


async def _is_signed_in(client: httpx.AsyncClient) -> bool:
    r = await client.get("/servers")
    assert r.status_code in (200, 303)
    return r.status_code == 200


async def test_one_user_signing_in_again_and_again_evicts_no_other_users_session(tmp_path):
    """A store of twelve sessions (the shipped store holds 10 000): one user's sign-ins push out only
    that user's oldest sessions, and a store full of others' live sessions refuses a new sign-in
    instead of ending one of them."""
    cloud = await console_cloud(tmp_path, dashboard_max_sessions=12)
    try:
        per_user = cloud.rt.cfg.dashboard_max_sessions_per_user
        victim = await signed_in(cloud, await second_member(cloud))
        attacker = await _sessions_after_sign_ins(cloud, cloud.accounts["demo"], 30)
        assert await _is_signed_in(victim)
        alive = [await _is_signed_in(c) for c in attacker]
        assert alive == [False] * (30 - per_user) + [True] * per_user  # the oldest went first
        admin = await _sessions_after_sign_ins(cloud, cloud.accounts["admin"], 12 - 1 - per_user)
        # Full of live sessions, none of them the service user's: it is told to come back later.
        async with client_of(cloud) as late:
            r = await sign_in(late, cloud.accounts["service"])
            assert r.status_code == 503 and "nefos_session" not in r.headers.get("set-cookie", "")
            assert "too many" in r.text.lower()
        # A user already in the store can still sign in again: its own oldest session makes room.
        attacker.append(await signed_in(cloud, "demo"))
        assert await _is_signed_in(victim) and all([await _is_signed_in(c) for c in admin])
        for client in [victim, *attacker, *admin]:
            await client.aclose()
    finally:
        await stop_cloud(cloud)


async def test_with_the_shipped_store_a_users_sign_ins_end_only_its_own_oldest_sessions(cloud):
    per_user = Config.model_fields["dashboard_max_sessions_per_user"].default
    assert cloud.rt.cfg.dashboard_max_sessions_per_user == per_user
    victim = await signed_in(cloud, await second_member(cloud))
    attacker = await _sessions_after_sign_ins(cloud, cloud.accounts["demo"], per_user + 2)
    assert await _is_signed_in(victim)
    assert [await _is_signed_in(c) for c in attacker] == [False, False] + [True] * per_user
    for client in [victim, *attacker]:
        await client.aclose()
