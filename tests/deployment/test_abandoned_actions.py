"""An action whose request died before anything acted on it (its API process was killed between
recording it and handing it on) is not left in progress for ever: a conductor finishes it as
failed once it is older than twice ``rpc_response_timeout`` and nothing is in progress on its
server. Actions with steps under way, younger ones, and creates are left alone."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select, update

from nefos.context import RequestContext
from nefos.db.models import InstanceAction, utcnow
from nefos.objects import actions
from tests.clouds import ADMIN, start_cloud, stop_cloud


async def _record(cloud, server_id: str, name: str, age: float) -> str:
    ctx = RequestContext(project_id="p", user_id="u")
    await actions.record_action(cloud.rt.db, ctx, server_id, name)
    async with cloud.rt.db.transaction() as s:
        await s.execute(update(InstanceAction).where(InstanceAction.request_id == ctx.request_id)
                        .values(start_time=utcnow() - dt.timedelta(seconds=age)))
    return ctx.request_id


async def _state(cloud, request_id: str) -> tuple:
    async with cloud.rt.db.reader() as s:
        row = (await s.execute(select(InstanceAction).where(InstanceAction.request_id == request_id))).scalar_one()
    return row.finish_time is not None, row.message


async def test_an_action_whose_request_died_is_finished_as_failed(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1)
    try:
        net = await cloud.make_network()
        server_id = (await cloud.boot(networks=[{"uuid": net["id"]}]))["server"]["id"]
        await cloud.wait_status(server_id, "ACTIVE")
        old = 2 * cloud.rt.cfg.rpc_response_timeout + 5  # the shipped timeout
        died = await _record(cloud, server_id, "delete", old)
        young = await _record(cloud, server_id, "reboot", 5)
        create = await _record(cloud, server_id, "create", old)
        stepped = await _record(cloud, server_id, "stop", old)
        event = await actions.event_start(cloud.rt.db, RequestContext(request_id=stepped), server_id,
                                          "compute_stop_instance", "host-1")
        assert event is not None
        conductor = next(c.service for c in cloud.cloud.components if c.name == "conductor")
        assert [t.interval for t in conductor.periodic if t.name == "finish_abandoned_actions"] == [60]
        await conductor.endpoint.finish_abandoned_actions()
        assert await _state(cloud, died) == (True, "Error")
        assert await _state(cloud, young) == (False, None)
        assert await _state(cloud, create) == (False, None)
        assert await _state(cloud, stepped) == (False, None)
        r = await cloud.compute.get(f"/v2.1/servers/{server_id}", headers=ADMIN)
        assert r.json()["server"]["status"] == "ACTIVE"
    finally:
        await stop_cloud(cloud)
