"""The network service's notifier: which port changes become which events, the outbox, batching, retries."""

from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace

import httpx
import pytest
from nefos.control.network.notifier import ComputeEventsClient, Notifier, pending_events, port_events
from nefos.http_client import verified_tls
from tests.events.conftest import QUICK, boot, eventually, network_net, notifier
from tests.clouds import start_cloud, stop_cloud

CFG = SimpleNamespace(notify_nova_on_port_status_changes=True, notify_nova_on_port_data_changes=True)
SERVER = str(uuid.uuid4())


def port(status="DOWN", owner="compute:nova", device=SERVER, ips=(("s1", "10.0.0.5"),), mac="fa:16:3e:00:00:01"):
    return {"id": "p1", "status": status, "device_owner": owner, "device_id": device, "mac_address": mac,
            "fixed_ips": [{"subnet_id": s, "ip_address": ip} for s, ip in ips]}


@pytest.mark.parametrize("before, after, expected", [
    (port("DOWN"), port("ACTIVE"), [("network-vif-plugged", "completed")]),
    (port("BUILD"), port("ACTIVE"), [("network-vif-plugged", "completed")]),
    (port("BUILD"), port("ERROR"), [("network-vif-plugged", "failed")]),
    (port("ACTIVE"), port("DOWN"), [("network-vif-unplugged", "completed")]),
    (port("DOWN"), port("BUILD"), []),  # the agent picked it up: nothing for the compute host yet
    (port("ACTIVE"), port("BUILD"), []),  # re-wired (hard reboot): the next ACTIVE tells
    (port("ACTIVE"), port("ACTIVE", ips=(("s1", "10.0.0.6"),)), [("network-changed", "completed")]),
    (port("ACTIVE"), port("ACTIVE", mac="fa:16:3e:00:00:02"), [("network-changed", "completed")]),
    (port("ACTIVE"), None, [("network-vif-deleted", "completed")]),
    (port("DOWN", owner="network:dhcp"), port("ACTIVE", owner="network:dhcp"), []),  # not a compute port
    (port("DOWN", device=""), port("ACTIVE", device=""), []),
    (port("DOWN", owner=""), None, []),
    (port("ACTIVE"), port("ACTIVE"), []),
])
def test_which_changes_make_which_events(before, after, expected):
    events = port_events(CFG, before, after)
    assert [(e["name"], e["status"]) for e in events] == expected
    assert all(e["server_uuid"] == SERVER and e["tag"] == "p1" for e in events)


def test_the_switches_turn_events_off():
    cfg = SimpleNamespace(notify_nova_on_port_status_changes=False, notify_nova_on_port_data_changes=True)
    assert port_events(cfg, port("DOWN"), port("ACTIVE")) == []
    cfg = SimpleNamespace(notify_nova_on_port_status_changes=True, notify_nova_on_port_data_changes=False)
    assert port_events(cfg, port("ACTIVE"), None) == []
    assert port_events(cfg, port("ACTIVE"), port("ACTIVE", ips=())) == []


class RecordingClient(ComputeEventsClient):
    """Answers like the Compute API (or fails) without HTTP; records every batch."""

    def __init__(self, cfg, fail: int = 0, code: int = 200):
        super().__init__(cfg)
        self.batches: list[tuple[float, list[dict]]] = []
        self.request_ids: list[str | None] = []  # the X-OpenStack-Request-ID of each batch
        self.fail = fail
        self.code = code

    async def send(self, events, request_id=None):
        self.batches.append((time.monotonic(), events))
        self.request_ids.append(request_id)
        if self.fail:
            self.fail -= 1
            raise httpx.ConnectError("connection refused")
        if self.code != 200:  # no event accepted: Nova answers the whole batch 404
            return httpx.Response(404, json={"itemNotFound": {
                "code": 404, "message": "No instances found for any event"}})
        return httpx.Response(200, json={"events": [dict(e, code=self.code) for e in events]})


async def _stub_notifier(cloud, **kwargs) -> tuple[Notifier, RecordingClient]:
    """Swap the network service's sender for one posting to a RecordingClient."""
    real = notifier(cloud)
    await real.stop()
    client = RecordingClient(cloud.rt.cfg, **kwargs)
    real.client = client
    real.start()
    return real, client


async def _bound_port(cloud, device=None) -> dict:
    net = await cloud.make_network()
    r = await cloud.network.post("/v2.0/ports", json={"port": {
        "network_id": net["id"], "device_id": device or str(uuid.uuid4()), "device_owner": "compute:nova",
        "binding:host_id": cloud.hosts[0]}})
    assert r.status_code == 201, r.text
    return r.json()["port"]


async def _set_status(cloud, port_id: str, status: str) -> None:
    manager = next(c.manager for c in cloud.cloud.components if getattr(c, "notifier", None) is not None)
    from nefos.context import admin_context
    await manager.ports.update_port_status(admin_context(), port_id, status)


