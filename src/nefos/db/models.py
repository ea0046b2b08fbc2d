"""Database models for every service.

The schema is created only by the Alembic migrations in ``migrations/``;
``tests/test_migrations.py`` checks the migrations and these models agree.
Soft-deleted rows (instances, services, compute nodes) keep ``deleted = id``
so unique constraints can include ``deleted``, as Nova does.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import (
    JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text,
    UniqueConstraint, false as sa_false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from nefos.timeutils import utcnow  # noqa: F401  (the columns' default; re-exported)



class Base(DeclarativeBase):
    def to_dict(self) -> dict:
        return {c.key: getattr(self, c.key) for c in self.__mapper__.column_attrs}


class TimestampMixin:
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[dt.datetime | None] = mapped_column(DateTime, onupdate=utcnow)


# Compute -----------------------------------------------------------------------

class Instance(TimestampMixin, Base):
    __tablename__ = "instances"
    __table_args__ = (
        Index("ix_instances_project_deleted", "project_id", "deleted"),
        Index("ix_instances_host_deleted", "host", "deleted"),
        Index("ix_instances_vm_state_deleted", "vm_state", "deleted"),
        Index("ix_instances_reservation_id", "reservation_id"),
        Index("ix_instances_deleted_created", "deleted", "created_at", "id"),
        Index("ix_instances_deleted_at", "deleted_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, nullable=False)
    project_id: Mapped[str | None] = mapped_column(String(255))
    user_id: Mapped[str | None] = mapped_column(String(255))
    display_name: Mapped[str | None] = mapped_column(String(255))
    display_description: Mapped[str | None] = mapped_column(Text)
    hostname: Mapped[str | None] = mapped_column(String(255))
    vm_state: Mapped[str | None] = mapped_column(String(255))
    task_state: Mapped[str | None] = mapped_column(String(255))
    power_state: Mapped[int | None] = mapped_column(Integer)
    host: Mapped[str | None] = mapped_column(String(255))
    node: Mapped[str | None] = mapped_column(String(255))
    launched_on: Mapped[str | None] = mapped_column(String(255))
    availability_zone: Mapped[str | None] = mapped_column(String(255))
    instance_type_id: Mapped[int | None] = mapped_column(Integer)
    flavor: Mapped[dict | None] = mapped_column(JSON)  # snapshot taken at create
    vcpus: Mapped[int] = mapped_column(Integer, default=0)
    memory_mb: Mapped[int] = mapped_column(Integer, default=0)
    root_gb: Mapped[int] = mapped_column(Integer, default=0)
    ephemeral_gb: Mapped[int] = mapped_column(Integer, default=0)
    image_ref: Mapped[str | None] = mapped_column(String(255))
    key_name: Mapped[str | None] = mapped_column(String(255))
    key_data: Mapped[str | None] = mapped_column(Text)
    user_data: Mapped[str | None] = mapped_column(Text)
    config_drive: Mapped[str | None] = mapped_column(String(255))
    auto_disk_config: Mapped[bool | None] = mapped_column(Boolean)  # OS-DCF:diskConfig AUTO (else MANUAL)
    metadata_: Mapped[dict] = mapped_column("metadata", JSON, default=dict)
    system_metadata: Mapped[dict] = mapped_column(JSON, default=dict)
    security_groups: Mapped[list] = mapped_column(JSON, default=list)
    network_info: Mapped[list] = mapped_column(JSON, default=list)  # the info cache
    requested_networks: Mapped[list | None] = mapped_column(JSON)
    reservation_id: Mapped[str | None] = mapped_column(String(255))
    launch_index: Mapped[int] = mapped_column(Integer, default=0)
    access_ip_v4: Mapped[str | None] = mapped_column(String(39))
    access_ip_v6: Mapped[str | None] = mapped_column(String(39))
    locked: Mapped[bool] = mapped_column(Boolean, default=False)
    locked_by: Mapped[str | None] = mapped_column(String(255))
    locked_reason: Mapped[str | None] = mapped_column(Text)
    tags: Mapped[list | None] = mapped_column(JSON)  # server tags (2.26, on create from 2.52)
    trusted_certs: Mapped[list | None] = mapped_column(JSON)  # trusted_image_certificates (2.63)
    scheduler_hints: Mapped[dict | None] = mapped_column(JSON)  # as given on create (shown from 2.100)
    # The zone asked for on create or unshelve (Nova's request spec availability_zone; 2.96)
    pinned_availability_zone: Mapped[str | None] = mapped_column(String(255))
    # personality (before 2.57): [{"path", "contents" (base64)}], for the config drive and metadata service
    injected_files: Mapped[list | None] = mapped_column(JSON)
    progress: Mapped[int] = mapped_column(Integer, default=0)
    launched_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    terminated_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    deleted_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    deleted: Mapped[int] = mapped_column(Integer, default=0)
    cleaned: Mapped[bool] = mapped_column(Boolean, default=False)


class InstanceFault(Base):
    __tablename__ = "instance_faults"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    instance_uuid: Mapped[str] = mapped_column(String(36), index=True)
    code: Mapped[int] = mapped_column(Integer)
    message: Mapped[str | None] = mapped_column(String(255))
    details: Mapped[str | None] = mapped_column(Text)
    host: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)


class InstanceAction(TimestampMixin, Base):
    __tablename__ = "instance_actions"
    # finish_time: the conductor's pass over the actions nothing will finish reads only the open ones.
    __table_args__ = (Index("ix_instance_actions_uuid_request", "instance_uuid", "request_id"),
                      Index("ix_instance_actions_finish_time", "finish_time"))
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    action: Mapped[str] = mapped_column(String(255))
    instance_uuid: Mapped[str] = mapped_column(String(36))
    request_id: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[str | None] = mapped_column(String(255))
    project_id: Mapped[str | None] = mapped_column(String(255))
    start_time: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    finish_time: Mapped[dt.datetime | None] = mapped_column(DateTime)
    message: Mapped[str | None] = mapped_column(String(255))


class InstanceActionEvent(TimestampMixin, Base):
    __tablename__ = "instance_actions_events"
    # (host, finish_time): a restarting compute host ends the steps its killed process left open
    # there without reading every step the cloud ever recorded.
    __table_args__ = (Index("ix_instance_actions_events_host_finish_time", "host", "finish_time"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    action_id: Mapped[int] = mapped_column(ForeignKey("instance_actions.id", ondelete="CASCADE"), index=True)
    event: Mapped[str] = mapped_column(String(255))
    start_time: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    finish_time: Mapped[dt.datetime | None] = mapped_column(DateTime)
    result: Mapped[str | None] = mapped_column(String(255))
    traceback: Mapped[str | None] = mapped_column(Text)
    host: Mapped[str | None] = mapped_column(String(255))
    details: Mapped[str | None] = mapped_column(Text)


class Flavor(TimestampMixin, Base):
    __tablename__ = "flavors"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    flavorid: Mapped[str] = mapped_column(String(255), unique=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    memory_mb: Mapped[int] = mapped_column(Integer)
    vcpus: Mapped[int] = mapped_column(Integer)
    root_gb: Mapped[int] = mapped_column(Integer, default=0)
    ephemeral_gb: Mapped[int] = mapped_column(Integer, default=0)
    swap: Mapped[int] = mapped_column(Integer, default=0)
    rxtx_factor: Mapped[float] = mapped_column(Float, default=1.0)
    is_public: Mapped[bool] = mapped_column(Boolean, default=True)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    description: Mapped[str | None] = mapped_column(Text)


class FlavorExtraSpec(Base):
    __tablename__ = "flavor_extra_specs"
    __table_args__ = (UniqueConstraint("flavor_id", "key"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    flavor_id: Mapped[int] = mapped_column(ForeignKey("flavors.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(255))
    value: Mapped[str | None] = mapped_column(String(255))


class FlavorProject(Base):
    __tablename__ = "flavor_projects"
    __table_args__ = (UniqueConstraint("flavor_id", "project_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    flavor_id: Mapped[int] = mapped_column(ForeignKey("flavors.id", ondelete="CASCADE"))
    project_id: Mapped[str] = mapped_column(String(255))


class KeyPair(TimestampMixin, Base):
    __tablename__ = "key_pairs"
    __table_args__ = (UniqueConstraint("user_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[str] = mapped_column(String(255))
    project_id: Mapped[str | None] = mapped_column(String(255))
    fingerprint: Mapped[str] = mapped_column(String(255))
    public_key: Mapped[str] = mapped_column(Text)
    type: Mapped[str] = mapped_column(String(16), default="ssh")


class Service(TimestampMixin, Base):
    __tablename__ = "services"
    __table_args__ = (UniqueConstraint("host", "binary", "deleted"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True)
    host: Mapped[str] = mapped_column(String(255))
    binary: Mapped[str] = mapped_column(String(255))
    topic: Mapped[str | None] = mapped_column(String(255))
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    disabled_reason: Mapped[str | None] = mapped_column(String(255))
    # Who disabled it: "operator" or "auto" (automation never overrides an operator).
    disabled_by: Mapped[str | None] = mapped_column(String(16))
    forced_down: Mapped[bool] = mapped_column(Boolean, default=False)
    last_seen_up: Mapped[dt.datetime | None] = mapped_column(DateTime)
    # A compute host's hypervisor connection as its driver last reported it ("connected" /
    # "disconnected"; None: never reported), apart from heartbeat liveness (last_seen_up).
    hypervisor_connection: Mapped[str | None] = mapped_column(String(16))
    hypervisor_connection_reason: Mapped[str | None] = mapped_column(String(255))
    hypervisor_connection_since: Mapped[dt.datetime | None] = mapped_column(DateTime)
    # A compute host's recent vif-event waits (compute/host/instance_events.py wait_summary).
    vif_wait_stats: Mapped[dict | None] = mapped_column(JSON)
    report_count: Mapped[int] = mapped_column(Integer, default=0)
    availability_zone: Mapped[str | None] = mapped_column(String(255))
    # The version of the RPC interface the service serves ("1.0"; nefos.bus.interfaces); None: a
    # service from before versioning (1.0) or one serving none. [upgrade_levels] auto reads it.
    version: Mapped[str | None] = mapped_column(String(16))
    # Up or down as the event log last told it (None: not told yet); the watcher that writes
    # host.up / host.down changes it with a compare-and-swap, so each change is told once.
    reported_up: Mapped[bool | None] = mapped_column(Boolean)
    deleted: Mapped[int] = mapped_column(Integer, default=0)


class ComputeNode(TimestampMixin, Base):
    __tablename__ = "compute_nodes"
    __table_args__ = (UniqueConstraint("host", "hypervisor_hostname", "deleted"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True)
    host: Mapped[str] = mapped_column(String(255))
    hypervisor_hostname: Mapped[str] = mapped_column(String(255))
    hypervisor_type: Mapped[str] = mapped_column(String(255), default="fake")
    hypervisor_version: Mapped[int] = mapped_column(Integer, default=1000)
    host_ip: Mapped[str | None] = mapped_column(String(39))
    vcpus: Mapped[int] = mapped_column(Integer, default=0)
    memory_mb: Mapped[int] = mapped_column(Integer, default=0)
    local_gb: Mapped[int] = mapped_column(Integer, default=0)
    vcpus_used: Mapped[int] = mapped_column(Integer, default=0)
    memory_mb_used: Mapped[int] = mapped_column(Integer, default=0)
    local_gb_used: Mapped[int] = mapped_column(Integer, default=0)
    running_vms: Mapped[int] = mapped_column(Integer, default=0)
    cpu_allocation_ratio: Mapped[float] = mapped_column(Float, default=16.0)
    ram_allocation_ratio: Mapped[float] = mapped_column(Float, default=1.5)
    disk_allocation_ratio: Mapped[float] = mapped_column(Float, default=1.0)
    # Recent build failures lower the host's weight (reset by a success).
    failed_builds: Mapped[int] = mapped_column(Integer, default=0)
    deleted: Mapped[int] = mapped_column(Integer, default=0)


class Aggregate(TimestampMixin, Base):
    """A host aggregate (Nova's API-database ``aggregates``): rows are deleted outright, as Nova's
    are, so the API always shows ``deleted: false`` and a null ``deleted_at``."""
    __tablename__ = "aggregates"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)


class AggregateHost(Base):
    __tablename__ = "aggregate_hosts"
    __table_args__ = (UniqueConstraint("host", "aggregate_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    aggregate_id: Mapped[int] = mapped_column(ForeignKey("aggregates.id", ondelete="CASCADE"), index=True)
    host: Mapped[str] = mapped_column(String(255), index=True)


class AggregateMetadata(Base):
    """One metadata item; the ``availability_zone`` key is the zone of the aggregate's hosts."""
    __tablename__ = "aggregate_metadata"
    __table_args__ = (UniqueConstraint("aggregate_id", "key"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    aggregate_id: Mapped[int] = mapped_column(ForeignKey("aggregates.id", ondelete="CASCADE"), index=True)
    key: Mapped[str] = mapped_column(String(255), index=True)
    value: Mapped[str] = mapped_column(String(255))


class Allocation(Base):
    """A resource claim of one consumer (instance) against one compute node."""
    __tablename__ = "allocations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    consumer_uuid: Mapped[str] = mapped_column(String(36), unique=True)
    compute_node_id: Mapped[int] = mapped_column(ForeignKey("compute_nodes.id"), index=True)
    vcpus: Mapped[int] = mapped_column(Integer, default=0)
    memory_mb: Mapped[int] = mapped_column(Integer, default=0)
    disk_gb: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)


class Quota(TimestampMixin, Base):
    """A per-project limit overriding the configured default."""
    __tablename__ = "quotas"
    __table_args__ = (UniqueConstraint("project_id", "resource"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project_id: Mapped[str] = mapped_column(String(255))
    resource: Mapped[str] = mapped_column(String(255))
    hard_limit: Mapped[int] = mapped_column(Integer)


class QuotaClass(TimestampMixin, Base):
    """A quota class's limit (os-quota-class-sets): the ``default`` class overrides the configured
    defaults for every project without limits of its own."""
    __tablename__ = "quota_classes"
    __table_args__ = (UniqueConstraint("class_name", "resource"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    class_name: Mapped[str] = mapped_column(String(255))
    resource: Mapped[str] = mapped_column(String(255))
    hard_limit: Mapped[int] = mapped_column(Integer)


class BuildRequest(Base):
    """A build the API accepted, until a conductor has scheduled it: the durable hand-off from the
    API to the conductor (an outbox). ``dispatched`` is False when the API could not reach the
    conductor; ``claimed_until``: the lease of the conductor working on it; ``claimed_by``: that
    conductor process (``<host>/<pid>/<token>``)."""
    __tablename__ = "build_requests"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    instance_uuids: Mapped[list] = mapped_column(JSON)
    request_spec: Mapped[dict] = mapped_column(JSON)
    build_args: Mapped[dict] = mapped_column(JSON)  # without the admin password, never stored
    context: Mapped[dict] = mapped_column(JSON)
    dispatched: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow, index=True)
    claimed_until: Mapped[dt.datetime | None] = mapped_column(DateTime)
    claimed_by: Mapped[str | None] = mapped_column(String(255))


class ConsoleAuthToken(TimestampMixin, Base):
    """A remote console's access grant (Nova's console_auth_tokens): one instance's console at
    ``host``:``port`` (and ``tls_port`` for SPICE) until ``expires`` (a Unix time). Only the
    token's SHA-256 is stored."""
    __tablename__ = "console_auth_tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    token_hash: Mapped[str] = mapped_column(String(255), unique=True)
    console_type: Mapped[str] = mapped_column(String(255))
    host: Mapped[str] = mapped_column(String(255))
    port: Mapped[int] = mapped_column(Integer)
    tls_port: Mapped[int | None] = mapped_column(Integer)
    internal_access_path: Mapped[str | None] = mapped_column(String(255))
    instance_uuid: Mapped[str] = mapped_column(String(36), index=True)
    expires: Mapped[int] = mapped_column(Integer, index=True)
    access_url_base: Mapped[str | None] = mapped_column(String(255))


class QuotaUsage(TimestampMixin, Base):
    """What a project uses now; changed only by conditional updates, so racing requests cannot overshoot."""
    __tablename__ = "quota_usages"
    __table_args__ = (UniqueConstraint("project_id", "resource"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project_id: Mapped[str] = mapped_column(String(255))
    resource: Mapped[str] = mapped_column(String(255))
    in_use: Mapped[int] = mapped_column(Integer, default=0)


class BlockDeviceMapping(TimestampMixin, Base):
    __tablename__ = "block_device_mapping"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    instance_uuid: Mapped[str] = mapped_column(String(36), index=True)
    source_type: Mapped[str | None] = mapped_column(String(255))
    destination_type: Mapped[str | None] = mapped_column(String(255))
    device_name: Mapped[str | None] = mapped_column(String(255))
    device_type: Mapped[str | None] = mapped_column(String(255))
    disk_bus: Mapped[str | None] = mapped_column(String(255))
    boot_index: Mapped[int | None] = mapped_column(Integer)
    volume_size: Mapped[int | None] = mapped_column(Integer)
    guest_format: Mapped[str | None] = mapped_column(String(255))
    image_id: Mapped[str | None] = mapped_column(String(36))
    delete_on_termination: Mapped[bool] = mapped_column(Boolean, default=True)
    tag: Mapped[str | None] = mapped_column(String(255))


class InstanceGroup(TimestampMixin, Base):
    __tablename__ = "instance_groups"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True)
    name: Mapped[str] = mapped_column(String(255))
    project_id: Mapped[str | None] = mapped_column(String(255))
    user_id: Mapped[str | None] = mapped_column(String(255))
    policy: Mapped[str] = mapped_column(String(255))
    rules: Mapped[dict] = mapped_column(JSON, default=dict)


class InstanceGroupMember(Base):
    __tablename__ = "instance_group_member"
    __table_args__ = (UniqueConstraint("group_id", "instance_uuid"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    group_id: Mapped[int] = mapped_column(ForeignKey("instance_groups.id", ondelete="CASCADE"))
    instance_uuid: Mapped[str] = mapped_column(String(36), index=True)


class InstanceExternalEvent(Base):
    """The compute side's durable inbox: an external event the Compute API accepted, kept until
    the instance's compute host consumes it (or a later operation supersedes it).

    One row per (instance, name, tag, operation); a duplicate event updates its row. ``operation``
    is the instance's operation (``InstanceEventOperation``) when the API accepted the event, so an
    event left over from an earlier operation never satisfies a later operation's waiter.
    """
    __tablename__ = "instance_external_events"
    __table_args__ = (UniqueConstraint("instance_uuid", "name", "tag", "operation"),
                      Index("ix_instance_external_events_received_at", "received_at"))
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    instance_uuid: Mapped[str] = mapped_column(String(36))
    name: Mapped[str] = mapped_column(String(64))
    tag: Mapped[str] = mapped_column(String(255), default="")
    status: Mapped[str] = mapped_column(String(16), default="completed")
    operation: Mapped[str] = mapped_column(String(36), default="")
    host: Mapped[str | None] = mapped_column(String(255))
    received_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)


class InstanceEventOperation(Base):
    """The operation (build, start, hard reboot) an instance's compute host is doing now and may
    wait for external events in; written before the action that can trigger those events."""
    __tablename__ = "instance_event_operations"
    instance_uuid: Mapped[str] = mapped_column(String(36), primary_key=True)
    operation: Mapped[str] = mapped_column(String(36))
    host: Mapped[str | None] = mapped_column(String(255))
    started_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)


class Migration(TimestampMixin, Base):
    """One resize or cold migration of a server, with Nova's ``migrations`` columns and statuses
    (pre-migrating, migrating, post-migrating, finished, confirming, confirmed, reverting,
    reverted, error). Soft-deleted with its server (``deleted = id``), as Nova's instance_destroy
    does; the progress counters are a live migration's, which Nefos does not run."""
    __tablename__ = "migrations"
    __table_args__ = (Index("ix_migrations_instance_uuid_status", "instance_uuid", "status"),
                      Index("ix_migrations_created_at", "created_at"))
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True)
    instance_uuid: Mapped[str] = mapped_column(String(36))
    migration_type: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(255))
    source_compute: Mapped[str | None] = mapped_column(String(255))
    source_node: Mapped[str | None] = mapped_column(String(255))
    dest_compute: Mapped[str | None] = mapped_column(String(255))
    dest_node: Mapped[str | None] = mapped_column(String(255))
    dest_host: Mapped[str | None] = mapped_column(String(255))
    old_instance_type_id: Mapped[int | None] = mapped_column(Integer)
    new_instance_type_id: Mapped[int | None] = mapped_column(Integer)
    hidden: Mapped[bool] = mapped_column(Boolean, default=False)
    user_id: Mapped[str | None] = mapped_column(String(255))
    project_id: Mapped[str | None] = mapped_column(String(255))
    memory_total: Mapped[int | None] = mapped_column(BigInteger)
    memory_processed: Mapped[int | None] = mapped_column(BigInteger)
    memory_remaining: Mapped[int | None] = mapped_column(BigInteger)
    disk_total: Mapped[int | None] = mapped_column(BigInteger)
    disk_processed: Mapped[int | None] = mapped_column(BigInteger)
    disk_remaining: Mapped[int | None] = mapped_column(BigInteger)
    deleted_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    deleted: Mapped[int] = mapped_column(Integer, default=0)


# Network ---------------------------------------------------------------------

class Network(TimestampMixin, Base):
    __tablename__ = "networks"
    __table_args__ = (UniqueConstraint("network_type", "segmentation_id", name="uq_networks_segment"),)
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), default="")
    project_id: Mapped[str | None] = mapped_column(String(255), index=True)
    description: Mapped[str] = mapped_column(String(255), default="")
    shared: Mapped[bool] = mapped_column(Boolean, default=False)
    external: Mapped[bool] = mapped_column(Boolean, default=False)
    # the default external network of auto-allocated topologies (Neutron's externalnetworks.is_default)
    is_default: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sa_false())
    admin_state_up: Mapped[bool] = mapped_column(Boolean, default=True)
    status: Mapped[str] = mapped_column(String(16), default="ACTIVE")
    mtu: Mapped[int] = mapped_column(Integer, default=1500)
    port_security_enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    revision_number: Mapped[int] = mapped_column(Integer, default=0)
    # The network's segment (Neutron's provider attributes): "vxlan" with its VNI, allocated by the
    # network service, unique among VXLAN networks; "local" (no VNI) for a network on one host.
    network_type: Mapped[str] = mapped_column(String(16), default="local", server_default="local")
    segmentation_id: Mapped[int | None] = mapped_column(Integer, nullable=True)


class AutoAllocatedTopology(Base):
    """A project's auto-allocated network and the router uplinking it (Neutron's
    ``auto_allocated_topologies``): one per project, by the primary key."""
    __tablename__ = "auto_allocated_topologies"
    project_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    network_id: Mapped[str] = mapped_column(ForeignKey("networks.id", ondelete="CASCADE"), index=True)
    router_id: Mapped[str | None] = mapped_column(ForeignKey("routers.id", ondelete="SET NULL"))


class Subnet(TimestampMixin, Base):
    __tablename__ = "subnets"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    network_id: Mapped[str] = mapped_column(ForeignKey("networks.id", ondelete="CASCADE"), index=True)
    project_id: Mapped[str | None] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(255), default="")
    description: Mapped[str] = mapped_column(String(255), default="")
    ip_version: Mapped[int] = mapped_column(Integer)
    cidr: Mapped[str] = mapped_column(String(64))
    gateway_ip: Mapped[str | None] = mapped_column(String(64))
    enable_dhcp: Mapped[bool] = mapped_column(Boolean, default=True)
    allocation_pools: Mapped[list] = mapped_column(JSON, default=list)
    dns_nameservers: Mapped[list] = mapped_column(JSON, default=list)
    host_routes: Mapped[list] = mapped_column(JSON, default=list)
    ipv6_ra_mode: Mapped[str | None] = mapped_column(String(32))
    ipv6_address_mode: Mapped[str | None] = mapped_column(String(32))
    revision_number: Mapped[int] = mapped_column(Integer, default=0)


