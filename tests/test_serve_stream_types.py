"""The stream readers of ``zhin serve --upstream`` read untrusted JSON: a wrong-typed member is kept, never a crash."""

from zhin_cli.tools.serve.upstream import GeminiStream, OpenAIChatStream


def _gemini_chunk(*parts: object) -> dict[str, object]:
    return {"candidates": [{"content": {"role": "model", "parts": list(parts)}}]}


def test_gemini_text_parts_join() -> None:
    # negative control for the test below: two text parts do join, so "kept apart" there is a decision, not a no-op
    stream = GeminiStream()
    stream.event(None, _gemini_chunk({"text": "a"}))  # type: ignore[arg-type]
    stream.event(None, _gemini_chunk({"text": "b"}))  # type: ignore[arg-type]
    final = stream.final()
    assert final is not None and final["candidates"] == [{"content": {"role": "model", "parts": [{"text": "ab"}]}}]


def test_gemini_non_text_part_is_not_joined_to() -> None:
    # before: {"text": 5} then {"text": "b"} raised TypeError (5 + "b") inside the relay's recorder
    stream = GeminiStream()
    stream.event(None, _gemini_chunk({"text": 5}))  # type: ignore[arg-type]
    stream.event(None, _gemini_chunk({"text": "b"}))  # type: ignore[arg-type]
    final = stream.final()
    assert final is not None and final["candidates"] == [{"content": {"role": "model", "parts": [{"text": 5}, {"text": "b"}]}}]


def test_openai_tool_call_arguments_add_up() -> None:
    stream = OpenAIChatStream()
    for piece in ('{"a":', ' 1}'):
        stream.event(None, {"id": "x", "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f" if piece.startswith("{") else None,
                                                                           "arguments": piece}}]}}]})
    final = stream.final()
    assert final is not None
    assert final["choices"] == [{"index": 0, "finish_reason": None, "message": {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]}}]
    # negative control: a choices member that is not a list gives no choices (read, not iterated as text)
    other = OpenAIChatStream()
    other.event(None, {"id": "y", "choices": "abc"})
    assert other.final() == {"id": "y", "object": "chat.completion", "choices": [], "usage": None}
