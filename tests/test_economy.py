"""``zhin report economy``: header accounting pinned on a hand-computed session, cache arithmetic against an
independent computation, the flat layout, the physical limit, and the command's JSON contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import SEC, T0, History, reply_gap

from zhin_cli.cache.replay import new_tokens
from zhin_cli.cache.serialize import serialize
from zhin_cli.core.model import Actor
from zhin_cli.core.tokens import counter
from zhin_cli.pipeline.config import Config
from zhin_cli.pipeline.headers import Aliases, project
from zhin_cli.pipeline.merge import Placed
from zhin_cli.tools.report.economy import (
    CASES,
    flat_request,
    session_economy,
    simulate,
    upstream_prefix,
)
from zhin_cli.wire import prompt_tokens, wire_for

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
COUNT = counter("o200k_base").count_once


def small_session(gap_ms: int = 25 * SEC) -> History:
    """Two bot turns in a group; every header below is derived by hand from ADR 0041 §1 and upstream's
    buildSenderPrefix. ``gap_ms`` separates the two requests (turn 1 at +95 s)."""
    h = History()
    h.user(T0, "10002", "早", display_name="小明", card="明明")
    h.user(T0 + 10 * SEC, "10002", "在吗", display_name="小明", card="明明")
    h.user(T0 + 20 * SEC, "10003", "hi", display_name="Lily", platform_role="admin")
    h.user(T0 + 90 * SEC, "10002", "走", display_name="小明", card="明明")
    h.assistant(T0 + 95 * SEC, "好", message_id="p-5")
    h.user(T0 + 95 * SEC + gap_ms - 5 * SEC, "10003", "再见", display_name="Lily", platform_role="admin")
    h.assistant(T0 + 95 * SEC + gap_ms, "拜拜", message_id="p-7")
    return h


# m1..m4 are new in request 1; m5 (the bot's reply) and m6 are new in request 2; m7 is never sent.
EXPECTED_HEADERS = {
    "adr": [
        "[id:m1;user_id:10002;name:小明;role:member;group_nickname:明明;mute_time:0;date:2025-10-29;time:09:00;]",
        "[id:m2;user_id:10002;]",  # same facts, 10 s later: short, no time
        "[id:m3;user_id:10003;name:Lily;role:admin;mute_time:0;time:09:00;]",  # first appearance: full
        "[id:m4;user_id:10002;time:09:01;]",  # ≥ 1 min since the last time shown
        "[id:m5;user_id:8596238;name:Zhin;role:admin;group_nickname:小知;time:09:01;]",  # the bot, first time
        "[id:m6;user_id:10003;]",
    ],
    "full": [
        "[id:m1;user_id:10002;name:小明;role:member;group_nickname:明明;mute_time:0;date:2025-10-29;time:09:00;]",
        "[id:m2;user_id:10002;name:小明;role:member;group_nickname:明明;mute_time:0;time:09:00;]",
        "[id:m3;user_id:10003;name:Lily;role:admin;mute_time:0;time:09:00;]",
        "[id:m4;user_id:10002;name:小明;role:member;group_nickname:明明;mute_time:0;time:09:01;]",
        "[id:m5;user_id:8596238;name:Zhin;role:admin;group_nickname:小知;time:09:01;]",
        "[id:m6;user_id:10003;name:Lily;role:admin;mute_time:0;time:09:01;]",  # +115 s
    ],
    "upstream": [  # group user messages only; the bot's messages carry no prefix upstream
        "[sender:id=10002 name=小明 roles=user]",
        "[sender:id=10002 name=小明 roles=user]",
        "[sender:id=10003 name=Lily roles=scene_admin]",
        "[sender:id=10002 name=小明 roles=user]",
        "[sender:id=10003 name=Lily roles=scene_admin]",
    ],
}


def test_header_tokens_match_the_hand_computed_headers() -> None:
    economy = session_economy(small_session().session(), Config(), providers=["deepseek"])
    for style, headers in EXPECTED_HEADERS.items():
        assert economy.headers.totals[style] == sum(COUNT(h) for h in headers), style
    # the figures as of o200k_base, so a change of tokenizer or format shows up here
    assert economy.headers.totals == {"upstream": 67, "full": 217, "adr": 150}
    assert economy.headers.messages == 6
    assert (economy.headers.full_headers, economy.headers.short_headers) == (3, 3)
    # what each field costs: user_id is on every header, name only on the three full ones
    fields = economy.headers.fields["adr"]
    assert fields["user_id"] == sum(COUNT(f"user_id:{u};") for u in ("10002", "10002", "10003", "10002", "8596238", "10003"))
    assert fields["name"] == COUNT("name:小明;") + COUNT("name:Lily;") + COUNT("name:Zhin;")


def test_upstream_prefix_follows_build_sender_prefix() -> None:
    actor = Actor("42", display_name="A  b]]c", roles=("user", "master"), platform_role="owner")
    assert upstream_prefix(actor) == "[sender:id=42 name=A_b_c roles=master,scene_owner]"
    assert upstream_prefix(Actor("7", display_name="x" * 80, platform_role="member")) == f"[sender:id=7 name={'x' * 64} roles=user]"


def test_always_full_projects_every_member_message_in_full_and_default_is_unchanged() -> None:
    session = small_session().session()
    placed = [Placed(m, "history") for m in session.messages]
    aliases = Aliases.of(session)
    default = project(placed, aliases=aliases, bot=session.bot, timezone="Asia/Shanghai")
    full = project(placed, aliases=aliases, bot=session.bot, timezone="Asia/Shanghai", always_full=True)
    assert [m.header for m in default.messages][:6] == EXPECTED_HEADERS["adr"]
    assert [m.header for m in full.messages][:6] == EXPECTED_HEADERS["full"]
    assert full.short_headers == 0 and default.short_headers == 4


def _previous_without_tail(request) -> int:  # type: ignore[no-untyped-def]
    """Prompt tokens (the one definition, docs/tokens.md) of the previous request before its runtime tail: the
    same body with the tail cut off its message, without the reply's priming tokens."""
    wire = request.profile.wire_model
    index = next(p.message_index for p in request.parts if p.segment_id == "tail")
    messages = wire.messages(request.request)
    body = {**request.request, wire.message_key: [*messages[:index], wire.without_tail(messages[index], request.tail_text)]}
    return prompt_tokens(body, wire, counter("o200k_base")) - wire.reply_framing


