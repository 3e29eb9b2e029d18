"""Built-in assertion types. Deterministic ones look at the assembled requests; ``live`` ones at model replies.

Each is one ``@assertion`` registration: a name, the JSON Schema of its keys, and ``check(run, spec)``.
Keys every assertion accepts (``type``, ``turn``, ``providers``, ``description``) are added by the schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING

from zhin_cli.cache.diff import diff_pair
from zhin_cli.core.tokens import counter
from zhin_cli.pipeline.assemble import AssembledRequest
from zhin_cli.pipeline.fixedcost import TOTAL, fixed_parts
from zhin_cli.pipeline.format import parse_header
from zhin_cli.tools.eval.metrics import header_texts
from zhin_cli.tools.eval.registry import Outcome, ProviderRun, assertion, spec_int, spec_text, spec_texts
from zhin_cli.wire import wire_for

if TYPE_CHECKING:
    from jsonpath_ng import JSONPath

    from zhin_cli.core.jsontext import JSON, JSONObject

FULL_ONLY_FIELDS = frozenset({"name", "role", "group_nickname", "group_title", "mute_time", "origin"})
SCOPES = ("all", "system", "messages", "tail")
_SCOPE: JSONObject = {"enum": list(SCOPES), "description": "which text: all (default), system prompt, messages, runtime tail"}
_TURN_PAIR: JSONObject = {"oneOf": [{"type": "integer"}, {"type": "string", "minLength": 1}]}


# --- what assertions look at ------------------------------------------------------------------------------


def wire_messages(request: AssembledRequest) -> list[JSON]:
    return wire_for(request.profile.wire).messages(request.request)


def text_lines(request: AssembledRequest, scope: str = "all") -> list[str]:
    """The text the renderer put on the wire (every part, in order), split into lines."""
    lines: list[str] = []
    for part in request.parts:
        region = "system" if part.segment_id == "system" else "tail" if part.segment_id == "tail" else "messages"
        if scope in ("all", region):
            lines.extend(part.text.splitlines())
    return lines


def strip_header(line: str) -> str:
    """The line without a leading ``[k:v;…;]`` header (host events carry one on Anthropic and Gemini)."""
    if parse_header(line) is None:
        return line
    return line[line.find(";]") + 2 :].lstrip(" ")


def line_matches(line: str, wanted: str, mode: str) -> bool:
    if mode == "substring":
        return wanted in line
    return line == wanted or strip_header(line) == wanted


@lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.MULTILINE)


def member_headers(request: AssembledRequest) -> list[tuple[str, str, dict[str, str]]]:
    """``(user_id, full|short, fields)`` for every member/assistant message header (``id:m<n>``) on the wire."""
    found = []
    for line in text_lines(request, "messages"):
        pairs = parse_header(line)
        if not pairs:
            continue
        fields = dict(pairs)
        if not fields.get("id", "").startswith("m"):
            continue
        kind = "full" if FULL_ONLY_FIELDS & fields.keys() else "short"
        found.append((fields.get("user_id", ""), kind, fields))
    return found


def _each_turn(run: ProviderRun, spec: JSONObject, test: Callable[[AssembledRequest], str | None]) -> Outcome:
    """Apply ``test(request) -> str | None`` (an error text) to every selected turn."""
    for number, request in run.select(spec.get("turn")):
        problem = test(request)
        if problem:
            return Outcome(False, f"turn {number}: {problem}")
    return Outcome(True)


def _listed(values: object) -> str:
    """A list for a person: ``[full, short, short+time]`` (its items as text, no Python quotes)."""
    return "[" + ", ".join(str(v) for v in values) + "]" if isinstance(values, list | tuple) else str(values)


def _short(value: object, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- the validator's verdict ----------------------------------------------------------------------------------


@assertion("verdict", params={
    "accepted": {"type": "boolean", "description": "true: the offline validator accepts the request"},
    "status": {"type": "integer", "description": "the exact HTTP status of the rejection"},
    "message": {"type": "string", "description": "the exact error message the API answers"},
    "contains": {"type": "string", "description": "a part of the error message"},
})
def _verdict(run: ProviderRun, spec: JSONObject) -> Outcome:
    """The provider's offline validator accepts the request, or rejects it with this exact status and text."""

    def test(request: AssembledRequest) -> str | None:
        verdict = request.verdict
        if "accepted" in spec and verdict.ok != spec["accepted"]:
            return ("accepted" if verdict.ok else f"rejected {verdict.status}: {_short(verdict.message, 300)}") + \
                f", expected {'accepted' if spec['accepted'] else 'a rejection'}"
        rejected = any(k in spec for k in ("status", "message", "contains"))
        if rejected and verdict.ok:
            return "accepted, expected a rejection"
        if "status" in spec and verdict.status != spec["status"]:
            return f"status {verdict.status}, expected {spec['status']}"
        if "message" in spec and verdict.message != spec["message"]:
            return f"error text {_short(verdict.message, 300)!r}, expected {_short(spec['message'], 300)!r}"
        if "contains" in spec and spec_text(spec, "contains") not in verdict.message:
            return f"error text {_short(verdict.message, 300)!r} does not contain {spec['contains']!r}"
        return None

    return _each_turn(run, spec, test)


