"""Captured request bodies as sessions (issue 29, Build item 2): ``prefix-diff`` and ``trace`` on a capture folder or a
JSONL of bodies — grouped into conversations, each consecutive pair's cause with the first divergent byte, the real
cached tokens beside the simulator's (one cache across conversations), disagreements as findings.

The real upstream bot's captures are read from the shared reference (``../shared/reference/upstream-db/captures``
from the repo root), copied into ``tmp_path`` first; their text is never copied into the repository.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.cache.captures import diff_captures, group_conversations, route_of
from zhin_cli.store.captures import read_captures, wire_shape

ROOT = Path(__file__).resolve().parent.parent
SHARED_CAPTURES = ROOT.parent / "shared" / "reference" / "upstream-db" / "captures"
GROUP_A = [1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27]
GROUP_B = [8, 9, 23]
PRIVATE = [16, 17, 18, 19, 20, 21, 22]


@pytest.fixture
def captures(tmp_path: Path) -> Path:
    """A copy of the real bot's capture folder (never the shared one)."""
    assert SHARED_CAPTURES.is_dir(), f"the shared reference is missing: {SHARED_CAPTURES}"
    return Path(shutil.copytree(SHARED_CAPTURES, tmp_path / "captures"))


def openai_body(messages: list[dict[str, Any]], tools: int = 1, **extra: Any) -> dict[str, Any]:
    schemas = [{"type": "function", "function": {"name": f"tool{i}", "parameters": {"type": "object"}}} for i in range(tools)]
    return {"model": "gpt-4.1-mini", "messages": [{"role": "system", "content": "You are a bot. " * 400}, *messages],
            "tools": schemas, **extra}


def write_folder(folder: Path, bodies: list[dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for number, body in enumerate(bodies, start=1):
        (folder / f"{number:05d}-chat-completions.json").write_text(json.dumps(body, ensure_ascii=False), encoding="utf-8")
    return folder


def chat(turns: int) -> list[dict[str, Any]]:
    """An append-only conversation: request n holds turns 1..n (user, then the reply before the next user)."""
    bodies: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    for turn in range(1, turns + 1):
        messages = [*messages, {"role": "user", "content": f"member message number {turn}, long enough to matter"}]
        bodies.append(openai_body(messages))
        messages = [*messages, {"role": "assistant", "content": f"reply {turn}"}]
    return bodies


# --- the reader ---------------------------------------------------------------------------------------------


def test_folder_is_read_in_number_order_other_files_ignored_exchange_usage_read(tmp_path: Path) -> None:
    bodies = chat(3)
    folder = tmp_path / "caps"
    folder.mkdir()
    for number, body in zip((10, 2, 1), bodies, strict=True):
        (folder / f"{number:05d}-chat-completions.json").write_text(json.dumps(body), encoding="utf-8")
    (folder / "notes.txt").write_text("not a capture", encoding="utf-8")
    (folder / "proxy-log.jsonl").write_text('{"n": 1}\n', encoding="utf-8")
    usage = {"prompt_tokens": 900, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 768}}
    (folder / "00002-chat-completions.exchange.json").write_text(
        json.dumps({"version": 1, "status": 200, "stream": False, "usage": usage, "response": {}}), encoding="utf-8")
    read = read_captures(folder)
    assert [b.number for b in read.bodies] == [1, 2, 10]
    assert [b.usage for b in read.bodies] == [None, usage, None]  # negative control: only 2 has an exchange file
    diff = diff_captures(read)
    real = {r.number: r.real for r in diff.requests}
    assert real[2] is not None and (real[2].prompt_tokens, real[2].cached_tokens, real[2].source) == (900, 768, "exchange")
    assert real[1] is None and real[10] is None


def test_wire_shape_per_body() -> None:
    assert wire_shape({"model": "m", "messages": [{"role": "system", "content": "s"}]}) == "openai-chat"
    assert wire_shape({"model": "m", "system": "s", "messages": []}) == "anthropic-messages"
    assert wire_shape({"model": "m", "tools": [{"name": "t", "input_schema": {}}], "messages": []}) == "anthropic-messages"
    assert wire_shape({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}]}) == "anthropic-messages"
    assert wire_shape({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}) == "gemini-generate"


