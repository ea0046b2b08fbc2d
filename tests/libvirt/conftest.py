"""Real libvirt + QEMU (TCG) under the whole cloud.

These tests need libvirtd, QEMU, the Debian cloud kernel, busybox-static,
dropbear-bin and openssh-client (``scripts/install-test-deps.sh`` installs and starts them) and root. They do
not skip: a machine without them fails here, saying what is missing. The
daemons are started when they are not running (``virtlogd -d``, ``libvirtd -d``,
after making ``/dev/kvm`` access consistent, see
``shared/notes/hypervisor-on-these-machines.md``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.clouds import ADMIN, start_cloud, stop_cloud

URI = "qemu:///system"
HOST = "kvm-1"


def virsh(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["virsh", "-q", "-c", URI, *args], capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"virsh {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout.strip()


async def avirsh(*args: str, check: bool = True) -> str:
    return await asyncio.to_thread(virsh, *args, check=check)


def _libvirtd_answers() -> bool:
    return subprocess.run(["virsh", "-c", URI, "version"], capture_output=True, timeout=30).returncode == 0


def ensure_libvirtd() -> None:
    missing = [b for b in ("virsh", "libvirtd", "virtlogd", "qemu-system-x86_64", "qemu-img")
               if shutil.which(b) is None]
    assert not missing, (f"missing {', '.join(missing)}: run scripts/install-test-deps.sh "
                         "(libvirt-daemon-system qemu-system-x86 qemu-utils)")
    try:
        import libvirt  # noqa: F401
        import libvirtaio  # noqa: F401
    except ImportError as exc:
        raise AssertionError(f"libvirt-python is missing ({exc}): pip install -e '.[libvirt]'")
    from nefos.guest.build import find_kernel
    find_kernel()  # raises, naming the package, when the cloud kernel is missing
    assert os.path.exists("/bin/busybox"), "missing /bin/busybox: apt-get install busybox-static"
    assert os.path.exists("/usr/sbin/dropbear"), "missing /usr/sbin/dropbear: apt-get install dropbear-bin"
    assert shutil.which("ssh") and shutil.which("ssh-keygen"), "missing ssh: apt-get install openssh-client"
    if _libvirtd_answers():
        return
    assert os.geteuid() == 0, "libvirtd is not running and starting it needs root"
    if os.path.exists("/dev/kvm"):
        os.chmod("/dev/kvm", 0o666)  # root and the qemu user see the same KVM (no capability re-probes)
    subprocess.run(["virtlogd", "-d"], check=False)
    subprocess.run(["libvirtd", "-d"], check=True)
    deadline = time.monotonic() + 30
    while not _libvirtd_answers():
        assert time.monotonic() < deadline, "libvirtd did not answer within 30 s"
        time.sleep(0.2)


# Where the tiny guest is built once per session (the build is cached by the digest of its inputs);
# each test cloud still registers it in its own image service. None: in the cloud's state dir.
_guest_build_dir: Path | None = None


@pytest.fixture(scope="session")
def libvirtd(tmp_path_factory):
    global _guest_build_dir
    ensure_libvirtd()
    _guest_build_dir = tmp_path_factory.mktemp("guest-image")
    return URI


def qemu_reachable_dir(prefix: str = "nefos-instances-") -> Path:
    """A fresh directory QEMU's group may traverse (0710, group QEMU's), outside pytest's basetemp:
    every pytest session resets /tmp/pytest-of-<user> to 0700, which would shut QEMU out of a
    running test's files. Remove it with ``shutil.rmtree``."""
    from nefos.host.virt.libvirt import qemu_user
    user = qemu_user.from_capabilities(virsh("capabilities"), "qemu")
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))
    os.chown(path, -1, user.gid)
    os.chmod(path, 0o710)
    return path


async def start_libvirt_cloud(tmp_path, **overrides):
    overrides.setdefault("instances_path", str(qemu_reachable_dir() / "instances"))
    overrides.setdefault("virt_type", "qemu")
    overrides.setdefault("shutdown_timeout", 15.0)
    overrides.setdefault("sync_power_state_interval", -1)  # events only: the periodic sync must not help
    harness = await start_cloud(tmp_path, fake_hosts=0, drivers={HOST: "libvirt"}, **overrides)
    # The compute host's L2 agent and the DHCP agent (the all-in-one runs both beside a libvirt host).
    from nefos.agents.dhcp_agent import DhcpAgent
    from nefos.agents.l2_agent import L2Agent
    harness.l2_agent = L2Agent(harness.rt, HOST)
    # (its periodic resync at the default 5 s: the guests' ports are served on the notifications)
    harness.dhcp = DhcpAgent(harness.rt, HOST)
    for agent in (harness.l2_agent, harness.dhcp):
        await agent.start()
        harness.cloud.components.append(agent)
        harness.cloud._started.append(agent)
    from nefos.control.image.guest_image import ensure_guest_image
    harness.guest_image = await ensure_guest_image(harness.rt, build_dir=_guest_build_dir)
    harness.bridges = set()
    return harness


