"""Every server action the Compute API guards answers Nova's 409 ("Cannot '<action>' instance <uuid>
while it is in vm_state|task_state <state>") from exactly the (vm_state, task_state) pairs listed
here, and lets every other pair past its state checks: the vm_state is checked first, then the
task_state. Each request runs against a stand-in API whose first step after the state checks
(a database write, a host's status, an image lookup) stops it, so every pair of states is tried in
memory."""

from __future__ import annotations

import types

import pytest

from nefos import exceptions
from nefos.control.compute import evacuate as evacuate_api, live_migration, quota_sets, rescue, resize
from nefos.control.compute.api import ComputeAPI
from nefos.objects import instance as instance_obj
from nefos.model import states as s

UUID = "11111111-2222-3333-4444-555555555555"
VM_STATES = [s.ACTIVE, s.BUILDING, s.PAUSED, s.SUSPENDED, s.STOPPED, s.RESCUED, s.RESIZED, s.SOFT_DELETED,
             s.DELETED, s.ERROR, s.SHELVED, s.SHELVED_OFFLOADED]
TASK_STATES = [None] + sorted(v for k, v in vars(s).items() if isinstance(v, str) and k.isupper()
                              and v not in VM_STATES and k not in ("MIGRATION_KEY",))
_IMAGE_VM = {s.ACTIVE, s.STOPPED, s.PAUSED, s.SUSPENDED}
_REBOOTS = {None, s.REBOOTING, s.REBOOT_PENDING, s.REBOOT_STARTED, s.REBOOTING_HARD, s.REBOOT_PENDING_HARD,
            s.REBOOT_STARTED_HARD}
_ANY_VM = set(VM_STATES)

# The request, the action its 409 names, the vm_states and the task_states it is allowed from.
ALLOWED = {
    "stop": ("stop", {s.ACTIVE, s.ERROR}, {None}),
    "start": ("start", {s.STOPPED}, {None}),
    "reboot_soft": ("reboot", {s.ACTIVE}, {None}),
    "reboot_hard": ("reboot", {s.ACTIVE, s.STOPPED, s.PAUSED, s.SUSPENDED, s.ERROR}, _REBOOTS),
    "pause": ("pause", {s.ACTIVE}, {None}),
    "unpause": ("unpause", {s.PAUSED}, {None}),
    "suspend": ("suspend", {s.ACTIVE}, {None}),
    "resume": ("resume", {s.SUSPENDED}, {None}),
    "createImage": ("createImage", _IMAGE_VM, {None}),
    "createBackup": ("createBackup", _IMAGE_VM, {None}),
    "shelve": ("shelve", _IMAGE_VM, {None}),
    "shelveOffload": ("shelveOffload", {s.SHELVED}, {None}),
    "unshelve": ("unshelve", {s.SHELVED, s.SHELVED_OFFLOADED}, {None}),
    "rebuild": ("rebuild", {s.ACTIVE, s.STOPPED, s.ERROR}, {None}),
    "changePassword": ("changePassword", {s.ACTIVE}, {None}),
    "rescue": ("rescue", {s.ACTIVE, s.STOPPED, s.ERROR}, {None}),
    "unrescue": ("unrescue", {s.RESCUED}, {None}),
    "resize": ("resize", {s.ACTIVE, s.STOPPED}, {None}),
    "migrate": ("migrate", {s.ACTIVE, s.STOPPED}, {None}),
    "confirmResize": ("confirmResize", {s.RESIZED}, {None}),
    "revertResize": ("revertResize", {s.RESIZED}, {None}),
    "os-migrateLive": ("os-migrateLive", {s.ACTIVE, s.PAUSED}, {None}),
    "evacuate": ("evacuate", {s.ACTIVE, s.STOPPED, s.ERROR}, {None}),
    "force_complete": ("force complete", _ANY_VM, {s.MIGRATING}),
    "abort": ("abort live migration", _ANY_VM, {s.MIGRATING}),
}


# The task_state a request guarded by ``guarded_action`` moves the server to.
SETS = {"stop": s.POWERING_OFF, "start": s.POWERING_ON, "reboot_soft": s.REBOOTING, "reboot_hard": s.REBOOTING_HARD,
        "pause": s.PAUSING, "unpause": s.UNPAUSING, "suspend": s.SUSPENDING, "resume": s.RESUMING,
        "createImage": s.IMAGE_SNAPSHOT, "createBackup": s.IMAGE_BACKUP, "shelve": s.SHELVING,
        "shelveOffload": s.SHELVING_OFFLOADING, "unshelve": s.UNSHELVING, "rebuild": s.REBUILDING,
        "changePassword": s.UPDATING_PASSWORD, "rescue": s.RESCUING, "unrescue": s.UNRESCUING}


class _PastTheChecks(Exception):
    """What the stand-in raises at the first step after a request's state checks."""


class _Trap:
    def __getattr__(self, name):
        raise _PastTheChecks(name)


