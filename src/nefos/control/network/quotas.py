"""The Networking quotas (Neutron's ``quotas`` extension): the limits API, and the usage every
network service counts in the transaction that creates or deletes a resource (conditional
UPDATEs of ``quota_usages``, ``nefos.objects.quotas``), in Neutron's resource names."""

from __future__ import annotations

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from nefos import exceptions
from nefos.context import RequestContext
from nefos.db.models import Quota, QuotaUsage, utcnow
from nefos.control.network import attributes as attrs
from nefos.control.network.common import QUOTA_RESOURCES, not_owner
from nefos.control.network.store import NetworkStore
from nefos.objects import quotas

_PLURAL_TO_NEUTRON = {v: k for k, v in QUOTA_RESOURCES.items()}


class NetworkQuotas:
    """The quota API (bus and REST) and the usage counting of the other services."""

    def __init__(self, store: NetworkStore, cfg):
        self.store = store
        self.cfg = cfg

    # Usage, within the changing transaction ------------------------------------------------

    async def consume(self, s, project_id: str | None, **deltas: int) -> None:
        """Count ``deltas`` (Neutron's names: ``port=1``) against the project's limits (OverQuota)."""
        try:
            await quotas.consume(s, self.cfg, project_id, {QUOTA_RESOURCES[k]: v for k, v in deltas.items()})
        except exceptions.OverQuota as exc:
            overs = [_PLURAL_TO_NEUTRON.get(o, o) for o in exc.kwargs.get("overs", [])]
            raise exceptions.OverQuota(f"Quota exceeded for resources: {overs}.", overs=overs)

    async def release(self, s, project_id: str | None, **deltas: int) -> None:
        await quotas.release(s, project_id, {QUOTA_RESOURCES[k]: v for k, v in deltas.items()})

    async def force_usage(self, s, project_id: str | None, **deltas: int) -> None:
        """Count resources the service creates by itself (the default group) without a limit check."""
        if not project_id:
            return
        for name, delta in deltas.items():
            resource = QUOTA_RESOURCES[name]
            result = await s.execute(update(QuotaUsage).where(
                QuotaUsage.project_id == project_id, QuotaUsage.resource == resource)
                .values(in_use=QuotaUsage.in_use + delta).execution_options(synchronize_session=False))
            if result.rowcount == 0:
                try:
                    async with s.begin_nested():
                        await s.execute(insert(QuotaUsage).values(
                            project_id=project_id, resource=resource, in_use=delta, created_at=utcnow()))
                except IntegrityError:
                    await s.execute(update(QuotaUsage).where(
                        QuotaUsage.project_id == project_id, QuotaUsage.resource == resource)
                        .values(in_use=QuotaUsage.in_use + delta).execution_options(synchronize_session=False))

    async def port_quota(self, s, project_id: str) -> dict:
        """``get_quota_details(...)["port"]``'s limit and usage, within the session ``s``."""
        limits, used = await quotas.limits_and_usages(s, self.cfg, project_id)
        return {"limit": limits[QUOTA_RESOURCES["port"]], "used": used[QUOTA_RESOURCES["port"]]}

    @staticmethod
    def check_access(ctx: RequestContext, project_id: str, write: bool = False) -> None:
        if ctx.is_admin:
            return
        if write:
            raise not_owner("update_quota")
        if project_id != ctx.project_id:
            raise exceptions.NotAuthorized("Non-admin is not authorized to access quotas for another tenant")

    # The quota API ----------------------------------------------------------------------------

    def _default_quota(self) -> dict:
        return {name: getattr(self.cfg, f"quota_{plural}") for name, plural in QUOTA_RESOURCES.items()}

    async def get_quota(self, ctx: RequestContext, project_id: str) -> dict:
        """The project's limits in Neutron's names (``{"network": 100, ...}``)."""
        self.check_access(ctx, project_id)
        async with self.store.reader() as s:
            limits = await quotas.limits(s, self.cfg, project_id)
        return {name: limits[plural] for name, plural in QUOTA_RESOURCES.items()}

    async def get_quota_default(self, ctx: RequestContext, project_id: str | None = None) -> dict:
        return self._default_quota()

    async def get_quota_details(self, ctx: RequestContext, project_id: str) -> dict:
        """Limits and usage: ``{"port": {"limit": 500, "used": 3, "reserved": 0}, ...}``."""
        self.check_access(ctx, project_id)
        async with self.store.reader() as s:
            limits, used = await quotas.limits_and_usages(s, self.cfg, project_id)
        return {name: {"limit": limits[plural], "used": used[plural], "reserved": 0}
                for name, plural in QUOTA_RESOURCES.items()}

    async def update_quota(self, ctx: RequestContext, project_id: str, quota: dict) -> dict:
        self.check_access(ctx, project_id, write=True)
        if not isinstance(quota, dict) or not quota:
            raise attrs.bad_request("Invalid format for quota: expected an object of limits.")
        unknown = sorted(k for k in quota if k not in QUOTA_RESOURCES)
        if unknown:
            raise attrs.bad_request(f"Unrecognized attribute(s) '{', '.join(unknown)}'")
        values = {k: attrs.v_int(-1)(v, k) for k, v in quota.items()}
        async with self.store.transaction() as s:
            for name, limit in values.items():
                plural = QUOTA_RESOURCES[name]
                result = await s.execute(update(Quota).where(Quota.project_id == project_id,
                                                             Quota.resource == plural)
                                         .values(hard_limit=limit, updated_at=utcnow()))
                if result.rowcount == 0:
                    try:
                        async with s.begin_nested():
                            await s.execute(insert(Quota).values(project_id=project_id, resource=plural,
                                                                 hard_limit=limit, created_at=utcnow()))
                    except IntegrityError:
                        await s.execute(update(Quota).where(Quota.project_id == project_id,
                                                            Quota.resource == plural).values(hard_limit=limit))
        return await self.get_quota(ctx, project_id)

    async def delete_quota(self, ctx: RequestContext, project_id: str) -> None:
        """Back to the defaults."""
        self.check_access(ctx, project_id, write=True)
        async with self.store.transaction() as s:
            await s.execute(delete(Quota).where(Quota.project_id == project_id,
                                                Quota.resource.in_(list(QUOTA_RESOURCES.values()))))

    async def list_quotas(self, ctx: RequestContext) -> list[dict]:
        """Every project with a non-default network limit."""
        if not ctx.is_admin:
            raise not_owner("get_quota")
        async with self.store.reader() as s:
            projects = sorted(set((await s.execute(select(Quota.project_id).where(
                Quota.resource.in_(list(QUOTA_RESOURCES.values()))))).scalars()))
        out = []
        for project in projects:
            doc = await self.get_quota(ctx, project)
            doc.update(project_id=project, tenant_id=project)
            out.append(doc)
        return out
