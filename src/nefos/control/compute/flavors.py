"""Flavors: the sizes servers come in, their extra specs and (for private ones) project access.

Visibility follows Nova: admins see everything on ``show``; others see public
flavors and private ones their project was given access to. Lists default to
public flavors (plus those the caller's project may use) for everyone; admins
may ask ``is_public=false`` or ``is_public=none``.
"""

from __future__ import annotations

import uuid as uuidlib

from sqlalchemy import bindparam, delete as sql_delete, or_, select
from sqlalchemy.exc import IntegrityError

from nefos import exceptions
from nefos.control.compute import regex_filters
from nefos.db.models import Flavor, FlavorExtraSpec, FlavorProject

# (name, flavorid, memory_mb, vcpus, root_gb): Nova's historical defaults plus devstack's tiny ones.
DEFAULT_FLAVORS = [
    ("m1.tiny", "1", 512, 1, 1),
    ("m1.small", "2", 2048, 1, 20),
    ("m1.medium", "3", 4096, 2, 40),
    ("m1.large", "4", 8192, 4, 80),
    ("m1.xlarge", "5", 16384, 8, 160),
    ("m1.nano", "42", 128, 1, 0),
    ("m1.micro", "84", 192, 1, 0),
]

SORT_KEYS = ["created_at", "description", "disabled", "ephemeral_gb", "flavorid", "id", "is_public",
             "memory_mb", "name", "root_gb", "rxtx_factor", "swap", "updated_at", "vcpu_weight", "vcpus"]


def to_dict(row: Flavor, extra_specs: dict[str, str] | None = None) -> dict:
    return {
        "id": row.id, "flavorid": row.flavorid, "name": row.name, "memory_mb": row.memory_mb,
        "vcpus": row.vcpus, "root_gb": row.root_gb or 0, "ephemeral_gb": row.ephemeral_gb or 0,
        "swap": row.swap or 0, "rxtx_factor": row.rxtx_factor if row.rxtx_factor is not None else 1.0,
        "is_public": bool(row.is_public), "disabled": bool(row.disabled), "description": row.description,
        "extra_specs": dict(extra_specs or {}), "created_at": row.created_at, "updated_at": row.updated_at,
    }


FLAVORS = Flavor.__table__


def _visible_clause(project_id):
    """What a non-admin caller may see: public flavors and those given to ``project_id`` (a value,
    or a ``bindparam`` in a statement built once)."""
    access = FlavorProject.__table__
    return or_(FLAVORS.c.is_public.is_(True),
               FLAVORS.c.id.in_(select(access.c.flavor_id).where(access.c.project_id == project_id)))


def _visible_to(ctx):
    """The filter limiting flavors to those ``ctx`` may see (None: no limit)."""
    if ctx is None or ctx.is_admin:
        return None
    return _visible_clause(ctx.project_id)


async def _extra_specs(session, flavor_ids: list[int]) -> dict[int, dict[str, str]]:
    specs: dict[int, dict[str, str]] = {i: {} for i in flavor_ids}
    if flavor_ids:
        rows = (await session.execute(select(FlavorExtraSpec).where(
            FlavorExtraSpec.flavor_id.in_(flavor_ids)))).scalars()
        for r in rows:
            specs[r.flavor_id][r.key] = r.value
    return specs


async def _get_row(session, flavorid, ctx=None) -> Flavor:
    q = select(Flavor).where(Flavor.flavorid == str(flavorid))
    visible = _visible_to(ctx)
    if visible is not None:
        q = q.where(visible)
    row = (await session.execute(q)).scalar_one_or_none()
    if row is None:
        raise exceptions.FlavorNotFound(flavor_id=flavorid)
    return row


_SPECS_OF = select(FlavorExtraSpec.__table__.c.key, FlavorExtraSpec.__table__.c.value).where(
    FlavorExtraSpec.__table__.c.flavor_id == bindparam("b_flavor_id"))
# Built once: every boot reads its flavor (a non-admin caller sees public flavors and its own).
_BY_FLAVORID = select(FLAVORS).where(FLAVORS.c.flavorid == bindparam("b_flavorid"))
_BY_FLAVORID_VISIBLE = _BY_FLAVORID.where(_visible_clause(bindparam("b_project_id")))


