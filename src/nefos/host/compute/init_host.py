"""What a compute host does when it starts, before it serves (Nova's ``init_host``), and the
one way this host brings an instance back to a consistent state (``recover_instance``).

1. Listen to the driver's events (before any hypervisor call). End, as failed,
   the action steps the previous process left open on this host (nothing will
   finish them), and the actions over with them: those of servers with no task
   left (the process was killed after its last save, before it finished the
   action). Then let the driver connect.
2. Guests the hypervisor has but the database does not place on this host:
   destroyed only with positive evidence — the instance is deleted (its claim
   is released too), or it was evacuated from this host to another one
   (``nefos.host.compute.evacuate``: only the local guest goes; its ports and claim
   belong to the other host). Guests of unknown instances, and of instances
   on another host with no evacuation recorded, are left alone. The same step
   runs again, without a restart, when the host's reports get through after the
   control plane judged it down (``after_return``: a partitioned host keeps its
   process and guests, and its servers may have been evacuated or deleted meanwhile).
3. Each instance the database places here goes through ``recover_instance``,
   after whatever the previous process was doing when it died. The periodic
   check of lost requests (``nefos.host.compute.deadlines``) uses it too, with
   ``lost=True``, for an operation whose cast never reached this host:
   - task_state ``deleting``: the delete is finished by the manager's
     ``terminate_instance``;
   - vm_state ``building``: ERROR with a fault (build interrupted, or lost); the
     guest, ports and claim the build held are released;
   - a reboot: a soft reboot whose guest runs is done (after a restart; a lost
     one is redone); otherwise the manager's hard reboot finishes it;
   - ``powering-off`` / ``powering-on``: the manager's stop / start finishes it;
   - ``unshelving``: the manager's unshelve is run again (it fails back to
     SHELVED_OFFLOADED with a fault when it cannot be done);
   - pausing, unpausing, suspending, resuming: settled from the guest's state;
   - a resize: a lost one that never left ``resize_prep`` is aborted (ACTIVE or
     STOPPED again on this, the source host, claims and quota given back); any
     other resize step is ERROR with a fault, as Nova;
   - a guest that is missing, or any other task_state (a snapshot, a backup, a
     shelve, a rebuild...): the task_state is cleared, and a snapshot's
     unfinished image deleted.
   Operations resumed here are recorded under the user's original action; one
   that could not be done is recorded there as failed (an ``Error`` event).
   An instance being evacuated from this host is left to its destination; an
   evacuation to this host that the restart interrupted fails (ERROR on its source).
4. With ``resume_guests_state_on_host_boot``, guests of ACTIVE instances that
   are not running are powered on.
5. Usage is recomputed from the claims, then one full power-state sync pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import traceback

from nefos import exceptions
from nefos.host.compute import evacuate, power_sync
from nefos.host.compute.unfinished_actions import action_context
from nefos.context import admin_context
from nefos.model import action_names, states
from nefos.model.faults import fault_of
from nefos.model.state_machine import expects, leaves, step_save
from nefos.timeutils import utcnow

LOG = logging.getLogger(__name__)

SOFT_REBOOT_STATES = tuple(expects("reboot_soft.done"))
HARD_REBOOT_STATES = tuple(expects("reboot_hard.done"))
# task_state -> (power_state meaning the operation happened, vm_state it leads to, action name)
SETTLED_BY_POWER_STATE = {
    states.PAUSING: (states.PAUSED_POWER, states.PAUSED, action_names.PAUSE),
    states.UNPAUSING: (states.RUNNING, states.ACTIVE, action_names.UNPAUSE),
    states.SUSPENDING: (states.SUSPENDED_POWER, states.SUSPENDED, action_names.SUSPEND),
    states.RESUMING: (states.RUNNING, states.ACTIVE, action_names.RESUME),
}


async def init_host(manager) -> None:
    manager.lifecycle.start()  # before any hypervisor call
    # Before recovery starts steps of its own, and before any request is served: every step open on
    # this host now is one the killed process left; the operations are resumed below, as new steps.
    ended = await manager.conductor.action_steps_interrupted(None, manager.host, _why(manager, "step", False))
    if ended:
        LOG.warning("init_host on %s: %d step(s) the previous process left open ended as failed",
                    manager.host, ended)
    await manager.driver.init_host()
    try:
        guests = set(await manager.driver.list_instance_uuids())
    except exceptions.HypervisorUnavailable as exc:
        LOG.error("init_host on %s: hypervisor unavailable (%s); instance recovery skipped", manager.host, exc)
        manager.lifecycle.connection_seen(False, str(exc))
        await manager.resource_tracker.update_available_resource(heal_usage=True)
        return
    manager.lifecycle.connection_seen(True)
    guests -= await evacuate.fail_interrupted_evacuations(manager)
    instances = await power_sync.host_instances(manager)
    await cleanup_foreign_guests(manager, guests, {i["uuid"] for i in instances}, "init_host")
    leaving = await evacuate.evacuations_in_progress(manager)
    await _bounded(manager, [recover_instance(manager, instance) for instance in instances
                             if instance["uuid"] not in leaving])
    if manager.rt.cfg.resume_guests_state_on_host_boot:
        await _bounded(manager, [_resume_guest(manager, i["uuid"])
                                 for i in await power_sync.host_instances(manager)])
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


# Guests of instances this host does not own ------------------------------------------
async def cleanup_foreign_guests(manager, guests: set[str], ours: set[str], when: str) -> set[str]:
    """Step 2: of the driver's ``guests``, those not in ``ours`` (the instances the database
    places here) go only with positive evidence; then the evacuations from this host that are done
    are completed. ``when``: at ``init_host``, or on the host's return (``after_return``). Returns
    the evacuated instances whose guest could not be destroyed (their evacuation stays open)."""
    await _bounded(manager, [_cleanup_foreign_guest(manager, uuid, when) for uuid in sorted(guests - ours)])
    return await evacuate.complete_evacuations(manager)


async def _cleanup_foreign_guest(manager, uuid: str, when: str) -> None:
    async with manager.instance_lock(uuid):
        try:
            instance = await manager.conductor.instance_get(None, uuid, read_deleted=True)
        except exceptions.InstanceNotFound:
            LOG.warning("%s on %s: guest %s belongs to no known instance; leaving it", when, manager.host, uuid)
            return
        if instance.get("deleted"):
            LOG.warning("%s on %s: destroying guest %s of a deleted instance", when, manager.host, uuid)
            with contextlib.suppress(exceptions.InstanceNotFound):
                await manager.driver.destroy(admin_context(), instance, instance.get("network_info"))
            await manager.conductor.allocation_release(None, uuid)
        elif instance.get("host") != manager.host:
            await evacuate.destroy_evacuated_guest(manager, instance, when)


async def after_return(manager) -> bool:
    """This host's reports get through again after the control plane judged it down (a partition:
    its process and guests kept running; an operator may have evacuated its servers or deleted
    them meanwhile): step 2 again, so that the guests of servers now elsewhere or gone stop
    running beside their copies, with their addresses. Returns whether that is settled: not while
    an evacuation from this host is still under way with its guest here (its outcome decides; the
    caller runs this again after the next report), nor while the guest of an evacuated server could
    not be destroyed."""
    guests = set(await manager.driver.list_instance_uuids())
    ours = {i["uuid"] for i in await power_sync.host_instances(manager)}
    LOG.log(logging.WARNING if guests - ours else logging.INFO,
            "back on %s after it may have been judged down: %d guest(s) of instances no longer placed here",
            manager.host, len(guests - ours))
    undestroyed = await cleanup_foreign_guests(manager, guests, ours, "back from down")
    waiting = await evacuate.evacuations_in_progress(manager) & guests
    if waiting:
        LOG.warning("back on %s: instances %s are being evacuated from it; their guests are left until "
                    "the evacuation ends, checked again after the next report", manager.host, sorted(waiting))
    if undestroyed:
        LOG.warning("back on %s: the guests of evacuated instances %s could not be destroyed; tried again "
                    "after the next report", manager.host, sorted(undestroyed))
    return not waiting and not undestroyed


# Instances of this host -------------------------------------------------------------
LOST_EVENT = "compute_lost_request"


def _why(manager, what: str, lost: bool) -> str:
    if lost:
        return f"the {what} request never reached compute host {manager.host} (lost on the way)"
    return f"the {what} was interrupted by a restart of compute host {manager.host}"


async def recover_instance(manager, instance: dict, lost: bool = False) -> None:
    """Bring ``instance`` back to a consistent state: after a restart of this host, or (``lost``)
    when the request for its operation never reached this host. The caller makes sure no
    operation of this host holds it; every save is a compare-and-swap, so an operation that
    finishes or starts meanwhile wins."""
    uuid, task_state = instance["uuid"], instance["task_state"]
    if task_state == states.DELETING:
        LOG.info("instance %s: finishing its delete", uuid)
        await manager.terminate_instance(await action_context(manager, uuid, action_names.DELETE), uuid)
        return
    if instance["vm_state"] == states.BUILDING:
        await _fail_interrupted_build(manager, instance, lost)
        return
    if task_state is None:
        return
    ctx = await action_context(manager, uuid, None)
    await manager.conductor.action_finish_overtaken(None, uuid, ctx.request_id)
    if task_state in (*states.RESIZE_TASK_STATES, states.RESIZE_REVERTING):
        await _recover_resize(manager, ctx, instance, lost)
        return
    if task_state == states.MIGRATING:
        from nefos.host.compute import live_migration
        await live_migration.recover(manager, ctx, instance, _why(manager, "live migration", lost))
        return
    power_state = await power_sync.driver_power_state(manager.driver, instance)
    if task_state in SOFT_REBOOT_STATES + HARD_REBOOT_STATES:
        if power_state == states.NOSTATE or (
                not lost and task_state in SOFT_REBOOT_STATES and power_state == states.RUNNING):
            await _clear_task_state(manager, ctx, uuid, task_state, power_state)
            return
        hard = task_state in HARD_REBOOT_STATES or power_state != states.RUNNING
        LOG.info("instance %s: finishing its reboot (%s)", uuid, "hard" if hard else "soft")
        if hard and task_state not in HARD_REBOOT_STATES:
            try:
                await manager.conductor.instance_save(None, uuid, {"task_state": leaves("init_host.reboot_hard")},
                                                      expected_task_state=[task_state])
            except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
                return
        await manager.reboot_instance(ctx, uuid, "HARD" if hard else "SOFT")
    elif task_state in (states.POWERING_OFF, states.POWERING_ON, states.UNSHELVING):
        if power_state == states.NOSTATE and task_state != states.UNSHELVING:
            # No guest: nothing left to stop, nothing to start.
            await _clear_task_state(manager, ctx, uuid, task_state, power_state,
                                    vm_state=states.STOPPED if task_state == states.POWERING_OFF else None)
            return
        LOG.info("instance %s: finishing its %s", uuid, task_state)
        if task_state == states.POWERING_OFF:
            await manager.stop_instance(ctx, uuid)
        elif task_state == states.POWERING_ON:
            await manager.start_instance(ctx, uuid)
        else:
            offloaded = instance["vm_state"] == states.SHELVED_OFFLOADED
            await manager.unshelve_instance(ctx, uuid, instance.get("node") if offloaded else None)
    elif task_state in SETTLED_BY_POWER_STATE:
        done_power, done_vm, _action = SETTLED_BY_POWER_STATE[task_state]
        done = power_state == done_power
        await _clear_task_state(manager, ctx, uuid, task_state, power_state, vm_state=done_vm if done else None,
                                failed=_why(manager, task_state, lost) if lost and not done else None)
    else:
        await _clear_task_state(manager, ctx, uuid, task_state, power_state,
                                failed=_why(manager, task_state, lost) if lost else None)
        await _discard_unfinished_snapshots(manager, ctx, uuid)


async def _recover_resize(manager, ctx, instance: dict, lost: bool) -> None:
    """A lost resize that never left ``resize_prep`` (this is its source) is undone; any other
    resize step is ERROR, as Nova: its claims and guests stay until a delete cleans both hosts."""
    from nefos.model import migration_state
    uuid, task_state = instance["uuid"], instance["task_state"]
    exc = exceptions.NefosError(_why(manager, task_state, lost))
    migration = migration_state.migration_of(instance)
    async with manager.instance_lock(uuid):
        if not await _unchanged(manager, instance):
            return
        if lost and task_state == states.RESIZE_PREP and migration:
            LOG.warning("instance %s: %s; aborting the resize", uuid, exc)
            await manager.conductor.migration_abort_before_move(ctx, uuid, migration, fault_of(exc),
                                                                host=manager.host,
                                                                details="".join(traceback.format_exception(exc)))
            return
        LOG.warning("instance %s: %s; setting it to ERROR", uuid, exc)
        try:
            await manager.conductor.save_with_fault(
                None, uuid, {"vm_state": states.ERROR, "task_state": leaves("init_host.cleared")}, exc,
                host=manager.host, expected_task_state=[task_state])
        except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
            return
        if migration:
            # as Nova's errors_out_migration
            await manager.conductor.migration_set_status(None, migration["uuid"], "error")
    await _record_failure(manager, ctx, uuid, str(exc))


async def _unchanged(manager, instance: dict) -> bool:
    """Whether the instance is still on this host as it was read (with this host's lock held: no
    operation of its own got to it in between)."""
    try:
        current = await manager.conductor.instance_get(None, instance["uuid"])
    except exceptions.InstanceNotFound:
        return False
    return all(current.get(k) == instance.get(k) for k in ("host", "vm_state", "task_state", "updated_at"))


async def _clear_task_state(manager, ctx, uuid: str, task_state: str, power_state: int,
                            vm_state: str | None = None, failed: str | None = None) -> None:
    """Clear the task state (and set ``vm_state``); the action is finished, as failed with
    ``failed`` as the reason when given."""
    values = {"task_state": leaves("init_host.cleared"), "power_state": power_state}
    if vm_state is not None:
        values["vm_state"] = vm_state
    LOG.info("instance %s: clearing task_state %s%s%s", uuid, task_state,
             f" (vm_state {vm_state})" if vm_state else "", f": {failed}" if failed else "")
    async with manager.instance_lock(uuid):
        try:
            await manager.conductor.instance_save(None, uuid, values, expected_task_state=[task_state])
        except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
            return
    if failed:
        await _record_failure(manager, ctx, uuid, failed)
    else:
        await manager.conductor.action_finish(ctx, uuid)


async def _record_failure(manager, ctx, uuid: str, reason: str) -> None:
    """The action's operation was not done here: an ``Error`` event says why, the action is finished."""
    await manager.conductor.action_record_event(ctx, uuid, LOST_EVENT, manager.host,
                                                utcnow().isoformat(), result="Error", details=reason[:255])
    await manager.conductor.action_finish(ctx, uuid, message="Error")


