"""``InstanceProgress`` (compute/host/progress.py): a host's writes on one instance ride on the
operation's next conductor call; a conductor that refuses ``instance_progress`` (older than 1.3)
gets the same writes one call each, in the same order, and nothing is lost."""

from __future__ import annotations

from nefos.bus.versioning import UnsupportedVersion
from nefos.host.compute.progress import InstanceProgress


class FakeConductor:
    """Records the calls; ``older``: refuses instance_progress as a 1.2 conductor does."""

    def __init__(self, older: bool):
        self.older = older
        self.refused_versions: set[str] = set()
        self.calls: list[tuple] = []

    async def serves(self, version) -> bool:
        return version not in self.refused_versions

    def refused(self, version, exc) -> None:
        self.refused_versions.add(version)

    async def instance_progress(self, ctx, uuid, host, **parts):
        if self.older:
            raise UnsupportedVersion(version="1.3", method="instance_progress")
        self.calls.append(("instance_progress", {k: v for k, v in parts.items() if v}))
        return {"instance": {"uuid": uuid}, "event_id": 7 if parts["start_event"] else None,
                "stored_events": [] if parts["inbox_operation"] else None}

    def __getattr__(self, method):
        async def call(*args, **kwargs):
            self.calls.append((method, args[1:]))
            return {"action_event_start": 8, "instance_save": {"uuid": "u"}, "event_inbox_stored": []}.get(method)
        return call


async def _operation(conductor) -> list[dict]:
    progress = InstanceProgress(conductor, None, "u", "host-1")
    delivered = []

    async def deliver(rows):
        delivered.append(rows)

    async with progress.step("short", show_in_progress=False):
        pass
    await progress.read_inbox("op-1", deliver)
    answer = await progress.send(begin_operation="op-1", saves=({"updates": {"task_state": "spawning"},
                                                                  "expected_task_state": [None]},),
                                 start_event="long")
    await progress.finish(answer["event_id"])
    await progress.flush()
    assert delivered == [[]]
    return conductor.calls


async def test_the_writes_ride_on_one_call():
    calls = await _operation(FakeConductor(older=False))
    assert [method for method, _ in calls] == ["instance_progress", "instance_progress"]
    first = calls[0][1]
    assert [step["event"] for step in first["recorded"]] == ["short"]
    assert (first["begin_operation"], first["start_event"], first["inbox_operation"]) == ("op-1", "long", "op-1")
    assert [done["event_id"] for done in calls[1][1]["finished"]] == [7]


async def test_a_conductor_refusing_1_3_gets_each_write_in_its_own_call_in_order():
    conductor = FakeConductor(older=True)
    calls = await _operation(conductor)
    assert [method for method, _ in calls] == ["action_record_event", "event_inbox_stored", "event_operation_begin",
                                               "instance_save", "action_event_start", "action_event_finish"]
    assert conductor.refused_versions == {"1.3"}
