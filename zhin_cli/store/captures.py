"""Captured request bodies: what a bot really sent its model, read back as data (docs/captures.md).

Two sources:

* a **capture folder** (``zhin serve --capture DIR`` or any folder of bodies): every ``NNNNN-<route>.json`` in
  number order (other files are ignored); the usage the bot got comes from the sibling
  ``NNNNN-<route>.exchange.json`` (``{"version": 1, "model", "path", "status", "stream", "usage", "response"}``,
  written by ``zhin serve --capture``/``--upstream``; its ``model`` names a body that names none itself, as
  Gemini's, whose model is in its URL path) or, when there is none, from ``zhin-serve.log``'s ``POST … prompt=P read=R
  written=W`` lines, taken in order as the usage of the numbered bodies;
* a **JSONL of bodies**: one request body per line.

Each body's wire shape is told from its keys (``wire_shape``): Gemini ``contents``, Anthropic (a top-level
``system``, ``input_schema`` tools, or content blocks only Anthropic has), else OpenAI chat. A foreign request has
no segments: it is its body, its number and (where recorded) its usage — nothing zhin assembled.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zhin_cli.core.errors import InputError
from zhin_cli.core.inputfiles import names_a_file, names_a_folder
from zhin_cli.core.jsontext import JSONObject
from zhin_cli.core.readers import read_json_file, read_text_file

_BODY_NAME = re.compile(r"(\d{5,})-(.+)\.json")
_EXCHANGE_SUFFIX = ".exchange.json"
SERVE_LOG = "zhin-serve.log"
_LOG_LINE = re.compile(r"\bPOST (\S+) (\d{3})\b(.*)$")
# ``written=-``: the provider reports no cache writes (OpenAI; ``serve --upstream`` says so rather than 0)
_LOG_USAGE = re.compile(r"\bprompt=(\d+) read=(\d+) written=(\d+|-)(?!\S)")
EXCHANGE_VERSION = 1
WIRES = ("openai-chat", "anthropic-messages", "gemini-generate")
_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking", "document"})


@dataclass(frozen=True)
class LoggedUsage:
    """What ``zhin serve`` answered for one body (its log line): prompt, cache read and cache write tokens."""

    prompt_tokens: int
    read: int
    written: int


@dataclass(frozen=True)
class CapturedBody:
    """One request body as the bot sent it."""

    number: int  # capture number (a folder) or line number (a JSONL)
    where: str  # file name, or ``file:line``, for messages
    wire: str  # one of WIRES
    body: JSONObject
    usage: JSONObject | None = None  # the provider's usage object (an exchange file), as it came
    logged: LoggedUsage | None = None  # zhin serve's log line for it, when no exchange file is there
    exchange_model: str | None = None  # the model its exchange file names (a Gemini body's is in its URL path only)

    @property
    def model(self) -> str:
        model = self.body.get("model")
        return model if isinstance(model, str) and model else self.exchange_model or ""


@dataclass
class CaptureSet:
    """Every body of one capture folder or JSONL, in sending order, and what was noticed while reading."""

    source: str
    bodies: list[CapturedBody]
    notes: list[str]


def wire_shape(body: JSONObject) -> str:
    """The wire format a body is written in: ``gemini-generate``, ``anthropic-messages`` or ``openai-chat``."""
    if "contents" in body and "messages" not in body:
        return "gemini-generate"
    if "system" in body or "anthropic_version" in body or "anthropic_beta" in body:
        return "anthropic-messages"
    tools = body.get("tools")
    if isinstance(tools, list) and any(isinstance(t, dict) and "input_schema" in t for t in tools):
        return "anthropic-messages"
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(_anthropic_block(p) for p in content):
            return "anthropic-messages"
    return "openai-chat"


def _anthropic_block(part: object) -> bool:
    kind = part.get("type") if isinstance(part, dict) else None
    return isinstance(kind, str) and kind in _ANTHROPIC_BLOCKS


def _json_type(value: object) -> str:
    """A value's JSON type with its article, as a message names it: ``a number``, ``an object``."""
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list", dict: "an object"}
    return "null" if value is None else names.get(type(value), f"a {type(value).__name__}")


def _objects_problem(value: object, what: str) -> str | None:
    """Why ``value`` is not a list of JSON objects (``what`` names it), or None."""
    if not isinstance(value, list):
        return f"{what} is {_json_type(value)}, not a list"
    bad = next((i for i, item in enumerate(value) if not isinstance(item, dict)), None)
    return None if bad is None else f"{what}[{bad}] is {_json_type(value[bad])}, not an object"


def shape_problem(body: object) -> str | None:
    """Why a JSON value is not a request body the diff can read, or None: an object whose ``messages`` or
    ``contents`` (whichever are there) is a list of objects, ``tools`` (if there) a list of objects, an OpenAI
    tool's ``function`` an object. Deeper wrong types are read as they come (as text), never trusted."""
    if not isinstance(body, dict):
        return f"a JSON {_json_type(body).split()[-1]}, not an object"
    present = [key for key in ("messages", "contents") if key in body]
    if not present:
        return "no \"messages\" or \"contents\" list"
    for key in (*present, *(("tools",) if "tools" in body else ())):
        if problem := _objects_problem(body[key], f'"{key}"'):
            return problem
    for index, tool in enumerate(body.get("tools") or []):
        if "function" in tool and not isinstance(tool["function"], dict):
            return f'"tools"[{index}].function is {_json_type(tool["function"])}, not an object'
    return None


