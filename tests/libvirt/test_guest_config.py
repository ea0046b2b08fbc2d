"""The tiny guest uses its config drive: hostname, key pair, user data, and an SSH server to log into."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from nefos.guest.init import CONFIG_SCRIPT
from nefos.model.instance_metadata import InstanceMetadata
from tests.libvirt.conftest import make_network, wait_console
from tests.clouds import ADMIN

pytestmark = pytest.mark.libvirt

ADMIN_2_3 = {**ADMIN, "X-OpenStack-Nova-API-Version": "2.3"}  # OS-EXT-SRV-ATTR:hostname
USER_DATA = b"#!/bin/sh\necho NEFOS-USERDATA-RAN $((6*7))\n"
CONFIG_LINE = re.compile(r"NEFOS-CONFIG: source=(\S+) uuid=(\S+) hostname=(\S+) keys=(\d+) user-data=(\S+)")
PASSWORD_LINE = re.compile(r"NEFOS-CONFIG: .* root-password=(\S+)")
IP_LINE = re.compile(r"NEFOS-IP: ([0-9.]+)/")


def keygen(path: Path) -> str:
    """A fresh ed25519 key pair at ``path`` (and ``path``.pub); returns the public key."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "nefos-test", "-f", str(path)],
                   check=True, capture_output=True, timeout=30)
    return path.with_suffix(".pub").read_text().strip()


async def import_keypair(cloud, name: str, public_key: str) -> None:
    r = await cloud.compute.post("/v2.1/os-keypairs", json={"keypair": {"name": name, "public_key": public_key}})
    assert r.status_code == 200, r.text


async def allow_ssh(cloud, server_id: str) -> None:
    """Ingress TCP 22 from anywhere in the security groups of the server's port."""
    (port,) = await cloud.ports(device_id=server_id)
    for sg in port["security_groups"]:
        r = await cloud.network.post("/v2.0/security-group-rules", json={"security_group_rule": {
            "security_group_id": sg, "direction": "ingress", "ethertype": "IPv4", "protocol": "tcp",
            "port_range_min": 22, "port_range_max": 22, "remote_ip_prefix": "0.0.0.0/0"}})
        assert r.status_code == 201, r.text