class _StandInAPI:
    """A ComputeAPI whose server is in the given states and whose every other step stops the request."""

    def __init__(self, vm_state, task_state):
        self.instance = {"uuid": UUID, "vm_state": vm_state, "task_state": task_state, "host": "h1",
                         "node": "n1", "locked": False, "flavor": {"id": 1}, "image_ref": "img",
                         "project_id": "p", "user_id": "u", "display_name": "vm"}
        self.rt = types.SimpleNamespace(db=_Trap(), cfg=_Trap(), bus=_Trap())
        self.image_api = types.SimpleNamespace(get=self._image, check_kernel_and_ramdisk=self._nothing)
        for name in ("guarded_action", "_begin_action", "_revert_task_state", "power_action", "snapshot",
                     "shelve", "shelve_offload", "unshelve", "rebuild", "set_admin_password"):
            setattr(self, name, getattr(ComputeAPI, name).__get__(self))

    async def get(self, ctx, uuid):
        return dict(self.instance)

    def check_lock(self, ctx, instance):
        pass

    async def _check_image(self, ctx, image_ref, flavor):
        return {"id": image_ref, "properties": {}}

    async def _image(self, ctx, image_id):
        return {"id": image_id, "properties": {}}

    async def _nothing(self, *args, **kwargs):
        return None

    def __getattr__(self, name):
        raise _PastTheChecks(name)


_CTX = types.SimpleNamespace(is_admin=True, project_id="p", user_id="u", request_id="req",
                             elevated=lambda: _CTX)
REQUESTS = {
    **{name: (lambda api, name=name: api.power_action(_CTX, UUID, name))
       for name in ("stop", "start", "reboot_soft", "reboot_hard", "pause", "unpause", "suspend", "resume")},
    "createImage": lambda api: api.snapshot(_CTX, UUID, "snap"),
    "createBackup": lambda api: api.snapshot(_CTX, UUID, "backup", backup_type="daily", rotation=1),
    "shelve": lambda api: api.shelve(_CTX, UUID),
    "shelveOffload": lambda api: api.shelve_offload(_CTX, UUID),
    "unshelve": lambda api: api.unshelve(_CTX, UUID),
    "rebuild": lambda api: api.rebuild(_CTX, UUID, "img", {}),
    "changePassword": lambda api: api.set_admin_password(_CTX, UUID, "secret"),
    "rescue": lambda api: rescue.request_rescue(api, _CTX, UUID, password=None, rescue_image_ref=None),
    "unrescue": lambda api: rescue.request_unrescue(api, _CTX, UUID),
    "resize": lambda api: resize.request_resize(api, _CTX, UUID, flavor_id="2"),
    "migrate": lambda api: resize.request_resize(api, _CTX, UUID),
    "confirmResize": lambda api: resize.confirm(api, _CTX, UUID),
    "revertResize": lambda api: resize.revert(api, _CTX, UUID),
    "os-migrateLive": lambda api: live_migration.request(api, _CTX, UUID, host=None, block_migration=None,
                                                         force=None, async_=False),
    "evacuate": lambda api: evacuate_api.request(api, _CTX, UUID, host=None, force=None, target_state=None),
    "force_complete": lambda api: live_migration.force_complete(api, _CTX, UUID, "1"),
    "abort": lambda api: live_migration.abort(api, _CTX, UUID, "1", queued_too=True),
}


async def _answer(request: str, vm_state, task_state) -> tuple[str, str] | None:
    """The 409's (type, message), or None when the request got past its state checks."""
    try:
        await REQUESTS[request](_StandInAPI(vm_state, task_state))
    except exceptions.InstanceInvalidState as exc:
        return type(exc).__name__, str(exc)
    except Exception:  # noqa: BLE001  (any later step: past the checks)
        return None
    raise AssertionError(f"{request} ran to its end in the stand-in")


def _expected(request: str, vm_state, task_state) -> tuple[str, str] | None:
    action, vm_ok, task_ok = ALLOWED[request]
    if vm_state not in vm_ok:
        attr, state = "vm_state", vm_state
    elif task_state not in task_ok:
        attr, state = "task_state", task_state
    else:
        return None
    return "InstanceInvalidState", f"Cannot '{action}' instance {UUID} while it is in {attr} {state}"


def test_every_guarded_request_has_a_probe():
    assert set(REQUESTS) == set(ALLOWED)


@pytest.mark.parametrize("request_name", sorted(ALLOWED))
async def test_the_request_is_refused_from_exactly_the_states_it_was_refused_from(request_name, monkeypatch):
    async def no_files_check(*args, **kwargs):
        return None
    monkeypatch.setattr(quota_sets, "check_injected_files", no_files_check)
    saved = []

    async def first_write(db, uuid, values, **conditions):
        saved.append((values, conditions))
        raise _PastTheChecks("save")
    monkeypatch.setattr(instance_obj, "save", first_write)
    wrong = []
    for vm_state in VM_STATES:
        for task_state in TASK_STATES:
            answer = await _answer(request_name, vm_state, task_state)
            if answer != _expected(request_name, vm_state, task_state):
                wrong.append((vm_state, task_state, answer))
    assert not wrong, wrong[:10]
    if request_name in SETS:
        action, vm_ok, task_ok = ALLOWED[request_name]
        assert saved and all(values == {"task_state": SETS[request_name]} for values, _ in saved)
        assert all(set(c["expected_task_state"]) == task_ok and set(c["expected_vm_state"]) == vm_ok
                   for _, c in saved)