def test_serve_log_lines_are_the_numbered_bodies_usage_and_a_mismatch_is_a_note(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "caps", chat(2))
    log = folder / "zhin-serve.log"
    log.write_text("zhin serve: listening on …\n"
                   "zhin serve: POST /v1/chat/completions 200 openai gpt-4.1-mini prompt=2000 read=0 written=0\n"
                   "zhin serve: POST /v1/chat/completions 200 openai gpt-4.1-mini prompt=2100 read=1920 written=0\n",
                   encoding="utf-8")
    read = read_captures(folder)
    assert [(b.logged.prompt_tokens, b.logged.read) for b in read.bodies if b.logged] == [(2000, 0), (2100, 1920)]
    assert read.notes == []
    with log.open("a", encoding="utf-8") as handle:  # a third POST for two bodies: the lines cannot be matched
        handle.write("zhin serve: POST /v1/chat/completions 413 request body over …\n")
    read = read_captures(folder)
    assert all(b.logged is None for b in read.bodies)
    assert len(read.notes) == 1 and "3 POST line(s) for 2 capture(s)" in read.notes[0]


@pytest.mark.parametrize(("name", "text", "where", "message"), [
    ("00002-chat-completions.json", '{"model": "m", "messages": [\n  {"role": "user",', "00002-chat-completions.json:2",
     "not valid JSON"),
    ("00002-chat-completions.json", '[1, 2]', "00002-chat-completions.json", "not a request body: a JSON list"),
    ("00002-chat-completions.json", '{"model": "m", "input": "hi"}', "00002-chat-completions.json", "no \"messages\""),
    ("00001-chat-completions.exchange.json", '{"version": 9, "usage": {}}', "00001-chat-completions.exchange.json",
     "version 9"),
])
def test_a_broken_or_foreign_file_is_one_line_naming_it(zhin: Any, tmp_path: Path, name: str, text: str, where: str,
                                                       message: str) -> None:
    folder = write_folder(tmp_path / "caps", chat(2))
    (folder / name).write_text(text, encoding="utf-8")
    for command, status in ((("prefix-diff", "caps"), 2), (("trace", "caps", "--all"), 3)):  # prefix-diff: like diff
        result = zhin(*command)
        assert result.returncode == status, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("zhin: error: ") and "Traceback" not in result.stderr
        assert f"caps/{where}" in lines[0] and message in lines[0]
        assert result.stdout == ""


