"""Nothing waits forever: an operation whose request was lost is recovered, and instances stuck
in a build or any other task end in ERROR.

* Lost requests: a cast to this host can be lost (a broker restart drops it). An instance of
  this host with a task state set (or still BUILDING) that has not changed for longer than
  ``rpc_response_timeout`` while no operation of this host holds it
  (``manager.operation_in_progress``) is one whose request never arrived; it goes through the
  same recovery as at a restart of the host (``nefos.host.compute.init_host.recover_instance``,
  ``lost=True``): a delete, reboot, stop, start or unshelve is done; a build is ERROR with a fault
  saying it was lost (its guest, ports and claim released); a resize that never left
  ``resize_prep`` is aborted (the server as it was on its source), another resize step is ERROR;
  anything else (a snapshot, a backup, a shelve...) has its task state cleared, its unfinished
  image deleted and its action recorded as failed. A resize the user confirmed whose confirm
  never reached its source host (migration status ``confirming``) is confirmed by that host.
* Builds: Nova's ``_check_instance_build_time``: instances still BUILDING longer than
  ``instance_build_timeout`` after they were created.
* Every other task state (powering-off, rebooting, image_uploading, shelving, deleting, ...):
  longer than ``task_state_timeout`` since the instance last changed (``updated_at``, which the
  save that set the task state wrote). Each step of an operation sets its own task state, so the
  deadline is per step; a long step that makes progress (a snapshot writing and uploading a
  disk) renews it as it goes (``nefos.host.compute.snapshots.reporting_progress``), so only a step
  that stopped moving is cut short. An operation under way on the host is never taken for a lost
  one: only this deadline ends it.

Each compute host looks at its own instances every ``check_interval(cfg)`` seconds, in one
conductor call (``host_deadline_candidates``: only its busy instances are looked at, so a pass
costs the same whatever the servers it holds): it recovers the lost requests, then puts the stuck
ones in ERROR with a fault, clearing the task state (so a stuck delete can be retried). Every write is a compare-and-swap on the state that was read, so an
operation finishing or a delete arriving meanwhile wins; the stuck operation, when it returns,
fails its own compare-and-swap save and changes nothing (a stuck build also cleans up after
itself without rescheduling), and a request that arrives after its operation was recovered finds
the task state gone and does nothing. A timeout of 0 turns its check off.
"""

from __future__ import annotations

import datetime as dt
import logging

from nefos import exceptions
from nefos.model import migration_state
from nefos.host.compute.init_host import recover_instance
from nefos.host.compute.unfinished_actions import action_context
from nefos.context import admin_context
from nefos.model import states
from nefos.model.state_machine import expects, leaves
from nefos.timeutils import utcnow

LOG = logging.getLogger(__name__)

_LOST_RACE = (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError, exceptions.InstanceInvalidState)


def check_interval(cfg) -> float:
    """How often to look: half the shortest timeout (lost requests, builds, tasks), between 1 s and
    60 s (Nova's periodic spacing); -1 = off."""
    timeouts = [t for t in (cfg.rpc_response_timeout, cfg.instance_build_timeout, cfg.task_state_timeout) if t > 0]
    return max(1.0, min(60.0, min(timeouts) / 2)) if timeouts else -1


async def reap_stuck_instances(manager) -> list[str]:
    """Recover this host's lost requests; put its stuck builds and tasks in ERROR; returns the
    uuids put in ERROR for a deadline. One conductor call finds them all (a host where nothing is
    stuck gets four empty lists); a request recovered here is not also timed out."""
    due = await _candidates(manager)
    recovered = set(await finish_lost_operations(manager, due["lost"]))
    await finish_lost_confirmations(manager, due["resized"])
    return [*await reap_stuck_builds(manager, [u for u in due["builds"] if u not in recovered]),
            *await reap_stuck_tasks(manager, [t for t in due["tasks"] if t[0] not in recovered])]


def _cutoff(timeout: float) -> str | None:
    return (utcnow() - dt.timedelta(seconds=timeout)).isoformat() if timeout > 0 else None


