"""An in-memory hypervisor: realistic enough for the pipeline's tests and scale runs.

Delays: ``fake_spawn_delay`` / ``fake_power_delay`` (config) or the flavor
extra specs ``nefos:fake_spawn_delay`` / ``nefos:fake_power_delay`` (power
operations and reboots), and ``nefos:fake_destroy_delay`` (destroy, before the
guest goes). Failure injection: the flavor extra
spec or image property ``nefos:fake_fail_spawn`` (image property
``nefos_fake_fail_spawn``) names the hosts whose spawn fails (comma
separated, ``*`` for all). ``simulate_*`` methods act out of band, as a
user of the hypervisor would, and emit lifecycle events like a real one;
``simulate_connection_loss``/``simulate_connection_restored`` break and
restore the hypervisor connection (``get_info`` and ``list_instance_uuids``
raise ``HypervisorUnavailable`` meanwhile) and emit ``ConnectionEvent``s.

Resize and cold migration: ``migrate_disk_and_power_off`` powers the source guest off, unplugs
its VIFs and sets it aside (``resize_backups``: the "disk" kept for a revert);
``finish_migration`` creates the guest with the new flavor on the destination (the same host
included); ``confirm_migration`` drops what was set aside, ``finish_revert_migration`` brings it
back (VIFs plugged, started when asked).

VIFs: spawn plugs the guest's VIFs (before creating it), destroy unplugs them,
a hard reboot and a power on re-plug them; ``plugged_vifs`` is the virtual
switch (port id -> instance uuid) and ``vif_listener`` (the host's fake L2
agent, ``nefos.agents.fake_agent``) hears every plug and unplug. ``spawn(...,
paused=True)`` creates the guest paused; ``unpause`` resumes it. Each guest
keeps the history of its power states (``FakeGuest.history``).

Consoles: a running (or paused) guest's display is a small VNC server of its own
(``nefos.host.virt.fake_console``) on ``vnc_server_listen`` and, with ``spice_enabled``, a SPICE one on
``spice_server_listen``, each started when a console is first asked for and closed when the guest
stops or goes, as QEMU's display goes with the QEMU process.

Config drives: a guest that needs one (``nefos.host.virt.configdrive.required_by``) gets the ISO image
built as a real driver builds it, written to ``<fake_hypervisor_dir or state_dir>/fake-instances/
<host>/<uuid>/disk.config`` (0600) and recorded in ``config_drives`` (uuid -> {"path", "image"}).

With ``fake_hypervisor_dir`` the host's guests and VIFs are also kept in
``<dir>/<host>.json`` (rewritten after each change the driver makes, atomically)
and read back by the next driver of that host: the hypervisor outlives a compute
process that is killed, as a real one does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from nefos import exceptions, fileperms
from nefos.model import states
from nefos.host.virt import configdrive, event as virtevent, fake_console
from nefos.host.virt.driver import ComputeDriver


DISPLAYED = (states.RUNNING, states.PAUSED_POWER)  # power states with a display (a QEMU process)


@dataclass
class FakeGuest:
    uuid: str
    name: str
    power_state: int
    vcpus: int
    memory_mb: int
    vifs: list = field(default_factory=list)
    paused_start: bool = False
    admin_password: str | None = None
    history: list = field(default_factory=list)  # (time.monotonic(), power_state), oldest first
    rescue: dict | None = None  # while rescued: {"image_id", "disks": [(name, bus, device), ...] boot order}

    def __post_init__(self):
        self.history.append((time.monotonic(), self.power_state))

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if name == "power_state" and "history" in self.__dict__:
            self.history.append((time.monotonic(), value))


class FakeDriver(ComputeDriver):
    supports_paused_start = True

    def __init__(self, cfg, host: str):
        super().__init__(cfg, host)
        self.guests: dict[str, FakeGuest] = {}
        self.connected = True
        self.disconnect_reason = ""
        self.plugged_vifs: dict[str, str] = {}  # the virtual switch: port id -> instance uuid
        self.resize_backups: dict[str, FakeGuest] = {}  # source guests kept for a revert
        self.vif_listener = None  # the host's L2 agent (device_plugged / device_unplugged)
        self.config_drives: dict[str, dict] = {}  # uuid -> {"path": the ISO file, "image": its bytes}
        self.consoles: dict[str, fake_console.RFBServer] = {}  # uuid -> the guest's VNC server
        self.spice_consoles: dict[str, fake_console.SpiceServer] = {}  # uuid -> its SPICE server
        self._consoles_starting = asyncio.Lock()  # one VNC server per guest, however many ask at once
        self._state_file = (Path(cfg.fake_hypervisor_dir) / f"{host}.json") if cfg.fake_hypervisor_dir else None
        if self._state_file is not None and self._state_file.exists():
            saved = json.loads(self._state_file.read_text())
            self.guests = {g["uuid"]: FakeGuest(**g) for g in saved["guests"]}
            self.plugged_vifs = saved["plugged_vifs"]
            self.resize_backups = {g["uuid"]: FakeGuest(**g) for g in saved.get("resize_backups", [])}

    def _save(self) -> None:
        """Keep the hypervisor's state in ``fake_hypervisor_dir`` (when set)."""
        if self._state_file is None:
            return
        def plain(g):
            return {"uuid": g.uuid, "name": g.name, "power_state": g.power_state, "vcpus": g.vcpus,
                    "memory_mb": g.memory_mb, "vifs": g.vifs, "paused_start": g.paused_start,
                    "admin_password": g.admin_password, "rescue": g.rescue}
        guests = [plain(g) for g in self.guests.values()]
        tmp = self._state_file.with_suffix(".tmp")
        self._state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"guests": guests, "plugged_vifs": self.plugged_vifs,
                                   "resize_backups": [plain(g) for g in self.resize_backups.values()]}))
        os.replace(tmp, self._state_file)

    def _delay(self, instance: dict, spec: str, default: float = 0.0) -> float:
        specs = (instance.get("flavor") or {}).get("extra_specs") or {}
        return float(specs.get(spec, default))

    # Host --------------------------------------------------------------------
    async def init_host(self) -> None:
        # Like a real driver opening its connection: report whether it is up.
        self.emit_event(virtevent.ConnectionEvent(connected=self.connected, reason=self.disconnect_reason))

    async def cleanup_host(self) -> None:
        for uuid in {*self.consoles, *self.spice_consoles}:
            self._close_console(uuid)

    def _check_connected(self) -> None:
        if not self.connected:
            raise exceptions.HypervisorUnavailable(host=self.host)

    def get_available_nodes(self) -> list[str]:
        return [self.host]

    async def get_available_resource(self, node: str) -> dict:
        return {"vcpus": self.cfg.fake_vcpus, "memory_mb": self.cfg.fake_memory_mb,
                "local_gb": self.cfg.fake_local_gb, "hypervisor_type": "fake",
                "hypervisor_version": 1000, "host_ip": "127.0.0.1"}

    async def list_instance_uuids(self) -> list[str]:
        self._check_connected()
        return list(self.guests)

    # Guests ------------------------------------------------------------------
    def _guest(self, instance: dict) -> FakeGuest:
        guest = self.guests.get(instance["uuid"])
        if guest is None:
            raise exceptions.InstanceNotFound(instance_id=instance["uuid"])
        return guest

    def _should_fail(self, instance: dict, image_meta: dict) -> bool:
        specs = (instance.get("flavor") or {}).get("extra_specs") or {}
        props = (image_meta or {}).get("properties") or {}
        spec = specs.get("nefos:fake_fail_spawn") or props.get("nefos_fake_fail_spawn") or ""
        hosts = {h.strip() for h in spec.split(",") if h.strip()}
        return "*" in hosts or self.host in hosts

    # VIFs ---------------------------------------------------------------------
    def plug_vifs(self, instance: dict, network_info: list[dict] | None) -> None:
        for vif in network_info or []:
            self.plugged_vifs[vif["id"]] = instance["uuid"]
            if self.vif_listener is not None:
                self.vif_listener.device_plugged(vif["id"])
        self._save()

    def unplug_vifs(self, instance: dict, network_info: list[dict] | None = None) -> None:
        """Unplug ``network_info``'s VIFs, or (None) every VIF of the instance."""
        if network_info is None:
            ports = [p for p, uuid in self.plugged_vifs.items() if uuid == instance["uuid"]]
        else:
            ports = [vif["id"] for vif in network_info]
        for port in ports:
            if self.plugged_vifs.pop(port, None) is not None and self.vif_listener is not None:
                self.vif_listener.device_unplugged(port)
        self._save()

    async def spawn(self, ctx, instance, image_meta, network_info, block_device_info=None,
                    power_on=True, paused=False) -> None:
        delay = self._delay(instance, "nefos:fake_spawn_delay", self.cfg.fake_spawn_delay)
        if delay:
            await asyncio.sleep(delay)
        if self._should_fail(instance, image_meta):
            raise exceptions.InstanceDeployFailure(reason=f"injected spawn failure on {self.host}")
        await self._attach_config_drive(instance, image_meta, network_info)
        self._create_guest(instance, network_info, power_on, paused)

    def _instance_dir(self, uuid: str) -> Path:
        return Path(self.cfg.fake_hypervisor_dir or self.cfg.state_dir) / "fake-instances" / self.host / uuid

    async def _attach_config_drive(self, instance: dict, image_meta: dict | None, network_info) -> None:
        """Build the guest's config drive when it needs one, as a real driver would."""
        if not configdrive.required_by(instance, self.cfg, image_meta):
            self._drop_config_drive(instance["uuid"])
            return
        image = await asyncio.to_thread(configdrive.build, instance, self.cfg, network_info)
        inst_dir = fileperms.private_dir(self._instance_dir(instance["uuid"]))
        path = configdrive.write(inst_dir / configdrive.FILE_NAME, image)
        self.config_drives[instance["uuid"]] = {"path": str(path), "image": image}

    def _drop_config_drive(self, uuid: str) -> None:
        self.config_drives.pop(uuid, None)
        inst_dir = self._instance_dir(uuid)
        if inst_dir.exists():
            (inst_dir / configdrive.FILE_NAME).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                inst_dir.rmdir()

    def _create_guest(self, instance: dict, network_info, power_on: bool, paused: bool) -> None:
        """Plug the VIFs, then the guest with ``instance``'s flavor (spawn, and a migration's destination)."""
        self.plug_vifs(instance, network_info)
        paused = paused and power_on
        self.guests[instance["uuid"]] = FakeGuest(
            uuid=instance["uuid"], name=f"instance-{instance['id']:08x}",
            power_state=(states.PAUSED_POWER if paused else states.RUNNING) if power_on else states.SHUTDOWN,
            vcpus=instance.get("vcpus", 0), memory_mb=instance.get("memory_mb", 0),
            vifs=[vif["id"] for vif in network_info or []], paused_start=paused)
        self._save()
        if power_on:
            self.emit_event(virtevent.LifecycleEvent(
                uuid=instance["uuid"],
                transition=virtevent.EVENT_LIFECYCLE_PAUSED if paused else virtevent.EVENT_LIFECYCLE_STARTED))

    async def destroy(self, ctx, instance, network_info=None) -> None:
        delay = self._delay(instance, "nefos:fake_destroy_delay")
        if delay:
            await asyncio.sleep(delay)
        self.resize_backups.pop(instance["uuid"], None)
        self._remove_guest(instance)

    def _remove_guest(self, instance: dict) -> None:
        self.unplug_vifs(instance)
        self._drop_config_drive(instance["uuid"])
        guest = self.guests.pop(instance["uuid"], None)
        self._close_console(instance["uuid"])
        self._save()
        if guest is not None and guest.power_state != states.SHUTDOWN:
            self.emit_event(virtevent.LifecycleEvent(uuid=instance["uuid"],
                                                     transition=virtevent.EVENT_LIFECYCLE_STOPPED))

    async def get_info(self, instance) -> dict:
        self._check_connected()
        return {"power_state": self._guest(instance).power_state}

    async def snapshot(self, ctx, instance, target) -> str:
        guest = self._guest(instance)
        Path(target).write_bytes(f"fake disk of {guest.name} ({guest.uuid})\n".encode())
        return "raw"

    async def set_admin_password(self, instance, new_pass: str) -> None:
        self._guest(instance).admin_password = new_pass
        self._save()

    async def _transition(self, instance, power_state: int, transition: int) -> None:
        guest = self._guest(instance)
        delay = self._delay(instance, "nefos:fake_power_delay", self.cfg.fake_power_delay)
        if delay:
            await asyncio.sleep(delay)
        guest.power_state = power_state
        self._save()
        self.emit_event(virtevent.LifecycleEvent(uuid=guest.uuid, transition=transition))

    async def power_off(self, instance, timeout=0) -> None:
        await self._transition(instance, states.SHUTDOWN, virtevent.EVENT_LIFECYCLE_STOPPED)
        self._close_console(instance["uuid"])

    async def power_on(self, ctx, instance, network_info) -> None:
        self._guest(instance)
        self.unplug_vifs(instance, network_info)  # as a hard reboot: the guest's VIFs are re-plugged
        self.plug_vifs(instance, network_info)
        await self._transition(instance, states.RUNNING, virtevent.EVENT_LIFECYCLE_STARTED)

    async def reboot(self, ctx, instance, network_info, reboot_type) -> None:
        guest = self._guest(instance)
        delay = self._delay(instance, "nefos:fake_power_delay", self.cfg.fake_power_delay)
        if delay:
            await asyncio.sleep(delay)
        if reboot_type == "HARD":
            self.unplug_vifs(instance, network_info)
            self.plug_vifs(instance, network_info)
            self.emit_event(virtevent.LifecycleEvent(uuid=guest.uuid, transition=virtevent.EVENT_LIFECYCLE_STOPPED))
        guest.power_state = states.RUNNING
        self._save()
        self.emit_event(virtevent.LifecycleEvent(uuid=guest.uuid, transition=virtevent.EVENT_LIFECYCLE_STARTED))

    async def pause(self, instance) -> None:
        await self._transition(instance, states.PAUSED_POWER, virtevent.EVENT_LIFECYCLE_PAUSED)

    async def unpause(self, instance) -> None:
        await self._transition(instance, states.RUNNING, virtevent.EVENT_LIFECYCLE_RESUMED)

    async def suspend(self, ctx, instance) -> None:
        await self._transition(instance, states.SUSPENDED_POWER, virtevent.EVENT_LIFECYCLE_SUSPENDED)
        self._close_console(instance["uuid"])

    async def resume(self, ctx, instance, network_info) -> None:
        await self._transition(instance, states.RUNNING, virtevent.EVENT_LIFECYCLE_RESUMED)

    async def get_console_output(self, instance) -> str:
        guest = self._guest(instance)
        # A guest's serial log, as a small Linux guest writes one (clients look at more than a
        # line or three; Nova's fake driver's three lines fail Tempest's unlimited-length test).
        lines = ["[    0.000000] Linux version 6.1.0 (fake hypervisor) #1 SMP",
                 "[    0.000000] Command line: console=ttyS0",
                 f"[    0.004000] Memory: {guest.memory_mb}MB, CPUs: {guest.vcpus}",
                 "[    0.412000] Run /init as init process"]
        lines += [f"eth{i}: link up (port {port})" for i, port in enumerate(guest.vifs)]
        lines += [f"{guest.name} login: "]
        return "\n".join(lines)

    # Rescue -------------------------------------------------------------------------------
    async def rescue(self, ctx, instance, network_info, image_meta, rescue_password,
                     block_device_info=None) -> None:
        """Boot from the rescue image: first its disk then the guest's own (Nova's libvirt layout),
        or, for a stable rescue, the guest's disk where it was and the rescue disk last on the
        image's ``hw_rescue_bus``/``hw_rescue_device``. An image whose ``nefos_fake_fail_spawn``
        names this host fails, as its spawn would."""
        guest = self._guest(instance)
        if self._should_fail({}, image_meta):
            raise exceptions.InstanceDeployFailure(reason=f"injected rescue failure on {self.host}")
        props = (image_meta or {}).get("properties") or {}
        if props.get("hw_rescue_bus") or props.get("hw_rescue_device"):
            disks = [["disk", "virtio", "disk"],
                     ["disk.rescue", props.get("hw_rescue_bus") or "virtio", props.get("hw_rescue_device") or "disk"]]
        else:
            disks = [["disk.rescue", "virtio", "disk"], ["disk", "virtio", "disk"]]
        guest.rescue = {"image_id": (image_meta or {}).get("id"), "disks": disks}
        guest.admin_password = rescue_password
        await self._transition(instance, states.RUNNING, virtevent.EVENT_LIFECYCLE_STARTED)

    async def unrescue(self, ctx, instance, network_info) -> None:
        guest = self._guest(instance)
        guest.rescue = None
        await self._transition(instance, states.SHUTDOWN, virtevent.EVENT_LIFECYCLE_STOPPED)
        self._close_console(guest.uuid)  # the rescue guest's QEMU goes; the original gets a new one
        await self._transition(instance, states.RUNNING, virtevent.EVENT_LIFECYCLE_STARTED)

    # Graphical console --------------------------------------------------------------------
    async def get_vnc_console(self, instance) -> dict:
        """Where the guest's VNC server listens; ``InstanceNotReady`` when it has no display
        (stopped, suspended, crashed)."""
        server = await self._display(instance, self.consoles, fake_console.RFBServer,
                                     self.cfg.vnc_server_listen)
        return {"host": self.cfg.vnc_server_proxyclient_address, "port": server.port,
                "internal_access_path": None}

    async def get_spice_console(self, instance) -> dict:
        """Where the guest's SPICE server listens (no TLS port: the fake display has no
        certificates); NotImplementedError when SPICE is disabled (QEMU then has no such display)."""
        if not self.cfg.spice_enabled:
            raise NotImplementedError
        server = await self._display(instance, self.spice_consoles, fake_console.SpiceServer,
                                     self.cfg.spice_server_listen)
        return {"host": self.cfg.spice_server_proxyclient_address, "port": server.port,
                "tls_port": None, "internal_access_path": None}

    async def _display(self, instance, servers: dict, kind, listen: str):
        guest = self._guest(instance)
        if guest.power_state not in DISPLAYED:
            raise exceptions.InstanceNotReady(instance_id=guest.uuid)
        async with self._consoles_starting:
            server = servers.get(guest.uuid)
            if server is None or not server.serving:
                server = kind(guest.name)
                await server.start(listen)
                if self.guests.get(guest.uuid) is not guest or guest.power_state not in DISPLAYED:
                    server.close()  # stopped or gone meanwhile
                    raise exceptions.InstanceNotReady(instance_id=guest.uuid)
                servers[guest.uuid] = server
        return server

    def _close_console(self, uuid: str) -> None:
        for servers in (self.consoles, self.spice_consoles):
            server = servers.pop(uuid, None)
            if server is not None:
                server.close()
    # Diagnostics (figures that grow with the guest's time up, as a real guest's do) ------------
    def _figures(self, instance) -> tuple[FakeGuest, int, list[dict]]:
        guest = self._guest(instance)
        seconds = max(int(time.monotonic() - guest.history[0][0]), 1)
        vifs = [vif for vif in instance.get("network_info") or [] if vif.get("id") in guest.vifs]
        return guest, seconds, vifs

    async def get_diagnostics(self, instance) -> dict:
        guest, seconds, vifs = self._figures(instance)
        out: dict = {f"cpu{i}_time": seconds * 10**9 // max(guest.vcpus, 1) for i in range(guest.vcpus)}
        out.update({"memory": guest.memory_mb * 1024, "vda_read": 262144 + seconds, "vda_read_req": 112,
                    "vda_write": 4096 * seconds, "vda_write_req": seconds, "vda_errors": -1})
        for vif in vifs:
            dev = vif.get("devname") or "tap" + vif["id"][:11]
            out.update({f"{dev}_rx": 1500 * seconds, f"{dev}_rx_packets": seconds, f"{dev}_rx_errors": 0,
                        f"{dev}_rx_drop": 0, f"{dev}_tx": 600 * seconds, f"{dev}_tx_packets": seconds,
                        f"{dev}_tx_errors": 0, f"{dev}_tx_drop": 0})
        return out

    async def get_instance_diagnostics(self, instance) -> dict:
        from nefos.host.virt import diagnostics
        guest, seconds, vifs = self._figures(instance)
        # driver "libvirt", as Nova's fake driver reports (the 2.48 field is an enum of real drivers)
        return diagnostics.standard(
            power_state=guest.power_state, driver="libvirt", hypervisor="fake", hypervisor_os="linux",
            uptime=diagnostics.uptime(instance), config_drive=instance["uuid"] in self.config_drives,
            cpus=[{"id": i, "time": seconds * 10**9 // max(guest.vcpus, 1), "utilisation": None}
                  for i in range(guest.vcpus)],
            nics=[{"mac_address": vif.get("address"), "rx_octets": 1500 * seconds, "rx_errors": 0, "rx_drop": 0,
                   "rx_packets": seconds, "tx_octets": 600 * seconds, "tx_errors": 0, "tx_drop": 0,
                   "tx_packets": seconds} for vif in vifs],
            disks=[{"read_bytes": 262144 + seconds, "read_requests": 112, "write_bytes": 4096 * seconds,
                    "write_requests": seconds, "errors_count": 0}],
            memory_maximum=guest.memory_mb, memory_used=guest.memory_mb // 2)

    # Interfaces on a running guest ------------------------------------------------------
    async def attach_interface(self, ctx, instance, vif) -> None:
        """Plug the VIF (the fake L2 agent reports it up: ``network-vif-plugged``) and give the
        guest one more NIC. The flavor extra spec
        ``nefos:fake_fail_attach`` names the hosts whose plug fails (``*``: all)."""
        guest = self._guest(instance)
        specs = (instance.get("flavor") or {}).get("extra_specs") or {}
        hosts = {h.strip() for h in (specs.get("nefos:fake_fail_attach") or "").split(",") if h.strip()}
        if "*" in hosts or self.host in hosts:
            raise exceptions.NefosError(f"injected interface attach failure on {self.host}")
        self.plug_vifs(instance, [vif])
        if vif["id"] not in guest.vifs:
            guest.vifs.append(vif["id"])
        self._save()

    async def detach_interface(self, ctx, instance, vif) -> None:
        guest = self._guest(instance)
        self.unplug_vifs(instance, [vif])
        guest.vifs = [port for port in guest.vifs if port != vif["id"]]
        self._save()

    # Resize and cold migration ---------------------------------------------------------
    supports_resize = True

    async def migrate_disk_and_power_off(self, ctx, instance, dest, flavor, network_info) -> None:
        guest = self._guest(instance)
        if guest.power_state != states.SHUTDOWN:
            await self._transition(instance, states.SHUTDOWN, virtevent.EVENT_LIFECYCLE_STOPPED)
        self.unplug_vifs(instance)
        self._close_console(guest.uuid)
        self.resize_backups[guest.uuid] = self.guests.pop(guest.uuid)
        self._save()

    async def finish_migration(self, ctx, instance, network_info, image_meta, block_device_info,
                               power_on=True, paused=False) -> None:
        delay = self._delay(instance, "nefos:fake_spawn_delay", self.cfg.fake_spawn_delay)
        if delay:
            await asyncio.sleep(delay)
        await self._attach_config_drive(instance, image_meta, network_info)
        self._create_guest(instance, network_info, power_on, paused)

    async def confirm_migration(self, ctx, instance, network_info) -> None:
        self.resize_backups.pop(instance["uuid"], None)
        self._save()

    async def destroy_migrated_guest(self, ctx, instance, network_info) -> None:
        self._remove_guest(instance)  # on the same host, the kept guest stays

    async def finish_revert_migration(self, ctx, instance, network_info, power_on=True, paused=False) -> None:
        guest = self.resize_backups.pop(instance["uuid"], None) or self.guests.get(instance["uuid"])
        if guest is None:
            raise exceptions.InstanceNotFound(instance_id=instance["uuid"])
        self.guests[guest.uuid] = guest
        self.plug_vifs(instance, network_info)
        guest.vifs = [vif["id"] for vif in network_info or []]
        self._save()
        if power_on:
            paused = paused and self.supports_paused_start
            await self._transition(instance, states.PAUSED_POWER if paused else states.RUNNING,
                                   virtevent.EVENT_LIFECYCLE_PAUSED if paused else virtevent.EVENT_LIFECYCLE_STARTED)

    # Live migration ---------------------------------------------------------------------
    # The fake hosts may run in different processes: the guest travels in ``migrate_data``.
    supports_live_migration = True

    async def check_can_live_migrate_destination(self, ctx, instance) -> dict:
        self._check_connected()
        return {"dest_host": self.host}

    async def pre_live_migration(self, ctx, instance, network_info) -> None:
        self._check_connected()

    async def live_migration(self, ctx, instance, dest, control) -> dict:
        guest = self._guest(instance)
        delay = self._delay(instance, "nefos:fake_live_migration_delay")
        deadline = asyncio.get_running_loop().time() + delay
        while True:  # the copy, looking at an abort or a force-complete as a real driver's job monitor does
            if control.aborted:
                raise exceptions.LiveMigrationAborted(instance_uuid=guest.uuid)
            if control.forced or asyncio.get_running_loop().time() >= deadline:
                break
            await asyncio.sleep(min(0.05, delay))
        return {"power_state": guest.power_state, "admin_password": guest.admin_password,
                "paused_start": guest.paused_start}

    async def post_live_migration_at_source(self, ctx, instance) -> None:
        # The guest runs on, elsewhere: no lifecycle event here (Nova's libvirt reports
        # "migration completed", which is not a stop).
        self.unplug_vifs(instance)
        self._drop_config_drive(instance["uuid"])
        self.guests.pop(instance["uuid"], None)
        self._close_console(instance["uuid"])
        self._save()

    async def post_live_migration_at_destination(self, ctx, instance, network_info, migrate_data) -> None:
        self.plug_vifs(instance, network_info)
        self.guests[instance["uuid"]] = FakeGuest(
            uuid=instance["uuid"], name=f"instance-{instance['id']:08x}",
            power_state=migrate_data.get("power_state", states.RUNNING),
            vcpus=instance.get("vcpus", 0), memory_mb=instance.get("memory_mb", 0),
            vifs=[vif["id"] for vif in network_info or []], paused_start=migrate_data.get("paused_start", False),
            admin_password=migrate_data.get("admin_password"))
        self._save()

    async def rollback_live_migration_at_destination(self, ctx, instance) -> None:
        if instance["uuid"] in self.guests:
            self._remove_guest(instance)
        else:
            self.unplug_vifs(instance)

    # Out-of-band actions (a user of the hypervisor, not Nefos) -------------------
    def simulate_power_off(self, uuid: str, *, may_restart: bool = False) -> None:
        """The guest stops out of band; ``may_restart``: as the hypervisor reports a stop that a
        start may follow (libvirt: a migration, a snapshot restore)."""
        guest = self.guests[uuid]
        guest.power_state = states.SHUTDOWN
        self._close_console(uuid)
        self._save()
        self.emit_event(virtevent.LifecycleEvent(uuid=uuid, transition=virtevent.EVENT_LIFECYCLE_STOPPED,
                                                 may_restart=may_restart))

    def simulate_power_on(self, uuid: str) -> None:
        guest = self.guests[uuid]
        guest.power_state = states.RUNNING
        self._save()
        self.emit_event(virtevent.LifecycleEvent(uuid=uuid, transition=virtevent.EVENT_LIFECYCLE_STARTED))

    def simulate_crash(self, uuid: str) -> None:
        guest = self.guests[uuid]
        guest.power_state = states.CRASHED
        self._close_console(uuid)
        self._save()
        self.emit_event(virtevent.LifecycleEvent(uuid=uuid, transition=virtevent.EVENT_LIFECYCLE_STOPPED))

    def simulate_connection_loss(self, reason: str = "Connection to the hypervisor is broken") -> None:
        """The hypervisor connection drops: queries fail until it is restored."""
        self.connected = False
        self.disconnect_reason = reason
        self.emit_event(virtevent.ConnectionEvent(connected=False, reason=reason))

    def simulate_connection_restored(self) -> None:
        self.connected = True
        self.disconnect_reason = ""
        self.emit_event(virtevent.ConnectionEvent(connected=True))
