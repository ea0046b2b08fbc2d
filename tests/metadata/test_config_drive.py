"""Config drives on the fake hypervisor: asked for on create or forced by the operator, an ISO 9660
volume labelled config-2 holding what the metadata service serves; none by default."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import httpx

from nefos.model.instance_metadata import OPENSTACK_VERSIONS
from nefos.host.virt import configdrive
from nefos.http_client import verified_tls
from tests.metadata.conftest import META, USER_DATA, Proxy, boot_described, mdcloud, read_secret  # noqa: F401
from tests.clouds import start_cloud, stop_cloud

HOST = "host-1"


def _drive(cloud, server_id: str) -> tuple[Path, dict[str, bytes]]:
    recorded = cloud.driver(HOST).config_drives[server_id]
    path = Path(recorded["path"])
    image = path.read_bytes()
    assert image == recorded["image"]
    return path, configdrive.read_files(image)


async def test_a_config_drive_holds_what_the_metadata_service_serves(mdcloud):
    cloud = mdcloud
    server, keypair = await boot_described(cloud, name="cd-vm", config_drive=True)
    assert server["config_drive"] == "True"
    path, files = _drive(cloud, server["id"])
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert files[""] == b"config-2"

    for version in OPENSTACK_VERSIONS + ["latest"]:
        assert f"openstack/{version}/meta_data.json" in files
        assert files[f"openstack/{version}/user_data"] == USER_DATA
    assert "openstack/2012-08-10/network_data.json" not in files
    assert "openstack/latest/password" not in files
    served = (await cloud.proxy.fetch(server, "/openstack/latest/meta_data.json")).json()
    on_drive = json.loads(files["openstack/latest/meta_data.json"])
    served.pop("random_seed"), on_drive.pop("random_seed")
    assert on_drive == served
    assert on_drive["uuid"] == server["id"] and on_drive["meta"] == META
    assert on_drive["public_keys"] == {keypair["name"]: keypair["public_key"]}
    for name in ("network_data.json", "vendor_data.json", "vendor_data2.json"):
        served = (await cloud.proxy.fetch(server, f"/openstack/latest/{name}")).json()
        assert json.loads(files[f"openstack/latest/{name}"]) == served
    assert json.loads(files["openstack/latest/network_data.json"])["networks"][0]["ip_address"]

    ec2 = json.loads(files["ec2/latest/meta-data.json"])
    assert ec2["instance-id"] == (await cloud.proxy.fetch(server, "/latest/meta-data/instance-id")).text
    assert ec2["public-keys"] == {"0": {"openssh-key": keypair["public_key"]}}
    assert ec2["placement"] == {"availability-zone": server["OS-EXT-AZ:availability_zone"]}
    assert files["ec2/latest/user-data"] == USER_DATA
    assert json.loads(files["ec2/2009-04-04/meta-data.json"]) == ec2

    # The drive goes with the guest.
    r = await cloud.compute.delete(f"/v2.1/servers/{server['id']}")
    assert r.status_code == 204, r.text
    await cloud.wait_gone(server["id"])
    assert server["id"] not in cloud.driver(HOST).config_drives
    assert not path.exists()


async def test_no_config_drive_unless_asked(mdcloud):
    cloud = mdcloud
    for name, asked in (("default", {}), ("refused", {"config_drive": False})):
        created = await cloud.boot(name=name, **asked)
        server = await cloud.wait_status(created["server"]["id"], "ACTIVE")
        assert server["config_drive"] == ""
        assert server["id"] not in cloud.driver(HOST).config_drives


async def test_force_config_drive_gives_every_guest_one(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, force_config_drive=True)
    try:
        created = await cloud.boot(name="forced")
        server = await cloud.wait_status(created["server"]["id"], "ACTIVE")
        assert server["config_drive"] == ""  # not asked for: the operator's option gave it
        _path, files = _drive(cloud, server["id"])
        assert files[""] == b"config-2"
        assert json.loads(files["openstack/latest/meta_data.json"])["uuid"] == server["id"]
        assert "openstack/latest/user_data" not in files and "ec2/latest/user-data" not in files
        # The same content as the metadata service's.
        async with httpx.AsyncClient(verify=verified_tls(),
                                     base_url=f"http://127.0.0.1:{cloud.rt.cfg.metadata_listen_port}") as c:
            proxy = Proxy(c, read_secret(tmp_path))
            served = (await proxy.fetch(server, "/openstack/latest/meta_data.json")).json()
        served.pop("random_seed")
        on_drive = json.loads(files["openstack/latest/meta_data.json"])
        on_drive.pop("random_seed")
        assert on_drive == served
    finally:
        await stop_cloud(cloud)


async def test_a_config_drive_is_built_by_the_host_alone(tmp_path):
    """No metadata service, no database: the compute host's driver renders it from the instance."""
    import base64
    from nefos.config import load_config
    from nefos.host.virt.fake import FakeDriver
    driver = FakeDriver(load_config(state_dir=tmp_path), "lonely")
    instance = {"id": 42, "uuid": "6f1c2a4e-0000-4000-8000-000000000042", "display_name": "alone",
                "hostname": "alone", "project_id": "p", "config_drive": "True", "metadata": {},
                "user_data": base64.b64encode(USER_DATA).decode(), "availability_zone": None}
    await driver.spawn(None, instance, {}, [])
    path = Path(driver.config_drives[instance["uuid"]]["path"])
    files = configdrive.read_files(path.read_bytes())
    md = json.loads(files["openstack/latest/meta_data.json"])
    assert (md["uuid"], md["name"], md["hostname"], md["availability_zone"]) == (
        instance["uuid"], "alone", "alone.novalocal", "nova")
    assert json.loads(files["ec2/latest/meta-data.json"])["instance-id"] == "i-0000002a"
    assert files["openstack/latest/user_data"] == USER_DATA
    assert json.loads(files["openstack/latest/network_data.json"]) == {}
    await driver.destroy(None, instance)
    assert not path.exists() and not path.parent.exists()
