"""The JSON Schema (draft 2020-12) of ``zhin.yaml``, and the one-line ``file:line`` error for data that breaks it.

Published (``zhin schema config``) so that editors can complete and check a config, and used by the loader
(:func:`zhin_cli.pipeline.config.parse_config`) so that nothing is silently ignored: an unknown key at any level, a
provider name under ``providers:`` that no profile has, a value of the wrong type. What a schema cannot know is
checked where it becomes known: segment ids in ``segments.texts`` / ``segments.remove`` exist only once the
plugins have registered (``Config.registry``), and so do the provider names of a file that loads plugins (one of
them may register the provider it names; ``validate_config(provider_names=False)``); ranges that depend on another key (``window.cut_to`` below
``window.max_messages``) and regexes are checked by the loader.

Enumerations (segment kinds, override values) are read from the registries and tables they describe, so the
schema cannot drift from what the code accepts. Provider names are not an enumeration in the published schema: a
zhin.yaml may name a plugin's provider, which only its plugins know; the registered names are the ``examples`` and
zhin checks the name at its ``file:line`` once the plugins ran.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from zhin_cli.core.errors import ConfigError
from zhin_cli.pipeline.schema_errors import describe  # shared with the price table's checks (prices.py)

SCHEMA_ID = "https://github.com/zhinjs/zhin-cli/schema/config-v1.json"  # an identifier, as the eval-case schema's


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``key: ~`` means "the default" throughout zhin.yaml (the loader reads ``data.get(key) or default``)."""
    kind = schema.get("type")
    return {**schema, "type": [kind, "null"]} if isinstance(kind, str) else schema


def _overrides_schema(with_models: bool) -> dict[str, Any]:
    from zhin_cli.pipeline.providers.spec import BOOLEAN_OVERRIDES, OVERRIDABLE, OVERRIDE_VALUES

    properties: dict[str, Any] = {}
    for key in sorted(OVERRIDABLE):
        if key in OVERRIDE_VALUES:
            properties[key] = {"enum": list(OVERRIDE_VALUES[key])}
        elif key in BOOLEAN_OVERRIDES:
            properties[key] = {"type": "boolean"}
        else:
            properties[key] = {"type": "string"}
    properties["validator"]["description"] = "the validator that speaks for this API (zhin providers lists them)"
    if with_models:
        properties["models"] = {"type": "object", "description": "model regex → overrides for the models it matches",
                                "additionalProperties": _overrides_schema(False)}
    return {"type": "object", "additionalProperties": False, "properties": properties}


def _tool_schema() -> dict[str, Any]:
    fields: dict[str, Any] = {"name": {"type": "string", "minLength": 1}, "description": {"type": "string"},
                              "parameters": {"type": "object", "description": "the arguments' JSON Schema"},
                              "strict": {"type": "boolean"}}
    function = {"type": "object", "required": ["name"], "additionalProperties": False, "properties": fields}
    return {
        "type": "object", "additionalProperties": False,
        "description": "an OpenAI-shaped tool ({type: function, function: {name, description, parameters}}), or the "
                       "function object alone; each provider writes it in its own wire shape",
        "properties": {"type": {"const": "function"}, "function": function, **fields},
        "anyOf": [{"required": ["function"]}, {"required": ["name"]}],
    }


def config_schema() -> dict[str, Any]:
    """The published JSON Schema (draft 2020-12) of ``zhin.yaml``, as data. A provider name is any string (a file
    may name a plugin's provider); the registered providers are its ``examples``, so it is built again when they
    change."""
    from zhin_cli.pipeline.providers.spec import provider_names

    return _schema(None, tuple(provider_names()))


PROVIDER_NAME = ("a built-in provider (`zhin providers` lists them) or a plugin's; zhin checks the name at its line "
                 "once the file's plugins ran")


