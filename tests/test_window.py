"""The visible window: compaction summary, tail limit, join/leave after compaction (criterion 3)."""

from __future__ import annotations

from pathlib import Path

from builders import MIN, SEC, T0, History, answered_chat, assembler, contents, replay, roles


def compacted_history() -> History:
    h = History()
    h.user(T0, "10002", "old talk", display_name="小明")
    h.event(T0 + SEC, "member_joined", "10009 join 1048877509 on 09:00 by self")
    h.event(T0 + 2 * SEC, "member_left", "10008 leave 1048877509 on 09:00 by 10001")
    h.event(T0 + 3 * SEC, "member_changed", '10001 changed 10002 group_title to "老玩家"')
    h.user(T0 + 4 * SEC, "10003", "more old talk")  # row 5: the anchor
    h.summary(T0 + 10 * MIN, anchor_row=5, text="小明和莉莉聊了早饭。")
    h.user(T0 + 9 * MIN, "10002", "new talk", display_name="小明")  # visible after compaction
    h.assistant(T0 + 11 * MIN, "reply")
    return h


def test_criterion_3_join_and_leave_stay_visible_after_compaction() -> None:
    request = replay(compacted_history().session())[-1]
    text = "\n".join(contents(request))
    assert "[Previous conversation summary]\n小明和莉莉聊了早饭。" in text
    assert "[state change] 10009 join 1048877509 on 09:00 by self" in text
    assert "[state change] 10008 leave 1048877509 on 09:00 by 10001" in text
    assert "old talk" not in text  # the compacted messages themselves are gone
    assert "changed 10002 group_title" not in text  # profile changes are compacted; full headers carry current facts
    assert request.window.summary_anchor == 5 and request.window.carried_events == 2


def test_negative_control_without_carrying_membership_the_join_is_lost() -> None:
    request = replay(compacted_history().session(), {"window": {"keep_membership_events": 0}})[-1]
    assert "join 1048877509" not in "\n".join(contents(request))


def test_first_appearance_after_compaction_gets_a_full_header() -> None:
    request = replay(compacted_history().session())[-1]
    member = [c for c in contents(request) if c.startswith("[id:m3;")]
    assert member and member[0].startswith("[id:m3;user_id:10002;name:小明;")


def test_summary_applies_only_from_its_time_on() -> None:
    h = compacted_history()
    h2 = History()
    h2.messages = list(h.messages[:5])
    h2.assistant(T0 + 5 * SEC, "early reply")  # before the compaction happened
    h2.summaries = list(h.summaries)
    request = replay(h2.session())[-1]
    assert "old talk" in "\n".join(contents(request))
    assert request.window.summary_anchor is None


def test_tail_limit_never_opens_on_a_tool_result() -> None:
    h = History()
    h.user(T0, "10002", "q")
    h.assistant(T0 + SEC, "", calls=[("call_1", "a")])
    h.result(T0 + 2 * SEC, "call_1")
    for i in range(3):
        h.user(T0 + (3 + i) * SEC, "10002", f"m{i}")
    h.assistant(T0 + 10 * SEC, "r")
    request = replay(h.session(), {"window": {"max_messages": 4}})[-1]
    assert roles(request) == ["system", "user", "user", "user"]
    assert request.verdict.ok and request.window.dropped == 3


# --- hysteresis (preset-message-skeleton: "超过 2n 才裁到 n", prefix breaks once every n) -------------------------


def shift_turns(config: dict[str, object], turns: int = 40) -> list[int]:
    from zhin_cli.cache.diff import diff_turns

    session = answered_chat(turns).session()
    result = diff_turns(session.session_id, assembler(config).replay(session))
    assert {p.cause for p in result.pairs} <= {"append", "tail", "window_shift"}
    return [p.to_turn for p in result.pairs if p.cause == "window_shift"]


def test_hysteresis_breaks_the_prefix_exactly_once_per_step() -> None:
    # max 20, cut to 10: the window may start only every 10 messages = every 5 turns of 2 messages.
    shifts = shift_turns({"window": {"max_messages": 20}})
    assert shifts == [11, 16, 21, 26, 31, 36]
    for request in replay(answered_chat(40).session(), {"window": {"max_messages": 20}}):
        assert request.window.messages <= 20
        if request.window.dropped:
            assert request.window.messages > 10


def test_sliding_window_breaks_the_prefix_on_every_turn_past_the_limit() -> None:
    # Negative control: cut_to = max - 1 is upstream's sliding window; every turn past the limit shifts.
    assert shift_turns({"window": {"max_messages": 20, "cut_to": 19}}) == list(range(11, 41))


def test_explicit_cut_to_sets_the_step() -> None:
    assert shift_turns({"window": {"max_messages": 20, "cut_to": 4}}, turns=30) == [11, 19, 27]


def test_a_turn_replayed_alone_sees_the_window_of_the_full_replay() -> None:
    from builders import assembler

    session = answered_chat(30).session()
    full = list(assembler({"window": {"max_messages": 12}}).replay(session))
    alone = assembler({"window": {"max_messages": 12}})
    for request, position in zip(full, range(1, len(session.messages), 2), strict=True):
        single = alone.assemble(session, position, session.messages[position].timestamp, turn=request.turn)
        assert single.window == request.window and single.request == request.request


