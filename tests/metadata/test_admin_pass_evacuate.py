"""The password an evacuation answers (before 2.14) or is given (any version) is the evacuated guest's,
as Nova's rebuild on the destination host: ``admin_pass`` in the meta_data.json of the destination's
config drive and of the metadata service. It rides with the evacuation to the destination host
(the conductor's ``evacuate_instance`` 1.5, the compute host's ``rebuild_instance`` 1.2); a host
pinned below those versions cannot take it, so the evacuation of a server with a password is
refused rather than carried out without it."""

from __future__ import annotations

import json

import httpx

from nefos.bus.versioning import UnsupportedVersion
from nefos.host.virt import configdrive
from nefos.http_client import verified_tls
from tests.metadata.conftest import Proxy, read_secret
from tests.clouds import start_cloud, stop_cloud
from tests.moves.test_evacuate import evacuate, version, wait_evacuated, wait_state


async def _cloud_with_a_lost_host(tmp_path):
    """Two fake hosts on the shipped liveness options; host-1 forced down (as an operator does)."""
    cloud = await start_cloud(tmp_path, fake_hosts=2)
    cloud.proxy = Proxy(httpx.AsyncClient(verify=verified_tls(),
                                          base_url=f"http://127.0.0.1:{cloud.rt.cfg.metadata_listen_port}",
                                          timeout=30), read_secret(tmp_path))
    return cloud


async def _boot_on_host_1(cloud, name: str, cidr: str, **extra) -> dict:
    net = await cloud.make_network(name=f"{name}-net", cidr=cidr)
    created = (await cloud.boot(name=name, networks=[{"uuid": net["id"]}], availability_zone="nova:host-1",
                                **extra))["server"]
    await cloud.wait_status(created["id"], "ACTIVE")
    return await cloud.server(created["id"])


async def _force_down(cloud, host: str) -> None:
    r = await cloud.compute.put("/v2.1/os-services/force-down", headers=version("2.11"),
                                json={"host": host, "binary": "nova-compute", "forced_down": True})
    assert r.status_code == 200, r.text
    await wait_state(cloud, host, "down")


async def _meta_data(cloud, server: dict) -> dict:
    return (await cloud.proxy.fetch(server, "/openstack/latest/meta_data.json")).json()


async def test_the_password_an_evacuation_answers_reaches_the_evacuated_guest(tmp_path):
    cloud = await _cloud_with_a_lost_host(tmp_path)
    try:
        server = await _boot_on_host_1(cloud, "ev-pw-vm", "10.9.1.0/24")
        created_password = (await _meta_data(cloud, server))["admin_pass"]  # the guest read its own
        await _force_down(cloud, "host-1")
        answered = (await evacuate(cloud, server["id"], {"onSharedStorage": False})).json()["adminPass"]
        assert answered and answered != created_password
        evacuated = await wait_evacuated(cloud, server["id"])
        assert (evacuated["status"], evacuated["OS-EXT-SRV-ATTR:host"]) == ("ACTIVE", "host-2")
        assert (await _meta_data(cloud, server))["admin_pass"] == answered
        assert "admin_pass" not in await _meta_data(cloud, server)  # served once, as after a create
    finally:
        await cloud.proxy.client.aclose()
        await stop_cloud(cloud)


async def test_a_password_given_to_an_evacuation_is_on_the_destination_s_config_drive(tmp_path):
    cloud = await _cloud_with_a_lost_host(tmp_path)
    try:
        server = await _boot_on_host_1(cloud, "ev-cd-vm", "10.9.2.0/24", config_drive=True)
        await _force_down(cloud, "host-1")
        r = await evacuate(cloud, server["id"], {"adminPass": "Evacuated-pass-1"}, v="2.14")
        assert r.content == b""  # no body from 2.14, as Nova
        evacuated = await wait_evacuated(cloud, server["id"])
        assert (evacuated["status"], evacuated["OS-EXT-SRV-ATTR:host"]) == ("ACTIVE", "host-2")
        files = configdrive.read_files(cloud.driver("host-2").config_drives[server["id"]]["image"])
        for md_version in ("latest", "2012-08-10"):
            assert json.loads(files[f"openstack/{md_version}/meta_data.json"])["admin_pass"] == "Evacuated-pass-1"
        assert (await _meta_data(cloud, server))["admin_pass"] == "Evacuated-pass-1"
    finally:
        await cloud.proxy.client.aclose()
        await stop_cloud(cloud)


async def test_a_host_pinned_below_the_password_s_version_is_never_sent_an_evacuation_without_it(tmp_path):
    """The compute client pinned to 1.1 (the version before the password) refuses to send an
    evacuation carrying one, with the version it is pinned to; without a password the old form goes."""
    from nefos.clients.compute import ComputeRPCAPI
    cloud = await start_cloud(tmp_path, fake_hosts=1, upgrade_levels={"compute": "1.1"})
    try:
        client = ComputeRPCAPI(cloud.rt.bus)
        migration = {"uuid": "m", "type": "evacuation"}
        try:
            await client.rebuild_instance(None, "host-1", "no-such-instance", "image", False,
                                          migration=migration, new_pass="Never-sent-1")
        except UnsupportedVersion as exc:
            assert "rebuild_instance" in str(exc) and "1.1" in str(exc)
        else:
            raise AssertionError("an evacuation with a password was sent to a host pinned to 1.1")
    finally:
        await stop_cloud(cloud)
