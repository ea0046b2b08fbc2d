"""The Networking API v2.0 (the subset Nefos serves), Neutron-compatible on the wire.

Errors use Neutron's body ``{"NeutronError": {"type", "message", "detail"}}``;
every route calls the service of the network manager that owns the operation (``manager.py``).
"""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import Request
from starlette.responses import JSONResponse, Response

from nefos import exceptions, openapi, policy, rest
from nefos.control.network import attributes as attrs
from nefos.control.network import schemas

# collection -> (member name, manager method suffix for one, for many)
COLLECTIONS = {
    "networks": ("network", "network", "networks"),
    "subnets": ("subnet", "subnet", "subnets"),
    "ports": ("port", "port", "ports"),
    "security-groups": ("security_group", "security_group", "security_groups"),
    "security-group-rules": ("security_group_rule", "security_group_rule", "security_group_rules"),
    "routers": ("router", "router", "routers"),
    "floatingips": ("floatingip", "floatingip", "floatingips"),
}
# collection -> the network manager's service that owns it
OWNERS = {"networks": "networks", "subnets": "networks", "ports": "ports", "security-groups": "security_groups",
          "security-group-rules": "security_groups", "routers": "routers", "floatingips": "floating_ips"}
# The JSON key of a collection (Neutron uses underscores in bodies, dashes in URLs).
BODY_KEYS = {"security-groups": "security_groups", "security-group-rules": "security_group_rules"}

EXTENSIONS = [
    ("binding", "Port Binding", "Expose port bindings of a virtual port to external application"),
    ("security-group", "security-group", "The security groups extension."),
    ("quotas", "Quota management support", "Expose functions for quotas management per tenant"),
    ("quota_details", "Quota details management support",
     "Expose functions for quotas usage statistics per project"),
    ("port-security", "Port Security", "Provides port security"),
    ("external-net", "Neutron external network", "Adds external network attribute to network resource."),
    ("net-mtu", "Network MTU", "Provides MTU attribute for a network resource."),
    ("net-mtu-writable", "Network MTU (writable)", "Provides a writable MTU attribute for a network resource."),
    ("provider", "Provider Network", "Expose mapping of virtual networks to physical networks"),
    ("standard-attr-description", "standard-attr-description",
     "Extension to add descriptions to standard attributes"),
    ("standard-attr-timestamp", "Resource timestamps",
     "Adds created_at and updated_at fields to all Neutron resources that have Neutron standard attributes."),
    ("standard-attr-revisions", "Resource revision numbers",
     "This extension will display the revision number of neutron resources."),
    ("project-id", "project_id field enabled", "Extension that indicates that project_id field is enabled."),
    ("pagination", "Pagination support", "Extension that indicates that pagination is enabled."),
    ("sorting", "Sorting support", "Extension that indicates that sorting is enabled."),
    ("filter-validation", "Filter parameters validation",
     "Provides validation on filter parameters."),
    ("ip-substring-filtering", "IP address substring filtering",
     "Provides IP address substring filtering when listing ports"),
    ("stateful-security-group", "Stateful security group", "Indicates if the security group is stateful or not"),
    ("router", "Neutron L3 Router",
     "Router abstraction for basic L3 forwarding between L2 Neutron networks and access to external networks "
     "via a NAT gateway."),
    ("ext-gw-mode", "Neutron L3 Configurable external gateway mode",
     "Extension of the router abstraction for specifying whether SNAT should occur on the external gateway"),
    ("extraroute", "Neutron Extra Route", "Extra routes configuration for L3 router"),
    ("auto-allocated-topology", "Auto Allocated Topology Services", "Auto Allocated Topology Services."),
]
_EXTENSION_UPDATED = "2024-01-01T00:00:00-00:00"

