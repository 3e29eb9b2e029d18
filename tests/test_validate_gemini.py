"""The offline Gemini generateContent validator: each rule rejects with the API's exact text and body."""

from __future__ import annotations

from typing import Any

import pytest

from zhin_cli.pipeline.validate import validate

MODEL = "gemini-2.5-flash"


def user(value: str = "hi") -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": value}]}


def model(value: str = "hello") -> dict[str, Any]:
    return {"role": "model", "parts": [{"text": value}]}


def calls(*names: str) -> dict[str, Any]:
    return {"role": "model", "parts": [{"functionCall": {"name": n, "args": {}}} for n in names]}


def responses(*names: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"functionResponse": {"name": n, "response": {"ok": True}}} for n in names]}


def body(*contents: dict[str, Any]) -> dict[str, Any]:
    return {"systemInstruction": {"parts": [{"text": "group chat"}]}, "contents": list(contents)}


def test_valid_conversation_with_parallel_calls_passes() -> None:
    request = body(user(), calls("f", "g"), responses("g", "f"), model("done"), user("[state change] x"), calls("f"),
                   responses("f"), calls("g"), responses("g"), model(), user())
    assert validate("gemini-generate", request, MODEL).ok


def test_consecutive_model_contents_and_missing_role_are_accepted() -> None:
    assert validate("gemini-generate", body(user(), model("a"), model("b"), user()), MODEL).ok
    assert validate("gemini-generate", body({"parts": [{"text": "no role = user"}]}, model()), MODEL).ok
    # snake_case proto field names are accepted by the REST API too
    snake = {"role": "model", "parts": [{"function_call": {"name": "f", "args": {}}}]}
    assert validate("gemini-generate", body(user(), snake, {"role": "user", "parts": [{"function_response": {"name": "f"}}]}), MODEL).ok


@pytest.mark.parametrize(
    ("contents", "message"),
    [
        ((user(), {"role": "assistant", "parts": [{"text": "x"}]}), "Please use a valid role: user, model."),
        ((user(), {"role": "function", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}),
         "Please use a valid role: user, model."),
        ((user(), user("again")), "Please ensure that multiturn requests alternate between user and model."),
        # one functionResponse content per parallel call: the alternation error, not the part count
        ((user(), calls("f", "g"), responses("f"), responses("g")),
         "Please ensure that multiturn requests alternate between user and model."),
        ((user(), model(), responses("f")),
         "Please ensure that function response turn comes immediately after a function call turn."),
        ((responses("f"), model()),
         "Please ensure that function response turn comes immediately after a function call turn."),
        ((user(), calls("f", "g"), responses("f")),
         "Please ensure that the number of function response parts is equal to the number of function call parts of the "
         "function call turn."),
        ((user(), calls("f"), responses("f", "f")),
         "Please ensure that the number of function response parts is equal to the number of function call parts of the "
         "function call turn."),
        ((calls("f"), responses("f")),
         "Please ensure that function call turn comes immediately after a user turn or after a function response turn."),
        ((user(), model("thinking"), calls("f"), responses("f")),
         "Please ensure that function call turn comes immediately after a user turn or after a function response turn."),
    ],
)
def test_each_rule_rejects_with_the_exact_text(contents: tuple[dict[str, Any], ...], message: str) -> None:
    verdict = validate("gemini-generate", body(*contents), MODEL)
    assert verdict.as_dict() == {
        "ok": False,
        "status": 400,
        "body": {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}},
    }
    assert (verdict.message, verdict.type, verdict.code) == (message, "INVALID_ARGUMENT", 400)
