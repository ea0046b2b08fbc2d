"""GET /servers/{id}/diagnostics: the fake driver's figures over the bus, both forms (the libvirt
driver's figures from a domain's statistics are checked in tests/libvirt)."""

from __future__ import annotations

import jsonschema

from nefos.control.compute.rest import response_schemas as responses
from tests.api.conftest import version
from tests.clouds import ADMIN, member


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


def test_libvirt_figures_from_a_domain():
    """The libvirt driver's two forms from a domain's statistics (a stand-in domain here; a real
    guest's are checked in tests/libvirt/test_guest_lifecycle.py)."""
    from nefos.model import states
    from nefos.host.virt.libvirt import diagnostics as lv

    class Domain:
        def vcpus(self):
            return [(0, 1, 7_000_000, 0), (1, 1, 9_000_000, 1)], None

        def XMLDesc(self, flags):
            return ("<domain><devices><disk><target dev='vda'/></disk>"
                    "<interface><mac address='fa:16:3e:00:00:01'/><target dev='tap1234'/></interface>"
                    "<interface><mac address='fa:16:3e:00:00:02'/></interface></devices></domain>")

        def blockStats(self, dev):
            return (11, 4096, 22, 8192, -1)

        def interfaceStats(self, dev):
            return (100, 2, 0, 0, 200, 3, 0, 0)

        def maxMemory(self):
            return 524288

        def info(self):
            return [1, 524288, 262144, 2, 16_000_000]

        def memoryStats(self):
            return {"actual": 524288}

    figures = lv.collect(Domain())
    free = lv.free_form(figures)
    assert free["cpu0_time"] == 7_000_000 and free["cpu1_time"] == 9_000_000
    assert (free["vda_read_req"], free["vda_read"], free["vda_write_req"], free["vda_write"]) == (11, 4096, 22, 8192)
    assert free["tap1234_rx"] == 100 and free["tap1234_tx_packets"] == 3 and free["memory"] == 524288
    assert free["memory-actual"] == 524288
    std = lv.standard_form(figures, power_state=states.RUNNING, virt_type="qemu", config_drive=True,
                           instance={"launched_at": "2026-01-01T00:00:00"})
    jsonschema.validate(std, responses.DIAGNOSTICS_V248)
    assert (std["state"], std["hypervisor"], std["num_cpus"], std["num_nics"], std["num_disks"]) == (
        "running", "qemu", 2, 2, 1)
    assert std["nic_details"][0]["rx_octets"] == 100 and std["nic_details"][1]["rx_octets"] is None
    assert std["disk_details"][0] == {"read_bytes": 4096, "read_requests": 11, "write_bytes": 8192,
                                      "write_requests": 22, "errors_count": -1}
    assert std["memory_details"] == {"maximum": 512, "used": 256} and std["uptime"] > 0
