"""The libvirt/QEMU driver (Nova's ``LibvirtDriver``, asyncio style).

Options (``nefos.config``): ``virt_type`` (``qemu`` = TCG, ``kvm``, or
``auto``: KVM only when a KVM guest really boots here, see ``probe``),
``connection_uri`` (``qemu:///system``), ``instances_path``
(``<state_dir>/instances``).

* Blocking libvirt calls run in worker threads; libvirt's events come through
  ``libvirtaio`` (``host.Host``).
* QEMU runs as libvirt's own user, never root; the host refuses to start
  otherwise or when that user cannot reach ``instances_path`` (``qemu_user``).
* spawn: disks from the image (a qcow2 overlay over the cached base; kernel
  and ramdisk straight from the cache for images with ``kernel_id`` /
  ``ramdisk_id``, booted with ``os_command_line``), ephemeral and swap disks
  from ``block_device_info``, the serial console logged by virtlogd to
  ``<instance dir>/console.log`` (bounded by its max_size, rotated), ACPI on, one ``<interface type='ethernet'>``
  per VIF with the port's MAC and tap name (libvirt makes the tap and attaches
  it to nothing); the domain is persistent (defined, then started — paused when
  asked to, for the VIF-plugged wait). A guest that needs a config drive
  (``nefos.host.virt.configdrive``) gets ``<instance dir>/disk.config`` (0640, QEMU's
  group) as a read-only IDE CD-ROM ``hdd`` (the default i440fx machine has IDE;
  Nova's libvirt driver uses the same bus and last IDE slot).
* stop: ACPI shutdown (pressed again every few seconds) within the timeout,
  then destroy; reboot SOFT: the same clean shutdown then start, falling back
  to HARD (destroy, start); pause/unpause; suspend = managed save, resume
  restores it; destroy = destroy, undefine (managed save, NVRAM, snapshot
  metadata too), remove the instance directory.
* libvirt lifecycle events become ``LifecycleEvent``s (Nova's mapping;
  a managed save's STOPPED is SUSPENDED); the connection's close callback
  becomes ``ConnectionEvent(connected=False)``, the reconnect (with backoff)
  ``ConnectionEvent(connected=True)``.
* VIFs: libvirt creates each tap when the domain starts and removes it when
  the domain stops; the host's L2 agent (``nefos.agents.l2_agent``) sees that
  over netlink, wires the tap into its network's bridge (creating the bridge,
  security groups first) and reports the port up; the tap gone, down
  (``network-vif-plugged`` / ``-unplugged``). Without a running L2 agent a
  guest's tap stays on no bridge: no DHCP, no traffic (an L2 agent that is down).
* A compute host in a network namespace of its own (``libvirtd_netns``: the namespace libvirtd
  makes taps in) moves each tap into its namespace once libvirt made it (``tap_netns``).
* os-interface: ``attach_interface`` hot-plugs the same ``<interface>`` spawn writes
  (``attachDeviceFlags``: the definition, and the live guest when it runs), ``detach_interface``
  unplugs it and waits until the guest released it; the domain's metadata follows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import socket
import time
from pathlib import Path

from nefos import exceptions, fileperms
from nefos.clients.image import ImageHTTPClient
from nefos.model import states
from nefos.host.virt import configdrive, event as virtevent
from nefos.host.virt.driver import ComputeDriver
from nefos.host.virt.libvirt import config as vconfig, diagnostics as lv_diagnostics
from nefos.host.virt.libvirt import imagebackend, probe, qemu_user, rescue as rescue_mod, tap_netns, vif as vifs
from nefos.host.virt.libvirt.host import Host, libvirt_module
from nefos.waiting import event_set_within

LOG = logging.getLogger(__name__)

DEFAULT_CMDLINE = "console=ttyS0 panic=-1"
SHUTDOWN_RETRY_INTERVAL = 3.0  # seconds between ACPI power-button presses while waiting
MAX_CONSOLE_BYTES = 100 * 1024  # Nova's limit on os-getConsoleOutput
CONFIG_DRIVE_TARGET = "hdd"  # the last IDE slot, never a disk's (those are virtio: vd*)
DETACH_TIMEOUT = 30.0  # seconds a running guest has to release a hot-unplugged NIC
DETACH_POLL = 0.25
DETACH_RETRY = 5.0  # seconds between unplug requests to a guest that has not released the NIC yet
_CONTROL_CHARS = re.compile("[\x00-\x08\x0b-\x1f\x7f]")


class LibvirtDriver(ComputeDriver):
    supports_paused_start = True

    def __init__(self, cfg, host: str):
        super().__init__(cfg, host)
        self.uri = getattr(cfg, "connection_uri", "") or "qemu:///system"
        self.requested_virt_type = (getattr(cfg, "virt_type", "") or "auto").lower()
        if self.requested_virt_type not in ("auto", "qemu", "kvm"):
            raise ValueError(f"virt_type must be auto, qemu or kvm, not {self.requested_virt_type!r}")
        self.virt_type = self.requested_virt_type if self.requested_virt_type != "auto" else None
        path = getattr(cfg, "instances_path", "") or Path(cfg.state_dir) / "instances"
        self.instances_path = Path(path).resolve()
        self.image_client = ImageHTTPClient(cfg)
        self.image_cache = imagebackend.ImageCache(self.instances_path, self.image_client)
        self._host = Host(self.uri, host, on_lifecycle=self._on_lifecycle, on_connection=self._on_connection)
        self.state_dir = Path(cfg.state_dir).resolve()
        self.qemu_user: qemu_user.QemuUser | None = None
        self.hypervisor_version = 0
        self._stopped: dict[str, asyncio.Event] = {}  # instances whose stop we are waiting for

    # Host ----------------------------------------------------------------------------------
    async def init_host(self) -> None:
        if self.virt_type is None:
            works, why = await probe.kvm_works()
            self.virt_type = "kvm" if works else "qemu"
            LOG.info("virt_type auto: %s (%s)", self.virt_type, why)
        self.instances_path.mkdir(parents=True, exist_ok=True)
        await self._host.connect()  # emits ConnectionEvent either way
        if self._host.connected:
            await self.prepare_for_qemu()  # refuses to start when QEMU would run as root or see nothing
            with contextlib.suppress(Exception):
                self.hypervisor_version = await self._host.call(self._host.get_connection().getVersion)

    async def cleanup_host(self) -> None:
        await self._host.close()
        await self.image_client.close()

    async def prepare_for_qemu(self) -> qemu_user.QemuUser:
        """Who QEMU runs as (never root), with ``instances_path`` reachable by it; once per driver."""
        if self.qemu_user is None:
            caps = await self._host.call(self._host.get_connection().getCapabilities)
            user = qemu_user.from_capabilities(caps, self.virt_type or "qemu")
            await asyncio.to_thread(qemu_user.prepare_instances_path, self.instances_path, self.state_dir, user)
            LOG.info("guests run as %s; %s is reachable by it", user, self.instances_path)
            self.qemu_user = user
        return self.qemu_user

    def get_available_nodes(self) -> list[str]:
        return [self.host]

    async def get_available_resource(self, node: str) -> dict:
        memory_mb = 0
        with contextlib.suppress(OSError, ValueError):
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemTotal:"):
                    memory_mb = int(line.split()[1]) // 1024
        st = os.statvfs(self.instances_path if self.instances_path.exists() else "/")
        if self._host.connected and not self.hypervisor_version:
            with contextlib.suppress(Exception):
                self.hypervisor_version = await self._host.call(self._host.get_connection().getVersion)
        return {"vcpus": os.cpu_count() or 1, "memory_mb": memory_mb,
                "local_gb": st.f_blocks * st.f_frsize // imagebackend.GiB,
                "hypervisor_type": "QEMU", "hypervisor_version": self.hypervisor_version,
                "host_ip": _host_ip()}

    async def list_instance_uuids(self) -> list[str]:
        """The guests of this driver: domains whose files live under ``instances_path`` (a libvirtd
        may also run other clouds' or other users' domains; those are not ours to reconcile)."""
        return [dom.UUIDString() for dom, _xml in await self._own_domains()]

    async def _own_domains(self) -> list[tuple[object, str]]:
        conn = self._host.get_connection()
        owned = []
        for dom in await self._host.call(conn.listAllDomains, 0):
            try:
                xml = await self._host.call(dom.XMLDesc, 0)
            except libvirt_module().libvirtError:
                continue  # undefined meanwhile
            if self._owns(xml):
                owned.append((dom, xml))
        return owned

    def _owns(self, xml: str) -> bool:
        return f"{self.instances_path}/" in xml and vconfig.NEFOS_NS in xml

    # Helpers -------------------------------------------------------------------------------
    def instance_dir(self, uuid: str) -> Path:
        return self.instances_path / uuid

    def console_log_path(self, uuid: str) -> Path:
        return self.instance_dir(uuid) / "console.log"

    async def lookup_domain(self, uuid: str, missing_ok: bool = False):
        libvirt = libvirt_module()
        conn = self._host.get_connection()
        try:
            return await self._host.call(conn.lookupByUUIDString, uuid)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                if missing_ok:
                    return None
                raise exceptions.InstanceNotFound(instance_id=uuid) from exc
            raise

    async def _state(self, dom) -> int:
        state, _reason = await self._host.call(dom.state)
        return state

    async def is_active(self, dom) -> bool:
        return bool(await self._host.call(dom.isActive))

    # Spawn ---------------------------------------------------------------------------------
    async def spawn(self, ctx, instance: dict, image_meta: dict, network_info: list[dict],
                    block_device_info: dict | None = None, power_on: bool = True,
                    paused: bool = False, **kwargs) -> None:
        libvirt = libvirt_module()
        uuid = instance["uuid"]
        conn = self._host.get_connection()
        inst_dir = self.instance_dir(uuid)
        try:
            user = await self.prepare_for_qemu()
            inst_dir.mkdir(parents=True, exist_ok=True)
            qemu_user.share_dir(inst_dir, user)
            spec = await self._guest_spec(instance, image_meta or {}, network_info or [],
                                          block_device_info or {}, inst_dir)
            for disk in spec.disks:
                if disk.readonly:  # the config drive: QEMU's group reads it, nobody writes it
                    fileperms.share_file(Path(disk.path), user.gid)
                else:
                    qemu_user.hand_over(Path(disk.path), user)
            xml = vconfig.domain_xml(spec)
            t0 = time.monotonic()
            dom = await self._host.call(conn.defineXML, xml)
            if power_on:
                flags = libvirt.VIR_DOMAIN_START_PAUSED if paused else 0
                await self._host.call(dom.createWithFlags, flags)
                await self._taps_here(dom)
            LOG.info("instance %s: domain %s defined%s in %.3f s (%s)", uuid, spec.name,
                     (" and started paused" if paused else " and started") if power_on else "",
                     time.monotonic() - t0, self.virt_type)
        except exceptions.HypervisorUnavailable:
            await self._remove_guest(uuid)
            raise
        except Exception as exc:
            await self._remove_guest(uuid)
            if isinstance(exc, exceptions.NefosError):
                raise
            raise exceptions.InstanceDeployFailure(reason=f"libvirt: {str(exc).strip()}") from exc

    async def _guest_spec(self, instance: dict, image_meta: dict, network_info: list[dict],
                          bdi: dict, inst_dir: Path) -> vconfig.GuestSpec:
        uuid = instance["uuid"]
        props = image_meta.get("properties") or {}
        flavor = instance.get("flavor") or {}
        spec = vconfig.GuestSpec(
            name=_domain_name(instance), uuid=uuid, virt_type=self.virt_type or "qemu",
            memory_mb=int(instance.get("memory_mb") or flavor.get("memory_mb") or 512),
            vcpus=int(instance.get("vcpus") or flavor.get("vcpus") or 1),
            console_log=str(inst_dir / "console.log"), display_name=instance.get("display_name") or "",
            flavor_name=flavor.get("name") or "",
            vnc_listen=self.cfg.vnc_server_listen if self.cfg.vnc_enabled else None,
            spice_listen=self.cfg.spice_server_listen if self.cfg.spice_enabled else None)
        if props.get("kernel_id"):
            spec.kernel = str((await self.image_cache.fetch(props["kernel_id"], "aki"))[0])
            if props.get("ramdisk_id"):
                spec.ramdisk = str((await self.image_cache.fetch(props["ramdisk_id"], "ari"))[0])
            spec.cmdline = props.get("os_command_line") or DEFAULT_CMDLINE
        used: set[str] = set()
        root_target = _target(bdi.get("root_device_name") or "/dev/vda", used)
        image_id = image_meta.get("id")
        if image_id:
            disk = inst_dir / "disk"
            fmt = await self.image_cache.create_root_disk(image_id, image_meta.get("disk_format"), disk,
                                                          int(instance.get("root_gb") or 0))
            spec.disks.append(vconfig.Disk(str(disk), root_target, fmt))
        for i, eph in enumerate(bdi.get("ephemerals") or []):
            size = int(eph.get("size") or 0)
            if size <= 0:
                continue
            path = inst_dir / f"disk.eph{i}"
            fmt = await self.image_cache.create_blank(path, size * imagebackend.GiB)
            spec.disks.append(vconfig.Disk(str(path), _target(eph.get("device_name"), used), fmt))
        swap = bdi.get("swap") or {}
        if int(swap.get("swap_size") or 0) > 0:
            path = inst_dir / "disk.swap"
            fmt = await self.image_cache.create_blank(path, int(swap["swap_size"]) * imagebackend.MiB)
            spec.disks.append(vconfig.Disk(str(path), _target(swap.get("device_name"), used), fmt))
        if configdrive.required_by(instance, self.cfg, image_meta):
            image = await asyncio.to_thread(configdrive.build, instance, self.cfg, network_info)
            path = configdrive.write(inst_dir / configdrive.FILE_NAME, image)
            spec.disks.append(vconfig.Disk(str(path), CONFIG_DRIVE_TARGET, "raw", bus="ide", device="cdrom",
                                           readonly=True))
        spec.vifs.extend(_vif_config(vif) for vif in network_info)
        return spec

    # Destroy -------------------------------------------------------------------------------
    async def destroy(self, ctx, instance: dict, network_info: list[dict] | None = None) -> None:
        await self._remove_guest(instance["uuid"], strict=True)

    async def _remove_guest(self, uuid: str, strict: bool = False) -> None:
        """Destroy and undefine the domain (if any) and remove the instance's files."""
        libvirt = libvirt_module()
        try:
            dom = await self.lookup_domain(uuid, missing_ok=True)
        except exceptions.HypervisorUnavailable:
            if strict:
                raise
            dom = None
        if dom is not None:
            with contextlib.suppress(libvirt.libvirtError):
                if await self.is_active(dom):
                    await self._host.call(dom.destroy)
            flags = (libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
                     | libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)
            try:
                await self._host.call(dom.undefineFlags, flags)
            except libvirt.libvirtError as exc:
                if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                    try:
                        await self._host.call(dom.undefine)
                    except libvirt.libvirtError as exc2:
                        if exc2.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                            raise
        inst_dir = self.instance_dir(uuid)
        if inst_dir.exists():
            await asyncio.to_thread(shutil.rmtree, inst_dir, True)

    # State ---------------------------------------------------------------------------------
    async def get_info(self, instance: dict) -> dict:
        dom = await self.lookup_domain(instance["uuid"])
        state = await self._state(dom)
        power_state = _POWER_STATES.get(state, states.NOSTATE)
        if power_state == states.SHUTDOWN:
            with contextlib.suppress(Exception):
                if await self._host.call(dom.hasManagedSaveImage, 0):
                    power_state = states.SUSPENDED_POWER
        return {"power_state": power_state}

    async def get_diagnostics(self, instance: dict) -> dict:
        dom = await self.lookup_domain(instance["uuid"])
        return lv_diagnostics.free_form(await self._host.call(lv_diagnostics.collect, dom))

    async def get_instance_diagnostics(self, instance: dict) -> dict:
        dom = await self.lookup_domain(instance["uuid"])
        figures = await self._host.call(lv_diagnostics.collect, dom)
        return lv_diagnostics.standard_form(
            figures, power_state=(await self.get_info(instance))["power_state"], virt_type=self.virt_type,
            config_drive=configdrive.required_by(instance, self.cfg), instance=instance)

    async def get_console_output(self, instance: dict) -> str:
        path = self.console_log_path(instance["uuid"])

        def tail(p: Path, limit: int) -> bytes:
            with open(p, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - limit))
                return f.read()

        def read() -> bytes:
            data = tail(path, MAX_CONSOLE_BYTES)
            if len(data) < MAX_CONSOLE_BYTES:  # virtlogd just rotated: the rest is in the newest backup
                with contextlib.suppress(FileNotFoundError):
                    data = tail(path.with_name(path.name + ".0"), MAX_CONSOLE_BYTES - len(data)) + data
            return data
        try:
            data = await asyncio.to_thread(read)
        except FileNotFoundError:
            await self.lookup_domain(instance["uuid"])  # InstanceNotFound when there is no guest either
            return ""
        return _CONTROL_CHARS.sub("", data.decode("utf-8", errors="replace"))

    async def get_vnc_console(self, instance: dict) -> dict:
        """The port QEMU's VNC display took (the live domain XML, as Nova's libvirt driver reads it)."""
        dom = await self.lookup_domain(instance["uuid"])
        port = vconfig.vnc_port(await self._host.call(dom.XMLDesc, 0))
        if port is None:  # shut off (no QEMU process), or defined without a display
            raise exceptions.InstanceNotReady(instance_id=instance["uuid"])
        return {"host": self.cfg.vnc_server_proxyclient_address, "port": port,
                "internal_access_path": None}

    async def get_spice_console(self, instance: dict) -> dict:
        """The ports QEMU's SPICE display took (Nova's libvirt driver); a guest defined while
        SPICE was disabled has none: NotImplementedError, as a host without SPICE."""
        if not self.cfg.spice_enabled:
            raise NotImplementedError
        dom = await self.lookup_domain(instance["uuid"])
        xml = await self._host.call(dom.XMLDesc, 0)
        port = vconfig.graphics_port(xml, "spice")
        if port is None:
            raise exceptions.InstanceNotReady(instance_id=instance["uuid"])
        return {"host": self.cfg.spice_server_proxyclient_address, "port": port,
                "tls_port": vconfig.graphics_port(xml, "spice", "tlsPort"), "internal_access_path": None}

    # Power ---------------------------------------------------------------------------------
    async def power_off(self, instance: dict, timeout: float = 0, **kwargs) -> None:
        uuid = instance["uuid"]
        dom = await self.lookup_domain(uuid)
        if not (timeout and timeout > 0 and await self._clean_shutdown(dom, uuid, timeout)):
            await self.hard_stop(dom)
        await self._drop_managed_save(dom)

    async def hard_stop(self, dom) -> None:
        libvirt = libvirt_module()
        try:
            if await self.is_active(dom):
                await self._host.call(dom.destroy)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() != libvirt.VIR_ERR_OPERATION_INVALID:  # not running (any more)
                raise

    async def _clean_shutdown(self, dom, uuid: str, timeout: float) -> bool:
        """ACPI shutdown; True when the guest stopped within ``timeout``."""
        libvirt = libvirt_module()
        state = await self._state(dom)
        if state in (libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_CRASHED):
            return True
        if state != libvirt.VIR_DOMAIN_RUNNING:
            return False  # a paused guest cannot see the power button
        stopped = self._stopped.setdefault(uuid, asyncio.Event())
        stopped.clear()
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    await self._host.call(dom.shutdown)
                except libvirt.libvirtError as exc:
                    if not await self.is_active(dom):
                        return True
                    LOG.warning("instance %s: ACPI shutdown failed: %s", uuid, exc)
                    return False
                next_press = min(deadline, time.monotonic() + SHUTDOWN_RETRY_INTERVAL)
                while time.monotonic() < next_press:
                    await event_set_within(stopped, min(0.5, max(0.01, next_press - time.monotonic())))
                    if stopped.is_set() or not await self.is_active(dom):
                        LOG.info("instance %s: shut down cleanly in %.1f s", uuid,
                                 timeout - (deadline - time.monotonic()))
                        return True
                if time.monotonic() >= deadline:
                    LOG.warning("instance %s: no clean shutdown within %.0f s; destroying it", uuid, timeout)
                    return False
        finally:
            self._stopped.pop(uuid, None)

    async def _drop_managed_save(self, dom) -> None:
        """A stopped or hard-rebooted guest boots afresh: forget a suspended memory image."""
        libvirt = libvirt_module()
        with contextlib.suppress(libvirt.libvirtError):
            if await self._host.call(dom.hasManagedSaveImage, 0):
                await self._host.call(dom.managedSaveRemove, 0)

    async def start_domain(self, dom, uuid: str, network_info: list[dict] | None, fresh: bool = True) -> None:
        if fresh:
            await self._drop_managed_save(dom)
        for bridge in vconfig.bridges_of_bridge_interfaces(await self._host.call(dom.XMLDesc, 0)):
            await vifs.ensure_bridge(bridge)  # a domain defined before VIFs were type='ethernet'
        await self._host.call(dom.create)  # new taps: the L2 agent wires them and reports them up again
        await self._taps_here(dom)

    async def _taps_here(self, dom, taps: list[str] | None = None) -> None:
        """With ``libvirtd_netns`` set, the running domain's taps (or ``taps``) into this host's
        network namespace."""
        source = getattr(self.cfg, "libvirtd_netns", "")
        if source:
            if taps is None:
                taps = vconfig.ethernet_taps(await self._host.call(dom.XMLDesc, 0))
            await tap_netns.move_taps_here(taps, source)

    async def power_on(self, ctx, instance: dict, network_info: list[dict], **kwargs) -> None:
        libvirt = libvirt_module()
        uuid = instance["uuid"]
        dom = await self.lookup_domain(uuid)
        state = await self._state(dom)
        if state == libvirt.VIR_DOMAIN_PAUSED:
            await self._host.call(dom.resume)
            return
        if await self.is_active(dom):
            return
        await self.start_domain(dom, uuid, network_info)

    async def reboot(self, ctx, instance: dict, network_info: list[dict], reboot_type: str, **kwargs) -> None:
        uuid = instance["uuid"]
        dom = await self.lookup_domain(uuid)
        if reboot_type.upper() != "HARD":
            if await self._clean_shutdown(dom, uuid, self.cfg.shutdown_timeout):
                LOG.info("instance %s: soft rebooted", uuid)
                await self.start_domain(dom, uuid, network_info)
                return
            LOG.warning("instance %s: soft reboot failed; rebooting hard", uuid)
        await self.hard_stop(dom)
        await self.start_domain(dom, uuid, network_info)

    async def pause(self, instance: dict, **kwargs) -> None:
        dom = await self.lookup_domain(instance["uuid"])
        await self._host.call(dom.suspend)

    async def unpause(self, instance: dict, **kwargs) -> None:
        dom = await self.lookup_domain(instance["uuid"])
        await self._host.call(dom.resume)

    async def suspend(self, ctx, instance: dict, **kwargs) -> None:
        uuid = instance["uuid"]
        dom = await self.lookup_domain(uuid)
        await self._host.call(dom.managedSave, 0)

    async def resume(self, ctx, instance: dict, network_info: list[dict], **kwargs) -> None:
        uuid = instance["uuid"]
        dom = await self.lookup_domain(uuid)
        if await self.is_active(dom):
            return
        await self.start_domain(dom, uuid, network_info, fresh=False)  # restores the managed save

    async def rescue(self, ctx, instance: dict, network_info: list[dict], image_meta: dict,
                     rescue_password: str | None, block_device_info: dict | None = None, **kwargs) -> None:
        await rescue_mod.rescue(self, instance, network_info, image_meta, rescue_password)

    async def set_admin_password(self, instance: dict, new_pass: str) -> None:
        """Nova's libvirt driver sets it through the QEMU guest agent; Nefos's domains have no
        guest agent channel (whatever the image's ``hw_qemu_guest_agent``), so, as Nova's driver
        for a guest without one, it is refused (409) and nothing is set."""
        raise exceptions.QemuGuestAgentNotEnabled()

    async def unrescue(self, ctx, instance: dict, network_info: list[dict], **kwargs) -> None:
        await rescue_mod.unrescue(self, instance, network_info)

    async def snapshot(self, ctx, instance: dict, target, **kwargs) -> str:
        """A standalone qcow2 of the root disk (its overlay flattened onto the base). A running guest
        is paused for the copy so the image is consistent, then resumed."""
        uuid = instance["uuid"]
        disk = self.instance_dir(uuid) / "disk"
        if not disk.is_file():
            raise exceptions.InstanceNotFound(instance_id=uuid)
        dom = await self.lookup_domain(uuid)
        libvirt = libvirt_module()
        paused = await self._state(dom) == libvirt.VIR_DOMAIN_RUNNING
        if paused:
            await self._host.call(dom.suspend)
        try:
            # -U: the running QEMU holds the disk's lock; the guest is paused, so reading is safe.
            await imagebackend.run("qemu-img", "convert", "-U", "-q", "-f", "qcow2", "-O", "qcow2",
                                   str(disk), str(target))
        finally:
            if paused:
                await self._host.call(dom.resume)
        return "qcow2"

    # Interfaces on a running guest -------------------------------------------------------------
    def _device_flags(self, active: bool) -> int:
        """The guest's definition always; the running guest too when it runs (LIVE needs a QEMU)."""
        libvirt = libvirt_module()
        return libvirt.VIR_DOMAIN_AFFECT_CONFIG | (libvirt.VIR_DOMAIN_AFFECT_LIVE if active else 0)

    async def _record_port(self, dom, active: bool, **change) -> None:
        """Keep the domain's Nefos metadata (the ports of its taps) in step with its NICs."""
        libvirt = libvirt_module()
        xml = await self._host.call(dom.XMLDesc, libvirt.VIR_DOMAIN_XML_INACTIVE)
        meta = vconfig.metadata_with_port(xml, **change)
        if meta is not None:
            await self._host.call(dom.setMetadata, libvirt.VIR_DOMAIN_METADATA_ELEMENT, meta, "nefos",
                                  vconfig.NEFOS_NS, self._device_flags(active))

    async def attach_interface(self, ctx, instance: dict, vif: dict, **kwargs) -> None:
        """``attachDeviceFlags`` of the ``<interface>`` spawn would have written: live when the
        guest runs (libvirt makes the tap, the L2 agent wires it: ``network-vif-plugged``) and in
        its definition (it stays through stop and start)."""
        libvirt = libvirt_module()
        uuid = instance["uuid"]
        dom = await self.lookup_domain(uuid)
        config = _vif_config(vif)
        active = await self.is_active(dom)
        try:
            await self._host.call(dom.attachDeviceFlags, vconfig.interface_xml(config), self._device_flags(active))
            if active:
                await self._taps_here(dom, [config.devname])
            await self._record_port(dom, active, add=config)
        except libvirt.libvirtError as exc:
            raise exceptions.InterfaceAttachFailed(instance_uuid=uuid, message=(
                f"Failed to attach network adapter device to {uuid}: {str(exc).strip()}")) from exc
        LOG.info("instance %s: port %s attached as %s%s", uuid, vif["id"], config.devname,
                 "" if active else " (at the next start)")

    async def detach_interface(self, ctx, instance: dict, vif: dict, **kwargs) -> None:
        """``detachDeviceFlags`` of the VIF's ``<interface>`` (matched by MAC), then wait until the
        guest let go of it (a live unplug needs the guest's ACPI hot-plug: the device stays until
        then); a NIC the guest no longer has is no error."""
        libvirt = libvirt_module()
        uuid = instance["uuid"]
        dom = await self.lookup_domain(uuid)
        config = _vif_config(vif)
        active = await self.is_active(dom)
        live = await self._host.call(dom.XMLDesc, 0)
        stored = await self._host.call(dom.XMLDesc, libvirt.VIR_DOMAIN_XML_INACTIVE)
        flags = ((libvirt.VIR_DOMAIN_AFFECT_LIVE if active and vconfig.has_interface(live, config.mac) else 0)
                 | (libvirt.VIR_DOMAIN_AFFECT_CONFIG if vconfig.has_interface(stored, config.mac) else 0))
        try:
            if flags:
                await self._host.call(dom.detachDeviceFlags, vconfig.interface_xml(config), flags)
            if flags & libvirt.VIR_DOMAIN_AFFECT_LIVE:
                deadline = time.monotonic() + DETACH_TIMEOUT
                ask_again = time.monotonic() + DETACH_RETRY
                while vconfig.has_interface(await self._host.call(dom.XMLDesc, 0), config.mac):
                    if time.monotonic() > deadline or not await self.is_active(dom):
                        if await self.is_active(dom):
                            raise exceptions.InterfaceDetachFailed(instance_uuid=uuid, message=(
                                f"the guest did not release the NIC of port {vif['id']} within "
                                f"{DETACH_TIMEOUT:g} s"))
                        break
                    if time.monotonic() > ask_again:  # a guest still booting misses the request (as Nova, ask again)
                        ask_again = time.monotonic() + DETACH_RETRY
                        with contextlib.suppress(libvirt.libvirtError):
                            await self._host.call(dom.detachDeviceFlags, vconfig.interface_xml(config),
                                                  libvirt.VIR_DOMAIN_AFFECT_LIVE)
                    await asyncio.sleep(DETACH_POLL)
            await self._record_port(dom, active, remove=vif["id"])
        except libvirt.libvirtError as exc:
            raise exceptions.InterfaceDetachFailed(instance_uuid=uuid, message=(
                f"Failed to detach network adapter device from {uuid}: {str(exc).strip()}")) from exc
        LOG.info("instance %s: port %s detached", uuid, vif["id"])

    # libvirt's events (on the service's loop) -----------------------------------------------------
    def _on_lifecycle(self, uuid: str, event: int, detail: int) -> None:
        libvirt = libvirt_module()
        transition, may_restart = None, False
        if event == libvirt.VIR_DOMAIN_EVENT_STOPPED:
            may_restart = detail in (libvirt.VIR_DOMAIN_EVENT_STOPPED_MIGRATED,
                                     libvirt.VIR_DOMAIN_EVENT_STOPPED_FROM_SNAPSHOT)
            if detail == libvirt.VIR_DOMAIN_EVENT_STOPPED_SAVED:
                transition = virtevent.EVENT_LIFECYCLE_SUSPENDED
            else:
                transition = virtevent.EVENT_LIFECYCLE_STOPPED
            waiter = self._stopped.get(uuid)
            if waiter is not None:
                waiter.set()
        elif event == libvirt.VIR_DOMAIN_EVENT_STARTED:
            transition = virtevent.EVENT_LIFECYCLE_STARTED
        elif event == libvirt.VIR_DOMAIN_EVENT_SUSPENDED:
            transition = virtevent.EVENT_LIFECYCLE_PAUSED
        elif event == libvirt.VIR_DOMAIN_EVENT_RESUMED:
            transition = virtevent.EVENT_LIFECYCLE_RESUMED
        elif event == libvirt.VIR_DOMAIN_EVENT_PMSUSPENDED:
            transition = virtevent.EVENT_LIFECYCLE_SUSPENDED
        LOG.debug("libvirt event for %s: event %s detail %s", uuid, event, detail)
        if transition is not None:
            self.emit_event(virtevent.LifecycleEvent(uuid=uuid, transition=transition, may_restart=may_restart))

    def _on_connection(self, connected: bool, reason: str) -> None:
        self.emit_event(virtevent.ConnectionEvent(connected=connected, reason=reason))


