"""``/servers/{id}/os-interface`` through the whole cloud (fake driver and its fake L2 agent): attach by
network, by port and by fixed IP, detach, the errors Nova answers, and the network-vif-plugged wait
(fatal, not fatal, the shipped defaults)."""

from __future__ import annotations

import pytest

from tests.events.conftest import QUICK, action_events, agent, eventually
from tests.clouds import DEMO_PROJECT, member, start_cloud, stop_cloud

OTHER = member(project="b" * 32, user="v" * 32)


def v(version: str, headers: dict | None = None) -> dict:
    return {**(headers or member()), "OpenStack-API-Version": f"compute {version}"}


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=1, **QUICK)  # the shipped vif_plugging_* defaults
    yield harness
    await stop_cloud(harness)


async def _server(cloud, name="vm", net=None) -> tuple[str, dict]:
    net = net or await cloud.make_network("first", "10.0.0.0/24", headers=member())
    server_id = (await cloud.boot(name=name, networks=[{"uuid": net["id"]}], headers=member()))["server"]["id"]
    await cloud.wait_status(server_id, "ACTIVE", headers=member())
    return server_id, net


async def _attach(cloud, server_id, attachment: dict, expect=200, headers=None):
    r = await cloud.compute.post(f"/v2.1/servers/{server_id}/os-interface", json={"interfaceAttachment": attachment},
                                 headers=headers or member())
    assert r.status_code == expect, r.text
    return r.json()


async def _interfaces(cloud, server_id, headers=None) -> list[dict]:
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-interface", headers=headers or member())
    assert r.status_code == 200, r.text
    return r.json()["interfaceAttachments"]


async def _port(cloud, port_id) -> dict | None:
    r = await cloud.network.get(f"/v2.0/ports/{port_id}")
    return r.json()["port"] if r.status_code == 200 else None


async def _addresses(cloud, server_id) -> dict:
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/ips", headers=member())
    assert r.status_code == 200, r.text
    return r.json()["addresses"]


def _of(events: list[dict], action: str) -> dict[str, dict]:
    return {e["event"]: e for e in events if e["action"] == action}


async def test_attach_by_network_then_detach(cloud):
    server_id, first = await _server(cloud)
    second = await cloud.make_network("second", "10.1.0.0/24", headers=member())
    (original,) = await _interfaces(cloud, server_id)
    assert original["net_id"] == first["id"] and original["port_state"] == "ACTIVE"

    attached = (await _attach(cloud, server_id, {"net_id": second["id"]}))["interfaceAttachment"]
    # The host waited for network-vif-plugged: the port is ACTIVE when the answer comes.
    assert attached["net_id"] == second["id"] and attached["port_state"] == "ACTIVE"
    assert attached["fixed_ips"][0]["ip_address"].startswith("10.1.0.") and "tag" not in attached
    port = await _port(cloud, attached["port_id"])
    assert port["device_id"] == server_id and port["binding:host_id"] == cloud.hosts[0]
    assert port["mac_address"] == attached["mac_addr"]
    assert {i["port_id"] for i in await _interfaces(cloud, server_id)} == {original["port_id"], attached["port_id"]}
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-interface/{attached['port_id']}", headers=member())
    assert r.status_code == 200 and r.json()["interfaceAttachment"] == attached
    assert [a["addr"] for a in (await _addresses(cloud, server_id))["second"]] == [attached["fixed_ips"][0]["ip_address"]]
    guest = cloud.driver(cloud.hosts[0]).guests[server_id]
    assert guest.vifs == [original["port_id"], attached["port_id"]]

    events = _of(await action_events(cloud, server_id), "attach_interface")
    assert events["compute_attach_interface"]["result"] == "Success"
    assert events["compute_wait_for_vif_plugged"]["result"] == "Success"
    assert f"network-vif-plugged-{attached['port_id']} completed" in events["compute_wait_for_vif_plugged"]["details"]
    kinds = [n["event_type"] for n in cloud.notifications]
    assert kinds.index("instance.interface_attach.start") < kinds.index("instance.interface_attach.end")

    r = await cloud.compute.delete(f"/v2.1/servers/{server_id}/os-interface/{attached['port_id']}", headers=member())
    assert r.status_code == 202, r.text

    async def detached():
        return [i["port_id"] for i in await _interfaces(cloud, server_id)] == [original["port_id"]]
    await eventually(detached)
    await eventually(lambda: _gone(cloud, attached["port_id"]))  # made for the server: deleted
    await eventually(lambda: _detach_finished(cloud, server_id))
    assert "second" not in await _addresses(cloud, server_id)
    assert guest.vifs == [original["port_id"]] and attached["port_id"] not in cloud.driver(cloud.hosts[0]).plugged_vifs
    detach_events = _of(await action_events(cloud, server_id), "detach_interface")
    assert detach_events["compute_detach_interface"]["result"] == "Success"
    # The host waited for the deleted port's network-vif-deleted (the shipped vif_plugging_timeout).
    assert detach_events["compute_wait_for_vif_deleted"]["result"] == "Success", detach_events
    assert f"network-vif-deleted-{attached['port_id']} completed" in detach_events[
        "compute_wait_for_vif_deleted"]["details"]
    kinds = [n["event_type"] for n in cloud.notifications]
    assert kinds.index("instance.interface_detach.start") < kinds.index("instance.interface_detach.end")
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions", headers=member())
    assert {"attach_interface", "detach_interface"} <= {a["action"] for a in r.json()["instanceActions"]}