_HTTP_TYPES = {400: "HTTPBadRequest", 401: "HTTPUnauthorized", 403: "HTTPForbidden", 404: "HTTPNotFound",
               405: "HTTPMethodNotAllowed", 409: "HTTPConflict", 413: "HTTPRequestEntityTooLarge",
               415: "HTTPUnsupportedMediaType", 500: "HTTPInternalServerError",
               503: "HTTPServiceUnavailable"}
_RENAMED = {"ValidationError": "HTTPBadRequest", "Invalid": "HTTPBadRequest"}
_RESERVED_PARAMS = {"fields", "limit", "marker", "page_reverse", "sort_key", "sort_dir"}


NEUTRON_ERROR_SCHEMA = {"type": "object", "required": ["NeutronError"], "properties": {"NeutronError": {
    "type": "object", "required": ["type", "message"],
    "properties": {"type": {"type": "string"}, "message": {"type": "string"}, "detail": {"type": "string"}}}}}


def neutron_error_body(status: int, message: str, kind: str) -> dict:
    if kind == "HTTPException":
        kind = _HTTP_TYPES.get(status, "HTTPError")
    kind = _RENAMED.get(kind, kind)
    if status >= 500 and kind not in _HTTP_TYPES.values():
        kind = "HTTPInternalServerError" if status == 500 else kind
    return {"NeutronError": {"type": kind, "message": message, "detail": ""}}


class JsonSuffixMiddleware:
    """Accept the ``.json`` suffix older Neutron clients append to every path."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].endswith(".json") and scope["path"] not in openapi.DOCUMENT_PATHS:
            scope = dict(scope, path=scope["path"][:-5])
        await self.app(scope, receive, send)


def _base(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def _list_args(request: Request) -> dict:
    filters: dict[str, list] = {}
    fields: list[str] = []
    sort_keys: list[str] = []
    sort_dirs: list[str] = []
    limit = None
    marker = None
    page_reverse = False
    for key, value in request.query_params.multi_items():
        if key == "fields":
            fields += [f for f in value.split(",") if f]
        elif key == "sort_key":
            sort_keys.append(value)
        elif key == "sort_dir":
            sort_dirs.append(value)
        elif key == "limit":
            try:
                limit = rest.parse_int64(value)
                if limit < 0:
                    raise ValueError
            except ValueError:
                raise attrs.bad_request(f"Limit must be an integer 0 or greater and not '{value}'")
        elif key == "marker":
            marker = value
        elif key == "page_reverse":
            page_reverse = attrs.to_bool(value, "page_reverse")
        else:
            filters.setdefault(key, []).append(value)
    return {"filters": filters, "fields": fields or None, "sort_key": sort_keys or None,
            "sort_dir": sort_dirs or None, "limit": limit or None, "marker": marker,
            "page_reverse": page_reverse}


def _links(request: Request, items: list[dict], *, limit: int, marker: str | None, has_more: bool,
           page_reverse: bool) -> list[dict]:
    if not items:
        return []
    params = [(k, v) for k, v in request.query_params.multi_items()
              if k not in ("limit", "marker", "page_reverse")]
    url = f"{_base(request)}{request.url.path}"

    def href(mark: str, reverse: bool) -> str:
        query = params + [("limit", str(limit)), ("marker", mark)]
        if reverse:
            query.append(("page_reverse", "True"))
        return f"{url}?{urlencode(query)}"

    links = []
    more_next = (has_more and not page_reverse) or (page_reverse and marker is not None)
    more_prev = (has_more and page_reverse) or (not page_reverse and marker is not None)
    if more_next:
        links.append({"rel": "next", "href": href(items[-1]["id"], False)})
    if more_prev:
        links.append({"rel": "previous", "href": href(items[0]["id"], True)})
    return links


async def _resource_body(request: Request, member: str, collection_key: str, *, bulk_ok: bool):
    """(single body, None) or (None, list of bodies) from ``{"network": {...}}`` / ``{"networks": [...]}``."""
    raw = await request.body()
    if not raw:
        raise attrs.bad_request("Resource body required")
    body = await rest.json_body(request)
    if not isinstance(body, dict):
        raise attrs.bad_request("Body contains invalid data")
    if bulk_ok and collection_key in body:
        if len(body) != 1 or not isinstance(body[collection_key], list):
            raise attrs.bad_request("Body contains invalid data")
        items = body[collection_key]
        if not items:
            raise attrs.bad_request("Resources required")
        return None, items
    if member not in body:
        raise attrs.bad_request(f"Unable to find '{member}' in request body")
    if len(body) != 1:
        raise attrs.bad_request("Body contains invalid data")
    return body[member], None


async def _interface_body(request: Request) -> dict:
    """The body of add/remove_router_interface: ``{"subnet_id": ...}`` or ``{"port_id": ...}``."""
    if not await request.body():
        raise attrs.bad_request("Resource body required")
    body = await rest.json_body(request)
    if not isinstance(body, dict):
        raise attrs.bad_request("Body contains invalid data")
    return body


def authorize(ctx, rule: str, project_id: str | None = None) -> None:
    """The Networking API's one authorization entry: Neutron's policy ``rule`` for ``ctx`` on the
    resource's project (default: the caller's), else 403 in Neutron's words."""
    policy.enforce(ctx, rule, {"project_id": project_id} if project_id else None, api="network")


