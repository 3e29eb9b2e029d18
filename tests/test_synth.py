"""``zhin fixtures synth``: deterministic, readable by every command, valid on the wire, and shaped like the
distributions docs/economy.md documents."""

from __future__ import annotations

import io
import statistics
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from builders import assembler

from zhin_cli.core.errors import UsageError
from zhin_cli.core.model import AssistantMessage, EventMessage, ToolResultMessage, UserMessage
from zhin_cli.store.jsonl import read_session, session_lines, write_session
from zhin_cli.tools.fixtures.synth import SynthOptions, synthesize, synthesize_lines


def jsonl(options: SynthOptions) -> str:
    out = io.StringIO()
    write_session(synthesize(options), out)
    return out.getvalue()


def test_the_same_seed_writes_the_same_bytes_and_another_seed_does_not() -> None:
    options = SynthOptions(members=30, messages=400, seed=11)
    assert jsonl(options) == jsonl(options)
    assert jsonl(options) != jsonl(SynthOptions(members=30, messages=400, seed=12))


def test_exact_row_count_contiguous_ids_and_a_bot_reply_last(tmp_path: Path) -> None:
    for messages in (3, 4, 57, 1000):
        path = tmp_path / f"s{messages}.jsonl"
        path.write_text(jsonl(SynthOptions(members=20, messages=messages, seed=3)), encoding="utf-8")
        session = read_session(path)  # the JSONL reader accepts it (tool pairing included)
        assert len(session.messages) == messages
        assert [m.row_id for m in session.messages] == list(range(1, messages + 1))
        last = session.messages[-1]
        assert isinstance(last, AssistantMessage) and last.text and not last.tool_calls


def test_every_request_validates_for_openai_and_anthropic() -> None:
    session = synthesize(SynthOptions(members=40, messages=1200, seed=5, tool_rate=0.5, event_rate=0.05))
    assert any(isinstance(m, ToolResultMessage) for m in session.messages) and session.summaries
    for provider, model in (("openai", "gpt-4o"), ("anthropic", "claude-sonnet-5")):
        requests = list(assembler(provider=provider, model=model).replay(session))
        assert len(requests) == sum(1 for m in session.messages if isinstance(m, AssistantMessage))
        bad = [(r.turn, r.verdict.as_dict()) for r in requests if not r.verdict.ok]
        assert not bad, (provider, bad[:2])
        assert not [w for r in requests for w in r.warnings if "not sent" in w]  # every event line is a template


def test_distributions_bursts_long_tail_replies_days_changes_compactions() -> None:
    session = synthesize(SynthOptions(members=80, messages=3000, seed=1))
    users = [m for m in session.messages if isinstance(m, UserMessage)]
    # Zipf-like popularity: the top speaker has far more than a fair share; a long tail says little
    counts = Counter(m.actor.subject_id for m in users if m.actor)
    ranked = [n for _, n in counts.most_common()]
    assert ranked[0] > 8 * len(users) / 80
    assert sum(1 for n in ranked if n <= 5) >= 15
    # bursts: consecutive messages by one speaker, mean run length ≈ 1 / p = 2.2 (member-message runs)
    runs: list[int] = []
    previous: str | None = None
    for message in session.messages:
        if not isinstance(message, UserMessage) or message.actor is None:
            continue
        if runs and previous == message.actor.subject_id:
            runs[-1] += 1
        else:
            runs.append(1)
        previous = message.actor.subject_id
    assert 1.6 < statistics.mean(runs) < 3.0 and max(runs) >= 6
    assert 0.08 < sum(1 for m in users if m.reply_to) / len(users) < 0.16
    days = {datetime.fromtimestamp(m.timestamp / 1000, ZoneInfo("Asia/Shanghai")).date() for m in session.messages}
    assert len(days) >= 3
    hours = Counter(datetime.fromtimestamp(m.timestamp / 1000, ZoneInfo("Asia/Shanghai")).hour for m in session.messages)
    assert all(hours[h] == 0 for h in range(2, 8))  # the group sleeps
    kinds = Counter(m.kind for m in session.messages if isinstance(m, EventMessage))
    assert set(kinds) == {"member_joined", "member_left", "member_changed"}
    fields = {m.name.split()[3] for m in session.messages if isinstance(m, EventMessage) and m.kind == "member_changed"}
    assert {"group_nickname", "role", "mute_time"} <= fields
    assert len(session.summaries) >= 5
    calls = [m for m in session.messages if isinstance(m, AssistantMessage) and m.tool_calls]
    assert calls and any(len(m.tool_calls) == 2 for m in calls)
    times = [m.timestamp for m in session.messages]
    assert times == sorted(times)


