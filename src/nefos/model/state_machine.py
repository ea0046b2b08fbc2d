"""The instance state machine, in one table: the only place allowed transitions are written.

``OPERATIONS``: for each request the Compute API accepts on a server (keyed by Nova's action
name, or the API's name where one action has two forms), the vm_states and task_states it is
allowed from and the task_state it sets. A request in any other state is refused with Nova's 409,
``InstanceInvalidState`` naming the vm_state first, then the task_state (``check``).

``STEPS``: for each step a host or the conductor takes (``<operation>.<step>``), the task_states it
expects (its compare-and-swap) and the one it leaves.

Pure constants and functions: the compute host imports this module, so it opens no database.
``vm_state_diagram`` and ``task_state_diagram`` render the table as the Mermaid diagrams
docs/architecture.md shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from nefos import exceptions
from nefos.model import action_names as act
from nefos.model.migration_state import (CONFIRM_RESIZE, EVACUATE, LIVE_MIGRATION, MIGRATE, RESIZE,
                                           REVERT_RESIZE)
from nefos.model.states import (
    ACTIVE, BLOCK_DEVICE_MAPPING, BUILD_TASK_STATES, BUILDING, DELETED, DELETING, ERROR, IMAGE_BACKUP,
    IMAGE_PENDING_UPLOAD, IMAGE_SNAPSHOT, IMAGE_UPLOADING, MIGRATING, NETWORKING, PAUSED, PAUSING, POWERING_OFF,
    POWERING_ON, REBOOT_PENDING, REBOOT_PENDING_HARD, REBOOT_STARTED, REBOOT_STARTED_HARD, REBOOTING, REBOOTING_HARD,
    REBUILD_BLOCK_DEVICE_MAPPING, REBUILD_SPAWNING, REBUILDING, RESCUED, RESCUING, RESIZE_FINISH, RESIZE_MIGRATED,
    RESIZE_MIGRATING, RESIZE_PREP, RESIZE_REVERTING, RESIZED, RESUMING, SCHEDULING, SHELVED, SHELVED_OFFLOADED,
    SHELVING, SHELVING_IMAGE_PENDING_UPLOAD, SHELVING_IMAGE_UPLOADING, SHELVING_OFFLOADING, SPAWNING, STOPPED,
    SUSPENDED, SUSPENDING, UNPAUSING, UNRESCUING, UNSHELVING, UPDATING_PASSWORD)

ANY = None  # in ``vm_states`` / ``task_states``: not checked
UNCHANGED = "(unchanged)"  # in ``sets`` / ``ends_in``: the state stays what it was
# In ``ends_in``: STOPPED for a server that was stopped (before the operation, or before its
# resize), else ACTIVE.
AS_IT_RAN = "(active, or stopped as it was)"


@dataclass(frozen=True)
class Operation:
    """An API request on a server. ``action``: the instance action it records; ``sets``: the
    task_state it sets; ``ends_in``: the vm_state the server is in once its hosts finished it;
    ``refused_as``: the name its 409 gives (``action`` when None)."""
    action: str
    vm_states: tuple[str, ...] | None
    task_states: tuple[str | None, ...] | None
    sets: str | None
    ends_in: str
    refused_as: str | None = None

    @property
    def name(self) -> str:
        return self.refused_as or self.action


@dataclass(frozen=True)
class Step:
    """A host's (or the conductor's) step: the compare-and-swap on ``expects`` (ANY: the task_state
    it found, whatever it is), then ``leaves``."""
    expects: tuple[str | None, ...] | None
    leaves: str | None


_NO_TASK = (None,)
# The vm_states a server can be snapshotted, backed up or shelved in (Nova's check_instance_state).
_IMAGE_VM_STATES = (ACTIVE, STOPPED, PAUSED, SUSPENDED)
_SOFT_REBOOT_TASK_STATES = (REBOOTING, REBOOT_PENDING, REBOOT_STARTED)
_HARD_REBOOT_TASK_STATES = (REBOOTING_HARD, REBOOT_PENDING_HARD, REBOOT_STARTED_HARD)
_REBOOT_TASK_STATES = (None, *_SOFT_REBOOT_TASK_STATES, *_HARD_REBOOT_TASK_STATES)
_REBUILD_TASK_STATES = (REBUILDING, REBUILD_BLOCK_DEVICE_MAPPING, REBUILD_SPAWNING)

OPERATIONS: dict[str, Operation] = {
    "create": Operation(act.CREATE, ANY, ANY, SCHEDULING, BUILDING),
    "delete": Operation(act.DELETE, ANY, ANY, DELETING, DELETED),
    "stop": Operation(act.STOP, (ACTIVE, ERROR), _NO_TASK, POWERING_OFF, STOPPED),
    "start": Operation(act.START, (STOPPED,), _NO_TASK, POWERING_ON, ACTIVE),
    "reboot_soft": Operation(act.REBOOT, (ACTIVE,), _NO_TASK, REBOOTING, ACTIVE),
    "reboot_hard": Operation(act.REBOOT, (ACTIVE, STOPPED, PAUSED, SUSPENDED, ERROR), _REBOOT_TASK_STATES,
                             REBOOTING_HARD, ACTIVE),
    "pause": Operation(act.PAUSE, (ACTIVE,), _NO_TASK, PAUSING, PAUSED),
    "unpause": Operation(act.UNPAUSE, (PAUSED,), _NO_TASK, UNPAUSING, ACTIVE),
    "suspend": Operation(act.SUSPEND, (ACTIVE,), _NO_TASK, SUSPENDING, SUSPENDED),
    "resume": Operation(act.RESUME, (SUSPENDED,), _NO_TASK, RESUMING, ACTIVE),
    "createImage": Operation(act.CREATE_IMAGE, _IMAGE_VM_STATES, _NO_TASK, IMAGE_SNAPSHOT, UNCHANGED),
    "createBackup": Operation(act.BACKUP, _IMAGE_VM_STATES, _NO_TASK, IMAGE_BACKUP, UNCHANGED),
    "shelve": Operation(act.SHELVE, _IMAGE_VM_STATES, _NO_TASK, SHELVING, SHELVED),
    "shelveOffload": Operation(act.SHELVE_OFFLOAD, (SHELVED,), _NO_TASK, SHELVING_OFFLOADING, SHELVED_OFFLOADED),
    "unshelve": Operation(act.UNSHELVE, (SHELVED, SHELVED_OFFLOADED), _NO_TASK, UNSHELVING, ACTIVE),
    "rebuild": Operation(act.REBUILD, (ACTIVE, STOPPED, ERROR), _NO_TASK, REBUILDING, AS_IT_RAN),
    "changePassword": Operation(act.CHANGE_PASSWORD, (ACTIVE,), _NO_TASK, UPDATING_PASSWORD, UNCHANGED),
    "rescue": Operation(act.RESCUE, (ACTIVE, STOPPED, ERROR), _NO_TASK, RESCUING, RESCUED),
    "unrescue": Operation(act.UNRESCUE, (RESCUED,), _NO_TASK, UNRESCUING, ACTIVE),
    "resize": Operation(RESIZE, (ACTIVE, STOPPED), _NO_TASK, RESIZE_PREP, RESIZED),
    "migrate": Operation(MIGRATE, (ACTIVE, STOPPED), _NO_TASK, RESIZE_PREP, RESIZED),
    "confirmResize": Operation(CONFIRM_RESIZE, (RESIZED,), _NO_TASK, UNCHANGED, AS_IT_RAN),
    "revertResize": Operation(REVERT_RESIZE, (RESIZED,), _NO_TASK, RESIZE_REVERTING, AS_IT_RAN),
    "live-migration": Operation(LIVE_MIGRATION, (ACTIVE, PAUSED), _NO_TASK, MIGRATING, UNCHANGED,
                                refused_as="os-migrateLive"),
    "live_migration_force_complete": Operation("live_migration_force_complete", ANY, (MIGRATING,), UNCHANGED,
                                               UNCHANGED, refused_as="force complete"),
    "live_migration_cancel": Operation("live_migration_cancel", ANY, (MIGRATING,), UNCHANGED, UNCHANGED,
                                       refused_as="abort live migration"),
    "evacuate": Operation(EVACUATE, (ACTIVE, STOPPED, ERROR), _NO_TASK, REBUILDING, AS_IT_RAN),
}

STEPS: dict[str, Step] = {
    # A build: the conductor schedules it, the chosen host builds it; a failed build is rescheduled.
    "build.scheduled": Step((SCHEDULING,), UNCHANGED),
    "build.no_valid_host": Step((SCHEDULING, None), None),
    "build.claimed": Step((SCHEDULING, None), None),
    "build.networking": Step((None,), NETWORKING),
    "build.block_device_mapping": Step((NETWORKING,), BLOCK_DEVICE_MAPPING),
    "build.spawning": Step((BLOCK_DEVICE_MAPPING,), SPAWNING),
    "build.networked": Step((SPAWNING,), UNCHANGED),
    "build.spawned": Step((SPAWNING,), None),
    "build.rescheduled": Step(BUILD_TASK_STATES, SCHEDULING),
    "build.failed": Step(BUILD_TASK_STATES, None),
    # Power operations and the like, on the server's host (``ComputeManager.power_op``).
    "stop.done": Step((POWERING_OFF,), None),
    "start.done": Step((POWERING_ON,), None),
    "reboot_soft.done": Step(_SOFT_REBOOT_TASK_STATES, None),
    "reboot_hard.done": Step(_HARD_REBOOT_TASK_STATES, None),
    "pause.done": Step((PAUSING,), None),
    "unpause.done": Step((UNPAUSING,), None),
    "suspend.done": Step((SUSPENDING,), None),
    "resume.done": Step((RESUMING,), None),
    "changePassword.done": Step((UPDATING_PASSWORD,), None),
    "rescue.done": Step((RESCUING,), None),
    "unrescue.done": Step((UNRESCUING,), None),
    # A host's own: the power sync records a guest's power state and stops a guest found off, a
    # power-update event powers a guest on or off (then ``start.done`` / ``stop.done``).
    "power_sync.power_state": Step((None,), UNCHANGED),
    "power_sync.stop": Step((None,), POWERING_OFF),
    "power_update.power_on": Step((None,), POWERING_ON),
    "power_update.power_off": Step((None,), POWERING_OFF),
    # A restarting host finishes a soft reboot the guest did not take as a hard one, and clears
    # (or sets to ERROR) any other task it finds; a task past ``task_state_timeout`` is an ERROR.
    "init_host.reboot_hard": Step(_SOFT_REBOOT_TASK_STATES, REBOOTING_HARD),
    "init_host.cleared": Step(ANY, None),
    "init_host.guest_resumed": Step((None,), UNCHANGED),
    "deadline.passed": Step(ANY, None),
    # Snapshots and backups (then ``createImage.done``, ``createBackup.done``), and the shelve's.
    "createImage.pending_upload": Step((IMAGE_SNAPSHOT,), IMAGE_PENDING_UPLOAD),
    "createImage.uploading": Step((IMAGE_PENDING_UPLOAD,), IMAGE_UPLOADING),
    "createImage.done": Step((IMAGE_UPLOADING,), None),
    "createBackup.pending_upload": Step((IMAGE_BACKUP,), IMAGE_PENDING_UPLOAD),
    "createBackup.uploading": Step((IMAGE_PENDING_UPLOAD,), IMAGE_UPLOADING),
    "createBackup.done": Step((IMAGE_UPLOADING,), None),
    "shelve.pending_upload": Step((SHELVING,), SHELVING_IMAGE_PENDING_UPLOAD),
    "shelve.uploading": Step((SHELVING_IMAGE_PENDING_UPLOAD,), SHELVING_IMAGE_UPLOADING),
    "shelve.done": Step((SHELVING_IMAGE_UPLOADING,), None),
    # ``shelved_offload_time`` 0: SHELVED and offloading in one write.
    "shelve.offloading_at_once": Step((SHELVING_IMAGE_UPLOADING,), SHELVING_OFFLOADING),
    "shelveOffload.done": Step((SHELVING_OFFLOADING,), None),
    "unshelve.scheduled": Step((UNSHELVING,), UNCHANGED),
    "unshelve.no_valid_host": Step((UNSHELVING,), None),
    "unshelve.networked": Step((UNSHELVING,), UNCHANGED),
    "unshelve.done": Step((UNSHELVING,), None),
    "unshelve.failed": Step((UNSHELVING,), None),
    # A rebuild, and an evacuation: a rebuild on the host the conductor scheduled.
    "rebuild.image_set": Step((REBUILDING,), UNCHANGED),
    "evacuate.scheduled": Step((REBUILDING,), UNCHANGED),
    "rebuild.block_device_mapping": Step((REBUILDING,), REBUILD_BLOCK_DEVICE_MAPPING),
    "rebuild.spawning": Step((REBUILD_BLOCK_DEVICE_MAPPING,), REBUILD_SPAWNING),
    "rebuild.networked": Step((REBUILD_SPAWNING,), UNCHANGED),
    "rebuild.done": Step((REBUILD_SPAWNING,), None),
    "rebuild.failed": Step(_REBUILD_TASK_STATES, None),
    "evacuate.not_scheduled": Step((REBUILDING,), None),
    # A resize or cold migration (nefos.control.compute.resize tells which host takes which step).
    "resize.scheduled": Step((RESIZE_PREP,), UNCHANGED),
    "resize.prep": Step((RESIZE_PREP,), UNCHANGED),
    "resize.migrating": Step((RESIZE_PREP,), RESIZE_MIGRATING),
    "resize.migrated": Step((RESIZE_MIGRATING,), RESIZE_MIGRATED),
    "resize.not_moved": Step((RESIZE_PREP, RESIZE_MIGRATING), None),
    "resize.finish": Step((RESIZE_MIGRATED,), RESIZE_FINISH),
    "resize.networked": Step((RESIZE_FINISH,), UNCHANGED),
    "resize.finished": Step((RESIZE_FINISH,), None),
    "resize.finish_failed": Step((RESIZE_FINISH, RESIZE_MIGRATED), None),
    "confirmResize.done": Step((None,), None),
    "confirmResize.failed": Step((None,), UNCHANGED),
    "revertResize.at_destination": Step((RESIZE_REVERTING,), UNCHANGED),
    "revertResize.at_source": Step((RESIZE_REVERTING,), UNCHANGED),
    "revertResize.done": Step((RESIZE_REVERTING,), None),
    "revertResize.failed": Step((RESIZE_REVERTING,), None),
    "revertResize.not_sent": Step((RESIZE_REVERTING,), None),
    # A live migration.
    "live-migration.scheduled": Step((MIGRATING,), UNCHANGED),
    "live-migration.at_destination": Step((MIGRATING,), UNCHANGED),
    "live-migration.done": Step((MIGRATING,), None),
    "live-migration.rolled_back": Step((MIGRATING,), None),
    "live-migration.failed": Step((MIGRATING,), None),
    # A delete its host did not accept gives the task_state back.
    "delete.not_accepted": Step((DELETING,), UNCHANGED),
}


def operation(name: str) -> Operation:
    return OPERATIONS[name]


def refusal(name: str, vm_state: str | None, task_state: str | None) -> tuple[str, str | None] | None:
    """Why ``name`` is refused in these states, as the 409 says it: ("vm_state", the vm_state) or
    ("task_state", the task_state); None when it is allowed."""
    op = OPERATIONS[name]
    if op.vm_states is not ANY and vm_state not in op.vm_states:
        return "vm_state", vm_state
    if op.task_states is not ANY and task_state not in op.task_states:
        return "task_state", task_state
    return None


def check(name: str, instance: dict) -> None:
    """Nova's ``check_instance_state``: InstanceInvalidState (409) unless ``instance`` is in a
    state operation ``name`` is allowed from."""
    _raise_for(name, instance, refusal(name, instance.get("vm_state"), instance.get("task_state")))


def check_vm_state(name: str, instance: dict) -> None:
    """``check``'s first half, for a request that reads more before it checks the task_state."""
    refused = refusal(name, instance.get("vm_state"), instance.get("task_state"))
    _raise_for(name, instance, refused if refused and refused[0] == "vm_state" else None)