def create_app(rt, manager):
    """The Networking API over ``manager``'s services (a ``NetworkManager``)."""
    app = rest.make_app("Nefos Networking API", "network", neutron_error_body)
    app.add_middleware(JsonSuffixMiddleware)
    app.state.rt = rt
    app.state.manager = manager

    @app.exception_handler(exceptions.OverQuota)
    async def _over_quota(request: Request, exc: exceptions.OverQuota):
        # Neutron answers an exceeded quota with 409 Conflict.
        return JSONResponse(neutron_error_body(409, str(exc), "OverQuota"), status_code=409)

    def ctx_of(request: Request):
        return rest.get_context(request)

    @app.get("/")
    @openapi.documented(responses={200: schemas.VERSIONS})
    async def versions(request: Request):
        return {"versions": [{"id": "v2.0", "status": "CURRENT",
                              "links": [{"href": f"{_base(request)}/v2.0/", "rel": "self"}]}]}

    @app.get("/v2.0")
    @app.get("/v2.0/")
    @openapi.documented(responses={200: schemas.RESOURCES})
    async def resources(request: Request):
        base = _base(request)
        items = [{"name": member, "collection": key,
                  "links": [{"href": f"{base}/v2.0/{coll}", "rel": "self"}]}
                 for coll, (member, _, _) in COLLECTIONS.items()
                 for key in [BODY_KEYS.get(coll, coll)]]
        return {"resources": items}

    def _ext(alias, name, description):
        return {"alias": alias, "name": name, "description": description,
                "updated": _EXTENSION_UPDATED, "links": []}

    @app.get("/v2.0/extensions")
    @openapi.documented(responses={200: schemas.EXTENSIONS})
    async def extensions():
        return {"extensions": [_ext(*e) for e in EXTENSIONS]}

    @app.get("/v2.0/extensions/{alias}")
    @openapi.documented(responses={200: schemas.EXTENSION})
    async def extension(alias: str):
        for e in EXTENSIONS:
            if e[0] == alias:
                return {"extension": _ext(*e)}
        raise exceptions.NotFound(f"Extension with alias {alias} does not exist")

    # Quotas -------------------------------------------------------------------------------

    @app.get("/v2.0/quotas")
    @openapi.documented(responses={200: schemas.quotas})
    async def list_quotas(request: Request):
        authorize(ctx_of(request), "get_quota", "*")
        return {"quotas": await manager.quotas.list_quotas(ctx_of(request))}

    @app.get("/v2.0/quotas/{project_id}")
    @openapi.documented(responses={200: schemas.quota_or_tenant})
    async def show_quota(request: Request, project_id: str):
        ctx = ctx_of(request)
        if project_id == "tenant":
            return {"tenant": {"tenant_id": ctx.project_id}}
        authorize(ctx, "get_quota", project_id)
        return {"quota": await manager.quotas.get_quota(ctx, project_id)}

    @app.get("/v2.0/quotas/{project_id}/default")
    @openapi.documented(responses={200: schemas.quota})
    async def show_quota_default(request: Request, project_id: str):
        return {"quota": await manager.quotas.get_quota_default(ctx_of(request), project_id)}

    @app.get("/v2.0/quotas/{project_id}/details")
    @openapi.documented(responses={200: schemas.quota_details})
    async def show_quota_details(request: Request, project_id: str):
        authorize(ctx_of(request), "get_quota", project_id)
        return {"quota": await manager.quotas.get_quota_details(ctx_of(request), project_id)}

    @app.put("/v2.0/quotas/{project_id}")
    @openapi.documented(request=schemas.quota_update_request, responses={200: schemas.quota})
    async def update_quota(request: Request, project_id: str):
        body, _ = await _resource_body(request, "quota", "quotas", bulk_ok=False)
        authorize(ctx_of(request), "update_quota", project_id)
        return {"quota": await manager.quotas.update_quota(ctx_of(request), project_id, body)}

    @app.delete("/v2.0/quotas/{project_id}", status_code=204)
    async def delete_quota(request: Request, project_id: str):
        authorize(ctx_of(request), "delete_quota", project_id)
        await manager.quotas.delete_quota(ctx_of(request), project_id)
        return Response(status_code=204)

    # Resources ----------------------------------------------------------------------------

    for collection, (member, one, many) in COLLECTIONS.items():
        _add_collection(app, getattr(manager, OWNERS[collection]), collection, member, one, many, ctx_of)

    # Router interfaces (member actions of the router extension) ----------------------------

    @app.put("/v2.0/routers/{router_id}/add_router_interface")
    @openapi.documented(request=schemas.ROUTER_INTERFACE_REQUEST, responses={200: schemas.ROUTER_INTERFACE})
    async def add_router_interface(request: Request, router_id: str):
        body = await _interface_body(request)
        authorize(ctx_of(request), "add_router_interface")
        return await manager.routers.add_router_interface(ctx_of(request), router_id, body)

    @app.put("/v2.0/routers/{router_id}/remove_router_interface")
    @openapi.documented(request=schemas.ROUTER_INTERFACE_REQUEST, responses={200: schemas.ROUTER_INTERFACE})
    async def remove_router_interface(request: Request, router_id: str):
        body = await _interface_body(request)
        authorize(ctx_of(request), "remove_router_interface")
        return await manager.routers.remove_router_interface(ctx_of(request), router_id, body)

    # Auto-allocated topology (the auto-allocated-topology extension) ---------------------------

    topologies = manager.auto_allocated_topologies

    @app.get("/v2.0/auto-allocated-topology/{project_id}")
    @openapi.documented(responses={200: schemas.AUTO_ALLOCATED_TOPOLOGY}, query=schemas.AUTO_ALLOCATED_TOPOLOGY_QUERY)
    async def show_auto_allocated_topology(request: Request, project_id: str):
        ctx = ctx_of(request)
        project_id = topologies.topology_project(ctx, project_id)  # another project's: 403, as Neutron
        authorize(ctx, "get_auto_allocated_topology", project_id)
        fields = [f for v in request.query_params.getlist("fields") for f in v.split(",") if f]
        return {"auto_allocated_topology": await topologies.get_auto_allocated_topology(ctx, project_id, fields=fields)}

    @app.delete("/v2.0/auto-allocated-topology/{project_id}", status_code=204)
    @openapi.documented(responses={204: None})
    async def delete_auto_allocated_topology(request: Request, project_id: str):
        ctx = ctx_of(request)
        project_id = topologies.topology_project(ctx, project_id)
        authorize(ctx, "delete_auto_allocated_topology", project_id)
        await topologies.delete_auto_allocated_topology(ctx, project_id)
        return Response(status_code=204)

    openapi.serve(app, "/v2.0/openapi.json", title="Nefos Networking API", version="2.0",
                  error_schema=NEUTRON_ERROR_SCHEMA)
    return app