def _provider_schemas(providers: tuple[str, ...] | None, known: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``provider:`` and the ``providers:`` mapping. ``None``: any name may be a plugin's (the published schema, or
    a file whose plugins have not run yet); the loader checks the names once they ran (``Config.registry``).
    ``known``: the registered names, given as ``examples``."""
    overrides: dict[str, Any] = {"type": "object", "description": f"per-provider capability overrides; each key is {PROVIDER_NAME}"}
    if providers is None:
        provider: dict[str, Any] = {"type": "string", "description": f"the default provider profile: {PROVIDER_NAME}",
                                    "examples": list(known)}
        overrides["propertyNames"] = {"type": "string", "examples": list(known)}
    else:
        provider = {"enum": [*providers, None], "description": "the default provider profile"}
        overrides["propertyNames"] = {"enum": list(providers)}
    overrides["additionalProperties"] = _overrides_schema(True)
    return _nullable(provider), _nullable(overrides)


@cache
def _schema(providers: tuple[str, ...] | None, known: tuple[str, ...] = ()) -> dict[str, Any]:
    from zhin_cli.pipeline.preset.model import CardOptions
    from zhin_cli.pipeline.prices import providers_schema
    from zhin_cli.pipeline.segments import TEXT_KINDS

    integer = {"type": "integer"}
    preset_options: dict[str, Any] = {key: _nullable({"type": "string"}) for key in CardOptions.FIELDS}
    preset_options["seed"] = {"type": "integer", "description": "seed of {{random}}/{{roll}} (default 0)"}
    provider, overrides = _provider_schemas(providers, known)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "zhin.yaml",
        "description": "zhin's project configuration: found upward from the working directory, or given with --config",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "provider": provider,
            "model": _nullable({"type": "string", "description": "the default model id"}),
            "timezone": _nullable({"type": "string", "description": "an IANA time zone (Asia/Shanghai): times in headers"}),
            "budget": _nullable({
                "type": "object", "additionalProperties": False,
                "properties": {"max_chars": _nullable({**integer, "description": "the system prompt's character budget (null: none)"})},
            }),
            "window": _nullable({
                "type": "object", "additionalProperties": False,
                "properties": {
                    "max_messages": _nullable({**integer, "minimum": 1, "description": "messages in the window (default 80; null: no limit)"}),
                    "cut_to": _nullable({**integer, "minimum": 0, "description": "a full window is cut to this many (below max_messages)"}),
                    "max_blocks": _nullable({**integer, "minimum": 1}),
                    "cut_blocks_to": _nullable({**integer, "minimum": 0}),
                    "keep_membership_events": {**integer, "minimum": 0, "description": "join/leave events kept (default 20)"},
                },
            }),
            "segments": _nullable({
                "type": "object", "additionalProperties": False,
                "properties": {
                    "texts": _nullable({"type": "object", "additionalProperties": {"type": "string"},
                                        "description": "segment id → its text: the built-in core.rules and core.platform, or "
                                                       "a plugin's text segment (ids are checked once plugins registered)"}),
                    "remove": _nullable({"type": "array", "items": {"type": "string"},
                                         "description": "segment ids to leave out (built-in or a plugin's)"}),
                    "add": _nullable({"type": "array", "items": {
                        "type": "object", "required": ["id", "kind"], "additionalProperties": False,
                        "properties": {
                            "id": {"type": "string", "minLength": 1},
                            "kind": {"enum": list(TEXT_KINDS)},
                            "text": {"type": "string"},
                            "weight": {"type": "number", "description": "order within its kind, highest first (default 0)"},
                            "retention": {"enum": ["required", "preferred"], "description": "what the budget may trim (default preferred)"},
                        },
                    }}),
                },
            }),
            "providers": overrides,
            "tools": _nullable({"type": "array", "items": _tool_schema()}),
            "prices": _nullable(providers_schema()),
            "plugins": _nullable({"type": "array", "items": {"type": "string", "minLength": 1},
                                  "description": "module:function or path/to/file.py:function (run only when trusted)"}),
            "preset": {
                "type": ["string", "object", "null"],
                "description": "a SillyTavern chat-completion preset file, or {file: …, user: …, char: …, seed: …}",
                "additionalProperties": False,
                "properties": {"file": {"type": "string"}, **preset_options},
            },
        },
    }


def _validator(names_checked: bool) -> Any:
    from zhin_cli.pipeline.providers.spec import provider_names

    return _validator_for(tuple(provider_names()) if names_checked else None)


@cache
def _validator_for(providers: tuple[str, ...] | None) -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(_schema(providers))


def validate_config(data: Any, where: Any, *, provider_names: bool = True) -> None:
    """Raise one ``ConfigError`` for the first problem in the file (by line) that the schema finds.

    ``where(key)`` gives ``file:line`` of a key (or of the nearest enclosing one) — ``Config.where``.
    ``provider_names=False``: leave the names under ``provider:`` / ``providers:`` to the loader, which checks them
    once the file's plugins ran (a plugin may register the provider the file names)."""
    # Inside one provider's overrides the loader's own check speaks (``_check_provider_overrides``): it names the
    # profile the way ``resolve_profile`` does, for zhin.yaml and eval case configs alike. The schema still refuses
    # what it refuses (the published schema and the loader agree); only the wording is the profile's.
    errors = [e for e in _validator(provider_names).iter_errors(data) if not (len(e.absolute_path) >= 2 and e.absolute_path[0] == "providers")]
    if not errors:
        return
    described = [describe(error) for error in errors]

    def position(item: tuple[str, str]) -> tuple[int, int]:
        located = where(item[0]) or ""
        line = located.rpartition(":")[2]
        return (int(line) if line.isdigit() else 0, -item[0].count(".") - item[0].count("["))

    key, message = min(described, key=position)
    raise ConfigError(message[:300], where=where(key))


__all__ = ["SCHEMA_ID", "config_schema", "describe", "validate_config"]
