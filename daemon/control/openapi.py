"""docs/openapi.json (OpenAPI 3.1) and docs/API.md, made from the routes the server registers,
their descriptions (`recalld.control.api_doc.ROUTES`) and the msgspec wire types.

    .venv/bin/python -m recalld.control.openapi           # write both documents
    .venv/bin/python -m recalld.control.openapi --check   # exit 1 when they are out of date

tests/control/test_openapi.py holds the routes, the descriptions and the committed documents to
agreeing, so the description of the API cannot drift from the server.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import sys
from pathlib import Path
from typing import Any, cast

import msgspec

from recalld.config import Config
from recalld.control.api_doc import ROUTES, ErrorBody, RouteDoc
from recalld.control.context import Services

ROOT = Path(__file__).resolve().parents[2]
OPENAPI_PATH = ROOT / "docs/openapi.json"
MARKDOWN_PATH = ROOT / "docs/API.md"
REF = "#/components/schemas/{name}"
ALWAYS = {
    "403": "the peer may not call this route (docs/OPERATIONS.md, access)",
    "503": "the daemon is shutting down, or the store does not answer",
}


class _NoServices:
    """What `make_app` reads of its services when only its routes are wanted."""

    def __init__(self) -> None:
        self.config = Config()


def registered_routes() -> list[tuple[str, str]]:
    """(method, path template) of every route the control server registers, in order (HEAD, which
    aiohttp adds for each GET, left out)."""
    from recalld.control.server import make_app  # the server module imports this package's peers

    app = make_app(cast(Services, _NoServices()))
    seen: list[tuple[str, str]] = []
    for route in app.router.routes():
        info = route.resource.canonical if route.resource is not None else ""
        if route.method != "HEAD" and (route.method, info) not in seen:
            seen.append((route.method, info))
    return seen


def problems(registered: list[tuple[str, str]], described: dict[tuple[str, str], RouteDoc]) -> list[str]:
    """What keeps the description from matching the server: each says exactly what to change."""
    found = []
    for method, path in registered:
        if (method, path) not in described:
            found.append(
                f"{method} {path} is registered by the control server but not described. Add to ROUTES in "
                f"daemon/control/api_doc.py:\n"
                f'    ("{method}", "{path}"): RouteDoc(\n'
                f'        "<what it does, one line>",\n'
                f"        request=<the msgspec struct its handler decodes, or leave out>,\n"
                f'        response=<the struct it answers with>,  # or returns="<the answer in words>"\n'
                f"    ),\n"
                f"then run: .venv/bin/python -m recalld.control.openapi"
            )
    for method, path in described:
        if (method, path) not in registered:
            found.append(
                f"{method} {path} is described in daemon/control/api_doc.py ROUTES but the control server does "
                f"not register it: remove its entry (or fix its method or path), then run: "
                f".venv/bin/python -m recalld.control.openapi"
            )
    for (method, path), doc in described.items():
        if doc.response is None and not doc.returns:
            found.append(f"{method} {path}: its RouteDoc needs `response=` (a struct) or `returns=` (words)")
    return found


def _parameters(path: str, doc: RouteDoc) -> list[dict[str, Any]]:
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"{(\w+)}", path)
    ]
    for name, meaning in doc.query.items():
        parameters.append(
            {
                "name": name,
                "in": "query",
                "required": meaning.startswith("required"),
                "description": meaning,
                "schema": {"type": "string"},
            }
        )
    return parameters


def _operation(method: str, path: str, doc: RouteDoc) -> dict[str, Any]:
    success: dict[str, Any] = {"description": doc.returns or (doc.response.__name__ if doc.response else "")}
    if doc.response is not None:
        success["content"] = {doc.content_type: {"schema": {"$ref": REF.format(name=doc.response.__name__)}}}
    elif doc.content_type == "application/json":
        success["content"] = {doc.content_type: {"schema": {"type": "object"}}}
    else:
        success["content"] = {doc.content_type: {"schema": {"type": "string"}}}
    error = {"content": {"application/json": {"schema": {"$ref": REF.format(name=ErrorBody.__name__)}}}}
    responses: dict[str, Any] = {str(doc.status): success}
    for status in sorted({*doc.errors, 403, 503}):
        meaning = ALWAYS.get(str(status), "the request was refused; `error.code` says why")
        if status == 403 and not doc.admin:
            meaning = ALWAYS["403"]
        responses[str(status)] = {"description": meaning, **error}
    if doc.failure is not None:
        own = {"$ref": REF.format(name=doc.failure.__name__)}
        either = {"oneOf": [own, error["content"]["application/json"]["schema"]]}
        responses["503"] = {
            "description": f"{doc.failure.__name__}: what fails; or an error body: {ALWAYS['503']}",
            "content": {"application/json": {"schema": either}},
        }
    operation: dict[str, Any] = {
        "operationId": f"{method.lower()}_{re.sub(r'[^a-z0-9]+', '_', path.lower()).strip('_')}",
        "summary": doc.summary,
        "responses": responses,
    }
    if doc.admin:
        operation["tags"] = ["admin"]
    parameters = _parameters(path, doc)
    if parameters:
        operation["parameters"] = parameters
    if doc.request is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": REF.format(name=doc.request.__name__)}}},
        }
    return operation


def _any_json(kind: type) -> dict[str, Any]:
    """`object` in a wire type (free-form details) is any JSON value."""
    if kind is object:
        return {"description": "any JSON value"}
    raise NotImplementedError(f"no JSON schema for {kind!r}")


def openapi(routes: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """The OpenAPI 3.1 document of `routes` (default: those the server registers), as JSON data."""
    routes = registered_routes() if routes is None else routes
    structs: set[type] = {ErrorBody}
    for key in routes:
        doc = ROUTES[key]
        structs.update(t for t in (doc.request, doc.response, doc.failure) if t is not None)
    _, components = msgspec.json.schema_components(
        sorted(structs, key=lambda t: t.__name__), schema_hook=_any_json, ref_template=REF
    )
    paths: dict[str, dict[str, Any]] = {}
    for method, path in routes:  # as the server registers them: health, records, recall, ...
        paths.setdefault(path, {})[method.lower()] = _operation(method, path, ROUTES[(method, path)])
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "recalld control API",
            "version": importlib.metadata.version("recalld"),
            "description": "JSON over HTTP on the daemon's Unix socket (docs/API.md). Generated by "
            "`python -m recalld.control.openapi` from daemon/control/api_doc.py and the msgspec wire types.",
        },
        "servers": [{"url": "http://recalld", "description": "the Unix socket (e.g. curl --unix-socket PATH)"}],
        "paths": paths,
        "components": {"schemas": dict(sorted(components.items()))},
    }


def _schema_lines(name: str, schema: dict[str, Any]) -> list[str]:
    properties: dict[str, Any] = schema.get("properties", {})
    if not properties:
        return []
    required = set(schema.get("required", []))
    lines = [f"#### {name}", "", "| field | type | required |", "|---|---|---|"]
    for field_name, spec in properties.items():
        lines.append(f"| `{field_name}` | {_type_of(spec)} | {'yes' if field_name in required else ''} |")
    return [*lines, ""]


def _type_of(spec: dict[str, Any]) -> str:
    if "$ref" in spec:
        return str(spec["$ref"]).rsplit("/", 1)[1]
    if "anyOf" in spec:
        return " \\| ".join(_type_of(s) for s in spec["anyOf"])
    if "enum" in spec:
        return " \\| ".join(f"`{v}`" for v in spec["enum"])
    kind = spec.get("type", "any")
    if kind == "array":
        return f"array of {_type_of(spec.get('items', {}))}"
    return str(kind)


def markdown(document: dict[str, Any]) -> str:
    """docs/API.md: every route with its body and answer, then every schema's fields."""
    lines = [
        "# The control API",
        "",
        "<!-- Generated by `.venv/bin/python -m recalld.control.openapi` from daemon/control/api_doc.py and the",
        "     msgspec wire types; edit those, not this file. -->",
        "",
        "JSON over HTTP on the daemon's Unix socket (`curl --unix-socket /run/recalld/recalld.sock "
        "http://recalld/livez`; the Python client is `recalld.client`). The machine-readable description is "
        "[openapi.json](openapi.json) (OpenAPI 3.1). Errors are "
        '`{"error": {"code": "<stable_snake_case>", "message": "..."}}` with a 4xx status (5xx only for '
        "faults of the daemon itself); daemon/reasons.py lists every code. Routes under `/admin` are for "
        "peers allowed to administer.",
        "",
        "| method | path | what it does | body | answer |",
        "|---|---|---|---|---|",
    ]
    for path, operations in document["paths"].items():
        for method, op in operations.items():
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            status, success = next(iter(op["responses"].items()))
            content: dict[str, Any] = success.get("content", {})
            first: dict[str, Any] = next(iter(content.values()), {})
            schema: dict[str, Any] = first.get("schema", {})
            answer = _type_of(schema) if "$ref" in schema else success["description"].replace("|", "\\|")
            request = _type_of(body) if body else ""
            summary = op["summary"].replace("|", "\\|")
            lines.append(f"| {method.upper()} | `{path}` | {summary} | {request} | {status} {answer} |")
    lines += ["", "## Schemas", ""]
    for name, schema in document["components"]["schemas"].items():
        lines += _schema_lines(name, schema)
    return "\n".join(lines).rstrip("\n") + "\n"


def render(document: dict[str, Any]) -> tuple[str, str]:
    """(openapi.json text, API.md text), as committed."""
    return json.dumps(document, indent=2, sort_keys=False) + "\n", markdown(document)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the documents are out of date")
    args = parser.parse_args(argv)
    found = problems(registered_routes(), ROUTES)
    if found:
        print("\n\n".join(found), file=sys.stderr)
        return 1
    spec_text, api_text = render(openapi())
    if args.check:
        stale = [p for p, text in ((OPENAPI_PATH, spec_text), (MARKDOWN_PATH, api_text)) if p.read_text() != text]
        for path in stale:
            print(
                f"{path.relative_to(ROOT)} is out of date: run .venv/bin/python -m recalld.control.openapi",
                file=sys.stderr,
            )
        return 1 if stale else 0
    OPENAPI_PATH.write_text(spec_text)
    MARKDOWN_PATH.write_text(api_text)
    print(f"wrote {OPENAPI_PATH.relative_to(ROOT)} and {MARKDOWN_PATH.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
