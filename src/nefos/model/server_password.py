"""The guest's encrypted password, kept as Nova keeps it: in the instance's system metadata as
``password_0`` .. ``password_3``, 255 characters each (Nova's ``nova.api.metadata.password``).

The guest posts it once to the metadata service (``openstack/<version>/password``); its owner
reads it with ``GET /servers/{id}/os-server-password`` and clears it with ``DELETE``.
"""

from __future__ import annotations

CHUNKS = 4
CHUNK_LENGTH = 255
MAX_SIZE = CHUNKS * CHUNK_LENGTH
_KEYS = [f"password_{i}" for i in range(CHUNKS)]


def extract(instance: dict) -> str:
    """The stored password ("" when none was posted or it was cleared)."""
    sysmeta = instance.get("system_metadata") or {}
    return "".join(sysmeta[key] or "" for key in sorted(sysmeta) if key.startswith("password_"))


def chunks(password: str | None) -> dict[str, str]:
    """The system metadata keys holding ``password`` (None: all emptied, as Nova clears)."""
    password = password or ""
    return {key: password[i * CHUNK_LENGTH:(i + 1) * CHUNK_LENGTH] for i, key in enumerate(_KEYS)}

