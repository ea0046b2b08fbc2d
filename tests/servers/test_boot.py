"""The boot pipeline end to end: REST API -> compute API -> conductor -> scheduler -> compute -> driver."""

from __future__ import annotations

import asyncio

from tests.clouds import ADMIN, DEMO_PROJECT, member


async def test_boot_show_list_delete(cloud):
    net = await cloud.make_network()
    created = await cloud.boot(name="web", networks=[{"uuid": net["id"]}])
    server_id = created["server"]["id"]
    assert created["server"]["adminPass"]
    server = await cloud.wait_status(server_id, "ACTIVE")
    assert server["OS-EXT-STS:vm_state"] == "active"
    assert server["OS-EXT-STS:power_state"] == 1
    assert server["OS-EXT-SRV-ATTR:host"] in cloud.hosts
    assert server["OS-SRV-USG:launched_at"]
    (addr,) = server["addresses"]["private"]
    assert addr["addr"].startswith("10.0.0.")
    ports = await cloud.ports(device_id=server_id)
    assert len(ports) == 1 and ports[0]["fixed_ips"][0]["ip_address"] == addr["addr"]
    assert ports[0]["binding:host_id"] == server["OS-EXT-SRV-ATTR:host"]
    assert server_id in cloud.driver(server["OS-EXT-SRV-ATTR:host"]).guests

    r = await cloud.compute.get("/v2.1/servers", params={"name": "^we"})
    assert [s["id"] for s in r.json()["servers"]] == [server_id]
    r = await cloud.compute.get("/v2.1/servers/detail", params={"status": "ACTIVE"})
    assert [s["id"] for s in r.json()["servers"]] == [server_id]

    types = [n["event_type"] for n in cloud.notifications]
    assert "instance.create.start" in types and "instance.create.end" in types

    r = await cloud.compute.delete(f"/v2.1/servers/{server_id}")
    assert r.status_code == 204
    await cloud.wait_gone(server_id)
    assert await cloud.ports(device_id=server_id) == []
    assert server_id not in cloud.driver(server["OS-EXT-SRV-ATTR:host"]).guests
    usage = await cloud.hypervisor_usage()
    assert usage == {"vcpus_used": 0, "memory_mb_used": 0, "running_vms": 0, "allocations": 0}


async def test_instance_actions_record_every_step(cloud):
    net = await cloud.make_network()
    server_id = (await cloud.boot(networks=[{"uuid": net["id"]}]))["server"]["id"]
    await cloud.wait_status(server_id, "ACTIVE")
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions")
    # only the create: the network service's network-vif-plugged is recorded within it (as Nova, whose
    # clients count a server's actions), accepted by the API and processed by the compute host
    by_name = {a["action"]: a for a in r.json()["instanceActions"]}
    assert sorted(by_name) == ["create"]
    action = by_name["create"]
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions/{action['request_id']}")
    events = {e["event"]: e for e in r.json()["instanceAction"]["events"]}
    for step in ("conductor_schedule_and_build_instances", "compute__do_build_and_run_instance",
                 "compute_claim_resources", "compute_allocate_network", "compute_prep_block_device",
                 "compute_spawn", "compute_wait_for_vif_plugged", "api_external_instance_event",
                 "compute_external_instance_event"):
        assert events[step]["result"] == "Success", (step, events[step])
        assert events[step]["start_time"] and events[step]["finish_time"]


async def test_power_actions_and_state_conflicts(cloud):
    net = await cloud.make_network()
    server_id = (await cloud.boot(networks=[{"uuid": net["id"]}]))["server"]["id"]
    await cloud.wait_status(server_id, "ACTIVE")

    await cloud.action(server_id, {"os-stop": None})
    server = await cloud.wait_status(server_id, "SHUTOFF")
    assert server["OS-EXT-STS:power_state"] == 4
    await cloud.action(server_id, {"os-stop": None}, expect=409)
    await cloud.action(server_id, {"pause": None}, expect=409)
    await cloud.action(server_id, {"os-start": None})
    await cloud.wait_status(server_id, "ACTIVE")
    await cloud.action(server_id, {"os-start": None}, expect=409)

    await cloud.action(server_id, {"reboot": {"type": "SOFT"}})
    await cloud.wait_status(server_id, "ACTIVE")
    await cloud.action(server_id, {"reboot": {"type": "HARD"}})
    await cloud.wait_status(server_id, "ACTIVE")

    await cloud.action(server_id, {"pause": None})
    server = await cloud.wait_status(server_id, "PAUSED")
    assert server["OS-EXT-STS:power_state"] == 3
    await cloud.action(server_id, {"unpause": None})
    await cloud.wait_status(server_id, "ACTIVE")

    await cloud.action(server_id, {"suspend": None})
    server = await cloud.wait_status(server_id, "SUSPENDED")
    assert server["OS-EXT-STS:power_state"] == 7
    await cloud.action(server_id, {"resume": None})
    await cloud.wait_status(server_id, "ACTIVE")

    host = (await cloud.server(server_id))["OS-EXT-SRV-ATTR:host"]
    assert cloud.driver(host).guests[server_id].power_state == 1

    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions")
    names = [a["action"] for a in r.json()["instanceActions"]]
    assert names.count("reboot") == 2 and "stop" in names and "suspend" in names
    await cloud.action(server_id, {"os-explode": None}, expect=400)  # as Nova answers