# --- the request body -------------------------------------------------------------------------------------------


@lru_cache(maxsize=256)
def _jsonpath(expression: str) -> JSONPath:
    from jsonpath_ng.ext.parser import parse  # jsonpath_ng.ext re-exports it without saying so (no __all__)

    return parse(expression)


@assertion("request_field", required=("path",), params={
    "path": {"type": "string", "description": "JSONPath into the wire body, e.g. $.messages[?(@.role=='system')].content"},
    "exists": {"type": "boolean"},
    "count": {"type": "integer", "minimum": 0},
    "equals": {"description": "every match equals this (and there is at least one)"},
    "contains": {"type": "string", "description": "some string match contains this"},
    "matches": {"type": "string", "description": "some string match matches this regex"},
})
def _request_field(run: ProviderRun, spec: JSONObject) -> Outcome:
    """JSONPath over the exact wire body: existence, count, equality, substring or regex."""
    expression = _jsonpath(spec_text(spec, "path"))

    def test(request: AssembledRequest) -> str | None:
        values = [m.value for m in expression.find(request.request)]
        if "exists" in spec and bool(values) != spec["exists"]:
            return f"{spec['path']} {'matches nothing' if not values else 'matches ' + _short(values)}"
        if "count" in spec and len(values) != spec["count"]:
            return f"{spec['path']} matches {len(values)} value(s), expected {spec['count']}"
        if "equals" in spec and (not values or any(v != spec["equals"] for v in values)):
            return f"{spec['path']} is {_short(values)}, expected {_short(spec['equals'])}"
        strings = [v for v in values if isinstance(v, str)]
        if "contains" in spec and not any(spec_text(spec, "contains") in v for v in strings):
            return f"no string at {spec['path']} contains {spec['contains']!r} (found {_short(strings)})"
        if "matches" in spec and not any(_regex(spec_text(spec, "matches")).search(v) for v in strings):
            return f"no string at {spec['path']} matches /{spec['matches']}/ (found {_short(strings)})"
        return None

    return _each_turn(run, spec, test)


_LINE_PARAMS: JSONObject = {
    "line": {"type": "string", "description": "the line (a leading [k:v;…;] header on the wire line is ignored)"},
    "match": {"enum": ["line", "substring"], "description": "line (default): the whole line; substring: part of a line"},
    "scope": _SCOPE,
}


@assertion("line_present", required=("line",), params={
    **_LINE_PARAMS, "count": {"type": "integer", "minimum": 1, "description": "exactly this many lines"}})
def _line_present(run: ProviderRun, spec: JSONObject) -> Outcome:
    """A line of the rendered text (system prompt, messages, tail) is exactly this."""
    mode, scope, line = spec_text(spec, "match", "line"), spec_text(spec, "scope", "all"), spec_text(spec, "line")

    def test(request: AssembledRequest) -> str | None:
        hits = [ln for ln in text_lines(request, scope) if line_matches(ln, line, mode)]
        if not hits:
            return f"no line {spec['line']!r}"
        if "count" in spec and len(hits) != spec["count"]:
            return f"{len(hits)} lines {spec['line']!r}, expected {spec['count']}"
        return None

    return _each_turn(run, spec, test)


@assertion("line_absent", required=("line",), params=_LINE_PARAMS)
def _line_absent(run: ProviderRun, spec: JSONObject) -> Outcome:
    """No line of the rendered text is this."""
    mode, scope, line = spec_text(spec, "match", "line"), spec_text(spec, "scope", "all"), spec_text(spec, "line")

    def test(request: AssembledRequest) -> str | None:
        hits = [ln for ln in text_lines(request, scope) if line_matches(ln, line, mode)]
        return f"found {_short(hits[0])!r}" if hits else None

    return _each_turn(run, spec, test)


