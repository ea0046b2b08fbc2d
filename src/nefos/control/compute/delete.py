"""A server's delete, the Compute API's part (Nova's ``compute.api.API._delete``): a server no host
holds, or whose host is down, is deleted here (Nova's local delete); any other is marked deleting
and cast to its host, which finishes a delete that never reached it (a lost cast) by itself."""

from __future__ import annotations

import contextlib
import logging

from nefos import exceptions, notifications
from nefos.control.compute.services import is_up
from nefos.objects import actions, allocations, instance as instance_obj
from nefos.model import states
from nefos.model import state_machine

LOG = logging.getLogger(__name__)


async def delete(api, ctx, uuid: str, instance: dict) -> None:
    """Delete the server ``instance`` (as read) for ``ctx``; raises when not accepted."""
    shelved_image = (instance.get("system_metadata") or {}).get("shelved_image_id")
    if shelved_image and instance["vm_state"] in (states.SHELVED, states.SHELVED_OFFLOADED):
        await api.image_api.delete(ctx.elevated(), shelved_image)  # nothing else would ever use it
    if instance.get("host") is None:
        # Not on any host yet: delete here, racing the conductor atomically.
        if await local_delete(api, ctx, uuid, only_if_unscheduled=True):
            return
        instance = await instance_obj.get(api.rt.db, uuid)
    # Read before the write: a database lost here leaves the server as it was (a 503 changed nothing).
    host = instance["host"]
    host_up = await api.host_is_up(host, is_up)
    instance = await instance_obj.save(api.rt.db, uuid, {"task_state": state_machine.operation(actions.DELETE).sets})
    if instance.get("host") != host:
        # Its build went back unplaced meanwhile (its host never got it), or was placed again.
        host = instance.get("host")
        host_up = host is not None and await api.host_is_up(host, is_up)
    if not host_up:
        await local_delete(api, ctx, uuid)
        return
    try:
        await api.compute_rpcapi.terminate_instance(ctx, host, uuid)
    except exceptions.ServiceUnavailable as exc:
        # Accepted all the same: the host finishes a delete that never reached it
        # (nefos.host.compute.deadlines), and a delete is idempotent.
        LOG.warning("instance %s: the delete could not be sent to %s (%s); the host finishes it", uuid, host, exc)
    except BaseException:  # the host never heard of it: the server is as it was
        with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
            await instance_obj.save(api.rt.db, uuid, {"task_state": instance["task_state"]},
                                    expected_task_state=state_machine.expects("delete.not_accepted"))
        raise


async def local_delete(api, ctx, uuid: str, only_if_unscheduled: bool = False) -> bool:
    """Delete the server here, as no host will: False when it was gone already (or, with
    ``only_if_unscheduled``, a host was chosen meanwhile)."""
    before = await instance_obj.destroy(api.rt.db, uuid, only_if_unscheduled=only_if_unscheduled)
    if before is None:
        return False
    # No compute host does this delete, so the API announces it (as Nova's local delete does).
    await _notify(api, ctx, before, "instance.delete.start")
    await allocations.release(api.rt.db, uuid)
    from nefos.control.compute import resize
    await resize.release_claims_of_deleted(api.rt.db, before)  # a migration's claim too
    try:
        await api.network_api.deallocate_for_instance(ctx, before, before.get("network_info"))
    except exceptions.ServiceUnavailable as exc:  # the server is gone; a conductor releases its ports
        LOG.warning("instance %s: its ports could not be released now (%s); released later", uuid, exc)
    await actions.finish_action(api.rt.db, ctx, uuid)
    await _notify(api, ctx, dict(before, vm_state=states.DELETED, task_state=None, power_state=states.NOSTATE),
                  "instance.delete.end")
    return True


async def _notify(api, ctx, instance: dict, event_type: str) -> None:
    await notifications.notify_instance(api.rt.bus, ctx, instance, event_type, host=api.rt.cfg.host,
                                        binary="nefos-api")