async def _gone(cloud, port_id) -> bool:
    return await _port(cloud, port_id) is None


async def _detach_finished(cloud, server_id) -> bool:
    return "compute_detach_interface" in _of(await action_events(cloud, server_id), "detach_interface")


async def test_attach_by_port_fixed_ip_and_tag(cloud):
    server_id, _first = await _server(cloud)
    second = await cloud.make_network("second", "10.1.0.0/24", headers=member())
    r = await cloud.network.post("/v2.0/ports", json={"port": {"network_id": second["id"], "name": "mine"}},
                                 headers=member())
    assert r.status_code == 201, r.text
    mine = r.json()["port"]
    attached = (await _attach(cloud, server_id, {"port_id": mine["id"]}))["interfaceAttachment"]
    assert attached["port_id"] == mine["id"] and attached["mac_addr"] == mine["mac_address"]
    assert attached["fixed_ips"] == [{"subnet_id": f["subnet_id"], "ip_address": f["ip_address"]}
                                     for f in mine["fixed_ips"]]
    by_ip = (await _attach(cloud, server_id, {"net_id": second["id"], "fixed_ips": [{"ip_address": "10.1.0.50"}],
                                              "tag": "nic3"}, headers=v("2.70")))["interfaceAttachment"]
    assert [f["ip_address"] for f in by_ip["fixed_ips"]] == ["10.1.0.50"] and by_ip["tag"] == "nic3"
    tags = {i["port_id"]: i["tag"] for i in await _interfaces(cloud, server_id, headers=v("2.70"))}
    assert tags[by_ip["port_id"]] == "nic3" and tags[mine["id"]] is None
    assert sorted(a["addr"] for a in (await _addresses(cloud, server_id))["second"]) == sorted(
        [mine["fixed_ips"][0]["ip_address"], "10.1.0.50"])

    # The user's own port is given back, not deleted.
    r = await cloud.compute.delete(f"/v2.1/servers/{server_id}/os-interface/{mine['id']}", headers=member())
    assert r.status_code == 202, r.text

    async def given_back():
        port = await _port(cloud, mine["id"])
        return port is not None and port["device_id"] == "" and port["binding:host_id"] == ""
    await eventually(given_back)
    await eventually(lambda: _detach_finished(cloud, server_id))
    assert mine["id"] not in {i["port_id"] for i in await _interfaces(cloud, server_id)}
    # Now free: it can be attached again.
    await _attach(cloud, server_id, {"port_id": mine["id"]})


