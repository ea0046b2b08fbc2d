"""The evacuate action's bad input, microversion boundaries and policy: each a 4xx with the OpenStack
error body (the suite's contract hook checks every body), the server untouched, never a 5xx."""

from __future__ import annotations

import uuid as uuidlib

from tests.compute.conftest import boot_active, set_instance
from tests.clouds import member

def version(v: str, headers: dict | None = None) -> dict:
    return {**(headers or {}), "OpenStack-API-Version": f"compute {v}"}


async def post(cloud, server_id: str, args, v: str, headers: dict | None = None):
    return await cloud.compute.post(f"/v2.1/servers/{server_id}/action", json={"evacuate": args},
                                    headers=version(v, headers))


# (microversion, evacuate's argument, expected status, a phrase of the message: None is the schema's)
SCHEMA_CASES = [
    ("2.1", {}, 400, "'onSharedStorage' is a required property"),  # required below 2.14
    ("2.1", None, 400, None),
    ("2.1", "host-2", 400, None),
    ("2.1", {"onSharedStorage": "maybe"}, 400, None),
    ("2.1", {"onSharedStorage": None}, 400, None),
    ("2.1", {"onSharedStorage": False, "host": ""}, 400, None),
    ("2.1", {"onSharedStorage": False, "host": "bad host!"}, 400, None),
    ("2.1", {"onSharedStorage": False, "host": "h" * 256}, 400, None),
    ("2.1", {"onSharedStorage": False, "host": 7}, 400, None),
    ("2.1", {"onSharedStorage": False, "adminPass": 123}, 400, None),
    ("2.1", {"onSharedStorage": False, "force": True}, 400, None),
    ("2.1", {"onSharedStorage": False, "extra": 1}, 400, None),
    ("2.1", {"onSharedStorage": True, "adminPass": "secret"}, 400, "admin password can't be changed"),
    ("2.13", {"onSharedStorage": "yes", "adminPass": "x"}, 400, "admin password can't be changed"),
    ("2.14", {"onSharedStorage": False}, 400, None),  # removed in 2.14
    ("2.14", {"force": True, "host": "host-2"}, 400, None),
    ("2.28", {"force": False}, 400, None),
    ("2.29", {"force": "maybe"}, 400, None),
    ("2.29", {"force": True}, 400, "Can't force to a non-provided destination"),
    ("2.67", {"force": "true"}, 400, "Can't force to a non-provided destination"),
    ("2.68", {"force": False}, 400, None),  # removed in 2.68
    ("2.95", {"force": True, "host": "host-2"}, 400, None),
    ("2.95", {"host": None}, 400, None),
]


async def test_evacuate_bad_input_policy_and_states(cloud):
    server, paused = await boot_active(cloud, count=2, host="host-1")

    async def expect(args, v, status, phrase=None, headers=None, server_id=server):
        r = await post(cloud, server_id, args, v, headers)
        assert r.status_code == status, (v, args, r.text)
        if phrase is not None:
            assert phrase in next(iter(r.json().values()))["message"], r.text
        return r

    for v, args, status, phrase in SCHEMA_CASES:
        await expect(args, v, status, phrase or "Invalid input for field/attribute")

    # Unknown server: 404 at every version; another project's server is as unknown to a member.
    for v in ("2.1", "2.14", "2.29", "2.68", "2.95"):
        await expect({"onSharedStorage": False} if v == "2.1" else {}, v, 404, server_id=str(uuidlib.uuid4()))
    await expect({}, "2.14", 404, headers=member())
    # Admin only: a member evacuating its own server is 403.
    r = await cloud.boot(name="mine", headers=version("2.37", member()), networks="none")
    own = r["server"]["id"]
    await cloud.wait_status(own, "ACTIVE", headers=member())
    r = await expect({}, "2.14", 403, headers=member(), server_id=own)
    assert "os_compute_api:os-evacuate" in r.json()["forbidden"]["message"]

    # The target host: unknown 404, the server's own 400.
    await expect({"host": "no-such-host"}, "2.14", 404, "Compute host no-such-host not found.")
    await expect({"onSharedStorage": False, "host": "no-such-host"}, "2.1", 404)
    await expect({"host": "host-1"}, "2.29", 400, "The target host can't be the same one.")
    # Its host still reports: Nova's ComputeServiceInUse (400), at each version.
    for v, args in (("2.1", {"onSharedStorage": False}), ("2.14", {}), ("2.29", {"host": "host-2", "force": True}),
                    ("2.68", {"host": "host-2"}), ("2.95", {})):
        await expect(args, v, 400, "Compute service of host-1 is still in use.")
    # A wrong state: 409 (paused; a task under way).
    await cloud.action(paused, {"pause": None})
    await cloud.wait_status(paused, "PAUSED")
    await expect({}, "2.14", 409, "vm_state paused", server_id=paused)
    await set_instance(cloud, server, task_state="rebooting")
    await expect({}, "2.14", 409, "task_state rebooting")
    await set_instance(cloud, server, task_state=None)

    # Nothing was recorded or changed by any of these.
    r = await cloud.compute.get("/v2.1/os-migrations")
    assert r.json()["migrations"] == []
    for server_id in (server, paused):
        got = await cloud.server(server_id)
        assert got["OS-EXT-STS:task_state"] is None and got["OS-EXT-SRV-ATTR:host"] == "host-1"
        r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions")
        assert "evacuate" not in [a["action"] for a in r.json()["instanceActions"]]
