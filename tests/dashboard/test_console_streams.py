"""One console user's live event streams cannot deny the console to anyone else: the relays of
``GET /events`` have a connection pool of their own, apart from the one the pages' API calls use,
and a budget per session, per user and overall (refused beyond it with 429 and a Retry-After, so
the page backs off instead of reconnecting at once). A refusal of the Compute API's stream is passed
on as a status, never as a stream that ends and is opened again at once. All with the shipped
budgets."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from nefos.config import Config
from nefos.http_client import verified_tls
from tests.dashboard.console import (client_of, console_cloud, identity_as, identity_as_admin, open_stream, second_member,
                                    sign_in, signed_in, stream_once_there_is_room)
from tests.clouds import stop_cloud

UNBOUNDED = httpx.Limits(max_connections=None, max_keepalive_connections=None)


@pytest.fixture
async def cloud(tmp_path):
    harness = await console_cloud(tmp_path)
    yield harness
    await stop_cloud(harness)


async def timed(call) -> tuple[float, httpx.Response]:
    started = time.monotonic()
    response = await call
    return time.monotonic() - started, response


async def slowest_of_pages(client: httpx.AsyncClient, times: int = 5) -> float:
    slowest = 0.0
    for _ in range(times):
        took, r = await timed(client.get("/servers"))
        assert r.status_code == 200 and "<h1>Servers</h1>" in r.text
        slowest = max(slowest, took)
    return slowest


async def test_a_hundred_streams_of_one_member_leave_another_users_pages_and_sign_in_under_a_second(cloud):
    victim_account = await second_member(cloud)
    victim = await signed_in(cloud, victim_account, timeout=10)
    alone = await slowest_of_pages(victim)

    # The attacker: one member, three sessions, a hundred streams at once.
    attackers = [await signed_in(cloud, "demo", limits=UNBOUNDED) for _ in range(3)]
    streams = await asyncio.gather(*(open_stream(attackers[i % 3]) for i in range(100)))

    beside = await slowest_of_pages(victim)
    async with client_of(cloud, timeout=10) as fresh:
        sign_in_time, r = await timed(sign_in(fresh, victim_account))
        assert r.status_code == 303 and r.headers["location"] == "/servers"
        first_page = await slowest_of_pages(fresh, times=1)
    print(f"another user's /servers, slowest of 5: {alone:.3f} s alone, {beside:.3f} s beside 100 streams; "
          f"sign-in (form and post) {sign_in_time:.3f} s, then its first page {first_page:.3f} s")
    assert beside < 1.0 and sign_in_time < 1.0 and first_page < 1.0

    # The member got its budget and no more: per session, and over all its sessions.
    cfg = cloud.rt.cfg
    assert cfg.dashboard_max_streams_per_user == Config.model_fields["dashboard_max_streams_per_user"].default
    accepted = [s for s in streams if s.status_code == 200]
    assert len(accepted) == cfg.dashboard_max_streams_per_user
    per_session = [sum(1 for i, s in enumerate(streams) if i % 3 == n and s.status_code == 200) for n in range(3)]
    assert max(per_session) <= cfg.dashboard_max_streams_per_session
    refused = [s for s in streams if s.status_code != 200]
    assert {s.status_code for s in refused} == {429}
    assert all(int(s.headers["retry-after"]) > 0 for s in refused)

    # The other user's own live stream still opens.
    mine = await open_stream(victim)
    assert mine.status_code == 200
    await mine.aclose()

    # Streams that end give their place back.
    for stream in streams:
        await stream.aclose()
    await (await stream_once_there_is_room(attackers[0])).aclose()
    for client in [victim, *attackers]:
        await client.aclose()


async def test_a_stream_whose_token_is_revoked_is_refused_and_ends_the_session(cloud):
    account = await second_member(cloud)
    client = await signed_in(cloud, account)
    stream = await open_stream(client)
    assert stream.status_code == 200
    await stream.aclose()
    # The admin disables the user: Keystone revokes its tokens.
    async with identity_as_admin(cloud) as identity:
        r = await identity.patch(f"/users/{account['user_id']}", json={"user": {"enabled": False}})
        assert r.status_code == 200, r.text
    # An EventSource reconnects by itself after a stream that ends, but not after an answer other
    # than 200: the refusal must be a status, not an event in a stream that then ends.
    r = await client.get("/events")
    assert r.status_code == 401
    r = await client.get("/servers")
    assert r.status_code == 303 and r.headers["location"].startswith("/login")
    await client.aclose()


async def test_the_apis_refusal_of_a_stream_reaches_the_page_as_429_with_the_apis_retry_after(cloud):
    """The Compute API serves one user at most ``event_stream_max_per_user`` streams (shipped: 20);
    with them all open elsewhere, the console answers the page as the API answered the relay."""
    account = cloud.accounts["demo"]
    async with identity_as(cloud, account) as identity:
        token = identity.headers["X-Auth-Token"]
    api = httpx.AsyncClient(verify=verified_tls(),
                            base_url=f"http://127.0.0.1:{cloud.rt.cfg.compute_api_port}", timeout=30,
                            headers={"X-Auth-Token": token}, limits=UNBOUNDED)
    held = []
    while (stream := await open_stream(api, "/v2.1/nefos-events")).status_code == 200:
        held.append(stream)
        assert len(held) <= cloud.rt.cfg.event_stream_max_per_user
    assert stream.status_code == 429
    api_retry_after = stream.headers["retry-after"]
    await stream.aclose()

    client = await signed_in(cloud, account)
    refused = await open_stream(client)
    assert refused.status_code == 429 and refused.headers["retry-after"] == api_retry_after
    await refused.aclose()
    for stream in held:
        await stream.aclose()
    await (await stream_once_there_is_room(client)).aclose()
    for c in (client, api):
        await c.aclose()


async def test_a_stream_the_api_ends_for_a_disabled_user_ends_at_the_page_and_then_is_refused(tmp_path):
    """The API checks an open stream's caller again every ``event_stream_reauth_interval`` (60 s
    shipped; here 1 s: tests/events/test_stream_bounds.py has the shipped interval) and ends it with
    ``stream.closed``: the relay passes that on and ends too, and the page's next try is refused."""
    cloud = await console_cloud(tmp_path, event_stream_reauth_interval=1.0)
    try:
        account = await second_member(cloud)
        client = await signed_in(cloud, account)
        stream = await open_stream(client)
        assert stream.status_code == 200
        async with identity_as_admin(cloud) as identity:
            r = await identity.patch(f"/users/{account['user_id']}", json={"user": {"enabled": False}})
            assert r.status_code == 200, r.text
        async with asyncio.timeout(30):
            rest = [line async for line in stream.lines]
        assert "event: stream.closed" in rest
        await stream.aclose()
        assert (await client.get("/events")).status_code == 401
        await client.aclose()
    finally:
        await stop_cloud(cloud)
