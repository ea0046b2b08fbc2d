"""The API's durable hand-off of a build to the conductor (an outbox).

The API writes the build request in the transaction that creates its instances, then casts it to
a conductor. A conductor claims it for a lease before scheduling and deletes it once every
instance has a host or a fault. A request no conductor claimed within ``build_hand_off_timeout``
(the cast was lost), one the API could not cast at all, and one whose lease ran out (its
conductor died) are taken again by any conductor: no accepted build is stranded in BUILD with no
host. Claims are compare-and-swaps, so two conductors never build the same request twice.

A claim names its conductor process (``<host>/<pid>/<token>``): a conductor restarted after a crash
takes at once what an earlier process of its own host held (that process is gone), instead of
waiting out the dead one's lease.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import uuid as uuidlib

from sqlalchemy import and_, delete, or_, select, update

from nefos import exceptions
from nefos.bus.base import decode, encode
from nefos.db.models import BuildRequest, utcnow

LOG = logging.getLogger(__name__)

_NOT_STORED = ("admin_password",)  # travels with the first cast only, never written down
_PROCESS_TOKEN = uuidlib.uuid4().hex[:12]  # tells this process from an earlier one with the same pid


def claimer_id(host: str) -> str:
    """How this conductor process signs its claims."""
    return f"{host}/{os.getpid()}/{_PROCESS_TOKEN}"


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # killed but not yet reaped by its parent
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return False


def held_by_dead_process(claimed_by: str | None, claimer: str) -> bool:
    """True when ``claimed_by`` is an earlier conductor process of ``claimer``'s own host that no
    longer runs (another host's processes cannot be seen from here: their leases decide)."""
    if not claimed_by or claimed_by == claimer:
        return False
    holder = claimed_by.rsplit("/", 2)
    if len(holder) != 3 or holder[0] != claimer.rsplit("/", 2)[0] or not holder[1].isdigit():
        return False
    pid = int(holder[1])
    return pid == os.getpid() or _process_gone(pid)  # our own pid with another token: an earlier us


def _without_token(context: dict) -> dict:
    """A stored build keeps no credential: its re-drive is the service's own, and the host fetches
    images as the service user."""
    return {k: v for k, v in context.items() if k != "auth_token"}


async def add(session, ctx, instance_uuids: list[str], request_spec: dict, build_args: dict) -> str:
    request_id = str(uuidlib.uuid4())
    args = {k: v for k, v in build_args.items() if k not in _NOT_STORED}
    # As the bus would carry them (datetimes as ISO strings, sets as lists): what a re-drive casts.
    session.add(BuildRequest(id=request_id, instance_uuids=list(instance_uuids),
                             request_spec=decode(encode(request_spec)), build_args=decode(encode(args)),
                             context=decode(encode(_without_token(ctx.to_dict()))), dispatched=True))
    await session.flush()
    return request_id


async def mark_undispatched(db, request_id: str) -> None:
    """The API could not reach a conductor: any conductor may take it at once."""
    async with db.transaction() as s:
        await s.execute(update(BuildRequest).where(BuildRequest.id == request_id).values(dispatched=False))


async def hand_off(db, conductor, ctx, instance_uuids: list[str], request_spec: dict, build_args: dict,
                   request_id: str) -> None:
    """Cast the build of the written request ``request_id`` to a conductor (``conductor``: its
    client); a conductor that cannot be reached takes it from the build requests later, so the
    build is accepted all the same."""
    try:
        await conductor.build_instances(ctx, instance_uuids, request_spec, build_args, build_request_id=request_id)
    except exceptions.ServiceUnavailable as exc:
        LOG.warning("servers %s: the conductor was not reached (%s); the build is taken from the "
                    "build requests when one is", instance_uuids, exc)
        await mark_undispatched(db, request_id)


async def claim(db, request_id: str, lease: float, claimer: str) -> bool | None:
    """Take the request for ``lease`` seconds. None when another live conductor holds it or it is
    done; else whether it was taken again (an earlier holder may have left claims behind)."""
    now = utcnow()
    async with db.transaction() as s:
        row = (await s.execute(select(BuildRequest.claimed_by, BuildRequest.claimed_until,
                                      BuildRequest.dispatched).where(BuildRequest.id == request_id))).first()
        if row is None:
            return None
        if (row.claimed_until is not None and row.claimed_until >= now
                and not held_by_dead_process(row.claimed_by, claimer)):
            return None
        same_holder = (BuildRequest.claimed_by.is_(None) if row.claimed_by is None
                       else BuildRequest.claimed_by == row.claimed_by)
        same_lease = (BuildRequest.claimed_until.is_(None) if row.claimed_until is None
                      else BuildRequest.claimed_until == row.claimed_until)
        result = await s.execute(update(BuildRequest).where(BuildRequest.id == request_id, same_holder, same_lease)
                                 .values(claimed_until=now + dt.timedelta(seconds=lease), claimed_by=claimer))
    if result.rowcount != 1:
        return None
    return row.claimed_by is not None or not row.dispatched


async def unclaim(db, request_id: str, claimer: str) -> None:
    """Give the request back (this conductor failed midway): the next re-drive takes it."""
    async with db.transaction() as s:
        await s.execute(update(BuildRequest).where(BuildRequest.id == request_id, BuildRequest.claimed_by == claimer)
                        .values(claimed_until=None, claimed_by=None, dispatched=False))


async def finish(db, request_id: str) -> None:
    async with db.transaction() as s:
        await s.execute(delete(BuildRequest).where(BuildRequest.id == request_id))


async def stranded(db, hand_off_timeout: float, claimer: str, limit: int = 100) -> list[dict]:
    """Requests to take again: never dispatched, or not claimed within ``hand_off_timeout``
    seconds, or claimed by a conductor whose lease ran out or whose process is gone."""
    now = utcnow()
    own_host = claimer.rsplit("/", 2)[0]
    async with db.reader() as s:
        rows = (await s.execute(select(BuildRequest).where(or_(
            and_(BuildRequest.claimed_until.is_(None),
                 or_(BuildRequest.dispatched.is_(False),
                     BuildRequest.created_at < now - dt.timedelta(seconds=hand_off_timeout))),
            BuildRequest.claimed_until < now,
            BuildRequest.claimed_by.startswith(own_host + "/", autoescape=True),
        )).order_by(BuildRequest.created_at).limit(limit))).scalars().all()
    return [{"id": r.id, "instance_uuids": r.instance_uuids, "request_spec": r.request_spec,
             "build_args": r.build_args, "context": r.context} for r in rows
            if r.claimed_until is None or r.claimed_until < now or held_by_dead_process(r.claimed_by, claimer)]
