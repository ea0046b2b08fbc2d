"""The conductor's client (Nova's ``conductor/rpcapi.py``): what the Compute API asks of the
conductor (builds, unshelve, migrations) and everything a compute host reads or writes of the
database (``nefos.control.conductor.host_surface``, the server side, documents each method).

This module imports nothing of the conductor's inside nor of the database: a compute host
imports it, and it is all the host knows of the control plane's state. An instance comes back as
the typed ``Instance`` payload (``nefos.bus.payloads.instance``).
"""

from __future__ import annotations

import contextlib
import logging
import traceback as tb
from typing import Awaitable, Callable, TypeVar

from tenacity import RetryCallState, retry_if_exception_type, wait_fixed

from nefos import exceptions, waiting
from nefos.bus import interfaces
from nefos.bus.payloads.instance import Instance
from nefos.bus.versioning import NoSuchMethod, RPCClient, UnsupportedVersion
from nefos.context import admin_context, current_context
from nefos.model.faults import fault_of
from nefos.timeutils import utcnow

LOG = logging.getLogger(__name__)

T = TypeVar("T")

# What a host does without each conductor version's forms, once a conductor refused them.
_WITHOUT = {"1.3": "sending the 1.2 forms from now on",
            "1.4": "the steps this host's previous process left open stay open"}