def test_rates_control_what_is_generated() -> None:
    # negative controls for the options: with a rate of 0 the feature is absent
    quiet = synthesize(SynthOptions(members=30, messages=800, seed=2, tool_rate=0.0, event_rate=0.0))
    assert not any(isinstance(m, (ToolResultMessage, EventMessage)) for m in quiet.messages)
    busy = synthesize(SynthOptions(members=30, messages=800, seed=2, tool_rate=1.0, event_rate=0.2))
    replies = [m for m in busy.messages if isinstance(m, AssistantMessage) and m.text]
    loops = [m for m in busy.messages if isinstance(m, AssistantMessage) and m.tool_calls]
    assert len(loops) >= len(replies) - 1  # every turn but the closing one runs a tool loop
    assert sum(1 for m in busy.messages if isinstance(m, EventMessage)) > 40


def test_muted_members_do_not_speak_until_the_mute_expires() -> None:
    session = synthesize(SynthOptions(members=10, messages=3000, seed=4, event_rate=0.1))
    muted_until: dict[str, int] = {}
    for message in session.messages:
        if isinstance(message, EventMessage) and " mute_time " in message.name:
            user_id, seconds = message.name.split()[2], int(message.name.split('"')[1])
            muted_until[user_id] = message.timestamp + seconds * 1000
        if isinstance(message, UserMessage) and message.actor:
            assert message.timestamp >= muted_until.get(message.actor.subject_id, 0), message.row_id
    assert muted_until


@pytest.mark.parametrize("options", [SynthOptions(members=1), SynthOptions(messages=2), SynthOptions(tool_rate=1.5),
                                     SynthOptions(event_rate=-0.1), SynthOptions(compact_every=3)])
def test_bad_options_are_usage_errors(options: SynthOptions) -> None:
    with pytest.raises(UsageError):
        synthesize(options)