@assertion("line_order", required=("lines",), params={
    "lines": {"type": "array", "minItems": 2, "items": {"type": "string"}, "description": "lines, in this order"},
    "adjacent": {"type": "boolean", "description": "true: each right after the previous (blank lines ignored)"},
    "match": _LINE_PARAMS["match"], "scope": _SCOPE,
})
def _line_order(run: ProviderRun, spec: JSONObject) -> Outcome:
    """These lines appear in this order (optionally directly one after another)."""
    mode, scope, wanted_lines = spec_text(spec, "match", "line"), spec_text(spec, "scope", "all"), spec_texts(spec, "lines")

    def test(request: AssembledRequest) -> str | None:
        lines = [ln for ln in text_lines(request, scope) if ln.strip()]
        position = -1
        for wanted in wanted_lines:
            following = [i for i, ln in enumerate(lines) if i > position and line_matches(ln, wanted, mode)]
            if not following:
                return f"no line {wanted!r} after line {position + 1}"
            if spec.get("adjacent") and position >= 0 and following[0] != position + 1:
                return f"{wanted!r} is not right after {lines[position]!r} (found {lines[position + 1]!r} between)"
            position = following[0]
        return None

    return _each_turn(run, spec, test)


@assertion("regex", required=("pattern",), params={
    "pattern": {"type": "string", "description": "Python regex, multiline (^/$ match at line ends)"},
    "present": {"type": "boolean", "description": "true (default): must match; false: must not match"},
    "count": {"type": "integer", "minimum": 0, "description": "exactly this many matches"},
    "scope": _SCOPE,
})
def _regex_assertion(run: ProviderRun, spec: JSONObject) -> Outcome:
    """A regular expression over the rendered text."""
    pattern = _regex(spec_text(spec, "pattern"))
    present = spec.get("present", True)
    scope = spec_text(spec, "scope", "all")

    def test(request: AssembledRequest) -> str | None:
        text = "\n".join(text_lines(request, scope))
        matches = list(pattern.finditer(text))
        if "count" in spec and len(matches) != spec["count"]:
            return f"/{spec['pattern']}/ matches {len(matches)} time(s), expected {spec['count']}"
        if present and not matches:
            return f"/{spec['pattern']}/ matches nothing"
        if not present and matches:
            return f"/{spec['pattern']}/ matches {_short(matches[0].group(0))!r}"
        return None

    return _each_turn(run, spec, test)


@assertion("headers", params={
    "user_id": {"type": "string", "description": "only this sender's headers"},
    "expect": {"type": "array", "items": {"enum": ["full", "short", "short+time"]},
               "description": "the header of each message in order: full, short (no time) or short+time"},
    "full": {"type": "integer", "minimum": 0, "description": "number of full headers"},
    "short": {"type": "integer", "minimum": 0, "description": "number of short headers"},
})
def _headers(run: ProviderRun, spec: JSONObject) -> Outcome:
    """Full vs short member headers, per message in order, or counted."""

    def test(request: AssembledRequest) -> str | None:
        found = [(uid, kind, f) for uid, kind, f in member_headers(request) if spec.get("user_id") in (None, uid)]
        kinds = [kind + ("+time" if kind == "short" and "time" in f else "") for _, kind, f in found]
        if "expect" in spec and kinds != spec["expect"]:
            return f"headers {_listed(kinds)}, expected {_listed(spec['expect'])}"
        for key in ("full", "short"):
            if key in spec:
                n = sum(1 for _, kind, _ in found if kind == key)
                if n != spec[key]:
                    return f"{n} {key} header(s), expected {spec[key]}"
        return None

    return _each_turn(run, spec, test)


EXAMPLE_NAMES = ("example_user", "example_assistant")  # SillyTavern's names for example dialogue turns


def is_example_turn(request: AssembledRequest, index: int, message: Mapping[str, object]) -> bool:
    """A preset example turn with ST's name, on a profile whose wire has the field (issue 15 A7): every piece of
    its text comes from a preset entry, and its name is ``example_user`` or ``example_assistant``."""
    if message.get("name") not in EXAMPLE_NAMES or (request.profile is not None and not request.profile.example_names):
        return False
    sources = {p.segment_id for p in request.parts if p.message_index == index}
    return bool(sources) and all(source.startswith("preset:") for source in sources)


