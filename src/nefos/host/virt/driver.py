"""The interface every hypervisor driver implements (Nova's ComputeDriver, asyncio style)."""

from __future__ import annotations

import logging
from typing import Callable

from nefos.host.virt.event import Event

LOG = logging.getLogger(__name__)


class ComputeDriver:
    # Whether spawn can create the guest paused (``spawn(..., paused=True)``; ``unpause`` resumes
    # it) — the compute host then waits for network-vif-plugged before letting the guest run.
    supports_paused_start = False

    def __init__(self, cfg, host: str):
        self.cfg = cfg
        self.host = host
        self._event_callback: Callable[[Event], None] | None = None

    # Events ------------------------------------------------------------------
    def register_event_listener(self, callback: Callable[[Event], None] | None) -> None:
        """The compute manager's listener (None unregisters): receives every ``LifecycleEvent``
        and ``ConnectionEvent``; it must return at once (it only schedules work)."""
        self._event_callback = callback

    def emit_event(self, event: Event) -> None:
        """Hand an event to the listener; never blocks and never raises into the driver."""
        if self._event_callback is None:
            LOG.debug("discarding event %s", event)
            return
        try:
            self._event_callback(event)
        except Exception:
            LOG.exception("exception dispatching event %s", event)

    # Host --------------------------------------------------------------------
    async def init_host(self) -> None:
        pass

    async def cleanup_host(self) -> None:
        pass

    def get_available_nodes(self) -> list[str]:
        raise NotImplementedError

    async def get_available_resource(self, node: str) -> dict:
        """{vcpus, memory_mb, local_gb, hypervisor_type, hypervisor_version, host_ip}."""
        raise NotImplementedError

    async def list_instance_uuids(self) -> list[str]:
        raise NotImplementedError

    # Guests ------------------------------------------------------------------
    async def spawn(self, ctx, instance: dict, image_meta: dict, network_info: list[dict],
                    block_device_info: dict | None = None, power_on: bool = True,
                    paused: bool = False) -> None:
        """Plug the VIFs and create the guest; ``paused`` (only if ``supports_paused_start``): created
        paused, to be resumed with ``unpause`` once its VIFs are wired."""
        raise NotImplementedError

    async def destroy(self, ctx, instance: dict, network_info: list[dict] | None = None) -> None:
        raise NotImplementedError

    async def get_info(self, instance: dict) -> dict:
        """{"power_state": int}; raises InstanceNotFound when the hypervisor has no such guest."""
        raise NotImplementedError

    async def power_off(self, instance: dict, timeout: float = 0) -> None:
        raise NotImplementedError

    async def power_on(self, ctx, instance: dict, network_info: list[dict]) -> None:
        raise NotImplementedError

    async def reboot(self, ctx, instance: dict, network_info: list[dict], reboot_type: str) -> None:
        raise NotImplementedError

    async def pause(self, instance: dict) -> None:
        raise NotImplementedError

    async def unpause(self, instance: dict) -> None:
        raise NotImplementedError

    async def suspend(self, ctx, instance: dict) -> None:
        raise NotImplementedError

    async def resume(self, ctx, instance: dict, network_info: list[dict]) -> None:
        raise NotImplementedError

    async def get_console_output(self, instance: dict) -> str:
        """The guest's serial console log (os-getConsoleOutput); NotImplementedError when there is none."""
        raise NotImplementedError

    async def get_vnc_console(self, instance: dict) -> dict:
        """Where the guest's VNC server listens: {host, port, internal_access_path} (host: where
        the console proxy reaches it); ``InstanceNotReady`` when the guest has no display now,
        NotImplementedError when the driver has no graphical console."""
        raise NotImplementedError

    async def get_spice_console(self, instance: dict) -> dict:
        """Where the guest's SPICE server listens: {host, port, tls_port, internal_access_path};
        as ``get_vnc_console`` otherwise."""
        raise NotImplementedError

    async def get_diagnostics(self, instance: dict) -> dict:
        """The running guest's figures in the driver's own free-form keys (before Compute API
        2.48); NotImplementedError when the driver has none."""
        raise NotImplementedError

    async def get_instance_diagnostics(self, instance: dict) -> dict:
        """The running guest's figures in the standard form (``nefos.host.virt.diagnostics.standard``,
        2.48); NotImplementedError when the driver has none."""
        raise NotImplementedError

    async def snapshot(self, ctx, instance: dict, target) -> str:
        """Write a standalone image of the guest's root disk to the file ``target``; returns its
        disk_format (createImage, createBackup, shelve)."""
        raise NotImplementedError

    async def set_admin_password(self, instance: dict, new_pass: str) -> None:
        """Set the guest's administrator password (changePassword); NotImplementedError when the
        driver cannot."""
        raise NotImplementedError

    async def attach_interface(self, ctx, instance: dict, vif: dict) -> None:
        """Hot-plug ``vif`` (one entry of the network info) into the guest, running or not; the
        port's events follow as for a spawn's VIFs. NotImplementedError when the driver cannot."""
        raise NotImplementedError

    async def detach_interface(self, ctx, instance: dict, vif: dict) -> None:
        """Unplug ``vif`` from the guest; a VIF the guest does not have is no error."""
        raise NotImplementedError

    async def rescue(self, ctx, instance: dict, network_info: list[dict], image_meta: dict,
                     rescue_password: str | None, block_device_info: dict | None = None) -> None:
        """Boot the (powered off) guest from ``image_meta``'s image with its own disk attached after
        the rescue disk (Nova's ``rescue``); the image's ``hw_rescue_device``/``hw_rescue_bus``
        ask for a stable rescue: the guest's disks keep their addresses and the rescue disk is
        added last, booted first. The rescue guest gets ``rescue_password`` (the one the API
        answered; None: none). NotImplementedError when the driver cannot."""
        raise NotImplementedError

    async def unrescue(self, ctx, instance: dict, network_info: list[dict]) -> None:
        """Drop the rescue guest and start the original one again."""
        raise NotImplementedError

    # Resize and cold migration (Nova's names) ------------------------------------------
    # A driver that implements the four methods below says so; the others answer a resize or a
    # migration with NotSupported (409 at the API, before anything moves).
    supports_resize = False

    async def migrate_disk_and_power_off(self, ctx, instance: dict, dest: str, flavor: dict,
                                         network_info: list[dict]) -> None:
        """On the source: power the guest off, unplug its VIFs and keep its disks for the
        destination (and for a revert)."""
        raise NotImplementedError

    async def finish_migration(self, ctx, instance: dict, network_info: list[dict], image_meta: dict,
                               block_device_info: dict | None, power_on: bool = True,
                               paused: bool = False) -> None:
        """On the destination: the guest with ``instance``'s (new) flavor over the migrated disks,
        VIFs plugged; started (``paused`` first when ``supports_paused_start``) if ``power_on``."""
        raise NotImplementedError

    async def confirm_migration(self, ctx, instance: dict, network_info: list[dict]) -> None:
        """On the source, once confirmed: drop what was kept for a revert."""
        raise NotImplementedError

    async def destroy_migrated_guest(self, ctx, instance: dict, network_info: list[dict]) -> None:
        """On the destination of a revert: remove the new guest (on the same host, what was kept
        for the revert stays)."""
        await self.destroy(ctx, instance, network_info)

    async def finish_revert_migration(self, ctx, instance: dict, network_info: list[dict],
                                      power_on: bool = True, paused: bool = False) -> None:
        """On the source, after a revert: the original guest back, VIFs plugged, started if
        ``power_on``."""
        raise NotImplementedError

    # Live migration (Nova's names) -----------------------------------------------------
    # A driver that cannot live-migrate refuses at the destination's pre-check, as Nova's
    # check_can_live_migrate_destination does, before anything moves.
    supports_live_migration = False

    async def check_can_live_migrate_destination(self, ctx, instance: dict) -> dict:
        """On the destination: whether the guest can come here; the data the later steps need."""
        from nefos import exceptions
        raise exceptions.MigrationPreCheckError(
            reason=f"The hypervisor driver of host {self.host} cannot live-migrate servers.")

    async def pre_live_migration(self, ctx, instance: dict, network_info: list[dict]) -> None:
        """On the destination, before the guest moves: get ready to receive it."""
        raise NotImplementedError

    async def live_migration(self, ctx, instance: dict, dest: str, control) -> dict:
        """On the source: copy the running guest to ``dest`` (``control.aborted`` / ``control.forced``:
        what the API asked meanwhile); returns what the destination needs to take the guest over."""
        raise NotImplementedError

    async def post_live_migration_at_source(self, ctx, instance: dict) -> None:
        """On the source, once the guest runs on the destination: drop it here, VIFs unplugged."""
        raise NotImplementedError

    async def post_live_migration_at_destination(self, ctx, instance: dict, network_info: list[dict],
                                                 migrate_data: dict) -> None:
        """On the destination: the migrated guest is this host's now, VIFs plugged."""
        raise NotImplementedError

    async def rollback_live_migration_at_destination(self, ctx, instance: dict) -> None:
        """On the destination of a failed live migration: drop whatever was prepared for the guest."""
        raise NotImplementedError