def _raise_for(name: str, instance: dict, refused: tuple[str, str | None] | None) -> None:
    if refused is not None:
        raise exceptions.InstanceInvalidState(action=OPERATIONS[name].name, instance_uuid=instance["uuid"],
                                              attr=refused[0], state=refused[1])


def allowed_from(name: str) -> dict:
    """The compare-and-swap conditions of operation ``name``'s first write (``instance_obj.save``'s
    ``expected_vm_state`` / ``expected_task_state``; a state not checked is left out)."""
    op = OPERATIONS[name]
    conditions = {}
    if op.task_states is not ANY:
        conditions["expected_task_state"] = list(op.task_states)
    if op.vm_states is not ANY:
        conditions["expected_vm_state"] = list(op.vm_states)
    return conditions


def expects(step: str) -> list[str | None]:
    """The task_states step ``step`` expects (its compare-and-swap)."""
    return list(STEPS[step].expects)


def leaves(step: str) -> str | None:
    """The task_state step ``step`` leaves."""
    return STEPS[step].leaves


def step_save(step: str, **columns) -> dict:
    """Step ``step``'s compare-and-swap save, as ``instance_save`` takes it: ``updates`` (the
    ``columns`` and the task_state the step leaves) and ``expected_task_state``."""
    leaving = STEPS[step].leaves
    updates = columns if leaving is UNCHANGED else {**columns, "task_state": leaving}
    return {"updates": updates, "expected_task_state": expects(step)}


