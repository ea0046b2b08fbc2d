"""The event stream's bounds with the shipped defaults, against a running ``nefos up`` (Keystone
tokens): one member opening 300 streams is served ``event_stream_max_per_user`` (20) of them and
refused the rest with 429, and the API process's open files stay bounded (counted in
/proc/<pid>/fd); the process serves ``event_stream_max_clients`` (250) streams in all; and a
member's stream ends within ``event_stream_reauth_interval`` (60 s) of its token being revoked or
its role removed. Each test prints its figures (docs/security.md, "The event stream")."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid

import httpx
import pytest

from nefos.config import Config
from nefos.cmd.event_tail import read_stream
from nefos.http_client import verified_tls
from tests.isolation.helpers import Api, login, make_tenancy, start_nefos, stop_nefos

SHIPPED = {name: Config.model_fields[name].default
           for name in ("event_stream_max_per_user", "event_stream_max_clients", "event_stream_reauth_interval")}


@pytest.fixture(scope="module")
def nefos(tmp_path_factory):
    state = tmp_path_factory.mktemp("nefos-stream-bounds")
    # Every option at its shipped value but the password hash cost (2^12 instead of 2^15): this
    # module makes a dozen users, and nothing here is about passwords.
    proc, clouds = start_nefos(state, {"NEFOS_PASSWORD_HASH_ROUNDS": "12"})
    try:
        yield {"proc": proc, "tenancy": make_tenancy(clouds, state)}
    finally:
        stop_nefos(proc, state)


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def new_member(admin: Api, project_id: str) -> Api:
    """A new user with the member role in ``project_id``, signed in there."""
    name, password = f"streamer-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    r = admin.post("identity", "/users", {"user": {"name": name, "password": password, "domain_id": "default"}})
    assert r.status_code == 201, r.text
    user_id = r.json()["user"]["id"]
    role = admin.get("identity", "/roles", params={"name": "member"}).json()["roles"][0]["id"]
    assert admin.put("identity", f"/projects/{project_id}/users/{user_id}/roles/{role}").status_code == 204
    project_name = admin.get("identity", f"/projects/{project_id}").json()["project"]["name"]
    return login(admin.auth_url, name, password, project_name)


class Streams:
    """Many streams of the event stream at once, each held open (its first message read) or refused."""

    def __init__(self):
        self.client = httpx.AsyncClient(verify=verified_tls(), timeout=httpx.Timeout(60.0, read=None),
                                        limits=httpx.Limits(max_connections=None, max_keepalive_connections=0))
        # Each served stream with its line iterator: a partly read iterator that is dropped closes its connection.
        self.open: list[tuple[httpx.Response, object]] = []

    async def open_many(self, who: Api, count: int) -> list[httpx.Response]:
        """``count`` streams of ``who`` at once; the refused ones read to their end."""
        url = who.url("compute", "/nefos-events")

        async def one() -> httpx.Response:
            r = await self.client.send(self.client.build_request(
                "GET", url, headers={"X-Auth-Token": who.token}), stream=True)
            if r.status_code == 200:
                lines = r.aiter_lines()
                first = await anext(lines)
                assert first == "event: stream.connected", first
                self.open.append((r, lines))
            else:
                await r.aread()
                await r.aclose()
            return r
        return await asyncio.gather(*(one() for _ in range(count)))

    async def close(self) -> None:
        for r, _lines in self.open:
            await r.aclose()
        self.open.clear()
        await self.client.aclose()


async def settled(measure, bound: int, timeout: float = 30.0) -> int:
    """``measure()`` once it is at most ``bound`` (sockets close a moment after their response), or
    AssertionError with the last value when it is still above after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = measure()
        if value <= bound:
            return value
        assert time.monotonic() < deadline, f"{value} open files, more than {bound}"
        await asyncio.sleep(0.1)


