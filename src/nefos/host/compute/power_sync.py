"""Power-state sync (Nova's ``_sync_power_states``): the database follows the hypervisor.

``sync_instance_power_state`` is the ONE per-instance rule set; the periodic
pass (``sync_power_states``), lifecycle events (``nefos.host.compute.lifecycle``)
and ``init_host`` all go through it. Under the instance's lock it re-reads
the guest's power state from the driver and the instance, then:

a) an instance with a task_state is left alone (an operation is under way);
b) a guest the driver does not have is ``NOSTATE``;
c) the driver's power_state is written to the database when they differ;
d) vm_states BUILDING, RESCUED, RESIZED, SUSPENDED, PAUSED, ERROR go no further;
e) ACTIVE with SHUTDOWN, CRASHED or SUSPENDED is stopped the way the API stops
   a server (task_state ``powering-off``, a ``stop`` action, the manager's
   ``stop_instance``), so it ends SHUTOFF; ACTIVE with PAUSED or NOSTATE is
   only logged;
f) STOPPED with anything but NOSTATE, SHUTDOWN or CRASHED: the guest runs
   although it should not, it is stopped the same way.

Every write is a compare-and-swap on ``task_state = None``, so an operation
the API starts meanwhile wins.
"""

from __future__ import annotations

import asyncio
import logging

from nefos import exceptions
from nefos.context import admin_context
from nefos.model import action_names, states
from nefos.model.state_machine import step_save

LOG = logging.getLogger(__name__)

IGNORED_VM_STATES = frozenset({states.BUILDING, states.RESCUED, states.RESIZED, states.SUSPENDED,
                               states.PAUSED, states.ERROR})
ACTIVE_STOP_POWER_STATES = frozenset({states.SHUTDOWN, states.CRASHED, states.SUSPENDED_POWER})
ACTIVE_IGNORED_POWER_STATES = frozenset({states.PAUSED_POWER, states.NOSTATE})
STOPPED_OK_POWER_STATES = frozenset({states.NOSTATE, states.SHUTDOWN, states.CRASHED})


def _power_name(power_state: int) -> str:
    return states.POWER_STATE_NAMES.get(power_state, str(power_state))


async def driver_power_state(driver, instance: dict) -> int:
    """The guest's power state; NOSTATE when the hypervisor has no such guest (rule b).

    Raises HypervisorUnavailable while the driver has lost its connection:
    "unknown" must never be mistaken for "gone"."""
    try:
        return (await driver.get_info(instance))["power_state"]
    except exceptions.InstanceNotFound:
        return states.NOSTATE


async def host_instances(manager) -> list[dict]:
    return await manager.conductor.host_instances(None, manager.host)


async def sync_instance_power_state(manager, uuid: str, *, source: str = "periodic sync",
                                    only_if: frozenset | None = None) -> None:
    """Apply rules a)-f) to one instance of ``manager``'s host; with ``only_if``, only when the
    driver's power state is one of those (a lifecycle event's own outcome)."""
    stop_ctx = None
    async with manager.instance_lock(uuid, operation=False):
        # The driver first: a guest that changed again since the event (a paused spawn resumed)
        # leaves nothing to do, and costs no conductor call.
        try:
            power_state = await driver_power_state(manager.driver, {"uuid": uuid})
        except exceptions.HypervisorUnavailable as exc:
            LOG.debug("instance %s: %s skipped: %s", uuid, source, exc)
            return
        if only_if is not None and power_state not in only_if:
            LOG.debug("instance %s: %s skipped, the guest is %s since", uuid, source,
                      _power_name(power_state))
            return
        try:
            instance = await manager.conductor.instance_get(None, uuid)
        except exceptions.InstanceNotFound:
            return
        if instance.get("host") != manager.host:
            return  # not ours (any more)
        if instance["task_state"] is not None:
            LOG.debug("instance %s: %s skipped, task_state %s", uuid, source, instance["task_state"])
            return
        stop_ctx = await _apply_rules(manager, instance, power_state, source)
    if stop_ctx is not None:
        # Outside the lock: the manager's stop path takes it itself.
        await manager.stop_instance(stop_ctx, uuid)


