"""Nothing waits forever: instances stuck in a build or any other task end in ERROR.

* Builds: Nova's ``_check_instance_build_time``: instances still BUILDING longer than
  ``instance_build_timeout`` after they were created.
* Every other task state (powering-off, rebooting, image_uploading, shelving, deleting, ...):
  longer than ``task_state_timeout`` since the instance last changed (``updated_at``, which the
  save that set the task state wrote). Each step of an operation sets its own task state, so the
  deadline is per step; a long step that makes progress (a snapshot writing and uploading a
  disk) renews it as it goes (``nefos.compute.snapshots.reporting_progress``), so only a step
  that stopped moving is cut short.

A delete that never reached the host (its cast lost) is finished by the host after
``rpc_response_timeout`` (a delete is idempotent).

Each compute host looks at its own instances every ``check_interval(cfg)`` seconds and puts the
stuck ones in ERROR with a fault, clearing the task state (so a stuck delete can be retried). The
write is a compare-and-swap on the stuck state, so an operation finishing or a delete arriving
meanwhile wins; the stuck operation, when it returns, fails its own compare-and-swap save and
changes nothing (a stuck build also cleans up after itself without rescheduling). A timeout of 0
turns its check off.
"""

from __future__ import annotations

import datetime as dt
import logging

from sqlalchemy import select

from nefos import exceptions
from nefos.compute.init_host import action_context
from nefos.context import admin_context
from nefos.db.models import Instance, utcnow
from nefos.objects import actions, instance as instance_obj, states

LOG = logging.getLogger(__name__)

_LOST_RACE = (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError, exceptions.InstanceInvalidState)


def check_interval(cfg) -> float:
    """How often to look: half the shorter timeout, between 1 s and 60 s (Nova's periodic spacing);
    -1 = off."""
    timeouts = [t for t in (cfg.instance_build_timeout, cfg.task_state_timeout) if t > 0]
    return max(1.0, min(60.0, min(timeouts) / 2)) if timeouts else -1


async def reap_stuck_instances(manager) -> list[str]:
    """Finish this host's lost deletes; put its stuck builds and tasks in ERROR; returns their uuids."""
    await finish_lost_deletes(manager)
    return [*await reap_stuck_builds(manager), *await reap_stuck_tasks(manager)]


async def _own_instances(manager, *conditions) -> list[str]:
    """The uuids of this host's live instances that meet ``conditions``."""
    async with manager.rt.db.reader() as s:
        return (await s.execute(select(Instance.uuid).where(
            Instance.host == manager.host, Instance.deleted == 0, *conditions))).scalars().all()


async def finish_lost_deletes(manager) -> list[str]:
    """Delete this host's servers whose delete was accepted (task_state deleting) longer than
    ``rpc_response_timeout`` ago while nothing here works on them: the cast never arrived (lost
    with a broker restart, say). A delete is idempotent, so doing it once more is safe; the
    start of a host does the same for what it finds (init_host)."""
    cutoff = utcnow() - dt.timedelta(seconds=manager.rt.cfg.rpc_response_timeout)
    uuids = await _own_instances(manager, Instance.task_state == states.DELETING, Instance.updated_at < cutoff)
    finished = []
    for uuid in uuids:
        if manager.operation_in_progress(uuid):
            continue
        LOG.warning("instance %s: its delete never reached this host; deleting it now", uuid)
        await manager.terminate_instance(await action_context(manager.rt.db, uuid, actions.DELETE), uuid)
        finished.append(uuid)
    return finished


async def reap_stuck_builds(manager) -> list[str]:
    timeout = manager.rt.cfg.instance_build_timeout
    if timeout <= 0:
        return []
    cutoff = utcnow() - dt.timedelta(seconds=timeout)
    uuids = await _own_instances(manager, Instance.vm_state == states.BUILDING, Instance.created_at < cutoff)
    reaped = []
    for uuid in uuids:
        error = exceptions.InstanceBuildTimeout(timeout=f"{timeout:g}")
        if await _to_error(manager, uuid, error, expected_task_state=states.BUILD_TASK_STATES,
                           expected_vm_state=[states.BUILDING]):
            reaped.append(uuid)
            await _notify(manager, uuid, "instance.create.error")
    return reaped


async def reap_stuck_tasks(manager) -> list[str]:
    timeout = manager.rt.cfg.task_state_timeout
    if timeout <= 0:
        return []
    cutoff = utcnow() - dt.timedelta(seconds=timeout)
    async with manager.rt.db.reader() as s:
        rows = (await s.execute(select(Instance.uuid, Instance.task_state, Instance.vm_state).where(
            Instance.host == manager.host, Instance.deleted == 0, Instance.task_state.is_not(None),
            Instance.task_state.not_in([t for t in states.BUILD_TASK_STATES if t is not None]),
            Instance.vm_state != states.BUILDING, Instance.updated_at < cutoff))).all()
    reaped = []
    for uuid, task_state, vm_state in rows:
        error = exceptions.InstanceTaskTimeout(task_state=task_state, timeout=f"{timeout:g}")
        if await _to_error(manager, uuid, error, expected_task_state=[task_state], expected_vm_state=[vm_state]):
            reaped.append(uuid)
    return reaped


async def _to_error(manager, uuid: str, error: Exception, **expected) -> bool:
    try:
        await instance_obj.save_with_fault(manager.rt.db, uuid, {"vm_state": states.ERROR, "task_state": None},
                                           error, host=manager.host, **expected)
    except _LOST_RACE:
        return False  # finished, failed or deleted meanwhile: that wins
    LOG.warning("instance %s: %s", uuid, error)
    return True


async def _notify(manager, uuid: str, event_type: str) -> None:
    try:
        instance = await instance_obj.get(manager.rt.db, uuid)
    except exceptions.InstanceNotFound:
        return
    ctx = admin_context()
    ctx.user_id, ctx.project_id = instance.get("user_id"), instance.get("project_id")
    await manager._notify(ctx, instance, event_type)
