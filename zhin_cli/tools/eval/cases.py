"""Case files: the published JSON Schema, and loading with ``file:line`` errors.

A case file (``eval_cases/*.yaml``) is ``{version?, description?, cases: [case, …]}``. It is parsed with
the same line-tracking YAML loader as ``zhin.yaml``, validated against the schema (built from the
assertion, step and transform registries, so it cannot drift from the runner), and every problem becomes
one ``CaseError`` line naming the file and the line of the offending key. Exit status 4.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from zhin_cli.core.errors import EXIT_INVALID_CASE, ZhinError
from zhin_cli.core.readers import enclosing_key, key_path
from zhin_cli.tools.eval import assertions as _assertions  # noqa: F401  (registers the built-in assertions)
from zhin_cli.tools.eval import timeline as _timeline  # noqa: F401  (registers the built-in steps)
from zhin_cli.tools.eval import transforms as _transforms  # noqa: F401  (registers the built-in transforms)
from zhin_cli.tools.eval.registry import ASSERTIONS, TRANSFORMS
from zhin_cli.tools.eval.timeline import FACTS_SCHEMA, STEP_COMMON, STEPS

if TYPE_CHECKING:
    from zhin_cli.core.jsontext import JSON, JSONObject

SCHEMA_VERSION = 1
SCHEMA_ID = "https://github.com/zhinjs/zhin-cli/schema/eval-case-v1.json"
CASE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"


class CaseError(ZhinError):
    """An invalid case file: one line naming the file and line."""

    exit_code = EXIT_INVALID_CASE


# --- the schema --------------------------------------------------------------------------------------------


def _assertion_schema() -> JSONObject:
    common: JSONObject = {
        "type": {"enum": [name for name in sorted(ASSERTIONS)]},
        "turn": {"oneOf": [{"type": "integer"}, {"type": "string", "minLength": 1}],
                 "description": "which request: 1-based number, negative from the end, a step label, last (default) or all"},
        "providers": {"type": "array", "items": {"type": "string"}, "description": "only under these provider profiles"},
        "description": {"type": "string"},
    }
    branches: list[JSON] = []
    for name, kind in sorted(ASSERTIONS.items()):
        branches.append({
            "if": {"properties": {"type": {"const": name}}, "required": ["type"]},
            "then": {"properties": {**common, **kind.params}, "required": ["type", *kind.required],
                     "additionalProperties": False},
        })
    return {"type": "object", "required": ["type"], "properties": common, "allOf": branches}


def _step_schema() -> JSONObject:
    properties: JSONObject = {**STEP_COMMON, **{name: {**kind.schema, "description": kind.summary} for name, kind in STEPS.items()}}
    return {
        "type": "object", "additionalProperties": False, "properties": properties,
        "oneOf": [{"required": [name]} for name in sorted(STEPS)],
        "description": "exactly one step key (" + ", ".join(sorted(STEPS)) + "), with optional at and label",
    }


def _transform_schema() -> JSONObject:
    branches: list[JSON] = [{"if": {"properties": {"type": {"const": n}}, "required": ["type"]},
                 "then": {"properties": {"type": {"const": n}, **t.params}, "additionalProperties": False}}
                for n, t in sorted(TRANSFORMS.items())]
    return {"type": "object", "required": ["type"], "properties": {"type": {"enum": [name for name in sorted(TRANSFORMS)]}},
            "allOf": branches}


def case_schema() -> JSONObject:
    """The JSON Schema (draft 2020-12) of a case file, as data."""
    provider: JSONObject = {"oneOf": [
        {"type": "string", "minLength": 1},
        {"type": "object", "required": ["provider"], "additionalProperties": False,
         "properties": {"provider": {"type": "string"}, "model": {"type": "string"}}},
    ]}
    case: JSONObject = {
        "type": "object", "required": ["id"], "additionalProperties": False,
        "properties": {
            "id": {"type": "string", "pattern": CASE_ID_PATTERN},
            "description": {"type": "string"},
            "criterion": {"type": "string", "description": "what it checks, e.g. 'ADR 0041 acceptance 6'"},
            "extends": {"type": "string", "description": "id of an earlier case in this file: inherit every key not given here"},
            "expect": {"enum": ["pass", "fail"], "description": "fail: a negative control, passes only if an assertion fails"},
            "requires": {"enum": ["live"], "description": "live: needs --live (skipped offline, never passed)"},
            "providers": {"type": "array", "minItems": 1, "items": provider,
                          "description": "provider profiles to run under (default: the config's, else openai)"},
            "config": {"type": "object", "description": "a zhin.yaml mapping, checked against `zhin schema config` when the case is prepared (plugins: files inside this file's folder, run only once the case file is trusted)"},
            "session": {
                "type": "object", "additionalProperties": False,
                "properties": {
                    "file": {"type": "string", "description": "start from a stored session .jsonl (relative to this file)"},
                    "db": {"type": "string", "description": "start from a session in this database (with id)"},
                    "id": {"type": "string", "description": "session id or key in db"},
                    "timezone": {"type": "string"},
                    "start": {"type": "string", "description": "ISO time of the first step (default 2025-10-29T09:00:00+08:00)"},
                    "bot": {"type": "object", "additionalProperties": False, "properties": {
                        k: {"type": "string"} for k in ("user_id", "name", "group_nickname", "platform_role")}},
                    "scene": {"type": "object"},
                },
            },
            "members": {"type": "object", "additionalProperties": {
                "type": "object", "additionalProperties": False, "properties": FACTS_SCHEMA},
                "description": "member facts by user_id, in force from the first step"},
            "timeline": {"type": "array", "items": {"$ref": "#/$defs/step"}},
            "transforms": {"type": "array", "items": {"$ref": "#/$defs/transform"},
                           "description": "rewrite each request before validation (negative controls)"},
            "assertions": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/assertion"}},
            "repeat": {"type": "integer", "minimum": 1, "description": "live: ask the model this many times"},
            "min_pass_rate": {"type": "number", "minimum": 0, "maximum": 1, "description": "live: share of repeats that must pass (default 1)"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "zhin eval case file",
        "type": "object",
        "required": ["cases"],
        "additionalProperties": False,
        "properties": {
            "version": {"const": SCHEMA_VERSION},
            "description": {"type": "string"},
            "cases": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/case"}},
        },
        "$defs": {"case": case, "step": _step_schema(), "assertion": _assertion_schema(), "transform": _transform_schema()},
    }


# --- loaded cases ---------------------------------------------------------------------------------------------


@dataclass
class Case:
    id: str
    file: Path
    line: int
    data: dict[str, Any]  # the case mapping after `extends` is resolved
    lines: dict[str, int]  # key path inside this case ("timeline[3].user") → line in the file
    expect: str = "pass"
    tags: list[str] = field(default_factory=list)

    @property
    def requires_live(self) -> bool:
        return self.data.get("requires") == "live" or any(ASSERTIONS[a["type"]].live for a in self.data["assertions"])

    def where(self, key: str = "") -> str:
        """``file:line`` of ``key`` inside this case (or the nearest enclosing key)."""
        found = enclosing_key(self.lines, key)
        return f"{self.file}:{self.lines[found] if found is not None else self.line}"

    def line_of(self, key: str) -> int:
        return int(self.where(key).rsplit(":", 1)[1])


class SchemaError(Protocol):
    """What the case reader uses of a ``jsonschema`` ValidationError (the package ships no types)."""

    @property
    def message(self) -> str: ...
    @property
    def validator(self) -> str: ...
    @property
    def validator_value(self) -> JSON: ...
    @property
    def schema(self) -> JSON: ...
    @property
    def instance(self) -> JSON: ...
    @property
    def context(self) -> list[SchemaError]: ...
    @property
    def absolute_path(self) -> Sequence[str | int]: ...


class SchemaValidator(Protocol):
    def iter_errors(self, instance: object) -> Iterator[SchemaError]: ...


_VALIDATOR: SchemaValidator | None = None


def _validator() -> SchemaValidator:
    global _VALIDATOR
    if _VALIDATOR is None:
        from jsonschema import Draft202012Validator

        _VALIDATOR = Draft202012Validator(case_schema())
    return _VALIDATOR


def _nearest_line(lines: dict[str, int], key: str) -> int:
    found = enclosing_key(lines, key)
    return lines[found] if found is not None else 1


def _deepest(errors: list[SchemaError]) -> SchemaError | None:
    from jsonschema.exceptions import best_match

    found: SchemaError | None = best_match(errors)
    return found


def _describe(error: SchemaError) -> str:
    """A jsonschema error as one short line (the deepest useful reason, not the whole schema)."""
    schema = error.schema if isinstance(error.schema, dict) else {}
    branches = schema.get("oneOf")
    if error.validator == "oneOf" and isinstance(branches, list) and branches \
            and all(isinstance(b, dict) and set(b) == {"required"} for b in branches):
        # the timeline step: exactly one step key
        keys = [k for k in error.instance if k in STEPS] if isinstance(error.instance, dict) else []
        return f"a timeline step needs exactly one of {', '.join(sorted(STEPS))} (got {', '.join(keys) or 'none'})"
    if error.validator in ("oneOf", "anyOf") and error.context:
        deepest = _deepest(error.context)
        if deepest is not None:
            return _describe(deepest)
    message = error.message
    properties, allowed_values = schema.get("properties"), error.validator_value
    if error.validator == "additionalProperties":
        allowed = sorted(properties) if isinstance(properties, dict) else []
        message = f"{message} (allowed: {', '.join(allowed)})"
    elif error.validator == "enum" and isinstance(allowed_values, list):
        message = f"{_short_instance(error.instance)} is not one of {', '.join(map(str, allowed_values))}"
    elif error.validator == "pattern" and schema.get("description"):
        message = f"{_short_instance(error.instance)} is not valid: {schema['description']}"
    return message if len(message) <= 400 else message[:399] + "…"


def _short_instance(value: object) -> str:
    """A bounded repr: a huge instance (a 5 MB string, a list of a million items) is cut before it is formatted."""
    from zhin_cli.store.payload import short

    return short(value)


def _error_key(error: SchemaError) -> str:
    """The key path of the error, descending into oneOf branches that point deeper."""
    path = list(error.absolute_path)
    if error.validator in ("oneOf", "anyOf") and error.context:
        deepest = _deepest(error.context)
        if deepest is not None and len(deepest.absolute_path) > len(path):
            path = list(deepest.absolute_path)
    return key_path(path)


def read_yaml(path: Path) -> tuple[Any, dict[str, int]]:
    from zhin_cli.core.readers import read_yaml_file

    return read_yaml_file(path, CaseError, "case file")


def load_case_file(path: Path) -> list[Case]:
    data, lines = read_yaml(path)
    if not data:
        raise CaseError("empty case file (expected a mapping with `cases:`)", where=f"{path}:1")
    errors = sorted(_validator().iter_errors(data), key=lambda e: (_nearest_line(lines, _error_key(e)), len(list(e.absolute_path))))
    if errors:
        error = errors[0]
        key = _error_key(error)
        where_key = f" ({key})" if key else ""
        raise CaseError(f"{_describe(error)}{where_key}", where=f"{path}:{_nearest_line(lines, key)}")
    cases: list[Case] = []
    by_id: dict[str, Case] = {}
    for index, raw in enumerate(data["cases"]):
        prefix = f"cases[{index}]"
        case_lines = {k[len(prefix) + 1 :] if k != prefix else "": v for k, v in lines.items()
                      if k == prefix or k.startswith(prefix + ".") or k.startswith(prefix + "[")}
        line = lines.get(prefix, 1)
        case_data = copy.deepcopy(raw)
        if "extends" in raw:
            base = by_id.get(raw["extends"])
            if base is None:
                raise CaseError(f"extends {raw['extends']!r}: no earlier case with that id in this file",
                                where=f"{path}:{lines.get(prefix + '.extends', line)}")
            inherited = {k: copy.deepcopy(v) for k, v in base.data.items() if k not in ("id", "description", "expect", "extends", "tags")}
            for key in inherited:
                if key not in raw:
                    for inner, inner_line in base.lines.items():
                        if inner == key or inner.startswith(key + ".") or inner.startswith(key + "["):
                            case_lines.setdefault(inner, inner_line)
            case_data = {**inherited, **case_data}
        if "assertions" not in case_data:
            raise CaseError(f"case {raw['id']!r} has no assertions", where=f"{path}:{line}")
        if raw["id"] in by_id:
            raise CaseError(f"duplicate case id {raw['id']!r}", where=f"{path}:{lines.get(prefix + '.id', line)}")
        case = Case(raw["id"], path, line, case_data, case_lines, expect=case_data.get("expect", "pass"),
                    tags=list(raw.get("tags", [])))
        by_id[case.id] = case
        cases.append(case)
    return cases


def find_case_files(paths: list[Path]) -> list[Path]:
    """``*.yaml`` / ``*.yml`` files, folders searched recursively, in a stable order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()))
        elif path.exists():
            found.append(path)
        else:
            from zhin_cli.core.errors import UsageError

            raise UsageError(f"no such file or folder: {path}")
    return found


def load_cases(paths: list[Path]) -> list[Case]:
    """Every case under ``paths``; ids must be unique across the run (JUnit and `--json` key on them)."""
    cases: list[Case] = []
    seen: dict[str, Case] = {}
    for file in find_case_files(paths):
        for case in load_case_file(file):
            if case.id in seen:
                raise CaseError(f"duplicate case id {case.id!r} (also in {seen[case.id].where()})", where=case.where("id"))
            seen[case.id] = case
            cases.append(case)
    return cases
