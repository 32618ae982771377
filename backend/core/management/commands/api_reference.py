"""``manage.py api_reference``: the Markdown API reference (docs/api.md) from the OpenAPI schema."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from drf_spectacular.generators import SchemaGenerator

METHODS = ("get", "post", "put", "patch", "delete")


def _resolve(schema: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if not ref:
        return schema
    name = ref.rsplit("/", 1)[-1]
    return spec["components"]["schemas"][name]


def _type_of(schema: dict[str, Any], spec: dict[str, Any]) -> str:
    if "$ref" in schema:
        target = _resolve(schema, spec)
        if "enum" in target:
            return " \\| ".join(f"`{value}`" for value in target["enum"] if value)
        return schema["$ref"].rsplit("/", 1)[-1]
    if "oneOf" in schema:
        return " or ".join(_type_of(option, spec) for option in schema["oneOf"])
    if "allOf" in schema:
        return " ".join(_type_of(option, spec) for option in schema["allOf"])
    if schema.get("type") == "array":
        return f"list of {_type_of(schema.get('items', {}), spec)}"
    kind = schema.get("type", "object")
    return f"{kind} ({schema['format']})" if "format" in schema else kind


def _fields_table(schema: dict[str, Any], spec: dict[str, Any], writing: bool) -> list[str]:
    schema = _resolve(schema, spec)
    if schema.get("type") == "array":
        schema = _resolve(schema.get("items", {}), spec)
    properties = schema.get("properties")
    if not properties:
        return []
    required = set(schema.get("required", []))
    lines = ["| field | type | | description |", "| --- | --- | --- | --- |"]
    for name, field in properties.items():
        if writing and field.get("readOnly"):
            continue
        flag = "required" if name in required and writing else ""
        description = (field.get("description") or "").replace("\n", " ")
        lines.append(f"| `{name}` | {_type_of(field, spec)} | {flag} | {description} |")
    return lines


def render_reference(spec: dict[str, Any]) -> str:
    lines = [
        f"# {spec['info']['title']} reference",
        "",
        "Generated from the OpenAPI schema by `make schema` (`manage.py api_reference`); do not",
        "edit by hand. The live schema is served at `/api/schema/` and explored at `/api/docs/`.",
        "",
        "Authenticate with a session (the dashboard) or `Authorization: Token <key>` (scripts;",
        "create a key with `POST /api/v1/me/tokens/` or `manage.py issue_token USERNAME`). Lists",
        'are paginated as `{"count", "next", "previous", "results"}`; errors are',
        '`{"field": ["message"]}` or `{"detail": "message"}`.',
        "",
    ]
    for path, operations in spec["paths"].items():
        for method in METHODS:
            operation = operations.get(method)
            if operation is None:
                continue
            lines += [f"## `{method.upper()} {path}`", ""]
            if operation.get("description"):
                lines += [operation["description"].strip(), ""]
            parameters = [p for p in operation.get("parameters", []) if p["in"] != "path"]
            if parameters:
                lines += ["| parameter | in | description |", "| --- | --- | --- |"]
                for parameter in parameters:
                    description = (parameter.get("description") or "").replace("\n", " ")
                    lines.append(f"| `{parameter['name']}` | {parameter['in']} | {description} |")
                lines.append("")
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                table = _fields_table(body["schema"], spec, writing=True)
                if table:
                    lines += ["Request body:", "", *table, ""]
            codes = ", ".join(f"`{code}`" for code in operation.get("responses", {}))
            lines += [f"Answers: {codes}", ""]
    return "\n".join(lines).rstrip() + "\n"


class Command(BaseCommand):
    help = "Print the Markdown API reference generated from the OpenAPI schema."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--output", help="Write to this file instead of standard output.")

    def handle(self, *args: object, **options: Any) -> None:
        spec = SchemaGenerator().get_schema(request=None, public=True)
        reference = render_reference(spec)
        if options["output"]:
            with open(str(options["output"]), "w") as target:
                target.write(reference)
        else:
            self.stdout.write(reference, ending="")
