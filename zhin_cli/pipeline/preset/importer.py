"""Import SillyTavern chat-completion presets as they are found in the wild (docs/spec/sillytavern.md §1).

Only what makes the file unusable is an error (``ConfigError`` naming the file and line): not JSON, not an
object, ``prompts``/``prompt_order`` of the wrong type, a prompt without an identifier. Everything else —
unknown keys and extensions, disabled entries, prompts outside the order, string character ids, bad depths,
regex scripts that do not compile — is kept or skipped exactly as ST would, and reported as a diagnostic.
"""

from __future__ import annotations

import bisect
import json
import re
import reprlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

from zhin_cli.core.errors import ConfigError
from zhin_cli.core.jsnumbers import js_number_problems
from zhin_cli.core.readers import enclosing_key, json_key_lines, read_json_file
from zhin_cli.pipeline.preset.model import (
    CHARACTER_ID,
    DEFAULT_ORDER,
    KNOWN_EXTENSIONS,
    KNOWN_PROMPT_FIELDS,
    KNOWN_TOP_LEVEL,
    LEGACY_CHARACTER_ID,
    MAX_INJECTION_DEPTH,
    POST_PROCESSING,
    ST_MARKERS,
    ZHIN_HOLES,
    CardOptions,
    Diagnostic,
    OrderEntry,
    Preset,
    PromptEntry,
    RegexScript,
    Role,
)

if TYPE_CHECKING:
    from zhin_cli.core.jsontext import JSON, JSONObject

# A card-options mapping as checked (``card_options``): text values, an integer ``seed``, None for "not set".
CardValues = Mapping[str, str | int | None]

ROLES: tuple[Role, ...] = ("system", "user", "assistant")
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict = 3, 80, 80, 5, 5


def _short(value: object) -> str:
    """``repr`` for a message, bounded: a 5 MB string or a list nested 900 deep is cut, never a RecursionError."""
    return _REPR.repr(value)


def _as_text(value: object) -> str:
    """``str`` of a scalar (as ST's ``String()``); a list or object becomes a bounded repr (str() may recurse)."""
    return value if isinstance(value, str) else str(value) if isinstance(value, int | float | None) else _short(value)


def load_preset(path: Path, options: CardValues | None = None) -> Preset:
    """Read a preset file; ``options`` (zhin.yaml ``preset:`` mapping) override its ``extensions.zhin``."""
    data, text = read_json_file(path, ConfigError, "preset file", encoding="utf-8-sig")  # ST files may start with a BOM
    return parse_preset(data, path=path, text=text, options=options)


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_COLON = re.compile(r"\s*:\s*")
_PAIR_NEEDLE = re.compile(r'"([^"]*)": ?"(.*)"', re.DOTALL)
_STRING_NEEDLE = re.compile(r'"(.*)"', re.DOTALL)


def _decoded(token: str) -> str:
    if "\\" not in token:
        return token[1:-1]
    try:
        value = json.loads(token)
    except ValueError:
        return token[1:-1]
    return value if isinstance(value, str) else token[1:-1]


