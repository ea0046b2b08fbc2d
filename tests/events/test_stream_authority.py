"""An open event stream lasts no longer than its caller's authority: once the member's token is
revoked, its role in the project removed, its user or project disabled, its token expired or the
policy no longer gives it the stream, the stream ends with a last ``stream.closed`` message saying
why, within ``event_stream_reauth_interval`` (or at the token's expiry), and delivers nothing
more. The attacks run as a member of a second project, with real Keystone tokens; the interval is
short here, tests/events/test_stream_bounds.py has the shipped 60 s."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest

from nefos.control.identity.bootstrap import bootstrap
from nefos.http_client import verified_tls
from tests.events.conftest import eventually, listen
from tests.clouds import start_cloud, stop_cloud

REAUTH = 0.5  # seconds between an open stream's checks of its caller (shipped: 60)


class Identity:
    """The cloud's Identity API as its admin: projects, members, tokens."""

    def __init__(self, cloud):
        self.http = httpx.AsyncClient(verify=verified_tls(),
                                      base_url=f"http://127.0.0.1:{cloud.rt.cfg.identity_api_port}", timeout=30)
        self.accounts = cloud.accounts
        self.admin_token = ""

    async def token(self, username: str, password: str, project_id: str) -> str:
        r = await self.http.post("/v3/auth/tokens", json={"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": username, "domain": {"id": "default"}, "password": password}}},
            "scope": {"project": {"id": project_id}}}})
        assert r.status_code == 201, r.text
        return r.headers["x-subject-token"]

    async def as_admin(self, method: str, path: str, **kwargs) -> httpx.Response:
        if not self.admin_token:
            admin = self.accounts["admin"]
            self.admin_token = await self.token(admin["username"], admin["password"], admin["project_id"])
        return await self.http.request(method, path, headers={"X-Auth-Token": self.admin_token,
                                                              **kwargs.pop("headers", {})}, **kwargs)

    async def project(self) -> str:
        r = await self.as_admin("POST", "/v3/projects", json={"project": {
            "name": f"second-{uuid.uuid4().hex[:8]}", "domain_id": "default"}})
        assert r.status_code == 201, r.text
        return r.json()["project"]["id"]

    async def member_role(self) -> str:
        r = await self.as_admin("GET", "/v3/roles", params={"name": "member"})
        return r.json()["roles"][0]["id"]

    async def member(self, project_id: str) -> dict:
        """A new user with the member role in ``project_id``: its ids and a token."""
        name, password = f"member-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
        r = await self.as_admin("POST", "/v3/users", json={"user": {"name": name, "password": password,
                                                                     "domain_id": "default"}})
        assert r.status_code == 201, r.text
        user_id = r.json()["user"]["id"]
        r = await self.as_admin("PUT", f"/v3/projects/{project_id}/users/{user_id}/roles/{await self.member_role()}")
        assert r.status_code == 204, r.text
        return {"user_id": user_id, "project_id": project_id, "token": await self.token(name, password, project_id)}

    async def aclose(self):
        await self.http.aclose()


async def keystone_cloud(tmp_path, **overrides):
    harness = await start_cloud(tmp_path, fake_hosts=1, auth_strategy="keystone", **overrides)
    harness.accounts = await bootstrap(harness.rt)
    harness.identity = Identity(harness)
    return harness


async def close_cloud(harness):
    await harness.identity.aclose()
    await stop_cloud(harness)


@pytest.fixture
async def cloud(tmp_path):
    harness = await keystone_cloud(tmp_path, event_stream_reauth_interval=REAUTH)
    yield harness
    await close_cloud(harness)


async def _true(value):
    return value


def auth(who: dict) -> dict:
    return {"X-Auth-Token": who["token"]}


async def boot_none(cloud, who: dict) -> str:
    """A server of ``who``'s project, without networks (microversion 2.37)."""
    created = await cloud.boot(networks="none", headers={**auth(who), "OpenStack-API-Version": "compute 2.37"})
    return created["server"]["id"]


async def revoke_the_token(cloud, who):
    r = await cloud.identity.as_admin("DELETE", "/v3/auth/tokens", headers={"X-Subject-Token": who["token"]})
    assert r.status_code == 204, r.text


async def remove_the_role(cloud, who):
    role = await cloud.identity.member_role()
    r = await cloud.identity.as_admin("DELETE", f"/v3/projects/{who['project_id']}/users/{who['user_id']}/roles/{role}")
    assert r.status_code == 204, r.text


async def disable_the_user(cloud, who):
    r = await cloud.identity.as_admin("PATCH", f"/v3/users/{who['user_id']}", json={"user": {"enabled": False}})
    assert r.status_code == 200, r.text


async def disable_the_project(cloud, who):
    r = await cloud.identity.as_admin("PATCH", f"/v3/projects/{who['project_id']}",
                                      json={"project": {"enabled": False}})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("take_authority", [revoke_the_token, remove_the_role, disable_the_user, disable_the_project],
                         ids=lambda f: f.__name__.replace("_", " "))
