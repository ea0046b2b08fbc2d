"""Evacuation, the conductor's part (Nova's ``ComputeTaskManager.rebuild_instance`` with
``recreate``): find the destination and hand the server to it.

Without a host the scheduler picks one, never the failed source (its ``ignore_hosts``); a host given
from 2.29 without ``force`` goes through the scheduler's filters (Nova's requested destination);
a forced one (or any given host before 2.29) skips them, and only its claim can refuse it. Either way
the destination's claim is made for the migration's uuid, so the server's own claim stays on the
source until the destination took the server. The migration gets its destination (host, node, IP);
then ``rebuild_instance`` is cast to the destination with the migration and the guest's new password
(``nefos.host.compute.evacuate``).

No valid host (or a forced host that is down): the server stays on its source in ERROR with the
reason as its fault, the migration ``error``, as Nova's conductor does.
"""

from __future__ import annotations

import logging
import traceback

from nefos import exceptions
from nefos.objects import actions
from nefos.model import states
from nefos.objects.moves import give_up_evacuation as give_up, record_destination
from nefos.objects.service_rows import host_up

LOG = logging.getLogger(__name__)

CONDUCTOR_EVENT = "conductor_rebuild_server"  # Nova's event for a rebuild or an evacuation


async def evacuate_instance(conductor, ctx, uuid: str, request_spec: dict, migration: dict,
                            new_pass: str | None = None) -> None:
    db = conductor.rt.db
    event_id = await actions.event_start(db, ctx, uuid, CONDUCTOR_EVENT, None)
    forced = request_spec.get("force_hosts") or []
    try:
        if forced and not await host_up(db, conductor.rt.cfg, forced[0]):
            raise exceptions.NoValidHost(reason=f"The forced host {forced[0]} is down.")
        (selection,) = await conductor.scheduler.select_destinations(ctx, dict(request_spec), [migration["uuid"]])
    except exceptions.NoValidHost as exc:
        LOG.warning("instance %s: no host to evacuate it to: %s", uuid, exc)
        await actions.event_finish(db, event_id, result="Error", traceback="".join(traceback.format_exception(exc)))
        await give_up(db, ctx, uuid, migration, exc, set_error=True)
        return
    except BaseException as exc:
        await actions.event_finish(db, event_id, result="Error", traceback="".join(traceback.format_exception(exc)))
        await give_up(db, ctx, uuid, migration, exc, set_error=True)
        raise
    recorded = await record_destination(db, uuid, migration, selection, event_id, step="evacuate.scheduled")
    if recorded is None:
        return
    migration, instance = recorded
    try:
        await conductor.compute_rpcapi.rebuild_instance(ctx, selection["host"], uuid, instance.get("image_ref"),
                                                        instance["vm_state"] == states.STOPPED, migration=migration,
                                                        new_pass=new_pass)
    except BaseException as exc:
        await give_up(db, ctx, uuid, migration, exc, set_error=True)
        raise