@assertion("name_fields", params={"count": {"type": "integer", "minimum": 0, "description": "default 0"}})
def _name_fields(run: ProviderRun, spec: JSONObject) -> Outcome:
    """How many wire messages carry a provider ``name`` field, preset example turns left out: member, bot,
    state-change, tool and summary messages and zhin's system prompt never do (ADR 0041 criterion 5); a preset
    example turn may carry ST's ``example_user``/``example_assistant`` where the wire has the field (OpenAI)."""
    wanted = spec_int(spec, "count")

    def test(request: AssembledRequest) -> str | None:
        with_name = [i for i, m in enumerate(wire_messages(request))
                     if isinstance(m, dict) and "name" in m and not is_example_turn(request, i, m)]
        return f"{len(with_name)} message(s) other than preset example turns carry `name` (indexes {with_name[:10]}), " \
            f"expected {wanted}" if len(with_name) != wanted else None

    return _each_turn(run, spec, test)


def _role(message: object) -> str:
    return str(message.get("role", "?")) if isinstance(message, dict) else "?"


def role_problem(request: AssembledRequest) -> str | None:
    """The role order each wire format requires (independently of the validator, so both can be checked)."""
    return wire_for(request.profile.wire).role_problem(wire_messages(request))


@assertion("role_order", params={
    "legal": {"type": "boolean", "description": "true: the order is legal for the wire format"},
    "equals": {"type": "array", "items": {"type": "string"}, "description": "the exact role sequence"},
    "matches": {"type": "string", "description": "regex over the roles joined by spaces"},
})
def _role_order(run: ProviderRun, spec: JSONObject) -> Outcome:
    """Roles on the wire: legal for the format (alternation, tool pairing), exact, or by regex."""

    def test(request: AssembledRequest) -> str | None:
        roles = [_role(m) for m in wire_messages(request)]
        if spec.get("legal") is not None:
            problem = role_problem(request)
            if spec["legal"] and problem:
                return problem
            if not spec["legal"] and not problem:
                return f"roles are legal ({' '.join(roles)}), expected an illegal order"
        if "equals" in spec and roles != spec["equals"]:
            return f"roles {_listed(roles)}, expected {_listed(spec['equals'])}"
        if "matches" in spec and not _regex(spec_text(spec, "matches")).fullmatch(" ".join(roles)):
            return f"roles {' '.join(roles)!r} do not match /{spec['matches']}/"
        return None

    return _each_turn(run, spec, test)


@assertion("state_rendering", required=("equals",), params={
    "equals": {"enum": ["system", "developer", "user", "none-needed"]}})
def _state_rendering(run: ProviderRun, spec: JSONObject) -> Outcome:
    """How state changes were rendered for this provider (system, developer, user message)."""

    def test(request: AssembledRequest) -> str | None:
        return None if request.state_rendering == spec["equals"] else f"rendered as {request.state_rendering!r}, expected {spec['equals']!r}"

    return _each_turn(run, spec, test)


@assertion("segments", params={
    "includes": {"type": "array", "items": {"type": "string"}, "description": "text segment ids that produced text"},
    "excludes": {"type": "array", "items": {"type": "string"}},
    "order": {"type": "array", "items": {"type": "string"}, "description": "these ids appear in this relative order"},
})
def _segments(run: ProviderRun, spec: JSONObject) -> Outcome:
    """Which text segments are in the request, and in what order."""
    includes, excludes, wanted_order = spec_texts(spec, "includes"), spec_texts(spec, "excludes"), spec_texts(spec, "order")

    def test(request: AssembledRequest) -> str | None:
        ids = [s.id for s in request.segments if s.messages is None and s.chars > 0]
        missing = [s for s in includes if s not in ids]
        if missing:
            return f"segments {missing} missing (present: {ids})"
        extra = [s for s in excludes if s in ids]
        if extra:
            return f"segments {_listed(extra)} present"
        order = [s for s in ids if s in wanted_order]
        if "order" in spec and order != spec["order"]:
            return f"segment order {_listed(order)}, expected {_listed(spec['order'])}"
        return None

    return _each_turn(run, spec, test)


