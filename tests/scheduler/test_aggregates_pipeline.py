"""Aggregates through the whole pipeline (two fake hosts): the flow of ``openstack aggregate create
--zone z1 agg1``, ``openstack aggregate add host agg1 host-2`` and ``openstack server create
--availability-zone z1``, then the filters that read aggregates and the scheduler hints."""

from __future__ import annotations

from tests.clouds import member

AGG = "/v2.1/os-aggregates"


async def aggregate(cloud, name: str, zone: str | None = None, hosts=(), metadata=None) -> dict:
    body = {"name": name, **({"availability_zone": zone} if zone else {})}
    r = await cloud.compute.post(AGG, json={"aggregate": body})
    assert r.status_code == 200, r.text
    agg = r.json()["aggregate"]
    for host in hosts:
        r = await cloud.compute.post(f"{AGG}/{agg['id']}/action", json={"add_host": {"host": host}})
        assert r.status_code == 200, r.text
    if metadata:
        r = await cloud.compute.post(f"{AGG}/{agg['id']}/action", json={"set_metadata": {"metadata": metadata}})
        assert r.status_code == 200, r.text
    return agg


async def boot(cloud, net: dict, *, flavor: str = "1", headers=None, hints=None, **server) -> dict:
    body = {"server": {"name": "s", "imageRef": await cloud.default_image(), "flavorRef": flavor,
                       "networks": [{"uuid": net["id"]}], **server}}
    if hints:
        body["os:scheduler_hints"] = hints
    r = await cloud.compute.post("/v2.1/servers", json=body, headers=headers)
    assert r.status_code == 202, r.text
    return await cloud.wait_status(r.json()["server"]["id"], {"ACTIVE", "ERROR"})


async def test_a_server_booted_in_an_aggregate_zone_lands_on_its_host(cloud):
    net = await cloud.make_network()
    agg = await aggregate(cloud, "agg1", "z1", hosts=["host-2"])
    r = await cloud.compute.get("/v2.1/os-availability-zone")
    assert {z["zoneName"] for z in r.json()["availabilityZoneInfo"]} == {"nova", "z1"}
    for _ in range(3):
        server = await boot(cloud, net, availability_zone="z1")
        assert server["status"] == "ACTIVE", server
        assert server["OS-EXT-SRV-ATTR:host"] == "host-2"
        assert server["OS-EXT-AZ:availability_zone"] == "z1"
    server = await boot(cloud, net, availability_zone="nova")
    assert server["OS-EXT-SRV-ATTR:host"] == "host-1" and server["OS-EXT-AZ:availability_zone"] == "nova"
    r = await cloud.compute.post("/v2.1/servers", json={"server": {
        "name": "s", "imageRef": await cloud.default_image(), "flavorRef": "1",
        "networks": [{"uuid": net["id"]}], "availability_zone": "z-unknown"}})
    assert r.status_code == 400 and "The requested availability zone is not available" in r.text
    # host-2 now has servers: it can neither leave z1 nor have z1 renamed under them.
    r = await cloud.compute.post(f"{AGG}/{agg['id']}/action", json={"remove_host": {"host": "host-2"}})
    assert r.status_code == 409, r.text
    r = await cloud.compute.put(f"{AGG}/{agg['id']}", json={"aggregate": {"availability_zone": "z2"}})
    assert r.status_code == 400, r.text
    other = await aggregate(cloud, "agg2", "z2")
    r = await cloud.compute.post(f"{AGG}/{other['id']}/action", json={"add_host": {"host": "host-2"}})
    assert r.status_code == 409, r.text


async def test_aggregate_extra_specs_and_tenant_isolation(cloud):
    net = await cloud.make_network(shared=True)
    await aggregate(cloud, "fast", hosts=["host-1"], metadata={"ssd": "true"})
    r = await cloud.compute.post("/v2.1/flavors", json={"flavor": {"name": "ssd", "id": "ssd", "ram": 64,
                                                                   "vcpus": 1, "disk": 1}})
    assert r.status_code == 200, r.text
    r = await cloud.compute.post("/v2.1/flavors/ssd/os-extra_specs",
                                 json={"extra_specs": {"aggregate_instance_extra_specs:ssd": "true"}})
    assert r.status_code == 200, r.text
    for _ in range(2):
        server = await boot(cloud, net, flavor="ssd")
        assert server["status"] == "ACTIVE" and server["OS-EXT-SRV-ATTR:host"] == "host-1", server
    # host-1 is reserved for another project: the demo project's servers go to host-2.
    await aggregate(cloud, "private", hosts=["host-1"], metadata={"filter_tenant_id": "another-project"})
    for _ in range(2):
        r = await cloud.compute.post("/v2.1/servers", headers=member(), json={"server": {
            "name": "m", "imageRef": await cloud.default_image(), "flavorRef": "1",
            "networks": [{"uuid": net["id"]}]}})
        assert r.status_code == 202, r.text
        server = await cloud.wait_status(r.json()["server"]["id"], {"ACTIVE", "ERROR"})
        assert server["OS-EXT-SRV-ATTR:host"] == "host-2", server
    # Only host-1 has the ssd metadata, and the project may not use it: no valid host.
    server = await boot(cloud, net, flavor="ssd", headers=member())
    assert server["status"] == "ERROR"


async def test_same_host_and_different_host_hints(cloud):
    net = await cloud.make_network()
    first = await boot(cloud, net)
    host = first["OS-EXT-SRV-ATTR:host"]
    for _ in range(2):
        server = await boot(cloud, net, hints={"same_host": first["id"]})
        assert server["OS-EXT-SRV-ATTR:host"] == host
        server = await boot(cloud, net, hints={"different_host": [first["id"]]})
        assert server["status"] == "ACTIVE" and server["OS-EXT-SRV-ATTR:host"] != host
    r = await cloud.compute.post("/v2.1/servers", json={
        "server": {"name": "s", "imageRef": await cloud.default_image(), "flavorRef": "1",
                   "networks": [{"uuid": net["id"]}]}, "os:scheduler_hints": {"different_host": "not-a-uuid"}})
    assert r.status_code == 400, r.text