class ConductorAPI:
    """The client the Compute API and compute hosts use (topic ``conductor``)."""

    def __init__(self, bus):
        self.bus = bus
        self.client = RPCClient(bus, interfaces.CONDUCTOR)
        # The versions a conductor refused (it is older: it refuses before running anything): not
        # sent again for the life of the process, as an ``auto`` pin is kept.
        self._refused: set[str] = set()

    async def serves(self, version: str) -> bool:
        """Whether to send the forms of conductor ``version``: the pin allows it and no conductor
        refused it. A host has no database to find an ``auto`` pin in, so without a pin an older
        conductor's refusal is what tells."""
        return version not in self._refused and await self.client.can_send_version(version)

    def refused(self, version: str, exc: Exception) -> None:
        LOG.warning("a conductor refused a conductor %s call (%s): %s", version, exc, _WITHOUT[version])
        self._refused.add(version)

    async def _call(self, ctx, method: str, **kwargs):
        # No context given: the request being served (its ids reach the conductor's log lines), else
        # the host acting for itself (start-up and periodic work) with a service context built on
        # purpose: the bus refuses a message without one.
        if ctx is None:
            ctx = current_context.get() or admin_context()
        return await self.client.call(ctx, method, **kwargs)

    async def wait_until_ready(self, *, attempt_timeout: float = 10.0, retry_interval: float = 2.0) -> None:
        """Wait until a conductor answers (Nova's ``wait_until_ready``): a compute host cannot start
        without one, as every read and write of its goes through it."""
        await self.until_answered(lambda: self.client.call(admin_context(), "ready", timeout=attempt_timeout),
                                  retry_interval=retry_interval)

    @staticmethod
    async def until_answered(ask: Callable[[], Awaitable[T]], *, retry_interval: float = 2.0) -> T:
        """``ask()`` (a starting host's call to the conductor, which may simply be asked again), asked
        again while no conductor answers it: none listens, the broker is away, or the connection was
        lost with the answer (the broker restarting as the host starts)."""
        def waiting_for_a_conductor(state: RetryCallState) -> None:
            LOG.warning("waiting for a conductor (%s)", state.outcome.exception())
        async for attempt in waiting.retrying(retry=retry_if_exception_type(exceptions.ServiceUnavailable),
                                              wait=wait_fixed(retry_interval), before_sleep=waiting_for_a_conductor):
            with attempt:
                return await ask()

    # Builds and moves (the Compute API) -------------------------------------------------------
    async def build_instances(self, ctx, instance_uuids: list[str], request_spec: dict,
                              build_args: dict, build_request_id: str | None = None) -> None:
        await self.client.cast(ctx, "build_instances", instance_uuids=instance_uuids,
                               request_spec=request_spec, build_args=build_args,
                               **({"build_request_id": build_request_id} if build_request_id else {}))

    async def unshelve_instance(self, ctx, instance_uuid: str, request_spec: dict) -> None:
        await self.client.cast(ctx, "unshelve_instance", instance_uuid=instance_uuid,
                               request_spec=request_spec)

    async def migrate_server(self, ctx, instance_uuid: str, request_spec: dict, migration: dict) -> None:
        """A call: NoValidHost, or a host that cannot resize, reaches the API before it answers."""
        await self.client.call(ctx, "migrate_server", instance_uuid=instance_uuid,
                               request_spec=request_spec, migration=migration)

    async def live_migrate_instance(self, ctx, instance_uuid: str, request_spec: dict, migration: dict,
                                    forced_host: str | None, *, async_: bool) -> None:
        """A call before 2.34 (a failed check reaches the API), a cast from 2.34, as Nova's ``async_``."""
        await self.client.sender(cast=async_)(ctx, "live_migrate_instance", instance_uuid=instance_uuid,
                                              request_spec=request_spec, migration=migration,
                                              forced_host=forced_host)

    async def evacuate_instance(self, ctx, instance_uuid: str, request_spec: dict, migration: dict,
                                new_pass: str | None = None) -> None:
        """A cast, as Nova's: the evacuation's outcome shows on the server and its migration.
        ``new_pass`` (1.5): the evacuated guest's password; a conductor pinned below cannot carry it."""
        if new_pass is not None and not await self.client.can_send_version("1.5"):
            raise UnsupportedVersion(version=await self.client.version_cap(), method="evacuate_instance")
        await self.client.cast(ctx, "evacuate_instance", instance_uuid=instance_uuid,
                               request_spec=request_spec, migration=migration,
                               **({"new_pass": new_pass} if new_pass is not None else {}))

    # A compute host's helpers over the methods below ------------------------------------------
    async def save_with_fault(self, ctx, instance_uuid: str, updates: dict, exc: BaseException, *,
                              host: str | None, details: str | None = None, **expected) -> dict:
        """``instance_save_with_fault`` with the fault described here, where ``exc`` happened."""
        return await self.instance_save_with_fault(ctx, instance_uuid, updates, fault_of(exc), host, details,
                                                   **expected)

    @contextlib.asynccontextmanager
    async def step(self, ctx, instance_uuid: str, event: str, host: str | None, *, show_in_progress: bool = True):
        """One step of the host's work as an action event: Success, or Error with the traceback
        (as ``nefos.objects.actions.step``). A long step is written when it starts (it shows in
        progress) and when it ends; a short one (``show_in_progress=False``) once, when it ends."""
        start_time = utcnow().isoformat()
        event_id = None
        if show_in_progress:
            event_id = await self.action_event_start(ctx, instance_uuid, event, host)
        try:
            yield
        except BaseException as exc:
            failure = {"result": "Error", "traceback": "".join(tb.format_exception(exc)),
                       "details": str(exc)[:255] if isinstance(exc, exceptions.NefosError) else None}
            if show_in_progress:
                await self.action_event_finish(ctx, event_id, **failure)
            else:
                await self.action_record_event(ctx, instance_uuid, event, host, start_time, **failure)
            raise
        if show_in_progress:
            await self.action_event_finish(ctx, event_id)
        else:
            await self.action_record_event(ctx, instance_uuid, event, host, start_time)

    # What a compute host asks of the database (nefos.control.conductor.host_surface) -------------------
    async def ready(self, ctx) -> bool:
        """A conductor answers (a compute host waits for one before it starts, as Nova's
        ``wait_until_ready``)."""
        return await self._call(ctx, "ready")

    async def instance_get(self, ctx, instance_uuid: str, read_deleted: bool = False) -> dict:
        """The instance (InstanceNotFound when deleted, unless ``read_deleted``)."""
        return Instance.from_primitive(await self._call(ctx, "instance_get", instance_uuid=instance_uuid,
                                                        read_deleted=read_deleted))

    async def instance_task_state(self, ctx, instance_uuid: str) -> str | None:
        """Only the task state (InstanceNotFound once deleted)."""
        return await self._call(ctx, "instance_task_state", instance_uuid=instance_uuid)

    async def instance_save(self, ctx, instance_uuid: str, updates: dict, **expected) -> dict:
        """Write ``updates``; with ``expected_task_state`` / ``expected_vm_state`` only while the row
        still matches (compare-and-swap). Returns the new row."""
        return Instance.from_primitive(await self._call(ctx, "instance_save", instance_uuid=instance_uuid,
                                                        updates=updates, **expected))

    async def instance_save_with_fault(self, ctx, instance_uuid: str, updates: dict, fault: dict,
                                       host_name: str | None, details: str | None = None, **expected) -> dict:
        """Save (usually to ERROR) and record ``fault`` ({code, message}) in one transaction."""
        return Instance.from_primitive(await self._call(
            ctx, "instance_save_with_fault", instance_uuid=instance_uuid, updates=updates, fault=fault,
            host_name=host_name, details=details, **expected))

    async def instance_terminated(self, ctx, instance_uuid: str) -> None:
        """The host destroyed the guest: release its claim, soft-delete the instance (its quota
        back) and revoke its console tokens."""
        return await self._call(ctx, "instance_terminated", instance_uuid=instance_uuid)

    async def build_started(self, ctx, instance_uuid: str, event: str, host_name: str) -> dict:
        """A host starts a build: the build's action event started, the instance BUILDING with no
        task (compare-and-swap: still scheduling, or retried); returns {event_id, instance,
        allocation (its claim), block_device_mappings (missing from a conductor before 1.3)}.
        When the instance was deleted or its build given up meanwhile, its claim is released, the
        event finished as failed, and the save's error raised."""
        started = None
        if await self.serves("1.3"):
            try:
                started = await self._call(ctx, "build_started", instance_uuid=instance_uuid, event=event,
                                           host_name=host_name, block_devices=True)
            except (UnsupportedVersion, NoSuchMethod) as exc:
                self.refused("1.3", exc)
        if started is None:
            started = await self._call(ctx, "build_started", instance_uuid=instance_uuid, event=event,
                                       host_name=host_name)
        return {**started, "instance": Instance.from_primitive(started["instance"])}

    async def image_meta(self, ctx, image_id: str) -> dict:
        """An image's id, disk format and properties, looked up as ``ctx`` (its kernel and ramdisk too)."""
        return await self._call(ctx, "image_meta", image_id=image_id)

    async def block_device_mappings(self, ctx, instance_uuid: str) -> list[dict]:
        """The instance's block device mappings (what the host needs to prepare them)."""
        return await self._call(ctx, "block_device_mappings", instance_uuid=instance_uuid)

    async def group_member_placements(self, ctx, group_uuid: str) -> list[dict]:
        """Where each live member of the server group is or is about to be (the late policy check)."""
        return await self._call(ctx, "group_member_placements", group_uuid=group_uuid)

    async def host_instances(self, ctx, host_name: str) -> list[dict]:
        """Every live instance of ``host``, whole."""
        return Instance.list_from_primitive(await self._call(ctx, "host_instances", host_name=host_name))

    async def host_instance_states(self, ctx, host_name: str) -> list[dict]:
        """uuid, vm_state, task_state, power_state of every live instance of ``host``."""
        return await self._call(ctx, "host_instance_states", host_name=host_name)

    async def host_unchanged_operations(self, ctx, host_name: str, updated_before: str) -> list[dict]:
        """The host's instances with a task or build under way, unchanged since ``updated_before``."""
        return Instance.list_from_primitive(await self._call(ctx, "host_unchanged_operations", host_name=host_name,
                                                             updated_before=updated_before))

    async def unchanged_resized_instances(self, ctx, updated_before: str) -> list[dict]:
        """RESIZED instances with no task, unchanged since ``updated_before``."""
        return Instance.list_from_primitive(await self._call(ctx, "unchanged_resized_instances",
                                                             updated_before=updated_before))

    async def host_builds_started_before(self, ctx, host_name: str, created_before: str) -> list[str]:
        """The uuids of the host's BUILDING instances created before ``created_before``."""
        return await self._call(ctx, "host_builds_started_before", host_name=host_name, created_before=created_before)

    async def host_tasks_unchanged_since(self, ctx, host_name: str, updated_before: str) -> list[list]:
        """[uuid, task_state, vm_state] of the host's (non-build) tasks older than ``updated_before``."""
        return await self._call(ctx, "host_tasks_unchanged_since", host_name=host_name, updated_before=updated_before)

    async def host_deadline_candidates(self, ctx, host_name: str, lost_before: str | None,
                                       builds_before: str | None, tasks_before: str | None) -> dict:
        """What one deadline pass of the host acts on: ``lost`` and ``resized`` (whole instances),
        ``builds`` (uuids), ``tasks`` ([uuid, task_state, vm_state]); a cutoff of None turns its check
        off. A conductor before 1.3 is asked the four questions one by one (its ``resized`` holds
        every host's: the caller keeps its own)."""
        if await self.client.can_send_version("1.3"):
            found = await self._call(ctx, "host_deadline_candidates", host_name=host_name, lost_before=lost_before,
                                     builds_before=builds_before, tasks_before=tasks_before)
            return {**found, "lost": Instance.list_from_primitive(found["lost"]),
                    "resized": Instance.list_from_primitive(found["resized"])}
        return {
            "lost": await self.host_unchanged_operations(ctx, host_name, lost_before) if lost_before else [],
            "resized": await self.unchanged_resized_instances(ctx, lost_before) if lost_before else [],
            "builds": await self.host_builds_started_before(ctx, host_name, builds_before) if builds_before else [],
            "tasks": await self.host_tasks_unchanged_since(ctx, host_name, tasks_before) if tasks_before else []}

    async def unfinished_action(self, ctx, instance_uuid: str, action: str | None = None) -> dict | None:
        """Project, user and request id of the instance's newest unfinished ``action``, or None."""
        return await self._call(ctx, "unfinished_action", instance_uuid=instance_uuid, action=action)

    async def action_record(self, ctx, instance_uuid: str, action: str) -> None:
        """Record an action of ``ctx``'s request (one the host starts itself, e.g. a power sync stop)."""
        return await self._call(ctx, "action_record", instance_uuid=instance_uuid, action=action)

    async def action_event_start(self, ctx, instance_uuid: str, event: str, host_name: str | None) -> int | None:
        """Start an event of ``ctx``'s action on the instance; its id (None: no such action)."""
        return await self._call(ctx, "action_event_start", instance_uuid=instance_uuid, event=event,
                                host_name=host_name)

    async def action_event_finish(self, ctx, event_id: int | None, result: str = "Success",
                                  traceback: str | None = None, details: str | None = None) -> None:
        """Finish the event ``event_id`` with ``result``."""
        return await self._call(ctx, "action_event_finish", event_id=event_id, result=result, traceback=traceback,
                                details=details)

    async def action_record_event(self, ctx, instance_uuid: str, event: str, host_name: str | None, start_time: str,
                                  result: str = "Success", traceback: str | None = None,
                                  details: str | None = None) -> None:
        """A finished event in one write (a short step nobody needs to see in progress)."""
        return await self._call(ctx, "action_record_event", instance_uuid=instance_uuid, event=event,
                                host_name=host_name, start_time=start_time, result=result, traceback=traceback,
                                details=details)

    async def instance_progress(self, ctx, instance_uuid: str, host_name: str | None, *, finished: list[dict],
                                recorded: list[dict], processed: list[dict], begin_operation: str | None,
                                saves: list[dict], start_event: str | None, finished_after: list[dict],
                                inbox_operation: str | None) -> dict:
        """What a host did on one instance in a row, in one call (``nefos.host.compute.progress``
        sends it; the server side documents each part)."""
        answer = await self._call(ctx, "instance_progress", instance_uuid=instance_uuid, host_name=host_name,
                                  finished=finished, recorded=recorded, processed=processed,
                                  begin_operation=begin_operation, saves=saves, start_event=start_event,
                                  finished_after=finished_after, inbox_operation=inbox_operation)
        return {**answer, "instance": Instance.from_primitive(answer["instance"])}

    async def action_finish(self, ctx, instance_uuid: str, message: str | None = None,
                            unless_finished: bool = False) -> None:
        """Mark ``ctx``'s action on the instance finished."""
        return await self._call(ctx, "action_finish", instance_uuid=instance_uuid, message=message,
                                unless_finished=unless_finished)

    async def action_finish_overtaken(self, ctx, instance_uuid: str, newest_request_id: str) -> None:
        """Finish as failed the instance's unfinished actions older than ``newest_request_id``'s."""
        return await self._call(ctx, "action_finish_overtaken", instance_uuid=instance_uuid,
                                newest_request_id=newest_request_id)

    async def action_steps_interrupted(self, ctx, host_name: str, reason: str) -> int | None:
        """End as failed the steps the host's killed process left open, and the actions over with
        them; how many steps (asked before the host serves a request). A conductor before 1.4 is
        not asked (None): such steps and actions stay open there."""
        if not await self.serves("1.4"):
            return None
        try:
            return await self._call(ctx, "action_steps_interrupted", host_name=host_name, reason=reason)
        except (UnsupportedVersion, NoSuchMethod) as exc:
            self.refused("1.4", exc)
            return None

    async def allocation_release(self, ctx, consumer_uuid: str) -> bool:
        """Give back the resources claimed for ``consumer_uuid`` (an instance or a migration)."""
        return await self._call(ctx, "allocation_release", consumer_uuid=consumer_uuid)

    async def allocation_of(self, ctx, consumer_uuid: str) -> dict | None:
        """The claim held for ``consumer_uuid``, or None."""
        return await self._call(ctx, "allocation_of", consumer_uuid=consumer_uuid)

    async def reschedule_build(self, ctx, instance_uuid: str, request_spec: dict, build_args: dict) -> None:
        """A build that failed on a host goes back to scheduling: its build request is written
        before the instance leaves the host (a lost hand-off is re-driven from it), then the
        instance is unscheduled (compare-and-swap on the build's task states) and the build cast
        to a conductor. Raises as the save does when the instance was deleted or put in ERROR."""
        return await self._call(ctx, "reschedule_build", instance_uuid=instance_uuid, request_spec=request_spec,
                                build_args=build_args)

    async def console_authorize(self, ctx, instance_uuid: str, console_type: str, console_host: str, port: int,
                                access_url_base: str | None, ttl: int, internal_access_path: str | None = None,
                                tls_port: int | None = None) -> str:
        """Store a new token for the guest's console; returns the URL carrying it."""
        return await self._call(ctx, "console_authorize", instance_uuid=instance_uuid, console_type=console_type,
                                console_host=console_host, port=port, access_url_base=access_url_base, ttl=ttl,
                                internal_access_path=internal_access_path, tls_port=tls_port)

    async def migration_set_status(self, ctx, migration_uuid: str, status: str) -> None:
        """Set the migration record's status."""
        return await self._call(ctx, "migration_set_status", migration_uuid=migration_uuid, status=status)

    async def service_register(self, ctx, host_name: str, binary: str, service_topic: str | None,
                               rpc_version: str | None = None) -> int:
        """Create or revive the (host_name, binary) service row, with the version of the RPC
        interface the service serves; its id."""
        return await self._call(ctx, "service_register", host_name=host_name, binary=binary,
                                service_topic=service_topic, rpc_version=rpc_version)

    async def service_heartbeat(self, ctx, service_id: int) -> None:
        """The service reports it is up."""
        return await self._call(ctx, "service_heartbeat", service_id=service_id)

    async def service_set_host_enabled(self, ctx, host_name: str, enabled: bool, reason: str | None = None) -> bool:
        """Automation enables or disables the host's compute service (never an operator's disable)."""
        return await self._call(ctx, "service_set_host_enabled", host_name=host_name, enabled=enabled, reason=reason)

    async def service_record_hypervisor_connection(self, ctx, host_name: str, connected: bool,
                                                   reason: str | None = None) -> None:
        """The driver's latest hypervisor connection report, on the host's compute service row."""
        return await self._call(ctx, "service_record_hypervisor_connection", host_name=host_name, connected=connected,
                                reason=reason)

    async def service_publish_vif_wait_stats(self, ctx, host_name: str, stats: dict) -> None:
        """The host's recent vif-event wait figures, on its compute service row."""
        return await self._call(ctx, "service_publish_vif_wait_stats", host_name=host_name, stats=stats)

    async def compute_node_identity(self, ctx, host_name: str, recorded: str | None) -> dict:
        """The host's recorded node uuids and the owner of the node uuid ``recorded``."""
        return await self._call(ctx, "compute_node_identity", host_name=host_name, recorded=recorded)

    async def compute_node_update(self, ctx, host_name: str, node: str, node_uuid: str | None, capacity: dict,
                                  heal_usage: bool = False) -> dict:
        """Create or update the node's row with the driver's figures; {id, failed_builds, and its usage:
        vcpus_used, memory_mb_used, local_gb_used, running_vms (a conductor older than these
        answers without them)}."""
        return await self._call(ctx, "compute_node_update", host_name=host_name, node=node, node_uuid=node_uuid,
                                capacity=capacity, heal_usage=heal_usage)

    async def compute_node_record_build_result(self, ctx, node_id: int, success: bool) -> None:
        """Reset (success) or count one more (failure) of the node's consecutive build failures."""
        return await self._call(ctx, "compute_node_record_build_result", node_id=node_id, success=success)

    async def event_operation_begin(self, ctx, instance_uuid: str, operation: str, host_name: str) -> None:
        """Make ``operation`` the instance's current event operation; drop earlier ones' events."""
        return await self._call(ctx, "event_operation_begin", instance_uuid=instance_uuid, operation=operation,
                                host_name=host_name)

    async def event_inbox_purge(self, ctx, older_than: str) -> None:
        """Drop inbox events and operations older than ``older_than``."""
        return await self._call(ctx, "event_inbox_purge", older_than=older_than)

    async def event_inbox_stored(self, ctx, instance_uuid: str, operation: str) -> list[dict]:
        """The inbox's events of the instance's ``operation``."""
        return await self._call(ctx, "event_inbox_stored", instance_uuid=instance_uuid, operation=operation)

    async def event_inbox_consume(self, ctx, event_ids: list[int]) -> None:
        """Drop the inbox events ``event_ids`` (delivered to their waiters)."""
        return await self._call(ctx, "event_inbox_consume", event_ids=event_ids)

    async def event_inbox_record_processing(self, ctx, event: dict, event_name: str, host_name: str, result: str,
                                            details: str, consume_event: bool = False,
                                            traceback: str | None = None) -> None:
        """Record how the host_name processed an external event (and consume it from the inbox)."""
        return await self._call(ctx, "event_inbox_record_processing", event=event, event_name=event_name,
                                host_name=host_name, result=result, details=details, consume_event=consume_event,
                                traceback=traceback)

    async def migration_save(self, ctx, instance_uuid: str, updates: dict, migration_uuid: str, migration_status: str,
                             **expected) -> dict:
        """Save the instance (compare-and-swap) and set its migration's status, together."""
        return Instance.from_primitive(await self._call(
            ctx, "migration_save", instance_uuid=instance_uuid, updates=updates, migration_uuid=migration_uuid,
            migration_status=migration_status, **expected))

    async def migration_abort_before_move(self, ctx, instance_uuid: str, migration: dict, fault: dict | None = None,
                                          host_name: str | None = None, details: str | None = None) -> None:
        """Undo a resize that never moved the guest (the destination's claim, the upsize quota, the
        migration ``error``; task_state None, with ``fault``); finish the action as failed."""
        return await self._call(ctx, "migration_abort_before_move", instance_uuid=instance_uuid, migration=migration,
                                fault=fault, host_name=host_name, details=details)

    async def resize_confirmed(self, ctx, instance_uuid: str, updates: dict, migration: dict, **expected) -> dict:
        """On the source's confirm: save the instance, the destination's claim becomes its claim, the
        quota held beyond the new flavor is given back, the migration ``confirmed``."""
        return Instance.from_primitive(await self._call(ctx, "resize_confirmed", instance_uuid=instance_uuid,
                                                        updates=updates, migration=migration, **expected))

    async def resize_reverted_at_destination(self, ctx, instance_uuid: str, source_host: str, source_node: str,
                                             migration_uuid: str) -> None:
        """On the destination's revert: the server's host is the source again (compare-and-swap on
        ``resize_reverting``), the destination's claim is released."""
        return await self._call(ctx, "resize_reverted_at_destination", instance_uuid=instance_uuid,
                                source_host=source_host, source_node=source_node, migration_uuid=migration_uuid)

    async def resize_revert_finished(self, ctx, instance_uuid: str, updates: dict, migration: dict, old_flavor: dict,
                                     **expected) -> dict:
        """On the source's finish of a revert: save the instance, give back the quota held beyond the
        old flavor, the migration ``reverted``."""
        return Instance.from_primitive(await self._call(
            ctx, "resize_revert_finished", instance_uuid=instance_uuid, updates=updates, migration=migration,
            old_flavor=old_flavor, **expected))

    async def live_migration_roll_back(self, ctx, instance_uuid: str, migration: dict, status: str,
                                       fault: dict | None = None, host_name: str | None = None,
                                       details: str | None = None) -> None:
        """Undo a live migration that never moved the guest (the destination's claim, task_state
        None, the migration ``status``, with ``fault``); finish the action as failed."""
        return await self._call(ctx, "live_migration_roll_back", instance_uuid=instance_uuid, migration=migration,
                                status=status, fault=fault, host_name=host_name, details=details)

    async def live_migration_completed(self, ctx, instance_uuid: str, updates: dict, migration_uuid: str,
                                       **expected) -> dict:
        """On the destination: save the instance (now this host's), the migration's claim becomes
        its claim (the source's released), the migration ``completed``."""
        return Instance.from_primitive(await self._call(
            ctx, "live_migration_completed", instance_uuid=instance_uuid, updates=updates,
            migration_uuid=migration_uuid, **expected))

    async def evacuation_done(self, ctx, instance_uuid: str, updates: dict, migration_uuid: str,
                              **expected) -> dict:
        """On an evacuation's destination: save the instance (now this host's), the migration's claim
        becomes its claim (the source's released), the migration ``done``."""
        return Instance.from_primitive(await self._call(
            ctx, "evacuation_done", instance_uuid=instance_uuid, updates=updates, migration_uuid=migration_uuid,
            **expected))

    async def migrations_of_host(self, ctx, migration_type: str, statuses: list[str], *,
                                 source_compute: str | None = None, dest_compute: str | None = None) -> list[dict]:
        """Migrations of ``migration_type`` in ``statuses`` from ``source_compute`` or to ``dest_compute``."""
        return await self._call(ctx, "migrations_of_host", migration_type=migration_type, statuses=statuses,
                                source_compute=source_compute, dest_compute=dest_compute)
