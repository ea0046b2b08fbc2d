"""A server's resize, cold or live migration as its system metadata records it (``MIGRATION_KEY``)
— pure helpers the API, the conductor and the compute hosts share, with no database."""

from __future__ import annotations

from nefos.model.states import MIGRATION_KEY, REBUILD_BLOCK_DEVICE_MAPPING, REBUILD_SPAWNING, REBUILDING

# Instance actions and migration types (Nova's names).
RESIZE = "resize"
MIGRATE = "migrate"
CONFIRM_RESIZE = "confirmResize"
REVERT_RESIZE = "revertResize"
LIVE_MIGRATION = "live-migration"
EVACUATE = "evacuate"  # the instance action
EVACUATION = "evacuation"  # the migration type
# An evacuation the API accepted and its destination has not finished or failed yet.
EVACUATION_IN_PROGRESS = ("accepted", "pre-migrating")
EVACUATION_TASK_STATES = (REBUILDING, REBUILD_BLOCK_DEVICE_MAPPING, REBUILD_SPAWNING)


def migration_of(instance: dict) -> dict | None:
    return (instance.get("system_metadata") or {}).get(MIGRATION_KEY)


def live_migration_of(instance: dict) -> dict | None:
    migration = migration_of(instance)
    return migration if migration and migration.get("type") == LIVE_MIGRATION else None


def evacuation_of(instance: dict) -> dict | None:
    migration = migration_of(instance)
    return migration if migration and migration.get("type") == EVACUATION else None


def with_migration(instance: dict, migration: dict | None) -> dict:
    """The instance's system metadata with ``migration`` recorded (None: removed)."""
    sysmeta = {k: v for k, v in (instance.get("system_metadata") or {}).items() if k != MIGRATION_KEY}
    if migration is not None:
        sysmeta[MIGRATION_KEY] = migration
    return sysmeta


def flavor_columns(flavor: dict) -> dict:
    return {"flavor": flavor, "instance_type_id": flavor["id"], "vcpus": flavor["vcpus"],
            "memory_mb": flavor["memory_mb"], "root_gb": flavor["root_gb"],
            "ephemeral_gb": flavor.get("ephemeral_gb", 0)}


def quota_back(migration: dict, kept: dict) -> dict[str, int]:
    """The cores and RAM held during the migration beyond what the flavor ``kept`` counts."""
    held = migration.get("quota") or {}
    return {"cores": max(held.get("cores", 0) - kept["vcpus"], 0),
            "ram": max(held.get("ram", 0) - kept["memory_mb"], 0)}
