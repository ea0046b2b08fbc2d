"""The Identity API's groups (``/v3/groups``): not supported, so the list is always empty."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from nefos import openapi
from nefos.control.identity import schemas
from nefos.control.identity.rest.http import auth, authorize, list_links
from nefos.clients.identity.tokens import TokenData

router = APIRouter()


@router.get("/v3/groups")
@openapi.documented(responses={200: schemas.many("groups", schemas.GROUP)})
async def list_groups(request: Request, tok: TokenData = Depends(auth)):
    authorize(tok, "list_groups")
    return {"groups": [], "links": list_links(request)}  # groups are not supported: there are none
