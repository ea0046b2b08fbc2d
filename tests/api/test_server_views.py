"""The server views against Tempest's response schemas, state by state, without a cloud.

The in-process cloud's tests check real responses (tests/servers/test_server_schemas.py
and the contract hook); this covers the states that are awkward to reach there
(no image, a fault with and without details, DELETED, a server on a host whose
compute service is down) at each microversion, for admins and for members.
"""

from __future__ import annotations

import datetime as dt

import jsonschema
import pytest
from tempest.lib.common.jsonschema_validator import FORMAT_CHECKER, JSONSCHEMA_VALIDATOR

from nefos.control.compute.rest import server_view
from nefos.control.compute.rest.microversion import APIVersion
from nefos.context import RequestContext
from tests.schemas import resolve

VERSIONS = ["2.1", "2.3", "2.9", "2.16", "2.19", "2.26", "2.37", "2.47", "2.63", "2.73", "2.75"]
BASE = "http://nefos.test:8774"
NOW = dt.datetime(2026, 1, 2, 3, 4, 5, 678901)


def instance(**overrides) -> dict:
    vif = {"id": "p1", "address": "fa:16:3e:00:00:01", "network": {
        "id": "n1", "label": "private", "subnets": [
            {"cidr": "10.0.0.0/24", "ip_version": 4, "ips": [{"address": "10.0.0.5", "type": "fixed", "version": 4}]},
            {"cidr": "fd00::/64", "ip_version": 6, "ips": [{"address": "fd00::5", "type": "fixed", "version": 6}]}]}}
    base = {
        "id": 7, "uuid": "0c9ea6d4-58a6-4e4b-9d3b-ec2a4e5e0e37", "display_name": "vm", "display_description": None,
        "project_id": "p" * 32, "user_id": "u" * 32, "vm_state": "active", "task_state": None, "power_state": 1,
        "host": "host-1", "node": "host-1", "availability_zone": "nova", "image_ref": "a87f8463-b658-532d-b1dc-740f1a9328ec",
        "flavor": {"flavorid": "1", "name": "m1.tiny", "memory_mb": 512, "vcpus": 1, "root_gb": 1, "ephemeral_gb": 0,
                   "swap": 0, "extra_specs": {"hw:cpu_policy": "shared"}},
        "metadata": {"role": "web"}, "created_at": NOW, "updated_at": NOW, "launched_at": NOW, "terminated_at": None,
        "key_name": None, "config_drive": "", "security_groups": ["default"], "network_info": [vif],
        "access_ip_v4": None, "access_ip_v6": None, "reservation_id": "r-1", "launch_index": 0,
        "hostname": "vm", "user_data": None, "locked": False, "fault": None,
    }
    base.update(overrides)
    return base


FAULT = {"code": 500, "created_at": NOW, "message": "No valid host was found. ", "details": "Traceback ..."}
STATES = {
    "active": {},
    "building-no-host": {"vm_state": "building", "task_state": "scheduling", "power_state": 0, "host": None,
                         "node": None, "availability_zone": None, "launched_at": None, "network_info": []},
    "stopped": {"vm_state": "stopped", "power_state": 4},
    "error-with-fault": {"vm_state": "error", "host": None, "node": None, "fault": FAULT},
    "error-fault-no-details": {"vm_state": "error", "fault": dict(FAULT, code=400, details=None)},
    "deleted": {"vm_state": "deleted", "terminated_at": NOW, "fault": FAULT},
    "no-image": {"image_ref": None},
    "host-down": {"host_status": "DOWN"},
}
ADMIN = RequestContext()
MEMBER = RequestContext(project_id="p" * 32, user_id="u" * 32, roles=["member", "reader"], is_admin=False)


def _validate(name: str, mv: str, body: dict) -> None:
    schema = resolve(name, mv)["response_body"]
    try:
        jsonschema.validate(body, schema, cls=JSONSCHEMA_VALIDATOR, format_checker=FORMAT_CHECKER)
    except jsonschema.ValidationError as exc:
        raise AssertionError(f"{name} at {mv}: {exc.message} at {list(exc.absolute_path)}") from None


@pytest.mark.parametrize("state", list(STATES))
@pytest.mark.parametrize("mv", VERSIONS)
@pytest.mark.parametrize("ctx", [ADMIN, MEMBER], ids=["admin", "member"])
def test_show_update_and_list_views_match_schemas(state, mv, ctx):
    version = APIVersion.parse(mv)
    inst = instance(**STATES[state])
    shown = server_view.detail(inst, BASE, version, ctx, server_groups=[])
    _validate("servers.get_server", mv, {"server": shown})
    listed = server_view.detail(inst, BASE, version, ctx)
    _validate("servers.list_servers_detail", mv, {"servers": [listed, listed]})
    updated = server_view.detail(inst, BASE, version, ctx, extended=version.matches("2.75"), server_groups=[])
    _validate("servers.update_server", mv, {"server": updated})
    _validate("servers.list_servers", mv, {"servers": [server_view.basic(inst, BASE)]})
    if not version.matches("2.75"):  # from 2.75 update answers with the whole server
        # What the update view leaves out is exactly the extended attributes.
        assert not [k for k in updated if k.startswith(("OS-EXT", "OS-SRV-USG"))]
        assert "OS-EXT-IPS:type" not in str(updated["addresses"])
    if state in ("error-with-fault", "deleted"):
        assert shown["fault"]["message"] == FAULT["message"]
        assert ("details" in shown["fault"]) == ctx.is_admin  # a 500's details are for admins
    if state == "error-fault-no-details":
        assert "details" not in shown["fault"]
    if shown["status"] in ("ACTIVE", "BUILD"):
        assert shown["progress"] == 0
    else:
        assert "progress" not in shown


@pytest.mark.parametrize("mv", VERSIONS)
def test_microversion_specific_fields(mv):
    version = APIVersion.parse(mv)
    shown = server_view.detail(instance(host_status="DOWN"), BASE, version, ADMIN)
    assert ("locked" in shown) == version.matches("2.9")
    assert ("description" in shown) == version.matches("2.19")
    assert ("tags" in shown) == version.matches("2.26")
    assert ("OS-EXT-SRV-ATTR:reservation_id" in shown) == version.matches("2.3")
    assert (shown.get("host_status") == "DOWN") == version.matches("2.16")
    if version.matches("2.47"):
        assert shown["flavor"] == {"vcpus": 1, "ram": 512, "disk": 1, "ephemeral": 0, "swap": 0,
                                   "original_name": "m1.tiny", "extra_specs": {"hw:cpu_policy": "shared"}}
    else:
        assert shown["flavor"]["id"] == "1"
    member_view = server_view.detail(instance(), BASE, version, MEMBER)
    assert not [k for k in member_view if k.startswith("OS-EXT-SRV-ATTR")] and "host_status" not in member_view
