"""The request context of an instance's unfinished action, for work a host resumes (after its
restart, or a lost request) to land in the action the user started, as Nova's compute manager
does when it finishes interrupted operations."""

from __future__ import annotations

from nefos.context import RequestContext, admin_context


async def action_context(manager, uuid: str, action: str | None) -> RequestContext:
    """The context of the unfinished ``action`` on the instance (None: its newest unfinished action
    of any kind), so resumed work lands in it."""
    row = await manager.conductor.unfinished_action(None, uuid, action)
    if row is None:
        return admin_context()
    return RequestContext(project_id=row["project_id"], user_id=row["user_id"], request_id=row["request_id"],
                          roles=["admin"], is_admin=True)
