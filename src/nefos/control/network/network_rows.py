"""A network's row as a caller sees it, read only: what the services that put something on a
network (ports, routers' gateways, floating IPs) check first."""

from __future__ import annotations

import functools

from sqlalchemy import bindparam, or_, select

from nefos import exceptions
from nefos.context import RequestContext
from nefos.db.models import Network
from nefos.control.network.common import owned, visibility

_N = Network.__table__


@functools.lru_cache(maxsize=8)
def _network_row_statement(visibility: str):
    q = select(_N).where(_N.c.id == bindparam("b_id"))
    if visibility != "admin":
        q = q.where(or_(owned(_N.c.project_id, visibility), _N.c.shared.is_(True), _N.c.external.is_(True)))
    return q


async def network_brief(s, ctx: RequestContext, network_id: str):
    """The network's row (a Core row, attributes as the ORM object's); NetworkNotFound when the
    caller does not see it."""
    row = (await s.execute(_network_row_statement(visibility(ctx)),
                           {"b_id": str(network_id), "b_project": ctx.project_id})).first()
    if row is None:
        raise exceptions.NetworkNotFound(net_id=network_id)
    return row