def transitions() -> set[tuple[str | None, str | None]]:
    """Every (task_state before, task_state after) the table allows, by operation or step (an
    operation allowed from any task_state is left out: it is no compare-and-swap)."""
    pairs = set()
    for op in OPERATIONS.values():
        if op.sets is not UNCHANGED and op.task_states is not ANY:
            pairs |= {(before, op.sets) for before in op.task_states}
    for step in STEPS.values():
        if step.leaves is not UNCHANGED and step.expects is not ANY:
            pairs |= {(before, step.leaves) for before in step.expects}
    return pairs


def written() -> set[str | None]:
    """Every task_state an operation sets or a step leaves."""
    return ({op.sets for op in OPERATIONS.values()} | {step.leaves for step in STEPS.values()}) - {UNCHANGED}


def expected() -> set[str | None]:
    """Every task_state an operation is allowed from or a step expects."""
    allowed = {task for op in OPERATIONS.values() if op.task_states is not ANY for task in op.task_states}
    return allowed | {task for step in STEPS.values() if step.expects is not ANY for task in step.expects}


_VM_STATES = (BUILDING, ACTIVE, PAUSED, SUSPENDED, STOPPED, RESCUED, RESIZED, ERROR, SHELVED, SHELVED_OFFLOADED)


def _vm_edges(op: Operation) -> list[tuple[str, str]]:
    if op.vm_states is ANY:
        sources = ["[*]"] if op.ends_in == BUILDING else list(_VM_STATES)
    else:
        sources = list(op.vm_states)
    edges = []
    for before in sources:
        if op.ends_in is UNCHANGED:
            edges.append((before, before))
        elif op.ends_in is AS_IT_RAN:
            edges += [(before, before)] if before in (ACTIVE, STOPPED) else [(before, ACTIVE), (before, STOPPED)]
            if before == ERROR:  # an ERROR server runs again
                edges.remove((before, STOPPED))
        else:
            edges.append((before, op.ends_in))
    return edges


