"""The password a create (or rebuild) answers is the guest's: ``admin_pass`` in the guest's
meta_data.json, on its config drive and from the metadata service, which serves it once; with
Nova's ``enable_instance_password`` off no password is answered (by a create, a rebuild or a
rescue) nor generated. It appears in no API answer but the create's, no event of the event stream
and no log line."""

from __future__ import annotations

import json
import logging

from sqlalchemy import select

from nefos.db.models import StreamEvent
from nefos.host.virt import configdrive
from nefos.http_client import verified_tls
from tests.metadata.conftest import Proxy, mdcloud, read_secret  # noqa: F401
from tests.clouds import ADMIN, start_cloud, stop_cloud

HOST = "host-1"
LATEST_ADMIN = {**ADMIN, "X-OpenStack-Nova-API-Version": "2.96"}


async def _boot(cloud, name: str, **extra) -> tuple[dict, dict]:
    net = await cloud.make_network(name=f"{name}-net", cidr="10.9.0.0/24")
    created = (await cloud.boot(name=name, networks=[{"uuid": net["id"]}], **extra))["server"]
    await cloud.wait_status(created["id"], "ACTIVE")
    return created, await cloud.server(created["id"])


async def _meta_data(cloud, server: dict, version: str = "latest") -> dict:
    return (await cloud.proxy.fetch(server, f"/openstack/{version}/meta_data.json")).json()


async def _nowhere_else(cloud, server_id: str, password: str, caplog) -> None:
    """Not in the server's API views, the event stream's log, nor any log line."""
    for path in (f"/v2.1/servers/{server_id}", "/v2.1/servers/detail", f"/v2.1/servers/{server_id}/diagnostics",
                 f"/v2.1/servers/{server_id}/os-instance-actions"):
        r = await cloud.compute.get(path, headers=LATEST_ADMIN)
        assert password not in r.text, path
    async with cloud.rt.db.reader() as s:
        events = (await s.execute(select(StreamEvent))).scalars().all()
    assert events and not [e for e in events if password in json.dumps(e.data or {})]
    assert password not in caplog.text


async def test_the_generated_password_reaches_the_guest_from_the_metadata_service_once(mdcloud, caplog):
    caplog.set_level(logging.DEBUG)
    cloud = mdcloud
    created, server = await _boot(cloud, "pw-vm")
    password = created["adminPass"]
    assert len(password) >= 12
    assert (await _meta_data(cloud, server))["admin_pass"] == password
    # Served once: the next reader in the guest (any version, any user of the guest) gets none.
    for version in ("latest", "2012-08-10"):
        assert "admin_pass" not in await _meta_data(cloud, server, version)
    await _nowhere_else(cloud, server["id"], password, caplog)


async def test_a_given_password_reaches_the_config_drive_and_the_metadata_service(mdcloud, caplog):
    caplog.set_level(logging.DEBUG)
    cloud = mdcloud
    created, server = await _boot(cloud, "cd-pw-vm", config_drive=True, adminPass="Given-pass-1")
    assert created["adminPass"] == "Given-pass-1"
    files = configdrive.read_files(cloud.driver(HOST).config_drives[server["id"]]["image"])
    for version in ("latest", "2012-08-10"):
        assert json.loads(files[f"openstack/{version}/meta_data.json"])["admin_pass"] == "Given-pass-1"
    assert "Given-pass-1" not in json.dumps({k: v.decode(errors="replace") for k, v in files.items()
                                             if k.startswith("ec2/")})
    assert (await _meta_data(cloud, server))["admin_pass"] == "Given-pass-1"
    assert "admin_pass" not in await _meta_data(cloud, server)
    await _nowhere_else(cloud, server["id"], "Given-pass-1", caplog)


async def test_a_rebuild_gives_the_guest_the_password_it_answers(mdcloud):
    cloud = mdcloud
    created, server = await _boot(cloud, "rb-pw-vm")
    assert (await _meta_data(cloud, server))["admin_pass"] == created["adminPass"]
    r = await cloud.compute.post(f"/v2.1/servers/{server['id']}/action",
                                 json={"rebuild": {"imageRef": await cloud.default_image()}}, headers=ADMIN)
    assert r.status_code == 202, r.text
    rebuilt = r.json()["server"]["adminPass"]
    assert rebuilt != created["adminPass"]
    await cloud.wait_status(server["id"], "ACTIVE")
    assert (await _meta_data(cloud, server))["admin_pass"] == rebuilt


async def test_with_enable_instance_password_off_no_password_is_answered_or_generated(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, enable_instance_password=False)
    try:
        import httpx
        cloud.proxy = Proxy(httpx.AsyncClient(verify=verified_tls(),
                                              base_url=f"http://127.0.0.1:{cloud.rt.cfg.metadata_listen_port}"),
                            read_secret(tmp_path))
        created, server = await _boot(cloud, "nopw-vm")
        assert "adminPass" not in created
        assert "admin_pass" not in await _meta_data(cloud, server)
        # A password the user gave is theirs: it still reaches the guest, and is not echoed.
        created, server = await _boot(cloud, "given-vm", adminPass="Mine-123")
        assert "adminPass" not in created
        assert (await _meta_data(cloud, server))["admin_pass"] == "Mine-123"
        r = await cloud.compute.post(f"/v2.1/servers/{server['id']}/action",
                                     json={"rebuild": {"imageRef": await cloud.default_image()}}, headers=ADMIN)
        assert r.status_code == 202 and "adminPass" not in r.json()["server"], r.text
        await cloud.wait_status(server["id"], "ACTIVE")
        r = await cloud.compute.post(f"/v2.1/servers/{server['id']}/action", json={"rescue": None}, headers=ADMIN)
        assert (r.status_code, r.json()) == (200, {}), r.text  # Nova's rescue answer without the option
        await cloud.wait_status(server["id"], "RESCUE")
        assert cloud.driver(HOST).guests[server["id"]].admin_password is None  # none nobody was shown
        await cloud.proxy.client.aclose()
    finally:
        await stop_cloud(cloud)


async def test_enable_instance_password_is_on_with_the_shipped_defaults(mdcloud):
    from nefos.config import Config
    assert mdcloud.rt.cfg.enable_instance_password is Config().enable_instance_password is True