async def test_the_outbox_is_written_with_the_change_and_emptied_once_sent(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, **QUICK)
    try:
        notif, client = await _stub_notifier(cloud, fail=2)
        p = await _bound_port(cloud)
        await _set_status(cloud, p["id"], "ACTIVE")
        # The Compute API is "down" twice: the event stays in the outbox and is retried (1 s, 2 s).
        assert [r["name"] for r in await pending_events(cloud.rt.db)] == ["network-vif-plugged"]
        await eventually(lambda: _empty(cloud), timeout=10)
        assert len(client.batches) == 3
        assert [b[1] for b in client.batches] == [[{"server_uuid": p["device_id"], "name": "network-vif-plugged",
                                                    "status": "completed", "tag": p["id"]}]] * 3
        gaps = [b[0] - a[0] for a, b in zip(client.batches, client.batches[1:])]
        assert gaps[0] >= 0.9 and gaps[1] >= 1.8  # the backoff
    finally:
        await stop_cloud(cloud)


async def _empty(cloud):
    return not await pending_events(cloud.rt.db)


async def test_refused_events_are_dropped_not_retried(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, **QUICK)
    try:
        notif, client = await _stub_notifier(cloud, code=404)  # e.g. the server is gone
        p = await _bound_port(cloud)
        await _set_status(cloud, p["id"], "ACTIVE")
        await eventually(lambda: _empty(cloud))
        # Retries come from the outbox, now empty; a later change of the port goes out with its own
        # event alone: the refused one was not sent again.
        await _set_status(cloud, p["id"], "DOWN")
        await eventually(lambda: _count(client, 2), timeout=10)
        assert [[e["name"] for e in batch] for _t, batch in client.batches] == \
            [["network-vif-plugged"], ["network-vif-unplugged"]]
    finally:
        await stop_cloud(cloud)


async def test_events_survive_a_network_service_restart(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, **QUICK)
    try:
        notif = notifier(cloud)
        await notif.stop()  # the network service's sender is down (as in a crash)...
        p = await _bound_port(cloud)
        await _set_status(cloud, p["id"], "ACTIVE")  # ...while the port changes
        await _set_status(cloud, p["id"], "DOWN")
        assert [r["name"] for r in await pending_events(cloud.rt.db)] == ["network-vif-plugged",
                                                                          "network-vif-unplugged"]
        client = RecordingClient(cloud.rt.cfg)
        restarted = Notifier(cloud.rt, client)  # a new process: sends what the outbox holds at start
        restarted.start()
        try:
            await eventually(lambda: _empty(cloud))
            assert [e["name"] for _t, batch in client.batches for e in batch] == [
                "network-vif-plugged", "network-vif-unplugged"]
        finally:
            await restarted.stop()
    finally:
        await stop_cloud(cloud)


async def test_a_lease_keeps_two_senders_from_sending_one_event_twice(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, **QUICK)
    try:
        await notifier(cloud).stop()
        for _ in range(20):
            p = await _bound_port(cloud)
            await _set_status(cloud, p["id"], "ACTIVE")
        a, b = RecordingClient(cloud.rt.cfg), RecordingClient(cloud.rt.cfg)
        first, second = Notifier(cloud.rt, a), Notifier(cloud.rt, b)
        await asyncio.gather(first.flush(), second.flush(), first.flush(), second.flush())
        sent = [e["tag"] for c in (a, b) for _t, batch in c.batches for e in batch]
        assert len(sent) == 20 and len(set(sent)) == 20
        await first.stop()
        await second.stop()
    finally:
        await stop_cloud(cloud)


async def test_network_changed_is_coalesced_per_port(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, **QUICK)
    try:
        await notifier(cloud).stop()  # the events pile up (the Compute API is away, or a batch is filling)
        p = await _bound_port(cloud)
        other = await _bound_port(cloud)
        subnet = p["fixed_ips"][0]["subnet_id"]
        for last in (50, 51, 52):
            r = await cloud.network.put(f"/v2.0/ports/{p['id']}", json={"port": {"fixed_ips": [
                {"subnet_id": subnet, "ip_address": f"10.0.0.{last}"}]}})
            assert r.status_code == 200, r.text
        r = await cloud.network.put(f"/v2.0/ports/{other['id']}", json={"port": {"fixed_ips": [
            {"subnet_id": other["fixed_ips"][0]["subnet_id"], "ip_address": "10.0.0.60"}]}})
        assert r.status_code == 200
        # Renaming a port is nothing the compute host cares about.
        await cloud.network.put(f"/v2.0/ports/{p['id']}", json={"port": {"name": "renamed"}})
        assert [(r["name"], r["tag"]) for r in await pending_events(cloud.rt.db)] == [
            ("network-changed", p["id"])] * 3 + [("network-changed", other["id"])]
        client = RecordingClient(cloud.rt.cfg)
        sender = Notifier(cloud.rt, client)
        sender.start()
        try:
            await eventually(lambda: _empty(cloud))
            # One batch, one network-changed per port: the compute host refreshes each port once.
            # (The two ports were changed by two requests: one request each, under its request id.)
            assert sorted((e["name"], e["tag"]) for _t, batch in client.batches for e in batch) == sorted(
                [("network-changed", p["id"]), ("network-changed", other["id"])])
            assert len(client.batches) == 2 and len(set(client.request_ids)) == 2
            assert all(rid and rid.startswith("req-") for rid in client.request_ids)
            assert abs(client.batches[1][0] - client.batches[0][0]) < 0.5  # sent together
        finally:
            await sender.stop()
    finally:
        await stop_cloud(cloud)