def _check_body(body: Any, where: str) -> JSONObject:
    if problem := shape_problem(body):
        raise InputError(f"not a request body: {problem}", where=where)
    return dict(body)


def looks_like_body(value: object) -> bool:
    """A JSON value that is a request body (a ``messages`` or ``contents`` list) and not a zhin session line."""
    return (isinstance(value, dict) and "type" not in value
            and (isinstance(value.get("messages"), list) or isinstance(value.get("contents"), list)))


def is_body_jsonl(path: Path) -> bool:
    """A ``.jsonl`` whose first non-blank line is a request body (not a zhin session file)."""
    if path.suffix != ".jsonl" or not names_a_file(path):
        return False
    try:
        with path.open("rb") as handle:
            for raw in handle:
                if raw.strip():
                    return looks_like_body(json.loads(raw))
    except (OSError, ValueError, RecursionError):
        return False
    return False


def body_files(folder: Path) -> list[tuple[int, Path]]:
    """The capture files of a folder, by number (exchange files and anything else left out)."""
    found = []
    for path in folder.iterdir():
        match = _BODY_NAME.fullmatch(path.name)
        if match and not path.name.endswith(_EXCHANGE_SUFFIX) and path.is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


def is_capture_folder(path: Path) -> bool:
    return names_a_folder(path) and bool(body_files(path))


def _exchange_record(path: Path) -> tuple[JSONObject | None, str | None]:
    """The usage object and the model named by a body's exchange file ((None, None) without one)."""
    exchange = path.with_name(path.name[: -len(".json")] + _EXCHANGE_SUFFIX)
    if not exchange.exists():
        return None, None
    data, _ = read_json_file(exchange, InputError, "exchange file")
    if not isinstance(data, dict) or data.get("version") != EXCHANGE_VERSION:
        version = data.get("version") if isinstance(data, dict) else None
        raise InputError(f"exchange file of version {version!r}, this zhin reads version {EXCHANGE_VERSION}",
                         where=str(exchange))
    usage = data.get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise InputError("exchange file: \"usage\" is not an object", where=str(exchange))
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise InputError("exchange file: \"model\" is not a string", where=str(exchange))
    return usage, model


def read_serve_log(path: Path) -> list[LoggedUsage | None]:
    """``zhin serve``'s log: one entry per ``POST`` line, in order (None: no usage on that line, e.g. a refusal)."""
    out: list[LoggedUsage | None] = []
    for line in read_text_file(path, InputError, "zhin serve log").splitlines():
        match = _LOG_LINE.search(line)
        if match is None:
            continue
        usage = _LOG_USAGE.search(match.group(3))
        if usage is None or match.group(2) != "200":
            out.append(None)
            continue
        written = usage.group(3)
        out.append(LoggedUsage(int(usage.group(1)), int(usage.group(2)), 0 if written == "-" else int(written)))
    return out


def read_capture_folder(folder: Path) -> CaptureSet:
    files = body_files(folder)
    if not files:
        raise InputError("no capture files (NNNNN-<route>.json) in this folder", where=str(folder))
    notes: list[str] = []
    logged: list[LoggedUsage | None] = []
    log = folder / SERVE_LOG
    if log.is_file():
        logged = read_serve_log(log)
        if len(logged) != len(files):
            notes.append(f"{log}: {len(logged)} POST line(s) for {len(files)} capture(s): its usage is not used "
                         "(the lines cannot be matched to the bodies)")
            logged = []
    bodies = []
    for index, (number, path) in enumerate(files):
        data, _ = read_json_file(path, InputError, "capture file")
        body = _check_body(data, str(path))
        usage, model = _exchange_record(path)
        bodies.append(CapturedBody(number, str(path), wire_shape(body), body, usage,
                                   logged[index] if logged and usage is None else None, model))
    return CaptureSet(str(folder), bodies, notes)


def _jsonl_bodies(path: Path) -> Iterator[CapturedBody]:
    text = read_text_file(path, InputError, "JSONL of request bodies")
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON: {exc.msg} (column {exc.colno})", where=where) from None
        except (RecursionError, ValueError):
            raise InputError("not valid JSON (nested too deeply or a number too long)", where=where) from None
        body = _check_body(data, where)
        yield CapturedBody(number, where, wire_shape(body), body)


def read_body_jsonl(path: Path) -> CaptureSet:
    bodies = list(_jsonl_bodies(path))
    if not bodies:
        raise InputError("no request bodies in this file", where=str(path))
    return CaptureSet(str(path), bodies, [])


def read_captures(path: Path) -> CaptureSet:
    """A capture folder or a JSONL of bodies; anything else is one ``InputError`` naming the file."""
    if path.is_dir():
        return read_capture_folder(path)
    if not path.exists():
        raise InputError(f"no such file or folder: {path}")
    return read_body_jsonl(path)
