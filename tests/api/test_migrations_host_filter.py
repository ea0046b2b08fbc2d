"""os-migrations tells a caller without ``os_compute_api:os-migrations:index:host`` (a project's
manager, by Nova's defaults) nothing about host names: the hosts are hidden in what it lists, and
the filters that name a host or node (``host``, ``source_compute``, ``node``) are ignored for it, as
Nova ignores the server list's admin-only filters for a non-admin. The answer is the same whether
the name guessed is a host the project's servers moved through, another real host, or no host.
An admin's filters work as before.
"""

from __future__ import annotations

import pytest
import pytest_asyncio

from tests.clouds import ADMIN, start_cloud, stop_cloud

pytestmark = pytest.mark.asyncio(loop_scope="module")

PROJECT = "a1" * 16
MANAGER = {"X-Project-Id": PROJECT, "X-User-Id": "b2" * 16, "X-Roles": "manager,member,reader"}
ADMIN_280 = {**ADMIN, "OpenStack-API-Version": "compute 2.80"}
# Each filter with the microversions that take it (from 2.59 the query schema allows no ``node``).
HOST_FILTERS = [("host", "2.1"), ("host", "2.80"), ("source_compute", "2.1"), ("source_compute", "2.80"),
                ("node", "2.1")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cloud(tmp_path_factory):
    """Two hosts; a server of PROJECT resized from one to the other (a finished migration)."""
    harness = await start_cloud(tmp_path_factory.mktemp("migrations-host"), fake_hosts=2)
    try:
        net = await harness.make_network(headers=MANAGER)
        sid = (await harness.boot(networks=[{"uuid": net["id"]}], headers=MANAGER))["server"]["id"]
        await harness.wait_status(sid, "ACTIVE", headers=MANAGER)
        await harness.action(sid, {"resize": {"flavorRef": "2"}}, headers=MANAGER)
        await harness.wait_status(sid, "VERIFY_RESIZE", headers=MANAGER)
        r = await harness.compute.get("/v2.1/os-migrations", params={"instance_uuid": sid}, headers=ADMIN_280)
        (migration,) = r.json()["migrations"]
        harness.migration = migration
        yield harness
    finally:
        await stop_cloud(harness)


async def listed(cloud, headers, **filters) -> list[dict]:
    r = await cloud.compute.get("/v2.1/os-migrations", params={"project_id": PROJECT, **filters}, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()["migrations"]


@pytest.mark.parametrize(("name", "version"), HOST_FILTERS)
async def test_a_manager_filtering_by_a_host_name_learns_nothing(cloud, name, version):
    manager = {**MANAGER, "OpenStack-API-Version": f"compute {version}"}
    migration = cloud.migration
    real = {"host": migration["source_compute"], "source_compute": migration["source_compute"],
            "node": migration["source_node"]}[name]
    other_real = {"host": "controller", "source_compute": migration["dest_compute"],
                  "node": migration["dest_node"]}[name]
    unfiltered = await listed(cloud, manager)
    assert [m["id"] for m in unfiltered] == [migration["id"]]
    assert all(m[key] is None for m in unfiltered
               for key in ("source_compute", "dest_compute", "source_node", "dest_node", "dest_host"))
    answers = [await listed(cloud, manager, **{name: guess})
               for guess in (real, other_real, "no-such-host", "")]
    assert all(answer == unfiltered for answer in answers), answers


async def test_an_admin_still_filters_by_host(cloud):
    migration = cloud.migration
    assert [m["uuid"] for m in await listed(cloud, ADMIN_280, host=migration["dest_compute"])] == [migration["uuid"]]
    assert await listed(cloud, ADMIN_280, host="no-such-host") == []
    assert await listed(cloud, ADMIN_280, source_compute=migration["dest_compute"]) == []
    admin_21 = {**ADMIN, "OpenStack-API-Version": "compute 2.1"}
    assert [m["id"] for m in await listed(cloud, admin_21, node=migration["source_node"])] == [migration["id"]]
    assert await listed(cloud, admin_21, node="no-such-node") == []
