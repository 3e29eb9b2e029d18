"""Captured bodies as sessions, the reviewer's findings (issue 29): a foreign body is one line naming its file (never
a traceback, at any level the shape detection and the diff read); usage without a cached-token count is said so,
its real prompt tokens shown; the capture bill has no ADR side in its totals; the HTML report does not call a
captured request accepted; prefix-diff refuses zhin-assembly options on captures; agreement is hit-or-miss within
one cache block; ``report html --help`` names capture folders."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_captures import chat, openai_body, write_folder

from zhin_cli.cache.prices import builtin_prices
from zhin_cli.core.errors import InputError, ZhinError
from zhin_cli.store.captures import read_captures, shape_problem
from zhin_cli.tools.capturediff import diff_captures
from zhin_cli.tools.economy import capture_bill
from zhin_cli.tools.htmlreport import capture_pages
from zhin_cli.tools.trace import capture_rows, capture_trace_dict

FOREIGN = '{"messages":5,"contents":[{"parts":[{"text":"x"}]}]}'

# --- 1. a foreign body: one line naming the file ------------------------------------------------------------------


@pytest.mark.parametrize(("command", "status"), [
    (("prefix-diff", "caps"), 2), (("trace", "caps", "--all"), 3), (("report", "economy", "caps"), 3),
    (("report", "html", "caps", "-o", "page.html"), 3),
])
def test_the_reviewers_foreign_body_is_one_line_on_every_command(zhin: Any, tmp_path: Path, command: tuple[str, ...],
                                                                 status: int) -> None:
    folder = write_folder(tmp_path / "caps", chat(2))
    (folder / "00003-chat-completions.json").write_text(FOREIGN, encoding="utf-8")
    result = zhin(*command)
    assert "Traceback" not in result.stderr and result.returncode == status, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zhin: error: ")
    assert lines[0].endswith('caps/00003-chat-completions.json: not a request body: "messages" is a number, not a list')
    assert not (tmp_path / "page.html").exists()  # nothing half-written
    (folder / "00003-chat-completions.json").unlink()  # negative control: the same folder without it is read
    assert zhin(*command).returncode in (0, 1)


SYSTEM = "You are a bot. " * 100
BASES: dict[str, dict[str, Any]] = {
    "openai": {"model": "gpt-4.1-mini", "prompt_cache_key": "k", "user": "u", "metadata": {"user_id": "x"},
               "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                            {"role": "assistant", "content": "yo", "tool_calls": [
                                {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{}"}}]},
                            {"role": "tool", "tool_call_id": "a", "content": "r"}],
               "tools": [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}]},
    "anthropic": {"model": "claude-sonnet-4-5", "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
                  "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                               {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "t", "input": {}}]},
                               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "r"}]}],
                  "tools": [{"name": "t", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}]},
    "gemini": {"model": "gemini-2.5-flash", "systemInstruction": {"parts": [{"text": SYSTEM}]},
               "contents": [{"role": "user", "parts": [{"text": "hi"}]},
                            {"role": "model", "parts": [{"functionCall": {"name": "t", "args": {}}}]}],
               "tools": [{"functionDeclarations": [{"name": "t"}]}]},
}
WRONG = [5, "x", None, [], {}, [5], True, ["s"], {"a": 5}]
TOP = ("messages", "contents", "system", "tools", "systemInstruction", "model", "metadata", "prompt_cache_key", "user")


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield from _paths(item, (*path, key))


def _replaced(body: dict[str, Any], path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    out = copy.deepcopy(body)
    here = out
    for key in path[:-1]:
        here = here[key]
    here[path[-1]] = new
    return out


def _everything_on(folder: Path) -> None:
    """What prefix-diff, trace, report economy and report html do with a capture folder, in this process."""
    captures = read_captures(folder)
    diff = diff_captures(captures)
    capture_rows(diff)
    json.dumps(capture_trace_dict(diff))
    json.dumps(diff.as_dict())
    capture_bill(captures, builtin_prices())
    capture_pages(folder)


def test_no_body_of_wrong_types_at_any_level_gives_a_traceback(tmp_path: Path) -> None:
    """Every value of three well-formed bodies (and every top-level key) replaced by each wrong JSON type, the body
    first, second or alone: read and diffed, or one ``InputError`` — nothing else."""
    refused = read = 0
    for name, base in BASES.items():
        for path in [*_paths(base), *((key,) for key in TOP)]:
            for wrong in WRONG:
                body = _replaced(base, path, wrong)
                for number, bodies in enumerate(((base, body), (body, base), (body,))):
                    folder = write_folder(tmp_path / f"{name}-{len(path)}-{number}", list(bodies))
                    try:
                        _everything_on(folder)
                        read += 1
                    except InputError as exc:
                        assert "not a request body" in str(exc), (path, wrong, exc)
                        refused += 1
                    except ZhinError:
                        refused += 1
                    for file in folder.iterdir():
                        file.unlink()
                    folder.rmdir()
    assert refused > 100 and read > 1000  # negative control: the checks refuse some bodies and read most


def test_shape_problem_names_the_level() -> None:
    assert shape_problem(json.loads(FOREIGN)) == '"messages" is a number, not a list'
    assert shape_problem({"messages": [{"role": "user"}, 5]}) == '"messages"[1] is a number, not an object'
    assert shape_problem({"messages": [], "tools": {"a": 1}}) == '"tools" is an object, not a list'
    assert shape_problem([1, 2]) == "a JSON list, not an object"
    assert shape_problem({"messages": [], "tools": [{"function": "f"}]}) == '"tools"[0].function is a string, not an object'
    assert shape_problem(openai_body(chat(1)[0]["messages"][1:])) is None  # negative control: a real body passes


# --- 5. prefix-diff refuses zhin-assembly options on captures, as trace does ---------------------------------------


@pytest.mark.parametrize("option", [("--model", "gpt-4o"), ("--preset", "default")])
def test_prefix_diff_refuses_model_and_preset_on_captures_like_trace(zhin: Any, tmp_path: Path,
                                                                    option: tuple[str, str]) -> None:
    write_folder(tmp_path / "caps", chat(2))
    for command in (("prefix-diff", "caps"), ("trace", "caps", "--all")):
        result = zhin(*command, *option)
        assert result.returncode == 2 and result.stdout == "", result.stderr
        assert result.stderr.startswith(f"zhin: error: {option[0]}: not for captured bodies")
        assert result.stderr.count("\n") == 1
    assert zhin("prefix-diff", "caps").returncode == 0  # negative control: without the option the folder is diffed


# --- 7. report html --help names capture folders -------------------------------------------------------------------


def test_report_html_help_names_capture_folders(zhin: Any) -> None:
    help_text = " ".join(zhin("report", "html", "--help", env={"COLUMNS": "200"}).stdout.split())
    assert "capture folder" in help_text and "docs/captures.md" in help_text
    economy = " ".join(zhin("report", "economy", "--help", env={"COLUMNS": "200"}).stdout.split())
    assert "capture folder" in economy  # control: the wording the economy help already had, so the check can match
