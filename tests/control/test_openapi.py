"""docs/openapi.json and docs/API.md cannot drift from the server: every route the control app
registers is described (daemon/control/api_doc.py), nothing else is, and the committed documents
are what the generator makes now."""

from __future__ import annotations

import json
from typing import Any

from recalld.control.api_doc import ROUTES, RouteDoc
from recalld.control.openapi import MARKDOWN_PATH, OPENAPI_PATH, openapi, problems, registered_routes, render

ERROR_BODY = {"$ref": "#/components/schemas/ErrorBody"}


def test_every_registered_route_is_described_and_nothing_else() -> None:
    found = problems(registered_routes(), ROUTES)
    assert not found, "\n\n".join(found)


def test_a_route_missing_from_the_description_is_named_with_what_to_add() -> None:
    registered = [*registered_routes(), ("POST", "/v1/new/{id}/thing")]
    [missing] = problems(registered, ROUTES)
    assert "POST /v1/new/{id}/thing is registered by the control server but not described" in missing
    assert '("POST", "/v1/new/{id}/thing"): RouteDoc(' in missing and "daemon/control/api_doc.py" in missing
    assert ".venv/bin/python -m recalld.control.openapi" in missing


def test_a_description_of_a_route_the_server_lacks_is_named() -> None:
    described = {**ROUTES, ("GET", "/v1/gone"): RouteDoc("Gone.", returns="nothing")}
    [stale] = problems(registered_routes(), described)
    assert "GET /v1/gone is described" in stale and "remove its entry" in stale


def test_the_committed_documents_are_the_generated_ones() -> None:
    spec_text, api_text = render(openapi())
    hint = "run .venv/bin/python -m recalld.control.openapi and commit docs/openapi.json and docs/API.md"
    assert OPENAPI_PATH.read_text() == spec_text, hint
    assert MARKDOWN_PATH.read_text() == api_text, hint


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(_refs(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(value) for value in node))
    return set()


def test_the_document_is_openapi_3_1_with_the_wire_types() -> None:
    document = json.loads(OPENAPI_PATH.read_text())
    assert document["openapi"] == "3.1.0"
    schemas = document["components"]["schemas"]
    for ref in _refs(document):
        assert ref.startswith("#/components/schemas/") and ref.rsplit("/", 1)[1] in schemas, ref
    recall = document["paths"]["/v1/recall"]["post"]
    assert recall["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/RecallRequest"
    }
    assert set(schemas["RecallRequest"]["required"]) == {"namespace", "query"}
    assert schemas["RecallRequest"]["additionalProperties"] is False  # forbid_unknown_fields
    degraded = schemas["DegradedRoute"]["properties"]
    assert {"route", "reason", "message", "pending"} <= set(degraded)
    assert "exact_duplicate" in schemas["ErrorCode"]["enum"]  # the stable error codes, listed
    # a health route's 503 is its own answer (what fails) or, shutting down, the error body
    for path, failure in (("/readyz", "Readiness"), ("/livez", "Liveness")):
        unavailable = document["paths"][path]["get"]["responses"]["503"]["content"]["application/json"]["schema"]
        assert unavailable == {"oneOf": [{"$ref": f"#/components/schemas/{failure}"}, ERROR_BODY]}, unavailable
    created = document["paths"]["/v1/records"]["post"]["responses"]
    assert "201" in created and "409" in created
    operation_ids = [op["operationId"] for ops in document["paths"].values() for op in ops.values()]
    assert len(operation_ids) == len(set(operation_ids)) == len(registered_routes())
