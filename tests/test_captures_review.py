"""Captured bodies as sessions, the reviewer's findings (issue 29): a foreign body is one line naming its file (never
a traceback, at any level the shape detection and the diff read); usage without a cached-token count is said so,
its real prompt tokens shown; the capture bill has no ADR side in its totals; the HTML report does not call a
captured request accepted; prefix-diff refuses zhin-assembly options on captures; agreement is hit-or-miss within
one cache block; ``report html --help`` names capture folders."""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_captures import SHARED_CAPTURES, chat, openai_body, write_folder

from zhin_cli.cache.captures import diff_captures
from zhin_cli.cache.diff import RealUsage
from zhin_cli.core.errors import InputError, ZhinError
from zhin_cli.pipeline.prices import builtin_prices
from zhin_cli.store.captures import read_captures, shape_problem
from zhin_cli.tools.report.economy import capture_bill
from zhin_cli.tools.report.html import capture_pages
from zhin_cli.tools.trace.trace import capture_rows, capture_trace_dict

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
WRONG = [5, "x", None, [], ["s"], {"a": 5}]  # a number, a string, null, an empty list, a list and an object of wrong items
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


# --- 2. usage recorded without a cached-token count ------------------------------------------------------------------


def with_exchanges(folder: Path, usages: list[dict[str, Any]]) -> Path:
    for number, usage in enumerate(usages, start=1):
        exchange = {"version": 1, "status": 200, "stream": False, "usage": usage, "response": {}}
        (folder / f"{number:05d}-chat-completions.exchange.json").write_text(json.dumps(exchange), encoding="utf-8")
    return folder


LLAMA_USAGE = {"prompt_tokens": 31, "completion_tokens": 2, "total_tokens": 33}  # llama.cpp: no cached count


def test_usage_without_a_cached_count_is_said_and_its_prompt_shown(zhin: Any, tmp_path: Path) -> None:
    with_exchanges(write_folder(tmp_path / "caps", chat(3)), [LLAMA_USAGE] * 3)
    trace = zhin("trace", "caps", "--all")
    assert trace.returncode == 0, trace.stderr
    assert "its recorded usage does not report cached tokens (3 of 3 requests)" in " ".join(trace.stdout.split())
    assert "all agree" not in trace.stdout
    rows = [line.split() for line in trace.stdout.splitlines() if line.startswith("  1 ")]
    assert rows and rows[0][2] == "31"  # the real prompt beside the simulator's
    diff = " ".join(zhin("prefix-diff", "caps").stdout.split())
    assert "its recorded usage does not report cached tokens (3 of 3 requests, exchange): real prompt tokens 93" in diff
    assert "no usage recorded" not in diff
    capture = json.loads(zhin("prefix-diff", "caps", "--json").stdout)["captures"][0]
    assert capture["without_real_cached"] == [1, 2, 3] and capture["with_real_usage"] == 0
    assert [r["real"]["prompt_tokens"] for r in capture["requests"]] == [31, 31, 31]
    economy = " ".join(zhin("report", "economy", "caps").stdout.split())
    assert "its recorded usage does not report cached tokens" in economy and "93 prompt tokens recorded" in economy
    assert "no usage recorded" not in economy


def test_usage_with_a_cached_count_is_judged_not_said_missing(zhin: Any, tmp_path: Path) -> None:
    """Negative control: the same folder whose usage reports the cache read is judged against the simulator."""
    usage = {**LLAMA_USAGE, "prompt_tokens_details": {"cached_tokens": 0}}
    with_exchanges(write_folder(tmp_path / "caps", chat(3)), [usage] * 3)
    trace = zhin("trace", "caps", "--all")
    assert "does not report cached tokens" not in trace.stdout and "real cached tokens beside the simulator's" in trace.stdout
    assert "does not report cached tokens" not in zhin("prefix-diff", "caps").stdout
    assert "does not report cached tokens" not in zhin("report", "economy", "caps").stdout
    with_exchanges(tmp_path / "caps", [])
    for exchange in (tmp_path / "caps").glob("*.exchange.json"):
        exchange.unlink()
    assert "no usage recorded" in zhin("prefix-diff", "caps").stdout  # and nothing recorded is still said so


# --- 6. agreement: both hit or both miss, within one cache block ----------------------------------------------------


def real(cached: int, block: int = 128) -> RealUsage:
    return RealUsage(3000, cached, 0, "exchange", block)


