"""One line for a JSON Schema error: the key to point at and what is wrong with it, in zhin's words.

Shared by the ``zhin.yaml`` schema (``config_schema``) and the price table's (``prices``), which is why it is a
module of its own: each of them imports it, neither imports the other.
"""

from __future__ import annotations

from typing import Any

from zhin_cli.core.readers import key_path

_TYPE_NAMES = {"string": "a string", "integer": "an integer", "number": "a number", "object": "a mapping",
               "array": "a list", "boolean": "true or false", "null": "null"}


def _shown(value: Any) -> str:
    return repr(value) if len(repr(value)) <= 60 else repr(value)[:59] + "…"


def describe(error: Any) -> tuple[str, str]:
    """The key to point at and the one-line message for a jsonschema ``ValidationError``."""
    path = list(error.absolute_path)
    key = key_path(path)
    name = key or "the config"
    kind = error.validator
    schema = error.schema if isinstance(error.schema, dict) else {}
    if kind == "additionalProperties" and isinstance(error.instance, dict):
        known = sorted(schema.get("properties", {}))
        unknown = sorted(str(k) for k in error.instance if k not in known)
        where = key_path([*path, unknown[0]])
        if not key:
            return where, f"unknown config keys {unknown} (known: {known})"
        return where, f"unknown {key} keys {unknown} (known: {', '.join(known)})"
    if "propertyNames" in error.schema_path:  # the key's name broke it (jsonschema reports the inner enum)
        names = schema.get("enum", [])
        where = key_path([*path, error.instance])
        if path == ["providers"]:
            return where, f"unknown provider {error.instance!r} under providers (known: {', '.join(names)})"
        return where, f"unknown key {error.instance!r} in {name} (known: {', '.join(names)})"
    if kind == "type":
        wanted = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        real = [t for t in wanted if t != "null"]
        text = " or ".join(_TYPE_NAMES.get(t, t) for t in real) + (" (or null)" if "null" in wanted else "")
        return key, f"{name} must be {text}, got {_shown(error.instance)}"
    if kind in ("enum", "const"):
        allowed = [str(a) for a in (error.validator_value if kind == "enum" else [error.validator_value]) if a is not None]
        if path == ["provider"]:
            return key, f"unknown provider {error.instance!r} (known: {', '.join(allowed)})"
        shown = allowed[0] if len(allowed) == 1 else f"{', '.join(allowed[:-1])} or {allowed[-1]}"
        if len(path) == 4 and path[:2] == ["segments", "add"] and path[3] == "kind":
            shown = f"a text kind ({', '.join(allowed)})"
        return key, f"{name} must be {shown}, got {_shown(error.instance)}"
    if kind == "required":
        missing = next((m for m in error.validator_value if m not in error.instance), error.validator_value[0])
        return key, f"{name} needs {missing}"
    if kind == "anyOf" and all(set(branch) == {"required"} for branch in error.validator_value):
        options = " or ".join(branch["required"][0] for branch in error.validator_value)
        return key, f"{name} needs {options}"
    if kind == "minimum":
        bound = "0 or more" if error.validator_value == 0 else f"at least {error.validator_value}"
        # max_messages, max_blocks: null lifts the limit (cut_to: null is only the default)
        nullable = isinstance(schema.get("type"), list) and "null" in schema["type"] and error.validator_value >= 1
        return key, f"{name} must be {bound}{' (or null for no limit)' if nullable else ''}, got {_shown(error.instance)}"
    if kind == "minLength":
        return key, f"{name} must not be empty"
    return key, f"{name}: {error.message}"
