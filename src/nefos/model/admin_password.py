"""The password a create, rebuild or evacuation answers or is given (``adminPass``), until the
guest has it (an evacuation's is kept by the destination host before it spawns the guest).

Nova hands it to the hypervisor driver, which writes it into the config drive's meta_data.json as
``admin_pass``. Nefos keeps it in the instance's system metadata (``admin_pass``, never shown by the
API), so that a config drive built at spawn or at rebuild and the metadata service both serve it in
meta_data.json: the config drive for as long as the guest has the drive (as Nova's), the metadata
service once, to the guest's first read of a meta_data.json, after which it is dropped (the metadata
service of Nova serves none: a guest without a config drive would never get it). The tiny guest sets
root's password from it.
"""

from __future__ import annotations

KEY = "admin_pass"


def extract(instance: dict) -> str | None:
    return (instance.get("system_metadata") or {}).get(KEY) or None


def kept(system_metadata: dict | None, password: str | None) -> dict:
    """``system_metadata`` holding ``password`` (a previous one dropped when None)."""
    others = {k: v for k, v in (system_metadata or {}).items() if k != KEY}
    return {**others, KEY: password} if password else others