async def test_lock_blocks_members_not_admin(cloud):
    headers = member()
    net = await cloud.make_network(headers=headers)
    server_id = (await cloud.boot(networks=[{"uuid": net["id"]}], headers=headers))["server"]["id"]
    await cloud.wait_status(server_id, "ACTIVE", headers=headers)
    await cloud.action(server_id, {"lock": None}, headers=ADMIN)
    await cloud.action(server_id, {"os-stop": None}, headers=headers, expect=409)
    r = await cloud.compute.delete(f"/v2.1/servers/{server_id}", headers=headers)
    assert r.status_code == 409
    await cloud.action(server_id, {"unlock": None}, headers=headers, expect=403)
    await cloud.action(server_id, {"unlock": None}, headers=ADMIN)
    await cloud.action(server_id, {"os-stop": None}, headers=headers)
    await cloud.wait_status(server_id, "SHUTOFF", headers=headers)


async def test_project_isolation_and_quota_release(cloud):
    a, b = member("a" * 32), member("b" * 32)
    net = await cloud.make_network(headers=a)
    server_id = (await cloud.boot(networks=[{"uuid": net["id"]}], headers=a))["server"]["id"]
    await cloud.wait_status(server_id, "ACTIVE", headers=a)
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}", headers=b)
    assert r.status_code == 404
    r = await cloud.compute.get("/v2.1/servers", headers=b)
    assert r.json()["servers"] == []
    assert (await cloud.quota_usage("a" * 32))["instances"] == 1
    r = await cloud.compute.delete(f"/v2.1/servers/{server_id}", headers=a)
    await cloud.wait_gone(server_id, headers=a)
    usage = await cloud.quota_usage("a" * 32)
    assert (usage["instances"], usage["cores"], usage["ram"]) == (0, 0, 0)


async def test_quota_exceeded_is_403_and_leaves_nothing(cloud):
    headers = member()
    net = await cloud.make_network(headers=headers)
    r = await cloud.compute.post("/v2.1/servers", headers=headers, json={"server": {
        "name": "many", "imageRef": await cloud.default_image(), "flavorRef": "1",
        "networks": [{"uuid": net["id"]}], "min_count": 11, "max_count": 11}})
    assert r.status_code == 403, r.text
    assert "Quota exceeded for instances" in r.json()["forbidden"]["message"]
    assert (await cloud.quota_usage(DEMO_PROJECT))["instances"] == 0
    r = await cloud.compute.get("/v2.1/servers", headers=headers)
    assert r.json()["servers"] == []


async def test_multi_create_reservation_and_pagination(cloud):
    net = await cloud.make_network()
    r = await cloud.compute.post("/v2.1/servers", json={"server": {
        "name": "batch", "imageRef": await cloud.default_image(), "flavorRef": "1",
        "networks": [{"uuid": net["id"]}], "min_count": 3, "max_count": 3,
        "return_reservation_id": True}})
    assert r.status_code == 202, r.text
    reservation_id = r.json()["reservation_id"]
    r = await cloud.compute.get("/v2.1/servers/detail", params={"reservation_id": reservation_id})
    servers = r.json()["servers"]
    assert sorted(s["name"] for s in servers) == ["batch-1", "batch-2", "batch-3"]
    for s in servers:
        await cloud.wait_status(s["id"], "ACTIVE")
    r = await cloud.compute.get("/v2.1/servers", params={"limit": 2})
    page1 = r.json()
    assert len(page1["servers"]) == 2 and page1["servers_links"][0]["rel"] == "next"
    marker = page1["servers"][-1]["id"]
    r = await cloud.compute.get("/v2.1/servers", params={"limit": 2, "marker": marker})
    page2 = r.json()["servers"]
    assert len(page2) == 1
    assert {s["id"] for s in page1["servers"]} | {page2[0]["id"]} == {s["id"] for s in servers}


async def test_concurrent_boots_spread_and_never_overcommit(tmp_path):
    from tests.clouds import start_cloud, stop_cloud
    # Two small hosts: 4 vCPUs each at ratio 1.0 fit exactly 8 one-vCPU servers.
    harness = await start_cloud(tmp_path, fake_hosts=2, fake_vcpus=4, cpu_allocation_ratio=1.0,
                                quota_instances=-1, quota_cores=-1, quota_ram=-1)
    try:
        net = await harness.make_network()
        created = await asyncio.gather(*[harness.boot(name=f"c{i}", networks=[{"uuid": net["id"]}])
                                         for i in range(10)])
        ids = [c["server"]["id"] for c in created]
        results = [await harness.wait_status(i, {"ACTIVE", "ERROR"}) for i in ids]
        active = [s for s in results if s["status"] == "ACTIVE"]
        errors = [s for s in results if s["status"] == "ERROR"]
        assert len(active) == 8 and len(errors) == 2
        per_host = {}
        for s in active:
            per_host[s["OS-EXT-SRV-ATTR:host"]] = per_host.get(s["OS-EXT-SRV-ATTR:host"], 0) + 1
        assert per_host == {"host-1": 4, "host-2": 4}
        assert all("No valid host" in s["fault"]["message"] for s in errors)
        ips = [a["addr"] for s in active for a in s["addresses"]["private"]]
        assert len(ips) == len(set(ips)) == 8
    finally:
        await stop_cloud(harness)
