"""Versioned notifications (``instance.create.start`` ...) on the bus."""

from __future__ import annotations

from nefos.model import states


def instance_payload(instance: dict) -> dict:
    """The InstanceActionPayload fields consumers use most."""
    flavor = instance.get("flavor") or {}
    return {
        "nova_object.name": "InstanceActionPayload",
        "nova_object.namespace": "nova",
        "nova_object.version": "1.8",
        "nova_object.data": {
            "uuid": instance["uuid"],
            "display_name": instance.get("display_name"),
            "tenant_id": instance.get("project_id"),
            "user_id": instance.get("user_id"),
            "host": instance.get("host"),
            "node": instance.get("node"),
            "state": instance.get("vm_state"),
            "task_state": instance.get("task_state"),
            "power_state": states.POWER_STATE_NAMES.get(instance.get("power_state") or 0, "pending"),
            "availability_zone": instance.get("availability_zone"),
            "image_uuid": instance.get("image_ref"),
            "flavor": {"name": flavor.get("name"), "flavorid": flavor.get("flavorid"),
                       "memory_mb": flavor.get("memory_mb"), "vcpus": flavor.get("vcpus"),
                       "root_gb": flavor.get("root_gb")},
            "reservation_id": instance.get("reservation_id"),
            "launched_at": instance.get("launched_at"),
            "terminated_at": instance.get("terminated_at"),
            "metadata": instance.get("metadata") or {},
            "fault": instance.get("fault"),
        },
    }


async def notify_instance(bus, ctx, instance: dict, event_type: str, *, host: str,
                          binary: str = "nova-compute", priority: str = "INFO") -> None:
    await bus.notify(ctx, event_type, instance_payload(instance),
                     publisher_id=f"{binary}:{host}", priority=priority)
