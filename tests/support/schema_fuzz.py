"""Requests generated from docs/openapi.json with a seeded `random.Random`: values a route's JSON
schema allows, and values it refuses by construction (a required field dropped, an unknown field
added, a field of a type its schema does not allow, a body that is no object). Hand-rolled rather
than hypothesis: no shrinking is needed to read a 5xx (the request is in the failure message),
and it makes thousands of requests a second, so the fuzz test's time is the daemon's."""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass
from typing import Any

STRINGS = [
    "",
    " ",
    "a",
    "doc",
    "Ünïcødé ✓ 漢字",
    "emoji 🧠🔥",
    "\t\n",
    "x" * 300,
    "'; DROP TABLE records; --",
    "%s %(x)s {0}",
    "../../etc/passwd",
    "a\u202eb",
    "0",
    "-1",
    "null",
    "2026-01-01T00:00:00Z",
]
INTEGERS = [0, 1, -1, 2, 10, 50, 1000, 2**31, -(2**31), 2**53, 2**63 - 1, -(2**63)]
NUMBERS = [0.0, 0.5, -0.5, 1.0, 1e-9, 1e300, -1e300, 3.14]
WRONG = {
    "string": "seven",
    "integer": 7,
    "number": 7.5,
    "boolean": True,
    "array": ["a", "list"],
    "object": {"an": "object"},
    "null": None,
}
"""A value of each JSON type: a field is given one of a type its schema does not allow."""


ANYTHING = object()
"""What `Generator.wrong` answers for a schema that allows every value."""


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    """The path template of docs/openapi.json this request exercises."""
    target: str
    """The path and query actually sent."""
    body: bytes | None
    refused: bool
    """Made to violate the route's schema: the daemon must answer 4xx and write nothing."""

    def show(self) -> str:
        body = self.body[:300] if self.body is not None else b""
        return f"{self.method} {self.target} {body!r}"


