"""``build_instances``: schedule, record the destination, cast the build.

Also the reschedule path: a compute whose build failed casts the build back
here with the hosts already tried in ``request_spec["retry"]``; after
``max_attempts`` the instance goes to ERROR with a MaxRetriesExceeded fault.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import traceback

from sqlalchemy import select

from nefos import exceptions
from nefos.bus import Endpoint, interfaces
from nefos.control.conductor.host_surface import HostSurface
from nefos.control.conductor.migration_surface import MigrationSurface
from nefos.context import RequestContext, admin_context
from nefos.db.models import Instance, utcnow
from nefos.db.retry import retried
from nefos.clients.network import NetworkAPI
from nefos.objects import (actions, allocations, build_requests, event_inbox, event_log, instance as instance_obj,
                           service_rows)
from nefos.model import states
from nefos.clients.compute import ComputeRPCAPI
from nefos.clients.scheduler import SchedulerAPI
from nefos.model import state_machine

LOG = logging.getLogger(__name__)

SCHEDULE_EVENT = "conductor_schedule_and_build_instances"
_PORT_SWEEP_WINDOW = 900  # seconds after a delete in which its leftover ports are looked for
UNSHELVE_EVENT = "conductor_unshelve_instance"


class ConductorManager(HostSurface, MigrationSurface, Endpoint):
    """Builds, reschedules, moves; and what compute hosts ask of the database (``HostSurface``)."""

    rpc_interface = interfaces.CONDUCTOR

    def __init__(self, rt):
        self.rt = rt
        self.scheduler = SchedulerAPI(rt.bus)
        self.compute_rpcapi = ComputeRPCAPI(rt.bus)

    async def _set_error(self, ctx, uuids: list[str], exc: BaseException) -> None:
        for uuid in uuids:
            try:
                await instance_obj.save_with_fault(self.rt.db, uuid, exc=exc, host=None,
                                                   details="".join(traceback.format_exception(exc)),
                                                   **state_machine.step_save("build.no_valid_host",
                                                                             vm_state=states.ERROR))
            except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
                LOG.info("instance %s was deleted while scheduling", uuid)

    async def build_instances(self, ctx, instance_uuids: list[str], request_spec: dict,
                              build_args: dict, build_request_id: str | None = None) -> None:
        """A build from the API (``build_request_id``: its durable record, claimed first, deleted
        once every instance has a host or a fault), or one a compute host sends back to retry."""
        if build_request_id is None:
            await self._schedule_and_build(ctx, instance_uuids, request_spec, build_args)
            return
        db, claimer = self.rt.db, build_requests.claimer_id(self.rt.cfg.host)
        retaken = await build_requests.claim(db, build_request_id, 3 * self.rt.cfg.rpc_response_timeout, claimer)
        if retaken is None:
            LOG.info("build request %s: another conductor has it, or it is done", build_request_id)
            return
        try:
            # Taken again after a conductor died midway: only what it had not scheduled yet, and
            # without the claims the scheduler may have made for it before that conductor died.
            async with db.reader() as s:
                rows = (await s.execute(select(Instance.uuid, Instance.host, Instance.task_state).where(
                    Instance.uuid.in_(instance_uuids), Instance.deleted == 0))).all()
            live = {uuid for uuid, _host, _task_state in rows}
            waiting = {uuid for uuid, host, task_state in rows if host is None and task_state == states.SCHEDULING}
            uuids = [u for u in instance_uuids if u in waiting]
            if retaken:
                # The scheduler's claims for servers still waiting, and for servers deleted meanwhile
                # (an earlier conductor may have died before it gave those back).
                for uuid in instance_uuids:
                    if uuid in waiting or uuid not in live:
                        await allocations.release(db, uuid)
            if uuids:
                await self._schedule_and_build(ctx, uuids, dict(request_spec, num_instances=len(uuids)), build_args)
        except BaseException:
            with contextlib.suppress(Exception):
                await retried(build_requests.unclaim, db, build_request_id, claimer)
            raise
        await retried(build_requests.finish, db, build_request_id)

    async def redrive_stranded_builds(self) -> None:
        """Take the builds no conductor took (the API could not cast them, the cast was lost, or
        the conductor holding one died) and build them."""
        claimer = build_requests.claimer_id(self.rt.cfg.host)
        for request in await build_requests.stranded(self.rt.db, self.rt.cfg.build_hand_off_timeout, claimer):
            LOG.warning("build request %s (servers %s) was not taken in time: building it now",
                        request["id"], request["instance_uuids"])
            try:
                await self.build_instances(RequestContext.from_dict(request["context"]), request["instance_uuids"],
                                           request["request_spec"], request["build_args"],
                                           build_request_id=request["id"])
            except Exception:
                LOG.exception("build request %s failed again; it is taken again later", request["id"])

    async def release_ports_of_deleted_servers(self) -> None:
        """Ports still bound to servers deleted in the last ``_PORT_SWEEP_WINDOW`` seconds: the
        delete could not reach the network service (it was down or unreachable), so they are
        released now, before their addresses stay taken for good."""
        since = utcnow() - dt.timedelta(seconds=_PORT_SWEEP_WINDOW)
        async with self.rt.db.reader() as s:
            deleted = dict((await s.execute(select(Instance.uuid, Instance.project_id).where(
                Instance.deleted != 0, Instance.deleted_at >= since))).all())
        if not deleted:
            return
        network_api = NetworkAPI(self.rt)
        admin = admin_context()
        for uuid in await network_api.devices_holding_ports(admin, deleted):
            LOG.warning("instance %s was deleted but still holds ports: releasing them", uuid)
            instance = await instance_obj.get(self.rt.db, uuid, read_deleted=True)
            await network_api.deallocate_for_instance(admin, instance, instance.get("network_info"))

    async def purge_expired_external_events(self) -> None:
        """The external events' inbox and the instances' event operations keep an hour: once a
        minute here, for the whole cloud (not by each compute host as it starts an operation)."""
        await event_inbox.purge_expired(self.rt.db, self.rt.cfg.vif_plugging_timeout)

    async def purge_event_log(self) -> None:
        """The event stream's log keeps ``event_log_retention`` seconds."""
        purged = await event_log.purge(self.rt.db, self.rt.cfg.event_log_retention)
        if purged:
            LOG.debug("purged %d event stream entries", purged)

    async def report_host_liveness(self) -> None:
        """``host.up`` / ``host.down`` in the event stream when a compute host's heartbeats start or
        stop (a heartbeat is no row change the stream could tell by itself)."""
        await service_rows.report_liveness_changes(self.rt.db, self.rt.cfg)

    async def finish_abandoned_actions(self) -> None:
        """Actions whose request died before anything acted on them are finished as failed (after
        twice ``rpc_response_timeout``: by then a request that is still alive has acted); actions
        whose host never finished them after their last step, as their steps ended (after
        ``rpc_response_timeout``: the host's call to finish it has timed out by then)."""
        timeout = self.rt.cfg.rpc_response_timeout
        finished = await actions.finish_abandoned(
            self.rt.db, dt.timedelta(seconds=2 * timeout), steps_ended=dt.timedelta(seconds=timeout))
        if finished:
            LOG.warning("finished %d abandoned instance action(s) as failed", len(finished))

    async def _schedule_and_build(self, ctx, instance_uuids: list[str], request_spec: dict,
                                  build_args: dict) -> None:
        spec = dict(request_spec)
        retry = dict(spec.get("retry") or {"num_attempts": 0, "hosts": []})
        retry["num_attempts"] += 1
        spec["retry"] = retry
        event_ids = {u: await actions.event_start(self.rt.db, ctx, u, SCHEDULE_EVENT, None)
                     for u in instance_uuids}
        try:
            if retry["num_attempts"] > self.rt.cfg.max_attempts:
                raise exceptions.MaxRetriesExceeded(
                    reason=f"Exceeded max scheduling attempts {self.rt.cfg.max_attempts} for "
                           f"instance {instance_uuids[0]}. Last exception: {spec.get('last_error', '')}")
            selections = await self.scheduler.select_destinations(ctx, spec, instance_uuids)
        except exceptions.NoValidHost as exc:
            LOG.warning("no valid host for %s: %s", instance_uuids, exc)
            for uuid in instance_uuids:
                await actions.event_finish(self.rt.db, event_ids[uuid], result="Error",
                                           traceback="".join(traceback.format_exception(exc)))
            await self._set_error(ctx, instance_uuids, exc)
            return
        for uuid, selection in zip(instance_uuids, selections):
            try:
                await instance_obj.save(self.rt.db, uuid, **state_machine.step_save(
                    "build.scheduled", host=selection["host"], node=selection["node"],
                    launched_on=selection["host"], availability_zone=selection["availability_zone"]))
            except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
                LOG.info("instance %s deleted while scheduling; releasing its claim", uuid)
                await allocations.release(self.rt.db, uuid)
                await actions.event_finish(self.rt.db, event_ids[uuid], result="Error",
                                           details="instance deleted while scheduling")
                continue
            await actions.event_finish(self.rt.db, event_ids[uuid])
            instance_spec = dict(spec, retry={
                "num_attempts": retry["num_attempts"],
                "hosts": [*retry["hosts"], [selection["host"], selection["node"]]]})
            try:
                await self.compute_rpcapi.build_and_run_instance(
                    ctx, selection["host"], instance_uuid=uuid, request_spec=instance_spec,
                    build_args=build_args, node=selection["node"])
            except exceptions.NoServerListening:
                # The host's queue is gone (it is restarting, or its link to the broker is): the build
                # certainly never reached it. It goes back unplaced, its claim released, and the
                # raise hands the build request back for the next re-drive to schedule it again.
                # (A cast that may have arrived is left to the host: its deadline pass finds it.)
                LOG.warning("instance %s: no server listens on compute host %s; it is scheduled again",
                            uuid, selection["host"])
                with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
                    await instance_obj.save(self.rt.db, uuid, **state_machine.step_save(
                        "build.scheduled", host=None, node=None, launched_on=None))
                await allocations.release(self.rt.db, uuid)
                raise


    async def unshelve_instance(self, ctx, instance_uuid: str, request_spec: dict) -> None:
        """Schedule a SHELVED_OFFLOADED server (a new claim) and hand it to the chosen host. With no
        valid host it stays offloaded, its task state cleared and the reason recorded."""
        event_id = await actions.event_start(self.rt.db, ctx, instance_uuid, UNSHELVE_EVENT, None)
        try:
            (selection,) = await self.scheduler.select_destinations(ctx, dict(request_spec), [instance_uuid])
        except exceptions.NoValidHost as exc:
            LOG.warning("no valid host to unshelve %s: %s", instance_uuid, exc)
            await actions.event_finish(self.rt.db, event_id, result="Error",
                                       traceback="".join(traceback.format_exception(exc)))
            with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
                await instance_obj.save_with_fault(self.rt.db, instance_uuid, exc=exc, host=None,
                                                   **state_machine.step_save("unshelve.no_valid_host"))
            await actions.finish_action(self.rt.db, ctx, instance_uuid, message="Error")
            return
        try:
            await instance_obj.save(self.rt.db, instance_uuid, **state_machine.step_save(
                "unshelve.scheduled", host=selection["host"], node=selection["node"],
                availability_zone=selection["availability_zone"]))
        except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
            await allocations.release(self.rt.db, instance_uuid)
            await actions.event_finish(self.rt.db, event_id, result="Error", details="instance deleted meanwhile")
            return
        await actions.event_finish(self.rt.db, event_id)
        await self.compute_rpcapi.unshelve_instance(ctx, selection["host"], instance_uuid, node=selection["node"])

    async def migrate_server(self, ctx, instance_uuid: str, request_spec: dict, migration: dict) -> None:
        """Resize or cold migration: schedule the destination, hand it the server (conductor/migrate.py)."""
        from nefos.control.conductor import migrate
        await migrate.migrate_server(self, ctx, instance_uuid, request_spec, migration)

    async def live_migrate_instance(self, ctx, instance_uuid: str, request_spec: dict, migration: dict,
                                    forced_host: str | None = None) -> None:
        """Live migration: check the hosts, claim on the destination, cast it to the source."""
        from nefos.control.conductor import live_migrate
        await live_migrate.live_migrate(self, ctx, instance_uuid, request_spec, migration, forced_host)

    async def evacuate_instance(self, ctx, instance_uuid: str, request_spec: dict, migration: dict,
                                new_pass: str | None = None) -> None:
        """Evacuation (Nova's rebuild_instance with recreate): schedule, cast it to the destination
        with the guest's new password (None: the guest keeps the one it has)."""
        from nefos.control.conductor import evacuate
        await evacuate.evacuate_instance(self, ctx, instance_uuid, request_spec, migration, new_pass)
