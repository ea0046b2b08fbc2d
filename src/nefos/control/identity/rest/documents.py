"""The Identity API's documents of its rows (Keystone v3's shapes, with their self links)."""

from __future__ import annotations

from fastapi import Request

from nefos.db.models import IdentityDomain, IdentityProject, IdentityRole, IdentityUser
from nefos.control.identity.rest.http import self_link


def domain_doc(request: Request, d: IdentityDomain) -> dict:
    return {"id": d.id, "name": d.name, "description": d.description or "", "enabled": d.enabled,
            "tags": d.tags or [], "options": {}, "links": self_link(request, f"domains/{d.id}")}


def project_doc(request: Request, p: IdentityProject) -> dict:
    return {"id": p.id, "name": p.name, "domain_id": p.domain_id, "description": p.description or "",
            "enabled": p.enabled, "parent_id": p.parent_id or p.domain_id, "is_domain": False,
            "tags": p.tags or [], "options": {}, "links": self_link(request, f"projects/{p.id}")}


def user_doc(request: Request, u: IdentityUser) -> dict:
    doc = dict(u.extra or {})
    doc.update({"id": u.id, "name": u.name, "domain_id": u.domain_id, "enabled": u.enabled,
                "password_expires_at": None, "options": dict(u.options or {}),
                "links": self_link(request, f"users/{u.id}")})
    if u.default_project_id:
        doc["default_project_id"] = u.default_project_id
    if u.description:
        doc["description"] = u.description
    return doc


def role_doc(request: Request, r: IdentityRole) -> dict:
    return {"id": r.id, "name": r.name, "domain_id": None, "description": r.description or "",
            "options": {}, "links": self_link(request, f"roles/{r.id}")}
