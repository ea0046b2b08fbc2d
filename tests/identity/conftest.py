"""Identity fixtures: a Runtime on a temp SQLite database, bootstrapped, and the Identity API over ASGI."""

from __future__ import annotations

import httpx
import pytest
from identity_helpers import get_token, make_config

from nefos.control.identity.bootstrap import bootstrap
from nefos.control.identity.rest import create_app

from tests.schema import open_runtime


@pytest.fixture
def cfg_overrides():
    return {}


@pytest.fixture
async def rt(tmp_path, cfg_overrides):
    runtime = await open_runtime(make_config(tmp_path, **cfg_overrides))
    yield runtime
    await runtime.close()


@pytest.fixture
async def creds(rt):
    return await bootstrap(rt)


@pytest.fixture
async def api(rt, creds):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(rt)),
                                 base_url="http://identity.test") as client:
        yield client


@pytest.fixture
async def admin_token(api, creds):
    return await get_token(api, "admin", creds["admin"]["password"], "admin")


@pytest.fixture
async def demo_token(api, creds):
    return await get_token(api, "demo", creds["demo"]["password"], "demo")


