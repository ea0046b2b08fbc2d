"""Evacuation, the Compute API's part (Nova's ``compute.api.API.evacuate``): a server whose host
failed is rebuilt on another host (the conductor's part is ``nefos.control.conductor.evacuate``, the
hosts' ``nefos.host.compute.evacuate``).

The checks, in Nova's order: the target host is a compute host (404), not the server's own (400);
the server is ACTIVE, STOPPED or ERROR with no task (409); its host's compute service is down or
forced down (400, Nova's ``ComputeServiceInUse``: evacuating a guest that may still run would run
it twice). Then, in ONE transaction: task_state ``rebuilding`` (compare-and-swap), the migration
record (type ``evacuation``, status ``accepted``, the source host and node; the target host when
one was given: Nova's tombstone the source finds when it comes back), also kept in the server's
system metadata so a delete meanwhile releases the destination's claim, and the ``evacuate``
instance action. The conductor is cast (Nova's ``rebuild_instance`` with ``recreate``), with the
guest's new password (Nova's ``new_pass``), which the destination gives the guest as a rebuild does.
"""

from __future__ import annotations

import uuid as uuidlib

from sqlalchemy import select

from nefos import exceptions, notifications
from nefos.control.compute.services import COMPUTE_BINARY
from nefos.db.models import Service
from nefos.objects import migrations as migrations_obj, moves, service_rows
from nefos.model import state_machine
from nefos.model.migration_state import EVACUATE, EVACUATION, EVACUATION_IN_PROGRESS


class ComputeServiceInUse(exceptions.Invalid):
    """Nova's: the server's host still reports; its evacuate controller answers 400."""
    message = "Compute service of %(host)s is still in use."


async def destinations(db, instance_uuids) -> dict[str, str]:
    """The destination host of each of these instances' evacuation under way (once scheduled)."""
    return await migrations_obj.destinations_in_progress(db, instance_uuids, EVACUATION, EVACUATION_IN_PROGRESS)


async def compute_host_exists(db, host: str) -> bool:
    async with db.reader() as s:
        return (await s.execute(select(Service.id).where(
            Service.host == host, Service.binary == COMPUTE_BINARY, Service.deleted == 0))).first() is not None


async def request(api, ctx, uuid: str, *, host: str | None, force: bool | None,
                  target_state: str | None, admin_password: str | None = None) -> None:
    """``force``: None before 2.29 (a given host is taken as is), else whether to skip the
    scheduler's check of the given host; ``target_state``: ``stopped`` from 2.95, else None (the
    server keeps its power state: a STOPPED one stays stopped, ACTIVE and ERROR ones run);
    ``admin_password``: the evacuated guest's (None: it keeps the one it had)."""
    rt = api.rt
    instance = await api.get(ctx, uuid)
    if host is not None and not await compute_host_exists(rt.db, host):
        raise exceptions.NotFound(f"Compute host {host} not found.")
    if instance.get("host") == host:
        raise exceptions.Invalid("The target host can't be the same one.")
    state_machine.check(EVACUATE, instance)
    source = instance.get("host")
    if source is None:  # never scheduled: there is nothing to evacuate (Nova finds no service)
        raise exceptions.InstanceInvalidState(action=EVACUATE, instance_uuid=uuid, attr="host", state=None)
    if await service_rows.host_up(rt.db, rt.cfg, source):
        raise ComputeServiceInUse(host=source)
    flavor = instance.get("flavor") or {}
    migration = {
        "uuid": str(uuidlib.uuid4()), "type": EVACUATION, "status": "accepted",
        "source_compute": source, "source_node": instance.get("node"), "dest_compute": host, "dest_node": None,
        "old_flavor": flavor, "new_flavor": flavor, "old_vm_state": instance["vm_state"],
        "target_state": target_state,
    }
    await moves.begin_move(rt.db, ctx, instance, migration, operation=EVACUATE, requested_host=host)
    await notifications.notify_instance(rt.bus, ctx, instance, "instance.evacuate", host=rt.cfg.host,
                                        binary="nefos-api")
    spec = moves.request_spec(instance, flavor, host=host, force=force)
    try:
        await api.conductor.evacuate_instance(ctx, uuid, spec, migration, new_pass=admin_password)
    except BaseException as exc:
        # The conductor was never reached: the server is as it was, the migration an error.
        await moves.give_up_evacuation(rt.db, ctx, uuid, migration, exc, set_error=False)
        raise
