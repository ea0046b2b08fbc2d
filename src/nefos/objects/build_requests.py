"""The API's durable hand-off of a build to the conductor (an outbox).

The API writes the build request in the transaction that creates its instances, then casts it to
a conductor. A conductor claims it for a lease before scheduling and deletes it once every
instance has a host or a fault. A request no conductor claimed within ``build_hand_off_timeout``
(the cast was lost), one the API could not cast at all, and one whose lease ran out (its
conductor died) are taken again by any conductor: no accepted build is stranded in BUILD with no
host. Claims are compare-and-swaps, so two conductors never build the same request twice.
"""

from __future__ import annotations

import datetime as dt
import uuid as uuidlib

from sqlalchemy import and_, delete, or_, select, update

from nefos.bus.base import decode, encode
from nefos.db.models import BuildRequest, utcnow

_NOT_STORED = ("admin_password",)  # travels with the first cast only, never written down


async def add(session, ctx, instance_uuids: list[str], request_spec: dict, build_args: dict) -> str:
    request_id = str(uuidlib.uuid4())
    args = {k: v for k, v in build_args.items() if k not in _NOT_STORED}
    # As the bus would carry them (datetimes as ISO strings, sets as lists): what a re-drive casts.
    session.add(BuildRequest(id=request_id, instance_uuids=list(instance_uuids),
                             request_spec=decode(encode(request_spec)), build_args=decode(encode(args)),
                             context=decode(encode(ctx.to_dict())), dispatched=True))
    await session.flush()
    return request_id


async def mark_undispatched(db, request_id: str) -> None:
    """The API could not reach a conductor: any conductor may take it at once."""
    async with db.transaction() as s:
        await s.execute(update(BuildRequest).where(BuildRequest.id == request_id).values(dispatched=False))


async def claim(db, request_id: str, lease: float) -> bool:
    """Take the request for ``lease`` seconds; False when another conductor holds it or it is done."""
    now = utcnow()
    async with db.transaction() as s:
        result = await s.execute(update(BuildRequest).where(
            BuildRequest.id == request_id,
            or_(BuildRequest.claimed_until.is_(None), BuildRequest.claimed_until < now),
        ).values(claimed_until=now + dt.timedelta(seconds=lease)))
    return result.rowcount == 1


async def finish(db, request_id: str) -> None:
    async with db.transaction() as s:
        await s.execute(delete(BuildRequest).where(BuildRequest.id == request_id))


async def stranded(db, hand_off_timeout: float, limit: int = 100) -> list[dict]:
    """Requests to take again: never dispatched, or not claimed within ``hand_off_timeout``
    seconds, or claimed by a conductor whose lease ran out."""
    now = utcnow()
    async with db.reader() as s:
        rows = (await s.execute(select(BuildRequest).where(or_(
            and_(BuildRequest.claimed_until.is_(None),
                 or_(BuildRequest.dispatched.is_(False),
                     BuildRequest.created_at < now - dt.timedelta(seconds=hand_off_timeout))),
            BuildRequest.claimed_until < now,
        )).order_by(BuildRequest.created_at).limit(limit))).scalars().all()
    return [{"id": r.id, "instance_uuids": r.instance_uuids, "request_spec": r.request_spec,
             "build_args": r.build_args, "context": r.context} for r in rows]
