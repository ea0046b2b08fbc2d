"""What compute hosts may ask of the database, through the conductor (Nova's conductor as the
database proxy of ``nova-compute``: its ``object_action`` indirection, here as declared, named
operations rather than "call any object method").

A compute host holds no database credentials: every read and write it needs is one of these
methods, called over the bus (``nefos.clients.conductor.ConductorAPI``). Each keeps the
semantics of the ``nefos.objects`` function it wraps — an instance save is still a
compare-and-swap on ``expected_task_state`` / ``expected_vm_state`` and raises
``UnexpectedTaskStateError``, ``UnexpectedDeletingTaskStateError``, ``InstanceNotFound`` or
``InstanceInvalidState``, which the bus raises again, by class, on the host. An instance goes to
the host as the ``Instance`` payload, and a host's save names only the fields a host may write
(``host_writable``; else ``InstanceFieldsNotHostWritable``, nothing written). Times cross the bus
as ISO strings. Where a host did several writes in a row, one method does them (e.g.
``instance_terminated``).
"""

from __future__ import annotations

import contextlib
import datetime as dt

from sqlalchemy import bindparam, select

from nefos import exceptions
from nefos.bus.payloads.instance import Instance, host_writable
from nefos.db.models import BlockDeviceMapping
from nefos.db.session import given_or
from nefos.objects import (actions, allocations, build_requests, compute_nodes, console_auth_tokens, event_inbox,
                           host_instances, instance as instance_obj, migrations as migrations_obj, service_rows)
from nefos.model import states
from nefos.model import state_machine

_BDM = BlockDeviceMapping.__table__
_BDMS_OF = select(_BDM.c.guest_format, _BDM.c.device_name, _BDM.c.volume_size, _BDM.c.source_type,
                  _BDM.c.destination_type, _BDM.c.boot_index).where(_BDM.c.instance_uuid == bindparam("b_uuid"))
_EXPECTED = ("expected_task_state", "expected_vm_state")


def _time(value: str | None) -> dt.datetime | None:
    return None if value is None else dt.datetime.fromisoformat(value)


def _instances(rows: list[dict]) -> list[Instance]:
    return [Instance(row) for row in rows]


def save_conditions(given: dict) -> dict:
    """A host's conditions on an instance save (its expected task and vm states), refused when it
    names another."""
    unknown = set(given) - set(_EXPECTED)
    if unknown:
        raise exceptions.Invalid(f"unknown save condition(s): {sorted(unknown)}")
    return given


async def _finish_event(db, done: dict, session) -> None:
    await actions.event_finish(db, done["event_id"], result=done.get("result", "Success"),
                               traceback=done.get("traceback"), details=done.get("details"),
                               finish_time=_time(done.get("finish_time")), session=session)


