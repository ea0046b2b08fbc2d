"""Instance states, as Nova names them (vm_state, task_state, power_state)."""

# vm_state
ACTIVE = "active"
BUILDING = "building"
PAUSED = "paused"
SUSPENDED = "suspended"
STOPPED = "stopped"
RESCUED = "rescued"
RESIZED = "resized"
SOFT_DELETED = "soft-delete"
DELETED = "deleted"
ERROR = "error"
SHELVED = "shelved"
SHELVED_OFFLOADED = "shelved_offloaded"

# task_state
SCHEDULING = "scheduling"
BLOCK_DEVICE_MAPPING = "block_device_mapping"
NETWORKING = "networking"
SPAWNING = "spawning"
REBOOTING = "rebooting"
REBOOT_PENDING = "reboot_pending"
REBOOT_STARTED = "reboot_started"
REBOOTING_HARD = "rebooting_hard"
REBOOT_PENDING_HARD = "reboot_pending_hard"
REBOOT_STARTED_HARD = "reboot_started_hard"
PAUSING = "pausing"
UNPAUSING = "unpausing"
SUSPENDING = "suspending"
RESUMING = "resuming"
POWERING_OFF = "powering-off"
POWERING_ON = "powering-on"
DELETING = "deleting"
IMAGE_SNAPSHOT = "image_snapshot"
IMAGE_BACKUP = "image_backup"
IMAGE_PENDING_UPLOAD = "image_pending_upload"
IMAGE_UPLOADING = "image_uploading"
SHELVING = "shelving"
SHELVING_IMAGE_PENDING_UPLOAD = "shelving_image_pending_upload"
SHELVING_IMAGE_UPLOADING = "shelving_image_uploading"
SHELVING_OFFLOADING = "shelving_offloading"
UNSHELVING = "unshelving"
UPDATING_PASSWORD = "updating_password"
REBUILDING = "rebuilding"
REBUILD_BLOCK_DEVICE_MAPPING = "rebuild_block_device_mapping"
REBUILD_SPAWNING = "rebuild_spawning"
RESCUING = "rescuing"
UNRESCUING = "unrescuing"
RESIZE_PREP = "resize_prep"
RESIZE_MIGRATING = "resize_migrating"
RESIZE_MIGRATED = "resize_migrated"
RESIZE_FINISH = "resize_finish"
RESIZE_REVERTING = "resize_reverting"
MIGRATING = "migrating"  # a live migration
# The task states of a resize or cold migration before it reaches VERIFY_RESIZE (status RESIZE).
RESIZE_TASK_STATES = (RESIZE_PREP, RESIZE_MIGRATING, RESIZE_MIGRATED, RESIZE_FINISH)
# The task states of a build (None: claimed, not started yet), for builds' compare-and-swap saves.
BUILD_TASK_STATES = (None, SCHEDULING, NETWORKING, BLOCK_DEVICE_MAPPING, SPAWNING)

# power_state (integers, as the API reports them)
NOSTATE = 0
RUNNING = 1
PAUSED_POWER = 3
SHUTDOWN = 4
CRASHED = 6
SUSPENDED_POWER = 7

POWER_STATE_NAMES = {
    NOSTATE: "pending", RUNNING: "running", PAUSED_POWER: "paused",
    SHUTDOWN: "shutdown", CRASHED: "crashed", SUSPENDED_POWER: "suspended",
}

# The API's "status" of a server, from (vm_state, task_state), as Nova maps them.
_STATUS_BY_STATE = {
    ACTIVE: {None: "ACTIVE", REBOOTING: "REBOOT", REBOOT_PENDING: "REBOOT",
             REBOOT_STARTED: "REBOOT", REBOOTING_HARD: "HARD_REBOOT",
             REBOOT_PENDING_HARD: "HARD_REBOOT", REBOOT_STARTED_HARD: "HARD_REBOOT",
             UPDATING_PASSWORD: "PASSWORD", REBUILDING: "REBUILD", REBUILD_BLOCK_DEVICE_MAPPING: "REBUILD",
             REBUILD_SPAWNING: "REBUILD", RESIZE_PREP: "RESIZE", RESIZE_MIGRATING: "RESIZE",
             RESIZE_MIGRATED: "RESIZE", RESIZE_FINISH: "RESIZE", MIGRATING: "MIGRATING", "default": "ACTIVE"},
    BUILDING: {"default": "BUILD"},
    STOPPED: {REBUILDING: "REBUILD", REBUILD_BLOCK_DEVICE_MAPPING: "REBUILD", REBUILD_SPAWNING: "REBUILD",
              RESIZE_PREP: "RESIZE", RESIZE_MIGRATING: "RESIZE", RESIZE_MIGRATED: "RESIZE",
              RESIZE_FINISH: "RESIZE", "default": "SHUTOFF"},
    RESIZED: {RESIZE_REVERTING: "REVERT_RESIZE", "default": "VERIFY_RESIZE"},
    PAUSED: {"default": "PAUSED"},
    SUSPENDED: {"default": "SUSPENDED"},
    RESCUED: {"default": "RESCUE"},
    ERROR: {REBUILDING: "REBUILD", REBUILD_BLOCK_DEVICE_MAPPING: "REBUILD", REBUILD_SPAWNING: "REBUILD",
            "default": "ERROR"},
    DELETED: {"default": "DELETED"},
    SOFT_DELETED: {"default": "SOFT_DELETED"},
    SHELVED: {"default": "SHELVED"},
    SHELVED_OFFLOADED: {"default": "SHELVED_OFFLOADED"},
}


def status_from_state(vm_state: str | None, task_state: str | None) -> str:
    by_task = _STATUS_BY_STATE.get(vm_state or "", {"default": "UNKNOWN"})
    status = by_task.get(task_state, by_task["default"])
    if status == "UNKNOWN":
        return "UNKNOWN"
    return status


def states_from_status(status: str) -> list[str]:
    """The vm_states a status filter matches (Nova's ``status=`` list filter)."""
    return task_and_vm_states_from_statuses([status])[0]


def task_and_vm_states_from_statuses(statuses: list[str]) -> tuple[list[str], list[str | None] | None]:
    """The (vm_states, task_states) the ``status=`` list filter matches, as Nova's
    ``task_and_vm_state_from_status``: REBOOT is active + a reboot task, RESIZE active or
    stopped + a resize task. When a status is some vm_state's default (ACTIVE, SHUTOFF,
    VERIFY_RESIZE...), Nova filters on vm_state alone, so the task_states are None."""
    wanted = {s.upper() for s in statuses}
    vm_states: set[str] = set()
    task_states: set[str | None] = set()
    for vm, by_task in _STATUS_BY_STATE.items():
        for task, status in by_task.items():
            if status in wanted:
                vm_states.add(vm)
                task_states.add(task)
    if "default" in task_states or None in task_states:
        return sorted(vm_states), None
    return sorted(vm_states), sorted(task_states)


# The system metadata key of a server's resize or cold migration under way (nefos.control.compute.resize).
MIGRATION_KEY = "nefos_migration"

# The vm_states in which interfaces are attached and detached (os-interface; the API's check and the host's).
INTERFACE_VM_STATES = (ACTIVE, PAUSED, STOPPED)
