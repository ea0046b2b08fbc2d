"""GET /v2.1/nefos-events: the cloud's changes as Server-Sent Events, read as a client would."""

from __future__ import annotations

import pytest

from nefos.objects import event_log
from tests.compute.conftest import boot_active, crash_compute, eventually, start_compute
from tests.events.conftest import listen
from tests.clouds import ADMIN, member, start_cloud, stop_cloud

OTHER_PROJECT = "e" * 32


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=2)
    yield harness
    await stop_cloud(harness)


async def _true(value):
    return value


async def test_a_boot_streams_each_state_change_in_order(cloud):
    listener = await listen(cloud)
    [server_id] = await boot_active(cloud)
    await eventually(lambda: _true(any(m["status"] == "ACTIVE" for m in listener.of(server_id, "server.updated"))))
    states = listener.of(server_id, "server.created", "server.updated")
    assert states[0]["type"] == "server.created"
    assert states[0]["status"] == "BUILD" and states[0]["task_state"] == "scheduling"
    tasks = [s["task_state"] for s in states]
    # The pipeline's task states, in the order the build went through them.
    order = ["scheduling", "networking", "block_device_mapping", "spawning"]
    seen = [t for t in tasks if t in order]
    assert seen == sorted(seen, key=order.index) and set(order) <= set(seen), tasks
    assert states[-1]["status"] == "ACTIVE" and states[-1]["task_state"] is None
    ids = [m["data"]["id"] for m in listener.messages]
    assert ids == sorted(ids) and len(ids) == len(set(ids))
    # Each step started and finished, with its result; the network-vif-plugged event received.
    steps = listener.of(server_id, "server.step.finished")
    assert {"compute_spawn", "compute_allocate_network"} <= {s["name"] for s in steps}
    assert all(s["result"] == "Success" for s in steps)
    assert any(s["name"] == "compute_spawn" for s in listener.of(server_id, "server.step.started"))
    assert [e["name"] for e in listener.of(server_id, "server.event.received")] == ["network-vif-plugged"]
    # The admin sees the host; every event names the server's project.
    assert {s["host"] for s in listener.of(server_id, "server.step.finished")} - {None} <= set(cloud.hosts)
    assert {s["project_id"] for s in listener.of(server_id)} == {ADMIN["X-Project-Id"]}

    r = await cloud.compute.delete(f"/v2.1/servers/{server_id}")
    assert r.status_code == 204
    await eventually(lambda: _true(listener.of(server_id, "server.deleted")))
    await listener.close()


async def test_a_member_never_sees_another_projects_events(cloud):
    net = await cloud.make_network(shared=True)
    mine = await listen(cloud, headers=member())
    theirs = await listen(cloud, headers=member(OTHER_PROJECT, "f" * 32))
    admin = await listen(cloud)
    server_id = (await cloud.boot(headers=member(), networks=[{"uuid": net["id"]}]))["server"]["id"]
    await cloud.wait_status(server_id, "ACTIVE", headers=member())
    await eventually(lambda: _true(any(m["status"] == "ACTIVE" for m in mine.of(server_id, "server.updated"))))
    # Host events reach only the admin; a member's copy of a server's event has no host.
    r = await cloud.compute.put("/v2.1/os-services/disable", json={"host": cloud.hosts[0],
                                                                   "binary": "nova-compute"})
    assert r.status_code == 200, r.text
    await eventually(lambda: _true([m for m in admin.messages if m["event"] == "host.disabled"]))
    assert not [m for m in theirs.messages]
    assert {m["data"]["server_id"] for m in mine.messages} == {server_id}
    assert all(m["data"]["host"] is None for m in mine.messages)
    # Nova's hostId instead: the same value the server's own view gives the member.
    shown = await cloud.server(server_id, headers=member())
    assert {m["data"]["host_id"] for m in mine.messages if m["data"]["host_id"]} == {shown["hostId"]}
    assert any(d["host"] for d in admin.of(server_id))
    for listener in (mine, theirs, admin):
        await listener.close()


async def test_a_member_asking_for_another_project_is_refused(cloud):
    r = await cloud.compute.get("/v2.1/nefos-events", headers=member(), params={"project_id": OTHER_PROJECT,
                                                                              "timeout": "0"})
    assert r.status_code == 403
    assert r.json()["forbidden"]["message"]
    r = await cloud.compute.get("/v2.1/nefos-events", headers=member(), params={"project_id": member()["X-Project-Id"],
                                                                              "timeout": "0"})
    assert r.status_code == 200
    for bad in ({"type": "nonsense"}, {"server_id": "not-a-uuid"}, {"timeout": "-1"}, {"last_event_id": "x"},
                {"unknown": "1"}):
        r = await cloud.compute.get("/v2.1/nefos-events", params=bad)
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["badRequest"]["message"]
    r = await cloud.compute.get("/v2.1/nefos-events", headers={"Last-Event-ID": "12abc"}, params={"timeout": "0"})
    assert r.status_code == 400