def test_deepseek_cached_tokens_are_the_common_prefix_in_64_token_units() -> None:
    session = small_session().session()
    figures = simulate(session, Config(), CASES["deepseek"])
    first, second = figures.requests
    assert first.first and first.adr_cached == 0  # a session's first request: cold cache
    assert not second.first
    from zhin_cli.pipeline.assemble import Assembler

    registry, _ = Config().registry()
    old = next(Assembler(registry, Config(), provider="deepseek", model="deepseek-chat").replay(session))
    common = _previous_without_tail(old)
    assert common > 64
    # the common prefix is at least everything before the old tail, and never reaches into the new messages
    assert second.adr_cached in (common // 64 * 64, (common + 1) // 64 * 64)
    assert second.adr_cached % 64 == 0 and second.adr_cached > 0


def test_a_request_after_the_cache_lifetime_starts_a_new_group_and_gets_nothing() -> None:
    # negative control for the group rule: the same session, with the second request 2 h later (> 3600 s)
    session = small_session(gap_ms=2 * 3600 * SEC).session()
    figures = simulate(session, Config(), CASES["deepseek"])
    assert [r.first for r in figures.requests] == [True, True]
    assert [r.adr_cached for r in figures.requests] == [0, 0]
    warm = simulate(small_session().session(), Config(), CASES["deepseek"])
    assert warm.requests[1].adr_cached > 0


def test_openai_caches_nothing_below_1024_tokens() -> None:
    figures = simulate(small_session().session(), Config(), CASES["openai"])
    assert all(r.adr_prompt < 1024 for r in figures.requests)
    assert [r.adr_cached for r in figures.requests] == [0, 0]


def test_new_tokens_are_the_messages_the_previous_request_did_not_have() -> None:
    from zhin_cli.pipeline.assemble import Assembler

    session = small_session().session()
    registry, _ = Config().registry()
    first, second = Assembler(registry, Config(), provider="openai", model="gpt-4o").replay(session)
    # tokens are the one prompt_tokens definition (docs/tokens.md): text + framing per wire message
    total = prompt_tokens(second.request, "openai-chat", counter("o200k_base"))
    assert new_tokens(None, second, counter("o200k_base")) == total
    # by hand: in request 2 the bot's reply (m5) and m6 are new; m6 carries the same tail as request 1 did
    messages = second.request["messages"]
    assert [m["role"] for m in messages[-2:]] == ["assistant", "user"] and messages[-1]["content"].startswith("[id:m6;")
    tail = next(p.text for p in second.parts if p.segment_id == "tail")
    framing = 3  # per message (the reply's priming tokens were in request 1 too)
    expected = (COUNT(messages[-2]["content"]) + framing) + (COUNT(messages[-1]["content"]) + framing) - COUNT(tail)
    assert new_tokens(first, second, counter("o200k_base")) == expected
    assert new_tokens(second, second, counter("o200k_base")) == 0  # nothing is new against itself


def test_flat_layout_is_the_system_prompt_and_one_user_message_of_history() -> None:
    session = small_session().session()
    figures_requests = []
    from zhin_cli.pipeline.assemble import Assembler

    for provider, model in (("openai", "gpt-4o"), ("anthropic", "claude-sonnet-5")):
        registry, _ = Config().registry()
        figures_requests.append(next(Assembler(registry, Config(), provider=provider, model=model).replay(session)))
    from zhin_cli.tools.report.economy import flat_history

    history = flat_history(session, session.messages[:4], None)
    assert history.startswith("## 用户\n[sender:id=10002 name=小明 roles=user] 早\n\n## 用户\n")
    openai = flat_request(figures_requests[0], history)
    assert [m["role"] for m in openai.request["messages"]] == ["system", "user"]
    user = openai.request["messages"][1]["content"]
    assert user.startswith(history) and user.endswith("global_mute:false;assistant_role:admin;]")
    anthropic = flat_request(figures_requests[1], history)
    assert anthropic.request["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in json.dumps(anthropic.request["messages"])  # upstream marks the system prompt only


def test_report_economy_json_on_the_fixtures(zhin) -> None:  # type: ignore[no-untyped-def]
    result = zhin("report", "economy", FIXTURES / "group-busy.jsonl", FIXTURES / "private-chat.jsonl", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["version"] == 1 and data["encoding"] == "o200k_base"
    busy, private = data["sessions"]
    assert busy["messages"] == 143 and busy["requests"] == 16
    assert set(busy["header_tokens"]) == {"upstream", "full", "adr"}
    assert busy["header_tokens"]["adr"] < busy["header_tokens"]["full"]
    assert private["header_tokens"]["upstream"] == 0  # upstream prefixes group messages only
    for provider in ("openai", "anthropic", "deepseek"):
        cache = busy["cache"][provider]
        for key in ("adr_later_hit_rate", "flat_later_hit_rate", "limit_later", "adr_first_hit_rate", "flat_first_hit_rate"):
            assert 0.0 <= cache[key] <= 1.0, (provider, key)
        assert cache["adr_first_hit_rate"] == 0.0  # first of a group: cold by definition
        assert cache["adr_later_hit_rate"] <= cache["limit_later"] + 0.01


def test_report_economy_options_and_errors(zhin, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    one = zhin("report", "economy", FIXTURES / "private-chat.jsonl", "--provider", "openai", "--json")
    assert one.returncode == 0, one.stderr
    assert list(json.loads(one.stdout)["sessions"][0]["cache"]) == ["openai"]
    table = zhin("report", "economy", FIXTURES / "private-chat.jsonl", "-p", "deepseek")
    assert table.returncode == 0 and "upstream [sender:…] on every group message" in table.stdout
    gemini = zhin("report", "economy", FIXTURES / "private-chat.jsonl", "--provider", "gemini", "--json")
    assert gemini.returncode == 0 and list(json.loads(gemini.stdout)["sessions"][0]["cache"]) == ["gemini"]  # its spec's case
    bad = zhin("report", "economy", FIXTURES / "private-chat.jsonl", "--provider", "nosuch")
    assert bad.returncode == 2 and bad.stderr.startswith("zhin: error: --provider: unknown provider 'nosuch' (known: ")
    assert "Traceback" not in bad.stderr
    encoding = zhin("report", "economy", FIXTURES / "private-chat.jsonl", "--encoding", "p50k")
    assert encoding.returncode == 2 and "--encoding" in encoding.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"type":"session","session_id":"x"}\n{"type":"message"\n', encoding="utf-8")
    failed = zhin("report", "economy", broken)
    assert failed.returncode != 0 and f"{broken}:2" in failed.stderr and "Traceback" not in failed.stderr


def test_anthropic_reads_up_to_the_block_before_the_old_tail() -> None:
    """The ADR layout's second breakpoint sits on the block before the runtime tail; the next request shares
    the bytes up to that block's end, so that is what it reads (min_tokens lowered so the small session counts)."""
    from dataclasses import replace

    from zhin_cli.pipeline.assemble import Assembler

    session = small_session().session()
    figures = simulate(session, Config(), replace(CASES["anthropic"], min_tokens=1))
    registry, _ = Config().registry()
    old = next(Assembler(registry, Config(), provider="anthropic", model="claude-sonnet-5").replay(session))
    data = serialize(old).data.decode()
    marker = data.rindex(',"cache_control"')  # the last marker: on the block before the tail
    assert data[marker:].count('"text":') == 1  # only the tail block follows
    # in tokens (the one definition, docs/tokens.md): every block up to and including the marked one
    blocks = list(wire_for("anthropic-messages").blocks(old.request))
    marked = max(i for i, b in enumerate(blocks) if b.ttl is not None)
    assert marked == len(blocks) - 2  # only the tail block follows
    expected = sum(COUNT(b.text) + b.framing for b in blocks[: marked + 1])
    second = figures.requests[1]
    assert second.adr_cached == expected
    # more than "up to the start of the message that carried the tail" (an earlier approximation)
    tail_message = blocks[-1].message_index
    assert second.adr_cached > sum(COUNT(b.text) + b.framing for b in blocks if b.message_index < tail_message or b.region != "messages") + 5
    assert 0 < second.flat_cached < second.adr_cached  # flat: only the system prompt carries cache_control


def test_anthropic_misses_an_entry_more_than_20_blocks_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Anthropic looks back about 20 blocks from each breakpoint for an earlier entry: after 25 new member
    messages (25 blocks) the previous request's entry is out of reach and only the system prompt is read — with
    the tail breakpoint alone (the renderer now also marks the previous turn's: tests/test_anthropic_breakpoints.py)."""
    from dataclasses import replace

    from zhin_cli.pipeline.providers import anthropic

    monkeypatch.setattr(anthropic, "PLACEMENT", "tail")

    case = replace(CASES["anthropic"], min_tokens=1)
    near = simulate(reply_gap(10).session(), Config(), case).requests[1]
    far = simulate(reply_gap(25).session(), Config(), case).requests[1]
    system_only = simulate(reply_gap(10).session(), Config(), case).requests[1].flat_cached  # flat: the system breakpoint alone
    assert near.adr_cached > system_only  # 11 blocks after the old breakpoint: the history prefix is read
    assert far.adr_cached == system_only  # 26 blocks after it: only the system prompt's entry is found
    assert far.cause == "tail"  # the prefix itself only lost the old tail; the lookup just cannot reach the entry
