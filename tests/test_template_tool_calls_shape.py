"""The chat-template validators read ``tool_calls`` from an untrusted body (issue 32): a value the template cannot
iterate (a number, ``true``) is the template's crash, answered as a 400 like every other crash — never a Python
traceback out of the validator — while a list, a string or an object is iterated as Jinja iterates it."""

from __future__ import annotations

import pytest

from zhin_cli.pipeline.validate import validate
from zhin_cli.pipeline.validate.templates import FAMILIES

USER = {"role": "user", "content": "hi"}


def _with_calls(calls: object) -> dict[str, object]:
    return {"model": "local", "tools": [{"type": "function", "function": {"name": "f"}}],
            "messages": [USER, {"role": "assistant", "content": "x", "tool_calls": calls}]}


@pytest.mark.parametrize("kind", ["template", "served"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("calls", [5, 2.5, True])
def test_uniterable_tool_calls_are_a_template_crash_not_a_traceback(kind: str, family: str, calls: object) -> None:
    verdict = validate(f"{kind}:{family}", _with_calls(calls), "local")
    # Families that never look at tool_calls (qwen3, gemma …) accept; every other answers the template's crash.
    if not verdict.ok:
        assert verdict.status == 400
        assert verdict.message == f"'{type(calls).__name__}' object is not iterable"


@pytest.mark.parametrize("family", ["mistral", "llama3", "deepseek", "mixtral"])
def test_the_families_that_iterate_tool_calls_answer_the_crash(family: str) -> None:
    """Negative control for the test above: these families do read tool_calls, so a number there is rejected
    (before issue 32 the validator raised TypeError for each of them)."""
    verdict = validate(f"template:{family}", _with_calls(5), "local")
    assert not verdict.ok and verdict.message == "'int' object is not iterable"


def test_a_string_or_object_is_iterated_as_jinja_does() -> None:
    """A string is iterated per character, an object per key (Mistral then finds no 9-character id)."""
    for calls in ("ab", {"a": 1}):
        verdict = validate("template:mistral", _with_calls(calls), "local")
        assert verdict.message == "Tool call IDs should be alphanumeric strings with length 9!"
    assert validate("template:mistral", _with_calls([]), "local").ok  # empty: no tool-call turn at all