async def test_a_members_stream_ends_with_stream_closed_once_its_authority_is_gone(cloud, take_authority):
    project = await cloud.identity.project()
    mallory = await cloud.identity.member(project)
    colleague = await cloud.identity.member(project)
    stream = await listen(cloud, headers=auth(mallory))
    # Live, and the project's: a colleague's server reaches it.
    first = await boot_none(cloud, colleague)
    await eventually(lambda: _true(stream.of(first, "server.created")))

    await take_authority(cloud, mallory)
    # One check interval (a revocation made in this process is seen at once), with room for a busy machine.
    await stream.ended(timeout=REAUTH + 10)
    assert stream.closing["reason"] == "unauthorized" and stream.closing["message"], stream.closing
    # Nothing after the end, and no new stream with that token (a 401 from authentication, which
    # answers before the microversion is negotiated, as keystonemiddleware does in front of Nova).
    async with httpx.AsyncClient(verify=verified_tls(), base_url=cloud.compute.base_url) as plain:
        r = await plain.get("/v2.1/nefos-events", headers=auth(mallory), params={"timeout": "0"})
    assert r.status_code == 401, r.text
    await stream.close()


async def test_a_stream_ends_when_its_token_expires(tmp_path):
    # Tokens live 3 s; the check interval is the shipped one (60 s): the expiry alone ends the stream.
    cloud = await keystone_cloud(tmp_path, token_expiration=3)
    try:
        project = await cloud.identity.project()
        issued = time.time()
        mallory = await cloud.identity.member(project)
        stream = await listen(cloud, headers=auth(mallory))
        await stream.ended(timeout=3 + 10)
        ended = time.time()
        assert stream.closing["reason"] == "token_expired", stream.closing
        assert ended - issued >= 3 - 0.5, "ended before the token expired"
        assert ended - issued < cloud.rt.cfg.event_stream_reauth_interval
        await stream.close()
    finally:
        await close_cloud(cloud)


async def test_a_stream_ends_when_the_policy_no_longer_gives_it(cloud):
    project = await cloud.identity.project()
    mallory = await cloud.identity.member(project)
    stream = await listen(cloud, headers=auth(mallory))
    # The operator makes the stream the admin's; the file is read again when it changes.
    (cloud.rt.cfg.state_dir / "policy.yaml").write_text('"nefos:events:stream": "role:admin"\n')
    await stream.ended(timeout=REAUTH + 10)
    assert stream.closing["reason"] == "forbidden", stream.closing
    r = await cloud.compute.get("/v2.1/nefos-events", headers=auth(mallory), params={"timeout": "0"})
    assert r.status_code == 403, r.text
    await stream.close()


async def test_a_member_whose_authority_stays_keeps_streaming_across_checks(cloud):
    project = await cloud.identity.project()
    member = await cloud.identity.member(project)
    stream = await listen(cloud, headers=auth(member))
    await asyncio.sleep(4 * REAUTH)  # the duration under test: several checks of the caller pass
    server_id = await boot_none(cloud, member)
    await eventually(lambda: _true(stream.of(server_id, "server.created")))
    assert stream.closing is None
    await stream.close()


async def test_nefos_events_signs_in_again_when_its_token_expires_and_misses_nothing(tmp_path):
    from io import StringIO

    from rich.console import Console

    from nefos.cmd.event_tail import tail
    from nefos.control.identity.bootstrap import write_clouds_yaml

    cloud = await keystone_cloud(tmp_path, token_expiration=3)
    try:
        clouds = write_clouds_yaml(cloud.rt, cloud.accounts, tmp_path / "clouds.yaml")
        demo = cloud.accounts["demo"]

        async def as_demo() -> dict:
            token = await cloud.identity.token(demo["username"], demo["password"], demo["project_id"])
            return {"token": token}

        printed = StringIO()
        follower = asyncio.create_task(tail(clouds, cloud="nefos", params={"type": "server.created"},
                                            last_event_id=None, count=2, console=Console(file=printed, width=200)))
        await eventually(lambda: _true("following the events" in printed.getvalue()))
        first = await boot_none(cloud, await as_demo())
        await eventually(lambda: _true(first in printed.getvalue()))
        # Its token expires: the stream ends, it signs in again and follows on from the last id.
        await eventually(lambda: _true("signing in again" in printed.getvalue()), timeout=3 + 15)
        second = await boot_none(cloud, await as_demo())
        assert await asyncio.wait_for(follower, 30) == 2
        assert second in printed.getvalue(), printed.getvalue()
    finally:
        await close_cloud(cloud)


async def test_a_stream_whose_caller_cannot_be_checked_ends_with_unavailable(tmp_path, monkeypatch):
    # Fails closed: with the database away the revocations cannot be read, so the stream ends
    # (reason unavailable) rather than go on unchecked; its client resumes with Last-Event-ID.
    from nefos.db import retry
    from tests.database_servers import OwnPostgres

    server = OwnPostgres()
    try:
        await asyncio.to_thread(server.start)
        url = await asyncio.to_thread(server.create_database, "nefos")
        # Each "not revoked" answer is read again at every check (not reused for 5 s), and a
        # database that is away fails a read after half a second (not ten).
        cloud = await keystone_cloud(tmp_path, database_url=url, event_stream_reauth_interval=REAUTH,
                                     revocation_cache_time=0)
        try:
            member = await cloud.identity.member(await cloud.identity.project())
            stream = await listen(cloud, headers=auth(member))
            monkeypatch.setattr(retry, "DISCONNECT_TIMEOUT", 0.5)
            await asyncio.to_thread(server.stop)
            await stream.ended(timeout=REAUTH + 15)
            assert stream.closing["reason"] == "unavailable", stream.closing
            await stream.close()
        finally:
            if not server.running:
                await asyncio.to_thread(server.start)
            await close_cloud(cloud)
    finally:
        await asyncio.to_thread(server.destroy)
