"""Rescue and unrescue, the API side (Nova's ``rescue``/``unrescue`` in ``nova.compute.api``; the
host's side is ``nefos.host.compute.rescue``).

Rescue is refused (409) unless the server is unlocked, ACTIVE, STOPPED or ERROR with no task; a
``rescue_image_ref`` must be an image the caller can see and not a volume snapshot (400
otherwise, Nova's ``UnsupportedRescueImage``). task_state ``rescuing`` is set, the ``rescue``
action recorded and the host told. Unrescue only from RESCUED (409 otherwise), task_state
``unrescuing``, action ``unrescue``.
"""

from __future__ import annotations

from nefos import exceptions
from nefos.objects import actions
from nefos.model import state_machine


class UnsupportedRescueImage(exceptions.Invalid):
    message = "Requested rescue image '%(image)s' is not supported"


async def request_rescue(compute_api, ctx, uuid: str, *, password: str | None,
                         rescue_image_ref: str | None) -> None:
    instance = await compute_api.get(ctx, uuid)
    compute_api.check_lock(ctx, instance)
    state_machine.check(actions.RESCUE, instance)  # before the image is read: a 409 comes first
    if rescue_image_ref:
        try:
            image = await compute_api.image_api.get(ctx, rescue_image_ref)
        except exceptions.NotFound:
            raise UnsupportedRescueImage(image=rescue_image_ref) from None
        if (image.get("properties") or {}).get("img_block_device_mapping"):
            raise UnsupportedRescueImage(image=rescue_image_ref)  # Nova cannot rescue from a volume snapshot
    async with compute_api.guarded_action(ctx, uuid, actions.RESCUE) as instance:
        await compute_api.compute_rpcapi.rescue_instance(ctx, instance["host"], uuid, password,
                                                         rescue_image_ref)


async def request_unrescue(compute_api, ctx, uuid: str) -> None:
    async with compute_api.guarded_action(ctx, uuid, actions.UNRESCUE) as instance:
        await compute_api.compute_rpcapi.unrescue_instance(ctx, instance["host"], uuid)
