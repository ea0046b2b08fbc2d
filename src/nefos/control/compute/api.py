"""The compute API layer (Nova's ``nova.compute.api.API``), between the REST API and the services.

``create`` validates the request against flavors, images, key pairs and
networks, then in ONE transaction consumes quota and writes the instance
records, their block device mappings, group memberships and ``create``
actions — so a failure leaves nothing behind — and finally hands the build
to the conductor. Actions check vm_state/task_state (409 otherwise), move
task_state with a compare-and-swap, record the action and cast to the host.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import logging
import re
import uuid as uuidlib

from sqlalchemy import func, select

from nefos import exceptions
from nefos.control.compute import (block_devices, disk_config, flavors as flavors_mod, image_properties, quota_sets,
                           regex_filters as regex_filters_mod)
from nefos.control.compute import delete as delete_api
from nefos.control.compute.services import COMPUTE_BINARY
from nefos.clients.compute import ComputeRPCAPI
from nefos.clients.conductor import ConductorAPI
from nefos.db import listing
from nefos.db.models import Instance, InstanceFault
from nefos.db.retry import retried
from nefos.objects import actions, build_requests, instance as instance_obj, quotas, server_groups
from nefos.model import admin_password, state_machine, states
from nefos.control.compute.authorization import authorize

LOG = logging.getLogger(__name__)

# The server fields an update or a rebuild may set, and the instance columns they are kept in.
_FIELD_COLUMNS = {"name": "display_name", "description": "display_description", "hostname": "hostname",
                  "access_ip_v4": "access_ip_v4", "access_ip_v6": "access_ip_v6",
                  "auto_disk_config": "auto_disk_config"}


def _columns_of(updates: dict, *more: str) -> dict:
    """The instance column values of the server fields in ``updates`` (and the fields ``more``)."""
    columns = dict(_FIELD_COLUMNS, **{field: field for field in more})
    return {columns[field]: value for field, value in updates.items() if field in columns}

_ANY = object()  # unshelve's availability zone, when none was given
RPC_NAMES = {"stop": "stop", "start": "start", "reboot_soft": "reboot", "reboot_hard": "reboot",
             "pause": "pause", "unpause": "unpause", "suspend": "suspend", "resume": "resume"}


def _visible(ctx, instance: dict) -> bool:
    return ctx.is_admin or instance.get("project_id") == ctx.project_id


class ComputeAPI:
    def __init__(self, rt, network_api, image_api):
        self.rt = rt
        self.network_api = network_api
        self.image_api = image_api
        self.conductor = ConductorAPI(rt.bus)
        self.compute_rpcapi = ComputeRPCAPI(rt.bus)

    # Create ----------------------------------------------------------------------
    def _parse_availability_zone(self, ctx, az: str | None) -> tuple[str | None, str | None]:
        if not az:
            return None, None
        zone, _, rest = az.partition(":")
        host = rest.partition(":")[0] or None
        if host:
            authorize(ctx, "os_compute_api:servers:create:forced_host")
        return zone or None, host

    async def _check_availability_zone(self, zone: str | None, host: str | None) -> None:
        if not zone and not host:
            return  # nothing asked for: the scheduler picks among every zone
        from nefos.control.compute import availability_zones
        available, _unavailable, services = await availability_zones.zones(self.rt.db, self.rt.cfg)
        # As Nova: the zone must have an enabled service (its hosts' aggregate zone or the default),
        # unless a host is forced (the zone is then not checked).
        if zone and not host and zone not in available:
            raise exceptions.Invalid("The requested availability zone is not available")
        if host and host not in {svc["host"] for svc in services if svc["binary"] == COMPUTE_BINARY}:
            raise exceptions.Invalid(f"Compute host {host} could not be found.")

    async def _check_requested_destination(self, host: str | None, node: str | None) -> None:
        """2.74: a requested host and/or node must exist (400), as Nova checks before scheduling."""
        from nefos.db.models import ComputeNode
        q = select(ComputeNode.host).where(ComputeNode.deleted == 0)
        if host:
            q = q.where(ComputeNode.host == host)
        if node:
            q = q.where(ComputeNode.hypervisor_hostname == node)
        async with self.rt.db.reader() as s:
            found = (await s.execute(q.limit(1))).first()
        if found is None:
            if host and node:
                raise exceptions.Invalid(f"Compute host {host} with node {node} could not be found.")
            raise exceptions.Invalid(f"Compute host {host or node} could not be found.")

    async def _load_group(self, ctx, hints: dict) -> dict | None:
        group_uuid = (hints or {}).get("group")
        if not group_uuid:
            return None
        try:
            group = await server_groups.get_group(self.rt.db, group_uuid)
        except exceptions.NotFound:
            raise exceptions.Invalid(f"Invalid server group {group_uuid}: not found")
        if not ctx.is_admin and group.get("project_id") != ctx.project_id:
            raise exceptions.Invalid(f"Invalid server group {group_uuid}: not found")
        return group

    async def create(self, ctx, *, name: str, image_ref: str | None, flavor_ref: str,
                     min_count: int = 1, max_count: int = 1, requested_networks=None,
                     security_groups: list[str] | None = None, availability_zone: str | None = None,
                     metadata: dict | None = None, key_name: str | None = None,
                     user_data: str | None = None, admin_pass: str | None = None,
                     scheduler_hints: dict | None = None, description: str | None = None,
                     access_ip_v4: str | None = None, access_ip_v6: str | None = None,
                     config_drive: str | None = None,
                     local_disks: list[dict] | None = None, tags: list[str] | None = None,
                     trusted_certs: list[str] | None = None, requested_host: str | None = None,
                     requested_node: str | None = None, hostname: str | None = None,
                     auto_disk_config: bool | None = None,
                     injected_files: list[dict] | None = None) -> tuple[list[dict], str]:
        if hostname and max_count > 1:  # 2.90: a hostname for one server only
            raise exceptions.Invalid("Unable to allocate a single hostname to multiple instances")
        flavor = await flavors_mod.get_by_flavor_id(self.rt.db, flavor_ref, ctx)
        if flavor.get("disabled"):
            raise exceptions.FlavorNotFound(flavor_id=flavor_ref)
        if not image_ref:
            raise exceptions.ValidationError("Block Device Mapping is Invalid: Boot sequence for the "
                                             "instance and image/block device mapping combination is not valid.")
        image = await self._check_image(ctx, image_ref, flavor)
        auto_disk_config = disk_config.for_image(image, auto_disk_config)
        if local_disks is not None:
            block_devices.check_local_disks(flavor, local_disks)
        zone, forced_host = self._parse_availability_zone(ctx, availability_zone)
        await self._check_availability_zone(zone, forced_host)
        if requested_host or requested_node:
            await self._check_requested_destination(requested_host, requested_node)
        key_name, key_data = await self._key_pair(ctx, key_name)
        if user_data:
            try:
                base64.b64decode("".join(user_data.split()), validate=True)  # line breaks allowed
            except ValueError:
                raise exceptions.ValidationError("Invalid input for field/attribute user_data: "
                                                 "user data needs to be valid base 64.")
        metadata = metadata or {}
        await quota_sets.check_injected_files(self.rt.db, self.rt.cfg, ctx.project_id, injected_files or [])
        security_groups = security_groups or ["default"]
        group = await self._load_group(ctx, scheduler_hints or {})
        if requested_networks not in (None, "auto", "none") and max_count > 1:
            for req in requested_networks:
                if req.get("port"):
                    raise exceptions.Invalid("Unable to launch multiple instances with a single "
                                             "configured port ID. Please launch your instance one by one "
                                             "with different ports.")
                if req.get("fixed_ip"):
                    raise exceptions.Invalid("max_count cannot be greater than 1 if an fixed_ip is specified.")
        allowed = await self.network_api.validate_networks(ctx, requested_networks, max_count)
        await self.network_api.validate_security_groups(ctx, security_groups)
        if allowed < min_count:
            raise exceptions.OverQuota("Maximum number of ports exceeded", overs=["ports"])
        max_count = min(max_count, allowed)

        reservation_id = f"r-{uuidlib.uuid4().hex[:8]}"
        count = await self._fit_quota(ctx, flavor, min_count, max_count, metadata)
        flavor_snapshot = {k: flavor[k] for k in ("id", "flavorid", "name", "memory_mb", "vcpus", "root_gb",
                                                  "ephemeral_gb", "swap", "rxtx_factor", "extra_specs",
                                                  "description", "is_public")}
        uuids = [str(uuidlib.uuid4()) for _ in range(count)]
        if group is not None:
            # The members known at scheduling time (including these new ones) drive the group filters.
            group = dict(group, members=[*group.get("members", []), *uuids])
        request_spec = {
            "flavor": flavor_snapshot, "image": {"id": image["id"], "disk_format": image.get("disk_format"),
                                            "properties": image.get("properties", {})},
            "project_id": ctx.project_id, "user_id": ctx.user_id, "availability_zone": zone,
            "force_hosts": [forced_host] if forced_host else [], "scheduler_hints": scheduler_hints or {},
            "instance_group": group, "num_instances": count,
        }
        if requested_host or requested_node:
            request_spec["requested_destination"] = {"host": requested_host, "node": requested_node}
        build_args = {"requested_networks": requested_networks, "security_groups": security_groups,
                      "image": request_spec["image"]}

        async def create_all() -> tuple[list[dict], object]:
            created: list[dict] = []
            async with self.rt.db.transaction() as s:
                member_limit = (await server_groups.member_limit(s, self.rt.cfg, ctx.project_id)
                                if group is not None else None)
                deltas = {"instances": count, "cores": count * flavor["vcpus"], "ram": count * flavor["memory_mb"]}
                await quotas.consume(s, self.rt.cfg, ctx.project_id, deltas)
                for index, uuid in enumerate(uuids):
                    display_name = name if count == 1 else f"{name}-{index + 1}"
                    instance = await instance_obj.create(s, dict(
                        uuid=uuid, project_id=ctx.project_id, user_id=ctx.user_id, display_name=display_name,
                        display_description=description, hostname=hostname or _hostname(display_name),
                        vm_state=states.BUILDING, task_state=state_machine.operation(actions.CREATE).sets,
                        power_state=states.NOSTATE,
                        availability_zone=zone, instance_type_id=flavor["id"], flavor=flavor_snapshot,
                        vcpus=flavor["vcpus"], memory_mb=flavor["memory_mb"], root_gb=flavor["root_gb"],
                        ephemeral_gb=flavor["ephemeral_gb"], image_ref=image["id"], key_name=key_name,
                        key_data=key_data, user_data=user_data, config_drive=config_drive or "",
                        auto_disk_config=auto_disk_config,
                        metadata=metadata,
                        system_metadata=admin_password.kept(image_properties.from_image(image, flavor), admin_pass),
                        security_groups=security_groups,
                        network_info=[], requested_networks=_requested_networks_record(requested_networks),
                        reservation_id=reservation_id, launch_index=index, access_ip_v4=access_ip_v4,
                        access_ip_v6=access_ip_v6, tags=list(dict.fromkeys(tags or [])),
                        trusted_certs=trusted_certs or None, scheduler_hints=scheduler_hints or {},
                        pinned_availability_zone=zone, injected_files=injected_files or None))
                    await s.execute(block_devices.INSERT, block_devices.for_new_server(uuid, image["id"], flavor, local_disks))
                    if group is not None:
                        await server_groups.add_member(s, group["uuid"], uuid, limit=member_limit)
                    await actions.record_action(self.rt.db, ctx, uuid, actions.CREATE, session=s)
                    created.append(instance)
                build_request = await build_requests.add(s, ctx, uuids, request_spec, build_args)
            return created, build_request

        # One transaction; a deadlock between concurrent creates runs it again.
        created, build_request = await retried(create_all)
        await build_requests.hand_off(self.rt.db, self.conductor, ctx, uuids, request_spec, build_args, build_request)
        return created, reservation_id

    async def _key_pair(self, ctx, key_name: str | None) -> tuple[str | None, str | None]:
        """(name, public key) of the caller's key pair ``key_name`` (400 when there is none)."""
        if not key_name:
            return None, None
        from nefos.control.compute import keypairs
        try:
            return key_name, (await keypairs.get_keypair(self.rt.db, ctx.user_id, key_name))["public_key"]
        except exceptions.KeypairNotFound:
            raise exceptions.Invalid("Invalid key_name provided.") from None

    async def _check_image(self, ctx, image_ref: str, flavor: dict) -> dict:
        """The image, if it can boot ``flavor`` (400 otherwise).

        Its ``kernel_id`` and ``ramdisk_id`` are looked up as the caller too (Nova's
        ``_handle_kernel_and_ramdisk``): another project's private kernel is as missing as
        another project's private image (``ImageNotFound``)."""
        image = await self.image_api.get(ctx, image_ref)
        if image.get("status") != "active":
            raise exceptions.Invalid(f"Image {image_ref} is not active.")
        if flavor["memory_mb"] < (image.get("min_ram") or 0):
            raise exceptions.Invalid("Flavor's memory is too small for requested image.")
        if flavor["root_gb"] and flavor["root_gb"] < (image.get("min_disk") or 0):
            raise exceptions.Invalid("Flavor's disk is too small for requested image.")
        await self.image_api.check_kernel_and_ramdisk(ctx, image)
        return image

    async def _fit_quota(self, ctx, flavor: dict, min_count: int, max_count: int, metadata: dict) -> int:
        """How many of min..max instances fit the quota now (the consume re-checks atomically)."""
        if max_count == min_count and not metadata:
            return max_count  # nothing to fit: the consume checks the count atomically
        async with self.rt.db.reader() as s:
            limit, used = await quotas.limits_and_usages(s, self.rt.cfg, ctx.project_id)
        if limit["metadata_items"] >= 0 and len(metadata) > limit["metadata_items"]:
            raise exceptions.OverQuota(f"Quota exceeded for metadata_items: Requested {len(metadata)}, "
                                       f"but the limit is {limit['metadata_items']}", overs=["metadata_items"])
        per = {"instances": 1, "cores": flavor["vcpus"], "ram": flavor["memory_mb"]}
        fit = max_count
        for resource, amount in per.items():
            if limit[resource] < 0 or not amount:
                continue
            fit = min(fit, (limit[resource] - used[resource]) // amount)
        return max(min_count, min(fit, max_count))

    # Read ------------------------------------------------------------------------
    async def get(self, ctx, uuid: str) -> dict:
        instance = await instance_obj.get(self.rt.db, uuid)
        if not _visible(ctx, instance):
            raise exceptions.InstanceNotFound(instance_id=uuid)
        faults = await self.latest_faults([instance])
        instance["fault"] = faults.get(uuid)
        return instance

    async def list(self, ctx, *, filters: dict, limit: int | None, marker: str | None,
                   sort_keys: list[str] | None = None, sort_dirs: list[str] | None = None) -> list[dict]:
        q = select(instance_obj.INSTANCES)
        since, before = filters.get("changes-since"), filters.get("changes-before")
        if filters.get("deleted"):
            q = q.where(Instance.deleted != 0)
        elif since is None and before is None:
            # Nova's changes-since (and changes-before) also report servers deleted in the window.
            q = q.where(Instance.deleted == 0)
        if since is not None:
            q = q.where(func.coalesce(Instance.updated_at, Instance.created_at) >= since)
        if before is not None:
            q = q.where(func.coalesce(Instance.updated_at, Instance.created_at) <= before)
        if not (ctx.is_admin and filters.get("all_tenants")):
            q = q.where(Instance.project_id == ctx.project_id)
        elif filters.get("project_id"):
            q = q.where(Instance.project_id == filters["project_id"])
        if filters.get("status"):
            vm_states, task_states = states.task_and_vm_states_from_statuses(filters["status"])
            q = q.where(Instance.vm_state.in_(vm_states or ["__none__"]))
            if task_states is not None:
                q = q.where(Instance.task_state.in_(task_states))
        for key, column in (("vm_state", Instance.vm_state), ("task_state", Instance.task_state),
                            ("host", Instance.host), ("node", Instance.node),
                            ("reservation_id", Instance.reservation_id), ("image", Instance.image_ref),
                            ("key_name", Instance.key_name), ("availability_zone", Instance.availability_zone),
                            ("user_id", Instance.user_id)):
            if filters.get(key) is not None:
                q = q.where(column == filters[key])
        if filters.get("flavor"):
            try:
                flavor = await flavors_mod.get_by_flavor_id(self.rt.db, filters["flavor"], ctx)
            except exceptions.FlavorNotFound:
                return []  # as Nova: an unknown flavor filter matches nothing, it is not an error
            q = q.where(Instance.instance_type_id == flavor["id"])
        if filters.get("locked") is not None:
            q = q.where(Instance.locked == filters["locked"])
        name_regex = filters.get("name")
        ip_regexes = {4: filters.get("ip"), 6: filters.get("ip6")}
        tag_filters = {k: filters[k] for k in _TAG_FILTERS if filters.get(k)}
        regex_filters = {k: filters[k] for k in _REGEX_FILTERS if filters.get(k) is not None}
        post_filtered = bool(name_regex or ip_regexes[4] or ip_regexes[6] or tag_filters or regex_filters)
        order = instance_obj.list_sort_order(sort_keys or [], sort_dirs or [])
        if marker:
            async with self.rt.db.reader() as s:
                mrow = (await s.execute(select(*listing.marker_values(order)).where(
                    Instance.uuid == marker))).mappings().one_or_none()
            if mrow is None:
                raise exceptions.ValidationError(f"marker [{marker}] not found")
        q = listing.paged(q, order, marker=dict(mrow) if marker else None,
                          limit=limit if not post_filtered else None)
        async with self.rt.db.reader() as s:
            rows = (await s.execute(q)).mappings().all()
        result = [instance_obj.mapping_to_dict(r) for r in rows]
        if tag_filters:
            result = [i for i in result if _tags_match(i.get("tags") or [], tag_filters)]
        # Nova matches these columns with the database's REGEXP (LIKE on SQLite) on their text.
        result = await regex_filters_mod.apply(result, name=name_regex, ips=ip_regexes, columns=regex_filters)
        if post_filtered and limit is not None:
            result = result[:limit]
        faults = await self.latest_faults([i for i in result if i["vm_state"] == states.ERROR])
        for i in result:
            i["fault"] = faults.get(i["uuid"])
        return result

    async def latest_faults(self, instances: list[dict]) -> dict[str, dict]:
        uuids = [i["uuid"] for i in instances if i.get("vm_state") == states.ERROR]
        if not uuids:
            return {}
        async with self.rt.db.reader() as s:
            rows = (await s.execute(select(InstanceFault).where(InstanceFault.instance_uuid.in_(uuids))
                                    .order_by(InstanceFault.id))).scalars().all()
        return {r.instance_uuid: r.to_dict() for r in rows}

    # Update / delete -------------------------------------------------------------
    def check_lock(self, ctx, instance: dict) -> None:
        if instance.get("locked") and not ctx.is_admin:
            raise exceptions.InstanceIsLocked(instance_uuid=instance["uuid"])

    async def update(self, ctx, uuid: str, updates: dict, **pin) -> dict:
        """Change the server's fields in ``updates``; ``pinned_availability_zone=`` (2.104) unpins
        (None) or re-pins it, saved with the other fields in one write."""
        instance = await self.get(ctx, uuid)
        self.check_lock(ctx, instance)
        values = _columns_of(updates)  # a new name keeps the hostname (as Nova): only 2.90's hostname does
        if "pinned_availability_zone" in pin:
            values.update(self._repinned(instance, pin["pinned_availability_zone"]))
        if values:
            instance = await instance_obj.save(self.rt.db, uuid, values)
        return await self.get(ctx, uuid)

    def _repinned(self, instance: dict, requested: str | None) -> dict:
        """Nova's 2.104 rules: null unpins; a zone re-pins an unpinned server only to the zone it is
        in now (409 otherwise), and a pinned server must be unpinned before another zone (409)."""
        current = instance.get("pinned_availability_zone")
        if requested is None:
            return {"pinned_availability_zone": None} if current is not None else {}
        if current is not None:
            if requested != current:
                raise exceptions.Conflict("Cannot change pinned availability zone directly. Unpin first "
                                          "by setting pinned_availability_zone to null.")
            return {}
        # The zone the server is shown in (OS-EXT-AZ:availability_zone): its host's, set on scheduling.
        zone = instance.get("availability_zone") or (
            self.rt.cfg.default_availability_zone if instance.get("host") else None)
        if requested != zone:
            raise exceptions.Conflict(f"Server can only be pinned to its current availability zone "
                                      f"'{zone}', but '{requested}' was requested.")
        return {"pinned_availability_zone": requested}

    async def delete(self, ctx, uuid: str) -> None:
        instance = await self.get(ctx, uuid)
        self.check_lock(ctx, instance)
        await actions.record_action(self.rt.db, ctx, uuid, actions.DELETE)
        try:
            await delete_api.delete(self, ctx, uuid, instance)
        except BaseException:  # not accepted (a 503, say): its action is not left open
            with contextlib.suppress(Exception):
                await actions.finish_action(self.rt.db, ctx, uuid, message="Error", unless_finished=True)
            raise

    async def host_is_up(self, host: str, is_up) -> bool:
        from nefos.db.models import Service
        async with self.rt.db.reader() as s:
            svc = (await s.execute(select(Service).where(Service.host == host, Service.binary == COMPUTE_BINARY,
                                                         Service.deleted == 0))).scalar_one_or_none()
        return svc is not None and is_up(svc, self.rt.cfg)

    # Actions ---------------------------------------------------------------------
    async def power_action(self, ctx, uuid: str, action: str) -> None:
        """stop, start, reboot_soft, reboot_hard, pause, unpause, suspend, resume."""
        kwargs = {"reboot_type": "HARD" if action == "reboot_hard" else "SOFT"} if action.startswith("reboot") else {}
        async with self.guarded_action(ctx, uuid, action) as instance:
            await self.compute_rpcapi.power_action(ctx, instance["host"], RPC_NAMES[action], uuid, **kwargs)

    @contextlib.asynccontextmanager
    async def guarded_action(self, ctx, uuid: str, operation: str):
        """``_begin_action``, then the block hands the work to a host: when the block fails the
        task_state goes back and the action is recorded as failed (Nova's ``reverts_task_state``),
        so no task_state outlives a request that never reached a host."""
        instance = await self._begin_action(ctx, uuid, operation)
        try:
            yield instance
        except BaseException:
            await self._revert_task_state(ctx, uuid, state_machine.operation(operation).sets)
            raise

    async def _begin_action(self, ctx, uuid: str, operation: str) -> dict:
        """Check that the server's states allow ``operation`` (the state table's; 409 otherwise),
        move its task_state to the one the operation sets (compare-and-swap) and record the action;
        returns the server."""
        op = state_machine.operation(operation)
        instance = await self.get(ctx, uuid)
        self.check_lock(ctx, instance)
        state_machine.check(operation, instance)
        try:
            await instance_obj.save(self.rt.db, uuid, {"task_state": op.sets},
                                    **state_machine.allowed_from(operation))
        except (exceptions.UnexpectedTaskStateError, exceptions.InstanceInvalidState):
            current = await instance_obj.get(self.rt.db, uuid)
            raise exceptions.InstanceInvalidState(action=op.name, instance_uuid=uuid,
                                                  attr="task_state", state=current["task_state"])
        await actions.record_action(self.rt.db, ctx, uuid, op.action)
        return instance

    async def _revert_task_state(self, ctx, uuid: str, task_state: str) -> None:
        """Undo ``_begin_action`` when the request fails before reaching the host."""
        with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
            await instance_obj.save(self.rt.db, uuid, {"task_state": None}, expected_task_state=[task_state])
        await actions.finish_action(self.rt.db, ctx, uuid, message="Error")

    async def snapshot(self, ctx, uuid: str, name: str, metadata: dict | None = None, *,
                       backup_type: str | None = None, rotation: int | None = None) -> dict:
        """createImage, or createBackup with ``backup_type``: the image record now, its data from the host."""
        backup = backup_type is not None
        async with self.guarded_action(ctx, uuid, actions.BACKUP if backup else actions.CREATE_IMAGE) as instance:
            extra = dict(metadata or {}, **({"backup_type": backup_type} if backup else {}))
            image = await self.image_api.create_snapshot(ctx, instance, name, "backup" if backup else "snapshot",
                                                         extra)
            try:
                if backup:
                    await self.compute_rpcapi.backup_instance(ctx, instance["host"], uuid, image["id"],
                                                              backup_type, rotation)
                else:
                    await self.compute_rpcapi.snapshot_instance(ctx, instance["host"], uuid, image["id"])
            except BaseException:
                with contextlib.suppress(exceptions.NotFound):  # no host will ever upload its data
                    await self.image_api.delete(ctx.elevated(), image["id"])
                raise
        return image

    async def shelve(self, ctx, uuid: str) -> None:
        async with self.guarded_action(ctx, uuid, actions.SHELVE) as instance:
            image = await self.image_api.create_snapshot(ctx, instance, f"{instance['display_name']}-shelved",
                                                         "snapshot")
            try:
                await self.compute_rpcapi.shelve_instance(ctx, instance["host"], uuid, image["id"])
            except BaseException:
                with contextlib.suppress(exceptions.NotFound):
                    await self.image_api.delete(ctx.elevated(), image["id"])
                raise

    async def shelve_offload(self, ctx, uuid: str) -> None:
        async with self.guarded_action(ctx, uuid, actions.SHELVE_OFFLOAD) as instance:
            await self.compute_rpcapi.shelve_offload_instance(ctx, instance["host"], uuid)

    async def unshelve(self, ctx, uuid: str, new_az=_ANY, host: str | None = None) -> None:
        """Unshelve; ``new_az`` (2.77; None unpins, 2.91) and ``host`` (2.91, admin) only for a
        SHELVED_OFFLOADED server (409 otherwise), as Nova: the zone must be available (400), the host
        a compute host (400) in the zone the server is pinned to after the unshelve (409). The server
        is then pinned to that zone (``pinned_availability_zone``, Nova's request spec zone)."""
        az_passed = new_az is not _ANY
        instance = await self.get(ctx, uuid)
        self.check_lock(ctx, instance)
        state_machine.check_vm_state(actions.UNSHELVE, instance)  # its task_state: once the image is read
        if (az_passed or host) and instance["vm_state"] != states.SHELVED_OFFLOADED:
            raise exceptions.UnshelveInstanceInvalidState(instance_uuid=uuid, state=instance["vm_state"])
        if az_passed and new_az:
            from nefos.control.compute import availability_zones
            available, _unavailable, _services = await availability_zones.zones(self.rt.db, self.rt.cfg)
            if new_az not in available:
                raise exceptions.Invalid("The requested availability zone is not available")
        pinned = new_az if az_passed else instance.get("pinned_availability_zone")
        if host:
            authorize(ctx, "os_compute_api:os-shelve:unshelve_to_host",
                      {"user_id": instance["user_id"], "project_id": instance["project_id"]})
            host_zone = await self.host_zone(host)
            if pinned is not None and host_zone != pinned:
                raise exceptions.UnshelveHostNotInAZ(host=host, availability_zone=pinned)
        image_id = (instance.get("system_metadata") or {}).get("shelved_image_id")
        image = {"id": image_id, "properties": {}}
        if instance["vm_state"] == states.SHELVED_OFFLOADED:
            with contextlib.suppress(exceptions.ImageNotFound):
                image = await self.image_api.get(ctx.elevated(), image_id)
            try:  # the snapshot's kernel and ramdisk (its owner may have changed them) as the caller
                await self.image_api.check_kernel_and_ramdisk(ctx, image)
            except exceptions.ImageNotFound as exc:
                raise exceptions.Invalid(
                    f"Unshelve attempted but the image {exc.kwargs.get('image_id')} cannot be found.") from None
        async with self.guarded_action(ctx, uuid, actions.UNSHELVE) as instance:
            if az_passed:
                await instance_obj.save(self.rt.db, uuid, {"pinned_availability_zone": pinned})
            if instance["vm_state"] == states.SHELVED:
                await self.compute_rpcapi.unshelve_instance(ctx, instance["host"], uuid)
                return
            request_spec = {
                "flavor": instance.get("flavor"), "image": {"id": image_id, "disk_format": image.get("disk_format"),
                                                   "properties": image.get("properties", {})},
                "project_id": instance["project_id"], "user_id": instance["user_id"],
                "availability_zone": pinned, "force_hosts": [], "scheduler_hints": {},
                "instance_group": None, "num_instances": 1,
            }
            if host:
                request_spec["requested_destination"] = {"host": host, "node": None}
            await self.conductor.unshelve_instance(ctx, uuid, request_spec)

    async def host_zone(self, host: str) -> str:
        """The availability zone of compute host ``host`` (400 when there is no such compute host)."""
        from nefos.control.compute.aggregates import host_zones
        from nefos.db.models import ComputeNode, Service
        async with self.rt.db.reader() as s:
            node = (await s.execute(select(ComputeNode.host).where(
                ComputeNode.host == host, ComputeNode.deleted == 0).limit(1))).first()
            zone = (await s.execute(select(Service.availability_zone).where(
                Service.host == host, Service.binary == COMPUTE_BINARY, Service.deleted == 0))).scalar()
            aggregate_zone = (await host_zones(s)).get(host)
        if node is None:
            raise exceptions.Invalid(f"Compute host {host} could not be found.")
        return aggregate_zone or zone or self.rt.cfg.default_availability_zone

    async def rebuild(self, ctx, uuid: str, image_ref: str, updates: dict) -> dict:
        """Rebuild the server from ``image_ref`` (its ports and IPs kept); ``updates``: name,
        description, metadata, access_ip_v4/6, hostname (2.90) applied now, as Nova does, the
        new image's properties in the system metadata (2.98), and ``admin_pass`` for the guest."""
        instance = await self.get(ctx, uuid)
        self.check_lock(ctx, instance)
        flavor = instance.get("flavor") or instance
        try:
            image = await self._check_image(ctx, image_ref, flavor)
        except exceptions.ImageNotFound:
            raise exceptions.Invalid("Cannot find image for rebuild") from None
        auto_disk = disk_config.for_image(image, updates.get("auto_disk_config"))
        files = updates.get("injected_files") or []
        await quota_sets.check_injected_files(self.rt.db, self.rt.cfg, instance["project_id"], files)
        async with self.guarded_action(ctx, uuid, actions.REBUILD) as instance:
            # 2.98: the new image's properties replace the old one's in the system metadata.
            system_metadata = admin_password.kept(
                image_properties.replaced(instance.get("system_metadata"), image, flavor), updates.get("admin_pass"))
            values: dict = {"image_ref": image_ref, "system_metadata": system_metadata,
                            "injected_files": files or None}
            if "key_name" in updates:  # 2.54: a new key pair, or none
                values["key_name"], values["key_data"] = await self._key_pair(ctx, updates["key_name"])
            # 2.57, 2.63: user_data and trusted_certs replaced (None clears); 2.90: hostname.
            values.update(_columns_of(updates, "metadata", "user_data", "trusted_certs"))
            values["auto_disk_config"] = auto_disk  # the new image's unless asked (Nova's rebuild)
            await instance_obj.save(self.rt.db, uuid, **state_machine.step_save("rebuild.image_set", **values))
            await self.compute_rpcapi.rebuild_instance(ctx, instance["host"], uuid, image_ref,
                                                      was_stopped=instance["vm_state"] == states.STOPPED)
        return await self.get(ctx, uuid)

    # Resize and cold migration (nefos.control.compute.resize) ---------------------------------------
    async def resize(self, ctx, uuid: str, flavor_id: str, auto_disk_config: bool | None = None) -> None:
        from nefos.control.compute import resize
        await resize.request_resize(self, ctx, uuid, flavor_id=flavor_id, auto_disk_config=auto_disk_config)

    async def migrate(self, ctx, uuid: str, host: str | None = None) -> None:
        from nefos.control.compute import resize
        await resize.request_resize(self, ctx, uuid, host=host)

    async def live_migrate(self, ctx, uuid: str, host: str | None, *, block_migration: bool | None,
                           force: bool | None, async_: bool) -> None:
        from nefos.control.compute import live_migration
        await live_migration.request(self, ctx, uuid, host=host, block_migration=block_migration, force=force,
                                     async_=async_)

    async def evacuate(self, ctx, uuid: str, host: str | None, *, force: bool | None,
                       target_state: str | None, admin_password: str | None = None) -> None:
        from nefos.control.compute import evacuate as evacuate_api
        await evacuate_api.request(self, ctx, uuid, host=host, force=force, target_state=target_state,
                                   admin_password=admin_password)

    async def confirm_resize(self, ctx, uuid: str) -> None:
        from nefos.control.compute import resize
        await resize.confirm(self, ctx, uuid)

    async def revert_resize(self, ctx, uuid: str) -> None:
        from nefos.control.compute import resize
        await resize.revert(self, ctx, uuid)

    async def change_security_group(self, ctx, uuid: str, name: str, *, add: bool) -> None:
        """addSecurityGroup / removeSecurityGroup: on the server's ports (where they take effect), and on
        the server's list of group names (what the API shows)."""
        instance = await self.get(ctx, uuid)
        await self.network_api.change_instance_security_group(ctx, instance, name, add=add)
        names = [n for n in instance.get("security_groups") or [] if n != name]
        await instance_obj.save(self.rt.db, uuid, {"security_groups": [*names, name] if add else names})

    async def set_admin_password(self, ctx, uuid: str, password: str) -> None:
        async with self.guarded_action(ctx, uuid, actions.CHANGE_PASSWORD) as instance:
            await self.compute_rpcapi.set_admin_password(ctx, instance["host"], uuid, password)

    async def get_console_output(self, ctx, uuid: str, tail_length: int | None = None) -> str:
        """The guest's serial console log from its compute host (os-getConsoleOutput)."""
        instance = await self.get(ctx, uuid)
        if not instance.get("host"):
            raise exceptions.InstanceNotReady(instance_id=uuid)
        return await self.compute_rpcapi.get_console_output(ctx, instance["host"], uuid, tail_length)

    async def lock(self, ctx, uuid: str, reason: str | None = None) -> None:
        await self.get(ctx, uuid)
        await actions.record_action(self.rt.db, ctx, uuid, actions.LOCK)
        await instance_obj.save(self.rt.db, uuid, {"locked": True, "locked_reason": reason,
                                                   "locked_by": "admin" if ctx.is_admin else "owner"})
        await actions.finish_action(self.rt.db, ctx, uuid)

    async def unlock(self, ctx, uuid: str) -> None:
        instance = await self.get(ctx, uuid)
        if instance.get("locked") and instance.get("locked_by") == "admin" and not ctx.is_admin:
            authorize(ctx, "os_compute_api:os-lock-server:unlock:unlock_override")
        await actions.record_action(self.rt.db, ctx, uuid, actions.UNLOCK)
        await instance_obj.save(self.rt.db, uuid, {"locked": False, "locked_reason": None, "locked_by": None})
        await actions.finish_action(self.rt.db, ctx, uuid)

    # Metadata --------------------------------------------------------------------
    async def update_metadata(self, ctx, uuid: str, metadata: dict, *, replace: bool) -> dict:
        instance = await self.get(ctx, uuid)
        self.check_lock(ctx, instance)
        new = dict(metadata) if replace else {**(instance.get("metadata") or {}), **metadata}
        async with self.rt.db.reader() as s:
            limit = (await quotas.limits(s, self.rt.cfg, instance["project_id"]))["metadata_items"]
        if limit >= 0 and len(new) > limit:
            raise exceptions.OverQuota(f"Quota exceeded for metadata_items: the limit is {limit}",
                                       overs=["metadata_items"])
        saved = await instance_obj.save(self.rt.db, uuid, {"metadata": new})
        return saved["metadata"]

    async def delete_metadata_item(self, ctx, uuid: str, key: str) -> None:
        instance = await self.get(ctx, uuid)
        self.check_lock(ctx, instance)
        metadata = dict(instance.get("metadata") or {})
        if key not in metadata:
            raise exceptions.NotFound("Metadata item was not found")
        metadata.pop(key)
        await instance_obj.save(self.rt.db, uuid, {"metadata": metadata})

    # Tags ------------------------------------------------------------------------
    async def set_tags(self, ctx, uuid: str, tags: list[str]) -> list[str]:
        """Replace the server's tags (2.26); 409 in a state Nova refuses tag changes in."""
        instance = await self.get(ctx, uuid)
        if instance["vm_state"] not in _TAGGABLE_VM_STATES:
            raise exceptions.InstanceInvalidState(action="update tags", instance_uuid=uuid, attr="vm_state",
                                                  state=instance["vm_state"])
        return (await instance_obj.save(self.rt.db, uuid, {"tags": tags}))["tags"]

    # Instance actions (nefos.objects.actions) -------------------------------------
    async def list_actions(self, ctx, uuid: str, *, limit: int | None = None, marker: str | None = None,
                           changes_since: dt.datetime | None = None,
                           changes_before: dt.datetime | None = None) -> list[dict]:
        await self._get_even_deleted(ctx, uuid)
        return await actions.list_actions(self.rt.db, uuid, limit=limit, marker=marker,
                                          changes_since=changes_since, changes_before=changes_before)

    async def get_action(self, ctx, uuid: str, request_id: str) -> dict:
        await self._get_even_deleted(ctx, uuid)
        return await actions.get_action(self.rt.db, uuid, request_id)

    async def _get_even_deleted(self, ctx, uuid: str) -> dict:
        instance = await instance_obj.get(self.rt.db, uuid, read_deleted=True)
        if not _visible(ctx, instance):
            raise exceptions.InstanceNotFound(instance_id=uuid)
        return instance


# Nova's states for tag changes (nova.api.openstack.compute.server_tags).
_TAGGABLE_VM_STATES = (states.ACTIVE, states.PAUSED, states.SHELVED, states.SHELVED_OFFLOADED, states.STOPPED,
                       states.SUSPENDED)
_TAG_FILTERS = ("tags", "tags-any", "not-tags", "not-tags-any")
# Filters Nova applies as regular expressions on the column's text (2.83 opens them to non-admins).
_REGEX_FILTERS = ("config_drive", "created_at", "launched_at", "terminated_at", "power_state", "progress",
                  "hostname")


def _tags_match(tags: list[str], filters: dict[str, list[str]]) -> bool:
    """Nova's tag filters (2.26): all of ``tags``, any of ``tags-any``, not all of ``not-tags``, none of
    ``not-tags-any``."""
    have = set(tags)
    if "tags" in filters and not set(filters["tags"]) <= have:
        return False
    if "tags-any" in filters and not set(filters["tags-any"]) & have:
        return False
    if "not-tags" in filters and set(filters["not-tags"]) <= have:
        return False
    if "not-tags-any" in filters and set(filters["not-tags-any"]) & have:
        return False
    return True


def _hostname(name: str) -> str:
    host = re.sub(r"[^a-z0-9-]+", "-", (name or "").lower()).strip("-")
    return host[:63] or "server"


def _requested_networks_record(requested_networks):
    if requested_networks in (None, "auto", "none"):
        return [{"special": requested_networks}] if requested_networks else None
    return list(requested_networks)