async def _apply_rules(manager, instance: dict, power_state: int, source: str):
    """Rules c)-f) for an instance without task_state; returns a context when it must be stopped."""
    uuid = instance["uuid"]
    if instance["power_state"] != power_state:
        try:
            instance = await manager.conductor.instance_save(None, uuid, **step_save("power_sync.power_state",
                                                                                     power_state=power_state))
        except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
            return None  # deleted or an operation started meanwhile: it wins
    vm_state = instance["vm_state"]
    if vm_state in IGNORED_VM_STATES:
        return None
    if vm_state == states.ACTIVE:
        if power_state in ACTIVE_STOP_POWER_STATES:
            LOG.warning("instance %s is active but its guest is %s (%s): stopping it", uuid,
                        _power_name(power_state), source)
            return await _request_stop(manager, uuid, states.ACTIVE)
        if power_state in ACTIVE_IGNORED_POWER_STATES:
            LOG.warning("instance %s is active but its guest is %s (%s): leaving it", uuid,
                        "missing" if power_state == states.NOSTATE else _power_name(power_state), source)
        return None
    if vm_state == states.STOPPED and power_state not in STOPPED_OK_POWER_STATES:
        LOG.warning("instance %s is stopped but its guest is %s (%s): stopping the guest", uuid,
                    _power_name(power_state), source)
        return await _request_stop(manager, uuid, states.STOPPED)
    return None


async def _request_stop(manager, uuid: str, vm_state: str):
    """What the API's stop does (task_state powering-off, a ``stop`` action), for the manager's
    ``stop_instance`` to finish. None when an operation or a delete got there first."""
    try:
        instance = await manager.conductor.instance_save(None, uuid, **step_save("power_sync.stop"),
                                                         expected_vm_state=[vm_state])
    except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError,
            exceptions.InstanceInvalidState):
        return None
    # The action is the owner's to see: record it on the instance's user and project, with
    # admin rights for the stop itself (as Nova's sync acts on the owner's instance).
    ctx = admin_context()
    ctx.user_id, ctx.project_id = instance.get("user_id"), instance.get("project_id")
    await manager.conductor.action_record(ctx, uuid, action_names.STOP)
    return ctx


def needs_sync(instance: dict, power_state: int) -> bool:
    """Whether rules c)-f) have anything to do (write, stop or warn) for this reading."""
    if instance["task_state"] is not None:
        return False  # rule a)
    if instance["power_state"] != power_state:
        return True
    vm_state = instance["vm_state"]
    if vm_state == states.ACTIVE:
        return power_state in ACTIVE_STOP_POWER_STATES or power_state in ACTIVE_IGNORED_POWER_STATES
    return vm_state == states.STOPPED and power_state not in STOPPED_OK_POWER_STATES


async def sync_power_states(manager) -> None:
    """One pass over every instance of the host.

    The pass reads the instances in one query and each guest's power state once; only an
    instance whose reading gives the rules something to do takes the per-instance path (lock,
    re-read, rules), at most ``sync_power_state_pool_size`` at once: on a host where all is in
    order a pass costs one query and one driver read per guest (10 000 instances).
    """
    instances = await manager.conductor.host_instance_states(None, manager.host)
    try:
        guests = await manager.driver.list_instance_uuids()
        readings = [(i, await driver_power_state(manager.driver, i)) for i in instances
                    if i["task_state"] is None]
    except exceptions.HypervisorUnavailable as exc:
        LOG.warning("power-state sync on %s skipped: %s", manager.host, exc)
        return
    if len(guests) != len(instances):
        LOG.warning("power-state sync on %s: %d instance(s) in the database, %d guest(s) on the "
                    "hypervisor", manager.host, len(instances), len(guests))
    pool = asyncio.Semaphore(max(1, manager.rt.cfg.sync_power_state_pool_size))

    async def one(uuid: str) -> None:
        async with pool:
            try:
                await sync_instance_power_state(manager, uuid)
            except asyncio.CancelledError:
                raise
            except Exception:
                LOG.exception("instance %s: power-state sync failed", uuid)

    await asyncio.gather(*(one(i["uuid"]) for i, power_state in readings if needs_sync(i, power_state)))
