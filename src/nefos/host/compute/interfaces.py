"""Interfaces on a running server, on its compute host (Nova's ``attach_interface`` /
``detach_interface`` of the compute manager).

Invariant: an attach or a detach holds the instance's lock (``ComputeManager.instance_lock``), so
they are serialised with each other and with every other operation on the guest (task_state stays
None, as in Nova); the network info cache is only changed under its own lock
(``InstanceEvents.network_info_lock``), shared with the external events that refresh it.

Attach: the operation for external events starts first (``begin_operation``), then the port is
bound (a new one on the network, or the user's own), the VIF added to the network info cache, and
the driver hot-plugs it inside a wait for that port's ``network-vif-plugged`` (the binding's
declaration, as a spawn waits) when the guest is running or paused and ``vif_plugging_timeout`` >
0. A timeout (or a failed event) with ``vif_plugging_is_fatal`` — or a driver that cannot plug —
undoes everything: the VIF unplugged, the port deleted (or given back), the cache as it was;
the API gets ``InterfaceAttachFailed``. Without ``vif_plugging_is_fatal`` a missed event is a
Warning of the wait's action event and the attach stands.

Detach: the driver unplugs the VIF, the port is deleted (made for the server) or unbound (the
user's own, ``preserve_on_delete``), the VIF leaves the cache. A deleted port's
``network-vif-deleted`` is waited for (``vif_plugging_timeout``, the same wait as an attach's),
so the detach ends once the network side has let go of the port; a missed one is recorded on the
action's wait event and the detach stands (the guest's NIC is gone either way).
"""

from __future__ import annotations

import contextlib
import logging

from nefos import exceptions
from nefos.host.compute import instance_events, power_sync
from nefos.model import states

LOG = logging.getLogger(__name__)

# What a server may be in for an attach or a detach (Nova's check_instance_state: task_state None).
VM_STATES = states.INTERFACE_VM_STATES
ATTACH_EVENT = "compute_attach_interface"
DETACH_EVENT = "compute_detach_interface"
DETACH_WAIT_EVENT = "compute_wait_for_vif_deleted"


