"""A real host cut off the network (its namespace's link down, its process and QEMU guests still
running) is judged down and forced down; one of its two servers is evacuated elsewhere (same port,
same fixed IP, bound to the new host). When its link returns, the host's first report that gets
through after ``service_down_time`` without one makes it destroy the evacuated server's guest,
without a restart (Nova does this only at start-up; a partitioned host never restarts), while its
other guest runs on and its server stays ACTIVE there. The evacuation is then ``completed``.

The evacuation goes to the fake host: every real host of the harness shares the machine's libvirtd,
where a domain is named by its instance's UUID, so a real-to-real evacuation would define the new
domain in the very libvirtd that still runs the old one, and the two would collide.
"""

from __future__ import annotations

import time

import pytest

from tests.libvirt.conftest import virsh
from tests.multihost.conftest import FAKE_HOST, REAL_HOSTS, REPORT_INTERVAL, SERVICE_DOWN_TIME
from tests.multihost.test_partition import SLACK, _wait_state

pytestmark = [pytest.mark.libvirt, pytest.mark.postgres, pytest.mark.rabbit]

NET = "mh-evac"
SERVICES = {"OpenStack-API-Version": "compute 2.53"}  # service ids as UUIDs, forced_down by PUT


def _domain_state(uuid: str) -> str:
    """The machine's libvirtd's state of the domain named ``uuid``; "" when it has none."""
    return virsh("domstate", uuid, check=False)


def _force_down(cloud, host: str, forced: bool) -> None:
    r = cloud.compute.get("/v2.1/os-services", params={"binary": "nova-compute", "host": host}, headers=SERVICES)
    assert r.status_code == 200, r.text
    (service,) = r.json()["services"]
    r = cloud.compute.put(f"/v2.1/os-services/{service['id']}", json={"forced_down": forced}, headers=SERVICES)
    assert r.status_code == 200, r.text
    assert r.json()["service"]["forced_down"] is forced


def _until(cloud, condition, what: str, timeout: float):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        cloud.check_alive()
        assert time.monotonic() < deadline, f"{what} within {timeout} s\n{cloud.logs()}"
        time.sleep(0.5)
    return value


def _evacuations(cloud, server_id: str) -> list[dict]:
    r = cloud.compute.get("/v2.1/os-migrations", params={"instance_uuid": server_id},
                          headers={"OpenStack-API-Version": "compute 2.59"})
    assert r.status_code == 200, r.text
    return [m for m in r.json()["migrations"] if m["migration_type"] == "evacuation"]


def test_partitioned_host_back_destroys_its_evacuated_guest_and_keeps_the_other(multihost):
    host = REAL_HOSTS[0]
    (compute,) = [p for p in multihost.processes if p.label == f"{host}:compute"]
    pid = compute.proc.pid
    net = multihost.make_network(NET, "10.65.0.0/24")
    moved = multihost.boot("mh-evacuated", net["id"], host=host)
    kept = multihost.boot("mh-kept", net["id"], host=host)
    partitioned = forced = False
    try:
        servers = {sid: multihost.wait_server(sid, "ACTIVE") for sid in (moved, kept)}
        assert {s["OS-EXT-SRV-ATTR:host"] for s in servers.values()} == {host}
        addresses = {sid: s["addresses"][NET][0]["addr"] for sid, s in servers.items()}
        for sid, addr in addresses.items():
            multihost.wait_console(sid, f"NEFOS-IP: {addr}/24 on eth0")
            assert _domain_state(sid) == "running"

        multihost.partition(host)
        partitioned = True
        _wait_state(multihost, host, "down", SERVICE_DOWN_TIME + REPORT_INTERVAL + SLACK)
        multihost.check_alive()  # cut off, not dead
        _force_down(multihost, host, True)
        forced = True

        r = multihost.compute.post(f"/v2.1/servers/{moved}/action", json={"evacuate": {"host": FAKE_HOST}},
                                   headers={"OpenStack-API-Version": "compute 2.68"})
        assert r.status_code == 200, r.text
        server = multihost.wait_server(moved, "ACTIVE")
        assert server["OS-EXT-SRV-ATTR:host"] == FAKE_HOST
        assert server["addresses"][NET][0]["addr"] == addresses[moved]
        (port,) = multihost.network.get("/v2.0/ports", params={"device_id": moved}).json()["ports"]
        assert port["binding:host_id"] == FAKE_HOST, port
        assert [ip["ip_address"] for ip in port["fixed_ips"]] == [addresses[moved]]
        # Cut off, the host knows nothing of it: its guest runs still, with the same addresses.
        assert _domain_state(moved) == "running"
        assert [m["status"] for m in _evacuations(multihost, moved)] == ["done"]

        multihost.heal(host)
        healed_at, partitioned = time.monotonic(), False
        _force_down(multihost, host, False)
        forced = False
        _until(multihost, lambda: _domain_state(moved) == "",
               f"the evacuated server's domain still in libvirtd after {host} came back", 90)
        gone_after = time.monotonic() - healed_at
        assert _domain_state(kept) == "running"
        _wait_state(multihost, host, "up", 60)
        assert multihost.wait_server(kept, "ACTIVE")["OS-EXT-SRV-ATTR:host"] == host
        assert multihost.wait_server(moved, "ACTIVE")["OS-EXT-SRV-ATTR:host"] == FAKE_HOST
        (migration,) = _until(multihost, lambda: [m for m in _evacuations(multihost, moved)
                                                  if m["status"] == "completed"],
                              "the evacuation never completed", 30)
        assert (migration["source_compute"], migration["dest_compute"]) == (host, FAKE_HOST)
        assert compute.alive() and compute.proc.pid == pid  # the same process throughout: no restart
        print(f"the evacuated guest's domain gone {gone_after:.1f} s after the link returned")
    finally:
        if partitioned:
            multihost.heal(host)
        if forced:
            _force_down(multihost, host, False)
        for sid in (moved, kept):
            multihost.compute.delete(f"/v2.1/servers/{sid}")
        for sid in (moved, kept):
            multihost.wait_server(sid, None)