async def _candidates(manager) -> dict:
    cfg = manager.rt.cfg
    return await manager.conductor.host_deadline_candidates(
        None, manager.host, _cutoff(cfg.rpc_response_timeout), _cutoff(cfg.instance_build_timeout),
        _cutoff(cfg.task_state_timeout))


async def finish_lost_operations(manager, instances: list[dict] | None = None) -> list[str]:
    """Recover this host's instances whose operation's request never arrived: a task state set (or
    still BUILDING), unchanged for longer than ``rpc_response_timeout``, while nothing here works
    on them (a cast lost with a broker restart, say). The same recovery as at the start of the
    host (``recover_instance``); returns the uuids it was run for. ``instances``: the pass's
    candidates (None: looked up)."""
    if instances is None:
        instances = (await _candidates(manager))["lost"]
    recovered = []
    for instance in instances:
        uuid = instance["uuid"]
        if manager.operation_in_progress(uuid):
            continue  # under way here: only task_state_timeout ends it
        LOG.warning("instance %s: its %s request never reached %s; recovering it", uuid,
                    instance["task_state"] or "build", manager.host)
        try:
            await recover_instance(manager, instance, lost=True)
        except Exception:
            LOG.exception("instance %s: recovering its lost request failed", uuid)
            continue
        recovered.append(uuid)
    return recovered


async def finish_lost_confirmations(manager, instances: list[dict]) -> list[str]:
    """Confirm the resizes this host is the source of whose confirm never arrived: RESIZED with the
    migration ``confirming`` for longer than ``rpc_response_timeout`` (the server itself lives on
    the destination); returns their uuids."""
    confirmed = []
    for instance in instances:
        uuid, migration = instance["uuid"], migration_state.migration_of(instance) or {}
        if (migration.get("status") != "confirming" or migration.get("source_compute") != manager.host
                or manager.operation_in_progress(uuid)):
            continue
        LOG.warning("instance %s: its resize confirm never reached %s; confirming it now", uuid, manager.host)
        ctx = await action_context(manager, uuid, migration_state.CONFIRM_RESIZE)
        await manager.confirm_resize(ctx, uuid, migration)
        confirmed.append(uuid)
    return confirmed


async def reap_stuck_builds(manager, uuids: list[str]) -> list[str]:
    """Nova's ``_check_instance_build_time``: the host's builds still BUILDING after
    ``instance_build_timeout`` (``uuids``, the pass's candidates) go to ERROR."""
    timeout = manager.rt.cfg.instance_build_timeout
    reaped = []
    for uuid in uuids:
        error = exceptions.InstanceBuildTimeout(timeout=f"{timeout:g}")
        if await _to_error(manager, uuid, error, expected_task_state=expects("build.failed"),
                           expected_vm_state=[states.BUILDING]):
            reaped.append(uuid)
            await _notify(manager, uuid, "instance.create.error")
    return reaped


async def reap_stuck_tasks(manager, rows: list[list]) -> list[str]:
    """Tasks unchanged for longer than ``task_state_timeout`` (``rows``, the pass's candidates:
    [uuid, task_state, vm_state]) go to ERROR."""
    timeout = manager.rt.cfg.task_state_timeout
    reaped = []
    for uuid, task_state, vm_state in rows:
        error = exceptions.InstanceTaskTimeout(task_state=task_state, timeout=f"{timeout:g}")
        if await _to_error(manager, uuid, error, expected_task_state=[task_state], expected_vm_state=[vm_state]):
            reaped.append(uuid)
    return reaped


async def _to_error(manager, uuid: str, error: Exception, **expected) -> bool:
    try:
        await manager.conductor.save_with_fault(None, uuid, {"vm_state": states.ERROR,
                                                             "task_state": leaves("deadline.passed")}, error,
                                                host=manager.host, **expected)
    except _LOST_RACE:
        return False  # finished, failed or deleted meanwhile: that wins
    LOG.warning("instance %s: %s", uuid, error)
    return True


async def _notify(manager, uuid: str, event_type: str) -> None:
    try:
        instance = await manager.conductor.instance_get(None, uuid)
    except exceptions.InstanceNotFound:
        return
    ctx = admin_context()
    ctx.user_id, ctx.project_id = instance.get("user_id"), instance.get("project_id")
    await manager.notify(ctx, instance, event_type)