class InterfaceManager:
    """The compute manager's part for os-interface; owned by ``ComputeManager``."""

    def __init__(self, manager):
        self.manager = manager
        self.rt = manager.rt

    async def _instance(self, uuid: str, action: str) -> dict:
        instance = await self.manager.conductor.instance_get(None, uuid)
        if instance["vm_state"] not in VM_STATES or instance["task_state"] is not None:
            attr, state = (("vm_state", instance["vm_state"]) if instance["vm_state"] not in VM_STATES
                           else ("task_state", instance["task_state"]))
            raise exceptions.InstanceInvalidState(action=action, instance_uuid=uuid, attr=attr, state=state)
        return instance

    async def _set_network_info(self, uuid: str, change) -> list[dict]:
        """``change(cache) -> new cache``, applied under the cache's lock; returns the new cache."""
        async with self.manager.instance_events.network_info_lock(uuid):
            current = (await self.manager.conductor.instance_get(None, uuid)).get("network_info") or []
            new = change(list(current))
            await self.manager.conductor.instance_save(None, uuid, {"network_info": new})
            return new

    async def attach(self, ctx, uuid: str, *, network_id: str | None, port_id: str | None,
                     fixed_ip: str | None, tag: str | None) -> dict:
        m = self.manager
        async with m.instance_lock(uuid):
            try:
                async with self.manager.conductor.step(ctx, uuid, ATTACH_EVENT, m.host):
                    return await self._attach(ctx, uuid, network_id=network_id, port_id=port_id,
                                              fixed_ip=fixed_ip, tag=tag)
            finally:
                await self.manager.conductor.action_finish(ctx, uuid)

    async def _attach(self, ctx, uuid: str, **request) -> dict:
        m = self.manager
        instance = await self._instance(uuid, "attach_interface")
        await self.manager.notify(ctx, instance, "instance.interface_attach.start")
        await m.instance_events.begin_operation(uuid)  # before the port is bound: its events are this attach's
        vif = await m.network_api.allocate_port_for_instance(ctx, instance, **request)
        instance["network_info"] = await self._set_network_info(uuid, lambda cache: [*cache, vif])
        power = await power_sync.driver_power_state(m.driver, instance)
        wait = self.rt.cfg.vif_plugging_timeout > 0 and power in (states.RUNNING, states.PAUSED_POWER)
        events = m.instance_events.vif_events([vif]) if wait else []

        async def plug():
            await m.driver.attach_interface(ctx, instance, vif)
        try:
            if not events:
                await plug()
            elif (await m.instance_events.wait_around(ctx, instance, events, plug,
                                                      what=f"attach interface {vif['id']}")).fatal:
                raise exceptions.VirtualInterfaceCreateException()
        except BaseException as exc:
            LOG.warning("instance %s: attaching port %s failed (%s); undoing it", uuid, vif["id"], exc)
            await self._undo_attach(ctx, instance, vif)
            with contextlib.suppress(Exception):
                await self.manager.notify(ctx, instance, "instance.interface_attach.error")
            if isinstance(exc, (exceptions.InstanceNotFound, exceptions.UnexpectedDeletingTaskStateError)):
                raise
            if isinstance(exc, Exception):
                raise exceptions.InterfaceAttachFailed(instance_uuid=uuid) from exc
            raise
        await self.manager.notify(ctx, await self.manager.conductor.instance_get(None,
                                                                          uuid), "instance.interface_attach.end")
        return vif

    async def _undo_attach(self, ctx, instance: dict, vif: dict) -> None:
        m = self.manager
        uuid = instance["uuid"]
        with contextlib.suppress(Exception):
            await m.driver.detach_interface(ctx, instance, vif)  # also when the plug failed half-way
        try:
            await m.network_api.deallocate_port_for_instance(ctx, instance, vif)
        except Exception:
            LOG.exception("instance %s: giving back port %s failed", uuid, vif["id"])
        with contextlib.suppress(exceptions.InstanceNotFound):
            await self._set_network_info(uuid, lambda cache: [v for v in cache if v.get("id") != vif["id"]])

    async def detach(self, ctx, uuid: str, port_id: str) -> None:
        m = self.manager
        async with m.instance_lock(uuid):
            try:
                async with self.manager.conductor.step(ctx, uuid, DETACH_EVENT, m.host):
                    await self._detach(ctx, uuid, port_id)
            except (exceptions.InstanceNotFound, exceptions.UnexpectedDeletingTaskStateError):
                return  # deleted meanwhile: the delete frees the ports
            except Exception as exc:
                LOG.error("instance %s: detaching port %s failed: %s", uuid, port_id, exc.__cause__ or exc)
            finally:
                await self.manager.conductor.action_finish(ctx, uuid)

    async def _detach(self, ctx, uuid: str, port_id: str) -> None:
        m = self.manager
        instance = await self._instance(uuid, "detach_interface")
        vif = next((v for v in instance.get("network_info") or [] if v.get("id") == port_id), None)
        if vif is None:
            raise exceptions.PortNotAttached(instance=uuid, port_id=port_id)
        await self.manager.notify(ctx, instance, "instance.interface_detach.start")
        try:
            await m.driver.detach_interface(ctx, instance, vif)
        except exceptions.InstanceNotFound:
            raise
        except Exception as exc:
            raise exceptions.InterfaceDetachFailed(instance_uuid=uuid) from exc

        async def give_back():
            await m.network_api.deallocate_port_for_instance(ctx, instance, vif)

        if self.rt.cfg.vif_plugging_timeout > 0 and not vif.get("preserve_on_delete"):
            # The port is deleted: its network-vif-deleted confirms the network side let go of it.
            # Missing it is recorded on the action, never undone: the guest has no NIC any more.
            await m.instance_events.begin_operation(uuid)
            await m.instance_events.wait_around(ctx, instance, [(instance_events.VIF_DELETED, port_id)],
                                                give_back, what=f"detach interface {port_id}",
                                                event_name=DETACH_WAIT_EVENT)
        else:
            await give_back()
        instance["network_info"] = await self._set_network_info(
            uuid, lambda cache: [v for v in cache if v.get("id") != port_id])
        await self.manager.notify(ctx, instance, "instance.interface_detach.end")