async def test_300_streams_of_one_member_are_served_up_to_its_cap_and_the_process_open_files_stay_bounded(nefos):
    pid, tenancy = nefos["proc"].pid, nefos["tenancy"]
    cap = SHIPPED["event_stream_max_per_user"]
    before = open_files(pid)
    streams = Streams()
    try:
        answers = await streams.open_many(tenancy.a, 300)
        statuses = [r.status_code for r in answers]
        assert statuses.count(200) == cap and statuses.count(429) == 300 - cap, sorted(set(statuses))
        refused = next(r for r in answers if r.status_code == 429)
        assert refused.json()["overLimit"]["code"] == 429 and int(refused.headers["retry-after"]) > 0
        # The refused connections are closed: the process holds the served streams' sockets only.
        slack = 10  # the process's own files that come and go (database connections, logs)
        during = await settled(lambda: open_files(pid), before + cap + slack)
        # Another user of another project is still served.
        [other] = await streams.open_many(tenancy.b, 1)
        assert other.status_code == 200
    finally:
        await streams.close()
    after = await settled(lambda: open_files(pid), before + slack)
    print(f"\n300 streams of one member: {statuses.count(200)} served, {statuses.count(429)} refused (429); "
          f"open files of the API process: {before} before, {during} with the {cap} streams open, {after} after")


async def test_the_process_serves_its_shipped_stream_cap_and_refuses_any_user_beyond_it(nefos):
    pid, tenancy = nefos["proc"].pid, nefos["tenancy"]
    per_user, per_process = SHIPPED["event_stream_max_per_user"], SHIPPED["event_stream_max_clients"]
    full_users, rest = divmod(per_process, per_user)
    users = [new_member(tenancy.admin, tenancy.b_project) for _ in range(full_users + 1)]
    before = open_files(pid)
    streams = Streams()
    try:
        for who in users[:full_users]:
            assert [r.status_code for r in await streams.open_many(who, per_user)] == [200] * per_user
        last = users[full_users]
        served = [r.status_code for r in await streams.open_many(last, rest)] if rest else []
        assert served == [200] * rest
        # The process is full: a user below its own cap is refused as well.
        [refused] = await streams.open_many(last, 1)
        assert refused.status_code == 429, refused.status_code
        assert "This API process serves its maximum" in refused.text, refused.text
        during = open_files(pid)
    finally:
        await streams.close()
    after = await settled(lambda: open_files(pid), before + 10)
    print(f"\n{per_process} streams of {len(users)} users: the next refused (429); open files of the API "
          f"process: {before} before, {during} with them open, {after} after")


async def test_a_members_stream_ends_within_the_shipped_interval_after_its_token_is_revoked_or_its_role_removed(nefos):
    tenancy = nefos["tenancy"]
    interval = SHIPPED["event_stream_reauth_interval"]
    revoked, unassigned = new_member(tenancy.admin, tenancy.a_project), new_member(tenancy.admin, tenancy.a_project)
    closings: dict[str, tuple[dict, float]] = {}
    taken: dict[str, float] = {}
    connected = {"revoked": asyncio.Event(), "unassigned": asyncio.Event()}

    async def follow(key: str, who: Api) -> None:
        async with httpx.AsyncClient(verify=verified_tls()) as client:
            async for message in read_stream(client, who.url("compute", "/nefos-events"),
                                             headers={"X-Auth-Token": who.token}):
                if message["event"] == "stream.connected":
                    connected[key].set()
                elif message["event"] == "stream.closed":
                    closings[key] = (message["data"], time.monotonic())

    tasks = [asyncio.create_task(follow("revoked", revoked)), asyncio.create_task(follow("unassigned", unassigned))]
    try:
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in connected.values())), 30)
        r = tenancy.admin.delete("identity", "/auth/tokens", headers={"X-Subject-Token": revoked.token})
        assert r.status_code == 204, r.text
        taken["revoked"] = time.monotonic()
        role = tenancy.admin.get("identity", "/roles", params={"name": "member"}).json()["roles"][0]["id"]
        r = tenancy.admin.delete("identity", f"/projects/{tenancy.a_project}/users/{unassigned.user_id}/roles/{role}")
        assert r.status_code == 204, r.text
        taken["unassigned"] = time.monotonic()
        # Both streams end by themselves (read_stream returns when the server ends a stream).
        await asyncio.wait_for(asyncio.gather(*tasks), interval + 15)
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    took = {key: closings[key][1] - taken[key] for key in taken}
    assert {closings[key][0]["reason"] for key in closings} == {"unauthorized"}, closings
    # One interval at most after the authority went (a busy machine's scheduling on top).
    assert max(took.values()) <= interval + 5, took
    print(f"\nstreams ended after the token was revoked: {took['revoked']:.1f} s, after the role was removed: "
          f"{took['unassigned']:.1f} s (event_stream_reauth_interval {interval:g} s)")
