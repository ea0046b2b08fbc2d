"""The client for a compute host's manager, over the bus (topic ``compute.<host>``).

One method per declared method of the compute interface (``nefos.bus.interfaces.COMPUTE``, with
its version history), as Nova's ``ComputeAPI``: each sends the form the host's pin
(``[upgrade_levels] compute``) allows. Moves and request specs go as their typed payloads (the
interface's ``typed_args``), an attached interface comes back as its VIF.
"""

from __future__ import annotations

from nefos.bus import interfaces
from nefos.bus.payloads.network_info import VIF
from nefos.bus.versioning import RPCClient, UnsupportedVersion

POWER_ACTIONS = ("stop", "start", "reboot", "pause", "unpause", "suspend", "resume")


class ComputeRPCAPI:
    def __init__(self, bus):
        self.bus = bus
        self.client = RPCClient(bus, interfaces.COMPUTE)

    # Building and deleting ----------------------------------------------------------------

    async def build_and_run_instance(self, ctx, host: str, *, instance_uuid: str, request_spec: dict,
                                     build_args: dict, node: str) -> None:
        await self.client.cast(ctx, "build_and_run_instance", host=host, instance_uuid=instance_uuid,
                               request_spec=request_spec, build_args=build_args, node=node)

    async def terminate_instance(self, ctx, host: str, instance_uuid: str) -> None:
        await self.client.cast(ctx, "terminate_instance", host=host, instance_uuid=instance_uuid)

    async def rebuild_instance(self, ctx, host: str, instance_uuid: str, image_id: str, was_stopped: bool,
                               migration: dict | None = None, new_pass: str | None = None) -> None:
        """A rebuild on the server's host, or (``migration``, 1.1) its evacuation to ``host``: a
        host pinned below 1.1 cannot take an evacuated server (it would only rebuild it), one
        below 1.2 not its new password (``new_pass``: the guest would never get the one answered)."""
        if migration is not None and not await self.client.can_send_version("1.1"):
            raise UnsupportedVersion(version=await self.client.version_cap(), method="rebuild_instance")
        if new_pass is not None and not await self.client.can_send_version("1.2"):
            raise UnsupportedVersion(version=await self.client.version_cap(), method="rebuild_instance")
        await self.client.cast(ctx, "rebuild_instance", host=host, instance_uuid=instance_uuid,
                               image_id=image_id, was_stopped=was_stopped,
                               **({"migration": migration} if migration is not None else {}),
                               **({"new_pass": new_pass} if new_pass is not None else {}))

    # Power, rescue, password --------------------------------------------------------------

    async def power_action(self, ctx, host: str, action: str, instance_uuid: str, **kwargs) -> None:
        """Cast one of stop/start/reboot/pause/unpause/suspend/resume_instance."""
        if action not in POWER_ACTIONS:
            raise ValueError(f"{action} is not a power action")
        await self.client.cast(ctx, f"{action}_instance", host=host, instance_uuid=instance_uuid, **kwargs)

    async def rescue_instance(self, ctx, host: str, instance_uuid: str, rescue_password: str | None,
                              rescue_image_ref: str | None) -> None:
        await self.client.cast(ctx, "rescue_instance", host=host, instance_uuid=instance_uuid,
                               rescue_password=rescue_password, rescue_image_ref=rescue_image_ref)

    async def unrescue_instance(self, ctx, host: str, instance_uuid: str) -> None:
        await self.client.cast(ctx, "unrescue_instance", host=host, instance_uuid=instance_uuid)

    async def set_admin_password(self, ctx, host: str, instance_uuid: str, new_pass: str) -> None:
        await self.client.call(ctx, "set_admin_password", host=host, instance_uuid=instance_uuid,
                               new_pass=new_pass)

    # Snapshots and shelving ---------------------------------------------------------------

    async def snapshot_instance(self, ctx, host: str, instance_uuid: str, image_id: str) -> None:
        await self.client.cast(ctx, "snapshot_instance", host=host, instance_uuid=instance_uuid,
                               image_id=image_id)

    async def backup_instance(self, ctx, host: str, instance_uuid: str, image_id: str, backup_type: str,
                              rotation: int) -> None:
        await self.client.cast(ctx, "backup_instance", host=host, instance_uuid=instance_uuid,
                               image_id=image_id, backup_type=backup_type, rotation=rotation)

    async def shelve_instance(self, ctx, host: str, instance_uuid: str, image_id: str) -> None:
        await self.client.cast(ctx, "shelve_instance", host=host, instance_uuid=instance_uuid,
                               image_id=image_id)

    async def shelve_offload_instance(self, ctx, host: str, instance_uuid: str) -> None:
        await self.client.cast(ctx, "shelve_offload_instance", host=host, instance_uuid=instance_uuid)

    async def unshelve_instance(self, ctx, host: str, instance_uuid: str, node: str | None = None) -> None:
        """On its host (a server shelved, not offloaded: no ``node``) or on the scheduler's pick."""
        await self.client.cast(ctx, "unshelve_instance", host=host, instance_uuid=instance_uuid,
                               **({"node": node} if node is not None else {}))

    # Consoles and diagnostics -------------------------------------------------------------

    async def get_console_output(self, ctx, host: str, instance_uuid: str, tail_length: int | None) -> str:
        return await self.client.call(ctx, "get_console_output", host=host, instance_uuid=instance_uuid,
                                      tail_length=tail_length)

    async def get_diagnostics(self, ctx, host: str, instance_uuid: str, standard: bool) -> dict:
        return await self.client.call(ctx, "get_diagnostics", host=host, instance_uuid=instance_uuid,
                                      standard=standard)

    async def get_vnc_console(self, ctx, host: str, instance_uuid: str, console_type: str) -> dict:
        return await self.client.call(ctx, "get_vnc_console", host=host, instance_uuid=instance_uuid,
                                      console_type=console_type)

    async def get_spice_console(self, ctx, host: str, instance_uuid: str, console_type: str) -> dict:
        return await self.client.call(ctx, "get_spice_console", host=host, instance_uuid=instance_uuid,
                                      console_type=console_type)

    async def validate_console_port(self, ctx, host: str, instance_uuid: str, port: int,
                                    console_type: str) -> bool:
        return await self.client.call(ctx, "validate_console_port", host=host, instance_uuid=instance_uuid,
                                      port=port, console_type=console_type)

    # Interfaces and events ----------------------------------------------------------------

    async def attach_interface(self, ctx, host: str, instance_uuid: str, *, network_id: str | None,
                               port_id: str | None, fixed_ip: str | None, tag: str | None,
                               timeout: float) -> dict:
        """Attach a port (a call: the answer is its VIF); ``timeout`` covers the vif-plugged wait."""
        return VIF.from_primitive(await self.client.call(ctx, "attach_interface", host=host, timeout=timeout,
                                                         instance_uuid=instance_uuid, network_id=network_id,
                                                         port_id=port_id, fixed_ip=fixed_ip, tag=tag))

    async def detach_interface(self, ctx, host: str, instance_uuid: str, port_id: str) -> None:
        await self.client.cast(ctx, "detach_interface", host=host, instance_uuid=instance_uuid,
                               port_id=port_id)

    async def external_instance_event(self, ctx, host: str, events: list[dict]) -> None:
        await self.client.cast(ctx, "external_instance_event", host=host, events=events)

    # Resize and cold migration ------------------------------------------------------------

    async def check_can_migrate(self, ctx, host: str) -> None:
        await self.client.call(ctx, "check_can_migrate", host=host)

    async def prep_resize(self, ctx, host: str, instance_uuid: str, migration: dict) -> None:
        await self.client.call(ctx, "prep_resize", host=host, instance_uuid=instance_uuid, migration=migration)

    async def resize_instance(self, ctx, host: str, instance_uuid: str, migration: dict) -> None:
        await self.client.cast(ctx, "resize_instance", host=host, instance_uuid=instance_uuid,
                               migration=migration)

    async def finish_resize(self, ctx, host: str, instance_uuid: str, migration: dict) -> None:
        await self.client.cast(ctx, "finish_resize", host=host, instance_uuid=instance_uuid, migration=migration)

    async def confirm_resize(self, ctx, host: str, instance_uuid: str, migration: dict) -> None:
        await self.client.cast(ctx, "confirm_resize", host=host, instance_uuid=instance_uuid, migration=migration)

    async def revert_resize(self, ctx, host: str, instance_uuid: str, migration: dict) -> None:
        await self.client.cast(ctx, "revert_resize", host=host, instance_uuid=instance_uuid, migration=migration)

    async def finish_revert_resize(self, ctx, host: str, instance_uuid: str, migration: dict) -> None:
        await self.client.cast(ctx, "finish_revert_resize", host=host, instance_uuid=instance_uuid,
                               migration=migration)

    async def cleanup_deleted_migration(self, ctx, host: str, instance_uuid: str) -> None:
        await self.client.cast(ctx, "cleanup_deleted_migration", host=host, instance_uuid=instance_uuid)

    # Live migration -----------------------------------------------------------------------

    async def check_can_live_migrate_destination(self, ctx, host: str, instance_uuid: str) -> None:
        await self.client.call(ctx, "check_can_live_migrate_destination", host=host, instance_uuid=instance_uuid)

    async def live_migration(self, ctx, host: str, instance_uuid: str, migration: dict) -> None:
        await self.client.cast(ctx, "live_migration", host=host, instance_uuid=instance_uuid, migration=migration)

    async def pre_live_migration(self, ctx, host: str, instance_uuid: str, migration: dict) -> None:
        await self.client.call(ctx, "pre_live_migration", host=host, instance_uuid=instance_uuid,
                               migration=migration)

    async def post_live_migration_at_destination(self, ctx, host: str, instance_uuid: str, migration: dict,
                                                 migrate_data: dict) -> None:
        await self.client.cast(ctx, "post_live_migration_at_destination", host=host, instance_uuid=instance_uuid,
                               migration=migration, migrate_data=migrate_data)

    async def rollback_live_migration_at_destination(self, ctx, host: str, instance_uuid: str, *,
                                                     wait: bool) -> None:
        """A call (``wait``) when the source goes on after it, else a cast."""
        await self.client.sender(cast=not wait)(ctx, "rollback_live_migration_at_destination", host=host,
                                                instance_uuid=instance_uuid)

    async def live_migration_force_complete(self, ctx, host: str, instance_uuid: str, migration_uuid: str) -> None:
        await self.client.cast(ctx, "live_migration_force_complete", host=host, instance_uuid=instance_uuid,
                               migration_uuid=migration_uuid)

    async def live_migration_abort(self, ctx, host: str, instance_uuid: str, migration_uuid: str) -> None:
        await self.client.cast(ctx, "live_migration_abort", host=host, instance_uuid=instance_uuid,
                               migration_uuid=migration_uuid)