async def test_resuming_with_last_event_id_loses_nothing(cloud):
    first = await listen(cloud, params={"type": "server"})
    [a] = await boot_active(cloud)
    await eventually(lambda: _true(any(m["status"] == "ACTIVE" for m in first.of(a, "server.updated"))))
    last = first.messages[-1]["id"]
    await first.close()  # the cut
    [b] = await boot_active(cloud)
    r = await cloud.compute.post(f"/v2.1/servers/{a}/action", json={"os-stop": None})
    assert r.status_code == 202
    await cloud.wait_status(a, "SHUTOFF")
    # What the log holds after the cut, and what a resumed client gets: the same, in order.
    logged = [e for e in await event_log.read_after(cloud.rt.db, int(last)) if e["server_id"]]
    resumed = await listen(cloud, params={"type": "server"}, last_event_id=last)
    await eventually(lambda: _true(len(resumed.messages) >= len(logged)))
    assert [int(m["id"]) for m in resumed.messages[:len(logged)]] == [e["id"] for e in logged]
    assert resumed.of(b, "server.created") and resumed.of(a, "server.updated")[-1]["status"] == "SHUTOFF"
    await resumed.close()


async def test_a_bounded_stream_ends_and_filters(cloud):
    [a, b] = await boot_active(cloud, 2)
    r = await cloud.compute.get("/v2.1/nefos-events", params={"last_event_id": "0", "timeout": "0.2",
                                                              "server_id": a, "type": "server.updated"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [line for line in r.text.splitlines() if line.startswith("event:")]
    assert events.pop(0) == "event: stream.connected"
    assert events and set(events) == {"event: server.updated"}
    assert b not in r.text and a in r.text


async def test_hosts_going_auto_disabled_down_and_back_are_streamed(tmp_path):
    # A host is down service_down_time after its last heartbeat; both are short here so the test
    # sees it, and the watcher looks every 0.2 s (test_the_shipped_watch_runs_with_the_conductor
    # checks the shipped interval's periodic task).
    cloud = await start_cloud(tmp_path, fake_hosts=2, service_down_time=2.0, event_host_watch_interval=0.2,
                              periodic_fuzzy_delay=0)
    try:
        admin = await listen(cloud, params={"type": "host"}, last_event_id="0")  # from the log's start
        member_view = await listen(cloud, headers=member())

        def seen(kind: str, host: str) -> list[dict]:
            return [m["data"] for m in admin.messages if m["event"] == kind and m["data"]["host"] == host]
        await eventually(lambda: _true(seen("host.up", "host-1") and seen("host.up", "host-2")))
        driver = cloud.driver("host-1")
        driver.simulate_connection_loss("hypervisor gone")
        [disabled] = await eventually(lambda: _true(seen("host.disabled", "host-1")))
        assert (disabled["disabled_reason"], disabled["disabled_by"]) == ("AUTO: hypervisor gone", "auto")
        driver.simulate_connection_restored()
        await eventually(lambda: _true(seen("host.enabled", "host-1")))
        # The process dies: its heartbeats stop, the host goes down; a new process brings it back.
        old = await crash_compute(cloud, "host-2")
        await eventually(lambda: _true(seen("host.down", "host-2")), timeout=15)
        await start_compute(cloud, old)
        await eventually(lambda: _true(len(seen("host.up", "host-2")) == 2), timeout=15)
        assert [m["event"] for m in admin.messages if m["data"]["host"] == "host-2"] == ["host.up", "host.down",
                                                                                          "host.up"]
        assert member_view.messages == []  # hosts are the admin's
        for listener in (admin, member_view):
            await listener.close()
    finally:
        await stop_cloud(cloud)


async def test_the_shipped_watch_runs_with_the_conductor(cloud):
    from nefos.config import Config
    conductor = next(c for c in cloud.cloud.components if c.name == "conductor")
    [watch] = [p for p in conductor.service.periodic if p.name == "report_host_liveness"]
    assert watch.interval == Config.model_fields["event_host_watch_interval"].default == 10.0
    assert cloud.rt.cfg.event_log_retention == Config.model_fields["event_log_retention"].default