@assertion("tokens", params={
    "header_max": {"type": "integer", "minimum": 0, "description": "budget for the tokens of all header strings"},
    "prompt_max": {"type": "integer", "minimum": 0, "description": "budget for the whole prompt"},
    "fixed_max": {"type": "integer", "minimum": 0,
                  "description": "budget for the fixed prompt cost: system segments (kinds 1-4) + tool schemas (zhin budget)"},
    "fixed_parts": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0},
                    "description": "per-part budgets of the fixed prompt cost: segment id or 'tools' → tokens"},
})
def _tokens(run: ProviderRun, spec: JSONObject) -> Outcome:
    """Token budgets: the header strings ([k:v;…;] at the start of message lines), or the whole prompt."""

    def test(request: AssembledRequest) -> str | None:
        if "header_max" in spec:
            count = counter(request.encoding)
            headers = header_texts(request, members_only=False)
            used = sum(count.count(h) for h in headers)
            if used > spec_int(spec, "header_max"):
                return f"headers take {used} tokens ({len(headers)} headers), budget {spec['header_max']}"
        if "prompt_max" in spec and request.prompt_tokens > spec_int(spec, "prompt_max"):
            return f"prompt is {request.prompt_tokens} tokens, budget {spec['prompt_max']}"
        if "fixed_max" in spec or "fixed_parts" in spec:
            fixed = fixed_parts(request)
            if "fixed_max" in spec and fixed[TOTAL] > spec_int(spec, "fixed_max"):
                return f"the fixed prompt cost is {fixed[TOTAL]} tokens, budget {spec['fixed_max']}"
            given = spec.get("fixed_parts")
            limits = given if isinstance(given, dict) else {}
            for part in limits:
                limit = spec_int(limits, part)
                if fixed.get(part, 0) > limit:
                    return f"fixed part {part} is {fixed[part]} tokens, budget {limit}"
        return None

    return _each_turn(run, spec, test)


@assertion("warnings", params={
    "count": {"type": "integer", "minimum": 0},
    "contains": {"type": "string", "description": "some warning contains this"},
})
def _warnings(run: ProviderRun, spec: JSONObject) -> Outcome:
    """The assembler's warnings (non-conforming stored lines, dropped content …)."""

    def test(request: AssembledRequest) -> str | None:
        if "count" in spec and len(request.warnings) != spec["count"]:
            return f"{len(request.warnings)} warning(s) {_short(request.warnings)}, expected {spec['count']}"
        if "contains" in spec and not any(spec_text(spec, "contains") in w for w in request.warnings):
            return f"no warning contains {spec['contains']!r} (warnings: {_short(request.warnings)})"
        return None

    return _each_turn(run, spec, test)


# --- between turns ------------------------------------------------------------------------------------------------


def _regions(request: AssembledRequest) -> list[str]:
    """The order prefix bytes are laid down in: tools, each system-prompt segment, the history, the runtime tail."""
    return ["tools", *(sid for sid, _ in request.system_texts), "history", "tail"]


def divergence_region(old: AssembledRequest, new: AssembledRequest) -> tuple[str | None, int]:
    """Where ``new`` stops repeating ``old`` byte for byte (``None``: it only appends), and the common bytes."""
    pair = diff_pair(old, new)
    where = {
        "append": None,
        "tail": "tail",
        "window_shift": "history",
        "messages_changed": "history",
        "tools_changed": "tools",
        "model_changed": "tools",
    }.get(pair.cause, "")
    if pair.cause == "system_changed":
        where = pair.segment or (old.system_texts[0][0] if old.system_texts else "tools")
    return where, pair.common_prefix_bytes


def changed_parts(old: AssembledRequest, new: AssembledRequest) -> set[str]:
    """Text segments whose text differs (scene segments for the runtime tail), and ``history`` if rewritten."""
    changed = {sid for sid, text in old.system_texts if dict(new.system_texts).get(sid) != text}
    changed |= {sid for sid, _ in new.system_texts if sid not in dict(old.system_texts)}
    tail_old = [p.text for p in old.parts if p.segment_id == "tail"]
    tail_new = [p.text for p in new.parts if p.segment_id == "tail"]
    if tail_old != tail_new:
        changed |= {s.id for r in (old, new) for s in r.segments if s.kind == "scene" and s.chars > 0}
    if divergence_region(old, new)[0] == "history":
        changed.add("history")
    return changed