async def test_batching_first_at_once_then_one_batch_per_interval(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, **dict(QUICK, send_events_interval=1.0))
    try:
        notif, client = await _stub_notifier(cloud)
        ports = [await _bound_port(cloud) for _ in range(5)]
        for p in ports[:4]:
            await _set_status(cloud, p["id"], "ACTIVE")
        await eventually(lambda: _count_events(client, 4), timeout=5)
        await asyncio.sleep(1.2)  # a quiet spell: the window the plugged events opened is over
        client.batches.clear()
        client.request_ids.clear()
        started = time.monotonic()
        await _set_status(cloud, ports[0]["id"], "DOWN")
        await eventually(lambda: _count(client, 1))
        assert time.monotonic() - started < 0.5  # the first event after a quiet spell goes at once
        for p in ports[1:4]:
            await _set_status(cloud, p["id"], "DOWN")
        # network-vif-plugged is not held by the window the unplugged events are waiting in: a build
        # waits for it.
        plugged_at = time.monotonic()
        await _set_status(cloud, ports[4]["id"], "ACTIVE")
        await eventually(lambda: _count(client, 2), timeout=5)
        assert [e["name"] for e in client.batches[1][1]] == ["network-vif-plugged"]
        assert client.batches[1][0] - plugged_at < 0.5
        await eventually(lambda: _count_events(client, 5), timeout=5)
        # The unplugged events waited for the interval, then went together: one request per request
        # id (each status change here was its own request), all in the same instant.
        later = client.batches[2:]
        assert sorted(e["name"] for _t, batch in later for e in batch) == ["network-vif-unplugged"] * 3
        assert all(t - client.batches[0][0] >= 0.95 for t, _b in later)
        assert max(t for t, _b in later) - min(t for t, _b in later) < 0.3
        assert len(set(client.request_ids)) == 5
    finally:
        await stop_cloud(cloud)


async def _count_events(client, n):
    return sum(len(batch) for _t, batch in client.batches) >= n


async def _count(client, n):
    return len(client.batches) >= n


async def test_a_port_update_never_waits_for_the_compute_api(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, **QUICK)
    try:
        notif = notifier(cloud)
        await notif.stop()
        hang = asyncio.Event()

        class Hanging(RecordingClient):
            async def send(self, events, request_id=None):
                await hang.wait()  # the Compute API never answers
        notif.client = Hanging(cloud.rt.cfg)
        notif.start()
        p = await _bound_port(cloud)
        started = time.monotonic()
        for status in ("ACTIVE", "DOWN", "ACTIVE"):
            await _set_status(cloud, p["id"], status)
        r = await cloud.network.delete(f"/v2.0/ports/{p['id']}")
        assert r.status_code == 204
        assert time.monotonic() - started < 2.0
        hang.set()
    finally:
        await stop_cloud(cloud)


async def test_notifier_posts_as_the_service_user_with_keystone(tmp_path):
    """With auth_strategy keystone the notifier gets a token for ``nefos`` in ``service`` and posts with it."""
    cloud = await start_cloud(tmp_path, fake_hosts=1, **QUICK)
    try:
        from nefos.control.identity.bootstrap import bootstrap
        await bootstrap(cloud.rt)  # passwords.yaml: where the notifier finds the service password
        await network_net(cloud)
        cloud.rt.cfg.auth_strategy = "keystone"
        token = {"X-Auth-Token": await _admin_token(cloud)}
        server_id = await boot(cloud, headers=token)  # the event must get through for the boot to finish
        await cloud.wait_status(server_id, "ACTIVE", headers=token)
        client = notifier(cloud).client
        assert client.service._token and (await client._auth())[1].endswith("/v2.1")
        notifier(cloud).client.forget_token()
    finally:
        cloud.rt.cfg.auth_strategy = "noauth"
        await stop_cloud(cloud)


async def _admin_token(cloud) -> str:
    from nefos.control.identity.bootstrap import _load_passwords
    password = _load_passwords(cloud.rt.cfg)["admin"]
    async with httpx.AsyncClient(verify=verified_tls(),
                                 base_url=f"http://127.0.0.1:{cloud.rt.cfg.identity_api_port}") as c:
        r = await c.post("/v3/auth/tokens", json={"auth": {"identity": {"methods": ["password"], "password": {
            "user": {"name": "admin", "domain": {"name": "Default"}, "password": password}}},
            "scope": {"project": {"name": "admin", "domain": {"name": "Default"}}}}})
        assert r.status_code == 201, r.text
        return r.headers["x-subject-token"]