async def get_by_flavor_id(db, flavorid: str, ctx=None) -> dict:
    """The flavor with API id ``flavorid`` (as ``ctx`` may see it), with its extra specs."""
    if ctx is None or ctx.is_admin:
        q, params = _BY_FLAVORID, {"b_flavorid": str(flavorid)}
    else:
        q, params = _BY_FLAVORID_VISIBLE, {"b_flavorid": str(flavorid), "b_project_id": ctx.project_id}
    async with db.reader() as s:
        row = (await s.execute(q, params)).one_or_none()  # a Row: attributes named as Flavor's
        if row is None:
            raise exceptions.FlavorNotFound(flavor_id=flavorid)
        specs = dict((await s.execute(_SPECS_OF, {"b_flavor_id": row.id})).all())
    return to_dict(row, specs)


async def ensure_default_flavors(db) -> None:
    """Create the default flavors that are missing (idempotent; safe to race)."""
    async with db.reader() as s:
        existing = {(r.flavorid, r.name) for r in (await s.execute(select(Flavor))).scalars()}
    ids = {i for i, _ in existing}
    names = {n for _, n in existing}
    for name, flavorid, ram, vcpus, disk in DEFAULT_FLAVORS:
        if flavorid in ids or name in names:
            continue
        try:
            async with db.transaction() as s:
                s.add(Flavor(flavorid=flavorid, name=name, memory_mb=ram, vcpus=vcpus, root_gb=disk,
                             ephemeral_gb=0, swap=0, rxtx_factor=1.0, is_public=True, disabled=False))
        except IntegrityError:
            pass  # created meanwhile by another process


def _sort_key(key: str):
    def value(row: Flavor):
        v = getattr(row, key, None) if key != "vcpu_weight" else None
        return (v is not None, v if v is not None else 0, row.id)
    return value


async def list_flavors(db, ctx, *, is_public: bool | None = True, min_ram: int | None = None,
                       min_disk: int | None = None, sort_key: str = "flavorid", sort_dir: str = "asc",
                       limit: int | None = None, marker: str | None = None, name: str | None = None) -> list[dict]:
    """Nova's ``FlavorList.get_all`` (non-admins: only enabled flavors they may see; ``name``: a
    regular expression the name must contain a match of, as Nova's REGEXP filter, 2.102)."""
    q = select(Flavor)
    visible = _visible_to(ctx)
    if visible is not None:
        q = q.where(visible, Flavor.disabled.is_(False))
    if is_public is not None:
        if is_public and ctx is not None and ctx.project_id is not None:
            access = select(FlavorProject.flavor_id).where(FlavorProject.project_id == ctx.project_id)
            q = q.where(or_(Flavor.is_public.is_(True), Flavor.id.in_(access)))
        else:
            q = q.where(Flavor.is_public.is_(bool(is_public)))
    if min_ram is not None:
        q = q.where(Flavor.memory_mb >= min_ram)
    if min_disk is not None:
        q = q.where(Flavor.root_gb >= min_disk)
    async with db.reader() as s:
        rows = list((await s.execute(q)).scalars())
        if name:
            matched = await regex_filters.apply([{"name": r.name, "row": r} for r in rows], columns={"name": name})
            rows = [m["row"] for m in matched]
        marker_row = None
        if marker is not None:
            try:
                marker_row = await _get_row(s, marker, ctx)
            except exceptions.FlavorNotFound:
                raise exceptions.MarkerNotFound(f"marker [{marker}] not found", marker=marker)
        key = _sort_key(sort_key)
        descending = sort_dir == "desc"
        rows.sort(key=key, reverse=descending)
        if marker_row is not None:
            mk = key(marker_row)
            rows = [r for r in rows if (key(r) < mk if descending else key(r) > mk)]
        if limit is not None:
            rows = rows[:limit]
        specs = await _extra_specs(s, [r.id for r in rows])
    return [to_dict(r, specs[r.id]) for r in rows]


async def create(db, *, name: str, memory_mb: int, vcpus: int, root_gb: int, ephemeral_gb: int = 0,
                 swap: int = 0, rxtx_factor: float = 1.0, is_public: bool = True,
                 flavorid: str | None = None, description: str | None = None) -> dict:
    """A new flavor (auto uuid id when none given); 409 when its name or id is taken."""
    flavorid = str(flavorid) if flavorid not in (None, "") else str(uuidlib.uuid4())
    try:
        async with db.transaction() as s:
            clash = (await s.execute(select(Flavor).where(
                or_(Flavor.name == name, Flavor.flavorid == flavorid)))).scalars().first()
            if clash is not None:
                if clash.flavorid == flavorid:
                    raise exceptions.FlavorExists(what="ID", value=flavorid)
                raise exceptions.FlavorExists(what="name", value=name)
            row = Flavor(flavorid=flavorid, name=name, memory_mb=memory_mb, vcpus=vcpus, root_gb=root_gb,
                         ephemeral_gb=ephemeral_gb, swap=swap, rxtx_factor=rxtx_factor,
                         is_public=is_public, disabled=False, description=description)
            s.add(row)
            await s.flush()
    except IntegrityError:
        raise exceptions.FlavorExists(what="name", value=name)
    return to_dict(row, {})