@assertion("prefix_stable", params={
    "from": {**_TURN_PAIR, "description": "earlier turn (default: every consecutive pair)"},
    "to": {**_TURN_PAIR, "description": "later turn (default: the one after `from`)"},
    "through": {"type": "string", "description": "bytes unchanged through this: a system segment id, system, history or tail "
                                                  "(default history: the later request only appends or replaces the tail)"},
    "changed": {"type": "array", "items": {"type": "string"},
                "description": "exactly these parts change: system segment ids, scene segment ids (tail), history"},
})
def _prefix_stable(run: ProviderRun, spec: JSONObject) -> Outcome:
    """Between turns, the earlier request's bytes are unchanged up to and including a segment."""
    pairs: list[tuple[tuple[int, AssembledRequest], tuple[int, AssembledRequest]]]
    if "from" in spec:
        first = run.select(spec["from"])[0]
        second = run.select(spec["to"])[0] if "to" in spec else run.select(first[0] + 1)[0]
        pairs = [(first, second)]
    else:
        turns = run.select("all")
        pairs = list(zip(turns, turns[1:], strict=False))
        if not pairs:
            return Outcome(False, "prefix_stable needs at least two turns")
    through = spec_text(spec, "through", "history")
    for (a, old), (b, new) in pairs:
        regions = _regions(old)
        if through == "system":
            limit = regions.index("history") - 1
        elif through in regions:
            limit = regions.index(through)
        else:
            return Outcome(False, f"through: {through!r} is not a region of turn {a} ({', '.join(regions)})")
        where, common = divergence_region(old, new)
        if where is not None and (where not in regions or regions.index(where) <= limit):
            return Outcome(False, f"turn {a} → {b}: prefix breaks in {where!r} after {common} bytes, expected stable through {through!r}")
        if "changed" in spec:
            changed = changed_parts(old, new)
            if changed != set(spec_texts(spec, "changed")):
                return Outcome(False, f"turn {a} → {b}: changed {_listed(sorted(changed))}, expected {_listed(sorted(spec_texts(spec, 'changed')))}")
    return Outcome(True)


@assertion("assembly_error", required=("matches",), params={
    "matches": {"type": "string", "description": "regex over the one-line error the assembler raises"}})
def _assembly_error(run: ProviderRun, spec: JSONObject) -> Outcome:
    """The history cannot be assembled (an orphan tool call …) and the error says so. (Checked by the runner.)"""
    return Outcome(False, "the conversation assembled without error")


# --- live --------------------------------------------------------------------------------------------------------


@assertion("reply_nonempty", live=True)
def _reply_nonempty(run: ProviderRun, spec: JSONObject) -> Outcome:
    """The live model's reply has visible text."""
    reply = run.replies[-1]
    return Outcome(bool(reply.text.strip()), "" if reply.text.strip() else "empty reply")


@assertion("usage_reported", live=True)
def _usage_reported(run: ProviderRun, spec: JSONObject) -> Outcome:
    """The server reported token usage (prompt and completion tokens)."""
    usage = run.replies[-1].usage or {}
    prompt_tokens = usage.get("prompt_tokens")
    ok = isinstance(prompt_tokens, int) and prompt_tokens > 0
    return Outcome(ok, "" if ok else f"no usable usage reported: {_short(usage)}")


@assertion("reply_not_contains", required=("text",), live=True, params={
    "text": {"type": "string", "description": "e.g. the payload of an injected instruction"},
    "ignore_case": {"type": "boolean"}})
def _reply_not_contains(run: ProviderRun, spec: JSONObject) -> Outcome:
    """The live reply does not contain this text (e.g. it did not obey an injected instruction)."""
    reply, text = run.replies[-1].text, spec_text(spec, "text")
    hay, needle = (reply.lower(), text.lower()) if spec.get("ignore_case") else (reply, text)
    return Outcome(needle not in hay, f"reply contains {spec['text']!r}: {_short(reply)!r}" if needle in hay else "")


@assertion("reply_contains", required=("text",), live=True, params={
    "text": {"type": "string"}, "ignore_case": {"type": "boolean"}})
def _reply_contains(run: ProviderRun, spec: JSONObject) -> Outcome:
    """The live reply contains this text."""
    reply, text = run.replies[-1].text, spec_text(spec, "text")
    hay, needle = (reply.lower(), text.lower()) if spec.get("ignore_case") else (reply, text)
    return Outcome(needle in hay, "" if needle in hay else f"reply lacks {spec['text']!r}: {_short(reply)!r}")


@assertion("reply_matches", required=("pattern",), live=True, params={
    "pattern": {"type": "string"}, "present": {"type": "boolean", "description": "false: must not match"}})
def _reply_matches(run: ProviderRun, spec: JSONObject) -> Outcome:
    """A regex over the live reply (present by default, or absent)."""
    reply = run.replies[-1].text
    found = _regex(spec_text(spec, "pattern")).search(reply) is not None
    ok = found == spec.get("present", True)
    return Outcome(ok, "" if ok else f"/{spec['pattern']}/ {'matches' if found else 'does not match'} {_short(reply)!r}")
