"""Quota sets as the Compute API shows them, over ``nefos.objects.quotas``.

Limits live in ``quotas`` (a row overrides the configured default); usage in
``quota_usages``. Nova also shows resources Nefos does not enforce (floating
and fixed IPs, injected files): they have Nova's defaults, and a set value is
stored and shown like any other. Security groups and their rules are the networking service's
quota (its defaults, e.g. 100 rules, are what is enforced); the Compute API shows Nova's own
default for them (20 rules) until its quota class or the project sets one, as a Nova beside
Neutron shows its unenforced values; the quota class's values never reach the networking service.
"""

from __future__ import annotations

from sqlalchemy import delete, select, update as sql_update
from sqlalchemy.exc import IntegrityError

from nefos import exceptions
from nefos.db.models import Quota, QuotaClass
from nefos.objects import quotas

# Resources only the Compute API knows, with Nova's defaults.
NOVA_ONLY_DEFAULTS = {
    "floating_ips": 10,
    "fixed_ips": -1,
    "injected_files": 5,
    "injected_file_content_bytes": 10240,
    "injected_file_path_bytes": 255,
}
# Nova's defaults shown instead of the networking service's, unless a class or the project sets one.
NOVA_VIEW_DEFAULTS = {"security_group_rules": 20}
# Nova's quota classes hold Nova's own numbers for the network resources: the networking service (as
# Neutron) neither reads them nor is changed by them, so they are kept under names of their own.
_CLASS_ONLY = ("security_groups", "security_group_rules")
_CLASS_PREFIX = "compute:"
_BASE = ["instances", "cores", "ram", "metadata_items", "key_pairs", "server_groups", "server_group_members"]
_NETWORK = ["floating_ips", "fixed_ips", "security_groups", "security_group_rules"]
_INJECTED = ["injected_files", "injected_file_content_bytes", "injected_file_path_bytes"]


def resources_for(version, *, updatable: bool = False) -> list[str]:
    """The quota resources a request at ``version`` shows (or, ``updatable``, may set)."""
    names = list(_BASE)
    if not version.matches("2.36"):
        names += _NETWORK
        if updatable:
            names.append("networks")
    if not version.matches("2.57"):
        names += _INJECTED
    return names


def quota_class_resources(version) -> list[str]:
    """Quota classes hide nothing before 2.50 but the server group resources; then as quota sets."""
    if not version.matches("2.50"):
        return [r for r in _BASE if r not in ("server_groups", "server_group_members")] + _NETWORK + _INJECTED
    names = list(_BASE)
    if not version.matches("2.57"):
        names += _INJECTED
    return names


def defaults(cfg) -> dict[str, int]:
    result = quotas.configured_defaults(cfg)
    result.update(NOVA_ONLY_DEFAULTS)
    return result


def _class_row(resource: str) -> str:
    return _CLASS_PREFIX + resource if resource in _CLASS_ONLY else resource


async def _compute_class_values(s) -> dict[str, int]:
    """The ``default`` class's values of the network resources, as set through the Compute API."""
    rows = await s.execute(select(QuotaClass.resource, QuotaClass.hard_limit).where(
        QuotaClass.class_name == quotas.DEFAULT_CLASS, QuotaClass.resource.in_([_class_row(r) for r in _CLASS_ONLY])))
    return {resource.removeprefix(_CLASS_PREFIX): limit for resource, limit in rows}


def _network_view(result: dict[str, int], configured: dict[str, int], compute_class: dict[str, int],
                  project_own: set[str]) -> None:
    """The network resources as Nova shows them: the project's own limit, else the Compute API's
    class value, else Nova's default (shown, not enforced: the networking service enforces its own)."""
    for resource in _CLASS_ONLY:
        if resource in project_own:
            continue
        result[resource] = compute_class.get(resource, NOVA_VIEW_DEFAULTS.get(resource, configured[resource]))


