"""The client for a compute host's manager, over the bus (topic ``compute.<host>``)."""

from __future__ import annotations


class ComputeRPCAPI:
    def __init__(self, bus):
        self.bus = bus

    async def build_and_run_instance(self, ctx, host: str, *, instance_uuid: str, request_spec: dict,
                                     build_args: dict, node: str) -> None:
        await self.bus.cast(ctx, "compute", "build_and_run_instance", host=host,
                            instance_uuid=instance_uuid, request_spec=request_spec,
                            build_args=build_args, node=node)

    async def terminate_instance(self, ctx, host: str, instance_uuid: str) -> None:
        await self.bus.cast(ctx, "compute", "terminate_instance", host=host, instance_uuid=instance_uuid)

    async def get_console_output(self, ctx, host: str, instance_uuid: str, tail_length: int | None) -> str:
        return await self.bus.call(ctx, "compute", "get_console_output", host=host,
                                   instance_uuid=instance_uuid, tail_length=tail_length)

    async def get_diagnostics(self, ctx, host: str, instance_uuid: str, standard: bool) -> dict:
        return await self.bus.call(ctx, "compute", "get_diagnostics", host=host, instance_uuid=instance_uuid,
                                   standard=standard)

    async def power_action(self, ctx, host: str, action: str, instance_uuid: str, **kwargs) -> None:
        """Cast one of stop/start/reboot/pause/unpause/suspend/resume_instance."""
        await self.bus.cast(ctx, "compute", f"{action}_instance", host=host,
                            instance_uuid=instance_uuid, **kwargs)

    async def attach_interface(self, ctx, host: str, instance_uuid: str, *, network_id: str | None,
                               port_id: str | None, fixed_ip: str | None, tag: str | None,
                               timeout: float) -> dict:
        """Attach a port (a call: the answer is its VIF); ``timeout`` covers the vif-plugged wait."""
        return await self.bus.call(ctx, "compute", "attach_interface", host=host, timeout=timeout,
                                   instance_uuid=instance_uuid, network_id=network_id, port_id=port_id,
                                   fixed_ip=fixed_ip, tag=tag)

    async def detach_interface(self, ctx, host: str, instance_uuid: str, port_id: str) -> None:
        await self.bus.cast(ctx, "compute", "detach_interface", host=host, instance_uuid=instance_uuid,
                            port_id=port_id)

    async def cast(self, ctx, host: str, method: str, **kwargs) -> None:
        """Cast ``method`` of the compute manager on ``host``."""
        await self.bus.cast(ctx, "compute", method, host=host, **kwargs)

    async def call(self, ctx, host: str, method: str, **kwargs):
        """Call ``method`` of the compute manager on ``host`` and wait for its answer."""
        return await self.bus.call(ctx, "compute", method, host=host, **kwargs)
