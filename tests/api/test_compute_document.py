"""A tour of the Compute API at 2.1 (no version header): every operation that documents a success
answer with a body is called until it answers one, and the test cloud's contract hook checks each answer
against the Compute OpenAPI document (``tests.contract``)."""

from __future__ import annotations

from tests import contract
from tests.clouds import DEMO_PROJECT

# Operations whose success answers only come past 2.1 (404 at 2.1, as in Nova).
AFTER_21 = {("GET", "/v2.1/servers/{server_id}/tags"), ("PUT", "/v2.1/servers/{server_id}/tags"),
            ("GET", "/v2.1/servers/{server_id}/topology"), ("PUT", "/v2.1/flavors/{flavor_id}"),
            ("POST", "/v2.1/servers/{server_id}/remote-consoles"),
            ("GET", "/v2.1/os-console-auth-tokens/{console_token}"),
            ("GET", "/v2.1/servers/{server_id}/migrations")}
# Documented as Nova's, but never a success here: no driver has host power actions (501), and
# there is no block storage service, so no volume, snapshot or attachment exists (404).
NO_SUCCESS_HERE = {("GET", f"/v2.1/os-hosts/{{host_name}}/{a}") for a in ("startup", "shutdown", "reboot")} | {
    ("POST", "/v2.1/servers/{server_id}/os-volume_attachments"),
    ("GET", "/v2.1/servers/{server_id}/os-volume_attachments/{volume_id}"),
    ("POST", "/v2.1/os-volumes"), ("GET", "/v2.1/os-volumes/{volume_id}"),
    ("POST", "/v2.1/os-snapshots"), ("GET", "/v2.1/os-snapshots/{snapshot_id}"),
    # Only a live migration in progress is shown, and the fake driver's finishes at once (404).
    ("GET", "/v2.1/servers/{server_id}/migrations/{migration_id}")}


