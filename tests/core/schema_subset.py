"""A validator for the JSON Schema subset the plan schema uses (no library
here has one): type, properties, required, additionalProperties, items,
maxItems, maxLength, enum, const, anyOf and local ``$ref``s.  Returns the
first violation's path and reason, or None."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "null": type(None),
}


def violation(value: Any, schema: Mapping[str, Any], root: Mapping[str, Any] | None = None,
              at: str = "$") -> str | None:  # fmt: skip
    root = root if root is not None else schema
    if "$ref" in schema:
        name = str(schema["$ref"]).removeprefix("#/$defs/")
        return violation(value, root["$defs"][name], root, at)
    if "anyOf" in schema:
        if all(violation(value, s, root, at) for s in schema["anyOf"]):
            return f"{at}: matches no anyOf branch"
        return None
    kinds = schema.get("type")
    if kinds is not None:
        allowed = [kinds] if isinstance(kinds, str) else list(kinds)
        ok = any(
            isinstance(value, _TYPES[k]) and not (k == "integer" and isinstance(value, bool))
            for k in allowed
        )
        if not ok:
            return f"{at}: not {kinds}"
    if "const" in schema and value != schema["const"]:
        return f"{at}: not {schema['const']!r}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{at}: {value!r} not in the enum"
    if isinstance(value, str) and len(value) > schema.get("maxLength", len(value)):
        return f"{at}: longer than {schema['maxLength']}"
    if isinstance(value, list):
        if len(value) > schema.get("maxItems", len(value)):
            return f"{at}: more than {schema['maxItems']} items"
        for i, item in enumerate(value):
            if "items" in schema and (bad := violation(item, schema["items"], root, f"{at}[{i}]")):
                return bad
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                return f"{at}: {key} missing"
        for key, item in value.items():
            if key not in props:
                if schema.get("additionalProperties") is False:
                    return f"{at}: {key} not allowed"
                continue
            if bad := violation(item, props[key], root, f"{at}.{key}"):
                return bad
    return None
