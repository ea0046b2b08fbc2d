"""Nothing waits forever (issue 3): builds stuck past ``instance_build_timeout`` end in ERROR.

Nova's ``_check_instance_build_time``: each compute host looks, every
``check_interval(cfg)`` seconds, for its instances still BUILDING longer than
``instance_build_timeout`` after they were created, and puts them in ERROR with
a fault. The write is a compare-and-swap on vm_state BUILDING and a build
task_state, so a build finishing or a delete arriving meanwhile wins. A build
still running when it is reaped fails its next save and cleans up after itself
(guest, ports, claim) without rescheduling; deleting the ERROR server releases
the rest. ``instance_build_timeout = 0`` turns the check off.
"""

from __future__ import annotations

import datetime as dt
import logging

from sqlalchemy import select

from nefos import exceptions
from nefos.context import admin_context
from nefos.db.models import Instance, utcnow
from nefos.objects import instance as instance_obj, states

LOG = logging.getLogger(__name__)


def check_interval(cfg) -> float:
    """How often to look: half the timeout, between 1 s and 60 s (Nova's periodic spacing); -1 = off."""
    timeout = cfg.instance_build_timeout
    return max(1.0, min(60.0, timeout / 2)) if timeout > 0 else -1


async def reap_stuck_builds(manager) -> list[str]:
    """Put this host's builds older than ``instance_build_timeout`` in ERROR; returns their uuids."""
    timeout = manager.rt.cfg.instance_build_timeout
    if timeout <= 0:
        return []
    db = manager.rt.db
    cutoff = utcnow() - dt.timedelta(seconds=timeout)
    async with db.reader() as s:
        uuids = (await s.execute(select(Instance.uuid).where(
            Instance.host == manager.host, Instance.deleted == 0, Instance.vm_state == states.BUILDING,
            Instance.created_at < cutoff))).scalars().all()
    reaped = []
    for uuid in uuids:
        error = exceptions.InstanceBuildTimeout(timeout=f"{timeout:g}")
        try:
            instance = await instance_obj.save_with_fault(
                db, uuid, {"vm_state": states.ERROR, "task_state": None}, error, host=manager.host,
                expected_task_state=states.BUILD_TASK_STATES, expected_vm_state=[states.BUILDING])
        except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError,
                exceptions.InstanceInvalidState):
            continue  # finished, failed or deleted meanwhile: that wins
        LOG.warning("instance %s: %s", uuid, error)
        ctx = admin_context()
        ctx.user_id, ctx.project_id = instance.get("user_id"), instance.get("project_id")
        await manager._notify(ctx, instance, "instance.create.error")
        reaped.append(uuid)
    return reaped
