"""External events and event operations are kept an hour: a conductor purges the older ones once a
minute, for the whole cloud; a compute host purges nothing as it starts an operation (a thousand
hosts would purge the same tables a thousand times a minute)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import insert, select

from nefos.db.models import InstanceEventOperation, InstanceExternalEvent, utcnow
from tests.clouds import start_cloud, stop_cloud


async def _rows(cloud) -> tuple[list, list]:
    async with cloud.rt.db.reader() as s:
        ops = (await s.execute(select(InstanceEventOperation.instance_uuid))).scalars().all()
        events = (await s.execute(select(InstanceExternalEvent.instance_uuid))).scalars().all()
    return sorted(ops), sorted(events)


async def test_a_conductor_purges_expired_external_events_every_minute(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1)
    try:
        long_ago, now = utcnow() - dt.timedelta(hours=2), utcnow()
        async with cloud.rt.db.transaction() as s:
            for uuid, when in (("old", long_ago), ("new", now)):
                await s.execute(insert(InstanceEventOperation).values(
                    instance_uuid=uuid, operation="op", host="host-1", started_at=when))
                await s.execute(insert(InstanceExternalEvent).values(
                    instance_uuid=uuid, name="network-vif-plugged", tag="p", operation="op", received_at=when))
        conductor = next(c.service for c in cloud.cloud.components if c.name == "conductor")
        assert [t.interval for t in conductor.periodic if t.name == "purge_expired_external_events"] == [60]
        await conductor.endpoint.purge_expired_external_events()
        assert await _rows(cloud) == (["new"], ["new"])
    finally:
        await stop_cloud(cloud)
