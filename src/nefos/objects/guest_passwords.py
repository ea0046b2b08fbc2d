"""The guest's passwords written to the instance's system metadata: the ``adminPass`` dropped once
the guest was served it (``nefos.model.admin_password``), the encrypted password the guest posts
(``nefos.model.server_password``). Apart from their keys, which a compute host reads without the
database."""

from __future__ import annotations

from nefos import exceptions
from nefos.model import admin_password, server_password
from nefos.objects import instance as instance_obj


async def forget_admin_password(db, uuid: str, password: str) -> None:
    """Drop ``password`` once the guest was served it (not a newer one a rebuild put there)."""
    def without(instance: dict) -> dict | None:
        if admin_password.extract(instance) != password:
            return None
        return admin_password.kept(instance.get("system_metadata"), None)
    await instance_obj.change_system_metadata(db, uuid, without)


async def store_server_password(db, uuid: str, password: str | None, *, only_if_unset: bool = False) -> None:
    """Write (or, with None, clear) the guest's encrypted password; ``only_if_unset``: 409 when one is
    already there (the metadata service's POST, as Nova's). The other system metadata keys are kept
    (``instance.change_system_metadata``)."""
    def with_password(instance: dict) -> dict:
        if only_if_unset and server_password.extract(instance):
            raise exceptions.Conflict("The password was already set.")
        return {**(instance.get("system_metadata") or {}), **server_password.chunks(password)}
    await instance_obj.change_system_metadata(db, uuid, with_password)