async def test_errors(cloud):
    server_id, first = await _server(cloud)
    other_id, _ = await _server(cloud, "other-vm", net=first)
    second = await cloud.make_network("second", "10.1.0.0/24", headers=member())
    (other_port,) = await _interfaces(cloud, other_id)
    r = await cloud.network.post("/v2.0/ports", json={"port": {"network_id": second["id"]}}, headers=member())
    free_port = r.json()["port"]
    base = f"/v2.1/servers/{server_id}/os-interface"

    await _attach(cloud, server_id, {"net_id": second["id"], "port_id": free_port["id"]}, expect=400)
    await _attach(cloud, server_id, {"fixed_ips": [{"ip_address": "10.1.0.9"}]}, expect=400)
    await _attach(cloud, server_id, {"net_id": "not-a-uuid"}, expect=400)
    await _attach(cloud, server_id, {"net_id": second["id"], "tag": "t"}, expect=400)  # a tag before 2.49
    await _attach(cloud, server_id, {"port_id": other_port["port_id"]}, expect=409)  # in use by another server
    await _attach(cloud, server_id, {"net_id": "0" * 8 + "-0000-4000-8000-" + "0" * 12}, expect=404)
    await _attach(cloud, server_id, {"port_id": "0" * 8 + "-0000-4000-8000-" + "0" * 12}, expect=404)
    await _attach(cloud, server_id, {"net_id": second["id"], "fixed_ips": [{"ip_address": "192.168.9.9"}]},
                  expect=400)  # not on the network
    assert len(await _interfaces(cloud, server_id)) == 1
    r = await cloud.compute.get(f"{base}/{other_port['port_id']}", headers=member())
    assert r.status_code == 404, r.text  # attached, but to another server
    r = await cloud.compute.delete(f"{base}/{free_port['id']}", headers=member())
    assert r.status_code == 404, r.text

    # Another project: the server does not exist for it; its own network and port are not ours.
    for method in ("get", "post"):
        kwargs = {"json": {"interfaceAttachment": {"net_id": second["id"]}}} if method == "post" else {}
        r = await getattr(cloud.compute, method)(base, headers=OTHER, **kwargs)
        assert r.status_code == 404, r.text
    r = await cloud.compute.delete(f"{base}/{(await _interfaces(cloud, server_id))[0]['port_id']}", headers=OTHER)
    assert r.status_code == 404, r.text
    theirs = await cloud.make_network("theirs", "10.2.0.0/24", headers=OTHER)
    await _attach(cloud, server_id, {"net_id": theirs["id"]}, expect=404)
    r = await cloud.network.post("/v2.0/ports", json={"port": {"network_id": theirs["id"]}}, headers=OTHER)
    await _attach(cloud, server_id, {"port_id": r.json()["port"]["id"]}, expect=404)
    assert len(await _interfaces(cloud, server_id)) == 1

    # Locked (by its owner): 409 for a non-admin, an admin may.
    await cloud.action(server_id, {"lock": None}, headers=member())
    await _attach(cloud, server_id, {"net_id": second["id"]}, expect=409)
    r = await cloud.compute.post(base, json={"interfaceAttachment": {"net_id": second["id"]}})  # admin
    assert r.status_code == 200, r.text
    await cloud.action(server_id, {"unlock": None}, headers=member())

    # Suspended: not a state an interface can be attached in (Nova: active, paused, stopped).
    await cloud.action(server_id, {"suspend": None}, headers=member())
    await cloud.wait_status(server_id, "SUSPENDED", headers=member())
    await _attach(cloud, server_id, {"net_id": second["id"]}, expect=409)
    await cloud.action(server_id, {"resume": None}, headers=member())
    await cloud.wait_status(server_id, "ACTIVE", headers=member())
    # Stopped: allowed (the NIC is there at the next start); nothing to wait for meanwhile.
    await cloud.action(server_id, {"os-stop": None}, headers=member())
    await cloud.wait_status(server_id, "SHUTOFF", headers=member())
    await _attach(cloud, server_id, {"net_id": second["id"]})
    assert len(await _interfaces(cloud, server_id)) == 3


