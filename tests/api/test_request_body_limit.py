"""A body without Content-Length is cut off as soon as it passes max_request_body_size: the API
answers 413 having read little more than the limit, however much the client would send."""

from __future__ import annotations

import httpx

from nefos.control.compute.rest.app import create_app
from tests.noauth import ADMIN


async def test_a_streamed_body_is_refused_once_past_the_limit(rt):
    limit = rt.cfg.max_request_body_size
    sent = 0

    async def endless():
        nonlocal sent
        chunk = b" " * 4096
        while sent < 100 * limit:
            sent += len(chunk)
            yield chunk

    app = create_app(rt, compute_api=None)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://nefos") as c:
        r = await c.post("/v2.1/os-keypairs", content=endless(), headers={**ADMIN, "Content-Type": "application/json"})
    assert r.status_code == 413, r.text
    assert r.json()["overLimit"]["code"] == 413  # Nova's fault name for 413
    assert sent <= limit + 2 * 4096  # stopped reading right after the limit


async def test_a_small_limit_from_the_configuration_applies(rt, client):
    rt.cfg.max_request_body_size = 100
    r = await client.post("/v2.1/os-keypairs", json={"keypair": {"name": "k" * 200}})
    assert r.status_code == 413
    rt.cfg.max_request_body_size = 0  # 0: no limit
    r = await client.post("/v2.1/os-keypairs", json={"keypair": {"name": "k" * 200}})
    assert r.status_code in (200, 201)  # read and created