async def set_description(db, flavorid: str, description: str | None) -> dict:
    """Change a flavor's description (Nova's ``PUT /flavors/{id}``, 2.55); the flavor after."""
    async with db.transaction() as s:
        row = await _get_row(s, flavorid)
        row.description = description
        await s.flush()
        specs = await _extra_specs(s, [row.id])
    return to_dict(row, specs.get(row.id))


async def delete(db, flavorid: str) -> None:
    async with db.transaction() as s:
        row = await _get_row(s, flavorid)
        await s.execute(sql_delete(FlavorExtraSpec).where(FlavorExtraSpec.flavor_id == row.id))
        await s.execute(sql_delete(FlavorProject).where(FlavorProject.flavor_id == row.id))
        await s.delete(row)


# Extra specs ---------------------------------------------------------------------

async def get_extra_specs(db, flavorid: str, ctx=None) -> dict[str, str]:
    return (await get_by_flavor_id(db, flavorid, ctx))["extra_specs"]


async def update_extra_specs(db, flavorid: str, specs: dict[str, str]) -> dict[str, str]:
    """Create or overwrite ``specs`` (other keys stay)."""
    async with db.transaction() as s:
        row = await _get_row(s, flavorid)
        existing = {r.key: r for r in (await s.execute(select(FlavorExtraSpec).where(
            FlavorExtraSpec.flavor_id == row.id))).scalars()}
        for key, value in specs.items():
            if key in existing:
                existing[key].value = value
            else:
                s.add(FlavorExtraSpec(flavor_id=row.id, key=key, value=value))
    return specs


async def delete_extra_spec(db, flavorid: str, key: str) -> None:
    async with db.transaction() as s:
        row = await _get_row(s, flavorid)
        result = await s.execute(sql_delete(FlavorExtraSpec).where(
            FlavorExtraSpec.flavor_id == row.id, FlavorExtraSpec.key == key))
        if result.rowcount != 1:
            raise exceptions.FlavorExtraSpecsNotFound(flavor_id=flavorid, extra_specs_key=key)


# Access to private flavors ----------------------------------------------------------

async def list_access(db, flavorid: str) -> list[dict]:
    async with db.reader() as s:
        row = await _get_row(s, flavorid)
        if row.is_public:
            raise exceptions.NotFound("Access list not available for public flavors.")
        projects = (await s.execute(select(FlavorProject.project_id).where(
            FlavorProject.flavor_id == row.id).order_by(FlavorProject.id))).scalars().all()
    return [{"flavor_id": row.flavorid, "tenant_id": p} for p in projects]


async def add_access(db, flavorid: str, project_id: str) -> list[dict]:
    try:
        async with db.transaction() as s:
            row = await _get_row(s, flavorid)
            if row.is_public:
                raise exceptions.Conflict("Can not add access to a public flavor.")
            exists = (await s.execute(select(FlavorProject.id).where(
                FlavorProject.flavor_id == row.id, FlavorProject.project_id == project_id))).first()
            if exists:
                raise exceptions.FlavorAccessExists(flavor_id=flavorid, project_id=project_id)
            s.add(FlavorProject(flavor_id=row.id, project_id=project_id))
    except IntegrityError:
        raise exceptions.FlavorAccessExists(flavor_id=flavorid, project_id=project_id)
    return await list_access(db, flavorid)


async def remove_access(db, flavorid: str, project_id: str) -> list[dict]:
    async with db.transaction() as s:
        row = await _get_row(s, flavorid)
        result = await s.execute(sql_delete(FlavorProject).where(
            FlavorProject.flavor_id == row.id, FlavorProject.project_id == project_id))
        if result.rowcount != 1:
            raise exceptions.FlavorAccessNotFound(flavor_id=flavorid, project_id=project_id)
    return await list_access(db, flavorid)