async def _discard_unfinished_snapshots(manager, ctx, uuid: str) -> None:
    """The images a snapshot, backup or shelve of the instance left unfinished (queued or saving):
    no host writes them any more (a failed snapshot deletes its image just the same)."""
    try:  # the host's own work, no user's request: as the service user (ctx None)
        for image in await manager.image_api.list_unfinished_snapshots(None, uuid):
            LOG.info("instance %s: deleting the unfinished snapshot image %s", uuid, image["id"])
            await manager.image_api.delete(None, image["id"])
    except exceptions.NefosError as exc:
        LOG.warning("instance %s: its unfinished snapshot images were not deleted: %s", uuid, exc)


async def _fail_interrupted_build(manager, instance: dict, lost: bool = False) -> None:
    """Build interrupted by the restart, or lost: release guest, ports and claim; ERROR with a fault."""
    uuid = instance["uuid"]
    ctx = await action_context(manager, uuid, action_names.CREATE)
    exc = exceptions.BuildAbortException(instance_uuid=uuid, reason=_why(manager, "build", lost))
    async with manager.instance_lock(uuid):
        if not await _unchanged(manager, instance):
            return  # built, rescheduled or deleted meanwhile
        LOG.warning("instance %s: %s", uuid, exc)
        await manager.cleanup_build(ctx, uuid, None)  # the build path's own cleanup: guest, ports, claim
        try:
            instance = await manager.conductor.save_with_fault(
                ctx, uuid, exc=exc, host=manager.host, details="".join(traceback.format_exception(exc)),
                **step_save("build.failed", vm_state=states.ERROR, network_info=[], power_state=states.NOSTATE),
                expected_vm_state=[states.BUILDING])
        except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError, exceptions.InstanceInvalidState):
            return  # deleted meanwhile: the delete finishes the job
        await manager.conductor.action_finish(ctx, uuid, message="Error")
    await manager.notify(ctx, instance, "instance.create.error")


# resume_guests_state_on_host_boot ---------------------------------------------------
async def _resume_guest(manager, uuid: str) -> None:
    """Power on the guest of an ACTIVE instance that is not running (the host rebooted)."""
    async with manager.instance_lock(uuid):
        try:
            instance = await manager.conductor.instance_get(None, uuid)
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
            await manager.conductor.instance_save(None, uuid, **step_save("init_host.guest_resumed",
                                                                          power_state=power_state))