class HostSurface:
    """The conductor's methods for compute hosts (mixed into its manager; ``self.rt`` is the
    conductor's runtime)."""

    async def ready(self, ctx) -> bool:
        """A conductor answers (a compute host waits for one before it starts, as Nova's
        ``wait_until_ready``)."""
        return True

    # Instances -----------------------------------------------------------------------------
    async def instance_get(self, ctx, instance_uuid: str, read_deleted: bool = False) -> dict:
        """The instance (InstanceNotFound when deleted, unless ``read_deleted``)."""
        return Instance(await instance_obj.get(self.rt.db, instance_uuid, read_deleted=read_deleted))

    async def instance_task_state(self, ctx, instance_uuid: str) -> str | None:
        """Only the task state (InstanceNotFound once deleted)."""
        return await instance_obj.task_state(self.rt.db, instance_uuid)

    async def instance_save(self, ctx, instance_uuid: str, updates: dict, **expected) -> dict:
        """Write ``updates``; with ``expected_task_state`` / ``expected_vm_state`` only while the row
        still matches (compare-and-swap). Returns the new row."""
        return Instance(await instance_obj.save(self.rt.db, instance_uuid, host_writable(updates),
                                                **save_conditions(expected)))

    async def instance_save_with_fault(self, ctx, instance_uuid: str, updates: dict, fault: dict,
                                       host_name: str | None, details: str | None = None, **expected) -> dict:
        """Save (usually to ERROR) and record ``fault`` ({code, message}) in one transaction."""
        return Instance(await instance_obj.save_with_fault(self.rt.db, instance_uuid, host_writable(updates), fault,
                                                           host=host_name, details=details,
                                                           **save_conditions(expected)))

    async def instance_terminated(self, ctx, instance_uuid: str) -> None:
        """The host destroyed the guest: release its claim, soft-delete the instance (its quota
        back) and revoke its console tokens."""
        await allocations.release(self.rt.db, instance_uuid)
        await instance_obj.destroy(self.rt.db, instance_uuid)
        await console_auth_tokens.delete_for_instance(self.rt.db, instance_uuid)

    async def build_started(self, ctx, instance_uuid: str, event: str, host_name: str,
                            block_devices: bool = False) -> dict:
        """A host starts a build: the build's action event started, the instance BUILDING with no
        task (compare-and-swap: still scheduling, or retried); returns {event_id, instance,
        allocation (its claim)}, and with ``block_devices`` its block_device_mappings (what
        ``block_device_mappings`` answers). When the instance was deleted or its build given up
        meanwhile, its claim is released, the event finished as failed, and the save's error raised."""
        db = self.rt.db
        event_id = None
        try:
            async with self._single_writes(db) as s:
                event_id = await actions.event_start(db, ctx, instance_uuid, event, host_name, session=s)
                instance = await instance_obj.save(
                    db, instance_uuid, **state_machine.step_save("build.claimed", vm_state=states.BUILDING),
                    session=s, expected_vm_state=[states.BUILDING])
                started = {"event_id": event_id, "instance": Instance(instance),
                           "allocation": await allocations.get(db, instance_uuid, session=s)}
                if block_devices:
                    started["block_device_mappings"] = await self._block_device_mappings(instance_uuid, s)
        except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError, exceptions.InstanceInvalidState):
            await allocations.release(db, instance_uuid)
            await actions.event_finish(db, event_id, result="Error", details=(
                f"instance {instance_uuid} was deleted, or its build given up, before its build started"))
            raise
        return started

    async def image_meta(self, ctx, image_id: str) -> dict:
        """What a host's spawn needs of an image (its id, declared disk format and properties), the
        image and its kernel and ramdisk looked up as ``ctx`` (Nova's rebuild, rescue, unshelve and
        evacuation look them up again: the image may have changed since the API checked)."""
        from nefos.control.image.client import ImageAPI
        api = ImageAPI(self.rt)
        image = await api.get(ctx.elevated(), image_id)
        await api.check_kernel_and_ramdisk(ctx, image)
        return {"id": image["id"], "disk_format": image.get("disk_format"),
                "properties": image.get("properties") or {}}

    async def block_device_mappings(self, ctx, instance_uuid: str) -> list[dict]:
        """The instance's block device mappings (what the host needs to prepare them)."""
        return await self._block_device_mappings(instance_uuid)

    async def _block_device_mappings(self, instance_uuid: str, session=None) -> list[dict]:
        async with given_or(session, self.rt.db.reader) as s:
            rows = (await s.execute(_BDMS_OF, {"b_uuid": instance_uuid})).mappings().all()
        return [dict(r) for r in rows]

    async def group_member_placements(self, ctx, group_uuid: str) -> list[dict]:
        """Where each live member of the server group is or is about to be (the late policy check)."""
        from nefos.objects.server_groups import member_placements
        return await member_placements(self.rt.db, group_uuid)

    # A host's own instances ----------------------------------------------------------------
    async def host_instances(self, ctx, host_name: str) -> list[dict]:
        """Every live instance of ``host``, whole."""
        return _instances(await host_instances.full(self.rt.db, host_name))

    async def host_instance_states(self, ctx, host_name: str) -> list[dict]:
        """uuid, vm_state, task_state, power_state of every live instance of ``host``."""
        return await host_instances.states_of(self.rt.db, host_name)

    async def host_unchanged_operations(self, ctx, host_name: str, updated_before: str) -> list[dict]:
        """The host's instances with a task or build under way, unchanged since ``updated_before``."""
        return _instances(await host_instances.unchanged_operations(self.rt.db, host_name, _time(updated_before)))

    async def unchanged_resized_instances(self, ctx, updated_before: str) -> list[dict]:
        """RESIZED instances with no task, unchanged since ``updated_before``."""
        return _instances(await host_instances.unchanged_resized(self.rt.db, _time(updated_before)))

    async def host_builds_started_before(self, ctx, host_name: str, created_before: str) -> list[str]:
        """The uuids of the host's BUILDING instances created before ``created_before``."""
        return await host_instances.builds_started_before(self.rt.db, host_name, _time(created_before))

    async def host_tasks_unchanged_since(self, ctx, host_name: str, updated_before: str) -> list[list]:
        """[uuid, task_state, vm_state] of the host's (non-build) tasks older than ``updated_before``."""
        return await host_instances.tasks_unchanged_since(self.rt.db, host_name, _time(updated_before))

    async def host_deadline_candidates(self, ctx, host_name: str, lost_before: str | None,
                                       builds_before: str | None, tasks_before: str | None) -> dict:
        """What one deadline pass of the host acts on, in one read (``lost``, ``resized``: whole
        instances; ``builds``: uuids; ``tasks``: [uuid, task_state, vm_state]); a cutoff of None
        turns its check off."""
        candidates = await host_instances.deadline_candidates(
            self.rt.db, host_name, lost_before=_time(lost_before), builds_before=_time(builds_before),
            tasks_before=_time(tasks_before))
        return {**candidates, "lost": _instances(candidates["lost"]), "resized": _instances(candidates["resized"])}

    async def unfinished_action(self, ctx, instance_uuid: str, action: str | None = None) -> dict | None:
        """Project, user and request id of the instance's newest unfinished ``action``, or None."""
        return await host_instances.unfinished_action(self.rt.db, instance_uuid, action)

    # Instance actions ----------------------------------------------------------------------
    async def action_record(self, ctx, instance_uuid: str, action: str) -> None:
        """Record an action of ``ctx``'s request (one the host starts itself, e.g. a power sync stop)."""
        await actions.record_action(self.rt.db, ctx, instance_uuid, action)

    async def action_event_start(self, ctx, instance_uuid: str, event: str,
                                 host_name: str | None) -> int | None:
        """Start an event of ``ctx``'s action on the instance; its id (None: no such action)."""
        return await actions.event_start(self.rt.db, ctx, instance_uuid, event, host_name)

    async def action_event_finish(self, ctx, event_id: int | None, result: str = "Success",
                                  traceback: str | None = None, details: str | None = None) -> None:
        """Finish the event ``event_id`` with ``result``."""
        await actions.event_finish(self.rt.db, event_id, result=result, traceback=traceback, details=details)

    async def action_record_event(self, ctx, instance_uuid: str, event: str, host_name: str | None,
                                  start_time: str,
                                  result: str = "Success", traceback: str | None = None,
                                  details: str | None = None) -> None:
        """A finished event in one write (a short step nobody needs to see in progress)."""
        await actions.record_event(self.rt.db, ctx, instance_uuid, event, host_name, _time(start_time),
                                   result=result, traceback=traceback, details=details)

    async def instance_progress(self, ctx, instance_uuid: str, host_name: str | None, finished: list[dict] = (),
                                recorded: list[dict] = (), processed: list[dict] = (),
                                begin_operation: str | None = None, saves: list[dict] = (),
                                start_event: str | None = None, finished_after: list[dict] = (),
                                inbox_operation: str | None = None) -> dict:
        """What a host did on one instance in a row, in one call, in this order, each part as its
        own method does it (a save that raises stops there; what came before stays written):

        ``finished``: events ended, [{event_id, finish_time, result, traceback, details}]
        (``action_event_finish``, at the host's ``finish_time``); ``recorded``: short steps,
        [{event, start_time, finish_time, result, traceback, details}] (``action_record_event``);
        ``processed``: external events handled, [{event, event_name, result, details,
        consume_event, traceback, processed_at}] (``event_inbox_record_processing``); ``begin_operation``
        (``event_operation_begin``); ``saves``: [{updates, expected_task_state?,
        expected_vm_state?}] one after the other (``instance_save``); ``start_event``
        (``action_event_start``); ``finished_after``: events the saves end, as ``finished``
        (written only when the saves succeeded); ``inbox_operation``: the inbox's events of that operation
        (``event_inbox_stored``). Returns {instance: the last save's row (None without saves),
        event_id: the started event's, stored_events}."""
        db = self.rt.db
        saves = [(host_writable(save["updates"]), save_conditions({k: v for k, v in save.items() if k != "updates"}))
                 for save in saves]
        answer = {"instance": None, "event_id": None, "stored_events": None}

        async def ended(s) -> None:
            for done in finished:
                await _finish_event(db, done, s)
            for step in recorded:
                await actions.record_event(db, ctx, instance_uuid, step["event"], host_name, _time(step["start_time"]),
                                           result=step.get("result", "Success"), traceback=step.get("traceback"),
                                           details=step.get("details"), finish_time=_time(step.get("finish_time")),
                                           session=s)

        async def saved(s) -> None:
            for updates, expected in saves:
                answer["instance"] = Instance(await instance_obj.save(db, instance_uuid, updates, session=s,
                                                                      **expected))
            if start_event is not None:
                answer["event_id"] = await actions.event_start(db, ctx, instance_uuid, start_event, host_name,
                                                               session=s)
            for done in finished_after:
                await _finish_event(db, done, s)
            if inbox_operation is not None:
                answer["stored_events"] = await event_inbox.stored_events(db, instance_uuid, inbox_operation,
                                                                          session=s)

        if not processed and begin_operation is None:
            async with self._single_writes(db) as s:
                await ended(s)
                await saved(s)
            return answer
        if finished or recorded:
            async with self._single_writes(db) as s:
                await ended(s)
        # Each in a transaction of its own, as their own methods' (never inside a shared session:
        # a call holding two connections at once can starve the pool).
        for handled in processed:
            await event_inbox.record_processing(
                db, handled["event"], event_name=handled["event_name"], host=host_name, result=handled["result"],
                details=handled["details"], consume_event=handled.get("consume_event", False),
                traceback=handled.get("traceback"), at=_time(handled.get("processed_at")))
        if begin_operation is not None:
            await event_inbox.begin_operation(db, instance_uuid, begin_operation, host_name)
        async with self._single_writes(db) as s:
            await saved(s)
        return answer

    @staticmethod
    def _single_writes(db):
        """Where the single-statement writes and the reads of one call share a session: on
        PostgreSQL one autocommit session (each statement still commits alone, as its own call's
        would; one connection check-out instead of one per statement); elsewhere each takes its
        own (None)."""
        return db.autocommit() if db.is_postgresql else contextlib.nullcontext()

    async def action_finish(self, ctx, instance_uuid: str, message: str | None = None,
                            unless_finished: bool = False) -> None:
        """Mark ``ctx``'s action on the instance finished."""
        await actions.finish_action(self.rt.db, ctx, instance_uuid, message, unless_finished=unless_finished)

    async def action_finish_overtaken(self, ctx, instance_uuid: str, newest_request_id: str) -> None:
        """Finish as failed the instance's unfinished actions older than ``newest_request_id``'s."""
        await actions.finish_overtaken(self.rt.db, instance_uuid, newest_request_id)

    async def action_steps_interrupted(self, ctx, host_name: str, reason: str) -> int:
        """End as failed the steps the host's killed process left open, and the actions that are
        over with them (``actions.end_interrupted_steps``); how many steps."""
        return await actions.end_interrupted_steps(self.rt.db, host_name, reason)

    # Claims and builds ---------------------------------------------------------------------
    async def allocation_release(self, ctx, consumer_uuid: str) -> bool:
        """Give back the resources claimed for ``consumer_uuid`` (an instance or a migration)."""
        return await allocations.release(self.rt.db, consumer_uuid)

    async def allocation_of(self, ctx, consumer_uuid: str) -> dict | None:
        """The claim held for ``consumer_uuid``, or None."""
        return await allocations.get(self.rt.db, consumer_uuid)

    async def reschedule_build(self, ctx, instance_uuid: str, request_spec: dict, build_args: dict) -> None:
        """A build that failed on a host goes back to scheduling: its build request is written
        before the instance leaves the host (a lost hand-off is re-driven from it), then the
        instance is unscheduled (compare-and-swap on the build's task states) and the build cast
        to a conductor. Raises as the save does when the instance was deleted or put in ERROR."""
        async with self.rt.db.transaction() as s:
            build_request = await build_requests.add(s, ctx, [instance_uuid], request_spec, build_args)
        try:
            await instance_obj.save(self.rt.db, instance_uuid,
                                    **state_machine.step_save("build.rescheduled", host=None, node=None,
                                                              vm_state=states.BUILDING, network_info=[], progress=0),
                                    expected_vm_state=[states.BUILDING])
        except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError, exceptions.InstanceInvalidState):
            await build_requests.finish(self.rt.db, build_request)
            raise
        from nefos.clients.conductor import ConductorAPI
        await build_requests.hand_off(self.rt.db, ConductorAPI(self.rt.bus), ctx, [instance_uuid], request_spec,
                                      build_args, build_request)

    # Consoles ------------------------------------------------------------------------------
    async def console_authorize(self, ctx, instance_uuid: str, console_type: str, console_host: str, port: int,
                                access_url_base: str | None, ttl: int, internal_access_path: str | None = None,
                                tls_port: int | None = None) -> str:
        """Store a new token for the guest's console; returns the URL carrying it."""
        token = await console_auth_tokens.authorize(
            self.rt.db, console_type=console_type, host=console_host, port=port, instance_uuid=instance_uuid,
            access_url_base=access_url_base, ttl=ttl, internal_access_path=internal_access_path,
            tls_port=tls_port)
        return console_auth_tokens.access_url(access_url_base, console_type, token)

    # Migrations ----------------------------------------------------------------------------
    async def migration_set_status(self, ctx, migration_uuid: str, status: str) -> None:
        """Set the migration record's status."""
        await migrations_obj.set_status(self.rt.db, migration_uuid, status)

    # Services (Nova's servicegroup through the conductor) -----------------------------------
    async def service_register(self, ctx, host_name: str, binary: str, service_topic: str | None,
                               rpc_version: str | None = None) -> int:
        """Create or revive the (host_name, binary) service row, with the version of the RPC
        interface the service serves; its id."""
        return await service_rows.register(self.rt.db, host_name, binary, service_topic, rpc_version)

    async def service_heartbeat(self, ctx, service_id: int) -> None:
        """The service reports it is up."""
        await service_rows.heartbeat(self.rt.db, service_id)

    async def service_set_host_enabled(self, ctx, host_name: str, enabled: bool,
                                       reason: str | None = None) -> bool:
        """Automation enables or disables the host's compute service (never an operator's disable)."""
        return await service_rows.set_host_enabled(self.rt.db, host_name, enabled, reason)

    async def service_record_hypervisor_connection(self, ctx, host_name: str, connected: bool,
                                                   reason: str | None = None) -> None:
        """The driver's latest hypervisor connection report, on the host's compute service row."""
        await service_rows.record_hypervisor_connection(self.rt.db, host_name, connected, reason)

    async def service_publish_vif_wait_stats(self, ctx, host_name: str, stats: dict) -> None:
        """The host's recent vif-event wait figures, on its compute service row."""
        await service_rows.publish_vif_wait_stats(self.rt.db, host_name, stats)

    # Compute nodes -------------------------------------------------------------------------
    async def compute_node_identity(self, ctx, host_name: str, recorded: str | None) -> dict:
        """The host's recorded node uuids and the owner of the node uuid ``recorded``."""
        return await compute_nodes.identity(self.rt.db, host_name, recorded)

    async def compute_node_update(self, ctx, host_name: str, node: str, node_uuid: str | None, capacity: dict,
                                  heal_usage: bool = False) -> dict:
        """Create or update the node's row with the driver's figures; {id, failed_builds, and its usage:
        vcpus_used, memory_mb_used, local_gb_used, running_vms (a conductor older than these
        answers without them)}."""
        return await compute_nodes.update_capacity(self.rt.db, host_name, node, node_uuid, capacity,
                                                   heal_usage=heal_usage)

    async def compute_node_record_build_result(self, ctx, node_id: int, success: bool) -> None:
        """Reset (success) or count one more (failure) of the node's consecutive build failures."""
        await compute_nodes.record_build_result(self.rt.db, node_id, success)

    # External events' inbox ----------------------------------------------------------------
    async def event_operation_begin(self, ctx, instance_uuid: str, operation: str, host_name: str) -> None:
        """Make ``operation`` the instance's current event operation; drop earlier ones' events."""
        await event_inbox.begin_operation(self.rt.db, instance_uuid, operation, host_name)

    async def event_inbox_purge(self, ctx, older_than: str) -> None:
        """Drop inbox events and operations older than ``older_than``."""
        await event_inbox.purge(self.rt.db, _time(older_than))

    async def event_inbox_stored(self, ctx, instance_uuid: str, operation: str) -> list[dict]:
        """The inbox's events of the instance's ``operation``."""
        return await event_inbox.stored_events(self.rt.db, instance_uuid, operation)

    async def event_inbox_consume(self, ctx, event_ids: list[int]) -> None:
        """Drop the inbox events ``event_ids`` (delivered to their waiters)."""
        await event_inbox.consume(self.rt.db, event_ids)

    async def event_inbox_record_processing(self, ctx, event: dict, event_name: str, host_name: str,
                                            result: str,
                                            details: str, consume_event: bool = False,
                                            traceback: str | None = None) -> None:
        """Record how the host_name processed an external event (and consume it from the inbox)."""
        await event_inbox.record_processing(self.rt.db, event, event_name=event_name, host=host_name,
                                            result=result, details=details, consume_event=consume_event,
                                            traceback=traceback)