_POWER_STATES: dict[int, int] = {}


def _init_power_states() -> None:
    try:
        import libvirt
    except ImportError:  # pragma: no cover
        return
    _POWER_STATES.update({
        libvirt.VIR_DOMAIN_NOSTATE: states.NOSTATE,
        libvirt.VIR_DOMAIN_RUNNING: states.RUNNING,
        libvirt.VIR_DOMAIN_BLOCKED: states.RUNNING,  # "blocked on a resource": still running
        libvirt.VIR_DOMAIN_PAUSED: states.PAUSED_POWER,
        libvirt.VIR_DOMAIN_SHUTDOWN: states.RUNNING,  # being shut down: still running
        libvirt.VIR_DOMAIN_SHUTOFF: states.SHUTDOWN,
        libvirt.VIR_DOMAIN_CRASHED: states.CRASHED,
        libvirt.VIR_DOMAIN_PMSUSPENDED: states.SUSPENDED_POWER,
    })


_init_power_states()


def _vif_config(vif: dict) -> vconfig.Vif:
    """A VIF of the network info as the domain XML's ``<interface>`` (spawn and hot-plug alike)."""
    return vconfig.Vif(port_id=vif["id"], mac=vif["address"], bridge=vifs.vif_bridge(vif),
                       devname=vifs.vif_devname(vif), mtu=(vif.get("network") or {}).get("mtu"))


def _domain_name(instance: dict) -> str:
    """``instance-<uuid>``: unique on a libvirtd shared by several clouds (Nova's
    ``instance-%08x`` repeats across databases: two test clouds would collide)."""
    return f"instance-{instance['uuid']}"


def _target(device_name: str | None, used: set[str]) -> str:
    """``/dev/vdb`` -> ``vdb``; without a name (or taken), the next free ``vdX``."""
    name = (device_name or "").rsplit("/", 1)[-1]
    if not name or name in used:
        for letter in "abcdefghijklmnopqrstuvwxyz":
            if f"vd{letter}" not in used:
                name = f"vd{letter}"
                break
    used.add(name)
    return name


def _host_ip() -> str:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing address
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"