class Port(TimestampMixin, Base):
    __tablename__ = "ports"
    __table_args__ = (
        UniqueConstraint("network_id", "mac_address"),
        Index("ix_ports_device_id", "device_id"),
    )
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    network_id: Mapped[str] = mapped_column(ForeignKey("networks.id"), index=True)
    project_id: Mapped[str | None] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(255), default="")
    description: Mapped[str] = mapped_column(String(255), default="")
    mac_address: Mapped[str] = mapped_column(String(32))
    admin_state_up: Mapped[bool] = mapped_column(Boolean, default=True)
    status: Mapped[str] = mapped_column(String(16), default="DOWN")
    device_id: Mapped[str] = mapped_column(String(255), default="")
    device_owner: Mapped[str] = mapped_column(String(255), default="")
    binding_host_id: Mapped[str] = mapped_column(String(255), default="")
    binding_vif_type: Mapped[str] = mapped_column(String(64), default="unbound")
    binding_vnic_type: Mapped[str] = mapped_column(String(64), default="normal")
    binding_profile: Mapped[dict] = mapped_column(JSON, default=dict)
    binding_vif_details: Mapped[dict] = mapped_column(JSON, default=dict)
    port_security_enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    revision_number: Mapped[int] = mapped_column(Integer, default=0)