class _Lines:
    """Lines of needles in a preset's raw text (JSON keeps no positions after parsing), found in O(1) each.

    A needle ``"key": "value"`` or ``"value"`` (built from parsed, decoded values) is looked up in an index of the
    file's string tokens and key/value pairs, made in one pass; any other needle is searched once and kept. Searching
    the text for every needle made a preset with 50,000 prompts take minutes (each search reads up to the whole file)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._index: tuple[dict[str, int], dict[tuple[str, str], int]] | None = None
        self._found: dict[str, int] = {}
        self._newlines: list[int] | None = None

    def _tokens(self) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
        if self._index is None:
            strings: dict[str, int] = {}
            pairs: dict[tuple[str, str], int] = {}
            previous: tuple[str, int, int] | None = None
            for token in _STRING.finditer(self.text):
                value = _decoded(token.group())
                strings.setdefault(value, token.start())
                if previous is not None and _COLON.fullmatch(self.text, previous[2], token.start()):
                    pairs.setdefault((previous[0], value), previous[1])
                previous = (value, token.start(), token.end())
            self._index = strings, pairs
        return self._index

    def position(self, needle: str) -> int | None:
        strings, pairs = self._tokens()
        pair = _PAIR_NEEDLE.fullmatch(needle)
        if pair is not None:
            return pairs.get((pair.group(1), pair.group(2)))
        single = _STRING_NEEDLE.fullmatch(needle)
        if single is not None:
            return strings.get(single.group(1))
        if needle not in self._found:
            self._found[needle] = self.text.find(needle)
        at = self._found[needle]
        return at if at >= 0 else None

    def line(self, *needles: str) -> int | None:
        for needle in needles:
            at = self.position(needle)
            if at is not None:
                if self._newlines is None:
                    self._newlines = [m.start() for m in re.finditer("\n", self.text)]
                return bisect.bisect_left(self._newlines, at) + 1
        return None


class _Reader:
    def __init__(self, path: Path | None, text: str | None) -> None:
        self.path = path
        self.text = text
        self.lines = _Lines(text) if text else None
        self.diagnostics: list[Diagnostic] = []
        self._key_lines: dict[str, int] | None = None

    def line_of(self, *needles: str) -> int | None:
        return self.lines.line(*needles) if self.lines is not None else None

    def where(self, key: str, *needles: str) -> str:
        line = self.line_of(*needles)
        name = str(self.path) if self.path else "<preset>"
        return f"{name}:{line}" if line else f"{name} ({key})"

    def fail(self, message: str, key: str, *needles: str) -> ConfigError:
        return ConfigError(message, where=self.where(key, *needles))

    def at_key(self, key: str) -> str:
        """``file:line`` of a key path (``prompts[2].injection_depth``), else of the nearest key around it: found
        by one scan of the text, on the first call (only an error pays for it)."""
        if self._key_lines is None and self.text is not None:
            self._key_lines = json_key_lines(self.text, self.path or Path("<preset>"))
        found = enclosing_key(self._key_lines or {}, key)
        if found is None or self._key_lines is None:
            return self.where(key)
        return f"{self.path or '<preset>'}:{self._key_lines[found]}"

    def check_numbers(self, obj: JSONObject, prefix: str) -> None:
        """Every number among ``obj``'s values (``core/jsnumbers.py``: one SillyTavern holds exactly), or an error
        at its line: one rule for the fields zhin reads (depths, orders, positions) and those it keeps."""
        for name, problem in js_number_problems(obj):
            key = f"{prefix}.{name}" if prefix else name
            raise ConfigError(f"{key} must be a number SillyTavern holds: {problem}", where=self.at_key(key))

    def report(self, severity: str, code: str, message: str, key: str, *needles: str) -> None:
        self.diagnostics.append(Diagnostic(severity, code, message, self.where(key, *needles)))  # type: ignore[arg-type]


def _identifier_needles(identifier: str) -> tuple[str, ...]:
    return (f'"identifier": "{identifier}"', f'"identifier":"{identifier}"', f'"{identifier}"')


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _is_role(value: object) -> TypeGuard[Role]:
    return value in ROLES


def _prompt(raw: JSON, index: int, reader: _Reader) -> PromptEntry:
    key = f"prompts[{index}]"
    if not isinstance(raw, dict):
        raise reader.fail(f"{key} must be an object, got {type(raw).__name__}", key)
    identifier = raw.get("identifier")
    reader.check_numbers(raw, key)
    if not isinstance(identifier, str) or not identifier:
        name = raw.get("name")
        raise reader.fail(f"{key} has no identifier (a non-empty string)", key,
                          *([f'"name": {json.dumps(name, ensure_ascii=False)}'] if isinstance(name, str) else []))
    needles = _identifier_needles(identifier)
    role_raw = raw.get("role")
    role: Role = "system"
    if _is_role(role_raw):
        role = role_raw
    elif role_raw is not None:
        reader.report("warning", "bad-role", f"prompt {_short(identifier)}: role {_short(role_raw)} is not system/user/assistant; sent as system",
                      key, *needles)
    content = raw.get("content")
    if content is not None and not isinstance(content, str):
        reader.report("warning", "bad-content", f"prompt {_short(identifier)}: content is {type(content).__name__}, not text; treated as empty",
                      key, *needles)
        content = ""
    position_raw = raw.get("injection_position", 0)
    position = 1 if position_raw == 1 and not isinstance(position_raw, bool) else 0  # 0 (or anything else): relative
    depth_raw = raw.get("injection_depth")
    depth = _int_or_none(depth_raw)
    if position == 1 and depth is None:
        what = "missing" if depth_raw is None else f"{type(depth_raw).__name__} {_short(depth_raw)}"
        reader.report("warning", "bad-depth",
                      f"in-chat prompt {_short(identifier)}: injection_depth is {what}, not an integer; ST never injects it (never sent)",
                      key, *needles)
    elif depth is not None and depth < 0:
        reader.report("warning", "bad-depth", f"in-chat prompt {_short(identifier)}: negative injection_depth {depth}; never injected", key, *needles)
        depth = None
    elif depth is not None and depth > MAX_INJECTION_DEPTH and position == 1:
        reader.report("warning", "bad-depth", f"in-chat prompt {_short(identifier)}: injection_depth {depth} is past ST's maximum "
                      f"{MAX_INJECTION_DEPTH}; ST never injects it (never sent)", key, *needles)
        depth = None
    order = _int_or_none(raw.get("injection_order"))
    trigger = raw.get("injection_trigger") or []
    if not isinstance(trigger, list):
        trigger = []
    if raw.get("forbid_overrides") is True:
        reader.report("info", "forbid-overrides", f"prompt {_short(identifier)}: forbid_overrides kept; zhin has no character card "
                      "that could override it, so it changes nothing", key, *needles)
    unknown = {k: v for k, v in raw.items() if k not in KNOWN_PROMPT_FIELDS}
    if unknown:
        reader.report("info", "unknown-field", f"prompt {_short(identifier)}: unknown fields kept: {', '.join(sorted(unknown))}", key, *needles)
    return PromptEntry(
        identifier=identifier,
        name=_as_text(raw.get("name") or ""),
        role=role,
        role_set=role_raw in ROLES,
        content=content or "",
        system_prompt=_bool_or_none(raw.get("system_prompt")),
        marker=raw.get("marker") is True,
        enabled=_bool_or_none(raw.get("enabled")),
        injection_position=position,
        injection_depth=depth,
        injection_order=100 if order is None else order,
        injection_trigger=tuple(_as_text(t) for t in trigger),
        forbid_overrides=raw.get("forbid_overrides") is True,
        extra=unknown,
        line=reader.line_of(*needles),
    )


def _bool_or_none(value: JSON) -> bool | None:
    return value if isinstance(value, bool) else None


def _order(data: JSONObject, prompts: dict[str, PromptEntry], reader: _Reader) -> tuple[list[OrderEntry], str]:
    raw_orders = data.get("prompt_order")
    if raw_orders is None:
        raw_orders = []
    if not isinstance(raw_orders, list):
        raise reader.fail("prompt_order must be a list of {character_id, order}", "prompt_order", '"prompt_order"')
    by_character: dict[str, list[JSON]] = {}
    for index, item in enumerate(raw_orders):
        entries = item.get("order") if isinstance(item, dict) else None
        if not isinstance(item, dict) or not isinstance(entries, list):
            raise reader.fail(f"prompt_order[{index}] must be an object with an order list", f"prompt_order[{index}]", '"prompt_order"')
        reader.check_numbers(item, f"prompt_order[{index}]")
        for position, entry in enumerate(entries):
            if isinstance(entry, dict):
                reader.check_numbers(entry, f"prompt_order[{index}].order[{position}]")
        character = _as_text(item.get("character_id"))  # ST compares String(character_id): "100001" works too
        if isinstance(item.get("character_id"), str):
            reader.report("info", "string-character-id", f"prompt_order[{index}]: character_id is the string {_short(character)} (accepted, as ST does)",
                          f"prompt_order[{index}]", f'"character_id": "{character}"', f'"character_id":"{character}"')
        by_character.setdefault(character, entries)
    if CHARACTER_ID in by_character:
        source, raw = CHARACTER_ID, by_character[CHARACTER_ID]
        if LEGACY_CHARACTER_ID in by_character:
            reader.report("info", "legacy-order", "the legacy order for character 100000 is ignored (100001 is used)", "prompt_order", '"prompt_order"')
    elif LEGACY_CHARACTER_ID in by_character:
        source, raw = LEGACY_CHARACTER_ID, by_character[LEGACY_CHARACTER_ID]
        reader.report("warning", "legacy-order-used",
                      "no order for character 100001: using the legacy 100000 order (ST itself would use its built-in order)",
                      "prompt_order", '"prompt_order"')
    else:
        reader.report("info", "default-order", "no prompt_order for character 100001: ST's built-in order is used", "prompt_order")
        return [OrderEntry(i, e) for i, e in DEFAULT_ORDER if i in prompts or i in ST_MARKERS], "default"
    for other in sorted(set(by_character) - {CHARACTER_ID, LEGACY_CHARACTER_ID}):
        reader.report("info", "other-character-order", f"prompt_order for character {other} is ignored (character-bound orders)", "prompt_order")
    order: list[OrderEntry] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        identifier = item.get("identifier") if isinstance(item, dict) else None
        if not isinstance(item, dict) or not isinstance(identifier, str):
            reader.report("warning", "bad-order-entry", f"prompt_order ({source}) entry {index} has no identifier; skipped", "prompt_order")
            continue
        if identifier not in prompts and identifier not in ST_MARKERS and identifier not in ZHIN_HOLES:
            reader.report("warning", "order-unknown-prompt",
                          f"prompt_order names {_short(identifier)}, which prompts[] does not define; removed (as ST does)",
                          "prompt_order", f'"identifier": "{identifier}"')
            continue
        if identifier in seen:
            reader.report("warning", "order-duplicate", f"prompt_order names {_short(identifier)} twice; the first wins", "prompt_order")
            continue
        seen.add(identifier)
        order.append(OrderEntry(identifier, item.get("enabled") is not False))
    return order, source


_REGEX_LITERAL = re.compile(r"^/(.*)/([a-z]*)$", re.DOTALL)


def _regex_script(raw: JSON, index: int, reader: _Reader) -> RegexScript | None:
    key = f"extensions.regex_scripts[{index}]"
    if not isinstance(raw, dict):
        reader.report("warning", "bad-regex", f"{key} is not an object; skipped", key)
        return None
    reader.check_numbers(raw, key)
    name = _as_text(raw.get("scriptName") or f"#{index}")
    find = raw.get("findRegex")
    if not isinstance(find, str) or not find:
        reader.report("warning", "bad-regex", f"regex script {_short(name)}: no findRegex; skipped", key, f'"scriptName": "{name}"')
        return None
    literal = _REGEX_LITERAL.match(find)
    pattern, flags = (literal.group(1), literal.group(2)) if literal else (find, "")

    def listed(key: str) -> list[JSON]:
        value = raw.get(key)
        return value if isinstance(value, list) else []

    script = RegexScript(
        name=name,
        pattern=pattern,
        flags=flags,
        replace=_as_text(raw.get("replaceString") or ""),
        trim_strings=tuple(s for s in listed("trimStrings") if isinstance(s, str)),
        placement=tuple(p for p in listed("placement") if isinstance(p, int)),
        disabled=raw.get("disabled") is True,
        prompt_only=raw.get("promptOnly") is True,
        markdown_only=raw.get("markdownOnly") is True,
        min_depth=_int_or_none(raw.get("minDepth")),
        max_depth=_int_or_none(raw.get("maxDepth")),
        line=reader.line_of(f'"scriptName": "{name}"', f'"scriptName":"{name}"'),
    )
    from zhin_cli.pipeline.preset.regex import compile_problem

    problem = compile_problem(script)
    if problem is not None:
        as_st = " (as ST does)" if problem == "does not compile" else ""
        reader.report("warning", "bad-regex", f"regex script {_short(name)}: {_short(find)} {problem}; skipped{as_st}",
                      key, f'"scriptName": "{name}"')
        return None
    return script


def card_options(raw: object, where: str) -> dict[str, str | int | None]:
    """Validate a card-options mapping (``extensions.zhin`` or zhin.yaml ``preset:``)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError("preset options must be a mapping", where=where)
    out: dict[str, str | int | None] = {}
    for key, value in raw.items():
        if key in ("file", "path"):
            continue
        if key not in CardOptions.FIELDS:
            raise ConfigError(f"unknown preset option {_short(key)} (known: file, {', '.join(CardOptions.FIELDS)})", where=where)
        if key == "seed":
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"preset option seed must be an integer, got {_short(value)}", where=where)
        elif value is not None and not isinstance(value, str):
            raise ConfigError(f"preset option {key} must be text, got {_short(value)}", where=where)
        out[key] = value
    return out


