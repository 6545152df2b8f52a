"""Every answer the HTTP tests receive is checked against the server's own `/openapi.json`.

`Server.client` runs `AnswerCheck` on each response: the operation must be documented for
that method and path, the status code among its responses, and a JSON body must fit the
documented schema. So the document cannot drift from what the server says.

The schemas use a small part of JSON Schema (type, properties, required,
additionalProperties, items, enum, anyOf, $ref); this checks exactly that part and
refuses a keyword it does not know, so a schema it cannot check fails loudly.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

# Keywords that describe without constraining what this check looks at.
_ANNOTATIONS = {"description", "default", "format", "title", "examples", "minimum", "maximum", "minLength",
                "maxLength", "exclusiveMinimum", "exclusiveMaximum"}
_TYPES: dict[str, tuple[type, ...]] = {"object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
                                       "null": (type(None),), "integer": (int,), "number": (int, float)}


def _fits_type(value: Any, name: str) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES[name])


def _pattern(template: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[^}]+\})", template)
    return re.compile("^" + "".join(
        (".+" if part == "{id}" else "[^/]+") if part.startswith("{") else re.escape(part) for part in parts) + "$")


class Mismatch(AssertionError):
    pass


class Document:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self._paths = [(_pattern(path), path, ops) for path, ops in doc["paths"].items()]
        # The template with more literal text wins (`/invocations/{id}/entries` over
        # `/invocations/{id}`, which also matches it, since an id may hold slashes).
        self._paths.sort(key=lambda p: -len(re.sub(r"\{[^}]+\}", "", p[1])))

    def operation(self, method: str, path: str) -> tuple[str, dict[str, Any]]:
        for pattern, template, ops in self._paths:
            if pattern.match(path) and method.lower() in ops:
                return template, ops[method.lower()]
        raise Mismatch(f"{method} {path} is answered but not in /openapi.json")

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            name = schema["$ref"].removeprefix("#/components/schemas/")
            schema = self.doc["components"]["schemas"][name]
        return schema

    def check(self, value: Any, schema: dict[str, Any], where: str) -> None:
        schema = self.resolve(schema)
        unknown = set(schema) - _ANNOTATIONS - {"type", "properties", "required", "additionalProperties", "items",
                                                "enum", "anyOf", "const"}
        if unknown:
            raise Mismatch(f"{where}: the schema uses {sorted(unknown)}, which this check does not know")
        if "anyOf" in schema:
            errors = []
            for option in schema["anyOf"]:
                try:
                    self.check(value, option, where)
                    break
                except Mismatch as exc:
                    errors.append(str(exc))
            else:
                raise Mismatch(f"{where}: fits none of anyOf: {errors}")
        if "type" in schema:
            types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            if not any(_fits_type(value, t) for t in types):
                raise Mismatch(f"{where}: {value!r:.200} is not {' or '.join(types)}")
        if "enum" in schema and value not in schema["enum"]:
            raise Mismatch(f"{where}: {value!r:.200} is not one of {schema['enum']}")
        if "const" in schema and value != schema["const"]:
            raise Mismatch(f"{where}: {value!r:.200} is not {schema['const']!r}")
        if isinstance(value, dict):
            for name in schema.get("required", []):
                if name not in value:
                    raise Mismatch(f"{where}: lacks the required {name!r}")
            properties = schema.get("properties", {})
            extra = schema.get("additionalProperties", True)
            for name, item in value.items():
                if name in properties:
                    self.check(item, properties[name], f"{where}.{name}")
                elif extra is False:
                    raise Mismatch(f"{where}: {name!r} is not documented")
                elif isinstance(extra, dict):
                    self.check(item, extra, f"{where}.{name}")
        if isinstance(value, list) and "items" in schema:
            for i, item in enumerate(value):
                self.check(item, schema["items"], f"{where}[{i}]")


class AnswerCheck:
    """An httpx response hook: each answer fits the document its server publishes."""

    def __init__(self) -> None:
        self.document: Document | None = None
        self.checked = 0

    def __call__(self, response: httpx.Response) -> None:
        request = response.request
        path = request.url.raw_path.decode("ascii").split("?", 1)[0]
        if path == "/openapi.json" or path == "/" or path.startswith(("/i/", "/static/", "/ui")):
            return  # the document itself, and the web UI's pages
        if response.status_code in (421,) or request.headers.get("x-unchecked"):
            return  # refused before routing (a Host the server does not answer to)
        streamed = response.headers.get("content-type", "").startswith("text/event-stream")
        if not streamed:
            response.read()
        if self.document is None:
            headers = [(k, v) for k, v in request.headers.raw if k.lower() in (b"authorization", b"host")]
            doc = httpx.get(str(request.url.copy_with(raw_path=b"/openapi.json")), headers=headers, timeout=30)
            if doc.status_code != 200:  # (not serving yet, or stopping): its first answers are read at start-up
                return
            self.document = Document(doc.json())
        try:
            template, op = self.document.operation(request.method, path)
        except Mismatch:
            if response.status_code not in (404, 405):
                raise
            # No such route: the answer is the documented error, whatever the path.
            self.document.check(response.json(), {"$ref": "#/components/schemas/Error"}, f"{request.method} {path}")
            self.checked += 1
            return
        answers = op.get("responses", {})
        code = str(response.status_code)
        if code not in answers:
            raise Mismatch(f"{request.method} {template} answered {code}, which /openapi.json does not list "
                           f"({sorted(answers)}): {response.text[:300]}")
        content = answers[code].get("content", {})
        if not streamed and "application/json" in content and response.headers.get("content-type", "").startswith("application/json"):
            schema = content["application/json"].get("schema", {})
            self.document.check(response.json(), schema, f"{request.method} {template} {code}")
        self.checked += 1