def remove_domains_under(path) -> None:
    """Destroy and undefine the domains whose files are under ``path`` (only a test's own)."""
    for name in virsh("list", "--all", "--name", check=False).split():
        if str(path) in virsh("dumpxml", name, check=False):
            virsh("destroy", name, check=False)
            virsh("undefine", name, "--managed-save", "--nvram", check=False)


async def stop_libvirt_cloud(harness) -> None:
    driver = harness.driver(HOST)
    try:
        await stop_cloud(harness)
        await harness.l2_agent.remove_firewall()
    finally:
        # Whatever a failed test left behind: its domains and the bridges of its networks.
        remove_domains_under(driver.instances_path)
        shutil.rmtree(driver.instances_path.parent, ignore_errors=True)
        for bridge in harness.bridges:
            subprocess.run(["ip", "link", "del", bridge], capture_output=True)


@pytest.fixture
async def lvcloud(libvirtd, tmp_path):
    harness = await start_libvirt_cloud(tmp_path)
    yield harness
    await stop_libvirt_cloud(harness)


async def make_network(harness, name="lv-net", cidr="10.77.0.0/24") -> dict:
    net = await harness.make_network(name=name, cidr=cidr)
    harness.bridges.add("brq" + net["id"][:11])
    return net


async def console(harness, server_id: str, length=None) -> str:
    body = {"os-getConsoleOutput": {} if length is None else {"length": length}}
    r = await harness.compute.post(f"/v2.1/servers/{server_id}/action", json=body, headers=ADMIN)
    assert r.status_code == 200, r.text
    return r.json()["output"]


def shown_whole(out: str, text: str, count: int = 1) -> bool:
    """``text`` is on the console ``count`` times, the line holding the last of them complete: a
    console read while the guest writes can end in the middle of a line ("... answe")."""
    if out.count(text) < count:
        return False
    at = -1
    for _ in range(count):
        at = out.index(text, at + 1)
    return "\n" in out[at + len(text):]


async def wait_console(harness, server_id: str, text: str, timeout: float = 60, count: int = 1) -> str:
    deadline = time.monotonic() + timeout
    while True:
        out = await console(harness, server_id)
        if shown_whole(out, text, count):
            return out
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} (x{count}) not on the console of {server_id} within {timeout} s; "
                                 f"the console ends with:\n{out[-2000:]}")
        await asyncio.sleep(0.2)


async def _ping_once(ns: str, ip: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", ns, "busybox", "ping", "-c", "1", "-W", "1", ip,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    return proc.returncode, out.decode(errors="replace")


async def allow_icmp(harness, port: dict) -> list[str]:
    """An ingress ICMP rule (from anywhere) in each security group of ``port``; returns the rule ids."""
    ids = []
    for sg in port["security_groups"]:
        r = await harness.network.post("/v2.0/security-group-rules", json={"security_group_rule": {
            "security_group_id": sg, "direction": "ingress", "ethertype": "IPv4", "protocol": "icmp",
            "remote_ip_prefix": "0.0.0.0/0"}})
        assert r.status_code == 201, r.text
        ids.append(r.json()["security_group_rule"]["id"])
    return ids


async def assert_no_ping(harness, network_id: str, ip: str, tries: int = 3) -> None:
    ns = harness.dhcp.namespace_of(network_id)
    for _ in range(tries):
        rc, out = await _ping_once(ns, ip)
        assert rc != 0, f"{ip} answered ping from {ns}: {out}"


async def ping_from_dhcp_namespace(harness, network_id: str, ip: str, timeout: float = 20) -> float:
    """Ping the guest from the network's DHCP namespace (on the bridge); returns the seconds it took."""
    ns = harness.dhcp.namespace_of(network_id)
    t0 = time.monotonic()
    while True:
        rc, out = await _ping_once(ns, ip)
        if rc == 0:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"{ip} does not answer ping from {ns}: {out}")
        await asyncio.sleep(0.2)


async def wait_domstate(uuid: str, wanted: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        state = await avirsh("domstate", uuid, "--reason", check=False)
        if state.startswith(wanted):
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"domain {uuid} is {state!r}, not {wanted!r}")
        await asyncio.sleep(0.1)
