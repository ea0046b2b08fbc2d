"""The network service's notifier of its agents: a change that committed is fanned out to every
agent of a kind (DHCP, L3, L2) in a task of its own, so the change never waits for the bus nor
fails with it; the agents' periodic sync is the backstop for a notification lost."""

from __future__ import annotations

import asyncio
import logging

from nefos.bus.versioning import RPCClient, RPCInterface
from nefos.context import RequestContext

LOG = logging.getLogger(__name__)


class AgentNotifier:
    """The network service's side: fans a change out to every agent of ``interface``'s topic, in a
    task of its own. The subclass names its agents (``agents``), its logger and its default context."""

    interface: RPCInterface  # the agents' topic (nefos.bus.interfaces)
    agents: str  # "DHCP agents", ...
    log = LOG

    def __init__(self, bus):
        self.bus = bus
        self.client = RPCClient(bus, self.interface)
        self._tasks: set[asyncio.Task] = set()

    def _default_context(self) -> RequestContext:
        raise NotImplementedError

    def _fanout(self, ctx: RequestContext | None, what: str, method: str, **kwargs) -> None:
        """``method(**kwargs)`` to every agent, in a task; ``what`` (the change) is for the log."""
        task = asyncio.get_running_loop().create_task(self._send(ctx, what, method, kwargs))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, ctx: RequestContext | None, what: str, method: str, kwargs: dict) -> None:
        try:
            await self.client.fanout(ctx or self._default_context(), method, **kwargs)
            self.log.debug("%s: %s notified", what, self.agents)
        except Exception:
            self.log.warning("%s: notifying the %s failed (their periodic sync will see it)", what,
                             self.agents, exc_info=True)

    async def stop(self) -> None:
        tasks = list(self._tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=2)
        for task in tasks:
            task.cancel()