class PortProvisioning(Base):
    """What each component that must acknowledge a port said (Neutron's provisioning blocks).

    One row per (port, component): ``L2`` (the host's L2 agent reported the device up) and,
    on a network served by a DHCP agent, ``DHCP`` (dnsmasq re-read a hosts file holding the
    port's entry). ``satisfied`` False is a block: the port goes ACTIVE only when none is
    left (``nefos.control.network.provisioning``). Rows go with the port.
    """
    __tablename__ = "port_provisioning"
    port_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    component: Mapped[str] = mapped_column(String(16), primary_key=True)
    satisfied: Mapped[bool] = mapped_column(Boolean, default=False)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)


class NetworkAgent(Base):
    """A network agent's heartbeat (Neutron's ``agents`` table, reduced): which agents are alive."""
    __tablename__ = "network_agents"
    __table_args__ = (UniqueConstraint("agent_type", "host"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    agent_type: Mapped[str] = mapped_column(String(64))
    host: Mapped[str] = mapped_column(String(255))
    started_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    heartbeat_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    tunneling_ip: Mapped[str | None] = mapped_column(String(64), nullable=True)  # an L2 agent's VTEP


class Router(TimestampMixin, Base):
    """A Neutron router: its interfaces are ports (``device_owner`` ``network:router_interface``,
    ``device_id`` the router's id) it holds in ``routerports``, its gateway the port ``gw_port_id``
    on an external network."""
    __tablename__ = "routers"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    project_id: Mapped[str | None] = mapped_column(String(255), index=True)
    name: Mapped[str] = mapped_column(String(255), default="")
    description: Mapped[str] = mapped_column(String(255), default="")
    admin_state_up: Mapped[bool] = mapped_column(Boolean, default=True)
    status: Mapped[str] = mapped_column(String(16), default="ACTIVE")
    gw_network_id: Mapped[str | None] = mapped_column(String(36))
    gw_port_id: Mapped[str | None] = mapped_column(String(36))
    enable_snat: Mapped[bool] = mapped_column(Boolean, default=True)
    routes: Mapped[list] = mapped_column(JSON, default=list)
    revision_number: Mapped[int] = mapped_column(Integer, default=0)


class RouterPort(Base):
    """A port a router holds because the router API attached it (Neutron's ``routerports``): what
    the L3 agent builds a router from, what keeps it (``RouterInUse``) and what
    ``remove_router_interface`` removes. A port's ``device_owner``/``device_id`` only say whose it
    claims to be; this row says whose it is. A port belongs to at most one router (the key)."""
    __tablename__ = "routerports"
    port_id: Mapped[str] = mapped_column(ForeignKey("ports.id", ondelete="CASCADE"), primary_key=True)
    router_id: Mapped[str] = mapped_column(ForeignKey("routers.id", ondelete="CASCADE"), index=True)
    port_type: Mapped[str] = mapped_column(String(255))


class FloatingIP(TimestampMixin, Base):
    """A floating IP: an address of the port ``floating_port_id`` on an external network, mapped
    (DNAT/SNAT in the router ``router_id``) to ``fixed_ip_address`` of ``fixed_port_id``. A
    fixed address has at most one floating IP per external network (the unique key)."""
    __tablename__ = "floatingips"
    __table_args__ = (UniqueConstraint("floating_network_id", "fixed_port_id", "fixed_ip_address"),)
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    project_id: Mapped[str | None] = mapped_column(String(255), index=True)
    description: Mapped[str] = mapped_column(String(255), default="")
    floating_network_id: Mapped[str] = mapped_column(String(36))
    floating_ip_address: Mapped[str] = mapped_column(String(64))
    floating_port_id: Mapped[str] = mapped_column(String(36))
    fixed_port_id: Mapped[str | None] = mapped_column(String(36), index=True)
    fixed_ip_address: Mapped[str | None] = mapped_column(String(64))
    router_id: Mapped[str | None] = mapped_column(String(36), index=True)
    status: Mapped[str] = mapped_column(String(16), default="DOWN")
    revision_number: Mapped[int] = mapped_column(Integer, default=0)


class IPAllocation(Base):
    """One fixed IP of one port; the primary key makes double allocation impossible."""
    __tablename__ = "ipallocations"
    network_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    ip_address: Mapped[str] = mapped_column(String(64), primary_key=True)
    subnet_id: Mapped[str] = mapped_column(ForeignKey("subnets.id", ondelete="CASCADE"), index=True)
    port_id: Mapped[str] = mapped_column(ForeignKey("ports.id", ondelete="CASCADE"), index=True)


class SecurityGroup(TimestampMixin, Base):
    __tablename__ = "securitygroups"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), default="")
    description: Mapped[str] = mapped_column(String(255), default="")
    project_id: Mapped[str | None] = mapped_column(String(255), index=True)
    stateful: Mapped[bool] = mapped_column(Boolean, default=True)
    revision_number: Mapped[int] = mapped_column(Integer, default=0)