def test_a_broken_line_of_a_bodies_jsonl_names_its_line(zhin: Any, tmp_path: Path) -> None:
    lines = [json.dumps(body) for body in chat(3)]
    lines[1] = lines[1][:50]
    (tmp_path / "bodies.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = zhin("prefix-diff", "bodies.jsonl")
    assert result.returncode == 2  # trouble, as diff says it
    assert result.stderr.startswith("zhin: error: bodies.jsonl:2: not valid JSON") and result.stderr.count("\n") == 1


# --- grouping ---------------------------------------------------------------------------------------------------


def test_the_real_captures_group_as_the_readme_says(captures: Path) -> None:
    read = read_captures(captures)
    # the routing fields alone cannot tell them apart: all 27 bodies carry the same prompt_cache_key
    assert len({route_of(b) for b in read.bodies}) == 1
    groups = [c.numbers for c in group_conversations(read.bodies)]
    assert groups == [GROUP_A, GROUP_B, PRIVATE]


def test_routing_fields_keep_conversations_apart_and_a_foreign_request_starts_its_own(tmp_path: Path) -> None:
    same = chat(2)
    other_key = [{**body, "prompt_cache_key": "other"} for body in chat(2)]  # the same messages, another key
    unrelated = openai_body([{"role": "user", "content": "a different chat altogether, nothing shared"}])
    read = read_captures(write_folder(tmp_path / "caps", [same[0], other_key[0], same[1], other_key[1], unrelated]))
    assert [c.numbers for c in group_conversations(read.bodies)] == [[1, 3], [2, 4], [5]]


# --- prefix-diff on the real captures -------------------------------------------------------------------------


def test_prefix_diff_names_every_break_of_the_real_bot_with_the_real_cache_beside(zhin: Any, captures: Path) -> None:
    result = zhin("prefix-diff", "captures", "--json")
    assert result.returncode == 1, result.stderr  # breaks found: exit like diff
    data = json.loads(result.stdout)
    assert data["version"] == 1
    sessions = {s["session_id"]: s for s in data["sessions"]}
    assert list(sessions) == ["captures#1", "captures#8", "captures#16"]
    causes = {sid: [p["cause"] for p in s["pairs"]] for sid, s in sessions.items()}
    assert causes["captures#1"].count("messages_changed") == 10 and len(causes["captures#1"]) == 16
    assert causes["captures#8"] == ["messages_changed", "messages_changed"]
    assert causes["captures#16"] == ["append"] * 6  # the private chat only appends: no prefix, no break
    tools = [p for p in sessions["captures#1"]["pairs"] if p["cause"] == "tools_changed"]
    assert len(tools) == 1 and (tools[0]["from_turn"], tools[0]["to_turn"]) == (2, 3)
    assert tools[0]["detail"] == "4 → 5 tool schemas (+weather)"
    assert (tools[0]["cache"]["cached_tokens"], tools[0]["cache"]["prompt_tokens"], tools[0]["real"]["cached_tokens"]) == (0, 2546, 0)
    for session in sessions.values():
        for pair in session["pairs"]:
            assert pair["real"]["agrees"] is True and pair["real"]["source"] == "zhin-serve.log"
            if pair["cause"] == "messages_changed":  # the previous turn's row re-rendered with a [sender:…] prefix
                mark = pair["first_divergence"]["excerpt_index"]
                assert pair["after"][mark:].startswith("sender:id=") and not pair["before"][mark:].startswith("sender:")
                assert pair["before"][:mark] == pair["after"][:mark] and pair["before"][:mark].endswith('"content":"[')
    a13 = next(p for p in sessions["captures#1"]["pairs"] if p["to_turn"] == 13)
    assert (a13["cache"]["cached_tokens"], a13["cache"]["prompt_tokens"]) == (3712, 4942)  # zhin-serve.log's line 13
    capture = data["captures"][0]
    assert capture["disagreements"] == [] and capture["with_real_usage"] == 27
    firsts = {r["capture"]: r for r in capture["requests"] if r["capture"] in (8, 16)}
    assert all(r["cached_tokens"] == 1792 and r["real"]["cached_tokens"] == 1792 for r in firsts.values())


def test_the_text_report_shows_the_real_column_the_excerpts_and_the_shared_prefix(zhin: Any, captures: Path) -> None:
    result = zhin("prefix-diff", "captures")
    assert result.returncode == 1
    out = result.stdout
    assert "capture common cached  real" in out
    assert "✗ tools_changed in tools (capture 3): capture 2→3" in out and "(+weather)" in out
    assert "(turn" not in out and ": turn " not in out  # captures are called captures, as in the rows (finding 4)
    assert "✗ 10 × messages_changed" in out and "✗ 2 × messages_changed" in out
    assert "capture 8, the first of captures#8: cached 1,792 of 2,155 (real 1,792)" in out
    assert "capture 16, the first of captures#16: cached 1,792 of 2,064 (real 1,792)" in out
    assert "real cached tokens recorded for 27 of 27 requests (zhin-serve.log): all agree with the simulator" in out
    assert "13 unexpected break(s)" in out


def test_one_cache_across_conversations_is_what_the_provider_did(captures: Path) -> None:
    read = read_captures(captures)
    assert diff_captures(read).disagreements == []
    # negative control: a cold cache per conversation (zhin's per-session replay) contradicts the real bill at the
    # first request of group B and of the private chat, which really read 1,792 tokens
    cold = diff_captures(read, shared_cache=False).disagreements
    assert [(r.number, r.cached_tokens, r.real.cached_tokens if r.real else None) for r in cold] == [(8, 0, 1792), (16, 0, 1792)]


def test_a_real_read_the_simulator_does_not_make_is_a_finding(zhin: Any, captures: Path) -> None:
    log = captures / "zhin-serve.log"
    text = log.read_text(encoding="utf-8").replace("prompt=2546 read=0", "prompt=2546 read=2048")
    log.write_text(text, encoding="utf-8")
    data = json.loads(zhin("prefix-diff", "captures", "--json").stdout)
    assert data["captures"][0]["disagreements"] == [3]
    out = zhin("prefix-diff", "captures").stdout
    assert "✗ 1 disagree with the simulator" in out
    assert "✗ capture 3: the provider read 2,048 cached tokens, the simulator 0 (of 2,546; difference +2,048)" in out


def test_jsonl_streams_each_pair_naming_its_conversation(zhin: Any, captures: Path) -> None:
    result = zhin("prefix-diff", "captures", "--jsonl")
    assert result.returncode == 1
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 16 + 2 + 6
    assert {line["session_id"] for line in lines} == {"captures#1", "captures#8", "captures#16"}


# --- negative control: a bot whose prefix never breaks ---------------------------------------------------------


def zhin_bodies_captured(zhin: Any, tmp_path: Path, fixtures_dir: Path) -> Path:
    """zhin's own request bodies for a fixture session, sent through ``zhin serve --capture``."""
    from zhin_cli.tools.serve.server import running_server

    traced = zhin("trace", str(fixtures_dir / "private-chat.jsonl"), "--all", "--json")
    assert traced.returncode == 0, traced.stderr
    bodies = [r["request"] for r in json.loads(traced.stdout)["requests"]]
    assert len(bodies) >= 5
    folder = tmp_path / "zhin-caps"
    with running_server(capture=folder) as (base, _):
        for body in bodies:
            request = urllib.request.Request(f"{base}/chat/completions", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as response:
                assert response.status == 200
    return folder


def test_a_bot_whose_prefix_never_breaks_reports_none(zhin: Any, tmp_path: Path, fixtures_dir: Path) -> None:
    folder = zhin_bodies_captured(zhin, tmp_path, fixtures_dir)
    result = zhin("prefix-diff", str(folder), "--json")
    assert result.returncode == 0, result.stdout
    data = json.loads(result.stdout)
    assert data["unexpected"] == 0 and len(data["sessions"]) == 1
    assert {p["cause"] for p in data["sessions"][0]["pairs"]} <= {"append", "tail"}
    # zhin serve wrote each answer's usage beside its body (.exchange.json): read back, it is the simulator's
    requests = data["captures"][0]["requests"]
    assert len(requests) == len(data["sessions"][0]["pairs"]) + 1
    assert all(r["real"]["source"] == "exchange" and r["real"]["agrees"] for r in requests)
    # the same folder with one earlier message rewritten: the check discriminates
    last = sorted(folder.glob("*.json"))[-1]
    body = json.loads(last.read_text(encoding="utf-8"))
    history = [m for m in body["messages"] if m["role"] == "user"]
    history[0]["content"] = "[edited] " + history[0]["content"] if isinstance(history[0]["content"], str) else history[0]["content"]
    last.write_text(json.dumps(body), encoding="utf-8")
    broken = zhin("prefix-diff", str(folder), "--json")
    assert broken.returncode == 1
    causes = [p["cause"] for p in json.loads(broken.stdout)["sessions"][0]["pairs"]]
    assert causes[-1] == "messages_changed" and causes.count("messages_changed") == 1


def test_a_jsonl_of_bodies_reads_like_a_folder(zhin: Any, tmp_path: Path) -> None:
    bodies = chat(4)
    (tmp_path / "bodies.jsonl").write_text("".join(json.dumps(b) + "\n" for b in bodies), encoding="utf-8")
    result = zhin("prefix-diff", "bodies.jsonl", "--json")
    assert result.returncode == 0
    pairs = json.loads(result.stdout)["sessions"][0]["pairs"]
    assert [p["cause"] for p in pairs] == ["append"] * 3 and all("real" not in p for p in pairs)
    bodies[3]["tools"] = [*bodies[3]["tools"], {"type": "function", "function": {"name": "late", "parameters": {}}}]
    (tmp_path / "bodies.jsonl").write_text("".join(json.dumps(b) + "\n" for b in bodies), encoding="utf-8")
    pairs = json.loads(zhin("prefix-diff", "bodies.jsonl", "--json").stdout)["sessions"][0]["pairs"]
    assert [p["cause"] for p in pairs] == ["append", "append", "tools_changed"] and pairs[2]["detail"] == "1 → 2 tool schemas (+late)"


def test_anthropic_and_gemini_bodies(zhin: Any, tmp_path: Path) -> None:
    system = [{"type": "text", "text": "You are a bot. " * 400, "cache_control": {"type": "ephemeral"}}]
    opening = [{"role": "user", "content": "hello there, how are you"}]
    first: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 100, "system": system, "messages": opening}
    second = {**first, "messages": [*opening, {"role": "assistant", "content": "fine"},
                                    {"role": "user", "content": "good to hear it"}]}
    third = {**second, "system": [{**system[0], "text": "You are another bot. " * 300}]}
    write_folder(tmp_path / "anthropic", [first, second, third])
    data = json.loads(zhin("prefix-diff", "anthropic", "--json").stdout)
    assert [p["cause"] for p in data["sessions"][0]["pairs"]] == ["append", "system_changed"]
    assert data["sessions"][0]["provider"] == "anthropic"
    g1 = {"contents": [{"role": "user", "parts": [{"text": "hello there, how are you"}]}]}
    g2 = {"contents": [*g1["contents"], {"role": "model", "parts": [{"text": "fine"}]},
                       {"role": "user", "parts": [{"text": "and you"}]}]}
    (tmp_path / "gemini.jsonl").write_text(json.dumps(g1) + "\n" + json.dumps(g2) + "\n", encoding="utf-8")
    data = json.loads(zhin("prefix-diff", "gemini.jsonl", "--json").stdout)
    assert [p["cause"] for p in data["sessions"][0]["pairs"]] == ["append"] and data["sessions"][0]["provider"] == "gemini"


def test_text_from_bodies_is_escaped_for_the_terminal(zhin: Any, tmp_path: Path) -> None:
    bodies = chat(2)
    bodies[1]["messages"][1]["content"] = "\x1b]0;owned\x07\x1b[2J" + bodies[1]["messages"][1]["content"]
    bodies[1]["tools"][0]["function"]["name"] = "evil\x1b[31m"
    write_folder(tmp_path / "caps", bodies)
    for command in (("prefix-diff", "caps"), ("trace", "caps", "--all")):
        result = zhin(*command)
        assert "\x1b" not in result.stdout and "\x07" not in result.stdout and "\x1b" not in result.stderr
    diff = zhin("prefix-diff", "caps").stdout
    assert "tools_changed" in diff


# --- trace ------------------------------------------------------------------------------------------------------


def test_trace_all_on_captures_a_row_per_request(zhin: Any, captures: Path) -> None:
    result = zhin("trace", "captures", "--all")
    assert result.returncode == 0, result.stderr
    assert "27 captured requests in 3 conversation(s)" in result.stdout
    assert "tools_changed (4 → 5 tool schemas (+weather))" in result.stdout
    assert "real cached tokens beside the simulator's: all agree" in result.stdout
    data = json.loads(zhin("trace", "captures", "--json").stdout)
    assert data["version"] == 1 and data["captured"] is True and len(data["requests"]) == 27
    by_number = {r["capture"]: r for r in data["requests"]}
    assert by_number[3]["cause"] == "tools_changed" and by_number[8]["cause"] is None
    assert by_number[8]["cached_tokens"] == by_number[8]["real"]["cached_tokens"] == 1792
    assert [c["captures"] for c in data["conversations"]] == [GROUP_A, GROUP_B, PRIVATE]
    refused = zhin("trace", "captures", "--turn", "3")
    assert refused.returncode == 2 and "--turn: not for captured bodies" in refused.stderr


# --- causes a body alone can tell ----------------------------------------------------------------------------


def causes_of(tmp_path: Path, bodies: list[dict[str, Any]]) -> list[tuple[str, str]]:
    diff = diff_captures(read_captures(write_folder(tmp_path / "caps", bodies)))
    return [(p.cause, p.detail) for s in diff.sessions for p in s.pairs]


def test_a_dropped_end_of_the_last_message_is_a_tail_and_a_prefix_added_is_a_rewrite(tmp_path: Path) -> None:
    first = chat(1)[0]
    with_tail = [*first["messages"][1:-1], {"role": "user", "content": first["messages"][-1]["content"] + "\n\n[scene:10:00]"}]
    one = openai_body(with_tail)
    two = openai_body([*first["messages"][1:], {"role": "assistant", "content": "reply 1"},
                       {"role": "user", "content": "member message number 2, long enough\n\n[scene:10:05]"}])
    assert causes_of(tmp_path / "tail", [one, two]) == [
        ("tail", "the end of the previous request's last message was dropped (a runtime tail)")]
    # negative control: the same message with text added before it (upstream's [sender:…]) is a rewrite
    prefixed = openai_body([{"role": "user", "content": "[sender:id=1] " + with_tail[-1]["content"]},
                            {"role": "assistant", "content": "reply 1"}, {"role": "user", "content": "next"}])
    assert causes_of(tmp_path / "rewrite", [one, prefixed]) == [("messages_changed", "message 1 (user) was rewritten")]


def test_dropped_first_messages_are_a_window_shift(tmp_path: Path) -> None:
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} of the chat, with some words"}
               for i in range(9)]
    before, after = openai_body(history), openai_body([*history[4:], {"role": "assistant", "content": "ok"},
                                                       {"role": "user", "content": "and now"}])
    assert causes_of(tmp_path / "shift", [before, after]) == [
        ("window_shift", "the history starts at another message: the first ones were dropped")]