def parse_preset(data: JSON, *, path: Path | None = None, text: str | None = None,
                 options: CardValues | None = None) -> Preset:
    reader = _Reader(path, text)
    if not isinstance(data, dict):
        raise reader.fail("a chat-completion preset must be a JSON object", "")
    reader.check_numbers(data, "")  # temperature, penalties, context size, seed …: ST reads them as numbers
    raw_prompts = data.get("prompts", [])
    if raw_prompts is None:
        raw_prompts = []
    if not isinstance(raw_prompts, list):
        raise reader.fail("prompts must be a list", "prompts", '"prompts"')
    prompts: dict[str, PromptEntry] = {}
    for index, raw in enumerate(raw_prompts):
        entry = _prompt(raw, index, reader)
        if entry.identifier in prompts:
            reader.report("warning", "duplicate-prompt", f"prompts[] defines {_short(entry.identifier)} twice; the last one wins",
                          f"prompts[{index}]", *_identifier_needles(entry.identifier))
        prompts[entry.identifier] = entry
    # ST's Prompt Manager migration: legacy top-level prompt strings become entries.
    for legacy, identifier in (("main_prompt", "main"), ("nsfw_prompt", "nsfw"), ("jailbreak_prompt", "jailbreak")):
        content = data.get(legacy)
        if identifier not in prompts and isinstance(content, str):
            prompts[identifier] = PromptEntry(identifier, name=identifier, content=content, system_prompt=True)
    order, source = _order(data, prompts, reader)
    ordered = {e.identifier for e in order}
    for entry in prompts.values():
        if entry.identifier not in ordered and not entry.marker:
            reader.report("info", "not-in-order", f"prompt {_short(entry.identifier)} is not in prompt_order ({source}): never sent",
                          "prompts", *_identifier_needles(entry.identifier))
    unknown = sorted(k for k in data if k not in KNOWN_TOP_LEVEL)
    for key in unknown:
        reader.report("info", "unknown-key", f"unknown top-level key {_short(key)} kept (not used for assembly)", key, f'"{key}"')
    squash = data.get("squash_system_messages")
    if squash is not None and not isinstance(squash, bool):
        reader.report("warning", "bad-squash", f"squash_system_messages is {type(squash).__name__} {_short(squash)}, not true/false; "
                      "ST squashes only on true, so nothing is squashed", "squash_system_messages", '"squash_system_messages"')
    mode = data.get("custom_prompt_post_processing") or ""
    if mode not in POST_PROCESSING:
        reader.report("warning", "bad-post-processing", f"custom_prompt_post_processing {_short(mode)} is unknown; no post-processing",
                      "custom_prompt_post_processing", '"custom_prompt_post_processing"')
    elif mode == "single":
        reader.report("info", "single-user-message",
                      "custom_prompt_post_processing 'single': the whole prompt, history included, is sent as one user message "
                      "(as ST does); tool calls and state changes keep their own messages", "custom_prompt_post_processing",
                      '"custom_prompt_post_processing"')
    extensions = data.get("extensions") or {}
    if not isinstance(extensions, dict):
        reader.report("warning", "bad-extensions", "extensions is not an object; ignored", "extensions", '"extensions"')
        extensions = {}
    unknown_extensions = sorted(k for k in extensions if k not in KNOWN_EXTENSIONS)
    for key in unknown_extensions:
        reader.report("info", "unknown-extension", f"extension data {_short(key)} kept (stock ST does not read it either)",
                      f"extensions.{key}", f'"{key}"')
    scripts: list[RegexScript] = []
    raw_scripts = extensions.get("regex_scripts") or []
    if not isinstance(raw_scripts, list):
        reader.report("warning", "bad-regex", "extensions.regex_scripts is not a list; ignored", "extensions.regex_scripts", '"regex_scripts"')
        raw_scripts = []
    for index, raw in enumerate(raw_scripts):
        script = _regex_script(raw, index, reader)
        if script is not None:
            scripts.append(script)
    where = reader.where("extensions.zhin", '"zhin"')
    merged = {**card_options(extensions.get("zhin"), where), **(options or {})}
    card = CardOptions.from_values(merged)
    name = path.stem if path else "preset"
    return Preset(name=name, path=path, prompts=prompts, order=order, order_source=source,
                  settings={k: v for k, v in data.items() if k not in ("prompts", "prompt_order")},
                  regex_scripts=scripts, card=card, diagnostics=reader.diagnostics, unknown_keys=unknown,
                  unknown_extensions=unknown_extensions)