async def test_vif_plugged_timeout_fatal_undoes_the_attach(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, vif_plugging_timeout=1.0, vif_plugging_is_fatal=True, **QUICK)
    try:
        server_id, _first = await _server(cloud)
        second = await cloud.make_network("second", "10.1.0.0/24", headers=member())
        r = await cloud.network.post("/v2.0/ports", json={"port": {"network_id": second["id"]}}, headers=member())
        mine = r.json()["port"]
        before = (await cloud.server(server_id))["addresses"]
        (original,) = await _interfaces(cloud, server_id)
        await agent(cloud, cloud.hosts[0]).stop()  # nobody wires the new VIF: no network-vif-plugged

        body = await _attach(cloud, server_id, {"net_id": second["id"]}, expect=500)
        assert "Failed to attach network adapter device" in str(body)
        await _attach(cloud, server_id, {"port_id": mine["id"]}, expect=500)

        assert [i["port_id"] for i in await _interfaces(cloud, server_id)] == [original["port_id"]]
        assert [p["id"] for p in await cloud.ports(network_id=second["id"])] == [mine["id"]]  # the made one deleted
        port = await _port(cloud, mine["id"])
        assert port["device_id"] == "" and port["binding:host_id"] == ""  # the user's given back
        assert (await cloud.server(server_id))["addresses"] == before
        assert cloud.driver(cloud.hosts[0]).guests[server_id].vifs == [original["port_id"]]
        assert set(cloud.driver(cloud.hosts[0]).plugged_vifs) == {original["port_id"]}
        events = [e for e in await action_events(cloud, server_id)
                  if e["action"] == "attach_interface" and e["event"] in ("compute_attach_interface",
                                                                         "compute_wait_for_vif_plugged")]
        assert [(e["event"], e["result"]) for e in events] == [
            ("compute_attach_interface", "Error"), ("compute_wait_for_vif_plugged", "Error")] * 2
        assert "timed out" in events[1]["details"]
        assert "instance.interface_attach.error" in [n["event_type"] for n in cloud.notifications]
        assert (await cloud.server(server_id))["status"] == "ACTIVE"
    finally:
        await stop_cloud(cloud)


async def test_vif_plugged_timeout_not_fatal_keeps_the_attach(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, vif_plugging_timeout=1.0, vif_plugging_is_fatal=False, **QUICK)
    try:
        server_id, _first = await _server(cloud)
        second = await cloud.make_network("second", "10.1.0.0/24", headers=member())
        await agent(cloud, cloud.hosts[0]).stop()
        attached = (await _attach(cloud, server_id, {"net_id": second["id"]}))["interfaceAttachment"]
        assert attached["port_state"] == "DOWN"
        assert len(await _interfaces(cloud, server_id)) == 2
        assert "second" in await _addresses(cloud, server_id)
        events = _of(await action_events(cloud, server_id), "attach_interface")
        assert events["compute_wait_for_vif_plugged"]["result"] == "Warning"
        assert events["compute_attach_interface"]["result"] == "Success"
        await agent(cloud, cloud.hosts[0]).start()  # the agent comes back and wires it

        async def active():
            return (await _port(cloud, attached["port_id"]))["status"] == "ACTIVE"
        await eventually(active)
    finally:
        await stop_cloud(cloud)


async def test_policy_reader_may_list_not_attach(cloud):
    server_id, first = await _server(cloud)
    reader = {"X-Project-Id": DEMO_PROJECT, "X-User-Id": "r" * 32, "X-Roles": "reader"}
    assert len(await _interfaces(cloud, server_id, headers=reader)) == 1
    await _attach(cloud, server_id, {"net_id": first["id"]}, expect=403, headers=reader)