def test_cli_writes_a_file_that_trace_reads(zhin, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = zhin("fixtures", "synth", "--members", "25", "--messages", "300", "--seed", "9", "-o", "s.jsonl")
    assert result.returncode == 0, result.stderr
    assert "300 messages" in result.stderr
    stdout = zhin("fixtures", "synth", "--members", "25", "--messages", "300", "--seed", "9")
    assert stdout.stdout == (tmp_path / "s.jsonl").read_text(encoding="utf-8")
    traced = zhin("trace", "s.jsonl", "--json")
    assert traced.returncode == 0, traced.stderr
    bad = zhin("fixtures", "synth", "--members", "1")
    assert bad.returncode == 2 and bad.stderr.startswith("zhin: error: --members") and "Traceback" not in bad.stderr


def test_a_synthesized_session_imports_and_reports_from_the_database(zhin, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert zhin("fixtures", "synth", "--members", "15", "--messages", "200", "--seed", "21", "-o", "s.jsonl").returncode == 0
    imported = zhin("import", "s.jsonl", "--db", "z.sqlite")
    assert imported.returncode == 0, imported.stderr
    session_id = read_session(tmp_path / "s.jsonl").session_id
    report = zhin("report", "economy", session_id, "--db", "z.sqlite", "-p", "openai", "--json", "--per-request")
    assert report.returncode == 0, report.stderr
    import json

    data = json.loads(report.stdout)["sessions"][0]
    assert data["session_id"] == session_id and data["messages"] == 200
    per_request = data["cache"]["openai"]["per_request"]
    assert len(per_request) == data["requests"] and per_request[0]["first_of_group"] is True
    assert {"turn", "adr", "flat", "new_tokens", "limit", "cause"} <= set(per_request[0])


@pytest.mark.parametrize("options", [
    SynthOptions(members=20, messages=57, seed=3),
    SynthOptions(members=30, messages=2500, seed=5, bot_rate=0.4, tool_rate=0.9, event_rate=0.3, compact_every=10),
    SynthOptions(members=2, messages=1500, seed=9, event_rate=1.0),
    SynthOptions(messages=4000, seed=3),
], ids=["small", "busy", "events-only", "default"])
def test_the_streamed_lines_are_the_built_sessions_lines(options: SynthOptions, monkeypatch: pytest.MonkeyPatch) -> None:
    """``synthesize_lines`` (what ``zhin fixtures synth`` writes, line by line) gives the lines ``session_lines``
    gives for ``synthesize``'s session, summaries and scene lines in the same places."""
    import zhin_cli.tools.fixtures.synth as synth_module

    streamed = list(synthesize_lines(options))
    built = list(session_lines(synthesize(options)))
    assert streamed == built
    kinds = Counter(line["type"] for line in streamed)
    if options.messages > 1000:  # the placement rule is exercised: side lines among the messages
        assert kinds["summary"] + kinds["scene"] > 0
    # negative control: side lines given where they were made (a scene line is made before its event's row) differ
    monkeypatch.setattr(synth_module, "_placed", lambda header, steps: [(header, None)] + [
        (line, None) for step in steps for line in step])
    made_order = list(synthesize_lines(options))
    assert sorted(map(str, made_order)) == sorted(map(str, streamed))
    assert kinds["scene"] == 0 or made_order != streamed


def test_the_stream_gives_its_first_lines_before_the_rest_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = _count_parsed(monkeypatch)
    lines = synthesize_lines(SynthOptions(messages=5000, seed=4))
    first = [next(lines) for _ in range(3)]
    assert first[0]["type"] == "session" and first[1]["id"] == 1
    assert parsed[0] < 50, f"{parsed[0]} of 5000 rows made before the third line"
    assert sum(1 for _ in lines) + 3 >= 5001  # the rest follows (negative control: the count above is not always 0)
    assert parsed[0] == 5000


def test_cli_writes_its_first_line_before_the_session_is_made(zhin, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``zhin fixtures synth`` streams: a 150k-message file starts at once and is never in memory whole (before, the
    whole session was built and parsed before the first byte). Fails on 271b824: 5,000 rows parsed first."""
    import zhin_cli.store.jsonl as jsonl_module

    parsed = _count_parsed(monkeypatch)
    at_first_write: list[int] = []
    write = jsonl_module.write_json_line

    def first_write(data: object, out: Any, **options: Any) -> None:
        if not at_first_write:
            at_first_write.append(parsed[0])
        write(data, out, **options)

    monkeypatch.setattr(jsonl_module, "write_json_line", first_write)
    result = zhin("fixtures", "synth", "--messages", "5000", "--seed", "4", "-o", "s.jsonl")
    assert result.returncode == 0, result.stderr
    assert "5000 messages" in result.stderr
    assert at_first_write and at_first_write[0] < 50, at_first_write
    assert parsed[0] == 5000  # negative control: every row was made and parsed, after the first write


def _count_parsed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A counter of the rows ``synth`` has parsed so far (as a one-item list)."""
    import zhin_cli.tools.fixtures.synth as synth_module

    count = [0]
    parse = synth_module.message_from_payload

    def counting(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return parse(*args, **kwargs)

    monkeypatch.setattr(synth_module, "message_from_payload", counting)
    return count
