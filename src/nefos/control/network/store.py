"""The network service's transactions and who hears of what they changed.

Every service of the network manager (networks, ports, routers ...) writes through one
``NetworkStore``: a change marks, inside its transaction, what it changed (a network's DHCP
configuration, a router's L3 configuration, a port); once the transaction committed, the
listeners hear of it (the DHCP, L3 and L2 population notifiers). A port change hook runs inside
the transaction instead, so an outbox row commits with the change it tells of.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Awaitable, Callable

from nefos.context import RequestContext

LOG = logging.getLogger(__name__)

# (session, ctx, port before or None, port after or None), inside the changing transaction
PortChangeHook = Callable[[Any, RequestContext, "dict | None", "dict | None"], Awaitable[None]]
# (ctx, Neutron's event name e.g. "port_create_end", network id), after the change committed
NetworkChangeListener = Callable[[RequestContext, str, str], None]
# (ctx, the ids of the routers whose L3 configuration changed), after the change committed
RouterChangeListener = Callable[[RequestContext, list], None]


class NetworkStore:
    """The shared database of the network services, and their change listeners and hooks."""

    def __init__(self, db):
        self.db = db
        self._port_change_hooks: list[PortChangeHook] = []
        self._network_change_listeners: list[NetworkChangeListener] = []
        self._router_change_listeners: list[RouterChangeListener] = []

    def reader(self):
        return self.db.reader()

    @contextlib.asynccontextmanager
    async def transaction(self):
        """A write transaction; once it committed, the listeners hear what it marked changed."""
        changes: list[tuple[RequestContext, str, str]] = []
        routers: dict[str, RequestContext] = {}
        async with self.db.transaction() as s:
            s.info["nefos_network_changes"] = changes
            s.info["nefos_router_changes"] = routers
            yield s
        # Committed (an error above skips this): tell the listeners what changed.
        self._tell_network_changed(changes)
        self._tell_routers_changed(routers)

    # Routers ------------------------------------------------------------------------------

    def add_router_change_listener(self, listener: RouterChangeListener) -> None:
        """Call ``listener(ctx, router_ids)`` after a transaction that changed what an L3 agent
        serves committed (a router, its interfaces or gateway, a floating IP); a plain call that
        must not block, as ``add_network_change_listener``'s."""
        self._router_change_listeners.append(listener)

    @staticmethod
    def router_changed(s, ctx: RequestContext, router_id: str | None) -> None:
        """Inside the changing transaction: ``router_id``'s L3 configuration changed."""
        routers = s.info.get("nefos_router_changes")
        if routers is not None and router_id:
            routers.setdefault(router_id, ctx)

    def _tell_routers_changed(self, routers: dict) -> None:
        if not routers:
            return
        ctx = next(iter(routers.values()))
        for listener in list(self._router_change_listeners):
            try:
                listener(ctx, sorted(routers))
            except Exception:
                LOG.exception("router change listener failed for routers %s", sorted(routers))

    # Networks -----------------------------------------------------------------------------

    def add_network_change_listener(self, listener: NetworkChangeListener) -> None:
        """Call ``listener(ctx, event, network_id)`` after a transaction that changed what a DHCP
        agent serves committed: a port created, updated or deleted, a subnet created, updated or
        deleted, a network updated or deleted (Neutron's ``port_create_end`` ... event names).
        A plain call (it must not block: ``DhcpAgentNotifier`` starts a task); a failing
        listener is logged, never fails the change."""
        self._network_change_listeners.append(listener)

    @staticmethod
    def network_changed(s, ctx: RequestContext, event: str, network_id: str) -> None:
        """Inside the changing transaction: ``event`` on ``network_id``, told once it committed."""
        changes = s.info.get("nefos_network_changes")
        if changes is not None and not any(e == event and n == network_id for _, e, n in changes):
            changes.append((ctx, event, network_id))

    def _tell_network_changed(self, changes: list) -> None:
        for ctx, event, network_id in changes:
            for listener in list(self._network_change_listeners):
                try:
                    listener(ctx, event, network_id)
                except Exception:
                    LOG.exception("network change listener failed for %s on network %s", event, network_id)

    # Ports --------------------------------------------------------------------------------

    def add_port_change_hook(self, hook: PortChangeHook) -> None:
        """Await ``hook(session, ctx, before, after)`` inside each transaction that updates or deletes
        a port (admin views; ``after`` None: deleted), e.g. to write an outbox row atomically with the
        change (``nefos.control.network.notifier``). A failing hook fails the change with it: a change that
        commits has its events, none is lost (the caller sees the error and may try again)."""
        self._port_change_hooks.append(hook)

    @property
    def has_port_hooks(self) -> bool:
        """Whether a port change needs its views for the hooks (none to build otherwise)."""
        return bool(self._port_change_hooks)

    async def port_changed(self, s, ctx: RequestContext, before: dict | None, after: dict | None) -> None:
        for hook in list(self._port_change_hooks):
            await hook(s, ctx, before, after)
