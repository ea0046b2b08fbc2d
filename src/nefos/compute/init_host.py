"""What a compute host does when it starts, before it serves (seed 003 ``init_host``).

1. Listen to the driver's events (before any hypervisor call), let the driver
   connect.
2. Guests the hypervisor has but the database does not place on this host:
   destroyed only with positive evidence — the instance is deleted (its claim
   is released too), or it now lives on another host (only the local guest
   goes; its ports and claim belong to the other host). Guests of unknown
   instances are left alone.
3. Each instance the database places here is brought back to a consistent
   state after whatever the previous process was doing when it died:
   - task_state ``deleting``: the delete is finished by the manager's
     ``terminate_instance``;
   - vm_state ``building``: ERROR with a fault (build interrupted); the guest,
     ports and claim the build held are released;
   - a reboot: a soft reboot whose guest runs is done; otherwise the
     manager's hard reboot finishes it;
   - ``powering-off`` / ``powering-on``: the manager's stop / start finishes it;
   - pausing, unpausing, suspending, resuming: settled from the guest's state;
   - a guest that is missing, or any other task_state: the task_state is cleared.
   Operations resumed here are recorded under the user's original action.
4. With ``resume_guests_state_on_host_boot``, guests of ACTIVE instances that
   are not running are powered on.
5. Usage is recomputed from the claims, then one full power-state sync pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import traceback

from sqlalchemy import select

from nefos import exceptions
from nefos.compute import power_sync
from nefos.context import RequestContext, admin_context
from nefos.db.models import InstanceAction
from nefos.objects import actions, allocations, instance as instance_obj, states

LOG = logging.getLogger(__name__)

SOFT_REBOOT_STATES = (states.REBOOTING, states.REBOOT_PENDING, states.REBOOT_STARTED)
HARD_REBOOT_STATES = (states.REBOOTING_HARD, states.REBOOT_PENDING_HARD, states.REBOOT_STARTED_HARD)
# task_state -> (power_state meaning the operation happened, vm_state it leads to, action name)
SETTLED_BY_POWER_STATE = {
    states.PAUSING: (states.PAUSED_POWER, states.PAUSED, actions.PAUSE),
    states.UNPAUSING: (states.RUNNING, states.ACTIVE, actions.UNPAUSE),
    states.SUSPENDING: (states.SUSPENDED_POWER, states.SUSPENDED, actions.SUSPEND),
    states.RESUMING: (states.RUNNING, states.ACTIVE, actions.RESUME),
}


async def init_host(manager) -> None:
    manager.lifecycle.start()  # before any hypervisor call
    await manager.driver.init_host()
    try:
        guests = set(await manager.driver.list_instance_uuids())
    except exceptions.HypervisorUnavailable as exc:
        LOG.error("init_host on %s: hypervisor unavailable (%s); instance recovery skipped", manager.host, exc)
        manager.lifecycle.connection_seen(False, str(exc))
        await manager.resource_tracker.update_available_resource(heal_usage=True)
        return
    manager.lifecycle.connection_seen(True)
    instances = await power_sync.host_instances(manager.rt.db, manager.host)
    ours = {i["uuid"] for i in instances}
    await _bounded(manager, [_cleanup_foreign_guest(manager, uuid) for uuid in sorted(guests - ours)])
    await _bounded(manager, [_init_instance(manager, instance) for instance in instances])
    if manager.rt.cfg.resume_guests_state_on_host_boot:
        await _bounded(manager, [_resume_guest(manager, i["uuid"])
                                 for i in await power_sync.host_instances(manager.rt.db, manager.host)])
    await manager.resource_tracker.update_available_resource(heal_usage=True)
    await power_sync.sync_power_states(manager)


async def _bounded(manager, coros: list) -> None:
    pool = asyncio.Semaphore(max(1, manager.rt.cfg.sync_power_state_pool_size))

    async def one(coro):
        async with pool:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception:
                LOG.exception("init_host on %s: recovery step failed", manager.host)

    await asyncio.gather(*(one(c) for c in coros))


async def action_context(db, uuid: str, action: str) -> RequestContext:
    """The context of the unfinished ``action`` on the instance, so resumed work lands in it."""
    async with db.reader() as s:
        row = (await s.execute(select(InstanceAction).where(
            InstanceAction.instance_uuid == uuid, InstanceAction.action == action,
            InstanceAction.finish_time.is_(None)).order_by(InstanceAction.id.desc()).limit(1))).scalar_one_or_none()
    if row is None:
        return admin_context()
    return RequestContext(project_id=row.project_id, user_id=row.user_id, request_id=row.request_id,
                          roles=["admin"], is_admin=True)


# Guests of instances this host does not own ------------------------------------------
async def _cleanup_foreign_guest(manager, uuid: str) -> None:
    db = manager.rt.db
    async with manager.instance_lock(uuid):
        try:
            instance = await instance_obj.get(db, uuid, read_deleted=True)
        except exceptions.InstanceNotFound:
            LOG.warning("init_host on %s: guest %s belongs to no known instance; leaving it",
                        manager.host, uuid)
            return
        if instance.get("deleted"):
            LOG.warning("init_host on %s: destroying guest %s of a deleted instance", manager.host, uuid)
            with contextlib.suppress(exceptions.InstanceNotFound):
                await manager.driver.destroy(admin_context(), instance, instance.get("network_info"))
            await allocations.release(db, uuid)
        elif instance.get("host") != manager.host:
            LOG.warning("init_host on %s: instance %s now lives on %s; destroying the local guest",
                        manager.host, uuid, instance.get("host"))
            with contextlib.suppress(exceptions.InstanceNotFound):
                await manager.driver.destroy(admin_context(), instance, instance.get("network_info"))


# Instances of this host -------------------------------------------------------------
async def _init_instance(manager, instance: dict) -> None:
    uuid, task_state = instance["uuid"], instance["task_state"]
    db = manager.rt.db
    if task_state == states.DELETING:
        LOG.info("init_host: finishing the delete of %s", uuid)
        await manager.terminate_instance(await action_context(db, uuid, actions.DELETE), uuid)
        return
    if instance["vm_state"] == states.BUILDING:
        await _fail_interrupted_build(manager, uuid)
        return
    if task_state is None:
        return
    power_state = await power_sync.driver_power_state(manager.driver, instance)
    if task_state in SOFT_REBOOT_STATES + HARD_REBOOT_STATES:
        ctx = await action_context(db, uuid, actions.REBOOT)
        if power_state == states.NOSTATE or (task_state in SOFT_REBOOT_STATES and power_state == states.RUNNING):
            await _clear_task_state(manager, ctx, uuid, task_state, power_state)
            return
        LOG.info("init_host: finishing the reboot of %s as a hard reboot", uuid)
        try:
            await instance_obj.save(db, uuid, {"task_state": states.REBOOTING_HARD},
                                    expected_task_state=[task_state])
        except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
            return
        await manager.reboot_instance(ctx, uuid, "HARD")
    elif task_state == states.POWERING_OFF:
        ctx = await action_context(db, uuid, actions.STOP)
        if power_state == states.NOSTATE:
            # Nothing left to stop: the instance is stopped.
            await _clear_task_state(manager, ctx, uuid, task_state, power_state, vm_state=states.STOPPED)
            return
        LOG.info("init_host: finishing the stop of %s", uuid)
        await manager.stop_instance(ctx, uuid)
    elif task_state == states.POWERING_ON:
        ctx = await action_context(db, uuid, actions.START)
        if power_state == states.NOSTATE:
            await _clear_task_state(manager, ctx, uuid, task_state, power_state)
            return
        LOG.info("init_host: finishing the start of %s", uuid)
        await manager.start_instance(ctx, uuid)
    elif task_state in SETTLED_BY_POWER_STATE:
        done_power, done_vm, action = SETTLED_BY_POWER_STATE[task_state]
        ctx = await action_context(db, uuid, action)
        await _clear_task_state(manager, ctx, uuid, task_state, power_state,
                                vm_state=done_vm if power_state == done_power else None)
    elif task_state in (*states.RESIZE_TASK_STATES, states.RESIZE_REVERTING):
        # A resize interrupted by this host's restart: ERROR, as Nova; its claims and guests stay
        # until a delete cleans both hosts (compute/resize.py).
        LOG.warning("init_host: instance %s was interrupted in %s; setting it to ERROR", uuid, task_state)
        with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
            await instance_obj.save_with_fault(
                db, uuid, {"vm_state": states.ERROR, "task_state": None},
                exceptions.NefosError(f"the compute host restarted during {task_state}"), host=manager.host,
                expected_task_state=[task_state])
    else:
        await _clear_task_state(manager, admin_context(), uuid, task_state, power_state)


async def _clear_task_state(manager, ctx, uuid: str, task_state: str, power_state: int,
                            vm_state: str | None = None) -> None:
    values = {"task_state": None, "power_state": power_state}
    if vm_state is not None:
        values["vm_state"] = vm_state
    LOG.info("init_host: instance %s: clearing task_state %s%s", uuid, task_state,
             f" (vm_state {vm_state})" if vm_state else "")
    async with manager.instance_lock(uuid):
        try:
            await instance_obj.save(manager.rt.db, uuid, values, expected_task_state=[task_state])
        except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
            return
    await actions.finish_action(manager.rt.db, ctx, uuid)


async def _fail_interrupted_build(manager, uuid: str) -> None:
    """Build interrupted by the restart: release guest, ports and claim; ERROR with a fault."""
    db = manager.rt.db
    ctx = await action_context(db, uuid, actions.CREATE)
    exc = exceptions.BuildAbortException(
        instance_uuid=uuid, reason=f"the build was interrupted by a restart of compute host {manager.host}")
    LOG.warning("init_host: %s", exc)
    async with manager.instance_lock(uuid):
        await manager._cleanup_build(ctx, uuid, None)  # the build path's own cleanup: guest, ports, claim
        try:
            instance = await instance_obj.save_with_fault(
                db, uuid, {"vm_state": states.ERROR, "task_state": None, "network_info": [],
                           "power_state": states.NOSTATE}, exc,
                host=manager.host, details="".join(traceback.format_exception(exc)),
                expected_task_state=states.BUILD_TASK_STATES)
        except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
            return  # deleted meanwhile: the delete finishes the job
        await actions.finish_action(db, ctx, uuid, message="Error")
    await manager._notify(ctx, instance, "instance.create.error")


# resume_guests_state_on_host_boot ---------------------------------------------------
async def _resume_guest(manager, uuid: str) -> None:
    """Power on the guest of an ACTIVE instance that is not running (the host rebooted)."""
    async with manager.instance_lock(uuid):
        try:
            instance = await instance_obj.get(manager.rt.db, uuid)
        except exceptions.InstanceNotFound:
            return
        if instance["vm_state"] != states.ACTIVE or instance["task_state"] is not None:
            return
        power_state = await power_sync.driver_power_state(manager.driver, instance)
        if power_state in (states.RUNNING, states.NOSTATE):
            return
        LOG.info("init_host: resuming guest %s (was %s)", uuid,
                 states.POWER_STATE_NAMES.get(power_state, power_state))
        await manager.driver.power_on(admin_context(), instance, instance.get("network_info") or [])
        power_state = await power_sync.driver_power_state(manager.driver, instance)
        with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
            await instance_obj.save(manager.rt.db, uuid, {"power_state": power_state},
                                    expected_task_state=[None])
