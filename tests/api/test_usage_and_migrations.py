"""os-simple-tenant-usage, os-instance_usage_audit_log and os-migrations over servers and
migration records written with controlled timestamps (the figures are checked against the
servers' real lifetimes)."""

from __future__ import annotations

import datetime as dt
import uuid as uuidlib
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import insert

from nefos.db.models import Migration, utcnow
from nefos.objects import instance as instance_obj
from nefos.service import Service
from tests.api.conftest import PROJECT, member, version
from tests.schemas import assert_schema

OTHER = "o" * 32
FLAVOR = {"id": 7, "flavorid": "7", "name": "m1.usage", "memory_mb": 512, "vcpus": 2, "root_gb": 10,
          "ephemeral_gb": 5}
# The period every usage test asks for: ten hours that ended an hour ago.
END = (utcnow() - dt.timedelta(hours=1)).replace(microsecond=0)
START = END - dt.timedelta(hours=10)


def _fmt(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f")


async def _server(rt, project: str, launched: dt.datetime | None, terminated: dt.datetime | None = None,
                  name: str = "vm", vm_state: str = "active") -> str:
    uuid = str(uuidlib.uuid4())
    values = {"uuid": uuid, "project_id": project, "user_id": "u", "display_name": name, "vm_state": vm_state,
              "flavor": FLAVOR, "instance_type_id": 7, "vcpus": 2, "memory_mb": 512, "root_gb": 10,
              "ephemeral_gb": 5, "launched_at": launched, "terminated_at": terminated, "created_at": launched or END,
              "metadata": {}, "system_metadata": {}, "security_groups": [], "network_info": [], "deleted": 0}
    if terminated is not None:  # deleted servers count too, as Nova reads them
        values.update(vm_state="deleted", deleted_at=terminated)
    async with rt.db.transaction() as s:
        row = await instance_obj.create(s, values)
        if terminated is not None:
            from sqlalchemy import update
            await s.execute(update(instance_obj.INSTANCES).where(instance_obj.INSTANCES.c.uuid == uuid)
                            .values(deleted=row["id"]))
    return uuid


@pytest.fixture
async def usage_servers(rt):
    """In PROJECT: one running since before the period, one launched inside it and deleted inside it,
    one deleted before it, one never launched, one launched after it; in OTHER: one inside."""
    return {
        "running": await _server(rt, PROJECT, START - dt.timedelta(hours=5), name="running"),
        "inside": await _server(rt, PROJECT, START + dt.timedelta(hours=2), START + dt.timedelta(hours=5),
                                name="inside"),
        "gone": await _server(rt, PROJECT, START - dt.timedelta(hours=9), START - dt.timedelta(hours=1)),
        "unlaunched": await _server(rt, PROJECT, None, vm_state="building"),
        "later": await _server(rt, PROJECT, END + dt.timedelta(minutes=10)),
        "other": await _server(rt, OTHER, START + dt.timedelta(hours=4), name="other"),
    }


def _period(**extra) -> dict:
    return {"start": _fmt(START), "end": _fmt(END), **extra}


async def test_usage_of_one_project_from_the_servers_lifetimes(client, usage_servers):
    r = await client.get(f"/v2.1/os-simple-tenant-usage/{PROJECT}", params=_period(), headers=member())
    usage = assert_schema("tenant_usages.get_tenant_usage", r)["tenant_usage"]
    assert usage["tenant_id"] == PROJECT
    assert (usage["start"], usage["stop"]) == (_fmt(START), _fmt(END))
    by_id = {u["instance_id"]: u for u in usage["server_usages"]}
    # running: the whole period (10 h); inside: 3 h. The others are outside the period.
    assert set(by_id) == {usage_servers["running"], usage_servers["inside"]}
    running, inside = by_id[usage_servers["running"]], by_id[usage_servers["inside"]]
    assert running["hours"] == pytest.approx(10.0) and inside["hours"] == pytest.approx(3.0)
    assert (running["state"], running["ended_at"]) == ("active", None)
    assert inside["state"] == "terminated" and inside["ended_at"] == _fmt(START + dt.timedelta(hours=5))
    assert inside["uptime"] == 3 * 3600
    assert running["started_at"] == _fmt(START - dt.timedelta(hours=5))
    assert running["uptime"] >= 16 * 3600
    assert (running["flavor"], running["vcpus"], running["memory_mb"], running["local_gb"]) == ("m1.usage", 2, 512, 15)
    assert usage["total_hours"] == pytest.approx(13.0)
    assert usage["total_vcpus_usage"] == pytest.approx(26.0)
    assert usage["total_memory_mb_usage"] == pytest.approx(13 * 512)
    assert usage["total_local_gb_usage"] == pytest.approx(13 * 15)


async def test_usage_of_every_project_admin_only(client, usage_servers):
    r = await client.get("/v2.1/os-simple-tenant-usage", params=_period(detailed="1"))
    usages = assert_schema("tenant_usages.list_tenant_usage", r)["tenant_usages"]
    assert sorted(u["tenant_id"] for u in usages) == sorted([PROJECT, OTHER])
    other = next(u for u in usages if u["tenant_id"] == OTHER)
    assert other["total_hours"] == pytest.approx(6.0)
    assert [s["name"] for s in other["server_usages"]] == ["other"]
    r = await client.get("/v2.1/os-simple-tenant-usage", params=_period())
    assert all("server_usages" not in u for u in r.json()["tenant_usages"])
    r = await client.get("/v2.1/os-simple-tenant-usage", params=_period(), headers=member())
    assert r.status_code == 403
    assert r.json()["forbidden"]["message"] == ("Policy doesn't allow os_compute_api:os-simple-tenant-usage:list "
                                                "to be performed.")


async def test_usage_of_another_project_is_forbidden_and_an_empty_one_is_empty(client, usage_servers):
    r = await client.get(f"/v2.1/os-simple-tenant-usage/{OTHER}", params=_period(), headers=member())
    assert r.status_code == 403
    r = await client.get("/v2.1/os-simple-tenant-usage/nobody", params=_period())
    assert r.status_code == 200 and r.json() == {"tenant_usage": {}}


async def test_usage_end_after_now_counts_until_now(client, usage_servers):
    start = utcnow() - dt.timedelta(hours=1)
    r = await client.get(f"/v2.1/os-simple-tenant-usage/{PROJECT}",
                         params={"start": _fmt(start), "end": _fmt(utcnow() + dt.timedelta(days=1))})
    usage = r.json()["tenant_usage"]
    stop = dt.datetime.fromisoformat(usage["stop"])
    assert stop <= utcnow()
    later = next(u for u in usage["server_usages"] if u["instance_id"] == usage_servers["later"])
    expected = (stop - (END + dt.timedelta(minutes=10))).total_seconds() / 3600
    assert later["hours"] == pytest.approx(expected)


@pytest.mark.parametrize("params, message", [
    ({"start": "2024-01-02T00:00:00", "end": "2024-01-01T00:00:00"},
     "Invalid start time. The start time cannot occur after the end time."),
    ({"start": "2024-01-01T00:00:00", "end": "2024-01-01T00:00:00"},
     "Invalid start time. The start time cannot occur after the end time."),
    ({"start": "yesterday"}, "Invalid datetime string: Datetime is in invalid format"),
    ({"start": "2024-01-01 00:00:00"}, "Invalid datetime string: Datetime is in invalid format"),
    ({"end": "2024-01-01T00:00:00Z"}, "Invalid datetime string: Datetime is in invalid format"),
])
@pytest.mark.parametrize("path", ["/v2.1/os-simple-tenant-usage", f"/v2.1/os-simple-tenant-usage/{PROJECT}"])
async def test_usage_bad_dates(client, path, params, message):
    r = await client.get(path, params=params)
    assert r.status_code == 400 and r.json() == {"badRequest": {"code": 400, "message": message}}


async def test_usage_accepts_nova_formats(client, usage_servers):
    for start in ("2024-01-01T00:00:00", "2024-01-01T00:00:00.5", "2024-01-01 00:00:00.000001"):
        r = await client.get(f"/v2.1/os-simple-tenant-usage/{PROJECT}", params={"start": start})
        assert r.status_code == 200, r.text


async def test_usage_paging_from_240(client, rt, usage_servers):
    params = _period(detailed="1", limit="1")
    r = await client.get("/v2.1/os-simple-tenant-usage", params=params)
    assert "tenant_usages_links" not in r.json()  # before 2.40 the limit is not read
    seen = []
    marker = None
    while True:
        query = {**params, **({"marker": marker} if marker else {})}
        r = await client.get("/v2.1/os-simple-tenant-usage", params=query, headers=version("2.40"))
        assert r.status_code == 200, r.text
        body = r.json()
        servers = [s["instance_id"] for u in body["tenant_usages"] for s in u["server_usages"]]
        seen += servers
        if "tenant_usages_links" not in body:
            assert servers == []
            break
        link = body["tenant_usages_links"][0]
        assert link["rel"] == "next" and "/v2.1/os-simple-tenant-usage?" in link["href"]
        marker = parse_qs(urlsplit(link["href"]).query)["marker"][0]
        assert marker == servers[-1]
    assert sorted(seen) == sorted([usage_servers[k] for k in ("running", "inside", "other")])
    r = await client.get(f"/v2.1/os-simple-tenant-usage/{PROJECT}", params=_period(limit="1"),
                         headers=version("2.40"))
    assert f"/v2.1/os-simple-tenant-usage/{PROJECT}?" in r.json()["tenant_usage_links"][0]["href"]
    r = await client.get("/v2.1/os-simple-tenant-usage", params=_period(marker="nope"), headers=version("2.40"))
    assert r.status_code == 400 and r.json()["badRequest"]["message"] == "Marker nope could not be found."
    r = await client.get("/v2.1/os-simple-tenant-usage", params=_period(limit="-1"), headers=version("2.40"))
    assert r.status_code == 400
    r = await client.get("/v2.1/os-simple-tenant-usage", params=_period(junk="1"), headers=version("2.74"))
    assert r.status_code == 200
    r = await client.get("/v2.1/os-simple-tenant-usage", params=_period(junk="1"), headers=version("2.75"))
    assert r.status_code == 400


async def test_usage_empty_tenant_id_is_not_found(client):
    r = await client.get("/v2.1/os-simple-tenant-usage/", follow_redirects=False)
    assert r.status_code == 404


# Audit log -----------------------------------------------------------------------------------------

async def _computes(rt):
    for host in ("host-1", "host-2"):
        await Service(rt, "nova-compute", "compute", host).register()
    await Service(rt, "nova-conductor", "conductor", "controller").register()


async def test_audit_log_without_an_audit_task(client, rt):
    await _computes(rt)
    r = await client.get("/v2.1/os-instance_usage_audit_log")
    log = assert_schema("instance_usage_audit_logs.list_instance_usage_audit_log", r)["instance_usage_audit_logs"]
    now = utcnow()
    this_month = dt.datetime(now.year, now.month, 1)
    last_month = dt.datetime(now.year - 1, 12, 1) if now.month == 1 else dt.datetime(now.year, now.month - 1, 1)
    assert log == {"hosts_not_run": ["host-1", "host-2"], "log": {}, "num_hosts": 2, "num_hosts_done": 0,
                   "num_hosts_not_run": 2, "num_hosts_running": 0, "overall_status": "0 of 2 hosts done. 0 errors.",
                   "period_beginning": str(last_month), "period_ending": str(this_month), "total_errors": 0,
                   "total_instances": 0}


@pytest.mark.parametrize("before, period", [
    ("2024-03-15 10:00:00", ("2024-02-01 00:00:00", "2024-03-01 00:00:00")),
    ("2024-03-01 00:00:00", ("2024-01-01 00:00:00", "2024-02-01 00:00:00")),
    ("2024-01-10 00:00:00.5", ("2023-12-01 00:00:00", "2024-01-01 00:00:00")),
    ("2024-02-01 00:00:00.000001", ("2024-01-01 00:00:00", "2024-02-01 00:00:00")),
])
async def test_audit_log_before_a_time(client, rt, before, period):
    r = await client.get(f"/v2.1/os-instance_usage_audit_log/{before}")
    log = assert_schema("instance_usage_audit_logs.get_instance_usage_audit_log", r)["instance_usage_audit_log"]
    assert (log["period_beginning"], log["period_ending"]) == period
    assert log["overall_status"] == "ALL hosts done. 0 errors."  # no compute host at all


@pytest.mark.parametrize("before", ["invalid_time", "2024-01-01T00:00:00", "2024-13-01 00:00:00", "2024-01-01"])
async def test_audit_log_bad_timestamp(client, before):
    r = await client.get(f"/v2.1/os-instance_usage_audit_log/{before}")
    assert r.status_code == 400
    assert r.json() == {"badRequest": {"code": 400, "message": f"Invalid timestamp for date {before}"}}


async def test_audit_log_admin_only(client):
    for path in ("/v2.1/os-instance_usage_audit_log", "/v2.1/os-instance_usage_audit_log/2024-01-01 00:00:00"):
        r = await client.get(path, headers=member())
        assert r.status_code == 403


# Migrations -----------------------------------------------------------------------------------------

async def _migration(rt, instance_uuid: str, *, status: str = "finished", kind: str = "resize",
                     created: dt.datetime | None = None, project: str = PROJECT, source: str = "host-1",
                     dest: str = "host-2") -> dict:
    row = {"uuid": str(uuidlib.uuid4()), "instance_uuid": instance_uuid, "migration_type": kind, "status": status,
           "source_compute": source, "source_node": f"{source}.node", "dest_compute": dest,
           "dest_node": f"{dest}.node", "dest_host": "192.0.2.2", "old_instance_type_id": 1,
           "new_instance_type_id": 2 if kind == "resize" else 1, "hidden": False, "user_id": "u",
           "project_id": project, "deleted": 0, "created_at": created or utcnow(), "updated_at": created}
    async with rt.db.transaction() as s:
        row["id"] = (await s.execute(insert(Migration.__table__).values(**row))).inserted_primary_key[0]
    return row


@pytest.fixture
async def app(rt):
    """The app with a Compute API (the server migrations routes look the server up)."""
    from nefos.control.compute.rest.app import create_app
    from nefos.control.compute.api import ComputeAPI
    return create_app(rt, compute_api=ComputeAPI(rt, None, None))


@pytest.fixture
async def migrations(rt):
    server = await _server(rt, PROJECT, START)
    base = utcnow() - dt.timedelta(hours=3)
    return server, [
        await _migration(rt, server, status="confirmed", created=base),
        await _migration(rt, server, status="reverted", kind="migration", created=base + dt.timedelta(hours=1),
                         source="host-2", dest="host-1"),
        await _migration(rt, str(uuidlib.uuid4()), status="error", created=base + dt.timedelta(hours=2),
                         project=OTHER, source="host-3", dest="host-4"),
    ]


async def test_migrations_list_by_microversion(client, migrations):
    server, rows = migrations
    r = await client.get("/v2.1/os-migrations")
    listed = assert_schema("migrations.list_migrations", r)["migrations"]
    assert [m["id"] for m in listed] == [m["id"] for m in rows]  # Nova's DB order before 2.59
    first = listed[0]
    assert first == {"created_at": _iso(rows[0]["created_at"]), "updated_at": _iso(rows[0]["updated_at"]),
                     "id": rows[0]["id"], "instance_uuid": server, "old_instance_type_id": 1,
                     "new_instance_type_id": 2, "status": "confirmed", "source_compute": "host-1",
                     "source_node": "host-1.node", "dest_compute": "host-2", "dest_node": "host-2.node",
                     "dest_host": "192.0.2.2"}
    r = await client.get("/v2.1/os-migrations", headers=version("2.23"))
    assert [m["migration_type"] for m in assert_schema("migrations.list_migrations", r)["migrations"]] == [
        "resize", "migration", "resize"]
    assert all("links" not in m for m in r.json()["migrations"])  # links only for a live migration in progress
    r = await client.get("/v2.1/os-migrations", headers=version("2.59"))
    listed = assert_schema("migrations.list_migrations", r)["migrations"]
    assert [m["uuid"] for m in listed] == [m["uuid"] for m in reversed(rows)]  # newest first
    r = await client.get("/v2.1/os-migrations", headers=version("2.80"))
    listed = assert_schema("migrations.list_migrations", r)["migrations"]
    assert [(m["user_id"], m["project_id"]) for m in listed] == [("u", OTHER), ("u", PROJECT), ("u", PROJECT)]


def _iso(t):
    return None if t is None else t.strftime("%Y-%m-%dT%H:%M:%S.%f")


@pytest.mark.parametrize("params, expected", [
    ({"host": "host-1"}, [0, 1]),
    ({"source_compute": "host-2"}, [1]),
    ({"host": "host-2", "source_compute": "host-1"}, [0, 1]),  # host wins, as in Nova
    ({"status": "error"}, [2]),
    ({"migration_type": "migration"}, [1]),
    ({"hidden": "0"}, [0, 1, 2]),
    ({"hidden": "1"}, []),
])
async def test_migrations_filters(client, migrations, params, expected):
    _server_uuid, rows = migrations
    r = await client.get("/v2.1/os-migrations", params=params)
    assert [m["id"] for m in r.json()["migrations"]] == [rows[i]["id"] for i in expected]


async def test_migrations_filter_on_instance_and_projects(client, migrations):
    server, rows = migrations
    r = await client.get("/v2.1/os-migrations", params={"instance_uuid": server})
    assert [m["id"] for m in r.json()["migrations"]] == [rows[0]["id"], rows[1]["id"]]
    r = await client.get("/v2.1/os-migrations", params={"project_id": OTHER}, headers=version("2.80"))
    assert [m["id"] for m in r.json()["migrations"]] == [rows[2]["id"]]
    r = await client.get("/v2.1/os-migrations", params={"user_id": "nobody"}, headers=version("2.80"))
    assert r.json()["migrations"] == []
    r = await client.get("/v2.1/os-migrations", params={"project_id": OTHER}, headers=version("2.79"))
    assert r.status_code == 400


async def test_migrations_paging_and_changes(client, rt, migrations):
    _server_uuid, rows = migrations
    newest_first = [m["uuid"] for m in reversed(rows)]
    r = await client.get("/v2.1/os-migrations", params={"limit": "2"}, headers=version("2.59"))
    body = r.json()
    assert [m["uuid"] for m in body["migrations"]] == newest_first[:2]
    next_href = body["migrations_links"][0]["href"]
    assert parse_qs(urlsplit(next_href).query) == {"limit": ["2"], "marker": [newest_first[1]]}
    r = await client.get("/v2.1/os-migrations", params={"limit": "2", "marker": newest_first[1]},
                         headers=version("2.59"))
    assert [m["uuid"] for m in r.json()["migrations"]] == newest_first[2:]
    assert "migrations_links" not in r.json()
    r = await client.get("/v2.1/os-migrations", params={"marker": "nope"}, headers=version("2.59"))
    assert r.status_code == 400 and r.json()["badRequest"]["message"] == "Marker nope could not be found."
    since = _iso(rows[1]["created_at"])
    r = await client.get("/v2.1/os-migrations", params={"changes-since": since}, headers=version("2.59"))
    assert [m["uuid"] for m in r.json()["migrations"]] == newest_first[:2]
    r = await client.get("/v2.1/os-migrations", params={"changes-since": since}, headers=version("2.58"))
    assert len(r.json()["migrations"]) == 3  # ignored before 2.59, as Nova
    r = await client.get("/v2.1/os-migrations", params={"changes-before": since}, headers=version("2.66"))
    assert [m["uuid"] for m in r.json()["migrations"]] == newest_first[1:]
    r = await client.get("/v2.1/os-migrations", params={"changes-before": since}, headers=version("2.59"))
    assert r.status_code == 400  # not a 2.59 parameter
    r = await client.get("/v2.1/os-migrations", params={"changes-since": since, "changes-before": _iso(rows[0]["created_at"])},
                         headers=version("2.66"))
    assert r.status_code == 400
    assert r.json()["badRequest"]["message"] == ("The value of changes-since must be less than or equal to "
                                                 "changes-before.")


@pytest.mark.parametrize("params, v", [
    ({"limit": "-1"}, "2.59"), ({"limit": "x"}, "2.59"), ({"changes-since": "yesterday"}, "2.59"),
    ({"junk": "1"}, "2.59"), ({"marker": ["a", "b"]}, "2.59"),
])
async def test_migrations_bad_query(client, params, v):
    r = await client.get("/v2.1/os-migrations", params=params, headers=version(v))
    assert r.status_code == 400 and "badRequest" in r.json()


async def test_migrations_policy(client, migrations):
    r = await client.get("/v2.1/os-migrations", headers=member())
    assert r.status_code == 403
    manager = {**member(), "X-Roles": "manager,member,reader"}
    r = await client.get("/v2.1/os-migrations", headers=manager)
    assert r.status_code == 403  # every project's: admin only
    assert "os-migrations:index:all_projects" in r.json()["forbidden"]["message"]
    r = await client.get("/v2.1/os-migrations", params={"project_id": PROJECT}, headers=version("2.80", manager))
    listed = r.json()["migrations"]
    assert len(listed) == 2 and all(m["project_id"] == PROJECT for m in listed)
    assert all(m[k] is None for m in listed for k in ("source_compute", "dest_compute", "dest_host"))


async def test_server_migrations_list_only_live_ones_in_progress(client, migrations):
    server, rows = migrations
    r = await client.get(f"/v2.1/servers/{server}/migrations", headers=version("2.23"))
    assert r.status_code == 200 and r.json() == {"migrations": []}
    r = await client.get(f"/v2.1/servers/{server}/migrations")
    assert r.status_code == 404  # before 2.23
    r = await client.get(f"/v2.1/servers/{server}/migrations/{rows[0]['id']}", headers=version("2.23"))
    assert r.status_code == 404
    assert r.json()["itemNotFound"]["message"] == f"Migration {rows[0]['id']} for server {server} is not live-migration."
    r = await client.get(f"/v2.1/servers/{server}/migrations/{rows[2]['id']}", headers=version("2.23"))
    assert r.json()["itemNotFound"]["message"] == (f"In-progress live migration {rows[2]['id']} is not found for "
                                                   f"server {server}.")
    r = await client.get(f"/v2.1/servers/{server}/migrations/abc", headers=version("2.23"))
    assert r.status_code == 404
    r = await client.get(f"/v2.1/servers/{uuidlib.uuid4()}/migrations", headers=version("2.23"))
    assert r.status_code == 404


async def test_server_migrations_show_a_live_migration_in_progress(client, rt, migrations):
    server, _rows = migrations
    live = await _migration(rt, server, status="running", kind="live-migration")
    r = await client.get(f"/v2.1/servers/{server}/migrations", headers=version("2.80"))
    (shown,) = r.json()["migrations"]
    assert (shown["id"], shown["server_uuid"], shown["status"], shown["uuid"]) == (
        live["id"], server, "running", live["uuid"])
    r = await client.get(f"/v2.1/servers/{server}/migrations/{live['id']}", headers=version("2.23"))
    assert r.status_code == 200 and r.json()["migration"]["source_compute"] == "host-1"
    r = await client.get("/v2.1/os-migrations", params={"status": "running"}, headers=version("2.23"))
    (listed,) = r.json()["migrations"]
    assert listed["links"][0]["href"].endswith(f"/v2.1/servers/{server}/migrations/{live['id']}")


async def test_server_migrations_policy(client, migrations):
    server, rows = migrations
    r = await client.get(f"/v2.1/servers/{server}/migrations", headers=version("2.23", member()))
    assert r.status_code == 403
    r = await client.get(f"/v2.1/servers/{server}/migrations", headers=version("2.23", member(OTHER)))
    assert r.status_code == 404
    r = await client.get(f"/v2.1/servers/{server}/migrations/{rows[0]['id']}", headers=version("2.23", member()))
    assert r.status_code == 403
