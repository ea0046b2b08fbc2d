"""``/v2.1/os-instance_usage_audit_log``: the instance usage audit of the last completed period
(admin only), as Nova's InstanceUsageAuditLogController.

Nova builds the answer from the ``task_log`` records its ``instance_usage_audit`` periodic task
writes on each compute host. Nefos runs no such task, so it answers as a Nova whose
``instance_usage_audit`` is off: no host has a record for the period, every compute service
(disabled ones too) is a host that has not run, and the period is Nova's default monthly one.
"""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter, Request

from nefos import exceptions, rest
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute import services as services_mod
from nefos.db.models import utcnow
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()


def last_completed_month(before: dt.datetime | None = None) -> tuple[dt.datetime, dt.datetime]:
    """Nova's ``last_completed_audit_period`` for its default unit ``month``: the last whole
    calendar month ended before ``before`` (now by default)."""
    now = before if before is not None else utcnow()
    end = dt.datetime(now.year, now.month, 1)
    if end >= now:
        end = dt.datetime(now.year - 1, 12, 1) if now.month == 1 else dt.datetime(now.year, now.month - 1, 1)
    begin = dt.datetime(end.year - 1, 12, 1) if end.month == 1 else dt.datetime(end.year, end.month - 1, 1)
    return begin, end


async def _audit_log(request: Request, before: dt.datetime | None = None) -> dict:
    begin, end = last_completed_month(before)
    rt = request.app.state.rt
    services = await services_mod.list_services(rt.db, rt.cfg, binary=services_mod.COMPUTE_BINARY)
    hosts = sorted({s["host"] for s in services})
    task_logs: list[dict] = []  # no instance_usage_audit task runs here
    done = {t["host"] for t in task_logs if t["state"] == "DONE"}
    running = {t["host"] for t in task_logs if t["state"] == "RUNNING"}
    seen = {t["host"] for t in task_logs}
    total_errors = sum(t["errors"] for t in task_logs)
    not_run = [h for h in hosts if h not in seen]
    done_text = "ALL" if len(done) == len(hosts) else f"{len(done)} of {len(hosts)}"
    return {
        "period_beginning": str(begin), "period_ending": str(end),
        "num_hosts": len(hosts), "num_hosts_done": len(done), "num_hosts_running": len(running),
        "num_hosts_not_run": len(not_run), "hosts_not_run": not_run,
        "total_instances": sum(t["task_items"] for t in task_logs), "total_errors": total_errors,
        "overall_status": f"{done_text} hosts done. {total_errors} errors.",
        "log": {t["host"]: {"state": t["state"], "instances": t["task_items"], "errors": t["errors"],
                            "message": t["message"]} for t in task_logs},
    }


@router.get("/v2.1/os-instance_usage_audit_log")
@documented(responses={200: responses.INSTANCE_USAGE_AUDIT_LOGS})
async def list_audit_logs(request: Request):
    authorize(rest.get_context(request), "os_compute_api:os-instance-usage-audit-log:list", {})
    return {"instance_usage_audit_logs": await _audit_log(request)}


@router.get("/v2.1/os-instance_usage_audit_log/{before_timestamp}")
@documented(responses={200: responses.INSTANCE_USAGE_AUDIT_LOG})
async def show_audit_log(request: Request, before_timestamp: str):
    authorize(rest.get_context(request), "os_compute_api:os-instance-usage-audit-log:show", {})
    fmt = "%Y-%m-%d %H:%M:%S.%f" if "." in before_timestamp else "%Y-%m-%d %H:%M:%S"
    try:
        before = dt.datetime.strptime(before_timestamp, fmt)
    except ValueError:
        raise exceptions.ValidationError(f"Invalid timestamp for date {before_timestamp}") from None
    return {"instance_usage_audit_log": await _audit_log(request, before)}
