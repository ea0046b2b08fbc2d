"""The event stream is bounded per user and per API process: a user at ``event_stream_max_per_user``
open streams, or a process at ``event_stream_max_clients``, gets 429 in the Compute API's error
body with ``Retry-After`` (and the refused connection closed), while other users keep streaming
and a place that frees is taken again. The caps are small here; tests/events/test_stream_bounds.py
checks the shipped ones against a running ``nefos up``."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.events.conftest import eventually, listen
from tests.clouds import member, start_cloud, stop_cloud
from nefos.http_client import verified_tls

PER_USER, PER_PROCESS = 2, 3


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=1, event_stream_max_per_user=PER_USER,
                                event_stream_max_clients=PER_PROCESS)
    yield harness
    await stop_cloud(harness)


def user(n: int) -> dict:
    return member(user=f"{n:032x}")


async def attempt(cloud, headers: dict) -> httpx.Response:
    """One more stream for ``headers``' user, ended at once when it is served (``timeout=0``)."""
    return await cloud.compute.get("/v2.1/nefos-events", headers=headers, params={"timeout": "0"})


def assert_refused(r: httpx.Response, says: str) -> None:
    assert r.status_code == 429, r.text
    assert r.json()["overLimit"]["code"] == 429 and says in r.json()["overLimit"]["message"], r.text
    assert int(r.headers["retry-after"]) > 0
    assert r.headers["connection"] == "close"


async def test_a_user_beyond_its_stream_cap_gets_429_while_another_user_streams(cloud):
    first, second = [await listen(cloud, headers=user(1)) for _ in range(PER_USER)]
    assert_refused(await attempt(cloud, user(1)), "This user has its maximum of 2 event streams open")
    other = await listen(cloud, headers=user(2))
    # A stream that ends gives its place back to its user.
    await first.close()

    async def served() -> bool:
        return (await attempt(cloud, user(1))).status_code == 200
    await eventually(served)
    for listener in (second, other):
        await listener.close()


async def test_a_process_beyond_its_stream_cap_gets_429_for_every_user(cloud):
    streams = [await listen(cloud, headers=user(1)), await listen(cloud, headers=user(1)),
               await listen(cloud, headers=user(2))]
    for n in (2, 3):
        assert_refused(await attempt(cloud, user(n)), "This API process serves its maximum of 3 event streams")
    await streams.pop().close()

    async def served() -> bool:
        return (await attempt(cloud, user(3))).status_code == 200
    await eventually(served)
    for listener in streams:
        await listener.close()


async def test_streams_cut_by_their_clients_give_their_places_back(cloud):
    # Clients that vanish without reading: the server notices each cut and frees its place.
    for _round in range(3):
        async with httpx.AsyncClient(verify=verified_tls(), base_url=cloud.compute.base_url) as client:
            responses = await asyncio.gather(*(client.send(client.build_request(
                "GET", "/v2.1/nefos-events", headers=user(1)), stream=True) for _ in range(PER_USER)))
            assert [r.status_code for r in responses] == [200] * PER_USER
            for r in responses:
                await r.aclose()

        async def served() -> bool:
            return (await attempt(cloud, user(1))).status_code == 200
        await eventually(served)