class DefaultSecurityGroup(Base):
    """One row per project: makes creating the project's default group race-free."""
    __tablename__ = "default_security_group"
    project_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    security_group_id: Mapped[str] = mapped_column(ForeignKey("securitygroups.id", ondelete="CASCADE"))


class SecurityGroupRule(TimestampMixin, Base):
    __tablename__ = "securitygrouprules"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    security_group_id: Mapped[str] = mapped_column(ForeignKey("securitygroups.id", ondelete="CASCADE"), index=True)
    project_id: Mapped[str | None] = mapped_column(String(255))
    direction: Mapped[str] = mapped_column(String(16))
    ethertype: Mapped[str] = mapped_column(String(16), default="IPv4")
    protocol: Mapped[str | None] = mapped_column(String(40))
    port_range_min: Mapped[int | None] = mapped_column(Integer)
    port_range_max: Mapped[int | None] = mapped_column(Integer)
    remote_ip_prefix: Mapped[str | None] = mapped_column(String(255))
    remote_group_id: Mapped[str | None] = mapped_column(String(36))
    description: Mapped[str] = mapped_column(String(255), default="")
    revision_number: Mapped[int] = mapped_column(Integer, default=0)


class PortSecurityGroup(Base):
    __tablename__ = "securitygroupportbindings"
    port_id: Mapped[str] = mapped_column(ForeignKey("ports.id", ondelete="CASCADE"), primary_key=True)
    security_group_id: Mapped[str] = mapped_column(ForeignKey("securitygroups.id"), primary_key=True)


