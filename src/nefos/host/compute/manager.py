"""The compute manager (nova-compute): builds, runs and tears down this host's guests.

Every operation on an instance holds that instance's lock, so a delete
queued behind a build runs after the build has noticed the delete and
cleaned up. Every state transition is a compare-and-swap on task_state
(``nefos.objects.instance.save``): a delete sets task_state ``deleting``,
the build's next save fails with ``UnexpectedDeletingTaskStateError`` and
the build aborts without leaking its claim, ports or guest.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import traceback

from tenacity import RetryCallState, retry_if_not_exception_type, wait_exponential

from nefos import exceptions, metrics, notifications, waiting
from nefos.bus import Endpoint, interfaces as rpc_interfaces
from nefos.host.compute import image_trust
from nefos.host.compute.progress import InstanceProgress
from nefos.clients.conductor import ConductorAPI
from nefos.model import states
from nefos.model.action_names import POWER_OFF, POWER_ON
from nefos.model.server_group_rules import max_server_per_host
from nefos.model.state_machine import expects, leaves, step_save
from nefos.timeutils import utcnow
from nefos.host.compute.resource_tracker import ResourceTracker
from nefos.host.compute import live_migration, resize
from nefos.host.compute import (consoles, deadlines, evacuate, init_host as host_init, instance_events, interfaces,
                                lifecycle, power_sync, rebuild, rescue, shelve, snapshots)

LOG = logging.getLogger(__name__)
# Build failures that abort instead of rescheduling (Nova's _build_and_run_instance): the image
# or its certificates are refused, which another host would do just the same.
_IMAGE_REFUSALS = (exceptions.CertificateValidationFailed, exceptions.ImageUnacceptable,
                   exceptions.FlavorDiskSmallerThanImage)
# The instance deleted (or being deleted) under a step: nothing to try again for.
_INSTANCE_GONE = (exceptions.InstanceNotFound, exceptions.UnexpectedDeletingTaskStateError)

BUILD_EVENT = "compute__do_build_and_run_instance"


# A build's ``progress`` (the server's percentage while BUILD) as each of its steps begins; 100 once
# ACTIVE.
BUILD_PROGRESS = {states.NETWORKING: 10, states.BLOCK_DEVICE_MAPPING: 25, states.SPAWNING: 50, "networked": 75}


class BuildAborted(Exception):
    """The instance was deleted during its build; cleanup done, nothing more to do."""


class ComputeManager(Endpoint):
    rpc_interface = rpc_interfaces.COMPUTE

    def __init__(self, rt, host: str, driver, network_api):
        self.rt = rt
        self.host = host
        self.driver = driver
        self.network_api = network_api
        self.started_at = time.time()
        self._published_vif_wait_stats: dict | None = None  # what periodic_publish_vif_wait_stats last sent
        self.conductor = ConductorAPI(rt.bus)
        self.resource_tracker = ResourceTracker(rt, self.conductor, host, driver)
        self._locks: dict[str, asyncio.Lock] = {}
        self._lock_users: dict[str, int] = {}
        self._operations: dict[str, int] = {}  # operations holding or awaiting each instance's lock
        self.lifecycle = lifecycle.LifecycleEventHandler(self)  # the driver's event listener
        self.instance_events = instance_events.InstanceEvents(self)  # external events
        self.interfaces = interfaces.InterfaceManager(self)  # os-interface (compute/host/interfaces.py)
        self.live_migrations: dict[str, live_migration.LiveMigrationControl] = {}  # migration uuid -> control

    @functools.cached_property
    def image_api(self):
        """Images a host writes, deletes or downloads (snapshots, backups, shelve, spawn): the Image
        API over HTTP (nefos/clients/image.py), as Nova's glance client."""
        from nefos.clients.image import ImageHTTPClient
        return ImageHTTPClient(self.rt.cfg)

    # Plumbing ----------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def instance_lock(self, uuid: str, *, operation: bool = True):
        """The instance's lock; ``operation``: held for an operation of Nefos's own on the guest
        (not a mere power-state reading), which may stop and start it."""
        lock = self._locks.setdefault(uuid, asyncio.Lock())
        self._lock_users[uuid] = self._lock_users.get(uuid, 0) + 1
        if operation:
            self._operations[uuid] = self._operations.get(uuid, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._lock_users[uuid] -= 1
            if not self._lock_users[uuid]:
                del self._lock_users[uuid]
                del self._locks[uuid]
            if operation:
                self._operations[uuid] -= 1
                if not self._operations[uuid]:
                    del self._operations[uuid]

    def operation_in_progress(self, uuid: str) -> bool:
        return uuid in self._operations

    async def notify(self, ctx, instance: dict, event_type: str) -> None:
        await notifications.notify_instance(self.rt.bus, ctx, instance, event_type, host=self.host)

    async def init_host(self) -> None:
        """Listen to the driver, recover this host's instances, sync power states (compute/host/init_host.py)."""
        await host_init.init_host(self)

    async def after_return(self) -> bool:
        """Back after the control plane judged this host down: the guests of its instances evacuated
        or deleted meanwhile go (compute/host/init_host.py); whether that is settled."""
        return await host_init.after_return(self)

    async def cleanup_host(self) -> None:
        """Stop listening to the driver first: a host shutting down must not record its guests as stopped."""
        await self.lifecycle.stop()
        await self.driver.cleanup_host()
        if "image_api" in self.__dict__:
            await self.image_api.close()

    async def periodic_sync_power_states(self) -> None:
        await power_sync.sync_power_states(self)

    async def periodic_publish_vif_wait_stats(self) -> None:
        """A slow L2 agent shows as long waits here, not only as timeouts. Sent only when the
        summary changed: an idle host would otherwise cost a conductor call and a row write every
        report_interval (a thousand hosts, a hundred a second)."""
        stats = instance_events.wait_summary(self.host, not_before=self.started_at)
        if stats == self._published_vif_wait_stats:
            return
        await self.conductor.service_publish_vif_wait_stats(None, self.host, stats)
        self._published_vif_wait_stats = stats

    async def periodic_check_instance_deadlines(self) -> None:
        await deadlines.reap_stuck_instances(self)

    async def periodic_update_available_resource(self) -> None:
        await self.resource_tracker.update_available_resource()

    # Build -------------------------------------------------------------------
    async def build_and_run_instance(self, ctx, instance_uuid: str, request_spec: dict,
                                     build_args: dict, node: str) -> None:
        async with self.instance_lock(instance_uuid):
            began = time.monotonic()
            try:
                # One conductor call: the build's event started, vm_state building (compare-and-swap),
                # the instance's claim, for the claim check, and its block device mappings.
                started = await self.conductor.build_started(ctx, instance_uuid, BUILD_EVENT, self.host)
            except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError,
                    exceptions.InstanceInvalidState):
                LOG.info("instance %s was deleted, or its build given up, before its build started", instance_uuid)
                return  # the conductor released its claim and recorded the event as failed
            event_id = started["event_id"]
            # The build's writes ride on as few conductor calls as its order allows.
            progress = InstanceProgress(self.conductor, ctx, instance_uuid, self.host)
            try:
                await self._build_and_run_instance(ctx, instance_uuid, request_spec, build_args, node, started,
                                                   progress, event_id)
                metrics.BUILDS.labels("success").inc()
                LOG.info("instance %s: took %.2f seconds to build", instance_uuid, time.monotonic() - began)
            except BuildAborted as exc:  # deleted during its build
                metrics.BUILDS.labels("aborted").inc()
                await progress.finish(event_id, result="Error", details=str(exc)[:255])
                await progress.flush()
            except Exception as exc:
                # Refused for good (ERROR), or tried again on another host.
                failed = isinstance(exc, exceptions.BuildAbortException)
                metrics.BUILDS.labels("failed" if failed else "rescheduled").inc()
                await progress.finish(event_id, result="Error", traceback="".join(traceback.format_exception(exc)),
                                      details=str(exc)[:255])
                await progress.flush()
                await self._handle_build_failure(ctx, instance_uuid, request_spec, build_args, node, exc)
            finally:
                await progress.flush()

    async def _build_and_run_instance(self, ctx, uuid: str, spec: dict, args: dict, node: str, started: dict,
                                      progress: InstanceProgress, build_event_id: int | None) -> None:
        """The build; its last save also finishes the build's event ``build_event_id``."""
        network_task: asyncio.Task | None = None
        instance = started["instance"]
        try:
            async with progress.step("compute_claim_resources", show_in_progress=False):
                await self.resource_tracker.instance_claim(instance, node, started["allocation"])
                await self._check_group_policy(instance, spec)
            await self.notify(ctx, instance, "instance.create.start")
            # The claim's record, the event operation begun (before the ports are bound), task
            # state networking and the network allocation's event started: one call.
            operation = self.instance_events.new_operation()
            saved = await progress.send(begin_operation=operation,
                                        saves=(step_save("build.networking",
                                                         progress=BUILD_PROGRESS[states.NETWORKING]),),
                                        start_event="compute_allocate_network")
            self.instance_events.operation_begun(uuid, operation)
            instance = saved["instance"]
            # Networks are allocated in the background while block devices are prepared.
            network_task = asyncio.create_task(self._allocate_network(ctx, instance, args, progress,
                                                                      saved["event_id"]))
            async with progress.step("compute_prep_block_device", show_in_progress=False):
                instance = (await progress.send(saves=(step_save(
                    "build.block_device_mapping", progress=BUILD_PROGRESS[states.BLOCK_DEVICE_MAPPING]),)))["instance"]
                block_device_info = await self.prep_block_device(instance, started.get("block_device_mappings"))
            await progress.send(saves=(step_save("build.spawning", progress=BUILD_PROGRESS[states.SPAWNING]),))
            try:
                network_info = await network_task
            except (exceptions.InstanceNotFound, exceptions.UnexpectedDeletingTaskStateError):
                raise
            except Exception as exc:
                raise exceptions.BuildAbortException(
                    instance_uuid=uuid,
                    reason=f"Failed to allocate the network(s), not rescheduling. ({exc})")
            instance = (await progress.send(saves=(step_save(
                "build.networked", network_info=network_info, progress=BUILD_PROGRESS["networked"]),)))["instance"]
            try:
                image_trust.check_trusted_certs(instance)  # 2.63: before anything boots from the image
                # Spawn paused, wait for network-vif-plugged, resume (compute/host/instance_events.py).
                await self.instance_events.spawn(ctx, instance, args.get("image") or {}, network_info,
                                                 block_device_info, progress=progress)
            except _IMAGE_REFUSALS as exc:  # the image is the problem: no other host would take it either
                raise exceptions.BuildAbortException(instance_uuid=uuid, reason=str(exc)) from None
            power_state = (await self.driver.get_info(instance))["power_state"]
            instance = (await progress.send(
                saves=(step_save("build.spawned", vm_state=states.ACTIVE, power_state=power_state,
                                 launched_at=utcnow().isoformat(), progress=100),),
                finished_after=(build_event_id,)))["instance"]
        except (exceptions.InstanceNotFound, exceptions.UnexpectedDeletingTaskStateError) as exc:
            await progress.flush()
            await self.cleanup_build(ctx, uuid, network_task)
            raise BuildAborted(f"instance {uuid} was deleted during its build: {exc}")
        except BaseException:
            if network_task is not None and not network_task.done():
                network_task.cancel()
            raise
        await self.resource_tracker.record_build_result(node, success=True)
        await self.notify(ctx, instance, "instance.create.end")

    async def _check_group_policy(self, instance: dict, spec: dict) -> None:
        """The late check of a claim: a race between two boots becomes a reschedule, never a violation.

        Only members placed before this one count (their claims are older): of two boots the
        scheduler placed without seeing each other, the later one yields and is rescheduled,
        the earlier one stays, whichever of the two hosts checks first.
        """
        group = spec.get("instance_group")
        if not group or group.get("policy") not in ("affinity", "anti-affinity"):
            return
        placements = await self.conductor.group_member_placements(None, group["uuid"])
        mine = next((p["claim_id"] for p in placements if p["uuid"] == instance["uuid"]), None)
        earlier = [p["host"] for p in placements if p["uuid"] != instance["uuid"]
                   and (p["claim_id"] is None or mine is None or p["claim_id"] < mine)]
        hosts = set(earlier)
        if group["policy"] == "anti-affinity" and earlier.count(self.host) >= max_server_per_host(group):
            raise exceptions.RescheduledException(
                instance_uuid=instance["uuid"], reason="Anti-affinity instance group policy was violated.")
        if group["policy"] == "affinity" and hosts and hosts != {self.host}:
            raise exceptions.RescheduledException(
                instance_uuid=instance["uuid"], reason="Affinity instance group policy was violated.")

    async def _allocate_network(self, ctx, instance: dict, args: dict, progress: InstanceProgress,
                                event_id: int | None) -> list[dict]:
        """allocate_for_instance with ``network_allocate_retries`` and backoff 1, 2, 4 ... 30 s, as the
        step ``compute_allocate_network`` (started as ``event_id``). An instance deleted meanwhile
        is not tried again."""
        attempts = max(self.rt.cfg.network_allocate_retries, 0) + 1

        def log_retry(state: RetryCallState) -> None:
            LOG.warning("instance %s: network allocation attempt %d/%d failed (%s); retrying in %.0f s",
                        instance["uuid"], state.attempt_number, attempts, state.outcome.exception(),
                        state.next_action.sleep)
        async with progress.step("compute_allocate_network", event_id=event_id):
            try:
                async for attempt in waiting.retrying(
                        retry=retry_if_not_exception_type(_INSTANCE_GONE),
                        wait=wait_exponential(multiplier=1, max=self.rt.cfg.network_allocate_backoff_max),
                        attempts=attempts, before_sleep=log_retry):
                    with attempt:
                        return await self.network_api.allocate_for_instance(
                            ctx, instance, args.get("requested_networks"), args.get("security_groups") or [])
            except _INSTANCE_GONE:
                raise
            except Exception as exc:
                LOG.error("instance %s: network allocation failed after %d attempt(s): %s",
                          instance["uuid"], attempts, exc)
                raise
        return []

    async def prep_block_device(self, instance: dict, bdms: list[dict] | None = None) -> dict:
        """What the driver needs of the instance's block device mappings (``bdms`` when the caller
        has them; a conductor before 1.3 leaves them out of build_started): root device,
        ephemerals, swap."""
        if bdms is None:
            bdms = await self.conductor.block_device_mappings(None, instance["uuid"])
        info: dict = {"root_device_name": "/dev/vda", "ephemerals": [], "swap": None,
                      "block_device_mapping": []}
        for bdm in bdms:
            if bdm["guest_format"] == "swap":
                info["swap"] = {"device_name": bdm["device_name"], "swap_size": bdm["volume_size"]}
            elif bdm["source_type"] == "blank" and bdm["destination_type"] == "local":
                info["ephemerals"].append({"device_name": bdm["device_name"], "size": bdm["volume_size"]})
            elif bdm["boot_index"] == 0:
                info["root_device_name"] = bdm["device_name"] or "/dev/vda"
        return info

    async def cleanup_build(self, ctx, uuid: str, network_task: asyncio.Task | None) -> None:
        """Undo what a failed or aborted build did on this host: guest, ports, claim."""
        if network_task is not None and not network_task.done():
            network_task.cancel()
            with contextlib.suppress(BaseException):
                await network_task
        try:
            instance = await self.conductor.instance_get(None, uuid, read_deleted=True)
        except exceptions.InstanceNotFound:
            instance = {"uuid": uuid, "network_info": []}
        with contextlib.suppress(exceptions.InstanceNotFound):
            await self.driver.destroy(ctx, instance, instance.get("network_info"))
        await self.network_api.deallocate_for_instance(ctx, instance, instance.get("network_info"))
        await self.conductor.allocation_release(None, uuid)

    async def _handle_build_failure(self, ctx, uuid: str, spec: dict, args: dict, node: str,
                                    exc: Exception) -> None:
        await self.cleanup_build(ctx, uuid, None)
        try:
            if isinstance(exc, exceptions.BuildAbortException):
                instance = await self.conductor.save_with_fault(
                    ctx, uuid, exc=exc, host=self.host, details="".join(traceback.format_exception(exc)),
                    **step_save("build.failed", vm_state=states.ERROR, network_info=[]),
                    expected_vm_state=[states.BUILDING])
                await self.notify(ctx, instance, "instance.create.error")
                return
            await self.resource_tracker.record_build_result(node, success=False)
            LOG.warning("build of %s failed on %s (%s); rescheduling", uuid, self.host, exc)
            # The conductor writes the build request before the server leaves this host: if the
            # cast is lost, or the conductor dies, a conductor still takes it from there.
            await self.conductor.reschedule_build(ctx, uuid, dict(spec, last_error=str(exc)), args)
        except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError,
                exceptions.InstanceInvalidState):
            LOG.info("instance %s was deleted or put in ERROR after its build failed", uuid)

    # Console (os-getConsoleOutput) ----------------------------------------------
    async def get_console_output(self, ctx, instance_uuid: str, tail_length: int | None = None) -> str:
        """The guest's serial console log; its last ``tail_length`` lines when given (Nova's _tail_log)."""
        instance = await self.conductor.instance_get(None, instance_uuid)
        try:
            output = await self.driver.get_console_output(instance)
        except NotImplementedError:
            raise exceptions.NotSupported(f"the {type(self.driver).__name__} has no console log")
        if tail_length is not None:
            output = "\n".join(output.split("\n")[-tail_length:]) if tail_length > 0 else ""
        return output

    # Remote consoles (compute/host/consoles.py) ------------------------------------------
    async def get_vnc_console(self, ctx, instance_uuid: str, console_type: str) -> dict:
        """A bus call: {"url"} of the console proxy, with a new token for the guest's VNC server."""
        return await consoles.get_vnc_console(self, ctx, instance_uuid, console_type)

    async def get_spice_console(self, ctx, instance_uuid: str, console_type: str) -> dict:
        """A bus call: {"url"} with a new token for the guest's SPICE server."""
        return await consoles.get_spice_console(self, ctx, instance_uuid, console_type)

    async def validate_console_port(self, ctx, instance_uuid: str, port: int, console_type: str) -> bool:
        return await consoles.validate_console_port(self, ctx, instance_uuid, port, console_type)

    # Diagnostics -------------------------------------------------------------------
    async def get_diagnostics(self, ctx, instance_uuid: str, standard: bool = False) -> dict:
        """The guest's figures from the driver: its own keys, or (``standard``, 2.48) the standard
        form. As Nova, only a running guest has them (409 naming its power state otherwise: a guest
        not spawned yet is ``pending``); 501 when the driver has none."""
        instance = await self.conductor.instance_get(None, instance_uuid)
        try:
            power_state = (await self.driver.get_info(instance))["power_state"]
        except exceptions.InstanceNotFound:
            power_state = states.NOSTATE
        if power_state != states.RUNNING:
            raise exceptions.InstanceInvalidState(action="get_diagnostics", instance_uuid=instance_uuid,
                                                  attr="power state",
                                                  state=states.POWER_STATE_NAMES.get(power_state, "pending"))
        try:
            if standard:
                return await self.driver.get_instance_diagnostics(instance)
            return await self.driver.get_diagnostics(instance)
        except NotImplementedError:
            raise exceptions.NotSupported("The requested functionality is not supported.") from None

    # External events ------------------------------------------------------
    async def external_instance_event(self, ctx, events: list[dict]) -> None:
        """Events the Compute API accepted for this host's instances (compute/host/instance_events.py)."""
        await self.instance_events.external_instance_event(ctx, events)

    async def power_update(self, ctx, instance_uuid: str, target: str) -> str:
        """A ``power-update`` event (2.76): the guest's power changed outside Nefos (``POWER_ON`` /
        ``POWER_OFF``). As Nova, only an ACTIVE running server (POWER_OFF) or a STOPPED shut down one
        (POWER_ON) with no task under way is updated, through task_state ``powering-off`` /
        ``powering-on`` (a compare-and-swap: an operation started meanwhile wins), recorded as
        ``compute_power_update`` in the event's start / stop action, with the power_off / power_on
        notifications. The hypervisor is brought to the reported state when it is not there already
        (so the periodic power sync does not undo it), then the database takes the driver's power
        state and vm_state STOPPED / ACTIVE. Returns what was done, for the action event's details."""
        try:
            instance = await self.conductor.instance_get(None, instance_uuid)
        except exceptions.InstanceNotFound:
            return "instance deleted"
        power_on = target == POWER_ON
        wanted = ((states.STOPPED, states.SHUTDOWN) if power_on else (states.ACTIVE, states.RUNNING))
        if (instance["task_state"] is not None or instance["vm_state"] != wanted[0]
                or instance["power_state"] != wanted[1]):
            LOG.info("the power-update %s event for instance %s is a no-op since the instance is in vm_state "
                     "%s, task_state %s and power_state %s", target, instance_uuid, instance["vm_state"],
                     instance["task_state"], states.POWER_STATE_NAMES.get(instance["power_state"]))
            return (f"no-op: vm_state {instance['vm_state']}, task_state {instance['task_state']}, power_state "
                    f"{states.POWER_STATE_NAMES.get(instance['power_state'], instance['power_state'])}")
        taking = step_save("power_update.power_on" if power_on else "power_update.power_off",
                           **({} if power_on else {"progress": 0}))
        try:
            await self.conductor.instance_save(None, instance_uuid, **taking, expected_vm_state=[wanted[0]])
        except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError,
                exceptions.InstanceInvalidState) as exc:
            LOG.info("instance %s: the power-update event was possibly preempted: %s", instance_uuid, exc)
            return f"preempted: {exc}"

        async def op(i):
            current = await power_sync.driver_power_state(self.driver, i)
            if power_on and current != states.RUNNING:
                await self.instance_events.replug(ctx, i, lambda nw: self.driver.power_on(ctx, i, nw),
                                                  what="power-update")
            elif not power_on and current not in (states.SHUTDOWN, states.NOSTATE, states.CRASHED):
                await self.driver.power_off(i, self.rt.cfg.shutdown_timeout)

        await self.power_op(ctx, instance_uuid, event="compute_power_update",
                             step="start.done" if power_on else "stop.done",
                             final_vm_state=states.ACTIVE if power_on else states.STOPPED,
                             notification="power_on" if power_on else "power_off", op=op)
        return f"applied {POWER_ON if power_on else POWER_OFF} (see compute_power_update)"

    # Delete ------------------------------------------------------------------
    async def terminate_instance(self, ctx, instance_uuid: str) -> None:
        # A build waiting for its network-vif-plugged events holds the lock: wake it now.
        self.instance_events.abort_waits(instance_uuid, exceptions.UnexpectedDeletingTaskStateError(
            instance_uuid=instance_uuid, expected="not deleting", actual=states.DELETING))
        async with self.instance_lock(instance_uuid):
            try:
                instance = await self.conductor.instance_get(None, instance_uuid)
            except exceptions.InstanceNotFound:
                await self.conductor.allocation_release(None, instance_uuid)
                return
            await self.notify(ctx, instance, "instance.delete.start")
            async with self.conductor.step(ctx, instance_uuid, "compute_terminate_instance", self.host):
                with contextlib.suppress(exceptions.InstanceNotFound):
                    await self.driver.destroy(ctx, instance, instance.get("network_info"))
                await self.network_api.deallocate_for_instance(ctx, instance, instance.get("network_info"))
                await resize.cleanup_on_delete(self, ctx, instance)  # a migration's claim and other guest
                # Its claim released, the record deleted, its console tokens revoked (as Nova's).
                await self.conductor.instance_terminated(ctx, instance_uuid)
            await self.conductor.action_finish(ctx, instance_uuid)
            self.instance_events.forget(instance_uuid)
            instance.update(vm_state=states.DELETED, task_state=None, power_state=states.NOSTATE)
            await self.notify(ctx, instance, "instance.delete.end")

    # Power operations ----------------------------------------------------------
    async def power_op(self, ctx, uuid: str, *, event: str, step: str, final_vm_state: str | None,
                        notification: str, op, starts_in: list | None = None,
                        error_vm_state: str | None = None) -> None:
        """Run ``op(instance)`` under the instance's lock and action event, then save the final state
        (``final_vm_state`` None: the vm_state stays) as the state table's ``step`` does (its
        compare-and-swap, the task_state it leaves); ``op`` may return more columns for that save.
        Nothing is done unless the task state is one of ``starts_in`` (default: the ones ``step``
        expects): a request that arrives after its operation was recovered or given up
        (compute/host/deadlines.py) finds it gone. A failure clears the task state (and sets
        ``error_vm_state`` when given) with a fault."""
        expected = expects(step)
        async with self.instance_lock(uuid):
            try:
                instance = await self.conductor.instance_get(None, uuid)
            except exceptions.InstanceNotFound:
                return
            if instance["task_state"] not in (starts_in or expected):
                LOG.info("instance %s: %s skipped, its task state is now %s", uuid, event, instance["task_state"])
                # Its operation was recovered under its own action (then finished already), or
                # another request of the same kind overtook it and cleared the task state.
                await self.conductor.action_finish(ctx, uuid, message="Error", unless_finished=True)
                return
            try:
                async with self.conductor.step(ctx, uuid, event, self.host):
                    await self.notify(ctx, instance, f"instance.{notification}.start")
                    extra = await op(instance)
                    updates = {"task_state": leaves(step),
                               "power_state": await power_sync.driver_power_state(self.driver, instance)}
                    if final_vm_state is not None:
                        updates["vm_state"] = final_vm_state
                    updates.update(extra or {})
                    instance = await self.conductor.instance_save(None, uuid, updates, expected_task_state=expected)
                    await self.notify(ctx, instance, f"instance.{notification}.end")
            except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
                return  # deleted or superseded meanwhile
            except Exception as exc:
                LOG.error("instance %s: %s failed: %s", uuid, event, exc)
                # Revert the task state so the server can be acted on again, and record why.
                failed = {"task_state": None, **({"vm_state": error_vm_state} if error_vm_state else {})}
                with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
                    await self.conductor.save_with_fault(None, uuid, failed, exc, host=self.host,
                                                         details="".join(traceback.format_exception(exc)),
                                                         expected_task_state=expected)
            finally:
                await self.conductor.action_finish(ctx, uuid)

    async def stop_instance(self, ctx, instance_uuid: str) -> None:
        await self.power_op(ctx, instance_uuid, event="compute_stop_instance",
                             step="stop.done", final_vm_state=states.STOPPED,
                             notification="power_off",
                             op=lambda i: self.driver.power_off(i, self.rt.cfg.shutdown_timeout))

    async def start_instance(self, ctx, instance_uuid: str) -> None:
        await self.power_op(ctx, instance_uuid, event="compute_start_instance",
                             step="start.done", final_vm_state=states.ACTIVE,
                             notification="power_on",
                             op=lambda i: self.instance_events.replug(
                                 ctx, i, lambda nw: self.driver.power_on(ctx, i, nw), what="start"))

    async def reboot_instance(self, ctx, instance_uuid: str, reboot_type: str = "SOFT") -> None:
        step = "reboot_hard.done" if reboot_type == "HARD" else "reboot_soft.done"
        await self.power_op(ctx, instance_uuid, event="compute_reboot_instance", step=step,
                             final_vm_state=states.ACTIVE, notification="reboot",
                             op=lambda i: self.instance_events.replug(
                                 ctx, i, lambda nw: self.driver.reboot(ctx, i, nw, reboot_type), what="hard reboot")
                             if reboot_type == "HARD" else
                             self.driver.reboot(ctx, i, i.get("network_info") or [], reboot_type))

    async def pause_instance(self, ctx, instance_uuid: str) -> None:
        await self.power_op(ctx, instance_uuid, event="compute_pause_instance",
                             step="pause.done", final_vm_state=states.PAUSED,
                             notification="pause", op=self.driver.pause)

    async def unpause_instance(self, ctx, instance_uuid: str) -> None:
        await self.power_op(ctx, instance_uuid, event="compute_unpause_instance",
                             step="unpause.done", final_vm_state=states.ACTIVE,
                             notification="unpause", op=self.driver.unpause)

    async def suspend_instance(self, ctx, instance_uuid: str) -> None:
        await self.power_op(ctx, instance_uuid, event="compute_suspend_instance",
                             step="suspend.done", final_vm_state=states.SUSPENDED,
                             notification="suspend", op=lambda i: self.driver.suspend(ctx, i))

    async def resume_instance(self, ctx, instance_uuid: str) -> None:
        await self.power_op(ctx, instance_uuid, event="compute_resume_instance",
                             step="resume.done", final_vm_state=states.ACTIVE,
                             notification="resume",
                             op=lambda i: self.driver.resume(ctx, i, i.get("network_info") or []))

    # Images (createImage, createBackup), shelve, passwords -----------------------------
    async def snapshot_instance(self, ctx, instance_uuid: str, image_id: str) -> None:
        await self.power_op(ctx, instance_uuid, event="compute_snapshot_instance",
                             step="createImage.done", final_vm_state=None, notification="snapshot",
                             op=lambda i: snapshots.snapshot_to_image(self, ctx, i, image_id, operation="createImage"),
                             starts_in=expects("createImage.pending_upload"))
        await self._discard_unfinished_image(ctx, image_id)

    async def backup_instance(self, ctx, instance_uuid: str, image_id: str, backup_type: str,
                              rotation: int) -> None:
        async def op(instance):
            await snapshots.snapshot_to_image(self, ctx, instance, image_id, operation="createBackup")
            await snapshots.rotate_backups(self, ctx, instance, backup_type, rotation)

        await self.power_op(ctx, instance_uuid, event="compute_backup_instance",
                             step="createBackup.done", final_vm_state=None, notification="snapshot",
                             op=op, starts_in=expects("createBackup.pending_upload"))
        await self._discard_unfinished_image(ctx, image_id)

    async def _discard_unfinished_image(self, ctx, image_id: str) -> None:
        """An image whose snapshot never ran (the server was deleted first) is not left queued."""
        with contextlib.suppress(exceptions.ImageNotFound):
            if (await self.image_api.get(ctx.elevated(), image_id))["status"] == "queued":
                await self.image_api.delete(ctx.elevated(), image_id)

    async def shelve_instance(self, ctx, instance_uuid: str, image_id: str) -> None:
        await shelve.shelve_instance(self, ctx, instance_uuid, image_id)
        await self._discard_unfinished_image(ctx, image_id)

    async def shelve_offload_instance(self, ctx, instance_uuid: str) -> None:
        await shelve.shelve_offload_instance(self, ctx, instance_uuid)

    async def unshelve_instance(self, ctx, instance_uuid: str, node: str | None = None) -> None:
        await shelve.unshelve_instance(self, ctx, instance_uuid, node)

    async def rescue_instance(self, ctx, instance_uuid: str, rescue_password: str | None,
                              rescue_image_ref: str | None = None) -> None:
        await rescue.rescue_instance(self, ctx, instance_uuid, rescue_password, rescue_image_ref)

    async def unrescue_instance(self, ctx, instance_uuid: str) -> None:
        await rescue.unrescue_instance(self, ctx, instance_uuid)

    async def rebuild_instance(self, ctx, instance_uuid: str, image_id: str, was_stopped: bool = False,
                               migration: dict | None = None, new_pass: str | None = None) -> None:
        """A rebuild here, or (``migration``, Nova's ``recreate``) an evacuation to this host, whose
        guest gets ``new_pass`` (None: the password it had)."""
        if migration is not None:
            await evacuate.rebuild_on_destination(self, ctx, instance_uuid, image_id, was_stopped, migration,
                                                  new_pass)
            return
        await rebuild.rebuild_instance(self, ctx, instance_uuid, image_id, was_stopped)

    # Resize and cold migration (compute/host/resize.py) ----------------------------------------
    async def check_can_migrate(self, ctx) -> None:
        resize.check_can_migrate(self)

    async def prep_resize(self, ctx, instance_uuid: str, migration: dict) -> None:
        await resize.prep_resize(self, ctx, instance_uuid, migration)

    async def resize_instance(self, ctx, instance_uuid: str, migration: dict) -> None:
        await resize.resize_instance(self, ctx, instance_uuid, migration)

    async def finish_resize(self, ctx, instance_uuid: str, migration: dict) -> None:
        await resize.finish_resize(self, ctx, instance_uuid, migration)

    async def confirm_resize(self, ctx, instance_uuid: str, migration: dict) -> None:
        await resize.confirm_resize(self, ctx, instance_uuid, migration)

    async def revert_resize(self, ctx, instance_uuid: str, migration: dict) -> None:
        await resize.revert_resize(self, ctx, instance_uuid, migration)

    async def finish_revert_resize(self, ctx, instance_uuid: str, migration: dict) -> None:
        await resize.finish_revert_resize(self, ctx, instance_uuid, migration)

    async def cleanup_deleted_migration(self, ctx, instance_uuid: str) -> None:
        await resize.cleanup_deleted_migration(self, ctx, instance_uuid)

    # Live migration (compute/host/live_migration.py) --------------------------------------------
    async def check_can_live_migrate_destination(self, ctx, instance_uuid: str) -> None:
        await live_migration.check_can_live_migrate_destination(self, ctx, instance_uuid)

    async def live_migration(self, ctx, instance_uuid: str, migration: dict) -> None:
        await live_migration.live_migration(self, ctx, instance_uuid, migration)

    async def pre_live_migration(self, ctx, instance_uuid: str, migration: dict) -> None:
        await live_migration.pre_live_migration(self, ctx, instance_uuid, migration)

    async def post_live_migration_at_destination(self, ctx, instance_uuid: str, migration: dict,
                                                 migrate_data: dict) -> None:
        await live_migration.post_live_migration_at_destination(self, ctx, instance_uuid, migration, migrate_data)

    async def rollback_live_migration_at_destination(self, ctx, instance_uuid: str) -> None:
        await live_migration.rollback_live_migration_at_destination(self, ctx, instance_uuid)

    async def live_migration_abort(self, ctx, instance_uuid: str, migration_uuid: str) -> None:
        live_migration.live_migration_abort(self, migration_uuid)

    async def live_migration_force_complete(self, ctx, instance_uuid: str, migration_uuid: str) -> None:
        live_migration.live_migration_force_complete(self, migration_uuid)

    # Interfaces on a running server (compute/host/interfaces.py) ------------------------------------
    async def attach_interface(self, ctx, instance_uuid: str, network_id: str | None = None,
                               port_id: str | None = None, fixed_ip: str | None = None,
                               tag: str | None = None) -> dict:
        """A bus call: the API answers with the attached port."""
        return await self.interfaces.attach(ctx, instance_uuid, network_id=network_id, port_id=port_id,
                                            fixed_ip=fixed_ip, tag=tag)

    async def detach_interface(self, ctx, instance_uuid: str, port_id: str) -> None:
        await self.interfaces.detach(ctx, instance_uuid, port_id)

    async def set_admin_password(self, ctx, instance_uuid: str, new_pass: str) -> None:
        """changePassword (a bus call: the API answers with its outcome)."""
        async with self.instance_lock(instance_uuid):
            instance = await self.conductor.instance_get(None, instance_uuid)
            try:
                async with self.conductor.step(ctx, instance_uuid, "compute_set_admin_password", self.host):
                    if await power_sync.driver_power_state(self.driver, instance) != states.RUNNING:
                        raise exceptions.InstancePasswordSetFailed(
                            instance=instance_uuid, reason="the guest is not running")
                    try:
                        await self.driver.set_admin_password(instance, new_pass)
                    except NotImplementedError:
                        raise exceptions.SetAdminPasswdNotSupported() from None
            finally:
                with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
                    await self.conductor.instance_save(None, instance_uuid, **step_save("changePassword.done"))
                await self.conductor.action_finish(ctx, instance_uuid)
