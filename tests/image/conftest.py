"""Image service fixtures: a Runtime on a temp SQLite database and the Image API over ASGI."""

from __future__ import annotations

import pytest
from image_helpers import client_for, config

from nefos.control.image.rest import create_app

from tests.schema import open_runtime


@pytest.fixture
async def rt(tmp_path):
    runtime = await open_runtime(config(tmp_path))
    yield runtime
    await runtime.close()


@pytest.fixture
async def api(rt):
    async with client_for(create_app(rt)) as client:
        yield client
