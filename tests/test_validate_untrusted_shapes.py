"""The wire validators read untrusted bodies (issue 32: JSON narrowed with isinstance, never assumed): a value of
the wrong JSON type is the API's 400, never a Python traceback out of the validator. Each case has a well-formed
neighbour that the same validator accepts (the negative control: the check discriminates)."""

from __future__ import annotations

import pytest

from zhin_cli.pipeline.validate import validate

USER = {"role": "user", "content": "hi"}


def _assistant(calls: object) -> dict[str, object]:
    return {"role": "assistant", "content": None, "tool_calls": calls}


def _tool(call_id: str) -> dict[str, object]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


@pytest.mark.parametrize(("messages", "param", "message"), [
    (["x"], "messages[0]", "Invalid type for 'messages[0]': expected an object, but got a string instead."),
    ([USER, 5], "messages[1]", "Invalid type for 'messages[1]': expected an object, but got an integer instead."),
    ([USER, _assistant(5)], "messages[1].tool_calls",
     "Invalid type for 'messages[1].tool_calls': expected an array, but got an integer instead."),
    ([USER, _assistant("ab")], "messages[1].tool_calls",
     "Invalid type for 'messages[1].tool_calls': expected an array, but got a string instead."),
    ([USER, _assistant(["a"])], "messages[1].tool_calls[0]",
     "Invalid type for 'messages[1].tool_calls[0]': expected an object, but got a string instead."),
    ([USER, _assistant([{"type": "function"}])], "messages[1].tool_calls[0].id",
     "Missing required parameter: 'messages[1].tool_calls[0].id'."),
    ([USER, _assistant([{"id": None}])], "messages[1].tool_calls[0].id",
     "Invalid type for 'messages[1].tool_calls[0].id': expected a string, but got null instead."),
])
def test_openai_answers_a_wrong_json_type_with_a_400(messages: list[object], param: str, message: str) -> None:
    verdict = validate("openai-chat", {"model": "gpt-4o", "messages": messages}, "gpt-4o")
    assert (verdict.ok, verdict.status, verdict.param, verdict.message) == (False, 400, param, message)


def test_openai_accepts_the_well_formed_neighbour() -> None:
    """Negative control: the same shapes, well typed, pass (ids are read, answered, and nothing is left pending)."""
    body = {"model": "gpt-4o", "messages": [USER, _assistant([{"id": "call_1", "type": "function"}]), _tool("call_1")]}
    assert validate("openai-chat", body, "gpt-4o").ok
    unanswered = {"model": "gpt-4o", "messages": [USER, _assistant([{"id": "call_1", "type": "function"}]), USER]}
    assert "call_1" in validate("openai-chat", unanswered, "gpt-4o").message


@pytest.mark.parametrize("contents", [5, "ab", {"role": "user"}, None])
def test_gemini_reads_no_turns_from_contents_that_are_not_a_list(contents: object) -> None:
    assert validate("gemini-generate", {"contents": contents}, "gemini-2.5-flash").ok
    # negative control: a list with the same problem the validator looks for is judged
    bad = {"contents": [{"role": "user", "parts": []}, {"role": "user", "parts": []}]}
    assert not validate("gemini-generate", bad, "gemini-2.5-flash").ok