def _node(state: str | None) -> str:
    if state is None:
        return "idle"
    return state if state == "[*]" else state.upper().replace("-", "_")


def _mermaid(edges: dict[tuple[str, str], list[str]]) -> str:
    lines = ["stateDiagram-v2"]
    lines += [f"    {a} --> {b}: {', '.join(labels)}" for (a, b), labels in sorted(edges.items())]
    return "\n".join(lines) + "\n"


def vm_state_diagram() -> str:
    """The operations as a Mermaid state diagram of vm_states: an arrow from each vm_state an
    operation is allowed from to the one it ends in, labelled with the operation and the
    task_state it sets meanwhile."""
    edges: dict[tuple[str, str], list[str]] = {}
    for name, op in OPERATIONS.items():
        if op.vm_states is ANY and op.ends_in is UNCHANGED:
            continue  # the live migration's force-complete and abort: no state changes
        label = name if op.sets is UNCHANGED else f"{name} ({op.sets})"
        for before, after in _vm_edges(op):
            edges.setdefault((_node(before), _node(after)), []).append(label)
    return _mermaid(edges)


def task_state_diagram() -> str:
    """The operations and steps as a Mermaid state diagram of task_states (``idle``: no task): an
    arrow per operation (its name) and per step (``operation.step``) that changes the task_state
    (the recoveries from any task_state, ``init_host.cleared`` and ``deadline.passed``, left out)."""
    edges: dict[tuple[str, str], list[str]] = {}
    for name, op in OPERATIONS.items():
        if op.sets is not UNCHANGED and op.task_states is not ANY:
            for before in op.task_states:
                edges.setdefault((_node(before), _node(op.sets)), []).append(name)
    for name, step in STEPS.items():
        if step.leaves is not UNCHANGED and step.expects is not ANY:
            for before in step.expects:
                if before != step.leaves:
                    edges.setdefault((_node(before), _node(step.leaves)), []).append(name)
    return _mermaid(edges)