def _add_collection(app, service, collection: str, member: str, one: str, many: str, ctx_of) -> None:
    key = BODY_KEYS.get(collection, collection)
    list_fn = getattr(service, f"list_{many}")
    get_fn = getattr(service, f"get_{one}")
    create_fn = getattr(service, f"create_{one}")
    bulk_fn = getattr(service, f"create_{many}")
    update_fn = getattr(service, f"update_{one}")
    delete_fn = getattr(service, f"delete_{one}")

    async def list_items(request: Request):
        authorize(ctx_of(request), f"get_{one}")
        args = _list_args(request)
        fields, limit = args.pop("fields"), args["limit"]
        if limit:
            args["limit"] = limit + 1
        items = await list_fn(ctx_of(request), **args)
        doc: dict = {}
        if limit:
            has_more = len(items) > limit
            if has_more:
                items = items[1:] if args["page_reverse"] else items[:limit]
            doc[f"{key}_links"] = _links(request, items, limit=limit, marker=args["marker"],
                                         has_more=has_more, page_reverse=args["page_reverse"])
        doc = {key: [attrs.select_fields(i, fields) for i in items], **doc}
        return doc

    async def create_item(request: Request):
        single, bulk = await _resource_body(request, member, key, bulk_ok=True)
        ctx = ctx_of(request)
        # The caller's own project is the target: naming another one is the service's 400, as in Neutron.
        authorize(ctx, f"create_{one}")
        if bulk is not None:
            return JSONResponse({key: await bulk_fn(ctx, bulk)}, status_code=201)
        return JSONResponse({member: await create_fn(ctx, single)}, status_code=201)

    async def show_item(request: Request, item_id: str):
        fields = [f for v in request.query_params.getlist("fields") for f in v.split(",") if f] or None
        authorize(ctx_of(request), f"get_{one}")
        return {member: await get_fn(ctx_of(request), item_id, fields=fields)}

    async def update_item(request: Request, item_id: str):
        single, _ = await _resource_body(request, member, key, bulk_ok=False)
        authorize(ctx_of(request), f"update_{one}")
        return {member: await update_fn(ctx_of(request), item_id, single)}

    async def delete_item(request: Request, item_id: str):
        authorize(ctx_of(request), f"delete_{one}")
        await delete_fn(ctx_of(request), item_id)
        return Response(status_code=204)

    created = {"anyOf": [schemas.one(member, complete=True), schemas.many(member, key, complete=True)]}
    openapi.documented(responses={200: schemas.many(member, key, complete=False)},
                       query=schemas.list_query(member))(list_items)
    openapi.documented(request=lambda: attrs.request_schema(member, create=True),
                       responses={201: created})(create_item)
    openapi.documented(responses={200: schemas.one(member, complete=False)},
                       query=schemas.fields_query(member))(show_item)
    openapi.documented(request=lambda: attrs.request_schema(member, create=False),
                       responses={200: schemas.one(member, complete=True)})(update_item)
    base = f"/v2.0/{collection}"
    app.add_api_route(base, list_items, methods=["GET"], name=f"list_{many}")
    app.add_api_route(base, create_item, methods=["POST"], name=f"create_{one}")
    app.add_api_route(base + "/{item_id}", show_item, methods=["GET"], name=f"show_{one}")
    app.add_api_route(base + "/{item_id}", update_item, methods=["PUT"], name=f"update_{one}")
    app.add_api_route(base + "/{item_id}", delete_item, methods=["DELETE"], name=f"delete_{one}")
