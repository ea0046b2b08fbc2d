"""Interfaces on a running server, on the API side (Nova's ``compute.api.API.attach_interface`` /
``detach_interface`` and the ports the os-interface views read).

The checks are made here, before anything reaches the host: the server visible to the caller
(404), not locked for a non-admin (409), ``vm_state`` active, paused or stopped and no task under
way (409, Nova's ``check_instance_state``). The action (``attach_interface`` /
``detach_interface``) is recorded here; its events are the host's (``compute/host/interfaces.py``).
An attach is a bus call, since the answer is the attachment; its timeout covers the host's wait
for ``network-vif-plugged``. A detach is a cast: 202 once the host has it.
"""

from __future__ import annotations

from nefos import exceptions
from nefos.clients.network import check_port_usable
from nefos.model.states import INTERFACE_VM_STATES as VM_STATES
from nefos.objects import actions

# Room beyond vif_plugging_timeout for the port's allocation and the driver's plug.
CALL_MARGIN = 60.0


class InterfacesAPI:
    def __init__(self, compute_api):
        self.compute_api = compute_api
        self.rt = compute_api.rt
        self.network_api = compute_api.network_api
        self.rpcapi = compute_api.compute_rpcapi

    async def list(self, ctx, server_id: str) -> tuple[dict, list[dict]]:
        """The server and the ports bound to it."""
        instance = await self.compute_api.get(ctx, server_id)
        return instance, await self.network_api.instance_ports(ctx, instance)

    async def show(self, ctx, server_id: str, port_id: str) -> tuple[dict, dict]:
        instance = await self.compute_api.get(ctx, server_id)
        return instance, await self._attached_port(instance, ctx, port_id)

    async def _attached_port(self, instance: dict, ctx, port_id: str) -> dict:
        try:
            port = await self.network_api.show_port(ctx, port_id)
        except exceptions.PortNotFound:
            port = None
        # naming the server is not enough: any project may name any device (Nova's tenant_id filter)
        if port is None or port.get("device_id") != instance["uuid"] or port.get("project_id") != instance["project_id"]:
            raise exceptions.PortNotAttached(instance=instance["uuid"], port_id=port_id)
        return port

    def _check(self, ctx, instance: dict, action: str) -> None:
        if instance.get("locked") and not ctx.is_admin:
            raise exceptions.InstanceIsLocked(instance_uuid=instance["uuid"])
        if instance["vm_state"] not in VM_STATES:
            raise exceptions.InstanceInvalidState(action=action, instance_uuid=instance["uuid"],
                                                  attr="vm_state", state=instance["vm_state"])
        if instance["task_state"] is not None:
            raise exceptions.InstanceInvalidState(action=action, instance_uuid=instance["uuid"],
                                                  attr="task_state", state=instance["task_state"])

    async def attach(self, ctx, server_id: str, *, network_id: str | None = None, port_id: str | None = None,
                     fixed_ip: str | None = None, tag: str | None = None) -> dict:
        """Returns the attached port."""
        instance = await self.compute_api.get(ctx, server_id)
        self._check(ctx, instance, "attach_interface")
        if port_id:  # refused here rather than on the host (one the caller may not see: 404, one of another
            # project: 400, a used one: 409)
            port = await self.network_api.show_port(ctx, port_id, as_caller=True)
            check_port_usable(port, instance["project_id"], server_id)
        await actions.record_action(self.rt.db, ctx, server_id, actions.ATTACH_INTERFACE)
        try:
            vif = await self.rpcapi.attach_interface(
                ctx, instance["host"], server_id, network_id=network_id, port_id=port_id, fixed_ip=fixed_ip,
                tag=tag, timeout=max(self.rt.cfg.vif_plugging_timeout, 0) + CALL_MARGIN)
        except exceptions.ServiceUnavailable:
            await actions.finish_action(self.rt.db, ctx, server_id, message="Error")
            raise
        return await self.network_api.show_port(ctx, vif["id"])

    async def detach(self, ctx, server_id: str, port_id: str) -> None:
        instance = await self.compute_api.get(ctx, server_id)
        self._check(ctx, instance, "detach_interface")
        await self._attached_port(instance, ctx, port_id)
        await actions.record_action(self.rt.db, ctx, server_id, actions.DETACH_INTERFACE)
        try:
            await self.rpcapi.detach_interface(ctx, instance["host"], server_id, port_id)
        except BaseException:
            await actions.finish_action(self.rt.db, ctx, server_id, message="Error")
            raise
