"""OpenAPI 3.1 documents of the APIs, built from their route tables and the very JSON Schemas
their handlers validate with (``documented`` attaches them to an endpoint; nothing is copied).

Every route of an app is in its document, with its path parameters; a route whose handler
validates a JSON body with a schema declares it, and the query parameters and success answers it
documents, for the microversion a request without a version header gets (the Compute API's 2.1);
error answers carry the API's own error body. Each API
serves its document without a token (``/v2.1/openapi.json``, ``/v2.0/openapi.json``,
``/v2/openapi.json``, ``/v3/openapi.json``), as it serves its version documents.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Callable

from fastapi.routing import iter_route_contexts

Schema = dict | Callable[[], dict]

_PATH_PARAMETER = re.compile(r"{(\w+)(?::\w+)?}")
# What an API's document answer holds (the document itself is validated by the tests, against
# the OpenAPI 3.1 specification).
DOCUMENT_SCHEMA = {"type": "object", "properties": {"openapi": {"type": "string", "pattern": "^3\\.1\\."},
                                                    "info": {"type": "object"}, "paths": {"type": "object"}},
                   "required": ["openapi", "info", "paths"]}
DOCUMENT_PATHS = ("/v2.1/openapi.json", "/v2.0/openapi.json", "/v2/openapi.json", "/v3/openapi.json")


def documented(request: Schema | None = None, responses: dict[int, Schema | None] | None = None,
               request_media_type: str = "application/json", query: Schema | None = None,
               action_responses: dict[str, dict[int, Schema]] | None = None,
               response_media_type: str = "application/json"):
    """Mark an endpoint with the schema its body is validated with, its success answers and the
    query parameters it reads (an object schema whose properties are the parameters; an array
    property is a parameter that may be repeated, Nova's query schemas).

    ``responses`` maps each success status to the schema of its JSON body, or to None when that
    status has no body; an endpoint without ``responses`` is documented as answering some 2XX.
    ``action_responses`` (an action endpoint whose status is shared by answers with and without a
    body, which OpenAPI cannot tell apart) gives the bodies of the actions that have one, by action
    name and status, as the operation's ``x-action-responses``. ``response_media_type``: the success
    bodies' media type (``text/event-stream`` for a stream)."""
    def mark(fn):
        fn.__openapi__ = {"request": request, "responses": responses, "media_type": request_media_type,
                          "query": query, "action_responses": action_responses or {},
                          "response_media_type": response_media_type}
        return fn
    return mark


def _any_answer(schema: Schema | None, status: int, action_responses: dict | None) -> Schema | None:
    """The body of a ``status`` answer whatever the action: for a client that does not read
    ``x-action-responses``, the operation's own schema or any action's for that status. A status
    documented without a body stays so (its actions' bodies are in ``x-action-responses`` only)."""
    if schema is None or not action_responses:
        return schema
    schemas = [schema]
    for by_status in action_responses.values():
        if by_status.get(status) is not None and by_status[status] not in schemas:
            schemas.append(by_status[status])
    return schema if len(schemas) == 1 else {"anyOf": [_resolve(s) for s in schemas]}


def _success(schema: Schema | None, media_type: str = "application/json") -> dict:
    if schema is None:
        return {"description": "Success, without a body."}
    return {"description": "Success.", "content": {media_type: {"schema": to_openapi_31(_resolve(schema))}}}


def query_parameters(schema: dict) -> list[dict]:
    """OpenAPI query parameters from an object schema of them."""
    parameters = []
    for name, prop in sorted(schema.get("properties", {}).items()):
        parameter = {"name": name, "in": "query", "required": name in schema.get("required", ()),
                     "schema": to_openapi_31(prop)}
        if prop.get("type") == "array":
            parameter.update(style="form", explode=True)
        parameters.append(parameter)
    return parameters


def _resolve(schema: Schema) -> dict:
    return copy.deepcopy(schema() if callable(schema) else schema)


def to_openapi_31(schema: Any) -> Any:
    """A Draft 4 schema as JSON Schema 2020-12 (OpenAPI 3.1): boolean exclusive bounds become
    numeric ones, ``id`` and ``$schema`` go."""
    if isinstance(schema, list):
        return [to_openapi_31(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in ("$schema", "id"):
            continue
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: to_openapi_31(v) for k, v in value.items()}
        elif isinstance(value, (dict, list)):
            out[key] = to_openapi_31(value)
        else:
            out[key] = value
    for bound, flag in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if out.get(flag) is True and bound in out:
            out[flag] = out.pop(bound)
        elif isinstance(out.get(flag), bool):
            out.pop(flag)
    return out


def document(app, *, title: str, version: str, error_schema: dict, description: str = "") -> dict:
    paths: dict[str, dict] = {}
    error = {"description": "An error, in this API's own error body.",
             "content": {"application/json": {"schema": error_schema}}}
    for route in iter_route_contexts(app.routes):
        spec = getattr(route.endpoint, "__openapi__", {})
        parameters = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                      for name in _PATH_PARAMETER.findall(route.path)]
        path = _PATH_PARAMETER.sub(lambda m: "{" + m.group(1) + "}", route.path)
        for method in sorted(set(route.methods or ()) - {"HEAD"}):
            operation_id = method.lower() + re.sub(r"[^A-Za-z0-9]", "_", path)  # "/v2.1" and "/v2.1/" differ
            operation: dict[str, Any] = {"operationId": operation_id, "summary": route.name, "responses": {}}
            if spec.get("query") is not None:
                operation["parameters"] = parameters + query_parameters(_resolve(spec["query"]))
            elif parameters:
                operation["parameters"] = parameters
            if spec.get("request") is not None:
                operation["requestBody"] = {"required": True, "content": {
                    spec["media_type"]: {"schema": to_openapi_31(_resolve(spec["request"]))}}}
            if spec.get("responses") is None:
                operation["responses"]["2XX"] = {"description": "Success."}
            for status, schema in sorted((spec.get("responses") or {}).items()):
                operation["responses"][str(status)] = _success(_any_answer(schema, status, spec.get("action_responses")),
                                                               spec.get("response_media_type", "application/json"))
            if spec.get("action_responses"):
                operation["x-action-responses"] = {
                    action: {str(status): _success(schema) for status, schema in sorted(by_status.items())}
                    for action, by_status in sorted(spec["action_responses"].items())}
            operation["responses"]["3XX"] = {"description": "A choice of versions (the version documents)."}
            operation["responses"]["4XX"] = error
            operation["responses"]["default"] = error
            paths.setdefault(path, {})[method.lower()] = operation
    return {"openapi": "3.1.0", "info": {"title": title, "version": version, "description": description},
            "paths": paths}


def serve(app, path: str, **kwargs) -> None:
    """Serve ``app``'s document at ``path`` (built once, when first asked for)."""
    built: dict[str, dict] = {}

    @app.get(path, include_in_schema=True)
    @documented(responses={200: DOCUMENT_SCHEMA})
    async def openapi_document():
        if "doc" not in built:
            built["doc"] = document(app, **kwargs)
        return built["doc"]