def test_excerpts_never_cut_a_character(tmp_path: Path) -> None:
    base = "天气" * 30
    opening = [{"role": "user", "content": "hello there, a first message"}, {"role": "assistant", "content": "ok"}]
    bodies = [openai_body([*opening, {"role": "user", "content": base + "东京"}]),
              openai_body([*opening, {"role": "user", "content": base + "大阪"}])]
    pair = diff_captures(read_captures(write_folder(tmp_path / "caps", bodies))).sessions[0].pairs[0]
    assert "\ufffd" not in pair.before + pair.after  # before: 40 bytes back landed inside a 3-byte character
    assert pair.before[pair.excerpt_mark :].startswith("东") and pair.after[pair.excerpt_mark :].startswith("大")
    assert pair.before[: pair.excerpt_mark] == pair.after[: pair.excerpt_mark] and pair.before[: pair.excerpt_mark].endswith("天气")


def test_the_recorders_log_lines_are_read_too(tmp_path: Path) -> None:
    # `serve --upstream` logs `written=-` where the provider reports no writes (OpenAI) and `no usage` where it
    # reported nothing: the first is a usage with 0 written, the second none — never a shifted pairing
    from zhin_cli.store.captures import LoggedUsage, read_serve_log

    log = tmp_path / "zhin-serve.log"
    log.write_text("zhin serve: POST /v1/chat/completions 200 upstream gpt-4.1-mini prompt=2252 read=0 written=-\n"
                   "zhin serve: POST /v1/chat/completions 200 upstream gpt-4.1-mini no usage\n"
                   "zhin serve: POST /v1/chat/completions 200 openai gpt-4.1-mini prompt=2376 read=2176 written=0\n"
                   "zhin serve: POST /v1/chat/completions 200 upstream m prompt=10 read=- written=-\n", encoding="utf-8")
    assert read_serve_log(log) == [LoggedUsage(2252, 0, 0), None, LoggedUsage(2376, 2176, 0), None]
