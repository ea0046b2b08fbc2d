"""The metadata service against a running cloud: a server's OpenStack and EC2 trees, field by field
against what the Compute API says of the server, and who may read them (signed requests only)."""

from __future__ import annotations

import base64
import json
import uuid

from nefos.model.instance_metadata import EC2_VERSIONS, OPENSTACK_VERSIONS
from tests.metadata.conftest import ADMIN_2_3, META, USER_DATA, boot_described, mdcloud  # noqa: F401
from tests.clouds import member


def _fixed_ip(server: dict) -> str:
    (addresses,) = server["addresses"].values()
    return addresses[0]["addr"]


async def test_the_openstack_tree_is_the_server_s(mdcloud):
    cloud = mdcloud
    server, keypair = await boot_described(cloud)
    proxy = cloud.proxy

    r = await proxy.fetch(server, "/openstack")
    assert r.text.split("\n") == OPENSTACK_VERSIONS + ["latest"]
    r = await proxy.fetch(server, "/openstack/latest/")
    assert r.text.split("\n") == ["meta_data.json", "user_data", "password", "vendor_data.json",
                                  "network_data.json", "vendor_data2.json"]
    assert (await proxy.fetch(server, "/openstack/2012-08-10")).text.split("\n") == ["meta_data.json", "user_data"]

    r = await proxy.fetch(server, "/openstack/latest/meta_data.json")
    assert r.headers["content-type"].startswith("application/json")
    md = r.json()
    assert md["uuid"] == server["id"]
    assert md["name"] == server["name"]
    assert md["hostname"] == server["OS-EXT-SRV-ATTR:hostname"] + ".novalocal"
    assert md["availability_zone"] == server["OS-EXT-AZ:availability_zone"]
    assert md["launch_index"] == server["OS-EXT-SRV-ATTR:launch_index"] == 0
    assert md["project_id"] == server["tenant_id"]
    assert md["meta"] == server["metadata"] == META
    assert md["public_keys"] == {keypair["name"]: keypair["public_key"]}
    assert md["keys"] == [{"name": keypair["name"], "type": "ssh", "data": keypair["public_key"]}]
    assert md["devices"] == [] and md["dedicated_cpus"] == []
    assert len(base64.b64decode(md["random_seed"])) == 512

    # Dated versions: each field from the version that brought it (Nova's).
    folsom = (await proxy.fetch(server, "/openstack/2012-08-10/meta_data.json")).json()
    assert "random_seed" not in folsom and "project_id" not in folsom and folsom["uuid"] == server["id"]
    liberty = (await proxy.fetch(server, "/openstack/2015-10-15/meta_data.json")).json()
    assert liberty["project_id"] == server["tenant_id"] and "devices" not in liberty
    for version in OPENSTACK_VERSIONS:
        assert (await proxy.fetch(server, f"/openstack/{version}/meta_data.json")).json()["uuid"] == server["id"]
    await proxy.fetch(server, "/openstack/2012-08-10/network_data.json", expect=404)  # from 2015-10-15
    await proxy.fetch(server, "/openstack/2011-01-01/meta_data.json", expect=404)

    r = await proxy.fetch(server, "/openstack/latest/user_data")
    assert r.content == USER_DATA

    (port,) = await cloud.ports(device_id=server["id"])
    nd = (await proxy.fetch(server, "/openstack/latest/network_data.json")).json()
    assert nd["links"] == [{"id": "tap" + port["id"][:11], "vif_id": port["id"], "type": "bridge",
                            "mtu": nd["links"][0]["mtu"], "ethernet_mac_address": port["mac_address"]}]
    (net,) = nd["networks"]
    assert net["type"] == "ipv4" and net["link"] == nd["links"][0]["id"]
    assert net["ip_address"] == port["fixed_ips"][0]["ip_address"] == _fixed_ip(server)
    assert net["netmask"] == "255.255.255.0" and net["network_id"] == port["network_id"]
    assert net["routes"] == [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.9.0.1"}]
    assert (await proxy.fetch(server, "/openstack/latest/vendor_data.json")).json() == {}
    assert (await proxy.fetch(server, "/openstack/latest/vendor_data2.json")).json() == {}


async def test_the_ec2_tree_is_the_server_s(mdcloud):
    cloud = mdcloud
    server, keypair = await boot_described(cloud, name="ec2-vm")
    proxy = cloud.proxy
    flavor = (await cloud.compute.get(f"/v2.1/flavors/{server['flavor']['id']}")).json()["flavor"]

    assert (await cloud.proxy.client.get("/")).text.split("\n") == EC2_VERSIONS + ["latest"]
    listing = (await proxy.fetch(server, "/latest/meta-data/")).text.split("\n")
    assert {"ami-id", "hostname", "instance-id", "local-hostname", "local-ipv4", "public-ipv4", "placement/",
            "public-keys/", "reservation-id", "security-groups", "instance-type"} <= set(listing)

    async def leaf(name: str) -> str:
        return (await proxy.fetch(server, f"/latest/meta-data/{name}")).text

    # Nova's EC2 instance id: the same number as the instance name's.
    assert await leaf("instance-id") == "i-" + server["OS-EXT-SRV-ATTR:instance_name"].split("-")[1]
    assert await leaf("ami-id") == "ami-" + server["image"]["id"][:8]
    assert await leaf("hostname") == await leaf("local-hostname") == server["OS-EXT-SRV-ATTR:hostname"] + ".novalocal"
    assert await leaf("local-ipv4") == _fixed_ip(server)
    assert await leaf("public-ipv4") == ""
    assert await leaf("placement/") == "availability-zone"
    assert await leaf("placement/availability-zone") == server["OS-EXT-AZ:availability_zone"]
    assert await leaf("public-keys/") == f"0={keypair['name']}"
    assert await leaf("public-keys/0/") == "openssh-key"
    assert await leaf("public-keys/0/openssh-key") == keypair["public_key"]
    assert await leaf("reservation-id") == server["OS-EXT-SRV-ATTR:reservation_id"]
    assert (await leaf("security-groups")).split("\n") == [g["name"] for g in server["security_groups"]]
    assert await leaf("instance-type") == flavor["name"]
    assert (await proxy.fetch(server, "/latest/user-data")).content == USER_DATA
    assert (await proxy.fetch(server, "/2009-04-04/user-data")).content == USER_DATA
    assert (await proxy.fetch(server, "/1.0/meta-data/instance-id")).text == await leaf("instance-id")
    await proxy.fetch(server, "/1.0/meta-data/placement/", expect=404)  # from 2008-02-01
    await proxy.fetch(server, "/latest/meta-data/no-such-thing", expect=404)


async def test_only_a_proxy_s_signed_request_for_the_right_project_is_answered(mdcloud):
    cloud = mdcloud
    proxy = cloud.proxy
    server, _ = await boot_described(cloud, name="mine")
    sid, project = server["id"], server["tenant_id"]
    path = "/openstack/latest/meta_data.json"

    assert (await proxy.get(path, sid, project)).status_code == 200
    # Unsigned: refused, whatever address the request claims to come from.
    r = await proxy.client.get(path, headers={"X-Instance-ID": sid, "X-Tenant-ID": project,
                                              "X-Forwarded-For": _fixed_ip(server)})
    assert r.status_code == 403, r.text
    assert (await proxy.client.get(path, headers={"X-Forwarded-For": _fixed_ip(server)})).status_code == 403
    assert (await proxy.client.get(path)).status_code == 403
    # A wrong signature, another id's signature, a signature with another key: 403.
    assert (await proxy.get(path, sid, project, signature="0" * 64)).status_code == 403
    other_id = str(uuid.uuid4())
    assert (await proxy.get(path, sid, project, signature=proxy.sign_for(other_id))).status_code == 403
    from nefos.clients.metadata import sign
    assert (await proxy.get(path, sid, project, signature=sign("not the secret", sid))).status_code == 403
    # Signed right, but the instance is another project's, or none at all: 404.
    other = await cloud.boot(name="theirs", headers=member())
    await cloud.wait_status(other["server"]["id"], "ACTIVE")
    assert (await proxy.get(path, other["server"]["id"], project)).status_code == 404
    assert (await proxy.get(path, sid, member()["X-Project-Id"])).status_code == 404
    assert (await proxy.get(path, other_id, project)).status_code == 404
    assert (await proxy.get(path, sid)).status_code == 400  # no X-Tenant-ID (Nova's answer)
    # A deleted server's metadata is gone.
    r = await cloud.compute.delete(f"/v2.1/servers/{sid}")
    assert r.status_code == 204, r.text
    await cloud.wait_gone(sid)
    assert (await proxy.get(path, sid, project)).status_code == 404


async def test_user_data_absent_is_404_and_the_rest_still_served(mdcloud):
    cloud = mdcloud
    created = await cloud.boot(name="plain")
    server = await cloud.wait_status(created["server"]["id"], "ACTIVE", headers=ADMIN_2_3)
    proxy = cloud.proxy
    await proxy.fetch(server, "/openstack/latest/user_data", expect=404)
    await proxy.fetch(server, "/latest/user-data", expect=404)
    assert "user_data" not in (await proxy.fetch(server, "/openstack/latest")).text.split("\n")
    assert "user-data" not in (await proxy.fetch(server, "/latest")).text.split("\n")
    md = (await proxy.fetch(server, "/openstack/latest/meta_data.json")).json()
    assert "public_keys" not in md and "keys" not in md and "meta" not in md
    assert json.loads((await proxy.fetch(server, "/openstack/latest/network_data.json")).text) == {}
    assert "public-keys/" not in (await proxy.fetch(server, "/latest/meta-data/")).text.split("\n")
