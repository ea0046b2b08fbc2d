"""With ``auth_strategy = keystone`` the compute host writes a member's snapshot, backups and shelved
image through the Image API with the member's own token (Nova passes the user's context to its
glance client): the images belong to the member's project, are active with their data, the backup
rotation deletes the oldest as the member, and unshelve deletes the shelved image."""

from __future__ import annotations

import time

from .helpers import Tenancy, image_id, wait_server

V245 = {"X-OpenStack-Nova-API-Version": "2.45"}


def _wait_image(api, image: str, status: str | None, timeout: float = 60) -> dict | None:
    deadline = time.monotonic() + timeout
    while True:
        r = api.get("image", f"/v2/images/{image}")
        if status is None and r.status_code == 404:
            return None
        assert r.status_code == 200, r.text
        if r.json()["status"] == status:
            return r.json()
        assert time.monotonic() < deadline, r.json()
        time.sleep(0.2)


def test_a_members_snapshot_backup_and_shelve_go_up_with_their_token(tenancy: Tenancy):
    a = tenancy.a
    r = a.post("network", "/v2.0/networks", {"network": {"name": "img-net"}})
    assert r.status_code == 201, r.text
    net = r.json()["network"]["id"]
    r = a.post("network", "/v2.0/subnets", {"subnet": {"network_id": net, "cidr": "10.82.0.0/24", "ip_version": 4}})
    assert r.status_code == 201, r.text
    r = a.post("compute", "/servers", {"server": {"name": "img-vm", "imageRef": image_id(a), "flavorRef": "42",
                                                  "networks": [{"uuid": net}]}})
    assert r.status_code == 202, r.text
    server = r.json()["server"]["id"]
    wait_server(a, server)

    r = a.post("compute", f"/servers/{server}/action", {"createImage": {"name": "a-snap"}}, headers=V245)
    assert r.status_code == 202, r.text
    snap = _wait_image(a, r.json()["image_id"], "active")
    assert snap["owner"] == tenancy.a_project and snap["size"] > 0, snap
    wait_server(a, server)

    backups = []
    for n in range(2):
        r = a.post("compute", f"/servers/{server}/action",
                   {"createBackup": {"name": f"a-backup-{n}", "backup_type": "daily", "rotation": 1}}, headers=V245)
        assert r.status_code == 202, r.text
        backups.append(r.json()["image_id"])
        wait_server(a, server)
    _wait_image(a, backups[0], None)  # rotated out by the second backup
    assert _wait_image(a, backups[1], "active")["size"] > 0

    r = a.post("compute", f"/servers/{server}/action", {"shelve": None})
    assert r.status_code == 202, r.text
    wait_server(a, server, "SHELVED_OFFLOADED")
    shelved = a.get("image", "/v2/images", params={"name": "img-vm-shelved"}).json()["images"]
    assert len(shelved) == 1 and shelved[0]["status"] == "active" and shelved[0]["size"] > 0, shelved
    r = a.post("compute", f"/servers/{server}/action", {"unshelve": None})
    assert r.status_code == 202, r.text
    wait_server(a, server)
    _wait_image(a, shelved[0]["id"], None)
    assert a.delete("compute", f"/servers/{server}").status_code == 204
