"""Issue 28, findings 8 and 9: every figure says what it is, and the bytes zhin renders are bytes a client sends.

* Tool-call ``arguments`` stored as an object are rendered as the OpenAI-compatible clients write them (the AI
  SDK's ``JSON.stringify(part.input)``: no spaces, non-ASCII kept); stored as a string, they are sent as stored.
  The ground truth is what upstream zhin really sent: ``tests/data/upstream-db/captured-tool-calls.json``, the
  tool calls of the captured request bodies of ``shared/reference/upstream-db`` (whose database
  ``tests/data/upstream-db/data.sqlite`` is a byte-identical copy).
* ``trace`` names the layout that produced a request and shows the usage the bot stored for that request beside
  zhin's own figures — the same numbers ``stats cache`` reads, never mixed into ``prompt_tokens``.
* ``prompt_cache_key``: rendered when configured, and the cache simulator keeps requests of different keys apart.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from builders import SEC, T0, History, request_for_next

Run = Callable[..., subprocess.CompletedProcess[str]]
DATA = Path(__file__).parent / "data" / "upstream-db"
GROUP_A = "onebot11:tokyo-ob11:group:856301447"


@pytest.fixture
def upstream_copy(tmp_path: Path) -> Path:
    """A private copy of the real upstream database (commands never touch the checked-in file)."""
    copy = tmp_path / ".zhin" / "data.sqlite"
    copy.parent.mkdir()
    shutil.copyfile(DATA / "data.sqlite", copy)
    return copy


def captured_calls() -> dict[str, str]:
    """call id → the arguments string upstream sent for it."""
    document = json.loads((DATA / "captured-tool-calls.json").read_text(encoding="utf-8"))
    return {call["id"]: call["arguments"] for call in document["calls"]}


def rendered_calls(requests: list[dict[str, Any]]) -> dict[str, str]:
    """call id → the arguments string of zhin's requests (``trace --json``'s ``requests``)."""
    return {call["id"]: call["function"]["arguments"]
            for request in requests for message in request["request"]["messages"]
            for call in message.get("tool_calls") or []}


def trace_json(zhin: Run, cwd: Path, *args: object) -> dict[str, Any]:
    result = zhin("trace", *args, cwd=cwd)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


# --- finding 9: tool-call arguments ------------------------------------------------------------------------


def test_tool_call_arguments_are_the_bytes_upstream_sent(zhin: Run, upstream_copy: Path) -> None:
    document = trace_json(zhin, upstream_copy.parent.parent, GROUP_A, "--all", "--json", "--db", upstream_copy,
                          "--provider", "openai")
    captured, rendered = captured_calls(), rendered_calls(document["requests"])
    assert sorted(captured) == sorted(rendered)  # the six calls of the run, no more
    for call_id, sent in captured.items():
        assert rendered[call_id].encode() == sent.encode(), call_id
        # negative control: the old rendering (json.dumps's ", " and ": ") is caught by the same comparison
        spaced = json.dumps(json.loads(sent), ensure_ascii=False)
        assert spaced.encode() != sent.encode(), call_id


def tool_request(arguments: Any) -> dict[str, Any]:
    """The OpenAI body of a tool loop whose one call stored ``arguments``."""
    history = History()
    history.user(T0, "10007", "@bot weather?")
    call = history.assistant(T0 + 2 * SEC, "", calls=[("call_1", "weather")])
    call.content[0]["arguments"] = arguments
    history.result(T0 + 3 * SEC, "call_1", "rain")
    request = request_for_next(history, T0 + 4 * SEC, provider="openai", model="gpt-4o")
    body: dict[str, Any] = request.request
    return body


def the_arguments(body: dict[str, Any]) -> str:
    calls = [call for message in body["messages"] for call in message.get("tool_calls") or []]
    assert len(calls) == 1
    arguments: str = calls[0]["function"]["arguments"]
    return arguments


def test_arguments_stored_as_a_string_are_sent_byte_for_byte() -> None:
    stored = '{ "city" : "上海",\n  "days": 2 }'
    assert the_arguments(tool_request(stored)) == stored
    # negative control: the same value stored as an object is written compactly, so the two are told apart
    assert the_arguments(tool_request(json.loads(stored))) == '{"city":"上海","days":2}'


def test_compact_arguments_follow_json_stringify() -> None:
    from zhin_cli.pipeline.providers.openai import client_arguments

    assert client_arguments({"a": [1, {"b": None}], "é": "东京 🌧"}) == '{"a":[1,{"b":null}],"é":"东京 🌧"}'
    # a lone surrogate (valid in a JSON string, not in UTF-8) is escaped as JSON.stringify escapes it, so the
    # body can be written; a paired one (an emoji) stays as it is (negative control above: 🌧 is not escaped)
    assert client_arguments({"q": "x\ud800y"}) == '{"q":"x\\ud800y"}'
    assert client_arguments({"q": "x\ud800y"}).encode("utf-8")
    assert client_arguments("kept \ud800 as stored") == "kept \ud800 as stored"


# --- finding 8: say what each figure is ----------------------------------------------------------------------


def served_usage(session_key: str) -> list[dict[str, int]]:
    """What the model server reported for each request of ``session_key``, in sending order (ground truth)."""
    document = json.loads((DATA / "served-usage.json").read_text(encoding="utf-8"))
    by_number = {row["request"]: row for row in document["requests"]}
    return [by_number[number] for number in document["sessions"][session_key]]


@pytest.mark.parametrize("session_key", ["onebot11:tokyo-ob11:group:856301447", "onebot11:tokyo-ob11:group:613770258",
                                         "onebot11:tokyo-ob11:private:284100105"])
def test_trace_json_shows_what_the_bot_sent_beside_zhins_own_figures(zhin: Run, upstream_copy: Path,
                                                                      session_key: str) -> None:
    document = trace_json(zhin, upstream_copy.parent.parent, session_key, "--all", "--json", "--db", upstream_copy)
    served = served_usage(session_key)
    assert document["layout"] == "adr-0041"
    requests = document["requests"]
    assert len(requests) == len(served)
    for request, truth in zip(requests, served, strict=True):
        assert request["layout"] == "adr-0041"
        stored = request["stored_usage"]
        assert (stored["total_prompt"], stored["cache_read"], stored["cache_write"]) == (
            truth["prompt_tokens"], truth["cache_read"], truth["cache_write"]), request["turn"]
        # zhin's own figure stays its own: the assembly lacks the bot's system prompt and tool schemas
        assert request["prompt_tokens"] < stored["total_prompt"]
    # negative control: paired one request off, the stored figures no longer match what was served
    shifted = [(r["stored_usage"]["total_prompt"], t["prompt_tokens"]) for r, t in zip(requests[1:], served, strict=False)]
    assert any(stored != truth for stored, truth in shifted)


def test_stored_usage_is_the_number_stats_cache_reports_for_that_request(upstream_copy: Path) -> None:
    from zhin_cli.store import load_session
    from zhin_cli.tools.stats.cache import session_cache_stats
    from zhin_cli.tools.trace.trace import trace

    result = trace(GROUP_A, db=str(upstream_copy), all_turns=True, cwd=upstream_copy.parent.parent)
    session = load_session(GROUP_A, db=str(upstream_copy), cwd=upstream_copy.parent.parent)
    times = {message.row_id: message.timestamp for message in session.messages}
    pairs = []
    for stored in result.stored:
        assert stored is not None
        at = times[stored.row_id]
        stats = session_cache_stats(session, since=at, until=at)  # exactly this request
        (row,) = stats.models.values()
        counted = row.first if row.first.requests else row.later
        assert counted.requests == 1
        pairs.append(((stored.prompt_tokens, stored.cached_tokens), (counted.prompt_tokens, counted.cache_read_tokens)))
    assert all(mine == theirs for mine, theirs in pairs)
    # negative control: the comparison tells requests apart (neighbours never all agree)
    assert any(mine != theirs for (mine, _), (_, theirs) in zip(pairs, pairs[1:], strict=False))


def test_trace_text_names_the_layout_and_the_bots_figures(zhin: Run, upstream_copy: Path) -> None:
    cwd = upstream_copy.parent.parent
    document = trace_json(zhin, cwd, GROUP_A, "--turn", "4", "--json", "--db", upstream_copy)
    zhin_tokens = document["requests"][0]["prompt_tokens"]
    truth = served_usage(GROUP_A)[3]
    result = zhin("trace", GROUP_A, "--turn", "4", "--show-request", "--db", upstream_copy, cwd=cwd)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "layout adr-0041: zhin's ADR 0041 assembly of the stored rows, not the body the bot sent" in text
    assert (f"the bot sent {truth['prompt_tokens']:,} prompt tokens, {truth['cache_read']:,} cached (its stored usage, "
            f"row ") in text
    assert f"; ADR 0041 would send {zhin_tokens:,} of this history" in text
    assert "request body (layout adr-0041: zhin's ADR 0041 assembly of the stored rows" in text
    compact = " ".join(zhin("trace", GROUP_A, "--all", "--db", upstream_copy, cwd=cwd).stdout.split())
    assert "bot sent bot cached" in compact
    assert f"the bot's stored usage: {sum(r['cache_read'] for r in served_usage(GROUP_A)):,} of " \
           f"{sum(r['prompt_tokens'] for r in served_usage(GROUP_A)):,} prompt tokens cached (17 requests)" in compact
    help_text = zhin("trace", "--help").stdout
    assert "exact wire body" not in help_text and "not the body the bot sent" in " ".join(help_text.split())


def usage_free_db(tmp_path: Path, upstream_db: Callable[..., Path], *, usage: dict[str, Any] | None) -> Path:
    """A two-turn upstream-shaped session whose replies store ``usage`` (None: no usage at all)."""
    extra = {"usage": usage} if usage is not None else {}
    rows = [{"payload": {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": T0}},
            {"payload": {"role": "assistant", "content": [{"type": "text", "text": "hello"}], "provider": "openai",
                         "model": "gpt-4o", "timestamp": T0 + SEC, **extra}},
            {"payload": {"role": "user", "content": [{"type": "text", "text": "again"}], "timestamp": T0 + 9 * SEC}},
            {"payload": {"role": "assistant", "content": [{"type": "text", "text": "ok"}], "provider": "openai",
                         "model": "gpt-4o", "timestamp": T0 + 10 * SEC, **extra}}]
    return upstream_db(tmp_path / "u.sqlite", "s1", rows)


def test_a_session_without_stored_usage_shows_no_bot_figure_not_a_zero(zhin: Run, tmp_path: Path,
                                                                     upstream_db: Callable[..., Path]) -> None:
    bare = usage_free_db(tmp_path / "bare", upstream_db, usage=None)
    document = trace_json(zhin, tmp_path, "s1", "--all", "--json", "--db", bare)
    assert [request["stored_usage"] for request in document["requests"]] == [None, None]
    for args in (("--turn", "2"), ("--all",)):
        text = zhin("trace", "s1", *args, "--db", bare).stdout
        assert not re.search(r"the bot sent [\d,]+ prompt", text)
        assert "bot sent bot cached" not in text and "stored usage" not in text
        assert "layout adr-0041" in text
    # negative control: the same session with usage stored shows it, zeros included (a reported 0 is a figure)
    logged = usage_free_db(tmp_path / "logged", upstream_db,
                           usage={"input": 900, "output": 3, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 903})
    document = trace_json(zhin, tmp_path, "s1", "--all", "--json", "--db", logged)
    assert [(r["stored_usage"]["total_prompt"], r["stored_usage"]["cache_read"]) for r in document["requests"]] == \
           [(900, 0), (900, 0)]
    assert "the bot sent 900 prompt tokens, 0 cached" in zhin("trace", "s1", "--turn", "2", "--db", logged).stdout


def test_jsonl_lines_carry_the_layout_and_stored_usage_as_json_does(zhin: Run, upstream_copy: Path) -> None:
    cwd = upstream_copy.parent.parent
    document = trace_json(zhin, cwd, GROUP_A, "--all", "--json", "--db", upstream_copy)
    lines = [json.loads(line) for line in
             zhin("trace", GROUP_A, "--all", "--jsonl", "--db", upstream_copy, cwd=cwd).stdout.splitlines()]
    assert lines == document["requests"]
    assert [(line["layout"], line["stored_usage"]["total_prompt"]) for line in lines] == \
           [("adr-0041", truth["prompt_tokens"]) for truth in served_usage(GROUP_A)]


def test_a_preset_skeleton_is_named_as_the_layout(zhin: Run, tmp_path: Path) -> None:
    from zhin_cli.pipeline.preset.importer import load_preset
    from zhin_cli.pipeline.provenance import layout_name

    preset_file = next((Path(__file__).parent.parent / "fixtures" / "presets").glob("*.json"))
    preset = load_preset(preset_file, {})
    session = Path(__file__).parent.parent / "fixtures" / "group-busy.jsonl"
    document = trace_json(zhin, tmp_path, session, "--json", "--preset", preset_file)
    assert document["layout"] == layout_name(preset) == preset.name != "adr-0041"
    assert document["requests"][0]["layout"] == preset.name
    # negative control: without the preset, the same session is the ADR layout
    assert trace_json(zhin, tmp_path, session, "--json")["layout"] == "adr-0041"


BOT_ROW = re.compile(r"^\s*(\d+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+|-)\s+([\d,]+|-)\s+\$\S+\s+[█░]+\s")


def test_compact_rows_put_the_bots_figures_beside_zhins_where_they_fit(zhin: Run, upstream_copy: Path) -> None:
    cwd = upstream_copy.parent.parent
    served = served_usage(GROUP_A)
    wide = zhin("trace", GROUP_A, "--all", "--db", upstream_copy, cwd=cwd, env={"COLUMNS": "200"}).stdout
    rows = [match.groups() for match in map(BOT_ROW.match, wide.splitlines()) if match]
    assert [(int(sent.replace(",", "")), int(cached.replace(",", ""))) for *_, sent, cached in rows] == \
           [(truth["prompt_tokens"], truth["cache_read"]) for truth in served]
    # a narrow terminal: the columns would push the row past the width, so they are left out and the legend says
    # where they are; every line still fits (negative control of the wide case: no row carries the bot's figures)
    narrow = zhin("trace", GROUP_A, "--all", "--db", upstream_copy, cwd=cwd, env={"COLUMNS": "60"}).stdout
    assert not any(map(BOT_ROW.match, narrow.splitlines()))
    assert "bot sent bot cached" not in narrow and "bot sent, bot cached: --detail, or at least" in narrow
    session_line = narrow.splitlines()[0]
    assert all(len(line) <= 60 for line in narrow.splitlines() if line != session_line)


# --- prompt_cache_key: rendered per session when configured; the simulator keeps keys apart -----------------

UPSTREAM_KEY = "zhin:orchestrator:{provider}:{model}"  # what upstream zhin sends (its captures)


def key_config(tmp_path: Path, provider: str, template: str) -> Path:
    path = tmp_path / "zhin.yaml"
    path.write_text(f"providers:\n  {provider}:\n    prompt_cache_key: {json.dumps(template)}\n", encoding="utf-8")
    return path


def test_prompt_cache_key_is_rendered_from_its_template_per_session(zhin: Run, upstream_copy: Path) -> None:
    cwd = upstream_copy.parent.parent
    key_config(cwd, "openai", "zhin:{session_key}:{provider}:{model}")
    keys = {}
    for session_key in ("onebot11:tokyo-ob11:group:856301447", "onebot11:tokyo-ob11:private:284100105"):
        document = trace_json(zhin, cwd, session_key, "--all", "--json", "--db", upstream_copy)
        sent = {request["request"]["prompt_cache_key"] for request in document["requests"]}
        assert sent == {f"zhin:{session_key}:openai:gpt-4.1-mini"}  # one key for every request of the session
        keys[session_key] = sent
        assert all(request["validation"]["ok"] for request in document["requests"])
    assert len({key for sent in keys.values() for key in sent}) == 2  # a key per session
    # upstream's own template gives upstream's own key, as its captures carry it
    key_config(cwd, "openai", UPSTREAM_KEY)
    document = trace_json(zhin, cwd, GROUP_A, "--json", "--db", upstream_copy)
    assert document["requests"][0]["request"]["prompt_cache_key"] == "zhin:orchestrator:openai:gpt-4.1-mini"
    # negative control: without the option no key is sent
    (cwd / "zhin.yaml").unlink()
    document = trace_json(zhin, cwd, GROUP_A, "--json", "--db", upstream_copy)
    assert "prompt_cache_key" not in document["requests"][0]["request"]


@pytest.mark.parametrize(("provider", "template", "message"), [
    ("openai", "zhin:{label}:{model}", "unknown field {label}"),
    ("openai", "zhin:{model!r}", "unknown field {model}"),
    ("openai", "zhin:{model", "write {{ and }} for braces"),
    ("openai", "", "must be a non-empty text"),
    ("anthropic", "zhin:{model}", "prompt_cache_key is an OpenAI Chat Completions field; provider 'anthropic' sends "
                                  "anthropic-messages"),
])
def test_a_bad_prompt_cache_key_is_a_config_error_naming_the_line(zhin: Run, tmp_path: Path, provider: str,
                                                                  template: str, message: str) -> None:
    key_config(tmp_path, provider, template)
    session = Path(__file__).parent.parent / "fixtures" / "private-chat.jsonl"
    result = zhin("trace", session, "--provider", provider, "--json")
    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zhin: error: ") and "zhin.yaml:2" in lines[0], lines
    assert message in lines[0] and result.stdout == ""
    # negative control: a template of known fields is accepted
    key_config(tmp_path, "openai", "zhin:{session_id}:{provider}:{model}")
    assert zhin("trace", session, "--provider", "openai", "--json").returncode == 0


def openai_body(key: str | None, text: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "gpt-4o", "messages": [
        {"role": "system", "content": " ".join(f"rule{i}" for i in range(1500))}, {"role": "user", "content": text}]}
    if key is not None:
        body["prompt_cache_key"] = key
    return body


def reads(provider: str, first: dict[str, Any], second: dict[str, Any]) -> int:
    from zhin_cli.cache import PrefixCache, plan
    from zhin_cli.pipeline.providers import resolve_profile

    profile = resolve_profile(provider, "gpt-4o")
    cache = PrefixCache()
    cache.account((provider, "gpt-4o"), plan(first, "openai-chat", "o200k_base"), None, profile.cache)
    return cache.account((provider, "gpt-4o"), plan(second, "openai-chat", "o200k_base"), None, profile.cache).read


def test_the_cache_simulator_shares_a_prefix_only_under_one_prompt_cache_key() -> None:
    assert reads("openai", openai_body("a", "one"), openai_body("a", "two")) >= 1024  # same key: the prefix is read
    assert reads("openai", openai_body(None, "one"), openai_body(None, "two")) >= 1024  # no key on either: as before
    assert reads("openai", openai_body("a", "one"), openai_body("b", "two")) == 0  # another key: another machine
    assert reads("openai", openai_body(None, "one"), openai_body("a", "two")) == 0  # a key where there was none
    # a provider that does not route by the key (DeepSeek ignores the field) shares the prefix whatever the key
    assert reads("deepseek", openai_body("a", "one"), openai_body("b", "two")) >= 1024