def busybox_sh(script: str, *args: str) -> str:
    proc = subprocess.run(["/bin/busybox", "sh", "-c", script, "sh", *args], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_init_reads_meta_data_json_as_the_cloud_renders_it(tmp_path):
    """The init's parsing (busybox sh + awk) on a meta_data.json rendered by InstanceMetadata, with
    metadata values that look like the fields it wants."""
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFakeFakeFakeFakeFakeFakeFake me@host"
    instance = {"id": 12, "uuid": str(uuid.uuid4()), "hostname": "parse-me", "display_name": "Parse me \u00e9",
                "key_name": "k1", "key_data": key + "\n", "project_id": "p1",
                "metadata": {"evil": '{"hostname": "evil", "public_keys": {"x": "ssh-rsa AAAA evil"}}',
                             "hostname": "evil2", "nl": "a\nb\\c\u00e9"}}
    body, _ = InstanceMetadata(instance).openstack_item("latest", "meta_data.json")
    md = json.loads(body)
    (tmp_path / "meta_data.json").write_bytes(body)
    (tmp_path / "nefos-config").write_text(CONFIG_SCRIPT)
    run = lambda fn, *a: busybox_sh(f'. "$1"; shift; {fn} "$@"', str(tmp_path / "nefos-config"),
                                    str(tmp_path / "meta_data.json"), *a)

    assert run("md_value", "uuid") == f"{instance['uuid']}\n"
    assert md["hostname"] == "parse-me.novalocal" and run("md_value", "hostname") == "parse-me.novalocal\n"
    assert run("md_hostname") == "parse-me\n"
    assert run("md_public_keys") == key + "\n"  # only public_keys, not a lookalike in the metadata
    assert run("md_value", "meta/hostname") == "evil2\n"
    assert run("md_value", "meta/evil") == md["meta"]["evil"] + "\n"
    assert run("md_value", "meta/nl") == "a b\\c?\n"  # one line: escapes decoded, beyond ASCII as "?"
    assert run("md_value", "keys/0/name") == "k1\n"
    assert run("md_value", "random_seed") == md["random_seed"] + "\n"
    assert run("md_value", "launch_index") == "0\n"
    flat = dict(line.split("\t", 1) for line in busybox_sh(
        '. "$1"; json_flatten < "$2"', str(tmp_path / "nefos-config"), str(tmp_path / "meta_data.json")).splitlines())
    for name, value in md.items():
        if isinstance(value, int) or (isinstance(value, str) and value.isascii()):
            assert flat[name] == str(value), name

    # Without a key pair: no keys; a host name that is not one is not set.
    del instance["key_name"], instance["key_data"]
    instance["hostname"] = "bad name;reboot"
    (tmp_path / "meta_data.json").write_bytes(InstanceMetadata(instance).openstack_item("latest", "meta_data.json")[0])
    assert run("md_public_keys") == "" and run("md_hostname") == ""


def _crypt_sha512(password: str, salt: str) -> str:
    """crypt(3)'s SHA-512 hash by OpenSSL (not the guest's busybox), for checking a guest's."""
    return subprocess.run(["openssl", "passwd", "-6", "-salt", salt, "-stdin"], input=password, text=True,
                          capture_output=True, check=True, timeout=30).stdout.strip()


def _root_hash_matches(shadow: str, password: str) -> bool:
    (root,) = [line for line in shadow.splitlines() if line.startswith("root:")]
    stored = root.split(":")[1]
    return stored.startswith("$6$") and _crypt_sha512(password, stored.split("$")[2]) == stored


def test_the_init_sets_root_s_password_from_admin_pass(tmp_path):
    """The init's set_root_password (busybox sh, mkpasswd, awk) on the guest's shadow file: root's
    hash is the password's (checked with OpenSSL), the other lines and the mode are kept."""
    (tmp_path / "nefos-config").write_text(CONFIG_SCRIPT)
    shadow = tmp_path / "shadow"
    shadow.write_text("root:*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n")
    password = "Pass with $pecial 'chars' \\ and: colons"
    busybox_sh('. "$1"; NEFOS_SHADOW="$2" set_root_password "$3"', str(tmp_path / "nefos-config"), str(shadow),
               password)
    text = shadow.read_text()
    assert _root_hash_matches(text, password) and not _root_hash_matches(text, password + "x")
    assert text.splitlines()[1] == "nobody:*:19000:0:99999:7:::"
    assert oct(shadow.stat().st_mode & 0o777) == "0o600"


async def _boot_with_drive(cloud, name: str, cidr: str, key_name: str, **extra) -> tuple[str, str, dict]:
    net = await make_network(cloud, name=f"{name}-net", cidr=cidr)
    sid = (await cloud.boot(name=name, flavor="42", networks=[{"uuid": net["id"]}], config_drive=True,
                            key_name=key_name, **extra))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE", timeout=120)
    return sid, net["id"], await cloud.server(sid, headers=ADMIN_2_3)


async def test_a_guest_takes_hostname_key_and_user_data_from_its_config_drive(lvcloud, tmp_path):
    cloud = lvcloud
    await import_keypair(cloud, "cfg-key", keygen(tmp_path / "id"))
    sid, _, server = await _boot_with_drive(cloud, "cfg-guest", "10.79.0.0/24", "cfg-key",
                                            user_data=base64.b64encode(USER_DATA).decode())
    out = await wait_console(cloud, sid, "NEFOS-CONFIG:", timeout=120)
    (line,) = CONFIG_LINE.findall(out)
    assert line == ("config-drive", sid, server["OS-EXT-SRV-ATTR:hostname"], "1", "ran"), out[-2000:]
    assert server["OS-EXT-SRV-ATTR:hostname"] == "cfg-guest"
    assert "NEFOS-USERDATA-RAN 42" in out
    assert "NEFOS-SSH: dropbear listening on 22" in out


async def _ssh(ns: str, key: Path, ip: str, command: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", ns, "ssh", "-i", str(key), "-o", "StrictHostKeyChecking=no",
        "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "ConnectTimeout=30",
        "-o", "LogLevel=ERROR", f"root@{ip}", command,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


async def test_ssh_into_a_guest_with_its_key_pair(lvcloud, tmp_path):
    cloud = lvcloud
    await import_keypair(cloud, "ssh-key", keygen(tmp_path / "id"))
    keygen(tmp_path / "wrong")
    sid, net_id, server = await _boot_with_drive(cloud, "ssh-guest", "10.80.0.0/24", "ssh-key")
    await allow_ssh(cloud, sid)
    await wait_console(cloud, sid, "NEFOS-SSH: dropbear listening on 22", timeout=120)
    out = await wait_console(cloud, sid, "NEFOS-IP: 10.80.0.", timeout=120)
    (ip,) = set(IP_LINE.findall(out))
    assert ip in [a["addr"] for a in server["addresses"]["ssh-guest-net"]]
    ns = cloud.dhcp.namespace_of(net_id)

    rc, stdout, stderr = await _ssh(ns, tmp_path / "id", ip, "hostname; cat /proc/uptime")
    assert rc == 0, stderr
    hostname, uptime = stdout.splitlines()
    assert hostname == server["OS-EXT-SRV-ATTR:hostname"] == "ssh-guest"
    assert float(uptime.split()[0]) > 0

    rc, stdout, stderr = await _ssh(ns, tmp_path / "wrong", ip, "hostname")
    assert rc == 255 and stdout == "" and "Permission denied (publickey)" in stderr, (rc, stdout, stderr)


async def test_without_a_drive_the_guest_asks_the_metadata_service(lvcloud, tmp_path):
    """No config drive: once it has its lease the guest reaches 169.254.169.254 through its network's
    metadata proxy (the route comes with the lease) and configures itself from the service."""
    cloud = lvcloud
    await import_keypair(cloud, "md-key", keygen(tmp_path / "id"))
    net = await make_network(cloud, name="md-guest-net", cidr="10.83.0.0/24")
    sid = (await cloud.boot(name="md-guest", flavor="42", networks=[{"uuid": net["id"]}], key_name="md-key",
                            user_data=base64.b64encode(USER_DATA).decode()))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE", timeout=120)
    out = await wait_console(cloud, sid, "NEFOS-CONFIG:", timeout=120)
    (line,) = CONFIG_LINE.findall(out)
    assert line == ("metadata", sid, "md-guest", "1", "ran"), out[-2000:]
    assert "NEFOS-USERDATA-RAN 42" in out


@pytest.mark.parametrize("config_drive", [False, True], ids=["metadata-service", "config-drive"])
async def test_root_s_password_in_the_guest_is_the_one_the_create_answered(lvcloud, tmp_path, config_drive):
    """The create answer's adminPass (generated) is root's password in the guest: root's hash in the
    guest's /etc/shadow, read over SSH with the key pair, is that password's (checked with OpenSSL on
    the host); from the metadata service or the config drive alike."""
    cloud = lvcloud
    await import_keypair(cloud, "pw-key", keygen(tmp_path / "id"))
    cidr = "10.84.0.0/24" if config_drive else "10.85.0.0/24"
    net = await make_network(cloud, name="pw-guest-net", cidr=cidr)
    created = await cloud.boot(name="pw-guest", flavor="42", networks=[{"uuid": net["id"]}], key_name="pw-key",
                               config_drive=config_drive)
    sid, password = created["server"]["id"], created["server"]["adminPass"]
    await cloud.wait_status(sid, "ACTIVE", timeout=120)
    await allow_ssh(cloud, sid)
    out = await wait_console(cloud, sid, "NEFOS-CONFIG:", timeout=120)
    assert PASSWORD_LINE.findall(out) == ["set"], out[-2000:]
    assert password not in out  # nothing secret on the console
    out = await wait_console(cloud, sid, f"NEFOS-IP: {cidr.rsplit('.', 1)[0]}.", timeout=120)
    (ip,) = set(IP_LINE.findall(out))
    rc, shadow, stderr = await _ssh(cloud.dhcp.namespace_of(net["id"]), tmp_path / "id", ip, "cat /etc/shadow")
    assert rc == 0, stderr
    assert _root_hash_matches(shadow, password), shadow
    assert not _root_hash_matches(shadow, password[:-1])


async def test_a_rescue_guest_s_root_password_is_the_one_rescue_answered_and_change_password_is_refused(
        lvcloud, tmp_path):
    """changePassword on a libvirt guest (no QEMU guest agent) is refused as Nova refuses it (409),
    never answered as done; the rescue answer's adminPass is root's password in the rescue guest
    (its rescue config drive), checked as after a create: root's hash in /etc/shadow over SSH."""
    cloud = lvcloud
    await import_keypair(cloud, "rescue-key", keygen(tmp_path / "id"))
    cidr = "10.86.0.0/24"
    net = await make_network(cloud, name="rescue-pw-net", cidr=cidr)
    sid = (await cloud.boot(name="rescue-pw", flavor="42", networks=[{"uuid": net["id"]}],
                            key_name="rescue-key"))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE", timeout=120)
    await allow_ssh(cloud, sid)
    await wait_console(cloud, sid, "NEFOS-CONFIG:", timeout=120)

    r = await cloud.action(sid, {"changePassword": {"adminPass": "Never-set-1"}}, expect=409)
    assert r.json() == {"conflictingRequest": {"code": 409, "message": "QEMU guest agent is not enabled"}}
    server = await cloud.server(sid)
    assert (server["status"], server["OS-EXT-STS:task_state"]) == ("ACTIVE", None)

    password = (await cloud.action(sid, {"rescue": None}, expect=200)).json()["adminPass"]
    await cloud.wait_status(sid, "RESCUE", timeout=120)
    out = await wait_console(cloud, sid, "NEFOS-CONFIG:", timeout=120, count=2)
    assert PASSWORD_LINE.findall(out)[1] == "set", out[-2000:]
    assert password not in out
    out = await wait_console(cloud, sid, f"NEFOS-IP: {cidr.rsplit('.', 1)[0]}.", timeout=120, count=2)
    ip = IP_LINE.findall(out)[-1]
    rc, shadow, stderr = await _ssh(cloud.dhcp.namespace_of(net["id"]), tmp_path / "id", ip, "cat /etc/shadow")
    assert rc == 0, stderr
    assert _root_hash_matches(shadow, password), shadow