def test_agreement_is_hit_or_miss_within_one_cache_block() -> None:
    assert real(2176 + 128).agrees(2176) is True and real(2176 + 128).difference(2176) == 128  # one OpenAI block
    assert real(2176 - 128).agrees(2176) is True
    assert real(2176 + 384).agrees(2176) is False  # negative control: three blocks apart (beyond 5 % too)
    assert real(0).agrees(1792) is False and real(1792).agrees(0) is False  # a hit against a miss never agrees
    assert real(0).agrees(0) is True and real(2048).agrees(2048) is True
    assert real(20_000, block=1).agrees(19_400) is True  # token-granular caches: the tokenizers' 5 % slack
    assert real(20_000, block=1).agrees(18_000) is False
    assert RealUsage(31, None, None, "exchange").agrees(0) is None  # no cached count: not judged


@pytest.fixture
def real_captures(tmp_path: Path) -> Path:
    """A copy of the real bot's capture folder (never the shared one)."""
    assert SHARED_CAPTURES.is_dir(), f"the shared reference is missing: {SHARED_CAPTURES}"
    return Path(shutil.copytree(SHARED_CAPTURES, tmp_path / "captures"))


def test_a_one_block_difference_agrees_is_shown_and_keeps_the_exact_numbers(zhin: Any, real_captures: Path) -> None:
    captures = real_captures
    log = captures / "zhin-serve.log"
    log.write_text(log.read_text(encoding="utf-8").replace("prompt=2376 read=2176", "prompt=2376 read=2304"),
                   encoding="utf-8")
    data = json.loads(zhin("prefix-diff", "captures", "--json").stdout)["captures"][0]
    second = next(r for r in data["requests"] if r["capture"] == 2)
    assert (second["cached_tokens"], second["real"]["cached_tokens"]) == (2176, 2304)
    assert second["real"]["difference"] == 128 and second["real"]["agrees"] is True and data["disagreements"] == []
    out = " ".join(zhin("prefix-diff", "captures").stdout.split())
    assert "all agree with the simulator (1 within one cache block or the tokenizers' slack, not equal: the largest " \
           "difference +128 at capture 2)" in out
    assert "≈2,304" in zhin("trace", "captures", "--all").stdout
    log.write_text(log.read_text(encoding="utf-8").replace("prompt=2376 read=2304", "prompt=2376 read=2560"),
                   encoding="utf-8")  # negative control: three blocks apart disagrees
    data = json.loads(zhin("prefix-diff", "captures", "--json").stdout)["captures"][0]
    assert data["disagreements"] == [2]


# --- 3. the capture bill's totals: the bot's side alone -------------------------------------------------------------


def test_capture_bill_totals_have_no_adr_side_and_no_compared_count(zhin: Any, tmp_path: Path) -> None:
    usage = {"prompt_tokens": 2000, "prompt_tokens_details": {"cached_tokens": 1024}}
    with_exchanges(write_folder(tmp_path / "caps", chat(3)), [usage] * 3)
    bill = json.loads(zhin("report", "economy", "caps", "--json").stdout)["captures"][0]["bill"]
    totals = bill["totals"]
    assert totals["adr"] is None and "requests_compared" not in totals
    assert totals["requests_billed"] == 3 and totals["paid"]["prompt"] == 6000 and totals["paid"]["cached"] == 3072
    # negative control: a bill that has an ADR side keeps both (SessionBill with no no_adr)
    from zhin_cli.cache import CacheOutcome
    from zhin_cli.tools.report.economy import BillRow, SessionBill
    side = CacheOutcome(100, 50, 0, {})
    both = SessionBill([BillRow(1, 1, "openai", "gpt-4.1-mini", None, side, None, side, None, "openai")]).as_dict()
    assert both["totals"]["requests_compared"] == 1 and both["totals"]["adr"]["prompt"] == 100


def test_a_bill_mixing_full_and_prompt_only_usage_names_each(zhin: Any, tmp_path: Path) -> None:
    full = {"prompt_tokens": 2000, "prompt_tokens_details": {"cached_tokens": 1024}}
    with_exchanges(write_folder(tmp_path / "caps", chat(3)), [full, LLAMA_USAGE, full])
    out = " ".join(zhin("report", "economy", "caps").stdout.split())
    assert "31 prompt tokens; its recorded usage does not report cached tokens" in out
    assert "1 request(s) without both prompt and cached tokens recorded are left out of the total" in out
    assert "2 req." in out and "4,000 prompt, 2,048 cached" in out  # control: the two full ones are billed
