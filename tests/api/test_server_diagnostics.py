"""GET /servers/{id}/diagnostics: the fake driver's figures over the bus, both forms (the libvirt
driver's figures from a domain's statistics are checked in tests/libvirt)."""

from __future__ import annotations

import jsonschema

from nefos.api import response_schemas as responses
from tests.api.conftest import version
from tests.pipeline.conftest import ADMIN, cloud, member  # noqa: F401 (the cloud fixture)


async def _server(cloud):
    net = await cloud.make_network(shared=True)
    sid = (await cloud.boot(networks=[{"uuid": net["id"]}], headers=member()))["server"]["id"]
    server = await cloud.wait_status(sid, "ACTIVE")
    return sid, server


async def test_both_forms(cloud):
    sid, server = await _server(cloud)
    r = await cloud.compute.get(f"/v2.1/servers/{sid}/diagnostics")
    assert r.status_code == 200, r.text
    body = r.json()
    flavor = (await cloud.compute.get("/v2.1/flavors/1")).json()["flavor"]
    assert body["memory"] == flavor["ram"] * 1024
    assert {k for k in body if k.startswith("cpu")} == {f"cpu{i}_time" for i in range(flavor["vcpus"])}
    r = await cloud.compute.get(f"/v2.1/servers/{sid}/diagnostics", headers=version("2.48", ADMIN))
    assert r.status_code == 200, r.text
    body = r.json()
    jsonschema.validate(body, responses.DIAGNOSTICS_V248)
    macs = [vif["mac_addr"] for vif in (await cloud.compute.get(
        f"/v2.1/servers/{sid}/os-interface")).json()["interfaceAttachments"]]
    assert body["state"] == "running" and body["driver"] == "libvirt"
    assert body["num_cpus"] == flavor["vcpus"] == len(body["cpu_details"])
    assert [nic["mac_address"] for nic in body["nic_details"]] == macs and body["num_nics"] == len(macs)
    assert body["num_disks"] == len(body["disk_details"]) == 1
    assert body["memory_details"]["maximum"] == flavor["ram"]
    assert body["config_drive"] is False and isinstance(body["uptime"], int)


async def test_not_running_is_409_and_policy_and_scope(cloud):
    sid, server = await _server(cloud)
    r = await cloud.compute.get(f"/v2.1/servers/{sid}/diagnostics", headers=member())
    assert r.status_code == 403, r.text
    r = await cloud.compute.get(f"/v2.1/servers/{sid}/diagnostics", headers=member(project="o" * 32))
    assert r.status_code == 404, r.text
    await cloud.action(sid, {"os-stop": None})
    await cloud.wait_status(sid, "SHUTOFF")
    for headers in (ADMIN, version("2.48", ADMIN)):
        r = await cloud.compute.get(f"/v2.1/servers/{sid}/diagnostics", headers=headers)
        assert r.status_code == 409, r.text
        assert r.json()["conflictingRequest"]["message"] == (
            f"Cannot 'get_diagnostics' instance {sid} while it is in power state shutdown")


async def test_a_server_not_spawned_yet_is_409(cloud):
    sid, server = await _server(cloud)
    driver = cloud.driver(server["OS-EXT-SRV-ATTR:host"])
    driver.guests.pop(sid)  # as while the build runs: a host, no guest yet
    r = await cloud.compute.get(f"/v2.1/servers/{sid}/diagnostics")
    assert r.status_code == 409 and "power state pending" in r.text, r.text


async def test_a_driver_without_diagnostics_is_501(cloud):
    sid, server = await _server(cloud)
    driver = cloud.driver(server["OS-EXT-SRV-ATTR:host"])

    async def none(instance):
        raise NotImplementedError
    driver.get_diagnostics = driver.get_instance_diagnostics = none
    for headers in (ADMIN, version("2.48", ADMIN)):
        r = await cloud.compute.get(f"/v2.1/servers/{sid}/diagnostics", headers=headers)
        assert r.status_code == 501 and r.json()["notImplemented"]["code"] == 501, r.text