async def test_every_documented_body_is_answered_as_documented(cloud):
    answered: set[tuple[str, str]] = set()

    async def call(method: str, path: str, expect: int = 200, **kwargs) -> dict:
        r = await cloud.compute.request(method, path, **kwargs)  # the contract hook checks it
        assert r.status_code == expect, (method, path, r.text)
        assert path in ("/", "/v2") or r.headers["openstack-api-version"] == "compute 2.1"
        answered.add((method, contract.operation_path(method, path)))
        return r.json()

    for path in ("/", "/v2", "/v2/", "/v2.1", "/v2.1/", "/v2.1/openapi.json", "/v2.1/extensions",
                 "/v2.1/extensions/OS-DCF", "/v2.1/os-volumes", "/v2.1/os-volumes/detail", "/v2.1/os-snapshots",
                 "/v2.1/os-snapshots/detail"):
        await call("GET", path)
    net = await cloud.make_network()
    image = await cloud.default_image()
    created = await call("POST", "/v2.1/servers", 202, json={"server": {
        "name": "tour", "imageRef": image, "flavorRef": "1", "networks": [{"uuid": net["id"]}]}})
    server_id = created["server"]["id"]
    reserved = await call("POST", "/v2.1/os-volumes_boot", 202, json={"server": {
        "name": "reserved", "imageRef": image, "flavorRef": "1", "networks": [{"uuid": net["id"]}],
        "return_reservation_id": True}})
    assert reserved["reservation_id"].startswith("r-")
    await cloud.wait_status(server_id, "ACTIVE")
    # The event stream, bounded and from the log's start (the contract hook checks its media type).
    r = await cloud.compute.get("/v2.1/nefos-events", params={"timeout": "0", "last_event_id": "0"})
    assert r.status_code == 200 and f'"server_id":"{server_id}"' in r.text, r.text[:500]
    answered.add(("GET", "/v2.1/nefos-events"))
    await call("GET", "/v2.1/servers")
    await call("GET", "/v2.1/servers/detail")
    await call("GET", f"/v2.1/servers/{server_id}")
    await call("PUT", f"/v2.1/servers/{server_id}", json={"server": {"name": "renamed"}})

    base = f"/v2.1/servers/{server_id}"
    await call("POST", f"{base}/action", json={"os-getConsoleOutput": {"length": 5}})
    await call("POST", f"{base}/action", json={"os-getVNCConsole": {"type": "novnc"}})
    await call("POST", f"{base}/action", 202, json={"rebuild": {"imageRef": image}})
    await cloud.wait_status(server_id, "ACTIVE")
    await call("POST", f"{base}/action", json={"rescue": None})
    await cloud.wait_status(server_id, "RESCUE")
    r = await cloud.compute.post(f"{base}/action", json={"unrescue": None})
    assert r.status_code == 202, r.text
    await cloud.wait_status(server_id, "ACTIVE")
    await call("POST", f"{base}/metadata", json={"metadata": {"a": "1"}})
    await call("PUT", f"{base}/metadata", json={"metadata": {"a": "1", "b": "2"}})
    await call("GET", f"{base}/metadata")
    await call("PUT", f"{base}/metadata/a", json={"meta": {"a": "3"}})
    await call("GET", f"{base}/metadata/a")
    await call("GET", f"{base}/ips")
    await call("GET", f"{base}/diagnostics")
    await call("GET", f"{base}/os-server-password")
    await call("GET", f"{base}/os-volume_attachments")
    # os-volumes_boot: the same collection under Nova's old name
    await call("GET", "/v2.1/os-volumes_boot")
    await call("GET", "/v2.1/os-volumes_boot/detail")
    await call("GET", f"/v2.1/os-volumes_boot/{server_id}")
    await call("PUT", f"/v2.1/os-volumes_boot/{server_id}", json={"server": {"name": "renamed"}})
    await call("POST", f"/v2.1/os-volumes_boot/{server_id}/action", json={"os-getConsoleOutput": {"length": 5}})
    await call("GET", f"{base}/ips/{net['name']}")
    actions = (await call("GET", f"{base}/os-instance-actions"))["instanceActions"]
    await call("GET", f"{base}/os-instance-actions/{actions[0]['request_id']}")
    second = await cloud.make_network(name="tour-2", cidr="10.77.0.0/24")
    attached = (await call("POST", f"{base}/os-interface", json={
        "interfaceAttachment": {"net_id": second["id"]}}))["interfaceAttachment"]
    await call("GET", f"{base}/os-interface")
    await call("GET", f"{base}/os-interface/{attached['port_id']}")
    r = await cloud.compute.delete(f"{base}/os-interface/{attached['port_id']}")
    assert r.status_code == 202, r.text
    hosted = await cloud.server(server_id)
    assert hosted["OS-EXT-SRV-ATTR:host"]
    await call("POST", "/v2.1/os-server-external-events", json={"events": [
        {"server_uuid": server_id, "name": "network-changed"}]})

    # The image proxy, over a snapshot of the server (createImage answers its Location at 2.1).
    r = await cloud.compute.post(f"{base}/action", json={"createImage": {"name": "tour-snap"}})
    assert r.status_code == 202, r.text
    snapshot = r.headers["Location"].rsplit("/", 1)[-1]
    await cloud.wait_status(server_id, "ACTIVE")
    await call("GET", "/v2.1/images")
    await call("GET", "/v2.1/images/detail")
    await call("GET", f"/v2.1/images/{snapshot}")
    await call("POST", f"/v2.1/images/{snapshot}/metadata", json={"metadata": {"os_distro": "tour"}})
    await call("PUT", f"/v2.1/images/{snapshot}/metadata", json={"metadata": {"os_distro": "tour"}})
    await call("GET", f"/v2.1/images/{snapshot}/metadata")
    await call("PUT", f"/v2.1/images/{snapshot}/metadata/os_distro", json={"meta": {"os_distro": "t"}})
    await call("GET", f"/v2.1/images/{snapshot}/metadata/os_distro")

    await call("GET", "/v2.1/flavors")
    await call("GET", "/v2.1/flavors/detail")
    await call("GET", "/v2.1/flavors/1")
    flavor = (await call("POST", "/v2.1/flavors", json={"flavor": {
        "name": "private", "ram": 64, "vcpus": 1, "disk": 1, "os-flavor-access:is_public": False}}))["flavor"]
    specs = f"/v2.1/flavors/{flavor['id']}/os-extra_specs"
    await call("POST", specs, json={"extra_specs": {"hw:cpu_policy": "shared"}})
    await call("GET", specs)
    await call("PUT", f"{specs}/hw:cpu_policy", json={"hw:cpu_policy": "shared"})
    await call("GET", f"{specs}/hw:cpu_policy")
    await call("POST", f"/v2.1/flavors/{flavor['id']}/action", json={"addTenantAccess": {"tenant": DEMO_PROJECT}})
    await call("GET", f"/v2.1/flavors/{flavor['id']}/os-flavor-access")

    await call("POST", "/v2.1/os-keypairs", json={"keypair": {"name": "tour"}})
    await call("GET", "/v2.1/os-keypairs")
    await call("GET", "/v2.1/os-keypairs/tour")
    await call("GET", "/v2.1/limits")
    await call("GET", "/v2.1/os-availability-zone")
    await call("GET", "/v2.1/os-availability-zone/detail")

    services = (await call("GET", "/v2.1/os-services"))["services"]
    compute_host = next(s["host"] for s in services if s["binary"] == "nova-compute")
    for action in ("disable", "enable"):
        await call("PUT", f"/v2.1/os-services/{action}", json={"host": compute_host, "binary": "nova-compute"})
    agg = (await call("POST", "/v2.1/os-aggregates", json={"aggregate": {"name": "tour", "availability_zone": "z"}}
                      ))["aggregate"]
    await call("GET", "/v2.1/os-aggregates")
    await call("GET", f"/v2.1/os-aggregates/{agg['id']}")
    await call("PUT", f"/v2.1/os-aggregates/{agg['id']}", json={"aggregate": {"name": "tour-renamed"}})
    await call("POST", f"/v2.1/os-aggregates/{agg['id']}/action", json={"set_metadata": {"metadata": {"a": "1"}}})
    await call("GET", "/v2.1/os-hosts")
    await call("GET", f"/v2.1/os-hosts/{compute_host}")
    await call("PUT", f"/v2.1/os-hosts/{compute_host}", json={"status": "enable"})
    hypervisors = (await call("GET", "/v2.1/os-hypervisors"))["hypervisors"]
    await call("GET", "/v2.1/os-hypervisors/detail")
    await call("GET", "/v2.1/os-hypervisors/statistics")
    await call("GET", f"/v2.1/os-hypervisors/{hypervisors[0]['id']}")
    await call("GET", f"/v2.1/os-hypervisors/{hypervisors[0]['id']}/uptime")
    await call("GET", f"/v2.1/os-hypervisors/{hypervisors[0]['hypervisor_hostname']}/search")
    await call("GET", f"/v2.1/os-hypervisors/{hosted['OS-EXT-SRV-ATTR:hypervisor_hostname']}/servers")
    await call("GET", "/v2.1/nefos-hypervisor-health")

    await cloud.action(server_id, {"resize": {"flavorRef": "2"}})
    await cloud.wait_status(server_id, "VERIFY_RESIZE")
    assert (await call("GET", "/v2.1/os-migrations"))["migrations"]
    project = (await cloud.server(server_id))["tenant_id"]
    usage = await call("GET", f"/v2.1/os-simple-tenant-usage/{project}")
    assert usage["tenant_usage"]["server_usages"]
    await call("GET", "/v2.1/os-simple-tenant-usage", params={"detailed": "1"})
    await call("GET", "/v2.1/os-instance_usage_audit_log")
    await call("GET", "/v2.1/os-instance_usage_audit_log/2024-01-01 00:00:00")

    quotas = f"/v2.1/os-quota-sets/{DEMO_PROJECT}"
    await call("GET", quotas)
    await call("GET", f"{quotas}/defaults")
    await call("GET", f"{quotas}/detail")
    await call("PUT", quotas, json={"quota_set": {"instances": 20}})
    await call("GET", "/v2.1/os-quota-class-sets/default")
    await call("PUT", "/v2.1/os-quota-class-sets/default", json={"quota_class_set": {"instances": 20}})

    group = (await call("POST", "/v2.1/os-server-groups", json={"server_group": {
        "name": "tour", "policies": ["anti-affinity"]}}))["server_group"]
    await call("GET", "/v2.1/os-server-groups")
    await call("GET", f"/v2.1/os-server-groups/{group['id']}")

    # The network proxy APIs (2.1 to 2.35).
    sg = (await call("POST", "/v2.1/os-security-groups", json={"security_group": {
        "name": "tour", "description": ""}}))["security_group"]
    await call("GET", "/v2.1/os-security-groups")
    await call("GET", f"/v2.1/os-security-groups/{sg['id']}")
    await call("PUT", f"/v2.1/os-security-groups/{sg['id']}", json={"security_group": {
        "name": "tour", "description": "toured"}})
    await call("POST", "/v2.1/os-security-group-rules", json={"security_group_rule": {
        "parent_group_id": sg["id"], "ip_protocol": "tcp", "from_port": 22, "to_port": 22}})
    await call("GET", f"{base}/os-security-groups")
    await call("GET", "/v2.1/os-networks")
    await call("GET", f"/v2.1/os-networks/{net['id']}")
    await call("GET", "/v2.1/os-tenant-networks")
    await call("GET", f"/v2.1/os-tenant-networks/{net['id']}")
    public = (await cloud.network.post("/v2.0/networks", json={"network": {
        "name": "public", "router:external": True}})).json()["network"]
    await cloud.network.post("/v2.0/subnets", json={"subnet": {
        "network_id": public["id"], "cidr": "203.0.113.0/24", "ip_version": 4, "enable_dhcp": False}})
    await call("GET", "/v2.1/os-floating-ip-pools")
    fip = (await call("POST", "/v2.1/os-floating-ips", json={"pool": "public"}))["floating_ip"]
    await call("GET", "/v2.1/os-floating-ips")
    await call("GET", f"/v2.1/os-floating-ips/{fip['id']}")

    assert contract.operations_with_bodies() - AFTER_21 - NO_SUCCESS_HERE == answered
