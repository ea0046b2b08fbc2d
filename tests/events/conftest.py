"""Helpers for the events suites: a cloud, its agents, actions and waits, and a stream's client."""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx
import pytest
from sqlalchemy import select

from nefos.db.models import InstanceAction, InstanceActionEvent
from nefos.cmd.event_tail import read_stream
from nefos.http_client import verified_tls
from tests.eventually import eventually  # noqa: F401  (this package's tests import it from here)
from tests.clouds import ADMIN, CloudHarness, start_cloud, stop_cloud

# The noauth headers of the network service's own user (what its notifier sends).
SERVICE = {"X-Project-Id": "service", "X-User-Id": "nefos", "X-Roles": "service"}
# Events go out at once: the suites measure behaviour, not the batching (tested on its own).
QUICK = {"send_events_interval": 0.0, "lifecycle_stopped_delay": 0.0, "sync_power_state_interval": -1}


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=1, **QUICK)
    yield harness
    await stop_cloud(harness)


def agent(cloud: CloudHarness, host: str):
    """The fake L2 agent of ``host``."""
    for c in cloud.cloud.components:
        if getattr(c, "host", None) == host and getattr(c, "l2_agent", None) is not None:
            return c.l2_agent
    raise KeyError(host)


def notifier(cloud: CloudHarness):
    for c in cloud.cloud.components:
        if getattr(c, "notifier", None) is not None:
            return c.notifier
    raise KeyError("network")


async def network_net(cloud: CloudHarness) -> dict:
    net = getattr(cloud, "_events_net", None)
    if net is None:
        net = cloud._events_net = await cloud.make_network()
    return net


async def boot(cloud: CloudHarness, name: str = "vm", **extra) -> str:
    net = await network_net(cloud)
    created = await cloud.boot(name=name, networks=[{"uuid": net["id"]}], **extra)
    return created["server"]["id"]


async def action_events(cloud: CloudHarness, uuid: str) -> list[dict]:
    """Every (action, event, result, details) recorded for the instance, oldest first."""
    async with cloud.rt.db.reader() as s:
        rows = (await s.execute(select(InstanceAction.action, InstanceActionEvent.event, InstanceActionEvent.result,
                                       InstanceActionEvent.details)
                                .join(InstanceActionEvent, InstanceActionEvent.action_id == InstanceAction.id)
                                .where(InstanceAction.instance_uuid == uuid)
                                .order_by(InstanceActionEvent.id))).all()
    return [{"action": a, "event": e, "result": r, "details": d} for a, e, r, d in rows]


async def port_of(cloud: CloudHarness, server_id: str) -> dict:
    ports = await cloud.ports(device_id=server_id)
    assert len(ports) == 1, ports
    return ports[0]


class Listener:
    """A client streaming in the background; ``messages`` fills as they come (the log's events),
    ``closing`` is the stream's last message when the server ended it with ``stream.closed``."""

    def __init__(self, cloud, headers=ADMIN, params=None, last_event_id=None):
        self.messages: list[dict] = []
        self.closing: dict | None = None
        self.connected = asyncio.Event()
        self._client = httpx.AsyncClient(verify=verified_tls(), base_url=cloud.compute.base_url)
        self._task = asyncio.create_task(self._read(headers, params, last_event_id))

    async def _read(self, headers, params, last_event_id):
        async for message in read_stream(self._client, "/v2.1/nefos-events", headers=headers, params=params,
                                         last_event_id=last_event_id, reconnect_delay=0.05):
            if message["event"] == "stream.connected":
                self.connected.set()
            elif message["event"] == "stream.closed":
                self.closing = message["data"]
            else:
                self.messages.append(message)

    def of(self, server_id: str, *types: str) -> list[dict]:
        return [m["data"] for m in self.messages
                if m["data"].get("server_id") == server_id and (not types or m["event"] in types)]

    async def ended(self, timeout: float) -> float:
        """Wait until the server ended the stream (within ``timeout`` seconds, else AssertionError);
        how long that took."""
        started = time.monotonic()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except TimeoutError:
            raise AssertionError(f"the stream was still open after {timeout} s") from None
        return time.monotonic() - started

    async def close(self):
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self._client.aclose()


async def listen(cloud, **kwargs) -> Listener:
    """A client streaming, once the stream told it is live (``stream.connected``)."""
    listener = Listener(cloud, **kwargs)
    await asyncio.wait_for(listener.connected.wait(), 10)
    return listener