async def get_defaults(db, cfg) -> dict[str, int]:
    """The defaults as the API shows them: configuration, Nova-only resources, the default class."""
    result = defaults(cfg)
    async with db.reader() as s:
        result.update({r: v for r, v in (await quotas.class_defaults(s, cfg)).items()
                       if r not in _CLASS_ONLY and not r.startswith(_CLASS_PREFIX)})
        _network_view(result, defaults(cfg), await _compute_class_values(s), set())
    return result


async def get_limits(db, cfg, project_id: str) -> dict[str, int]:
    result = defaults(cfg)
    async with db.reader() as s:
        result.update({r: v for r, v in (await quotas.limits(s, cfg, project_id)).items()
                       if not r.startswith(_CLASS_PREFIX)})
        own = set((await s.execute(select(Quota.resource).where(Quota.project_id == project_id))).scalars())
        _network_view(result, defaults(cfg), await _compute_class_values(s), own)
    return result


async def check_injected_files(db, cfg, project_id: str, files: list[dict]) -> None:
    """Nova's ``_check_injected_file_quota``: the number of files, then the longest path and the
    longest (base64) contents against the project's limits (403; the path limit reported first)."""
    if not files:
        return
    limits = await get_limits(db, cfg, project_id)

    def over(resource: str, value: int) -> bool:
        return 0 <= limits[resource] < value

    if over("injected_files", len(files)):
        raise exceptions.OnsetFileLimitExceeded()
    if over("injected_file_path_bytes", max(len(f["path"]) for f in files)):
        raise exceptions.OnsetFilePathLimitExceeded(allowed=limits["injected_file_path_bytes"])
    if over("injected_file_content_bytes", max(len(f["contents"]) for f in files)):
        raise exceptions.OnsetFileContentLimitExceeded(allowed=limits["injected_file_content_bytes"])


async def update_class(db, class_name: str, values: dict[str, int]) -> None:
    """Set a quota class's limits (one row per resource, concurrent writers converge)."""
    for resource, limit in ((_class_row(r), v) for r, v in values.items()):
        for _attempt in range(2):
            try:
                async with db.transaction() as s:
                    result = await s.execute(sql_update(QuotaClass).where(
                        QuotaClass.class_name == class_name, QuotaClass.resource == resource)
                        .values(hard_limit=limit).execution_options(synchronize_session=False))
                    if result.rowcount == 0:
                        s.add(QuotaClass(class_name=class_name, resource=resource, hard_limit=limit))
                break
            except IntegrityError:  # created concurrently: update it
                continue


async def get_usages(db, project_id: str) -> dict[str, int]:
    async with db.reader() as s:
        used = await quotas.usages(s, project_id)
    return {**{r: 0 for r in NOVA_ONLY_DEFAULTS}, **used}


async def update(db, cfg, project_id: str, values: dict[str, int], force: bool = False) -> None:
    """Set limits; unless ``force``, a limit below what is in use is refused (400)."""
    try:
        await _update(db, project_id, values, force)
    except IntegrityError:  # a concurrent update created one of the rows first
        await _update(db, project_id, values, force)


async def _update(db, project_id: str, values: dict[str, int], force: bool) -> None:
    async with db.transaction() as s:
        if not force:
            used = await quotas.usages(s, project_id)
            for resource, limit in values.items():
                in_use = used.get(resource, 0)
                if limit != -1 and limit < in_use:
                    raise exceptions.ValidationError(
                        f"Quota limit {limit} for {resource} must be greater than or equal to "
                        f"already used and reserved {in_use}.")
        existing = {r.resource: r for r in (await s.execute(select(Quota).where(
            Quota.project_id == project_id, Quota.resource.in_(list(values))))).scalars()}
        for resource, limit in values.items():
            if resource in existing:
                existing[resource].hard_limit = limit
            else:
                s.add(Quota(project_id=project_id, resource=resource, hard_limit=limit))


async def reset(db, project_id: str) -> None:
    """Back to the defaults: drop every per-project limit."""
    async with db.transaction() as s:
        await s.execute(delete(Quota).where(Quota.project_id == project_id))