class PortEventOutbox(Base):
    """The network service's outbox of events for the Compute API (``os-server-external-events``).

    Written in the transaction that changed the port, so an event exists exactly when the change
    does and survives a restart of the network service; deleted once the Compute API answered.
    A sender claims rows with a lease (``lease_owner``/``lease_until``), so several network
    service processes never send one event twice at the same time.
    """
    __tablename__ = "port_event_outbox"
    __table_args__ = (Index("ix_port_event_outbox_due", "next_attempt_at"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    server_uuid: Mapped[str] = mapped_column(String(36))
    name: Mapped[str] = mapped_column(String(64))
    tag: Mapped[str] = mapped_column(String(255), default="")
    status: Mapped[str] = mapped_column(String(16), default="completed")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    lease_owner: Mapped[str | None] = mapped_column(String(64))
    lease_until: Mapped[dt.datetime | None] = mapped_column(DateTime)
    request_id: Mapped[str | None] = mapped_column(String(255))  # of the change: the events' request id


# Image -----------------------------------------------------------------------

class Image(TimestampMixin, Base):
    __tablename__ = "images"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(32), default="queued")
    visibility: Mapped[str] = mapped_column(String(32), default="shared")
    owner: Mapped[str | None] = mapped_column(String(255), index=True)
    container_format: Mapped[str | None] = mapped_column(String(32))
    disk_format: Mapped[str | None] = mapped_column(String(32))
    size: Mapped[int | None] = mapped_column(BigInteger)
    virtual_size: Mapped[int | None] = mapped_column(BigInteger)
    checksum: Mapped[str | None] = mapped_column(String(32))
    os_hash_algo: Mapped[str | None] = mapped_column(String(64))
    os_hash_value: Mapped[str | None] = mapped_column(String(128))
    min_disk: Mapped[int] = mapped_column(Integer, default=0)
    min_ram: Mapped[int] = mapped_column(Integer, default=0)
    protected: Mapped[bool] = mapped_column(Boolean, default=False)
    os_hidden: Mapped[bool] = mapped_column(Boolean, default=False)
    properties: Mapped[dict] = mapped_column(JSON, default=dict)
    tags: Mapped[list] = mapped_column(JSON, default=list)
    location: Mapped[str | None] = mapped_column(Text)  # file path in the store


# Identity --------------------------------------------------------------------

class IdentityDomain(TimestampMixin, Base):
    __tablename__ = "identity_domains"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    tags: Mapped[list] = mapped_column(JSON, default=list)


class IdentityProject(TimestampMixin, Base):
    __tablename__ = "identity_projects"
    __table_args__ = (UniqueConstraint("domain_id", "name"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    domain_id: Mapped[str] = mapped_column(ForeignKey("identity_domains.id"), index=True)
    parent_id: Mapped[str | None] = mapped_column(String(64), index=True)  # None: top level
    description: Mapped[str] = mapped_column(Text, default="")
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    tags: Mapped[list] = mapped_column(JSON, default=list)


class IdentityUser(TimestampMixin, Base):
    __tablename__ = "identity_users"
    __table_args__ = (UniqueConstraint("domain_id", "name"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    domain_id: Mapped[str] = mapped_column(ForeignKey("identity_domains.id"), index=True)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    # scrypt$<log2 n>$<r>$<p>$<salt b64>$<hash b64>; None: the user cannot log in with a password.
    password_hash: Mapped[str | None] = mapped_column(String(255))
    default_project_id: Mapped[str | None] = mapped_column(String(64))
    description: Mapped[str] = mapped_column(Text, default="")
    extra: Mapped[dict] = mapped_column(JSON, default=dict)  # e.g. email
    failed_auth_count: Mapped[int] = mapped_column(Integer, default=0)
    failed_auth_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    # Keystone's user resource options that are set, e.g. {"ignore_lockout_failure_attempts": true}.
    options: Mapped[dict | None] = mapped_column(JSON, default=dict)


class IdentityRole(TimestampMixin, Base):
    __tablename__ = "identity_roles"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")


class IdentityRoleAssignment(Base):
    """User ``actor_id`` has role ``role_id`` on a project or a domain (``target_type``)."""
    __tablename__ = "identity_role_assignments"
    __table_args__ = (
        UniqueConstraint("actor_id", "target_type", "target_id", "role_id"),
        Index("ix_identity_role_assignments_target", "target_type", "target_id"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    actor_id: Mapped[str] = mapped_column(ForeignKey("identity_users.id", ondelete="CASCADE"), index=True)
    target_type: Mapped[str] = mapped_column(String(16))  # "project" or "domain"
    target_id: Mapped[str] = mapped_column(String(64))
    role_id: Mapped[str] = mapped_column(ForeignKey("identity_roles.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)


class IdentityRevocationEvent(Base):
    """Tokens issued at or before ``issued_before`` whose every set attribute matches are revoked.

    ``issued_before`` is microseconds since the epoch (an integer, so no backend
    truncates it to whole seconds). Events are pruned once every token they can
    match has expired.
    """
    __tablename__ = "identity_revocation_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    audit_id: Mapped[str | None] = mapped_column(String(64), index=True)
    user_id: Mapped[str | None] = mapped_column(String(64), index=True)
    project_id: Mapped[str | None] = mapped_column(String(64), index=True)
    domain_id: Mapped[str | None] = mapped_column(String(64))
    role_id: Mapped[str | None] = mapped_column(String(64))
    issued_before: Mapped[int] = mapped_column(BigInteger, index=True)
    revoked_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)


# The event stream's durable log ------------------------------------------------------------------

class StreamEvent(Base):
    """One entry of the event stream (``GET /v2.1/nefos-events``): written in the transaction of the
    change it tells, so a committed change always has its entry and a rolled back one never does.

    ``id`` only grows (AUTOINCREMENT on SQLite, so a purge never lets an id come back); a reader
    resumes after the last id it saw. The server's project is not copied here: readers take it
    from ``instances`` (soft-deleted rows stay), so no writer looks it up.
    """
    __tablename__ = "stream_events"
    __table_args__ = (Index("ix_stream_events_created_at", "created_at"),
                      {"sqlite_autoincrement": True})
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
                                    autoincrement=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    type: Mapped[str] = mapped_column(String(64))
    server_id: Mapped[str | None] = mapped_column(String(36))
    host: Mapped[str | None] = mapped_column(String(255))
    name: Mapped[str | None] = mapped_column(String(255))  # the step or external event's name
    data: Mapped[dict | None] = mapped_column(JSON)
