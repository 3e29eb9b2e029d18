"""The wire models read captured or client bodies, which are any JSON (issue 32: narrowed with isinstance): a value
of the wrong type is skipped or named, never a Python traceback. Each test has a well-formed control."""

from __future__ import annotations

from zhin_cli.wire import wire_for

OPENAI = wire_for("openai-chat")
USER = {"role": "user", "content": "x"}


def test_openai_role_problem_names_a_call_without_an_id() -> None:
    """Unanswered ids are listed sorted: an absent id (JSON null) sorts with the strings (it raised TypeError)."""
    calls = [{"id": "b"}, {"function": {}}, {"id": "c"}]
    messages = [USER, {"role": "assistant", "content": None, "tool_calls": calls},
                {"role": "tool", "tool_call_id": "b", "content": "r"}]
    assert OPENAI.role_problem(messages) == "assistant message 1: tool calls ['c', 'null'] not answered right after it"
    # control: every call answered
    answered = [USER, {"role": "assistant", "content": None, "tool_calls": [{"id": "b"}]},
                {"role": "tool", "tool_call_id": "b", "content": "r"}]
    assert OPENAI.role_problem(answered) is None


def test_openai_tool_names_skip_a_function_that_is_not_an_object() -> None:
    tools = [{"type": "function", "function": "f"}, {"type": "function", "function": {"name": "g"}}, {"name": "h"}]
    assert OPENAI.tool_names({"tools": tools}) == ["g", "h"]


def test_take_text_removes_nothing_from_a_message_that_is_not_an_object() -> None:
    for wire in ("openai-chat", "anthropic-messages", "gemini-generate"):
        assert wire_for(wire).take_text("x", "x") is False
    # control: a merged message gives up the block that carries the text, and keeps the rest
    merged = {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "x"}]}
    assert OPENAI.take_text(merged, "x") is False and merged["content"] == [{"type": "text", "text": "a"}]
    assert OPENAI.take_text({"role": "user", "content": [{"type": "text", "text": "x"}]}, "x") is True
