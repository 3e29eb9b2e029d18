"""The visible window: compaction summary, tail limit, join/leave after compaction (criterion 3)."""

from __future__ import annotations

from builders import MIN, SEC, T0, History, contents, replay, roles


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
    assert request.window["summary_anchor"] == 5 and request.window["carried_events"] == 2


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
    assert request.window["summary_anchor"] is None


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
    assert request.verdict.ok and request.window["dropped"] == 3