class Generator:
    def __init__(self, document: dict[str, Any], seed: int, namespaces: list[str], ids: list[str]) -> None:
        self.document = document
        self.schemas: dict[str, Any] = document["components"]["schemas"]
        self.rng = random.Random(seed)
        self.namespaces = namespaces
        self.ids = ids
        """Ids of rows that exist (records the test wrote first), so routes of one id find some."""

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            schema = self.schemas[schema["$ref"].rsplit("/", 1)[1]]
        return schema

    def string(self, name: str, schema: dict[str, Any]) -> str:
        rng = self.rng
        if schema.get("format") == "uuid" or name in {"id", "after", "search_id"}:
            return rng.choice(self.ids) if self.ids and rng.random() < 0.7 else str(uuid.UUID(int=rng.getrandbits(128)))
        if name == "namespace" and rng.random() < 0.9:
            return rng.choice(self.namespaces)
        if rng.random() < 0.3:
            return "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(160, 0xD7FF)])) for _ in range(8))
        return rng.choice(STRINGS)

    def valid(self, schema: dict[str, Any], name: str = "", depth: int = 0) -> Any:
        rng = self.rng
        schema = self.resolve(schema)
        if "anyOf" in schema or "oneOf" in schema:
            return self.valid(rng.choice(schema.get("anyOf") or schema["oneOf"]), name, depth)
        if "enum" in schema:
            return rng.choice(schema["enum"])
        if "const" in schema:
            return schema["const"]
        kind = schema.get("type")
        if kind is None:
            # anything: a batch's items, say, which are records as POST /v1/records takes them
            if name == "records":
                return self.valid({"$ref": "#/components/schemas/RecordIn"}, "", depth + 1)
            return rng.choice([None, 1, "x", {"a": 1}, [1, 2]])
        if kind == "string":
            return self.string(name, schema)
        if kind in ("integer", "number"):
            low, high = schema.get("minimum"), schema.get("maximum")
            if low is not None or high is not None:
                low = low if low is not None else -(2**31)
                high = high if high is not None else 2**31
                return rng.randint(int(low), int(high)) if kind == "integer" else rng.uniform(low, high)
            return rng.choice(INTEGERS) if kind == "integer" else rng.choice([*NUMBERS, *INTEGERS[:6]])
        if kind == "boolean":
            return rng.random() < 0.5
        if kind == "null":
            return None
        if kind == "array":
            count = rng.choice([0, 1, 1, 2, 3]) if depth < 3 else 0
            return [self.valid(schema.get("items", {}), name, depth + 1) for _ in range(count)]
        if kind == "object":
            return self.object(schema, depth)
        raise AssertionError(f"a schema type the generator does not know: {kind}")

    def object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        rng = self.rng
        properties: dict[str, Any] = schema.get("properties", {})
        if not properties:
            extra = schema.get("additionalProperties")
            names = self.resolve(schema.get("propertyNames", {})).get("enum")
            keys = (
                rng.sample(names, rng.randint(0, len(names)))
                if names
                else [rng.choice(STRINGS[1:6]) for _ in range(rng.randint(0, 3))]
            )
            if isinstance(extra, dict) and depth < 3:
                return {key: self.valid(extra, key, depth + 1) for key in keys}
            return {key: rng.choice([1, "v", True, None, 2.5]) for key in keys}
        required = set(schema.get("required", []))
        return {
            key: self.valid(sub, key, depth + 1)
            for key, sub in properties.items()
            if key in required or rng.random() < 0.5
        }

    def wrong(self, schema: dict[str, Any]) -> Any:
        """A value `schema` refuses: a type it allows none of (or, of an enum, a member it lacks)."""
        schema = self.resolve(schema)
        options = [self.resolve(s) for s in schema.get("anyOf", [schema])]
        if any("enum" in s for s in options) and all("enum" in s or s.get("type") == "null" for s in options):
            return "not-a-member-" + str(self.rng.randrange(1000))
        allowed = {s.get("type") for s in options}
        if None in allowed:
            return ANYTHING  # nothing refuses any value
        if "number" in allowed:
            allowed.add("integer")
        candidates = [
            value
            for kind, value in WRONG.items()
            if kind not in allowed and not (kind == "integer" and "number" in allowed)
        ]
        if "integer" in allowed and "number" not in allowed:
            candidates.append(1.5)
        return self.rng.choice(candidates)

    def refused_body(self, schema: dict[str, Any]) -> Any:
        rng = self.rng
        schema = self.resolve(schema)
        body = self.object(schema, 0)
        properties: dict[str, Any] = schema.get("properties", {})
        ways = ["not_object", "unknown_field"]
        if schema.get("required"):
            ways.append("drop_required")
        typed = [key for key, sub in properties.items() if self.wrong(sub) is not ANYTHING]
        if typed:
            ways += ["wrong_type"] * 3
        way = rng.choice(ways)
        if way == "not_object":
            return rng.choice([[], [body], "text", 42, None, True])
        if way == "unknown_field":
            body["no_such_field_" + str(rng.randrange(100))] = rng.choice([1, "x", None])
        elif way == "drop_required":
            body.pop(rng.choice(schema["required"]))
        else:
            key = rng.choice(typed)
            body[key] = self.wrong(properties[key])
        return body

    def parameter(self, parameter: dict[str, Any]) -> str:
        value = self.valid(parameter.get("schema", {"type": "string"}), parameter["name"])
        if isinstance(value, bool):
            return "true" if value else "false"
        return value if isinstance(value, str) else json.dumps(value)

    def request(self, method: str, path: str, operation: dict[str, Any], refuse: bool) -> Request:
        rng = self.rng
        target = path
        query: list[tuple[str, str]] = []
        for parameter in operation.get("parameters", []):
            if parameter["in"] == "path":
                target = target.replace("{" + parameter["name"] + "}", quote(self.parameter(parameter)))
            elif parameter.get("required") or rng.random() < 0.6:
                query.append((parameter["name"], self.parameter(parameter)))
        if query:
            target += "?" + "&".join(f"{quote(k)}={quote(v)}" for k, v in query)
        content = operation.get("requestBody", {}).get("content", {}).get("application/json")
        if content is None:
            return Request(method, path, target, None, False)
        schema = content["schema"]
        body = self.refused_body(schema) if refuse else self.valid(schema)
        return Request(method, path, target, json.dumps(body).encode(), refuse)


def quote(text: str) -> str:
    from urllib.parse import quote as url_quote

    return url_quote(text, safe="")
