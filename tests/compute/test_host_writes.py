"""What a compute host may write of an instance through the conductor: its states, where it runs,
its network info, system metadata, launch time and a resize's flavor (``HOST_WRITABLE``). A save
naming anything else (the server's owner, its name, its image...) is refused whole, on every
conductor method that saves for a host, and nothing is written. What comes back is the typed
``Instance`` payload."""

from __future__ import annotations

import pytest

from nefos import exceptions
from nefos.bus.payloads.instance import HOST_WRITABLE, Instance
from nefos.clients.conductor import ConductorAPI
from nefos.model import states
from tests.compute.conftest import boot_active, db_instance


@pytest.fixture
async def booted(cloud):
    (server_id,) = await boot_active(cloud)
    return cloud, ConductorAPI(cloud.rt.bus), server_id


@pytest.mark.parametrize("field, value", [("project_id", "someone-else"), ("user_id", "someone-else"),
                                          ("display_name", "renamed"), ("image_ref", "another-image"),
                                          ("locked", True)])
async def test_a_host_writing_a_field_of_the_control_plane_is_refused_and_nothing_is_written(
        booted, field, value):
    cloud, conductor, server_id = booted
    before = await db_instance(cloud, server_id)
    with pytest.raises(exceptions.InstanceFieldsNotHostWritable, match=f"instance field\\(s\\) {field};"):
        await conductor.instance_save(None, server_id, {"progress": 42, field: value})
    with pytest.raises(exceptions.InstanceFieldsNotHostWritable):
        await conductor.save_with_fault(None, server_id, {"vm_state": states.ERROR, field: value},
                                        RuntimeError("boom"), host="host-1")
    with pytest.raises(exceptions.InstanceFieldsNotHostWritable):
        await conductor.instance_progress(None, server_id, "host-1", finished=[], recorded=[], processed=[],
                                          begin_operation=None, saves=[{"updates": {field: value}}],
                                          start_event=None, finished_after=[], inbox_operation=None)
    with pytest.raises(exceptions.InstanceFieldsNotHostWritable):
        await conductor.migration_save(None, server_id, {field: value}, "no-such-migration", "migrating")
    after = await db_instance(cloud, server_id)
    assert after[field] == before[field] and after["progress"] == before["progress"]
    assert after["vm_state"] == states.ACTIVE


async def test_a_host_s_save_of_its_own_fields_is_written_and_answered_as_the_instance_payload(booted):
    cloud, conductor, server_id = booted
    saved = await conductor.instance_save(None, server_id, {"progress": 42, "power_state": states.RUNNING},
                                          expected_task_state=[None])
    assert isinstance(saved, Instance) and saved.progress == 42 and saved["uuid"] == server_id
    assert (await db_instance(cloud, server_id))["progress"] == 42
    assert isinstance(await conductor.instance_get(None, server_id), Instance)
    assert all(isinstance(i, Instance) for i in await conductor.host_instances(None, "host-1"))


def test_what_a_host_may_write_is_a_field_of_the_instance_payload():
    assert HOST_WRITABLE <= set(Instance.FIELDS)
    assert not {"project_id", "user_id", "uuid", "display_name", "image_ref", "key_data", "user_data",
                "locked", "deleted"} & HOST_WRITABLE


def test_a_host_s_updates_are_read_as_instance_fields_of_their_types():
    from nefos.bus.payloads.base import PayloadFieldError
    from nefos.bus.payloads.instance import host_writable
    from nefos.bus.payloads.network_info import VIF
    updates = host_writable({"network_info": [{"id": "p1", "address": "fa:16:3e:00:00:01"}], "progress": 10})
    assert isinstance(updates["network_info"][0], VIF)
    with pytest.raises(PayloadFieldError, match="Instance.progress takes int, not str"):
        host_writable({"progress": "ten"})