def test_tail_start_grid() -> None:
    from zhin_cli.pipeline.window import tail_start

    assert [tail_start(n, 4, 2) for n in range(1, 11)] == [0, 0, 0, 0, 2, 2, 4, 4, 6, 6]
    assert [tail_start(n, 4, 3) for n in range(1, 8)] == [0, 0, 0, 0, 1, 2, 3]  # sliding
    assert [tail_start(n, 4, 0) for n in range(1, 11)] == [0, 0, 0, 0, 4, 4, 4, 4, 8, 8]


def test_window_keys_are_checked(tmp_path: Path) -> None:
    import pytest

    from zhin_cli.core.errors import ConfigError
    from zhin_cli.pipeline.config import load_config

    for body, message in [
        ("window:\n  cut_to: 80\n", "window.cut_to must be from 0 to window.max_messages - 1, got 80"),
        ("window:\n  max_messages: 0\n", "window.max_messages must be at least 1"),
        ("window:\n  keep_membership_events: -1\n", "window.keep_membership_events must be 0 or more"),
        ("window:\n  max_messages: 10\n  cutto: 3\n", "unknown window keys ['cutto']"),
        ("window:\n  max_blocks: 0\n", "window.max_blocks must be at least 1"),
        ("window:\n  max_blocks: 10\n  cut_blocks_to: 10\n", "window.cut_blocks_to must be from 0 to window.max_blocks - 1"),
        ("window:\n  cut_blocks_to: 1\n", "window.cut_blocks_to must be from 0 to window.max_blocks - 1"),
    ]:
        (tmp_path / "zhin.yaml").write_text(body, encoding="utf-8")
        with pytest.raises(ConfigError) as caught:
            load_config(tmp_path / "zhin.yaml")
        assert message in str(caught.value) and "zhin.yaml:" in str(caught.value)


def busy_chat(turns: int) -> History:
    """A group where 1 to 4 members speak before each bot reply, and every third reply runs a tool loop."""
    h = History()
    t = T0
    for i in range(turns):
        for k in range(1 + (i * 7) % 4):
            t += SEC
            h.user(t, f"1000{k}", f"m{i}.{k}")
        if i % 3 == 2:
            h.assistant(t + 1, "", calls=[(f"call_{i}", "search")])
            h.result(t + 2, f"call_{i}")
            t += 2
        t += SEC
        h.assistant(t, f"r{i}")
    return h


def test_block_hysteresis_breaks_the_prefix_exactly_once_per_n_turns() -> None:
    # max_blocks 10 → cut to the newest 5 blocks: the window moves once every 5 blocks (rounds), whatever the
    # number of messages or tool calls in a round.
    from zhin_cli.cache.diff import diff_turns

    session = busy_chat(30).session()
    config = {"window": {"max_messages": None, "max_blocks": 10}}
    requests = list(assembler(config).replay(session))
    result = diff_turns(session.session_id, iter(requests))
    assert {p.cause for p in result.pairs} <= {"append", "tail", "window_shift"}
    shifted_blocks = []
    for pair in result.pairs:
        if pair.cause == "window_shift":
            shifted_blocks.append(requests[pair.to_turn - 1].window.dropped)
    # the window starts only at the first message of block 5, 10, 15 … after the first cut
    starts = [0] + [i + 1 for i, m in enumerate(session.messages) if type(m).__name__ == "AssistantMessage" and m.text]
    assert shifted_blocks == [starts[5 * k] for k in range(1, len(shifted_blocks) + 1)]
    # requests of a tool loop belong to the block they continue: 30 rounds + 10 tool continuations = 40 turns
    assert len(requests) == 40
    final_turns = [pair.to_turn for pair in result.pairs if pair.cause == "window_shift"]
    rounds = [sum(1 for r in requests[:turn] if r.request["messages"][-1]["role"] != "tool") for turn in final_turns]
    assert [b - a for a, b in zip(rounds, rounds[1:], strict=False)] == [5] * (len(rounds) - 1)


def test_without_a_block_limit_the_message_limit_moves_the_window_more_often() -> None:
    # Negative control: the same chat with the message limit alone shifts on a message grid, not every 5 rounds.
    from zhin_cli.cache.diff import diff_turns

    session = busy_chat(30).session()
    requests = list(assembler({"window": {"max_messages": 20}}).replay(session))
    result = diff_turns(session.session_id, iter(requests))
    assert sum(p.cause == "window_shift" for p in result.pairs) > 6


def test_the_later_of_the_two_grids_wins() -> None:
    session = busy_chat(30).session()
    both = replay(session, {"window": {"max_messages": 20, "max_blocks": 40}})
    messages_only = replay(session, {"window": {"max_messages": 20}})
    assert [r.window for r in both] == [r.window for r in messages_only]  # 40 blocks never bind before 20 messages
