"""The ``zhin eval --json`` document: its shape as TypedDicts, and the check a saved one passes before it is compared.

``runner`` writes the document, ``compare`` reads two of them (``zhin eval compare A.json B.json``). A saved file
may have been edited or cut: ``load_result`` checks every key the comparison reads against ``RESULT_SCHEMA``, so a
bad one is a one-line input error naming the key (never a ``KeyError`` or ``TypeError`` half-way through).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal, NotRequired, TypedDict, cast

from zhin_cli.core.errors import InputError

if TYPE_CHECKING:
    from zhin_cli.core.jsontext import JSONObject

Status = Literal["passed", "failed", "error", "skipped"]


class Break(TypedDict):
    """A turn whose prefix broke where it should not have: the cause, and the system segment that changed."""

    turn: int
    cause: str
    segment: str | None


class Rejection(TypedDict):
    """A turn the provider's offline validator rejects: its HTTP status and message."""

    turn: int
    status: int
    message: str


class RunMetrics(TypedDict):
    """One case's requests under one provider (``metrics``)."""

    provider: str
    turns: int
    prompt_tokens: int
    header_tokens: int
    unexpected_breaks: list[Break]
    rejected: list[Rejection]


class AssertionDocument(TypedDict):
    index: int
    type: str
    provider: str
    status: Status
    message: str
    line: int


class CaseDocument(TypedDict):
    id: str
    file: str
    line: int
    expect: str
    criterion: str | None
    status: Status
    reason: str
    providers: list[str]
    duration_ms: float
    pass_rate: float | None
    assertions: list[AssertionDocument]
    metrics: list[RunMetrics]


class LiveAnswersDocument(TypedDict):
    total: int
    from_cache: int
    cache_dir: str | None


class EvalDocument(TypedDict):
    version: int
    live: bool
    duration_ms: float
    summary: dict[str, int]
    cases: list[CaseDocument]
    live_answers: NotRequired[LiveAnswersDocument]


# What the comparison reads of a saved document, and so what a saved one must have (other keys are not checked).
_INTEGER: JSONObject = {"type": "integer"}
_BREAK: JSONObject = {"type": "object", "required": ["turn", "cause"],
                      "properties": {"turn": _INTEGER, "cause": {"type": "string"}, "segment": {"type": ["string", "null"]}}}
_REJECTION: JSONObject = {"type": "object", "required": ["turn", "status", "message"],
                          "properties": {"turn": _INTEGER, "status": _INTEGER, "message": {"type": "string"}}}
_METRICS: JSONObject = {
    "type": "object", "required": ["provider", "prompt_tokens", "header_tokens", "unexpected_breaks", "rejected"],
    "properties": {"provider": {"type": "string"}, "prompt_tokens": _INTEGER, "header_tokens": _INTEGER,
                   "unexpected_breaks": {"type": "array", "items": _BREAK}, "rejected": {"type": "array", "items": _REJECTION}},
}
RESULT_SCHEMA: JSONObject = {
    "type": "object", "required": ["version", "cases"],
    "properties": {
        "version": {"const": 1},
        "cases": {"type": "array", "items": {
            "type": "object",
            "properties": {"status": {"type": "string"}, "reason": {"type": ["string", "null"]}, "expect": {"type": "string"},
                           "metrics": {"type": ["array", "null"], "items": _METRICS}},
        }},
    },
}


def check_result(data: object, path: Path) -> EvalDocument:
    """``data`` (a saved file's JSON) as an ``EvalDocument``, or an ``InputError`` naming the first key that is not
    what ``zhin eval --json`` writes."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    if not isinstance(data, dict) or not isinstance(data.get("cases"), list) or data.get("version") != 1:
        raise InputError("not a zhin eval --json result (version 1 with cases)", where=str(path))
    error = best_match(Draft202012Validator(RESULT_SCHEMA).iter_errors(data))
    if error is not None:
        key = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path).lstrip(".")
        message = error.message if len(error.message) <= 200 else error.message[:199] + "…"
        raise InputError(f"not a zhin eval --json result: {key}: {message}", where=str(path))
    return cast("EvalDocument", data)  # checked above for every key the comparison reads
