"""The Compute API's one authorization entry: Nova's policy rule for the caller's context on a
target, refused with 403 in Nova's body. Every route and the Compute API's own layer ask it."""

from __future__ import annotations

from nefos import policy
from nefos.context import RequestContext


def authorize(ctx: RequestContext, rule: str, target: dict | None = None) -> RequestContext:
    """``ctx`` once policy ``rule`` passes for it on ``target`` (the caller's own project and user
    when None); PolicyNotAuthorized (403) otherwise."""
    policy.enforce(ctx, rule, target)
    return ctx
