"""The in-process test cloud (conftest.start_cloud) hashes its bootstrap passwords at the cheapest
scrypt cost to start quickly; this one starts with the shipped cost and still boots a server."""

from __future__ import annotations

from sqlalchemy import select

from nefos.config import Config
from nefos.db.models import IdentityUser
from tests.clouds import start_cloud, stop_cloud


async def test_a_cloud_with_the_shipped_password_cost_boots_a_server(tmp_path):
    shipped = Config.model_fields["password_hash_rounds"].default
    cloud = await start_cloud(tmp_path, password_hash_rounds=shipped)
    try:
        async with cloud.rt.db.reader() as s:
            hashes = (await s.execute(select(IdentityUser.password_hash))).scalars().all()
        assert hashes and all(h.startswith(f"scrypt${shipped}$") for h in hashes), hashes
        net = await cloud.make_network()
        server_id = (await cloud.boot(networks=[{"uuid": net["id"]}]))["server"]["id"]
        await cloud.wait_status(server_id, "ACTIVE")
    finally:
        await stop_cloud(cloud)
