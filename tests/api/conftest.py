"""The Compute API app over a fresh Runtime (temp SQLite, noauth), driven through httpx."""

from __future__ import annotations

import httpx
import pytest

from nefos.control.compute.rest.app import create_app
from nefos.config import Config, load_config

from tests.noauth import ADMIN  # noqa: E402  (the default clients send it)
from tests.schema import open_runtime
PROJECT = "p" * 32
USER = "u" * 32


def member(project: str = PROJECT, user: str = USER) -> dict:
    return {"X-Project-Id": project, "X-User-Id": user, "X-Roles": "member,reader"}


def version(v: str, headers: dict | None = None) -> dict:
    """Headers asking for compute microversion ``v`` (on top of ``headers``)."""
    return {**(headers or {}), "OpenStack-API-Version": f"compute {v}"}


@pytest.fixture
async def rt(tmp_path):
    overrides = {"auth_strategy": "noauth"} if "auth_strategy" in Config.model_fields else {}
    runtime = await open_runtime(load_config(state_dir=tmp_path, **overrides))
    from nefos.control.compute.flavors import ensure_default_flavors
    await ensure_default_flavors(runtime.db)
    yield runtime
    await runtime.close()


@pytest.fixture
async def app(rt):
    return create_app(rt, compute_api=None)


@pytest.fixture
async def client(app):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://nefos",
                                 headers=ADMIN) as c:
        yield c
