"""A real guest through the whole cloud: boot, every power operation, out-of-band changes, delete."""

from __future__ import annotations

import asyncio
import os
import stat
import time

import pytest

from tests.libvirt.conftest import (
    HOST, allow_icmp, assert_no_ping, avirsh, console, make_network, ping_from_dhcp_namespace, wait_console,
    wait_domstate,
)

RUNNING, PAUSED, SHUTDOWN, SUSPENDED = 1, 3, 4, 7

pytestmark = pytest.mark.libvirt


async def _status(harness, server_id, status, power_state, timeout=60):
    server = await harness.wait_status(server_id, status, timeout=timeout)
    assert server["OS-EXT-STS:power_state"] == power_state, server
    return server


async def test_a_real_guest_through_its_whole_life(lvcloud):
    cloud = lvcloud
    driver = cloud.driver(HOST)
    net = await make_network(cloud)
    t0 = time.monotonic()
    server = (await cloud.boot(name="real-1", flavor="42", networks=[{"uuid": net["id"]}]))["server"]
    sid = server["id"]
    await _status(cloud, sid, "ACTIVE", RUNNING, timeout=120)
    active_after = time.monotonic() - t0

    # Booted for real: the guest's init ran and found its NIC with the port's MAC on the network's bridge.
    (port,) = await cloud.ports(device_id=sid)
    out = await wait_console(cloud, sid, "NEFOS-MAC")
    booted_after = time.monotonic() - t0
    assert "Linux version" in out and "NEFOS-BOOT" in out
    assert f"NEFOS-MAC: {port['mac_address']}" in out
    tap = "tap" + port["id"][:11]
    bridge = "brq" + net["id"][:11]
    assert os.path.realpath(f"/sys/class/net/{tap}/master").endswith("/" + bridge)
    assert port["status"] == "ACTIVE"
    # The console API's length is in lines, as Nova's.
    assert len((await console(cloud, sid, length=2)).split("\n")) == 2
    await wait_domstate(sid, "running")
    xml = await avirsh("dumpxml", sid)
    assert "<acpi/>" in xml and f"<mac address='{port['mac_address']}'/>" in xml
    inst_dir = driver.instances_path / sid
    assert (inst_dir / "disk").is_file() and (inst_dir / "console.log").is_file()
    # Diagnostics from the domain's own statistics, in both forms.
    flavor = (await cloud.compute.get("/v2.1/flavors/42")).json()["flavor"]
    r = await cloud.compute.get(f"/v2.1/servers/{sid}/diagnostics")
    assert r.status_code == 200, r.text
    diag = r.json()
    assert diag["memory"] == flavor["ram"] * 1024 and diag["cpu0_time"] > 0, diag
    assert {f"{tap}_rx", f"{tap}_tx_packets", "vda_read", "vda_write_req"} <= set(diag), diag
    r = await cloud.compute.get(f"/v2.1/servers/{sid}/diagnostics", headers={"OpenStack-API-Version": "compute 2.48"})
    assert r.status_code == 200, r.text
    diag = r.json()
    assert (diag["state"], diag["driver"], diag["hypervisor"]) == ("running", "libvirt", driver.virt_type), diag
    assert diag["num_cpus"] == flavor["vcpus"] and diag["cpu_details"][0]["time"] > 0, diag
    assert [nic["mac_address"] for nic in diag["nic_details"]] == [port["mac_address"]], diag
    assert diag["nic_details"][0]["rx_octets"] is not None and diag["num_disks"] >= 1, diag
    assert diag["memory_details"]["maximum"] == flavor["ram"] and isinstance(diag["uptime"], int), diag
    # No other local user reads the guest's files; QEMU's group reaches its disk.
    # QEMU's group may pass (and the instance directory be read) there; nobody else.
    assert stat.S_IMODE(inst_dir.stat().st_mode) == 0o750 and stat.S_IMODE(driver.instances_path.stat().st_mode) == 0o750
    assert inst_dir.stat().st_gid == driver.instances_path.stat().st_gid == driver.qemu_user.gid
    assert stat.S_IMODE((inst_dir / "disk").stat().st_mode) & 0o007 == 0
    assert stat.S_IMODE((inst_dir / "console.log").stat().st_mode) & 0o007 == 0  # virtlogd's file
    print(f"\nboot: ACTIVE after {active_after:.2f} s, guest init on the console after {booted_after:.2f} s")

    # DHCP: the guest got exactly its port's address from the network's dnsmasq.
    ip = port["fixed_ips"][0]["ip_address"]
    out = await wait_console(cloud, sid, "NEFOS-IP:")
    got_ip_after = time.monotonic() - t0
    assert f"NEFOS-IP: {ip}/24 on eth0" in out, out[-1500:]
    # Security groups: the default group lets in only its own members, so the DHCP namespace's
    # ping goes unanswered; an ingress ICMP rule added through the API opens it on the running guest,
    # removing it closes it again.
    await assert_no_ping(cloud, net["id"], ip)
    t = time.monotonic()
    (rule,) = await allow_icmp(cloud, port)
    await ping_from_dhcp_namespace(cloud, net["id"], ip)
    print(f"DHCP: {ip} on the console after {got_ip_after:.2f} s; no ping until an ICMP rule, "
          f"then answered {time.monotonic() - t:.2f} s after adding it")
    r = await cloud.network.delete(f"/v2.0/security-group-rules/{rule}")
    assert r.status_code == 204, r.text
    await asyncio.sleep(1.0)
    await assert_no_ping(cloud, net["id"], ip)
    await allow_icmp(cloud, port)
    await ping_from_dhcp_namespace(cloud, net["id"], ip)

    # stop: a clean ACPI shutdown (the guest's acpid powers it off), then SHUTOFF.
    t = time.monotonic()
    await cloud.action(sid, {"os-stop": None})
    await _status(cloud, sid, "SHUTOFF", SHUTDOWN)
    await wait_domstate(sid, "shut off")
    assert "NEFOS-ACPI: power button" in await console(cloud, sid)
    print(f"stop: {time.monotonic() - t:.2f} s")

    t = time.monotonic()
    await cloud.action(sid, {"os-start": None})
    await _status(cloud, sid, "ACTIVE", RUNNING)
    await wait_domstate(sid, "running")
    await wait_console(cloud, sid, "NEFOS-BOOT", count=2)
    print(f"start: {time.monotonic() - t:.2f} s")
    await wait_console(cloud, sid, f"NEFOS-IP: {ip}/24", count=2)  # the L2 agent wired the new tap

    t = time.monotonic()
    await cloud.action(sid, {"reboot": {"type": "SOFT"}})
    await _status(cloud, sid, "ACTIVE", RUNNING)
    out = await wait_console(cloud, sid, "NEFOS-BOOT", count=3)
    assert out.count("NEFOS-ACPI: power button") == 2  # soft: the guest was asked to shut down
    print(f"soft reboot: {time.monotonic() - t:.2f} s")
    await wait_console(cloud, sid, f"NEFOS-IP: {ip}/24", count=3)

    t = time.monotonic()
    await cloud.action(sid, {"reboot": {"type": "HARD"}})
    await _status(cloud, sid, "ACTIVE", RUNNING)
    out = await wait_console(cloud, sid, "NEFOS-BOOT", count=4)
    assert out.count("NEFOS-ACPI: power button") == 2  # hard: it was not asked
    print(f"hard reboot: {time.monotonic() - t:.2f} s")
    await wait_console(cloud, sid, f"NEFOS-IP: {ip}/24", count=4)

    await cloud.action(sid, {"pause": None})
    await _status(cloud, sid, "PAUSED", PAUSED)
    await wait_domstate(sid, "paused")
    r = await cloud.compute.get(f"/v2.1/servers/{sid}/diagnostics")
    assert r.status_code == 409 and "power state paused" in r.text, r.text
    await cloud.action(sid, {"unpause": None})
    await _status(cloud, sid, "ACTIVE", RUNNING)
    await wait_domstate(sid, "running")

    t = time.monotonic()
    await cloud.action(sid, {"suspend": None})
    await _status(cloud, sid, "SUSPENDED", SUSPENDED)
    assert await wait_domstate(sid, "shut off") == "shut off (saved)"  # a managed save
    await cloud.action(sid, {"resume": None})
    await _status(cloud, sid, "ACTIVE", RUNNING)
    await wait_domstate(sid, "running")
    assert (await console(cloud, sid)).count("NEFOS-BOOT") == 4  # restored, not booted again
    print(f"suspend + resume: {time.monotonic() - t:.2f} s")
    await ping_from_dhcp_namespace(cloud, net["id"], ip)  # the restored guest's new tap, wired again

    # Out of band: virsh destroy -> SHUTOFF within 2 s, through the lifecycle event (the periodic
    # sync is off in these tests).
    await asyncio.sleep(1.0)
    t = time.monotonic()
    await avirsh("destroy", sid)  # libvirt's own stop of QEMU takes ~1.7 s here (TERM, then its wait)
    destroyed = time.monotonic()
    await _status(cloud, sid, "SHUTOFF", SHUTDOWN, timeout=2.0)
    print(f"virsh destroy took {destroyed - t:.2f} s; SHUTOFF {time.monotonic() - destroyed:.2f} s after it")

    # Out of band the other way: a stopped server's domain started by hand is stopped again (rule f).
    await avirsh("start", sid)
    await wait_domstate(sid, "shut off", timeout=30)
    server = await _status(cloud, sid, "SHUTOFF", SHUTDOWN)

    # Delete leaves nothing: no domain, no disks, no tap, no DHCP host entry, no port.
    await cloud.action(sid, {"os-start": None})
    await _status(cloud, sid, "ACTIVE", RUNNING)
    dhcp_hosts = cloud.dhcp._dir(net["id"]) / "host"
    assert port["mac_address"].lower() in dhcp_hosts.read_text().lower()
    r = await cloud.compute.delete(f"/v2.1/servers/{sid}")
    assert r.status_code == 204, r.text
    await cloud.wait_gone(sid, timeout=30)
    assert await avirsh("domstate", sid, check=False) == ""
    assert sid not in await avirsh("list", "--all", "--uuid")
    assert not inst_dir.exists()
    assert not os.path.exists(f"/sys/class/net/{tap}")
    assert await cloud.ports(device_id=sid) == []
    deadline = time.monotonic() + 10
    while port["mac_address"].lower() in dhcp_hosts.read_text().lower():
        assert time.monotonic() < deadline, "the deleted port's DHCP host entry is still there"
        await asyncio.sleep(0.1)

    # The network goes: its DHCP server, namespace and port go with it.
    ns = cloud.dhcp.namespace_of(net["id"])
    assert os.path.exists(f"/run/netns/{ns}")
    r = await cloud.network.delete(f"/v2.0/networks/{net['id']}")
    assert r.status_code == 204, r.text
    deadline = time.monotonic() + 10
    while os.path.exists(f"/run/netns/{ns}") or net["id"] in cloud.dhcp._procs:
        assert time.monotonic() < deadline, "the DHCP namespace outlived its network"
        await asyncio.sleep(0.1)
    # ... and the L2 agent removes the network's bridge once it is empty.
    await cloud.l2_agent.remove_unused_bridges()  # (or its periodic clean-up got there first)
    assert not os.path.exists(f"/sys/class/net/{bridge}")


async def test_guest_initiated_poweroff_is_seen_at_once(lvcloud):
    """The guest powers itself off (its acpid answers an ACPI button pressed behind Nefos' back)."""
    cloud = lvcloud
    net = await make_network(cloud, name="lv-net-2", cidr="10.78.0.0/24")
    sid = (await cloud.boot(name="real-2", flavor="42", networks=[{"uuid": net["id"]}]))["server"]["id"]
    await _status(cloud, sid, "ACTIVE", RUNNING, timeout=120)
    await wait_console(cloud, sid, "NEFOS-MAC")
    await avirsh("shutdown", sid)
    await wait_domstate(sid, "shut off", timeout=30)  # the guest powered itself off
    t = time.monotonic()
    await _status(cloud, sid, "SHUTOFF", SHUTDOWN, timeout=2.0)  # seen within 2 s, through the event
    assert "NEFOS-ACPI: power button" in await console(cloud, sid)
    print(f"\nguest poweroff -> SHUTOFF: {time.monotonic() - t:.2f} s after the domain went off")
    r = await cloud.compute.delete(f"/v2.1/servers/{sid}")
    assert r.status_code == 204
    await cloud.wait_gone(sid, timeout=30)
    assert sid not in await avirsh("list", "--all", "--uuid")
